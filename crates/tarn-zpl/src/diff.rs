//! `zfs diff`: what changed in a filesystem between a snapshot and a later
//! snapshot or the dataset now (OpenZFS's `zfs_diff.c` and the DMU's
//! `diff_cb`).
//!
//! Nothing walks every file: copy-on-write rewrites every block above a
//! changed dnode, so only dnode blocks born after the older snapshot's txg
//! can hold a changed object ([`tarn_dmu::Objset::dnodes_born_after`]).
//! Each object there is compared with the older filesystem:
//! - only in the newer one (or with another generation): created (`+`);
//! - only in the older one: removed (`-`);
//! - in both with the same dnode: unchanged (a neighbour in its block
//!   changed);
//! - otherwise modified (`M`), or renamed (`R`) when its path differs.
//!
//! A directory whose entries changed is itself modified, as in OpenZFS.

use crate::error::Result;
use crate::fs::Zpl;
use crate::types::{FileType, Timespec};

/// One line of `zfs diff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffEntry {
    /// `M`, `+`, `-` or `R`.
    pub change: char,
    /// The path below the root (empty: the root itself).
    pub path: String,
    /// For `R`: the new path.
    pub new_path: Option<String>,
    pub kind: FileType,
    /// The inode's change time (the newer one's; the older one's when
    /// removed).
    pub ctime: Timespec,
}

/// What changed from `old` to `new`, two read-only views of the same
/// filesystem's history; `since` is `old`'s txg. Sorted by path.
pub fn diff(old: &Zpl, new: &Zpl, since: u64) -> Result<Vec<DiffEntry>> {
    let mut out = Vec::new();
    for (obj, dn) in new.objset().dnodes_born_after(since)? {
        let before = old.inode(obj).ok();
        let after = if dn.is_some() {
            new.inode(obj).ok()
        } else {
            None
        };
        let entry = |z: &tarn_format::zpl::ZnodePhys, zpl: &Zpl, change: char| DiffEntry {
            change,
            path: zpl.path_of(obj).unwrap_or_default(),
            new_path: None,
            kind: FileType::from_mode(z.mode),
            ctime: z.ctime,
        };
        match (before, after) {
            (None, None) => {}
            (None, Some(b)) => out.push(entry(&b, new, '+')),
            (Some(a), None) => out.push(entry(&a, old, '-')),
            (Some(a), Some(b)) if a.gen != b.gen => {
                out.push(entry(&a, old, '-'));
                out.push(entry(&b, new, '+'));
            }
            (Some(_), Some(b)) => {
                if old.objset().dnode_phys(obj)? == new.objset().dnode_phys(obj)? {
                    continue;
                }
                let (was, now) = (old.path_of(obj), new.path_of(obj));
                let mut e = entry(&b, new, 'M');
                if was != now {
                    e.change = 'R';
                    e.path = was.unwrap_or_default();
                    e.new_path = Some(now.unwrap_or_default());
                }
                out.push(e);
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path).then(a.change.cmp(&b.change)));
    Ok(out)
}
