//! Pool history lines: the command text the engine records, and the time
//! stamp `zpool history` prints before it.
//!
//! OpenZFS records the command line as the user typed it. The daemon only
//! sees the request, so the text is rebuilt from it in zpool(8)/zfs(8)
//! syntax (`zpool create -o ashift=12 tank mirror /a /b`); values appear in
//! their canonical form (`recordsize=1048576` for `1M`), which reads the
//! same to a human and is exact for a script.
//!
//! Stamps are local time, `YYYY-MM-DD.HH:MM:SS`, as `zpool history` prints.

use crate::api::{PropAssign, VdevGroup, VdevKind, ZpoolAdd, ZpoolCreate, ZpoolImport};

fn push_props(out: &mut String, flag: &str, props: &[PropAssign]) {
    for (prop, value) in props {
        out.push_str(&format!(" {flag} {prop}={value}"));
    }
}

/// `zpool create …` as it would have been typed.
pub fn zpool_create(a: &ZpoolCreate) -> String {
    let mut out = String::from("zpool create");
    if a.force {
        out.push_str(" -f");
    }
    push_props(&mut out, "-o", &a.props);
    push_props(&mut out, "-O", &a.fs_props);
    if let Some(mp) = &a.mountpoint {
        out.push_str(&format!(" -m {mp}"));
    }
    out.push(' ');
    out.push_str(&a.name);
    push_vdevs(&mut out, &a.vdevs);
    out
}

/// `zpool add …` as it would have been typed.
pub fn zpool_add(a: &ZpoolAdd) -> String {
    let mut out = String::from("zpool add");
    if a.force {
        out.push_str(" -f");
    }
    out.push(' ');
    out.push_str(&a.name);
    push_vdevs(&mut out, &a.vdevs);
    out
}

/// The vdev words of a create or add.
fn push_vdevs(out: &mut String, vdevs: &[VdevGroup]) {
    let mut in_log = false;
    let mut in_spare = false;
    for g in vdevs {
        if g.kind == VdevKind::Log && !in_log {
            out.push_str(" log");
            (in_log, in_spare) = (true, false);
        }
        if g.kind == VdevKind::Spare && !in_spare {
            out.push_str(" spare");
            (in_log, in_spare) = (false, true);
        }
        match g.kind {
            VdevKind::Disk | VdevKind::Spare => {}
            VdevKind::Log if g.devices.len() == 1 => {}
            VdevKind::Log => out.push_str(" mirror"),
            kind => {
                out.push(' ');
                out.push_str(kind.as_str());
            }
        }
        for d in &g.devices {
            out.push(' ');
            out.push_str(d);
        }
    }
}

/// `zpool import …` as it would have been typed.
pub fn zpool_import(a: &ZpoolImport) -> String {
    let mut out = String::from("zpool import");
    for d in &a.dirs {
        out.push_str(&format!(" -d {d}"));
    }
    if a.force {
        out.push_str(" -f");
    }
    if a.missing_log {
        out.push_str(" -m");
    }
    out.push(' ');
    out.push_str(&a.pool);
    if let Some(new) = &a.new_name {
        out.push(' ');
        out.push_str(new);
    }
    out
}

/// `zfs set a=b c=d DATASET` / `zfs create -o a=b DATASET`.
pub fn with_props(verb: &str, flags: &str, props: &[PropAssign], name: &str) -> String {
    let mut out = String::from(verb);
    if !flags.is_empty() {
        out.push(' ');
        out.push_str(flags);
    }
    for (prop, value) in props {
        if verb == "zfs set" {
            out.push_str(&format!(" {prop}={value}"));
        } else {
            out.push_str(&format!(" -o {prop}={value}"));
        }
    }
    out.push(' ');
    out.push_str(name);
    out
}

/// A history entry as `zpool history` prints it.
pub fn entry(time_secs: u64, text: &str) -> String {
    format!("{} {text}", stamp(time_secs))
}

/// `YYYY-MM-DD.HH:MM:SS` in local time (UTC if the zone is unknown).
pub fn stamp(secs: u64) -> String {
    let t = libc::time_t::try_from(secs).unwrap_or(libc::time_t::MAX);
    // SAFETY: `tm` is a plain C struct for which all-zero bytes (and a null
    // `tm_zone`) are a valid value; localtime_r only writes into it and is
    // thread-safe (it does not use the static buffer localtime does).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if !ok {
        // SAFETY: as above; gmtime_r is equally reentrant.
        if unsafe { libc::gmtime_r(&t, &mut tm).is_null() } {
            return secs.to_string();
        }
    }
    format!(
        "{:04}-{:02}-{:02}.{:02}:{:02}:{:02}",
        i64::from(tm.tm_year) + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_is_rebuilt_in_zpool_syntax() {
        let a = ZpoolCreate {
            name: "tank".into(),
            vdevs: vec![
                VdevGroup {
                    kind: VdevKind::Mirror,
                    devices: vec!["/a".into(), "/b".into()],
                },
                VdevGroup {
                    kind: VdevKind::Log,
                    devices: vec!["/l".into()],
                },
            ],
            props: vec![("ashift".into(), "12".into())],
            fs_props: vec![("compression".into(), "zstd-3".into())],
            mountpoint: Some("/mnt/t".into()),
            force: true,
            dry_run: false,
        };
        assert_eq!(
            zpool_create(&a),
            "zpool create -f -o ashift=12 -O compression=zstd-3 -m /mnt/t tank mirror /a /b log /l"
        );
        let add = ZpoolAdd {
            name: "tank".into(),
            vdevs: vec![VdevGroup {
                kind: VdevKind::Log,
                devices: vec!["/l1".into(), "/l2".into()],
            }],
            force: false,
            dry_run: false,
        };
        assert_eq!(zpool_add(&add), "zpool add tank log mirror /l1 /l2");
        let i = ZpoolImport {
            dirs: vec!["/d".into()],
            pool: "tank".into(),
            new_name: Some("new".into()),
            force: false,
            missing_log: false,
        };
        assert_eq!(zpool_import(&i), "zpool import -d /d tank new");
        let m = ZpoolImport {
            missing_log: true,
            ..i.clone()
        };
        assert_eq!(zpool_import(&m), "zpool import -d /d -m tank new");
        let props = [("atime".to_string(), "off".to_string())];
        assert_eq!(
            with_props("zfs set", "", &props, "tank/a"),
            "zfs set atime=off tank/a"
        );
        assert_eq!(
            with_props("zfs create", "-p", &props, "tank/a"),
            "zfs create -p -o atime=off tank/a"
        );
    }

    #[test]
    fn stamp_has_the_zpool_history_shape() {
        let s = stamp(1_700_000_000);
        assert_eq!(s.len(), "2023-11-14.22:13:20".len(), "{s}");
        assert_eq!(&s[4..5], "-");
        assert_eq!(&s[10..11], ".");
        assert!(s.starts_with("2023-11-1"), "{s}");
    }
}
