//! Object sets: a flat array of objects, each an array of blocks (ZFS's
//! `dmu_objset.c`, `dnode.c` and `dbuf.c` folded into one in-memory model).
//!
//! ## States of a block
//! A data block of an object is, from a reader's point of view, the first
//! of these that knows about it:
//! 1. the **open** txg's dirty record of the object (written or freed since
//!    the last sync began),
//! 2. the **syncing** txg's dirty record (frozen while `sync` writes it),
//! 3. the **synced tree**: the block pointers reachable from the dnode's
//!    root as of the last completed sync, read through the clean-block
//!    cache.
//!
//! Writers only ever touch (1). `sync(txg)` freezes (1) into (2) under a
//! short lock, writes (2) out with no object lock held — so writers keep
//! dirtying the next txg meanwhile — and then, under the lock again,
//! installs the new roots into (3), drops (2) and frees the blocks the new
//! tree no longer references. Nothing is modified in place on disk: every
//! changed block is written anew and the old one is handed to the
//! [`FreeHook`] (birth-txg aware, so snapshots can keep it).
//!
//! ## Objects
//! Every allocated object touched since open is loaded in `State::objs`:
//! an [`Obj`] with its in-memory `DnodePhys` and its open txg's dirty
//! record, behind a lock of its own. Writer-owned fields (type, block
//! size, bonus, maxblkid) change in open context; sync-owned fields
//! (root, nlevels, used bytes) change only at install. A freed object
//! stays loaded, marked freed, until the sync that frees it installs;
//! only then does its number become reusable (so `object_create` never
//! reuses a number inside one txg). The one exception is `object_claim`,
//! for intent log replay, which re-creates an object freed in the open
//! txg in place, carrying the old tree's sync-owned fields for that txg's
//! sync to free. Object 0, the meta-dnode, is not in the map: it lives in
//! the objset header and only sync changes it. `State::dirty` lists the
//! objects with an open record, which the freeze takes.
//!
//! ## Locking order
//! `sync_lock` → `txg_lock` (write, only for the freeze) → `state` → one
//! object's lock → `tree.readers` → `cache`. `state` is reader-split
//! (`brlock`): a read, write, stat or bonus change of a loaded object
//! shares it and then holds that object's lock (shared to read, alone to
//! change), so requests on different objects never wait for each other
//! and requests on one object share what they can (OpenZFS's
//! `dn_struct_rwlock`). Everything else — creating, freeing, claiming and
//! loading objects, truncates and hole punches, ZAP operations, seeks,
//! the freeze and the install — takes `state` alone for its whole
//! duration, which makes it atomic with respect to the freeze and to
//! every object's changes (it touches objects without their locks: no
//! one else can hold them then). Callers that need several operations in
//! one txg (create an object *and* link it in a directory) hold
//! [`Objset::hold`] across them. `read` resolves block pointers under
//! `state` and the object, and reads data blocks from the store after
//! releasing both, holding the tree guard's `readers` (read), which
//! `install` takes (write) before freeing replaced blocks; it queues the
//! blocks a sequential reader will want next (`prefetch`). `write` does
//! the same for the blocks it changes only in part that are not cached,
//! then copies the blocks it replaces whole with no lock held, and takes
//! `state` (shared) and the object (alone) for the change itself.
//! `docs/LOCKING.md` lists the locks of
//! each FUSE request in order.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_format::dnode::{DnodePhys, DNODE_BONUS_SIZE};
use tarn_format::objset::{ObjsetPhys, ObjsetType, ZIL_HEADER_SIZE};
use tarn_format::{BlockPtr, ChecksumAlg, Compression, ObjType, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
use tarn_pool::store::{BlockStore, StoreError, WriteProps};

use crate::cache::{BlockCache, Claim, BLOCK_CACHE_BYTES_MAX};
use crate::dirty::{Block, DirtyRecord};
use crate::error::{DmuError, Result};
use crate::locked::{source_of, Locked, ObjMut, ScanStep, Source};
use crate::prefetch::{runs, BlockJob, Fill, Streams, TreeGuard};

/// Checksum, compression and copies for the data blocks of an objset's
/// user-data objects (files, zvols). Metadata ignores `checksum = off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WritePolicy {
    pub checksum: ChecksumAlg,
    pub compression: Compression,
    pub copies: u8,
}

impl Default for WritePolicy {
    fn default() -> Self {
        WritePolicy {
            checksum: ChecksumAlg::Fletcher4,
            compression: Compression::Lz4,
            copies: 1,
        }
    }
}

impl WritePolicy {
    /// Props for a block of an object of `typ` at `level`.
    pub fn props(&self, typ: ObjType, level: u8, fill: u64) -> WriteProps {
        if level > 0 || typ.is_metadata() {
            let mut p =
                WriteProps::metadata(if level > 0 { ObjType::Indirect } else { typ }, level);
            if self.checksum != ChecksumAlg::Off {
                p.checksum = self.checksum;
            }
            p.copies = (self.copies + 1).min(3);
            p.fill = fill;
            return p;
        }
        WriteProps {
            typ,
            level,
            checksum: self.checksum,
            compression: self.compression,
            copies: self.copies,
            fill,
        }
    }
}

/// Where blocks that a sync stops referencing go. The default frees them
/// in the store; the snapshot layer installs one that sends blocks born
/// before the newest snapshot (`bp.birth <= snap_txg`) to a dead list.
pub trait FreeHook: Send + Sync {
    fn free_block(&self, store: &dyn BlockStore, txg: u64, bp: &BlockPtr);
}

/// The default hook: free in the store.
pub struct FreeToStore;

impl FreeHook for FreeToStore {
    fn free_block(&self, store: &dyn BlockStore, txg: u64, bp: &BlockPtr) {
        store.free(txg, bp);
    }
}

/// What `object_info` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectInfo {
    pub typ: ObjType,
    pub block_size: u32,
    pub maxblkid: u64,
    /// `(maxblkid + 1) * block_size`: the end of the last block.
    pub size_blocks_bytes: u64,
    /// Bytes allocated beneath the object as of the last sync.
    pub used_bytes: u64,
    pub nlevels: u8,
    pub bonus_type: ObjType,
    pub bonus_len: usize,
}

/// Held by a caller across several operations that must land in one txg.
pub struct TxHold<'a> {
    _guard: parking_lot::RwLockReadGuard<'a, ()>,
}

pub(crate) struct Dnode {
    pub phys: DnodePhys,
    pub freed: bool,
}

/// A loaded object: its dnode and what the open txg changed in it, under
/// a lock of its own (OpenZFS's `dn_struct_rwlock` and `dn_mtx` in one).
pub(crate) struct Obj {
    pub dn: Dnode,
    /// The open txg's record (`None`: untouched in it). Whoever makes it
    /// `Some` lists the object in `State::dirty`.
    pub open: Option<DirtyRecord>,
}

pub(crate) type ObjLock = parking_lot::RwLock<Obj>;

pub(crate) struct State {
    /// Every object loaded since open. The map changes only with the
    /// state held alone; each object's contents change with the state
    /// held shared and the object's own lock held alone (`write`,
    /// `set_bonus`) or with the state held alone.
    pub objs: HashMap<u64, ObjLock>,
    /// The objects whose `open` is `Some`, each once.
    pub dirty: Mutex<Vec<u64>>,
    pub syncing: Option<Arc<HashMap<u64, DirtyRecord>>>,
    pub meta: DnodePhys,
    pub root_bp: BlockPtr,
    pub typ: ObjsetType,
    pub zil_header: [u8; ZIL_HEADER_SIZE],
    /// Numbers below `scan_next` known to be free (freed and synced).
    pub free_nums: BTreeSet<u64>,
    pub scan_next: u64,
    pub last_synced_txg: u64,
    /// The newest txg frozen for sync: the open records belong to a later
    /// one (see `sync_block`).
    pub frozen_txg: u64,
    /// Blocks `sync_block` wrote that no record uses (their block changed
    /// before they could be registered); the next sync frees them.
    pub orphans: Vec<BlockPtr>,
    pub policy: WritePolicy,
    /// Header-only changes (ZIL header) that need a sync.
    pub header_dirty: bool,
    /// ZAP blocks read from the synced tree that passed the full check
    /// (`zap::ZapChecked`), so later operations decode them without
    /// re-hashing every key.
    pub zap_checked: crate::zap::ZapChecked,
}

impl State {
    /// The loaded object `id` (the state held alone).
    pub fn obj(&mut self, id: u64) -> Option<&mut Obj> {
        self.objs.get_mut(&id).map(parking_lot::RwLock::get_mut)
    }

    pub fn is_loaded(&self, id: u64) -> bool {
        self.objs.contains_key(&id)
    }

    /// Loads (or replaces) object `id` with `dn`, keeping its open record
    /// if it had one; with `dirty`, the object gets one.
    pub fn put_obj(&mut self, id: u64, dn: Dnode, dirty: bool) {
        let Some(o) = self.obj(id) else {
            self.objs.insert(id, ObjLock::new(Obj { dn, open: None }));
            if dirty {
                self.open_rec(id);
            }
            return;
        };
        o.dn = dn;
        if dirty {
            self.open_rec(id);
        }
    }

    /// The open record of loaded object `id`, made (and listed) if it has
    /// none: the object is dirty in the open txg.
    pub fn open_rec(&mut self, id: u64) -> &mut DirtyRecord {
        let State { objs, dirty, .. } = self;
        let o = objs
            .get_mut(&id)
            .expect("only loaded objects are made dirty")
            .get_mut();
        open_of(o, dirty, id)
    }

    /// The open record of `id`, if it is loaded and has one.
    pub fn open_get(&mut self, id: u64) -> Option<&mut DirtyRecord> {
        self.obj(id)?.open.as_mut()
    }

    /// The syncing txg's record of `id`.
    pub fn syncing_of(&self, id: u64) -> Option<&DirtyRecord> {
        self.syncing.as_ref().and_then(|s| s.get(&id))
    }
}

/// `o`'s open record, made and listed in `dirty` if it has none.
pub(crate) fn open_of<'a>(o: &'a mut Obj, dirty: &Mutex<Vec<u64>>, id: u64) -> &'a mut DirtyRecord {
    if o.open.is_none() {
        dirty.lock().push(id);
    }
    o.open.get_or_insert_with(DirtyRecord::default)
}

/// The object set's state behind a reader-split lock
/// ([`crate::brlock::BrRwLock`]): every read, write and stat of a loaded
/// object shares it (taking only its own thread's slot, so requests on
/// different CPUs do not pass one lock word between them) and then locks
/// the object ([`Obj`]); creating, freeing and loading objects, ZAP
/// operations and the sync's freeze and install take it alone. Waits are
/// counted in [`crate::lockstat::OBJSET_STATE`].
pub(crate) struct StateLock(crate::brlock::BrRwLock<State>);

impl StateLock {
    fn new(state: State) -> StateLock {
        StateLock(crate::brlock::BrRwLock::new(
            state,
            &crate::lockstat::OBJSET_STATE,
        ))
    }

    /// The state, alone.
    pub(crate) fn lock(&self) -> crate::brlock::BrWrite<'_, State> {
        self.0.write()
    }

    /// The state, shared with other readers.
    pub(crate) fn read(&self) -> crate::brlock::BrRead<'_, State> {
        self.0.read()
    }
}

pub struct Objset {
    pub(crate) store: Arc<dyn BlockStore>,
    pub(crate) cache: Arc<BlockCache>,
    pub(crate) state: StateLock,
    pub(crate) txg_lock: RwLock<()>,
    pub(crate) sync_lock: Mutex<()>,
    /// What [`Objset::freeze_txg`] took for a txg about to sync (`None`
    /// inside: the objset was clean then).
    pub(crate) prefrozen: Mutex<Option<(u64, Option<crate::sync::Frozen>)>>,
    /// Held (read) by readers doing store I/O on synced-tree blocks
    /// without `state`; `install` retires the old tree through it before
    /// freeing the blocks a sync replaced, so no such read can outlive its
    /// block (see `prefetch`).
    pub(crate) tree: Arc<TreeGuard>,
    /// Sequential readers of this object set's objects.
    pub(crate) streams: Streams,
    pub(crate) hook: RwLock<Arc<dyn FreeHook>>,
    /// Told the object of every read that found no good copy of a block
    /// (the pool's list of permanent errors).
    pub(crate) data_error: RwLock<Option<DataErrorHook>>,
}

/// Called with the object whose read failed for want of a good copy.
pub type DataErrorHook = Arc<dyn Fn(u64) + Send + Sync>;

fn private_cache(bytes: usize) -> Arc<BlockCache> {
    Arc::new(BlockCache::new(bytes))
}

/// Objects are limited to 2^63 bytes.
pub const MAX_OBJECT_BYTES: u64 = 1 << 63;

impl Objset {
    /// A new, empty object set (nothing is written until `sync`) with a
    /// cache of its own.
    pub fn create(store: Arc<dyn BlockStore>, typ: ObjsetType) -> Objset {
        Self::create_in(store, typ, private_cache(BLOCK_CACHE_BYTES_MAX))
    }

    /// `create`, caching in the pool's shared `cache`.
    pub fn create_in(
        store: Arc<dyn BlockStore>,
        typ: ObjsetType,
        cache: Arc<BlockCache>,
    ) -> Objset {
        Self::from_phys(store, ObjsetPhys::new(typ), BlockPtr::HOLE, cache)
    }

    /// Opens the object set whose header block `root` names, with a cache
    /// of its own.
    pub fn open(store: Arc<dyn BlockStore>, root: &BlockPtr) -> Result<Objset> {
        Self::open_with_cache(store, root, BLOCK_CACHE_BYTES_MAX)
    }

    pub fn open_with_cache(
        store: Arc<dyn BlockStore>,
        root: &BlockPtr,
        cache_bytes: usize,
    ) -> Result<Objset> {
        Self::open_in(store, root, private_cache(cache_bytes))
    }

    /// `open`, caching in the pool's shared `cache` (one per pool: block
    /// identities are unique within a pool, not across pools).
    pub fn open_in(
        store: Arc<dyn BlockStore>,
        root: &BlockPtr,
        cache: Arc<BlockCache>,
    ) -> Result<Objset> {
        if root.is_hole() || root.typ != ObjType::Objset {
            return Err(
                tarn_format::Corrupted::new("objset", "root is not an objset block").into(),
            );
        }
        let phys = ObjsetPhys::decode(&store.read(root)?)?;
        let os = Self::from_phys(store, phys, *root, cache);
        {
            let mut st = os.state.lock();
            st.last_synced_txg = root.birth;
            st.frozen_txg = root.birth;
        }
        Ok(os)
    }

    fn from_phys(
        store: Arc<dyn BlockStore>,
        phys: ObjsetPhys,
        root: BlockPtr,
        cache: Arc<BlockCache>,
    ) -> Objset {
        Objset {
            store,
            cache,
            state: StateLock::new(State {
                objs: HashMap::new(),
                dirty: Mutex::new(Vec::new()),
                syncing: None,
                meta: phys.meta_dnode,
                root_bp: root,
                typ: phys.typ,
                zil_header: phys.zil_header,
                free_nums: BTreeSet::new(),
                scan_next: 1,
                last_synced_txg: 0,
                frozen_txg: 0,
                orphans: Vec::new(),
                policy: WritePolicy::default(),
                header_dirty: false,
                zap_checked: Default::default(),
            }),
            txg_lock: RwLock::new(()),
            sync_lock: Mutex::new(()),
            prefrozen: Mutex::new(None),
            tree: Arc::default(),
            streams: Streams::default(),
            hook: RwLock::new(Arc::new(FreeToStore)),
            data_error: RwLock::new(None),
        }
    }

    /// Sets who hears of reads that found no good copy of a block.
    pub fn set_data_error_hook(&self, hook: DataErrorHook) {
        *self.data_error.write() = Some(hook);
    }

    pub(crate) fn locked(&self) -> Locked<'_> {
        Locked::new(self, self.state.lock())
    }

    /// The state shared with other readers, with `obj`'s dnode loaded
    /// (loading it takes the state alone, once: after that every read
    /// and stat of the object shares it).
    pub(crate) fn shared_with(&self, obj: u64) -> Result<crate::brlock::BrRead<'_, State>> {
        loop {
            let st = self.state.read();
            if st.is_loaded(obj) {
                return Ok(st);
            }
            drop(st);
            self.locked().dnode(obj)?;
        }
    }

    /// `f` of object `obj` (not freed) alone, sharing the state: changes
    /// to different objects go on in parallel. `f` gets the list of dirty
    /// objects for `open_of`.
    pub(crate) fn with_obj_mut<R>(
        &self,
        obj: u64,
        f: impl FnOnce(&mut Obj, &Mutex<Vec<u64>>) -> R,
    ) -> Result<R> {
        let st = self.shared_with(obj)?;
        let mut o = st.objs[&obj].write();
        if o.dn.freed {
            return Err(DmuError::NoSuchObject(obj));
        }
        Ok(f(&mut o, &st.dirty))
    }

    /// `f` of object `obj` (not freed), sharing the state and the object
    /// with other readers.
    pub(crate) fn with_obj<R>(&self, obj: u64, f: impl FnOnce(&State, &Obj) -> R) -> Result<R> {
        let st = self.shared_with(obj)?;
        let o = st.objs[&obj].read();
        if o.dn.freed {
            return Err(DmuError::NoSuchObject(obj));
        }
        Ok(f(&st, &o))
    }

    /// The header block pointer as of the last sync (a hole before the
    /// first sync of a new object set).
    pub fn root_bp(&self) -> BlockPtr {
        self.state.lock().root_bp
    }

    pub fn objset_type(&self) -> ObjsetType {
        self.state.lock().typ
    }

    /// Changes the header's type (a volume formatted in a new object
    /// set, or received into one); written at the next sync.
    pub fn set_objset_type(&self, typ: ObjsetType) {
        let mut st = self.state.lock();
        st.typ = typ;
        st.header_dirty = true;
    }

    pub fn set_write_policy(&self, policy: WritePolicy) {
        assert!((1..=3).contains(&policy.copies), "copies {}", policy.copies);
        self.state.lock().policy = policy;
    }

    pub fn set_free_hook(&self, hook: Arc<dyn FreeHook>) {
        *self.hook.write() = hook;
    }

    pub fn zil_header(&self) -> [u8; ZIL_HEADER_SIZE] {
        self.state.lock().zil_header
    }

    pub fn set_zil_header(&self, h: [u8; ZIL_HEADER_SIZE]) {
        let mut st = self.state.lock();
        st.zil_header = h;
        st.header_dirty = true;
    }

    /// Keeps the open txg from being frozen by `sync` until dropped.
    /// Never call `sync` from a thread that holds one.
    pub fn hold(&self) -> TxHold<'_> {
        TxHold {
            _guard: self.txg_lock.read_recursive(),
        }
    }

    /// Bytes of clean blocks cached now (in the cache this object set
    /// uses, shared or not).
    pub fn cache_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// Does the open txg hold changes a `sync` would write?
    pub fn is_dirty(&self) -> bool {
        if matches!(*self.prefrozen.lock(), Some((_, Some(_)))) {
            return true;
        }
        let st = self.state.read();
        !st.dirty.lock().is_empty() || st.header_dirty
    }

    /// The one place blocks leave the tree: through the hook.
    pub(crate) fn free_block(&self, txg: u64, bp: &BlockPtr) {
        self.cache.remove(bp);
        let hook = self.hook.read().clone();
        hook.free_block(&*self.store, txg, bp);
    }

    // ------------------------------------------------------------ objects

    /// Allocates the lowest free object number and creates an empty
    /// object there with a zeroed bonus of `bonus_len` bytes.
    pub fn object_create(&self, typ: ObjType, block_size: u32, bonus_len: usize) -> Result<u64> {
        self.locked().create_object(typ, block_size, bonus_len)
    }

    /// Creates an empty object of `typ` at number `obj`, with a zeroed
    /// bonus of `bonus_len` bytes: ZFS's `dmu_object_claim`, for intent
    /// log replay, which must give a file back the number it had.
    /// [`DmuError::ObjectInUse`] if the number is taken; an object freed
    /// in the open txg is re-created in place (see `Locked::claim_object`).
    pub fn object_claim(
        &self,
        obj: u64,
        typ: ObjType,
        block_size: u32,
        bonus_len: usize,
    ) -> Result<()> {
        self.locked().claim_object(obj, typ, block_size, bonus_len)
    }

    /// Frees the object and, at the next sync, all of its blocks.
    pub fn object_free(&self, obj: u64) -> Result<()> {
        let mut l = self.locked();
        l.dnode_mut(obj)?.freed = true;
        l.st.open_rec(obj).free(0, u64::MAX);
        Ok(())
    }

    pub fn object_info(&self, obj: u64) -> Result<ObjectInfo> {
        self.with_obj(obj, |_, o| {
            let p = &o.dn.phys;
            ObjectInfo {
                typ: p.typ,
                block_size: p.data_block_size,
                maxblkid: p.maxblkid,
                size_blocks_bytes: (p.maxblkid + 1) * u64::from(p.data_block_size),
                used_bytes: p.used_bytes,
                nlevels: p.nlevels,
                bonus_type: p.bonus_type,
                bonus_len: p.bonus.len(),
            }
        })
    }

    pub fn bonus(&self, obj: u64) -> Result<Vec<u8>> {
        self.with_obj(obj, |_, o| o.dn.phys.bonus.clone())
    }

    /// `f` of the bonus record in place (no copy).
    pub fn with_bonus<R>(&self, obj: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.with_obj(obj, |_, o| f(&o.dn.phys.bonus))
    }

    /// Replaces the bonus record (at most 320 bytes).
    pub fn set_bonus(&self, obj: u64, bytes: &[u8]) -> Result<()> {
        if bytes.len() > DNODE_BONUS_SIZE {
            return Err(DmuError::TooBig("bonus"));
        }
        self.with_obj_mut(obj, |o, dirty| {
            o.dn.phys.bonus = bytes.to_vec();
            open_of(o, dirty, obj);
        })
    }

    pub fn set_bonus_type(&self, obj: u64, typ: ObjType) -> Result<()> {
        self.with_obj_mut(obj, |o, dirty| {
            o.dn.phys.bonus_type = typ;
            open_of(o, dirty, obj);
        })
    }

    /// Changes the data block size; allowed only while the object has at
    /// most one block (block 0 is resized, keeping its leading bytes).
    pub fn set_block_size(&self, obj: u64, block_size: u32) -> Result<()> {
        check_block_size(block_size)?;
        self.locked().set_block_size(obj, block_size)
    }

    // ------------------------------------------------------------ data

    /// Reads `buf.len()` bytes at `offset`; holes and bytes past the last
    /// block read as zeros.
    ///
    /// Block pointers are resolved under `state`; blocks that must come
    /// from the store are read after `state` is released, holding the tree
    /// guard so the sync that replaces them cannot free them meanwhile.
    /// Several blocks are read at once by the cache's read threads, and a
    /// read that continues a sequential stream queues the blocks after it
    /// (`prefetch`), so the devices see a queue, not one block at a time.
    /// Such a read drops the blocks it read whole from the cache.
    pub fn read(&self, obj: u64, offset: u64, buf: &mut [u8]) -> Result<()> {
        let pieces = self.read_pieces(obj, offset, buf.len())?;
        let n = ReadPiece::copy_all(&pieces, buf);
        debug_assert_eq!(n, buf.len(), "the pieces cover the read");
        Ok(())
    }

    /// [`Objset::read`] without the copy: the `len` bytes at `offset` as
    /// shared pieces of the blocks that hold them (cached, dirty or just
    /// read) and runs of zeros, in order. A FUSE read replies with them as
    /// they are (one `writev`), so the daemon never copies the bytes.
    pub fn read_pieces(&self, obj: u64, offset: u64, len: usize) -> Result<Vec<ReadPiece>> {
        self.read_pieces_with_rest(obj, offset, len, None)
    }

    /// [`Objset::read_pieces`], and when `rest` is given, the bytes of the
    /// blocks this read had to fetch from the store that it does not
    /// return (the rest of a record a random read touched in part). A
    /// reader that streams gets none: its blocks are read whole.
    pub fn read_pieces_with_rest(
        &self,
        obj: u64,
        offset: u64,
        len: usize,
        rest: Option<&mut Vec<Rest>>,
    ) -> Result<Vec<ReadPiece>> {
        let r = self.read_inner(obj, offset, len, rest);
        if let Err(DmuError::Store(StoreError::Checksum { .. } | StoreError::Io(_))) = &r {
            if let Some(hook) = self.data_error.read().clone() {
                hook(obj);
            }
        }
        r
    }

    fn read_inner(
        &self,
        obj: u64,
        offset: u64,
        len: usize,
        rest: Option<&mut Vec<Rest>>,
    ) -> Result<Vec<ReadPiece>> {
        check_range(offset, len)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let st = self.shared_with(obj)?;
        let o = st.objs[&obj].read();
        if o.dn.freed {
            return Err(DmuError::NoSuchObject(obj));
        }
        let syncing = st.syncing_of(obj);
        let phys = &o.dn.phys;
        let (bs, maxblkid) = (u64::from(phys.data_block_size), phys.maxblkid);
        // One per block the read touches, in order; those still without
        // their block are in `from_store` (index in `segs`, pointer, the
        // block's offset in the object).
        let mut segs: Vec<Seg> = Vec::new();
        let mut from_store: Vec<(usize, BlockPtr, u64)> = Vec::new();
        // Synced blocks the read covers whole.
        let mut whole = Vec::new();
        let mut done = 0usize;
        while done < len {
            let pos = offset + done as u64;
            let (blkid, in_blk) = (pos / bs, (pos % bs) as usize);
            let n = (bs as usize - in_blk).min(len - done);
            let seg = Seg {
                block: None,
                at: in_blk,
                len: n,
            };
            match source_of(self, &o, syncing, blkid)? {
                Source::Dirty(b) => segs.push(Seg {
                    block: Some(b),
                    ..seg
                }),
                Source::Hole => segs.push(seg),
                Source::Tree(bp) => {
                    if in_blk == 0 && n as u64 == bs {
                        whole.push(bp);
                    }
                    match self.cache.get(&bp) {
                        Some(b) => segs.push(Seg {
                            block: Some(b),
                            ..seg
                        }),
                        None => {
                            from_store.push((segs.len(), bp, pos - in_blk as u64));
                            segs.push(seg);
                        }
                    }
                }
            }
            done += n;
        }
        let (first, last) = (offset / bs, (offset + len as u64 - 1) / bs);
        let mut ahead = Vec::new();
        let mut streaming = false;
        if first <= maxblkid {
            if let Some(blocks) = self.streams.access(obj, first, last, bs, maxblkid) {
                streaming = true;
                for blkid in blocks {
                    // A prefetch that cannot be resolved is not an error of
                    // this read; the read that needs the block will say.
                    if let Ok(Source::Tree(bp)) = source_of(self, &o, syncing, blkid) {
                        if let Claim::Mine(fill) = self.cache.claim(&bp) {
                            ahead.push((bp, fill));
                        }
                    }
                }
            }
        }
        let epoch = self.tree.epoch.load(std::sync::atomic::Ordering::SeqCst);
        // Only a read that goes to the store needs the tree kept (a hit
        // already holds its blocks): every reader of a cached file would
        // otherwise share the guard's lock word.
        let to_read = !from_store.is_empty() || !ahead.is_empty();
        let _readers = to_read.then(|| self.tree.readers.read());
        drop(o);
        drop(st);
        // This read's own blocks first: queued (several: in runs the pool
        // reads with one device read each) or read here (one, or when the
        // queue is full); then those ahead of it.
        let mut waits: Vec<(usize, Option<Arc<Fill>>)> = Vec::with_capacity(from_store.len());
        let mut mine = Vec::new();
        // The blocks this read fetched itself (indexes in `from_store`).
        let mut fetched = Vec::new();
        for (i, (at, bp, _)) in from_store.iter().enumerate() {
            match self.cache.claim(bp) {
                Claim::Cached(b) => segs[*at].block = Some(b),
                Claim::InFlight(fill) => waits.push((i, Some(fill))),
                Claim::Mine(fill) if from_store.len() > 1 => {
                    waits.push((i, Some(fill.clone())));
                    mine.push((*bp, fill));
                    fetched.push(i);
                }
                Claim::Mine(fill) => {
                    segs[*at].block = Some(self.read_claimed(bp, Some(&fill))?);
                    fetched.push(i);
                }
            }
        }
        for run in runs(mine) {
            // A full queue drops the job, which completes its fills
            // empty: the loop below then reads those blocks here.
            self.cache.submit(self.block_job(run, None));
        }
        for run in runs(ahead) {
            self.cache.submit(self.block_job(run, Some(epoch)));
        }
        for (i, fill) in waits {
            let (at, bp, _) = &from_store[i];
            segs[*at].block = Some(match fill.and_then(|f| f.wait()) {
                Some(b) => b,
                // Not read by another thread (failed, or never queued):
                // read it here, which also reports why it failed.
                None => self.read_bp(bp)?,
            });
        }
        // A sequential reader's blocks, read whole, are not kept: the
        // kernel's page cache holds them now (FUSE, `FOPEN_KEEP_CACHE`),
        // and a second copy here would only grow the cache by every byte
        // streamed, in fresh memory — whose page faults cost more CPU than
        // the read itself (a third of the daemon's, bench/peers.sh cold
        // sequential read). Its memory is used again for the blocks ahead.
        if streaming {
            for bp in &whole {
                self.cache.remove(bp);
            }
        } else if let Some(rest) = rest {
            for i in fetched {
                let (at, _, block_off) = from_store[i];
                let seg = &segs[at];
                let Some(b) = &seg.block else { continue };
                let end = (seg.at + seg.len).min(b.len());
                for r in [0..seg.at.min(end), end..b.len()] {
                    if !r.is_empty() {
                        rest.push(Rest {
                            offset: block_off + r.start as u64,
                            block: b.clone(),
                            range: r,
                        });
                    }
                }
            }
        }
        let mut pieces = Vec::with_capacity(segs.len() + 1);
        for seg in segs {
            seg.push_to(&mut pieces);
        }
        Ok(pieces)
    }

    /// Blocks for the cache's read threads: a prefetch (`epoch` of the
    /// tree it was resolved in) is dropped if the tree moves on before it
    /// runs; a demand read (`None`) is waited for by a reader holding the
    /// tree guard.
    fn block_job(&self, blocks: Vec<(BlockPtr, Arc<Fill>)>, epoch: Option<u64>) -> BlockJob {
        BlockJob {
            store: self.store.clone(),
            cache: self.cache.clone(),
            guard: self.tree.clone(),
            epoch,
            blocks,
        }
    }

    /// Writes `data` at `offset` in the open txg (partial blocks are
    /// read, modified and kept dirty in memory).
    pub fn write(&self, obj: u64, offset: u64, data: &[u8]) -> Result<()> {
        self.write_charged(obj, offset, data).map(|_| ())
    }

    /// [`Objset::write`], returning the bytes of blocks it made dirty in
    /// the open txg that were not dirty there already: what the write
    /// adds to the memory the txg holds. A 4 KiB write into a 128 KiB
    /// record not yet dirty adds 128 KiB; a second one into the same
    /// record adds nothing.
    pub fn write_charged(&self, obj: u64, offset: u64, data: &[u8]) -> Result<u64> {
        check_range(offset, data.len())?;
        // A first look, sharing the object: its block size, and the blocks
        // the write changes in part that must be read first.
        let st = self.shared_with(obj)?;
        let o = st.objs[&obj].read();
        if o.dn.freed {
            return Err(DmuError::NoSuchObject(obj));
        }
        let bs = u64::from(o.dn.phys.data_block_size);
        let missing = self.uncached_partial_blocks(&o, st.syncing_of(obj), offset, data.len());
        // Read without any lock, as `read_inner` does, holding the tree
        // guard (taken before the state is let go: the sync that replaces
        // these blocks waits for it before freeing them).
        let readers = (!missing.is_empty()).then(|| self.tree.readers.read());
        drop(o);
        drop(st);
        for bp in &missing {
            let _ = self.read_bp(bp);
        }
        drop(readers);
        // The blocks the write replaces whole, copied without a lock: a
        // 1 MiB write is eight 128 KiB copies (into memory that may be
        // fresh), which would hold up every other call on the object.
        let whole = |bs: u64| {
            let first = offset.div_ceil(bs) * bs;
            let skip = (first - offset) as usize;
            data.get(skip..)
                .unwrap_or_default()
                .chunks_exact(bs as usize)
        };
        let mut copies: Vec<Vec<u8>> = whole(bs).map(<[u8]>::to_vec).collect();
        // The change: the state shared, this object alone, so writes to
        // other objects go on meanwhile.
        let st = self.shared_with(obj)?;
        let mut o = st.objs[&obj].write();
        if o.dn.freed {
            return Err(DmuError::NoSuchObject(obj));
        }
        let mut newly_dirty = 0;
        let mut om = ObjMut {
            os: self,
            id: obj,
            o: &mut o,
            syncing: st.syncing_of(obj),
            dirty: &st.dirty,
            newly_dirty: &mut newly_dirty,
        };
        // The block size may have changed meanwhile (a file's only block
        // grows with recordsize): then the copies do not fit and are not
        // used.
        let bs_now = u64::from(om.o.dn.phys.data_block_size);
        if bs_now != bs {
            copies.clear();
        }
        let bs = bs_now;
        let mut copies = copies.into_iter();
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let (blkid, in_blk) = (pos / bs, (pos % bs) as usize);
            let n = (bs as usize - in_blk).min(data.len() - done);
            let src = &data[done..done + n];
            if n as u64 == bs {
                // The copies are of these blocks, in this order.
                let copy = copies.next().unwrap_or_else(|| src.to_vec());
                om.put_streamed_block(blkid, copy)?;
            } else {
                om.modify_block(blkid, false, |b| b[in_blk..in_blk + n].copy_from_slice(src))?;
            }
            done += n;
        }
        Ok(newly_dirty)
    }

    /// The synced blocks a write of `len` bytes at `offset` changes
    /// only in part (its first and last block) that are neither dirty nor
    /// holes nor cached. `write` reads them into the cache before it
    /// changes anything: reading a device under `state` would stall every
    /// other call on this object set for the read — every writer of a
    /// dataset queued behind one random write into a block not cached
    /// (OpenZFS's `dbuf_read` likewise holds only the dbuf). Best effort:
    /// a block left out here, or that the cache lets go before the write,
    /// is read under `state` as before, and that read reports any error.
    fn uncached_partial_blocks(
        &self,
        o: &Obj,
        syncing: Option<&DirtyRecord>,
        offset: u64,
        len: usize,
    ) -> Vec<BlockPtr> {
        if len == 0 {
            return Vec::new();
        }
        let bs = u64::from(o.dn.phys.data_block_size);
        let end = offset + len as u64; // `check_range`: no overflow
        let (first, last) = (offset / bs, (end - 1) / bs);
        let partial = |blkid: u64| offset > blkid * bs || end < (blkid + 1) * bs;
        let ends = std::iter::once(first).chain((last != first).then_some(last));
        let mut missing = Vec::new();
        for blkid in ends.filter(|&b| partial(b)) {
            if let Ok(Source::Tree(bp)) = source_of(self, o, syncing, blkid) {
                if self.cache.get(&bp).is_none() {
                    missing.push(bp);
                }
            }
        }
        missing
    }

    /// Writes block `blkid` of `obj`, dirty in the open txg `txg`, to its
    /// final place now, and returns its pointer (ZFS's `dmu_sync`, for the
    /// intent log's indirect writes). The sync of `txg` then uses this
    /// pointer instead of writing the block again, as long as the block
    /// is not changed before; if it is, the block written here is freed
    /// at that sync. `None` when there is nothing to write that way: the
    /// block is not dirty in `txg`, `txg` is no longer open, or the block
    /// is all zeros (a hole at sync).
    pub fn sync_block(&self, obj: u64, blkid: u64, txg: u64) -> Result<Option<BlockPtr>> {
        // Freezing `txg` waits for this: the block cannot move to the
        // syncing record between the check and the registration.
        let _open = self.txg_lock.read_recursive();
        let (data, props) = {
            let mut st = self.state.lock();
            if txg <= st.frozen_txg {
                return Ok(None);
            }
            let policy = st.policy;
            let Some(o) = st.obj(obj) else {
                return Ok(None);
            };
            let Some(data) = o.open.as_ref().and_then(|r| r.blocks.get(&blkid)) else {
                return Ok(None);
            };
            let props = policy.props(o.dn.phys.typ, 0, 1);
            if props.compression != Compression::Off && crate::dirty::is_zero(data) {
                return Ok(None);
            }
            (data.clone(), props)
        };
        let bp = self.store.write(txg, &data, &props)?;
        let mut st = self.state.lock();
        let rec = st.open_get(obj);
        match rec {
            Some(r) if r.blocks.get(&blkid).is_some_and(|b| Arc::ptr_eq(b, &data)) => {
                r.overrides.insert(blkid, (data, bp));
            }
            // Changed meanwhile: the bytes written are still a state the
            // block had (good for the log), but the sync writes the newer.
            _ => st.orphans.push(bp),
        }
        Ok(Some(bp))
    }

    /// Frees a block that no object references (an indirect write's block
    /// claimed from the intent log, replayed by copy) in `txg`.
    pub fn free_unreferenced(&self, txg: u64, bp: &BlockPtr) {
        self.store.free(txg, bp);
    }

    /// Reads a block by its pointer (checksum verified): an indirect
    /// write's block at log replay.
    pub fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>> {
        Ok(self.read_bp(bp)?.to_vec())
    }

    /// Punches a hole: whole blocks in the range are freed, partial ones
    /// zeroed. Holes read as zeros and take no space.
    pub fn free_range(&self, obj: u64, offset: u64, len: u64) -> Result<()> {
        let mut l = self.locked();
        l.free_range(obj, offset, offset.saturating_add(len))
    }

    /// Frees everything from `new_size` on and zeroes the tail of the
    /// block containing `new_size`.
    pub fn truncate(&self, obj: u64, new_size: u64) -> Result<()> {
        let mut l = self.locked();
        l.free_range(obj, new_size, u64::MAX)?;
        let bs = u64::from(l.dnode(obj)?.phys.data_block_size);
        let last = new_size.div_ceil(bs).saturating_sub(1);
        let dn = l.dnode_mut(obj)?;
        dn.phys.maxblkid = dn.phys.maxblkid.min(last);
        l.st.open_rec(obj);
        Ok(())
    }

    /// SEEK_DATA: the first offset >= `offset` inside a data block.
    pub fn next_data(&self, obj: u64, offset: u64) -> Result<Option<u64>> {
        let mut l = self.locked();
        let bs = u64::from(l.dnode(obj)?.phys.data_block_size);
        Ok(l.next_data_block(obj, offset / bs)?
            .map(|b| (b * bs).max(offset)))
    }

    /// SEEK_HOLE: the first offset >= `offset` inside a hole (the end of
    /// the object counts as a hole).
    pub fn next_hole(&self, obj: u64, offset: u64) -> Result<u64> {
        let mut l = self.locked();
        let bs = u64::from(l.dnode(obj)?.phys.data_block_size);
        Ok((l.next_hole_block(obj, offset / bs)? * bs).max(offset))
    }

    /// Every block pointer reachable from the synced root, header first
    /// (for leak checks and, later, scrub and send).
    pub fn walk_blocks(&self, f: &mut dyn FnMut(&BlockPtr)) -> Result<()> {
        self.locked().walk_blocks(f)
    }

    /// [`Objset::walk_blocks`] of the blocks born after `txg` only, in
    /// time proportional to them (what a rollback or a receive frees).
    pub fn walk_blocks_born_after(&self, txg: u64, f: &mut dyn FnMut(&BlockPtr)) -> Result<()> {
        self.locked().walk_blocks_born_after(txg, f)
    }

    /// The dnode of `obj` as this object set has it (`None`: free).
    pub fn dnode_phys(&self, obj: u64) -> Result<Option<tarn_format::dnode::DnodePhys>> {
        match self.with_obj(obj, |_, o| o.dn.phys.clone()) {
            Ok(phys) => Ok(Some(phys)),
            Err(DmuError::NoSuchObject(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The objects whose dnodes may have changed since `txg`, with their
    /// dnodes as of the last sync (`None`: the slot is free): every slot
    /// of each dnode block born after `txg`. An object outside them is
    /// exactly as it was at `txg` (`zfs diff`, incremental send).
    pub fn dnodes_born_after(
        &self,
        txg: u64,
    ) -> Result<Vec<(u64, Option<tarn_format::dnode::DnodePhys>)>> {
        let (meta_root, root) = {
            let st = self.state.lock();
            (st.meta.root, st.root_bp)
        };
        if root.is_hole() {
            return Ok(Vec::new());
        }
        let mut blocks = Vec::new();
        self.walk_born_after(&meta_root, 0, txg, &mut |blkid, bp| {
            blocks.push((blkid, *bp))
        })?;
        let per = tarn_format::dnode::DNODES_PER_BLOCK;
        let mut out = Vec::new();
        for (blkid, bp) in blocks {
            let block = self.read_bp(&bp)?;
            for (slot, raw) in block
                .chunks_exact(tarn_format::dnode::DNODE_SIZE)
                .enumerate()
            {
                let obj = blkid * per + slot as u64;
                if obj == 0 {
                    continue;
                }
                out.push((obj, tarn_format::dnode::DnodePhys::decode(raw)?));
            }
        }
        Ok(out)
    }

    /// Walks the synced tree for a scan (scrub, resilver), resumable by
    /// object. When `from` is 0 it first shows `block(0, bp)` the header
    /// block and every block of the meta-dnode tree; then, in object
    /// order, each allocated object `>= from`: `object(obj, dnode)` says
    /// whether to walk its blocks (`block(obj, bp)` for each, parents
    /// before children), skip it, or stop. Returns the object to resume at
    /// after a stop, `None` when the walk is complete.
    ///
    /// Subtrees born before `min_birth` are skipped (a resilver of the
    /// txgs a device missed; 0 for everything).
    ///
    /// Meant for an object set opened at a committed root that nothing else
    /// uses (the state lock is held throughout).
    pub fn scan_synced(
        &self,
        from: u64,
        min_birth: u64,
        block: &mut dyn FnMut(u64, &BlockPtr),
        object: &mut dyn FnMut(u64, &tarn_format::dnode::DnodePhys) -> ScanStep,
    ) -> Result<Option<u64>> {
        self.locked().scan_synced(from, min_birth, block, object)
    }
}

pub(crate) fn check_block_size(bs: u32) -> Result<()> {
    let b = u64::from(bs);
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&b) || b % MIN_BLOCK_SIZE != 0 {
        return Err(DmuError::InvalidArgument("block size"));
    }
    Ok(())
}

fn check_range(offset: u64, len: usize) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= MAX_OBJECT_BYTES => Ok(()),
        _ => Err(DmuError::TooBig("offset")),
    }
}

/// Copies from `src[at..]` into `out`, zero-filling past the end of `src`
/// (a block written before a block size change may be shorter).
/// Copies a block read for `Objset::read` into its place in `buf`.
/// Part of one block a read returns: `len` bytes from `at` of `block`
/// (`None`: a hole), zeros past the end of a block shorter than that.
struct Seg {
    block: Option<Block>,
    at: usize,
    len: usize,
}

impl Seg {
    fn push_to(self, pieces: &mut Vec<ReadPiece>) {
        let avail = match &self.block {
            Some(b) => b.len().saturating_sub(self.at).min(self.len),
            None => 0,
        };
        if let Some(b) = self.block.filter(|_| avail > 0) {
            pieces.push(ReadPiece::Bytes(b, self.at..self.at + avail));
        }
        if avail < self.len {
            match pieces.last_mut() {
                Some(ReadPiece::Zeros(n)) => *n += self.len - avail,
                _ => pieces.push(ReadPiece::Zeros(self.len - avail)),
            }
        }
    }
}

/// Bytes of a block that a read fetched from the store but did not
/// return ([`Objset::read_pieces_with_rest`]).
#[derive(Debug, Clone)]
pub struct Rest {
    /// Where `block[range]` starts in the object.
    pub offset: u64,
    pub block: Block,
    pub range: std::ops::Range<usize>,
}

impl Rest {
    pub fn bytes(&self) -> &[u8] {
        &self.block[self.range.clone()]
    }
}

/// A run of the bytes [`Objset::read_pieces`] returns.
#[derive(Debug, Clone)]
pub enum ReadPiece {
    /// These bytes of a block (shared: blocks are never changed in place).
    Bytes(Block, std::ops::Range<usize>),
    /// This many zero bytes (holes, the tail of a short block).
    Zeros(usize),
}

impl ReadPiece {
    pub fn len(&self) -> usize {
        match self {
            ReadPiece::Bytes(_, r) => r.len(),
            ReadPiece::Zeros(n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `pieces` one after another to the start of `buf` (which
    /// must hold them all) and returns how many bytes that is.
    pub fn copy_all(pieces: &[ReadPiece], buf: &mut [u8]) -> usize {
        let mut at = 0;
        for p in pieces {
            let out = &mut buf[at..at + p.len()];
            match p {
                ReadPiece::Bytes(b, r) => out.copy_from_slice(&b[r.clone()]),
                ReadPiece::Zeros(_) => out.fill(0),
            }
            at += p.len();
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use tarn_format::zap::ZapValue;
    use tarn_pool::store::MemBlockStore;

    use super::*;

    /// Blocks reachable from the synced root, each exactly once.
    fn reachable(os: &Objset) -> usize {
        let mut seen = HashSet::new();
        os.walk_blocks(&mut |bp| assert!(seen.insert(bp.dvas[0]), "{bp:?} twice"))
            .unwrap();
        seen.len()
    }

    #[test]
    fn claim_takes_a_free_number_and_refuses_a_used_one() {
        let store = Arc::new(MemBlockStore::new());
        let os = Objset::create(store.clone(), ObjsetType::Filesystem);
        os.object_claim(1000, ObjType::PlainFile, 4096, 8).unwrap();
        assert_eq!(os.object_info(1000).unwrap().block_size, 4096);
        assert_eq!(os.bonus(1000).unwrap(), vec![0; 8]);
        os.write(1000, 10, b"claimed").unwrap();
        assert!(matches!(
            os.object_claim(1000, ObjType::PlainFile, 512, 0),
            Err(DmuError::ObjectInUse(1000))
        ));
        assert!(matches!(
            os.object_claim(0, ObjType::PlainFile, 512, 0),
            Err(DmuError::InvalidArgument(_))
        ));
        // The lowest free number is still handed out first.
        assert_eq!(os.object_create(ObjType::PlainFile, 512, 0).unwrap(), 1);
        os.zap_claim(7, ObjType::Zap).unwrap();
        os.zap_add(7, b"k", &ZapValue::u64(5)).unwrap();
        let root = os.sync(1).unwrap();
        assert_eq!(reachable(&os), store.live_blocks());
        let os = Objset::open(store.clone(), &root).unwrap();
        let mut buf = [0u8; 7];
        os.read(1000, 10, &mut buf).unwrap();
        assert_eq!(&buf, b"claimed");
        assert_eq!(os.zap_lookup(7, b"k").unwrap().as_single_u64(), Some(5));
        assert!(matches!(
            os.object_claim(1000, ObjType::PlainFile, 512, 0),
            Err(DmuError::ObjectInUse(1000))
        ));
        assert_eq!(os.object_create(ObjType::PlainFile, 512, 0).unwrap(), 2);
    }

    #[test]
    fn claim_recreates_an_object_freed_in_the_open_txg() {
        let store = Arc::new(MemBlockStore::new());
        let os = Objset::create(store.clone(), ObjsetType::Filesystem);
        let obj = os.object_create(ObjType::PlainFile, 512, 0).unwrap();
        // Several levels of old tree for the claim's sync to free.
        os.write(obj, 0, &[1; 1536]).unwrap();
        os.write(obj, 40 << 20, b"far").unwrap();
        os.sync(1).unwrap();
        os.object_free(obj).unwrap();
        os.zap_claim(obj, ObjType::Zap).unwrap();
        os.zap_add(obj, b"k", &ZapValue::u64(9)).unwrap();
        os.object_free(obj).unwrap();
        os.object_claim(obj, ObjType::PlainFile, 4096, 0).unwrap();
        let mut buf = vec![9u8; 4096];
        os.read(obj, 0, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "old contents show through");
        os.write(obj, 100, b"new").unwrap();
        let root = os.sync(2).unwrap();
        assert_eq!(reachable(&os), store.live_blocks(), "leak or lost block");
        let os = Objset::open(store.clone(), &root).unwrap();
        let info = os.object_info(obj).unwrap();
        assert_eq!(
            (info.typ, info.block_size, info.maxblkid),
            (ObjType::PlainFile, 4096, 0)
        );
        let mut buf = vec![0u8; 4096];
        os.read(obj, 0, &mut buf).unwrap();
        assert_eq!(&buf[100..103], b"new");
        assert_eq!(buf.iter().filter(|&&b| b != 0).count(), 3);
    }

    #[test]
    fn claim_waits_for_a_free_in_a_txg_being_synced() {
        let store = Arc::new(MemBlockStore::new());
        let os = Objset::create(store.clone(), ObjsetType::Filesystem);
        let obj = os.object_create(ObjType::PlainFile, 512, 0).unwrap();
        os.write(obj, 0, b"old").unwrap();
        os.sync(1).unwrap();
        os.object_free(obj).unwrap();
        os.freeze_txg(2);
        assert!(matches!(
            os.object_claim(obj, ObjType::PlainFile, 512, 0),
            Err(DmuError::ObjectInUse(_))
        ));
        os.sync(2).unwrap();
        os.object_claim(obj, ObjType::PlainFile, 512, 0).unwrap();
        os.sync(3).unwrap();
        assert_eq!(reachable(&os), store.live_blocks());
    }
}
