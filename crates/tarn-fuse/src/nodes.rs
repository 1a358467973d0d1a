//! FUSE node ids of the head filesystem, across rollbacks.
//!
//! A node id names one file for as long as the kernel holds a reference
//! to it: the kernel finds its inode by node id alone. Normally the node
//! id is the object number (the root's is 1), and an object number is not
//! reused while the kernel holds it (an unlinked file lives on until its
//! last reference goes). A rollback breaks that: the kernel may hold
//! files the rolled-back filesystem does not have, whose numbers that
//! filesystem will hand out again. So:
//!
//! - Those node ids turn **stale** ([`NodeMap::replace`]): they answer
//!   ENOENT until the kernel has given back every reference it held
//!   (forget, release), counted here, since the filesystem they were
//!   taken on is gone.
//! - A file whose number is stale gets an **alias** node id (with
//!   [`ALIAS_BIT`]) when it is given to the kernel, and keeps it until the
//!   kernel has forgotten it; then its own number serves again.
//!
//! Without a rollback both tables are empty and every call is one relaxed
//! atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

/// Marks an alias node id: above every object number (48 bits), below
/// the bits of `.zfs` nodes (`snapdir`), so it routes to the head.
pub(crate) const ALIAS_BIT: u64 = 1 << 61;
/// The object number a stale node id resolves to: no object has it.
pub(crate) const STALE_INO: u64 = (1 << 48) - 1;

/// Whose references the kernel gave back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Given {
    /// Object `ino`'s, of the filesystem served now.
    Live(u64),
    /// A stale node's, which named object `ino` of a replaced filesystem.
    Stale(u64),
}

#[derive(Default)]
struct Tables {
    /// Node id → the object it named and the references the kernel still
    /// holds on it.
    stale: HashMap<u64, (u64, u64)>,
    /// Object number → its alias node id, and back.
    alias_of: HashMap<u64, u64>,
    ino_of: HashMap<u64, u64>,
    next_alias: u64,
}

#[derive(Default)]
pub(crate) struct NodeMap {
    /// Whether either table is non-empty (the fast path when not).
    any: AtomicBool,
    tables: RwLock<Tables>,
}

impl NodeMap {
    /// The object number of a head node id other than the root's.
    pub(crate) fn ino(&self, node: u64) -> u64 {
        if !self.any.load(Ordering::Acquire) {
            return node;
        }
        let t = self.tables.read();
        if t.stale.contains_key(&node) {
            STALE_INO
        } else {
            t.ino_of.get(&node).copied().unwrap_or(node)
        }
    }

    /// The node id the kernel is to know object `ino` by (not the
    /// root): its alias if it has one, a new alias if its number is
    /// stale, else the number itself. Call it after taking the reference
    /// the kernel gets with the answer (see [`NodeMap::forgotten`]).
    pub(crate) fn node(&self, ino: u64) -> u64 {
        if !self.any.load(Ordering::Acquire) {
            return ino;
        }
        {
            let t = self.tables.read();
            if let Some(&a) = t.alias_of.get(&ino) {
                return a;
            }
            if !t.stale.contains_key(&ino) {
                return ino;
            }
        }
        let mut t = self.tables.write();
        if let Some(&a) = t.alias_of.get(&ino) {
            return a;
        }
        if !t.stale.contains_key(&ino) {
            return ino;
        }
        t.next_alias += 1;
        let a = ALIAS_BIT | t.next_alias;
        t.alias_of.insert(ino, a);
        t.ino_of.insert(a, ino);
        a
    }

    /// The kernel gives back `n` references on `node`. For a stale node
    /// they are counted off here (the filesystem they were taken on is
    /// gone): `Given::Stale`; otherwise the object's.
    pub(crate) fn give_back(&self, node: u64, n: u64) -> Given {
        if !self.any.load(Ordering::Acquire) {
            return Given::Live(node);
        }
        let mut t = self.tables.write();
        let Some((ino, left)) = t.stale.get_mut(&node) else {
            return Given::Live(t.ino_of.get(&node).copied().unwrap_or(node));
        };
        let ino = *ino;
        *left = left.saturating_sub(n);
        if *left == 0 {
            t.stale.remove(&node);
            self.settle(&t);
        }
        Given::Stale(ino)
    }

    /// Object `ino` has no reference left from the kernel (`held` says
    /// how many it has now, read under this map's lock so that a
    /// reference taken meanwhile keeps the alias): its alias goes.
    pub(crate) fn forgotten(&self, ino: u64, held: impl Fn() -> u64) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut t = self.tables.write();
        if held() != 0 {
            return;
        }
        if let Some(a) = t.alias_of.remove(&ino) {
            t.ino_of.remove(&a);
            self.settle(&t);
        }
    }

    /// A rollback: the kernel holds `refs` references on each of `inos`,
    /// files of the replaced filesystem that the new one lacks. Their
    /// node ids turn stale, and their aliases go with them.
    pub(crate) fn replace(&self, inos: &[(u64, u64)]) {
        if inos.is_empty() {
            return;
        }
        let mut t = self.tables.write();
        for &(ino, refs) in inos {
            let node = match t.alias_of.remove(&ino) {
                Some(a) => {
                    t.ino_of.remove(&a);
                    a
                }
                None => ino,
            };
            t.stale.entry(node).or_insert((ino, 0)).1 += refs;
        }
        self.settle(&t);
    }

    /// The current node id of `ino` without making one (for
    /// invalidations).
    pub(crate) fn current(&self, ino: u64) -> u64 {
        if !self.any.load(Ordering::Acquire) {
            return ino;
        }
        self.tables
            .read()
            .alias_of
            .get(&ino)
            .copied()
            .unwrap_or(ino)
    }

    fn settle(&self, t: &Tables) {
        let any = !t.stale.is_empty() || !t.alias_of.is_empty();
        self.any.store(any, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_rollback_node_ids_are_object_numbers() {
        let m = NodeMap::default();
        assert_eq!(m.node(7), 7);
        assert_eq!(m.ino(7), 7);
        assert_eq!(m.give_back(7, 1), Given::Live(7));
    }

    #[test]
    fn a_stale_number_reused_gets_an_alias_until_forgotten() {
        let m = NodeMap::default();
        // The kernel holds 2 references on old file 7, gone after the rollback.
        m.replace(&[(7, 2)]);
        assert_eq!(m.ino(7), STALE_INO);
        // The new filesystem's object 7 (a new file) gets an alias.
        let a = m.node(7);
        assert_ne!(a, 7);
        assert_eq!(a & ALIAS_BIT, ALIAS_BIT);
        assert_eq!(m.node(7), a);
        assert_eq!(m.ino(a), 7);
        // The old node's references run out; the alias stays while held.
        assert_eq!(m.give_back(7, 1), Given::Stale(7));
        assert_eq!(m.ino(7), STALE_INO);
        assert_eq!(m.give_back(7, 1), Given::Stale(7));
        assert_eq!(m.ino(7), 7);
        assert_eq!(m.node(7), a);
        assert_eq!(m.give_back(a, 1), Given::Live(7));
        m.forgotten(7, || 1);
        assert_eq!(m.node(7), a, "still held: the alias stays");
        m.forgotten(7, || 0);
        assert_eq!(m.node(7), 7);
        assert!(!m.any.load(Ordering::Relaxed));
    }

    #[test]
    fn an_aliased_file_gone_in_a_second_rollback_turns_stale() {
        let m = NodeMap::default();
        m.replace(&[(7, 1)]);
        let a = m.node(7);
        m.replace(&[(7, 3)]);
        assert_eq!(m.ino(a), STALE_INO);
        // Both the old number and the alias are stale now: another alias.
        let b = m.node(7);
        assert!(b != a && b != 7);
        for _ in 0..3 {
            assert_eq!(m.give_back(a, 1), Given::Stale(7));
        }
        assert_eq!(m.ino(a), a, "no longer stale, no longer anything");
    }
}
