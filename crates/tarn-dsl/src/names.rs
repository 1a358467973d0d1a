//! Pool, dataset, snapshot and bookmark names, and mountpoint paths: what
//! is a valid name, and how a name splits into pool, parent and suffix.
//!
//! The rules are OpenZFS's (`module/zcommon/zfs_namecheck.c` and
//! `zpool_name_valid`/`zfs_validate_name` in libzfs), so a script written
//! for OpenZFS gets the same answer and the same message here:
//!
//! * A component is one or more of `A–Z a–z 0–9 _ - . :` and space; `.` and
//!   `..` alone are not components.
//! * A dataset name is `pool/child/grandchild`, at most 255 bytes
//!   (`ZFS_MAX_DATASET_NAME_LEN` = 256 with the NUL), nested less than
//!   [`MAX_DATASET_NESTING`] levels. A snapshot adds `@name`, a bookmark
//!   `#name`; only one of either.
//! * A pool name is one component that starts with a letter, at most 239
//!   bytes (room for `pool/$ORIGIN@$ORIGIN`), and not a vdev keyword:
//!   `mirror`, `raidz`, `draid`, `spare` (and anything starting with them),
//!   or `log`.
//! * A mountpoint is an absolute path, `legacy` or `none`.
//!
//! Names are checked as bytes: anything outside ASCII is an invalid
//! character. Validation never panics; every failure is a [`NameError`]
//! whose message is OpenZFS's.

use thiserror::Error;

/// `ZFS_MAX_DATASET_NAME_LEN` less the NUL: the longest name in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest pool name: 256 − 2 − 2 × len("$ORIGIN") − 1 for the NUL.
pub const MAX_POOL_NAME_BYTES: usize = 239;
/// `zfs_max_dataset_nesting`: a name may hold at most 49 slashes.
pub const MAX_DATASET_NESTING: usize = 50;
/// `PATH_MAX` less the NUL: the longest mountpoint in bytes.
pub const MAX_MOUNTPOINT_BYTES: usize = 4095;

/// Why a name was refused. The messages are libzfs's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NameError {
    #[error("name is too long")]
    TooLong,
    #[error("invalid character '{0}' in name")]
    InvalidChar(char),
    #[error("invalid character '{0}' in pool name")]
    InvalidPoolChar(char),
    #[error("name must begin with a letter")]
    NoLetter,
    #[error("name is reserved")]
    Reserved,
    #[error("leading slash in name")]
    LeadingSlash,
    #[error("trailing slash in name")]
    TrailingSlash,
    #[error("empty component in name")]
    EmptyComponent,
    #[error("multiple '@' and/or '#' delimiters in name")]
    MultipleDelimiters,
    #[error("self reference, '.' is found in name")]
    SelfRef,
    #[error("parent reference, '..' is found in name")]
    ParentRef,
    #[error("maximum name nesting depth exceeded")]
    TooDeep,
    #[error("snapshot delimiter '@' is not expected here")]
    UnexpectedAt,
    #[error("bookmark delimiter '#' is not expected here")]
    UnexpectedPound,
    #[error("missing '@' delimiter in snapshot name")]
    MissingAt,
    #[error("missing '#' delimiter in bookmark name")]
    MissingPound,
    #[error("must be an absolute path, 'none', or 'legacy'")]
    MountpointNotAbsolute,
    #[error("component of '{0}' is too long")]
    MountpointComponentTooLong(String),
}

/// What a full name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityKind<'a> {
    /// A filesystem or volume: no suffix.
    Dataset,
    /// `dataset@snapshot`; holds the part after `@`.
    Snapshot(&'a str),
    /// `dataset#bookmark`; holds the part after `#`.
    Bookmark(&'a str),
}

/// A validated name split at its `@` or `#`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityName<'a> {
    /// The dataset part, `pool/a/b`.
    pub dataset: &'a str,
    pub kind: EntityKind<'a>,
}

/// `valid_char`: the characters allowed in any component.
fn valid_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b':' | b' ')
}

/// The first byte of `s` that is not a valid character, as a char (the
/// whole char for non-ASCII text, so the message shows what was typed).
fn first_invalid(s: &str) -> Option<char> {
    s.chars().find(|&c| !c.is_ascii() || !valid_char(c as u8))
}

/// Checks a name for `zpool create` or `zpool import`.
pub fn validate_pool_name(name: &str) -> Result<(), NameError> {
    if name.len() > MAX_POOL_NAME_BYTES {
        return Err(NameError::TooLong);
    }
    if let Some(c) = first_invalid(name) {
        return Err(NameError::InvalidPoolChar(c));
    }
    if !name.as_bytes().first().is_some_and(u8::is_ascii_alphabetic) {
        return Err(NameError::NoLetter);
    }
    let reserved_prefix = ["mirror", "raidz", "draid", "spare"];
    if reserved_prefix.iter().any(|p| name.starts_with(p)) || name == "log" {
        return Err(NameError::Reserved);
    }
    Ok(())
}

/// Checks one component (between slashes, or after `@`/`#`).
fn check_component(c: &str, is_last: bool) -> Result<(), NameError> {
    if let Some(bad) = first_invalid(c) {
        return Err(NameError::InvalidChar(bad));
    }
    match c {
        "" if is_last => Err(NameError::TrailingSlash),
        "" => Err(NameError::EmptyComponent),
        "." => Err(NameError::SelfRef),
        ".." => Err(NameError::ParentRef),
        _ => Ok(()),
    }
}

/// `entity_namecheck`: validates a dataset, snapshot or bookmark name and
/// splits it. User-supplied names never contain `%` (OpenZFS reserves it
/// for temporary clones), so it is refused here.
pub fn parse_entity_name(name: &str) -> Result<EntityName<'_>, NameError> {
    if name.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong);
    }
    if name.starts_with('/') {
        return Err(NameError::LeadingSlash);
    }
    if name.is_empty() {
        return Err(NameError::EmptyComponent);
    }
    let split = name.find(['@', '#']);
    let (dataset, suffix) = match split {
        Some(i) => (&name[..i], Some((name.as_bytes()[i], &name[i + 1..]))),
        None => (name, None),
    };
    let components: Vec<&str> = dataset.split('/').collect();
    for (i, c) in components.iter().enumerate() {
        let is_last = i + 1 == components.len() && i > 0 && suffix.is_none();
        check_component(c, is_last)?;
    }
    if depth(name) >= MAX_DATASET_NESTING {
        return Err(NameError::TooDeep);
    }
    let kind = match suffix {
        None => EntityKind::Dataset,
        Some((_, rest)) if rest.contains(['@', '#']) => return Err(NameError::MultipleDelimiters),
        Some((_, rest)) if rest.contains('/') => return Err(NameError::TrailingSlash),
        Some((delim, rest)) => {
            check_component(rest, false)?;
            if delim == b'@' {
                EntityKind::Snapshot(rest)
            } else {
                EntityKind::Bookmark(rest)
            }
        }
    };
    Ok(EntityName { dataset, kind })
}

/// Checks a filesystem or volume name (`zfs create`): no `@` or `#`.
pub fn validate_dataset_name(name: &str) -> Result<(), NameError> {
    if name.contains('@') {
        return Err(NameError::UnexpectedAt);
    }
    if name.contains('#') {
        return Err(NameError::UnexpectedPound);
    }
    parse_entity_name(name).map(|_| ())
}

/// Checks a full snapshot name, `dataset@snap` (`zfs snapshot`).
pub fn validate_snapshot_name(name: &str) -> Result<(), NameError> {
    if name.contains('#') {
        return Err(NameError::UnexpectedPound);
    }
    match parse_entity_name(name)?.kind {
        EntityKind::Snapshot(_) => Ok(()),
        _ => Err(NameError::MissingAt),
    }
}

/// Checks a full bookmark name, `dataset#mark` (`zfs bookmark`).
pub fn validate_bookmark_name(name: &str) -> Result<(), NameError> {
    if name.contains('@') {
        return Err(NameError::UnexpectedAt);
    }
    match parse_entity_name(name)?.kind {
        EntityKind::Bookmark(_) => Ok(()),
        _ => Err(NameError::MissingPound),
    }
}

/// Checks a `mountpoint` value: `legacy`, `none`, or an absolute path of
/// at most 4095 bytes whose components are under 256 bytes
/// (`mountpoint_namecheck`). Stricter than OpenZFS, tarn also refuses `.`
/// and `..` components and control characters, which would make the
/// mountpoint point somewhere other than it reads.
pub fn validate_mountpoint(value: &str) -> Result<(), NameError> {
    if value == "legacy" || value == "none" {
        return Ok(());
    }
    if !value.starts_with('/') {
        return Err(NameError::MountpointNotAbsolute);
    }
    if value.len() > MAX_MOUNTPOINT_BYTES {
        return Err(NameError::TooLong);
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(NameError::InvalidChar(c));
    }
    for component in value.split('/') {
        match component {
            "." => return Err(NameError::SelfRef),
            ".." => return Err(NameError::ParentRef),
            c if c.len() > MAX_NAME_BYTES => {
                return Err(NameError::MountpointComponentTooLong(value.to_string()))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The dataset part of a name: everything before `@` or `#`.
pub fn dataset_part(name: &str) -> &str {
    name.find(['@', '#']).map_or(name, |i| &name[..i])
}

/// The parent of a name: a snapshot's or bookmark's dataset, or a
/// dataset's parent dataset. `None` for a pool's root dataset.
pub fn parent(name: &str) -> Option<&str> {
    let ds = dataset_part(name);
    if ds.len() != name.len() {
        return Some(ds);
    }
    name.rfind('/').map(|i| &name[..i])
}

/// The pool a name belongs to: its first component.
pub fn pool_of(name: &str) -> &str {
    let ds = dataset_part(name);
    ds.find('/').map_or(ds, |i| &ds[..i])
}

/// `get_dataset_depth`: slashes before any `@` or `#` (0 for the pool).
pub fn depth(name: &str) -> usize {
    dataset_part(name).bytes().filter(|&b| b == b'/').count()
}

/// A dataset a receive works in (`fs/%recv`): never listed, mounted or
/// named by a user (`%` is not allowed in names they give).
pub fn is_hidden(name: &str) -> bool {
    name.contains('%')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_names() {
        for ok in [
            "tank",
            "Tank",
            "t",
            "a.b-c_d:e f",
            "c0t0d0",
            "logs",
            "cache",
            "z9",
        ] {
            assert_eq!(validate_pool_name(ok), Ok(()), "{ok}");
        }
        let bad = [
            ("", NameError::NoLetter),
            ("1tank", NameError::NoLetter),
            ("_tank", NameError::NoLetter),
            ("ta/nk", NameError::InvalidPoolChar('/')),
            ("tank@x", NameError::InvalidPoolChar('@')),
            ("tänk", NameError::InvalidPoolChar('ä')),
            ("mirror", NameError::Reserved),
            ("mirror2", NameError::Reserved),
            ("raidz3", NameError::Reserved),
            ("draid", NameError::Reserved),
            ("spares", NameError::Reserved),
            ("log", NameError::Reserved),
        ];
        for (name, err) in bad {
            assert_eq!(validate_pool_name(name), Err(err), "{name:?}");
        }
        assert_eq!(validate_pool_name(&"a".repeat(239)), Ok(()));
        assert_eq!(
            validate_pool_name(&"a".repeat(240)),
            Err(NameError::TooLong)
        );
    }

    #[test]
    fn dataset_names() {
        for ok in [
            "tank",
            "tank/a",
            "tank/a b/c:d.e_f-g",
            "tank/.a",
            "tank/...",
        ] {
            assert_eq!(validate_dataset_name(ok), Ok(()), "{ok}");
        }
        let bad = [
            ("", NameError::EmptyComponent),
            ("/tank", NameError::LeadingSlash),
            ("tank/", NameError::TrailingSlash),
            ("tank//a", NameError::EmptyComponent),
            ("tank/./a", NameError::SelfRef),
            ("tank/..", NameError::ParentRef),
            ("tank/a*b", NameError::InvalidChar('*')),
            ("tank/a%b", NameError::InvalidChar('%')),
            ("tank/a@s", NameError::UnexpectedAt),
            ("tank/a#b", NameError::UnexpectedPound),
        ];
        for (name, err) in bad {
            assert_eq!(validate_dataset_name(name), Err(err), "{name:?}");
        }
        assert_eq!(
            NameError::InvalidChar('*').to_string(),
            "invalid character '*' in name"
        );
    }

    #[test]
    fn length_limits() {
        let max = format!("tank/{}", "a".repeat(MAX_NAME_BYTES - 5));
        assert_eq!(max.len(), 255);
        assert_eq!(validate_dataset_name(&max), Ok(()));
        assert_eq!(
            validate_dataset_name(&format!("{max}b")),
            Err(NameError::TooLong)
        );
    }

    #[test]
    fn nesting_limit() {
        let at_limit = format!("tank{}", "/a".repeat(MAX_DATASET_NESTING - 1));
        assert_eq!(depth(&at_limit), 49);
        assert_eq!(validate_dataset_name(&at_limit), Ok(()));
        let too_deep = format!("{at_limit}/a");
        assert_eq!(validate_dataset_name(&too_deep), Err(NameError::TooDeep));
        assert_eq!(depth("tank"), 0);
        assert_eq!(depth("tank/a/b@x/y"), 2);
    }

    #[test]
    fn snapshots_and_bookmarks() {
        assert_eq!(
            parse_entity_name("tank/a@monday"),
            Ok(EntityName {
                dataset: "tank/a",
                kind: EntityKind::Snapshot("monday")
            })
        );
        assert_eq!(
            parse_entity_name("tank#mark"),
            Ok(EntityName {
                dataset: "tank",
                kind: EntityKind::Bookmark("mark")
            })
        );
        assert_eq!(validate_snapshot_name("tank@s"), Ok(()));
        assert_eq!(validate_snapshot_name("tank"), Err(NameError::MissingAt));
        assert_eq!(
            validate_snapshot_name("tank@a@b"),
            Err(NameError::MultipleDelimiters)
        );
        assert_eq!(
            validate_snapshot_name("tank@"),
            Err(NameError::EmptyComponent)
        );
        assert_eq!(
            validate_snapshot_name("tank@a/b"),
            Err(NameError::TrailingSlash)
        );
        assert_eq!(
            validate_snapshot_name("tank@!"),
            Err(NameError::InvalidChar('!'))
        );
        assert_eq!(
            validate_snapshot_name("tank@a#b"),
            Err(NameError::UnexpectedPound)
        );
        assert_eq!(validate_bookmark_name("tank#b"), Ok(()));
        assert_eq!(validate_bookmark_name("tank"), Err(NameError::MissingPound));
        assert_eq!(
            parse_entity_name("tank@a#b"),
            Err(NameError::MultipleDelimiters)
        );
        assert_eq!(parse_entity_name("@a"), Err(NameError::EmptyComponent));
        assert_eq!(parse_entity_name("tank/@a"), Err(NameError::EmptyComponent));
    }

    #[test]
    fn mountpoints() {
        for ok in [
            "/",
            "/tank",
            "/mnt/my data",
            "//double//slash/",
            "legacy",
            "none",
        ] {
            assert_eq!(validate_mountpoint(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            validate_mountpoint("tank"),
            Err(NameError::MountpointNotAbsolute)
        );
        assert_eq!(
            validate_mountpoint(""),
            Err(NameError::MountpointNotAbsolute)
        );
        assert_eq!(validate_mountpoint("/a/../etc"), Err(NameError::ParentRef));
        assert_eq!(validate_mountpoint("/a/./b"), Err(NameError::SelfRef));
        assert_eq!(
            validate_mountpoint("/a\nb"),
            Err(NameError::InvalidChar('\n'))
        );
        let long = format!("/{}", "a".repeat(256));
        assert!(matches!(
            validate_mountpoint(&long),
            Err(NameError::MountpointComponentTooLong(_))
        ));
        let path = "/a".repeat(MAX_MOUNTPOINT_BYTES / 2);
        assert_eq!(validate_mountpoint(&format!("{path}b")), Ok(()));
        assert_eq!(
            validate_mountpoint(&format!("{path}/bb")),
            Err(NameError::TooLong)
        );
    }

    #[test]
    fn splitting() {
        assert_eq!(parent("tank/a/b"), Some("tank/a"));
        assert_eq!(parent("tank/a"), Some("tank"));
        assert_eq!(parent("tank"), None);
        assert_eq!(parent("tank/a@s"), Some("tank/a"));
        assert_eq!(parent("tank#m"), Some("tank"));
        assert_eq!(pool_of("tank/a/b"), "tank");
        assert_eq!(pool_of("tank@s"), "tank");
        assert_eq!(pool_of("tank"), "tank");
        assert_eq!(dataset_part("tank/a@x"), "tank/a");
    }

    #[test]
    fn never_panics_on_odd_input() {
        for s in ["@", "#", "/", "//", "a@@", "a##", "é/é@é", "\0", "a/\u{7f}"] {
            let _ = parse_entity_name(s);
            let _ = validate_pool_name(s);
            let _ = validate_mountpoint(s);
            let _ = (parent(s), pool_of(s), depth(s));
        }
    }
}
