//! The caller's credentials: uid and gid from the FUSE request header,
//! supplementary groups from `/proc/<pid>/status` only when needed (see
//! the crate comment on permissions).

use fuser::{Errno, Request};
use tarn_zpl::{Cred, ZplError};

use crate::convert::errno;

/// Longest `/proc/<pid>/status` read (the `Groups:` line is near the top).
const STATUS_BYTES_MAX: u64 = 16 << 10;

/// The request's uid and gid, and its supplementary groups if `groups`.
pub(crate) fn cred(req: &Request, groups: bool) -> Cred {
    let mut c = Cred::user(req.uid(), req.gid());
    if groups && !c.is_root() {
        c.groups = proc_groups(req.pid());
    }
    c
}

/// Runs `f` with the caller's uid and gid; if the layer refuses a non-root
/// caller, runs it again with the supplementary groups too. Refusals come
/// before any change, so asking twice is safe. `eager` loads the groups
/// first (for calls whose *result* depends on group membership, such as
/// keeping a set-group-ID bit).
pub(crate) fn with_cred<T>(
    req: &Request,
    eager: bool,
    f: impl Fn(&Cred) -> tarn_zpl::Result<T>,
) -> Result<T, Errno> {
    let c = cred(req, eager);
    match f(&c) {
        Err(e @ (ZplError::Access | ZplError::Perm)) if !eager && !c.is_root() => {
            let groups = proc_groups(req.pid());
            if groups.iter().all(|&g| g == c.gid) {
                return Err(errno(&e));
            }
            let c = Cred { groups, ..c };
            f(&c).map_err(|e| errno(&e))
        }
        r => r.map_err(|e| errno(&e)),
    }
}

/// The supplementary groups of thread `pid` (FUSE passes the thread id;
/// `/proc/<tid>/status` exists for every thread). Empty if it is gone.
pub(crate) fn proc_groups(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    use std::io::Read;
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    let mut s = String::new();
    if f.take(STATUS_BYTES_MAX).read_to_string(&mut s).is_err() {
        return Vec::new();
    }
    parse_groups(&s)
}

fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_line() {
        let s = "Name:\tx\nUmask:\t0022\nGroups:\t4 24 1000 \nNSpid:\t1\n";
        assert_eq!(parse_groups(s), vec![4, 24, 1000]);
        assert!(parse_groups("Groups:\t\n").is_empty());
        assert!(parse_groups("Name:\tx\n").is_empty());
    }

    #[test]
    fn own_groups_are_readable() {
        let me = std::process::id();
        // Whatever they are, reading them must not fail on a live pid.
        let _ = proc_groups(me);
        assert!(proc_groups(0).is_empty());
    }
}
