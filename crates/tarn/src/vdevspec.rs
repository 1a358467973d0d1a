//! The vdev specification of `zpool create` and `zpool add`: grammar and
//! sanity checks.
//!
//! `zpool create tank mirror a b mirror c d log e` is a little language:
//! plain devices are single-disk vdevs, `mirror`/`raidz[1-3]` open a group
//! that runs until the next keyword, and `log` switches every vdev after it
//! to the intent-log class (`log mirror e f` is a mirrored log). The parser
//! turns the words into [`VdevGroup`]s, one per top-level vdev.
//!
//! Two layers, deliberately apart:
//! - [`parse_vdev_spec`] is the grammar; it runs in the CLI (it needs the
//!   working directory to make relative paths absolute, through a resolver
//!   the caller passes, so tests need no files).
//! - [`validate_layout`] is pure and runs in the daemon on every create
//!   request, whoever sent it: group sizes, absolute paths, no device named
//!   twice, and OpenZFS's replication-level check — top-level data vdevs must
//!   offer the same redundancy (all 2-way mirrors, all 5-wide raidz2…), since
//!   a pool is only as redundant as its weakest vdev. `-f` overrides the
//!   replication check, never the structural ones.
//! - `zpool add` runs the structural checks in the daemon
//!   ([`validate_add_layout`]) and the replication check against the
//!   pool's current layout in the engine ([`check_add_replication`]).

use std::collections::HashSet;
use std::fmt;

use crate::api::{VdevGroup, VdevKind};

/// A bad vdev specification; `Display` is the message zpool(8) prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecError {
    /// The spec is malformed (reason given).
    Invalid(String),
    /// A word is neither a keyword nor a device that exists.
    Unresolved(String),
    /// Top-level vdevs differ in redundancy; `-f` overrides.
    Replication(String),
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Invalid(why) => write!(f, "invalid vdev specification: {why}"),
            SpecError::Unresolved(word) => write!(
                f,
                "cannot open '{word}': no such device in /dev\n\
                 must be a full path or shorthand device name"
            ),
            SpecError::Replication(why) => write!(
                f,
                "invalid vdev specification\n\
                 use '-f' to override the following errors:\n{why}"
            ),
        }
    }
}

impl std::error::Error for SpecError {}

/// A keyword of the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keyword {
    Group(VdevKind),
    Log,
    Spare,
    Unsupported,
}

fn keyword(word: &str) -> Option<Keyword> {
    match word {
        "mirror" => Some(Keyword::Group(VdevKind::Mirror)),
        "raidz" | "raidz1" => Some(Keyword::Group(VdevKind::Raidz1)),
        "raidz2" => Some(Keyword::Group(VdevKind::Raidz2)),
        "raidz3" => Some(Keyword::Group(VdevKind::Raidz3)),
        "log" => Some(Keyword::Log),
        "spare" => Some(Keyword::Spare),
        "cache" | "special" | "dedup" => Some(Keyword::Unsupported),
        _ if word.starts_with("draid") => Some(Keyword::Unsupported),
        _ if word.starts_with("raidz") => Some(Keyword::Unsupported),
        _ => None,
    }
}

/// Fewest devices a group of this kind may have.
pub fn min_devices(kind: VdevKind) -> usize {
    match kind {
        VdevKind::Disk | VdevKind::Log | VdevKind::Spare => 1,
        VdevKind::Mirror => 2,
        VdevKind::Raidz1 | VdevKind::Raidz2 | VdevKind::Raidz3 => {
            kind.raidz_parity().unwrap_or(1) + 1
        }
    }
}

/// Parse the vdev words of `zpool create`. `resolve` turns a device word into
/// an absolute path (or says it names nothing).
pub fn parse_vdev_spec(
    words: &[String],
    resolve: &dyn Fn(&str) -> Result<String, SpecError>,
) -> Result<Vec<VdevGroup>, SpecError> {
    let mut groups = Vec::new();
    let mut in_log = false;
    let mut in_spare = false;
    let mut saw_log = false;
    let mut i = 0;
    while i < words.len() {
        let word = words[i].as_str();
        i += 1;
        match keyword(word) {
            Some(Keyword::Log) if saw_log => {
                return Err(SpecError::Invalid(
                    "'log' can be specified only once".into(),
                ))
            }
            Some(Keyword::Log) => {
                (in_log, in_spare, saw_log) = (true, false, true);
            }
            Some(Keyword::Spare)
                if in_spare || groups.iter().any(|g: &VdevGroup| g.kind == VdevKind::Spare) =>
            {
                return Err(SpecError::Invalid(
                    "'spare' can be specified only once".into(),
                ))
            }
            Some(Keyword::Spare) => (in_log, in_spare) = (false, true),
            Some(Keyword::Group(_)) if in_spare => {
                return Err(SpecError::Invalid(format!(
                    "unsupported 'spare' device: {} (spares are single devices)",
                    word.trim_end_matches(char::is_numeric)
                )))
            }
            Some(Keyword::Unsupported) => {
                return Err(SpecError::Invalid(format!(
                    "'{word}' vdevs are not supported"
                )))
            }
            Some(Keyword::Group(kind)) => {
                let start = i;
                while i < words.len() && keyword(&words[i]).is_none() {
                    i += 1;
                }
                let devices = words[start..i]
                    .iter()
                    .map(|w| resolve(w))
                    .collect::<Result<Vec<_>, _>>()?;
                if devices.len() < min_devices(kind) {
                    return Err(SpecError::Invalid(format!(
                        "{word} requires at least {} devices",
                        min_devices(kind)
                    )));
                }
                if in_log && kind != VdevKind::Mirror {
                    // OpenZFS names the type without its parity.
                    return Err(SpecError::Invalid(format!(
                        "unsupported 'log' device: {}",
                        word.trim_end_matches(char::is_numeric)
                    )));
                }
                let kind = if in_log { VdevKind::Log } else { kind };
                groups.push(VdevGroup { kind, devices });
            }
            None => {
                let kind = if in_log {
                    VdevKind::Log
                } else if in_spare {
                    VdevKind::Spare
                } else {
                    VdevKind::Disk
                };
                groups.push(VdevGroup {
                    kind,
                    devices: vec![resolve(word)?],
                });
            }
        }
    }
    if saw_log && !groups.iter().any(|g| g.kind == VdevKind::Log) {
        return Err(SpecError::Invalid("log requires at least 1 device".into()));
    }
    if in_spare && !groups.iter().any(|g| g.kind == VdevKind::Spare) {
        return Err(SpecError::Invalid(
            "spare requires at least 1 device".into(),
        ));
    }
    Ok(groups)
}

/// Check a create request's layout. Structural errors always fail; the
/// replication-level check fails unless `force`.
pub fn validate_layout(groups: &[VdevGroup], force: bool) -> Result<(), SpecError> {
    if !groups.iter().any(|g| g.is_data()) {
        return Err(SpecError::Invalid(
            "at least one toplevel vdev must be specified".into(),
        ));
    }
    check_groups(groups)?;
    if force {
        return Ok(());
    }
    check_replication(groups)
}

/// Check an add request's layout: at least one vdev (a log alone is fine),
/// each well formed, no device named twice.
pub fn validate_add_layout(groups: &[VdevGroup]) -> Result<(), SpecError> {
    if groups.is_empty() {
        return Err(SpecError::Invalid(
            "at least one toplevel vdev must be specified".into(),
        ));
    }
    check_groups(groups)
}

fn check_groups(groups: &[VdevGroup]) -> Result<(), SpecError> {
    let mut seen = HashSet::new();
    for group in groups {
        check_group(group)?;
        for device in &group.devices {
            if !seen.insert(device.as_str()) {
                return Err(SpecError::Invalid(format!(
                    "device '{device}' is specified more than once"
                )));
            }
        }
    }
    Ok(())
}

fn check_group(group: &VdevGroup) -> Result<(), SpecError> {
    let n = group.devices.len();
    if matches!(group.kind, VdevKind::Disk | VdevKind::Spare) && n != 1 {
        return Err(SpecError::Invalid(format!(
            "a {} vdev has exactly one device, not {n}",
            group.kind.as_str()
        )));
    }
    if n < min_devices(group.kind) {
        return Err(SpecError::Invalid(format!(
            "{} requires at least {} devices",
            group.kind.as_str(),
            min_devices(group.kind)
        )));
    }
    for device in &group.devices {
        if !device.starts_with('/') {
            return Err(SpecError::Invalid(format!(
                "device path '{device}' must be absolute"
            )));
        }
        if device.contains('\0') || device.contains('\n') {
            return Err(SpecError::Invalid(
                "device path contains a control character".into(),
            ));
        }
    }
    Ok(())
}

/// The redundancy one top-level data vdev offers, as OpenZFS compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Replication {
    /// `disk`, `mirror` or `raidz`.
    kind: &'static str,
    parity: usize,
    width: usize,
}

fn replication(group: &VdevGroup) -> Replication {
    let width = group.devices.len();
    match group.kind {
        VdevKind::Mirror => Replication {
            kind: "mirror",
            parity: width.saturating_sub(1),
            width,
        },
        VdevKind::Raidz1 | VdevKind::Raidz2 | VdevKind::Raidz3 => Replication {
            kind: "raidz",
            parity: group.kind.raidz_parity().unwrap_or(1),
            width,
        },
        VdevKind::Disk | VdevKind::Log | VdevKind::Spare => Replication {
            kind: "disk",
            parity: 0,
            width: 1,
        },
    }
}

/// OpenZFS's replication-level check over the data vdevs (logs are not
/// compared: they hold no data once the log is replayed).
pub fn check_replication(groups: &[VdevGroup]) -> Result<(), SpecError> {
    data_replication(groups).map(|_| ())
}

/// The one replication level of the data vdevs of `groups` (`None`: only
/// logs), or the create-style error naming the mismatch.
fn data_replication(groups: &[VdevGroup]) -> Result<Option<Replication>, SpecError> {
    let mut data = groups.iter().filter(|g| g.is_data()).map(replication);
    let Some(first) = data.next() else {
        return Ok(None);
    };
    for other in data {
        let why = if other.kind != first.kind {
            format!("both {} and {} vdevs are present", first.kind, other.kind)
        } else if other.parity != first.parity && first.kind == "raidz" {
            format!(
                "both {} and {} device parity {} vdevs are present",
                first.parity, other.parity, first.kind
            )
        } else if other.width != first.width {
            format!(
                "both {}-way and {}-way {} vdevs are present",
                first.width, other.width, first.kind
            )
        } else {
            continue;
        };
        return Err(SpecError::Replication(format!(
            "mismatched replication level: {why}"
        )));
    }
    Ok(Some(first))
}

/// OpenZFS's replication check of `zpool add`: the new data vdevs must
/// agree among themselves and with the pool's (`current`, as groups). A
/// pool whose own vdevs disagree (made with `-f`) is not compared, nor is
/// an add of logs only. A raidz and a mirror agree when the mirror has
/// one more side than the raidz has parity (OpenZFS's `is_raidz_mirror`).
pub fn check_add_replication(current: &[VdevGroup], new: &[VdevGroup]) -> Result<(), SpecError> {
    let Some(new) = data_replication(new)? else {
        return Ok(());
    };
    let Ok(Some(cur)) = data_replication(current) else {
        return Ok(());
    };
    let mismatch = |why: String| {
        Err(SpecError::Replication(format!(
            "mismatched replication level: {why}"
        )))
    };
    let raidz_mirror = match (cur.kind, new.kind) {
        ("raidz", "mirror") => Some((cur, new)),
        ("mirror", "raidz") => Some((new, cur)),
        _ => None,
    };
    if let Some((raidz, mirror)) = raidz_mirror {
        if raidz.parity != mirror.width - 1 {
            return mismatch(format!(
                "pool and new vdev with different redundancy, raidz and mirror vdevs, \
                 {} vs. {} ({}-way)",
                raidz.parity,
                mirror.width - 1,
                mirror.width
            ));
        }
        return Ok(());
    }
    if cur.kind != new.kind {
        return mismatch(format!(
            "pool uses {} and new vdev is {}",
            cur.kind, new.kind
        ));
    }
    // A mirror's redundancy is its width (OpenZFS gives mirrors parity 0).
    if cur.kind == "raidz" && cur.parity != new.parity {
        return mismatch(format!(
            "pool uses {} device parity and new vdev uses {}",
            cur.parity, new.parity
        ));
    }
    if cur.width != new.width {
        return mismatch(format!(
            "pool uses {}-way {} and new vdev uses {}-way {}",
            cur.width, cur.kind, new.width, new.kind
        ));
    }
    Ok(())
}

/// The CLI's resolver: a word with a `/` is a path (made absolute against
/// the working directory); a bare word is a file in the working directory if
/// one exists, else a device under `/dev`.
pub fn resolve_device(word: &str) -> Result<String, SpecError> {
    use std::path::Path;
    let absolute = |p: &Path| {
        std::path::absolute(p)
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|_| SpecError::Unresolved(word.to_string()))
    };
    if word.is_empty() {
        return Err(SpecError::Unresolved(word.to_string()));
    }
    if word.contains('/') {
        return absolute(Path::new(word));
    }
    if Path::new(word).exists() {
        return absolute(Path::new(word));
    }
    let dev = Path::new("/dev").join(word);
    if dev.exists() {
        return Ok(dev.to_string_lossy().into_owned());
    }
    Err(SpecError::Unresolved(word.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    /// Resolve `x` to `/d/x`; the word `missing` names nothing.
    fn fake(word: &str) -> Result<String, SpecError> {
        if word == "missing" {
            Err(SpecError::Unresolved(word.into()))
        } else {
            Ok(format!("/d/{word}"))
        }
    }

    fn parse(s: &str) -> Result<Vec<VdevGroup>, SpecError> {
        parse_vdev_spec(&words(s), &fake)
    }

    fn g(kind: VdevKind, devs: &[&str]) -> VdevGroup {
        VdevGroup {
            kind,
            devices: devs.iter().map(|d| format!("/d/{d}")).collect(),
        }
    }

    #[test]
    fn parses_plain_mirror_raidz_and_log() {
        use VdevKind::*;
        assert_eq!(
            parse("a b").unwrap(),
            vec![g(Disk, &["a"]), g(Disk, &["b"])]
        );
        assert_eq!(
            parse("mirror a b mirror c d").unwrap(),
            vec![g(Mirror, &["a", "b"]), g(Mirror, &["c", "d"])]
        );
        assert_eq!(
            parse("raidz a b c raidz2 d e f").unwrap(),
            vec![g(Raidz1, &["a", "b", "c"]), g(Raidz2, &["d", "e", "f"])]
        );
        assert_eq!(
            parse("mirror a b log c d").unwrap(),
            vec![g(Mirror, &["a", "b"]), g(Log, &["c"]), g(Log, &["d"])]
        );
        assert_eq!(
            parse("a log mirror c d").unwrap(),
            vec![g(Disk, &["a"]), g(Log, &["c", "d"])]
        );
        assert_eq!(
            parse("mirror a b spare c d log e").unwrap(),
            vec![
                g(Mirror, &["a", "b"]),
                g(Spare, &["c"]),
                g(Spare, &["d"]),
                g(Log, &["e"])
            ]
        );
    }

    #[test]
    fn rejects_short_groups_and_unknown_words() {
        let msg = |s: &str| parse(s).unwrap_err().to_string();
        assert_eq!(
            msg("mirror a"),
            "invalid vdev specification: mirror requires at least 2 devices"
        );
        assert_eq!(
            msg("raidz2 a b"),
            "invalid vdev specification: raidz2 requires at least 3 devices"
        );
        assert_eq!(
            msg("raidz3 a b c"),
            "invalid vdev specification: raidz3 requires at least 4 devices"
        );
        assert!(msg("raidz4 a b c d e").contains("'raidz4' vdevs are not supported"));
        assert!(msg("cache a").contains("not supported"));
        assert!(msg("a spare").contains("spare requires at least 1 device"));
        assert!(msg("a spare mirror b c").contains("spares are single devices"));
        assert!(msg("a spare b spare c").contains("only once"));
        assert!(msg("a log").contains("log requires at least 1 device"));
        assert!(msg("a log raidz b c").ends_with("unsupported 'log' device: raidz"));
        assert!(msg("a log raidz2 b c d").ends_with("unsupported 'log' device: raidz"));
        assert!(msg("mirror a missing").starts_with("cannot open 'missing'"));
    }

    #[test]
    fn replication_check_matches_openzfs() {
        let check = |s: &str| validate_layout(&parse(s).unwrap(), false);
        assert!(check("a b c").is_ok());
        assert!(check("mirror a b mirror c d log e").is_ok());
        assert!(check("raidz2 a b c d raidz2 e f g h").is_ok());
        let msg = |s: &str| check(s).unwrap_err().to_string();
        assert_eq!(
            msg("mirror a b c raidz1 d e f"),
            "invalid vdev specification\nuse '-f' to override the following errors:\n\
             mismatched replication level: both mirror and raidz vdevs are present"
        );
        assert!(msg("a mirror b c").ends_with("both disk and mirror vdevs are present"));
        assert!(msg("mirror a b mirror c d e")
            .ends_with("both 2-way and 3-way mirror vdevs are present"));
        assert!(msg("raidz1 a b c raidz2 d e f")
            .ends_with("both 1 and 2 device parity raidz vdevs are present"));
        assert!(msg("raidz1 a b c raidz1 d e f g")
            .ends_with("both 3-way and 4-way raidz vdevs are present"));
        // -f overrides the replication check only.
        assert!(validate_layout(&parse("mirror a b c raidz1 d e f").unwrap(), true).is_ok());
    }

    #[test]
    fn add_replication_matches_openzfs() {
        let check = |pool: &str, add: &str| {
            check_add_replication(&parse(pool).unwrap(), &parse(add).unwrap())
        };
        let msg = |pool: &str, add: &str| check(pool, add).unwrap_err().to_string();
        assert!(check("mirror a b", "mirror c d").is_ok());
        assert!(
            check("a", "log mirror c d").is_ok(),
            "logs are not compared"
        );
        assert!(
            check("a mirror b c", "d").is_ok(),
            "an inconsistent pool is not"
        );
        assert!(
            check("raidz1 a b c", "mirror d e").is_ok(),
            "same redundancy"
        );
        assert_eq!(
            msg("a", "mirror c d"),
            "invalid vdev specification\nuse '-f' to override the following errors:\n\
             mismatched replication level: pool uses disk and new vdev is mirror"
        );
        assert!(msg("mirror a b", "mirror c d e")
            .ends_with("pool uses 2-way mirror and new vdev uses 3-way mirror"));
        assert!(msg("raidz1 a b c", "raidz2 d e f")
            .ends_with("pool uses 1 device parity and new vdev uses 2"));
        assert!(msg("raidz2 a b c", "mirror d e").ends_with(
            "pool and new vdev with different redundancy, raidz and mirror vdevs, 2 vs. 1 (2-way)"
        ));
        // The new vdevs must agree among themselves too.
        assert!(msg("mirror a b", "mirror c d mirror e f g")
            .ends_with("both 2-way and 3-way mirror vdevs are present"));
        assert!(validate_add_layout(&parse("log c").unwrap()).is_ok());
        assert!(validate_add_layout(&[]).is_err());
    }

    #[test]
    fn duplicate_devices_are_refused_even_with_force() {
        for (spec, dup) in [
            ("a a", "/d/a"),
            ("mirror a b mirror b c", "/d/b"),
            ("mirror a b log a", "/d/a"),
        ] {
            let err = validate_layout(&parse(spec).unwrap(), true).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("invalid vdev specification: device '{dup}' is specified more than once"),
            );
        }
    }

    #[test]
    fn daemon_side_checks_catch_what_a_hand_written_request_gets_wrong() {
        let bad = |groups: Vec<VdevGroup>| validate_layout(&groups, true).unwrap_err();
        assert!(bad(vec![])
            .to_string()
            .contains("at least one toplevel vdev"));
        assert!(bad(vec![g(VdevKind::Log, &["a"])])
            .to_string()
            .contains("at least one toplevel vdev"));
        assert!(bad(vec![g(VdevKind::Disk, &["a", "b"])])
            .to_string()
            .contains("exactly one device"));
        assert!(bad(vec![g(VdevKind::Raidz3, &["a", "b", "c"])])
            .to_string()
            .contains("raidz3 requires at least 4 devices"));
        let relative = VdevGroup {
            kind: VdevKind::Disk,
            devices: vec!["a.img".into()],
        };
        assert!(bad(vec![relative]).to_string().contains("must be absolute"));
    }

    #[test]
    fn resolver_makes_relative_paths_absolute() {
        let cwd = std::env::current_dir().unwrap();
        let got = resolve_device("./x/a.img").unwrap();
        assert_eq!(got, cwd.join("x/a.img").to_string_lossy());
        assert_eq!(resolve_device("/tmp/a.img").unwrap(), "/tmp/a.img");
        assert!(resolve_device("surely-not-a-device-name").is_err());
    }
}
