//! Reader-writer locks split by reader: a table of locks guarding code,
//! not data, where each reader takes only its own slot's copy of a lock
//! and a writer takes every slot's (Linux's percpu-rwsem, the "big
//! reader" lock).
//!
//! A plain reader-writer lock that only readers take still makes every
//! reader write its lock word, so readers on different CPUs pass that
//! cache line back and forth on every request: with the namespace lock
//! and the inode lock taken by every read of a file, two threads reading
//! one cached file did 1.2× one thread (`tarn-bench threads`). Here a
//! reader's slot is its thread's (threads are given slots in turn as they
//! first lock, and the front end runs one thread per CPU), so readers on
//! different CPUs write different cache lines. A writer pays a lock per
//! slot, at most [`BR_SLOTS_MAX`].
//!
//! Locking order: a writer locks the slots in order, so writers never
//! deadlock with each other; a reader holds one slot, so it never waits
//! while holding another.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::lockstat::LockStat;

/// Most reader slots: writers take this many locks at most.
pub const BR_SLOTS_MAX: usize = 16;

/// Locks per cache-line-aligned chunk of a slot's table.
const CHUNK: usize = 16;

#[repr(align(128))]
struct Chunk([RwLock<()>; CHUNK]);

impl Chunk {
    fn new() -> Chunk {
        Chunk(std::array::from_fn(|_| RwLock::new(())))
    }
}

/// `len` reader-writer locks, each with one copy per reader slot.
pub struct BrLockTable {
    /// `slots[s]`: slot `s`'s copy of every lock, in chunks that share
    /// no cache line with another slot's.
    slots: Box<[Box<[Chunk]>]>,
    len: usize,
    stat: &'static LockStat,
}

/// Holds lock `i` of a table shared.
pub struct BrReadGuard<'a> {
    _g: RwLockReadGuard<'a, ()>,
}

/// Holds lock `i` of a table alone (every slot's copy).
pub struct BrWriteGuard<'a> {
    _g: [Option<RwLockWriteGuard<'a, ()>>; BR_SLOTS_MAX],
}

fn slot_count() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, BR_SLOTS_MAX)
    })
}

/// This thread's slot number (before the modulo).
fn my_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|s| *s)
}

impl BrLockTable {
    /// `len` locks (at least one), waits counted in `stat`.
    pub fn new(len: usize, stat: &'static LockStat) -> BrLockTable {
        let len = len.max(1);
        let chunks = len.div_ceil(CHUNK);
        BrLockTable {
            slots: (0..slot_count())
                .map(|_| (0..chunks).map(|_| Chunk::new()).collect())
                .collect(),
            len,
            stat,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    fn lock_in(&self, slot: usize, i: usize) -> &RwLock<()> {
        &self.slots[slot].as_ref()[i / CHUNK].0[i % CHUNK]
    }

    /// Lock `i % len` shared: this thread's slot only.
    #[inline]
    pub fn read(&self, i: usize) -> BrReadGuard<'_> {
        let l = self.lock_in(my_slot() % self.slots.len(), i % self.len);
        BrReadGuard {
            _g: self.stat.acquire(|| l.try_read(), || l.read()),
        }
    }

    /// Lock `i % len` alone: every slot's copy, in slot order.
    pub fn write(&self, i: usize) -> BrWriteGuard<'_> {
        let i = i % self.len;
        BrWriteGuard {
            _g: std::array::from_fn(|s| {
                (s < self.slots.len()).then(|| {
                    let l = self.lock_in(s, i);
                    self.stat.acquire(|| l.try_write(), || l.write())
                })
            }),
        }
    }
}

/// A value behind a reader-split lock: [`BrLockTable`] with one lock,
/// guarding a `T`. Readers share the value touching only their slot's
/// lock; a writer takes every slot's and has the value alone. For state
/// read on every request and changed by a few kinds of request (an
/// object set's object map: every read, write and stat looks an object
/// up in it, while only creating, freeing and syncing objects change it).
pub struct BrRwLock<T> {
    table: BrLockTable,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through the guards below. A
// `BrRead` holds one slot's copy of the table's lock shared and gives out
// `&T`; a `BrWrite` holds every slot's copy alone and gives out `&mut T`.
// A writer therefore excludes every reader (whichever slot it holds) and
// every other writer, exactly as one reader-writer lock would, so the
// usual bounds of `RwLock` apply: shared `&T` on several threads needs
// `T: Sync`, and handing the value from thread to thread needs `T: Send`.
unsafe impl<T: Send + Sync> Sync for BrRwLock<T> {}
// SAFETY: as above; moving the lock moves the value, which needs `Send`.
unsafe impl<T: Send> Send for BrRwLock<T> {}

/// The value of a [`BrRwLock`], shared.
pub struct BrRead<'a, T> {
    _g: BrReadGuard<'a>,
    value: &'a T,
}

/// The value of a [`BrRwLock`], alone.
pub struct BrWrite<'a, T> {
    _g: BrWriteGuard<'a>,
    value: &'a mut T,
}

impl<T> BrRwLock<T> {
    pub fn new(value: T, stat: &'static LockStat) -> Self {
        BrRwLock {
            table: BrLockTable::new(1, stat),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub fn read(&self) -> BrRead<'_, T> {
        let g = self.table.read(0);
        BrRead {
            _g: g,
            // SAFETY: `g` holds this thread's slot shared, so no writer
            // (which needs every slot alone) holds or can take the value
            // until `g` is dropped, and `g` lives in the guard returned,
            // which the reference cannot outlive (it is reached only
            // through `Deref` of that guard).
            value: unsafe { &*self.value.get() },
        }
    }

    pub fn write(&self) -> BrWrite<'_, T> {
        let g = self.table.write(0);
        BrWrite {
            _g: g,
            // SAFETY: `g` holds every slot alone: no reader and no other
            // writer can reach the value until `g` is dropped, and the
            // reference lives only inside the guard that holds `g`.
            value: unsafe { &mut *self.value.get() },
        }
    }
}

impl<T> std::ops::Deref for BrRead<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T> std::ops::Deref for BrWrite<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T> std::ops::DerefMut for BrWrite<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    static T: LockStat = LockStat::new("brlock test");

    /// A writer excludes readers on every thread and other writers; the
    /// counter, read-modified-written in two steps under the write lock,
    /// never loses an increment, and readers never see it mid-update.
    #[test]
    fn writers_exclude_everyone() {
        let t = Arc::new(BrLockTable::new(3, &T));
        let a = Arc::new(AtomicU64::new(0));
        let b = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|n| {
                let (t, a, b) = (t.clone(), a.clone(), b.clone());
                std::thread::spawn(move || {
                    for k in 0..2000u64 {
                        if (k + n) % 3 == 0 {
                            let _w = t.write(4); // 4 % 3: lock 1
                            let v = a.load(Ordering::Relaxed);
                            std::hint::spin_loop();
                            a.store(v + 1, Ordering::Relaxed);
                            b.store(v + 1, Ordering::Relaxed);
                        } else {
                            let _r = t.read(1);
                            assert_eq!(a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
                        }
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let writes: u64 = (0..4u64)
            .map(|n| (0..2000u64).filter(|k| (k + n) % 3 == 0).count() as u64)
            .sum();
        assert_eq!(a.load(Ordering::Relaxed), writes);
    }

    /// Writers of the value never lose an update and readers never see
    /// a half-made one.
    #[test]
    fn a_value_is_shared_or_alone() {
        let v = Arc::new(BrRwLock::new((0u64, 0u64), &T));
        let threads: Vec<_> = (0..4)
            .map(|n| {
                let v = v.clone();
                std::thread::spawn(move || {
                    for k in 0..3000u64 {
                        if (k + n) % 4 == 0 {
                            let mut w = v.write();
                            w.0 += 1;
                            std::hint::spin_loop();
                            w.1 += 1;
                        } else {
                            let r = v.read();
                            assert_eq!(r.0, r.1);
                        }
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert_eq!(*v.read(), (3000, 3000));
    }

    #[test]
    fn different_locks_do_not_exclude() {
        let t = BrLockTable::new(40, &T);
        let _w = t.write(0);
        let _r = t.read(39);
        let _w2 = t.write(17);
        assert_eq!(t.len(), 40);
    }
}
