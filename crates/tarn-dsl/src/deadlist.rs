//! Dead lists, block pointer lists and the free queue (ZFS's
//! `dsl_deadlist.c`, `bpobj.c` and the async destroy of `dsl_scan.c`).
//! The byte layouts are in `tarn_format::bpobj`; docs/FORMAT.md §12.2 has
//! the rules.
//!
//! A [`Deadlist`] is kept in memory as its summary — every sub-list's key,
//! space and bpobjs — so that the space questions snapshots ask (what a
//! snapshot alone holds, what destroying it would free, what was written
//! since) are sums over a `BTreeMap`, never reads of the entries. Entries
//! are only read when their blocks are finally freed, by the free queue,
//! a bounded number per txg.
//!
//! Every function that changes the MOS runs where MOS changes are allowed:
//! in open context under the pool's `sync_lock` and a txg hold, or in the
//! sync thread before the MOS is written.

use std::collections::BTreeMap;
use std::ops::{Add, AddAssign, Sub};

use tarn_dmu::{DmuError, Objset, ZapValue};
use tarn_format::bpobj::{
    BpobjPhys, DeadlistEntry, BPOBJ_ENTRY_SIZE, BPOBJ_PHYS_SIZE, DEADLIST_BPOBJS_MAX,
};
use tarn_format::{BlockPtr, ObjType};

use crate::mos::MOS_BLOCK_SIZE;
use crate::DslError;

/// Space of some blocks, as the dataset records count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Space {
    /// Deflated bytes of every copy (what USED counts).
    pub dsize: u64,
    /// Physical bytes, each block once.
    pub psize: u64,
    /// Logical bytes, each block once.
    pub lsize: u64,
}

impl Add for Space {
    type Output = Space;
    fn add(self, o: Space) -> Space {
        Space {
            dsize: self.dsize.saturating_add(o.dsize),
            psize: self.psize.saturating_add(o.psize),
            lsize: self.lsize.saturating_add(o.lsize),
        }
    }
}

impl AddAssign for Space {
    fn add_assign(&mut self, o: Space) {
        *self = *self + o;
    }
}

impl Sub for Space {
    type Output = Space;
    fn sub(self, o: Space) -> Space {
        Space {
            dsize: self.dsize.saturating_sub(o.dsize),
            psize: self.psize.saturating_sub(o.psize),
            lsize: self.lsize.saturating_sub(o.lsize),
        }
    }
}

impl Space {
    fn of(e: &DeadlistEntry) -> Space {
        Space {
            dsize: e.dsize,
            psize: e.psize,
            lsize: e.lsize,
        }
    }
}

/// A block and the space it takes (`dsize` is the pool's to compute).
#[derive(Debug, Clone, Copy)]
pub struct Dead {
    pub bp: BlockPtr,
    pub dsize: u64,
}

impl Dead {
    fn space(&self) -> Space {
        Space {
            dsize: self.dsize,
            psize: u64::from(self.bp.psize),
            lsize: u64::from(self.bp.lsize),
        }
    }
}

// ------------------------------------------------------------------ bpobj

fn bpobj_create(mos: &Objset) -> Result<u64, DslError> {
    let obj = mos.object_create(ObjType::Bpobj, MOS_BLOCK_SIZE, BPOBJ_PHYS_SIZE)?;
    mos.set_bonus(obj, &BpobjPhys::default().encode())?;
    Ok(obj)
}

fn bpobj_phys(mos: &Objset, obj: u64) -> Result<BpobjPhys, DslError> {
    let phys = BpobjPhys::decode(&mos.bonus(obj)?)?;
    let bytes = phys
        .num_blkptrs
        .checked_mul(BPOBJ_ENTRY_SIZE as u64)
        .ok_or_else(|| DslError::Corrupted(format!("bpobj {obj}: entry count")))?;
    let info = mos.object_info(obj)?;
    if info.typ != ObjType::Bpobj || bytes > info.size_blocks_bytes {
        return Err(DslError::Corrupted(format!(
            "bpobj {obj}: {} entries do not fit the object",
            phys.num_blkptrs
        )));
    }
    Ok(phys)
}

fn bpobj_append(mos: &Objset, obj: u64, dead: &[Dead]) -> Result<(), DslError> {
    let mut phys = bpobj_phys(mos, obj)?;
    let mut bytes = Vec::with_capacity(dead.len() * BPOBJ_ENTRY_SIZE);
    let mut space = Space::default();
    for d in dead {
        bytes.extend_from_slice(&d.bp.encode());
        space += d.space();
    }
    mos.write(obj, phys.num_blkptrs * BPOBJ_ENTRY_SIZE as u64, &bytes)?;
    phys.num_blkptrs += dead.len() as u64;
    phys.dsize += space.dsize;
    phys.psize += space.psize;
    phys.lsize += space.lsize;
    mos.set_bonus(obj, &phys.encode())?;
    Ok(())
}

/// Up to `max` entries from the end of a bpobj, in order, and its phys.
fn bpobj_tail(mos: &Objset, obj: u64, max: u64) -> Result<(Vec<BlockPtr>, BpobjPhys), DslError> {
    let phys = bpobj_phys(mos, obj)?;
    let n = phys.num_blkptrs.min(max);
    let from = phys.num_blkptrs - n;
    let mut buf = vec![0u8; n as usize * BPOBJ_ENTRY_SIZE];
    mos.read(obj, from * BPOBJ_ENTRY_SIZE as u64, &mut buf)?;
    let bps = buf
        .chunks_exact(BPOBJ_ENTRY_SIZE)
        .map(BlockPtr::decode)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((bps, phys))
}

// --------------------------------------------------------------- dead list

/// A dead list's summary: sub-lists by `mintxg` (see the module comment).
#[derive(Debug, Clone, Default)]
pub struct Deadlist {
    /// Its MOS ZAP.
    pub obj: u64,
    pub subs: BTreeMap<u64, DeadlistEntry>,
}

impl Deadlist {
    pub fn create(mos: &Objset) -> Result<Deadlist, DslError> {
        Ok(Deadlist {
            obj: mos.zap_create(ObjType::DeadList)?,
            subs: BTreeMap::new(),
        })
    }

    pub fn load(mos: &Objset, obj: u64) -> Result<Deadlist, DslError> {
        let mut subs = BTreeMap::new();
        for entry in mos.zap_cursor(obj, 0) {
            let (key, value, _) = entry?;
            let ZapValue::U64s(words) = value else {
                return Err(DslError::Corrupted("dead list value is not numbers".into()));
            };
            subs.insert(
                DeadlistEntry::parse_key(&key)?,
                DeadlistEntry::decode(&words)?,
            );
        }
        Ok(Deadlist { obj, subs })
    }

    /// Every block on the list.
    pub fn total(&self) -> Space {
        self.subs
            .values()
            .map(Space::of)
            .fold(Space::default(), Add::add)
    }

    /// Blocks of the sub-lists whose key is in `[lo, hi)`: with snapshot
    /// txgs as bounds, the blocks born in `(lo, hi]`.
    pub fn range(&self, lo: u64, hi: u64) -> Space {
        if lo >= hi {
            return Space::default();
        }
        self.subs
            .range(lo..hi)
            .map(|(_, e)| Space::of(e))
            .fold(Space::default(), Add::add)
    }

    fn store(&self, mos: &Objset, key: u64) -> Result<(), DslError> {
        let k = DeadlistEntry::key(key);
        match self.subs.get(&key) {
            Some(e) => mos.zap_update(self.obj, k.as_bytes(), &ZapValue::U64s(e.encode()))?,
            None => match mos.zap_remove(self.obj, k.as_bytes()) {
                Ok(()) | Err(DmuError::NotFound) => {}
                Err(e) => return Err(e.into()),
            },
        }
        Ok(())
    }

    /// Appends blocks to the sub-list `key`.
    pub fn insert(&mut self, mos: &Objset, key: u64, dead: &[Dead]) -> Result<(), DslError> {
        if dead.is_empty() {
            return Ok(());
        }
        let entry = self.subs.entry(key).or_default();
        let bpobj = match entry.bpobjs.last() {
            Some(&b) => b,
            None => {
                let b = bpobj_create(mos)?;
                entry.bpobjs.push(b);
                b
            }
        };
        bpobj_append(mos, bpobj, dead)?;
        let space = dead
            .iter()
            .map(Dead::space)
            .fold(Space::default(), Add::add);
        entry.dsize += space.dsize;
        entry.psize += space.psize;
        entry.lsize += space.lsize;
        self.store(mos, key)
    }

    /// Removes the sub-lists whose key is in `[lo, hi)` and returns them.
    pub fn take_range(
        &mut self,
        mos: &Objset,
        lo: u64,
        hi: u64,
    ) -> Result<Vec<DeadlistEntry>, DslError> {
        if lo >= hi {
            return Ok(Vec::new());
        }
        let keys: Vec<u64> = self.subs.range(lo..hi).map(|(&k, _)| k).collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            out.extend(self.subs.remove(&k));
            self.store(mos, k)?;
        }
        Ok(out)
    }

    /// Moves every sub-list of `other` into this list (their bpobjs join
    /// the sub-list of the same key) and frees `other`'s ZAP.
    pub fn absorb(
        &mut self,
        mos: &Objset,
        other: Deadlist,
        dsize: DsizeFn,
    ) -> Result<(), DslError> {
        for (key, e) in other.subs {
            self.add_entry(mos, key, e, dsize)?;
        }
        mos.object_free(other.obj)?;
        Ok(())
    }

    /// Adds a sub-list's blocks (their bpobjs) under `key`.
    pub fn add_entry(
        &mut self,
        mos: &Objset,
        key: u64,
        e: DeadlistEntry,
        dsize: DsizeFn,
    ) -> Result<(), DslError> {
        if e.bpobjs.is_empty() {
            return Ok(());
        }
        let mine = self.subs.entry(key).or_default();
        if mine.bpobjs.len() + e.bpobjs.len() > DEADLIST_BPOBJS_MAX {
            // Too many lists under one key: copy the newcomers' entries
            // into one list of this sub-list instead.
            let target = match mine.bpobjs.last() {
                Some(&b) => b,
                None => {
                    let b = bpobj_create(mos)?;
                    mine.bpobjs.push(b);
                    b
                }
            };
            for b in &e.bpobjs {
                copy_bpobj(mos, *b, target, dsize)?;
            }
        } else {
            // The new bpobjs go first: appends go to the last one, which
            // stays this sub-list's own.
            let mut bpobjs = e.bpobjs.clone();
            bpobjs.append(&mut mine.bpobjs);
            mine.bpobjs = bpobjs;
        }
        mine.dsize += e.dsize;
        mine.psize += e.psize;
        mine.lsize += e.lsize;
        self.store(mos, key)
    }

    /// Frees the list's ZAP and bpobjs without freeing their blocks (the
    /// blocks are someone else's: a rollback's discarded dead list).
    pub fn discard(self, mos: &Objset) -> Result<(), DslError> {
        for e in self.subs.values() {
            for &b in &e.bpobjs {
                mos.object_free(b)?;
            }
        }
        mos.object_free(self.obj)?;
        Ok(())
    }
}

/// The pool's deflated size of a block (every copy): how a list's
/// `dsize` is counted, so that removing a block subtracts exactly what
/// adding it added.
pub type DsizeFn<'a> = &'a dyn Fn(&BlockPtr) -> u64;

/// Appends every entry of bpobj `from` to `to` and frees `from`.
fn copy_bpobj(mos: &Objset, from: u64, to: u64, dsize: DsizeFn) -> Result<(), DslError> {
    let phys = bpobj_phys(mos, from)?;
    let (bps, _) = bpobj_tail(mos, from, phys.num_blkptrs)?;
    let dead: Vec<Dead> = bps
        .into_iter()
        .map(|bp| Dead {
            dsize: dsize(&bp),
            bp,
        })
        .collect();
    bpobj_append(mos, to, &dead)?;
    mos.object_free(from)?;
    Ok(())
}

// ------------------------------------------------------------- free queue

/// Blocks waiting to be freed, a bounded number per txg (docs/FORMAT.md
/// §12.2 "The free queue"): a dead list with the one key 0.
#[derive(Debug, Clone, Default)]
pub struct FreeQueue {
    pub list: Option<Deadlist>,
}

/// The object directory entry naming the free queue.
pub const FREE_QUEUE_KEY: &str = "free_queue";

impl FreeQueue {
    pub fn load(mos: &Objset, objdir: u64) -> Result<FreeQueue, DslError> {
        let list = crate::mos::zap_get_u64(mos, objdir, FREE_QUEUE_KEY)?
            .map(|obj| Deadlist::load(mos, obj))
            .transpose()?;
        Ok(FreeQueue { list })
    }

    /// Space waiting to be freed (the pool property `freeing`).
    pub fn pending(&self) -> Space {
        self.list.as_ref().map_or(Space::default(), Deadlist::total)
    }

    /// Queues sub-lists of blocks to be freed.
    pub fn enqueue(
        &mut self,
        mos: &Objset,
        objdir: u64,
        entries: Vec<DeadlistEntry>,
        dsize: DsizeFn,
    ) -> Result<(), DslError> {
        if entries.iter().all(|e| e.bpobjs.is_empty()) {
            return Ok(());
        }
        if self.list.is_none() {
            let list = Deadlist::create(mos)?;
            crate::mos::zap_set_u64(mos, objdir, FREE_QUEUE_KEY, list.obj)?;
            self.list = Some(list);
        }
        let list = self.list.as_mut().expect("created above");
        for e in entries {
            list.add_entry(mos, 0, e, dsize)?;
        }
        Ok(())
    }

    /// Queues blocks (a destroyed dataset's) to be freed.
    pub fn enqueue_blocks(
        &mut self,
        mos: &Objset,
        objdir: u64,
        dead: &[Dead],
        dsize: DsizeFn,
    ) -> Result<(), DslError> {
        if dead.is_empty() {
            return Ok(());
        }
        let mut one = Deadlist {
            obj: 0,
            subs: BTreeMap::new(),
        };
        let b = bpobj_create(mos)?;
        bpobj_append(mos, b, dead)?;
        let space = dead
            .iter()
            .map(Dead::space)
            .fold(Space::default(), Add::add);
        one.subs.insert(
            0,
            DeadlistEntry {
                dsize: space.dsize,
                psize: space.psize,
                lsize: space.lsize,
                bpobjs: vec![b],
            },
        );
        self.enqueue(mos, objdir, one.subs.into_values().collect(), dsize)
    }

    /// Every block waiting (for space checks).
    pub fn entries(&self, mos: &Objset) -> Result<Vec<BlockPtr>, DslError> {
        let mut out = Vec::new();
        for e in self.list.iter().flat_map(|l| l.subs.values()) {
            for &b in &e.bpobjs {
                out.extend(bpobj_tail(mos, b, u64::MAX)?.0);
            }
        }
        Ok(out)
    }

    /// Frees up to `budget` blocks from the end of the queue (sync
    /// context, before the MOS is written); `free` frees one block.
    /// Returns how many were freed.
    pub fn process(
        &mut self,
        mos: &Objset,
        budget: u64,
        dsize: DsizeFn,
        free: &mut dyn FnMut(&BlockPtr),
    ) -> Result<u64, DslError> {
        let Some(list) = self.list.as_mut() else {
            return Ok(0);
        };
        let mut freed = 0;
        while freed < budget {
            let Some(entry) = list.subs.get_mut(&0) else {
                break;
            };
            let Some(&bpobj) = entry.bpobjs.last() else {
                list.subs.remove(&0);
                break;
            };
            let (bps, mut phys) = bpobj_tail(mos, bpobj, budget - freed)?;
            let mut space = Space::default();
            for bp in &bps {
                free(bp);
                space += Dead {
                    bp: *bp,
                    dsize: dsize(bp),
                }
                .space();
            }
            freed += bps.len() as u64;
            let left = phys.num_blkptrs - bps.len() as u64;
            if left == 0 {
                mos.object_free(bpobj)?;
                entry.bpobjs.pop();
            } else {
                phys.num_blkptrs = left;
                phys.dsize = phys.dsize.saturating_sub(space.dsize);
                phys.psize = phys.psize.saturating_sub(space.psize);
                phys.lsize = phys.lsize.saturating_sub(space.lsize);
                mos.set_bonus(bpobj, &phys.encode())?;
                mos.truncate(bpobj, left * BPOBJ_ENTRY_SIZE as u64)?;
            }
            entry.dsize = entry.dsize.saturating_sub(space.dsize);
            entry.psize = entry.psize.saturating_sub(space.psize);
            entry.lsize = entry.lsize.saturating_sub(space.lsize);
            if entry.bpobjs.is_empty() {
                list.subs.remove(&0);
            }
            list.store(mos, 0)?;
        }
        Ok(freed)
    }
}
