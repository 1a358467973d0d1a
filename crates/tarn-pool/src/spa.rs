//! The storage pool: vdevs + allocator + I/O pipeline + atomic commit.
//!
//! A [`Spa`] is one imported pool. Its life:
//!
//! 1. `create` writes fresh labels on every leaf and an initial uberblock,
//!    or `import` assembles the vdev tree from the labels it finds, picks
//!    the newest valid uberblock and replays the space map log.
//! 2. While imported, the object layer writes blocks for txg N through the
//!    [`BlockStore`] implementation: each block is compressed (if that saves
//!    a sector and 12.5 %), checksummed, given `copies` DVAs by the
//!    allocator and written to every copy. Nothing live is overwritten:
//!    allocation only hands out space that is free in the last committed
//!    state.
//! 3. `commit(N, mos_root)` makes txg N durable and visible atomically:
//!    append N's allocations and frees to the space map log, flush every
//!    device, write the uberblock for N into its ring slot of every label of
//!    every leaf, flush again. Only then are N's frees released for reuse.
//!
//! **Invariant (crash safety):** at every instant, the newest valid
//! uberblock on the devices references only blocks that are durable and
//! unmodified since it was written. It follows from three rules: blocks are
//! flushed before the uberblock naming them is written; an uberblock slot is
//! self-checksummed so a torn one is ignored; space freed in txg N is not
//! reallocated until N's uberblock is durable.
//!
//! The top-level vdevs themselves can change while the pool runs (`zpool
//! add`, `remove`, `detach`) and a log device can fail: see [`crate::vdevs`].
//!
//! Locking: `state` (committed uberblock, space map chain, pending
//! configuration change), then `alloc` (allocator), then `vdevs` (the set
//! of top-level vdevs, a copy-on-write snapshot); each is only ever taken
//! in that order. `commit` holds `state` throughout. Block reads and writes
//! take `alloc` only for the allocation itself and `vdevs` only to clone
//! the snapshot, never across device I/O.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use tarn_format::label::{LabelConfig, PoolState, VdevClass, VdevConfig, VdevKind};
use tarn_format::spacemap::{SpaceMapBlock, SpaceMapEntry, SpaceMapKind, SPACEMAP_ENTRIES_MAX};
use tarn_format::{BlockPtr, ChecksumAlg, Compression, Dva, ObjType, Uberblock};
use tarn_vdev::{BlockDevice, Layout, Leaf, TopVdev, VdevError};

use crate::health::{live_config, load_leaf_states, stand_in_size};
use crate::metaslab::{AllocError, Allocator, MetaslabGroup};
use crate::store::{BlockStore, BlockWrite, LogStore, StoreError, WriteProps};
use crate::suspend::SuspendGate;
use crate::vdevs::{ConfigChange, Top, VdevSet};
use crate::{accounting, tunables};
use tarn_format::zil::LogPtr;

/// The first txg of a new pool (as OpenZFS's TXG_INITIAL).
pub const TXG_INITIAL: u64 = 4;

#[derive(Debug, thiserror::Error)]
pub enum SpaError {
    #[error(transparent)]
    Vdev(#[from] VdevError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Import(String),
    /// A configuration change was refused (reason given).
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Corrupted(#[from] tarn_format::Corrupted),
}

/// Why one copy of a block could not be read.
enum CopyError {
    /// No device of its vdev answered (the reason).
    Unreachable(String),
    Store(StoreError),
}

impl From<StoreError> for CopyError {
    fn from(e: StoreError) -> CopyError {
        CopyError::Store(e)
    }
}

/// Everything known about the newest committed txg.
pub(crate) struct Committed {
    pub(crate) ub: Uberblock,
    /// Space map chain: every block from oldest to newest, and entries.
    chain: Vec<BlockPtr>,
    chain_entries: usize,
    /// A change of the vdev configuration the next commit makes durable.
    pub(crate) change: Option<ConfigChange>,
}

pub struct Spa {
    name: Mutex<String>,
    guid: u64,
    hostname: String,
    /// The top-level vdevs by id (see [`crate::vdevs`]).
    pub(crate) vdevs: RwLock<Arc<VdevSet>>,
    pub(crate) alloc: Mutex<Allocator>,
    pub(crate) state: Mutex<Committed>,
    /// Smallest ashift over normal-class vdevs: the compression rule's sector.
    pub(crate) min_ashift: AtomicU8,
    /// `tunables::SPACEMAP_CONDENSE_MIN_ENTRIES`, lowered by tests so that
    /// short workloads condense too.
    condense_min_entries: AtomicUsize,
    /// When the pool was created or imported (`zpool iostat` rates).
    opened: Instant,
    /// Suspended I/O and `failmode` (see [`crate::suspend`]).
    pub(crate) gate: Arc<SuspendGate>,
    /// Hot spares (see [`crate::spares`]).
    pub(crate) spares: Mutex<Vec<crate::spares::SpareDev>>,
    /// Leaves faulted or removed since the last look: a hot spare should
    /// stand in for each (see [`crate::spares`]).
    pub(crate) spare_wanted: Mutex<Vec<u64>>,
    /// Original devices of spare pairs brought back (`zpool clear`,
    /// `online`) or replaced: once complete, their spare returns (see
    /// [`crate::spares`]; OpenZFS's `vdev_unspare`).
    pub(crate) unspare: Mutex<std::collections::HashSet<u64>>,
    /// Active feature bits (`tarn_format::KNOWN_FEATURE_BITS`), written in
    /// every uberblock from the next commit on.
    features: AtomicU64,
    /// The allocation throttle (see [`crate::throttle`]).
    pub throttle: crate::throttle::AllocThrottle,
}

/// One top-level vdev to create: its layout, leaves and ashift.
pub struct NewTop {
    pub layout: Layout,
    pub class: VdevClass,
    pub ashift: u8,
    /// (path, device, is_block_device)
    pub leaves: Vec<(String, Arc<dyn BlockDevice>, bool)>,
}

impl NewTop {
    /// A normal-class mirror of `devs` with ashift 12, its leaves named
    /// `mem0`, `mem1`, … (devices without a path: tests and simulations).
    pub fn mem_mirror(devs: &[Arc<dyn BlockDevice>]) -> NewTop {
        NewTop {
            layout: Layout::Mirror,
            class: VdevClass::Normal,
            ashift: 12,
            leaves: devs
                .iter()
                .enumerate()
                .map(|(i, d)| (format!("mem{i}"), d.clone(), false))
                .collect(),
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn layout_kind(layout: &Layout) -> VdevKind {
    match layout {
        Layout::Single => VdevKind::File,
        Layout::Mirror => VdevKind::Mirror,
        Layout::Raidz { nparity } => VdevKind::Raidz {
            nparity: *nparity as u8,
        },
    }
}

/// A random 64-bit GUID (non-zero).
pub fn new_guid() -> u64 {
    loop {
        let mut b = [0u8; 8];
        if std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
            .is_err()
        {
            // Fall back to time and address entropy; GUIDs need uniqueness,
            // not secrecy.
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1);
            b = (t ^ (&b as *const _ as u64).rotate_left(32)).to_le_bytes();
        }
        let g = u64::from_le_bytes(b);
        if g != 0 {
            return g;
        }
    }
}

pub(crate) fn metaslab_group(top: &Arc<TopVdev>, cfg: &VdevConfig) -> MetaslabGroup {
    let count = accounting::metaslab_count(cfg.asize, cfg.metaslab_shift);
    let t = Arc::clone(top);
    MetaslabGroup::new(
        cfg.id as u32,
        cfg.ashift,
        cfg.class,
        cfg.metaslab_shift,
        count,
        Box::new(move |psize| t.psize_to_asize(psize)),
    )
}

impl Spa {
    /// Creates a pool on fresh devices, writing labels and txg `TXG_INITIAL`.
    /// The caller has validated names, sizes and that no device is in use.
    pub fn create(name: &str, new_tops: Vec<NewTop>) -> Result<Spa, SpaError> {
        let guid = new_guid();
        let mut tops = Vec::new();
        for (id, nt) in new_tops.into_iter().enumerate() {
            let (top, cfg) = build_top(id as u32, nt, TXG_INITIAL)?;
            tops.push((Arc::new(top), cfg));
        }
        let spa = Spa::assemble(name, guid, tops);
        spa.write_labels(PoolState::Active, TXG_INITIAL)?;
        Ok(spa)
    }

    /// The in-memory pool over opened top-level vdevs and their configs
    /// (ids may leave holes), with every metaslab free and nothing
    /// committed yet: `create` writes its labels next, `open` replays the
    /// space map log into it.
    fn assemble(name: &str, guid: u64, tops: Vec<(Arc<TopVdev>, VdevConfig)>) -> Spa {
        let groups = tops.iter().map(|(t, c)| metaslab_group(t, c)).collect();
        let set = VdevSet::from_tops(tops.into_iter().map(|(t, c)| Top::new(t, c)).collect());
        Spa {
            name: Mutex::new(name.to_string()),
            guid,
            hostname: hostname(),
            min_ashift: AtomicU8::new(set.min_ashift()),
            vdevs: RwLock::new(Arc::new(set)),
            alloc: Mutex::new(Allocator::new(groups)),
            state: Mutex::new(Committed {
                ub: Uberblock::new(0, 0, 0),
                chain: Vec::new(),
                chain_entries: 0,
                change: None,
            }),
            condense_min_entries: AtomicUsize::new(tunables::SPACEMAP_CONDENSE_MIN_ENTRIES),
            opened: Instant::now(),
            gate: Arc::new(SuspendGate::default()),
            spares: Mutex::new(Vec::new()),
            spare_wanted: Mutex::new(Vec::new()),
            unspare: Mutex::default(),
            features: AtomicU64::new(0),
            throttle: Default::default(),
        }
    }

    /// Marks feature `bit` active: every uberblock from the next commit on
    /// carries it (a feature is never deactivated).
    pub fn activate_feature(&self, bit: u64) {
        debug_assert_eq!(bit & !tarn_format::KNOWN_FEATURE_BITS, 0, "unknown feature");
        self.features.fetch_or(bit, Ordering::Relaxed);
    }

    /// The active feature bits.
    pub fn features(&self) -> u64 {
        self.features.load(Ordering::Relaxed)
    }

    pub fn name(&self) -> String {
        self.name.lock().clone()
    }
    pub fn guid(&self) -> u64 {
        self.guid
    }
    /// The top-level vdevs now, in id order (holes left out).
    pub fn tops(&self) -> Vec<Arc<TopVdev>> {
        self.vdev_set().live().map(|t| t.vdev.clone()).collect()
    }
    /// Their configs, in id order (each names its id).
    pub fn configs(&self) -> Vec<VdevConfig> {
        self.vdev_set().live().map(|t| live_config(t)).collect()
    }
    /// Each top-level vdev with its config, in id order (one snapshot).
    pub fn top_configs(&self) -> Vec<(Arc<TopVdev>, VdevConfig)> {
        self.vdev_set()
            .live()
            .map(|t| (t.vdev.clone(), live_config(t)))
            .collect()
    }
    /// The current set of top-level vdevs (a snapshot).
    pub(crate) fn vdev_set(&self) -> Arc<VdevSet> {
        self.vdevs.read().clone()
    }
    /// How long the pool has been open (what `zpool iostat` divides by).
    pub fn open_duration(&self) -> std::time::Duration {
        self.opened.elapsed()
    }
    /// Condense the space map log once it holds more than `n` entries (and
    /// more than `SPACEMAP_CONDENSE_RATIO` times a fresh base). For tests.
    pub fn set_condense_min_entries(&self, n: usize) {
        self.condense_min_entries.store(n, Ordering::Relaxed);
    }

    /// The last committed uberblock.
    pub fn uberblock(&self) -> Uberblock {
        self.state.lock().ub
    }
    pub fn last_synced_txg(&self) -> u64 {
        self.state.lock().ub.txg
    }

    /// Writes all four labels of every leaf with `state` (a faulted log
    /// vdev's leaves are skipped: they cannot take it, and the pool does
    /// not need them).
    pub fn write_labels(&self, state: PoolState, txg: u64) -> Result<(), SpaError> {
        let set = self.vdev_set();
        for top in set.live().filter(|t| !t.is_faulted()) {
            self.write_top_labels(&set, top, state, txg)?;
        }
        self.write_spare_labels(&set, txg);
        Ok(())
    }

    /// Writes the labels of one top-level vdev's leaves.
    pub(crate) fn write_top_labels(
        &self,
        set: &VdevSet,
        top: &Top,
        state: PoolState,
        txg: u64,
    ) -> Result<(), SpaError> {
        let cfg = &live_config(top);
        // A leaf that takes no I/O keeps its old label: it is stale, and
        // the newer labels of the others say so (offline, DTL).
        let leaves = top.vdev.leaves().iter().zip(cfg.leaves());
        for (leaf, lcfg) in leaves.filter(|(l, _)| l.is_available()) {
            let label = LabelConfig {
                version: tarn_format::FORMAT_VERSION,
                name: self.name(),
                pool_guid: self.guid,
                state,
                txg,
                hostname: self.hostname.clone(),
                guid: lcfg.guid,
                top_guid: cfg.guid,
                vdev_children: set.children(),
                vdev_tree: cfg.clone(),
                features_for_read: vec![],
                holes: set.holes(),
                spares: self.spare_configs(),
                logs: set.log_configs(),
            };
            tarn_vdev::write_labels(leaf.dev.as_ref(), &label)?;
        }
        Ok(())
    }

    /// Renames the pool (import under a new name); labels follow at commit.
    pub fn set_name(&self, name: &str) {
        *self.name.lock() = name.to_string();
    }

    // ---- I/O pipeline -------------------------------------------------

    pub(crate) fn top(&self, vdev: u32) -> Result<Arc<TopVdev>, StoreError> {
        self.vdevs
            .read()
            .get(vdev)
            .map(|t| t.vdev.clone())
            .ok_or_else(|| {
                StoreError::Corrupted(tarn_format::Corrupted::new(
                    "dva",
                    format!("vdev {vdev} does not exist"),
                ))
            })
    }

    /// Writes every copy; a lost top-level vdev suspends the pool until
    /// `zpool clear` (see [`crate::health`]).
    fn write_copies(&self, dvas: &[Dva], stored: &[u8]) -> Result<(), StoreError> {
        for dva in dvas {
            let top = self.top(dva.vdev)?;
            self.until_resumed(
                || top.write(dva.offset, stored),
                |e| matches!(e, VdevError::TooManyFailures { .. }),
            )
            .map_err(|e| StoreError::Io(e.to_string()))?;
        }
        Ok(())
    }

    /// Reads one copy of `bp`. The error says whether no device of its
    /// vdev answered at all (`Unreachable`, the reason), which may
    /// suspend the pool (see `BlockStore::read`).
    fn read_copy(&self, bp: &BlockPtr, dva: &Dva) -> Result<Vec<u8>, CopyError> {
        let stored = self.read_copy_stored(bp, dva)?;
        if bp.comp == Compression::Off {
            return Ok(stored);
        }
        tarn_codec::decompress(bp.comp, &stored, bp.lsize as usize)
            .map_err(|e| CopyError::Store(e.into()))
    }

    /// One copy's stored bytes, verified against the pointer's checksum.
    fn read_copy_stored(&self, bp: &BlockPtr, dva: &Dva) -> Result<Vec<u8>, CopyError> {
        let top = self.top(dva.vdev)?;
        let mut verify = |data: &[u8]| {
            bp.cksum == ChecksumAlg::Off || tarn_codec::checksum(bp.cksum, data) == bp.checksum
        };
        let birth = if bp.phys_birth != 0 {
            bp.phys_birth
        } else {
            bp.birth
        };
        let stored = top
            .read_born(dva.offset, u64::from(bp.psize), birth, &mut verify)
            .map_err(|e| match e {
                VdevError::Unreachable { .. } => CopyError::Unreachable(e.to_string()),
                _ => CopyError::Store(StoreError::Checksum {
                    vdev: dva.vdev,
                    offset: dva.offset,
                }),
            })?;
        Ok(stored)
    }

    /// The data-class top-level vdevs, fastest measured first: where the
    /// intent log goes when the pool has no log device (a slow vdev would
    /// make every `fsync` wait for it).
    fn data_vdevs_fastest_first(&self) -> Vec<u32> {
        let ids: Vec<u32> = self
            .vdev_set()
            .live()
            .filter(|t| t.config.class == VdevClass::Normal)
            .map(|t| t.vdev.id())
            .collect();
        if ids.len() < 2 {
            return ids;
        }
        self.throttle.fastest_first(&ids)
    }

    fn allocate(&self, txg: u64, psize: u64, copies: usize) -> Result<Vec<Dva>, StoreError> {
        self.alloc
            .lock()
            .alloc(txg, psize, copies)
            .map_err(|AllocError::NoSpace| StoreError::NoSpace)
    }

    // ---- Commit ---------------------------------------------------------

    /// Makes txg `txg` durable with `mos_root` as the pool's root.
    ///
    /// A pending configuration change (see [`crate::vdevs`]) is made
    /// durable by the same commit: the uberblock carries the new
    /// configuration's GUID sum, and the labels follow it.
    pub fn commit(&self, txg: u64, mos_root: BlockPtr) -> Result<(), SpaError> {
        let mut state = self.state.lock();
        assert!(txg > state.ub.txg, "txg {txg} after {}", state.ub.txg);
        // A leaf faulted or degraded now: the labels record its state.
        if self.diagnose() {
            state.change.get_or_insert_with(ConfigChange::default);
        }
        let change = state.change.take();
        match self.commit_locked(&mut state, txg, mos_root, change.as_ref()) {
            Ok(()) => {
                if let Some(change) = change {
                    self.config_durable(change);
                }
                Ok(())
            }
            Err(e) => {
                // Not durable: the next commit that works writes it.
                state.change = change;
                Err(e)
            }
        }
    }

    fn commit_locked(
        &self,
        state: &mut Committed,
        txg: u64,
        mos_root: BlockPtr,
        change: Option<&ConfigChange>,
    ) -> Result<(), SpaError> {
        let condense = change.is_some_and(|c| c.condense);
        let head = self.sync_space_map(txg, state, condense)?;
        let device = |e: &SpaError| matches!(e, SpaError::Vdev(_));
        self.until_resumed(|| self.flush_all(), device)?;
        let set = self.vdev_set();
        let mut ub = Uberblock::new(txg, set.guid_sum(), now_secs());
        ub.features = self.features.load(Ordering::Relaxed);
        ub.rootbp = mos_root;
        ub.spacemap_bp = head;
        self.until_resumed(|| self.write_uberblocks(&set, &ub), device)?;
        self.until_resumed(|| self.flush_all(), device)?;
        self.record_dtl(&set, txg);
        if let Some(change) = change {
            self.write_config(&set, change, txg)?;
        }
        state.ub = ub;
        self.alloc.lock().txg_synced(txg);
        Ok(())
    }

    /// The DVA a log pointer names (its allocated size follows from the
    /// vdev's layout).
    fn log_dva(&self, at: &LogPtr) -> Result<Dva, StoreError> {
        let top = self.top(at.vdev)?;
        let asize = top.psize_to_asize(u64::from(at.size));
        Ok(Dva {
            vdev: at.vdev,
            asize_sectors: u32::try_from(asize >> 9).map_err(|_| {
                StoreError::Corrupted(tarn_format::Corrupted::new("log pointer", "size"))
            })?,
            offset: at.offset,
        })
    }

    /// Flushes every top-level vdev but a faulted log.
    fn flush_all(&self) -> Result<(), SpaError> {
        for top in self.vdev_set().live().filter(|t| !t.is_faulted()) {
            top.vdev.flush()?;
        }
        Ok(())
    }

    fn write_uberblocks(&self, set: &VdevSet, ub: &Uberblock) -> Result<(), SpaError> {
        let mut written = 0;
        let mut last_err = None;
        for top in set.live().filter(|t| !t.is_faulted()) {
            let top = &top.vdev;
            for leaf in top.leaves().iter().filter(|l| l.is_available()) {
                match tarn_vdev::write_uberblock(leaf.dev.as_ref(), top.ashift(), ub) {
                    Ok(()) => written += 1,
                    Err(e) => last_err = Some(e),
                }
            }
        }
        match (written, last_err) {
            (0, Some(e)) => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Appends txg's allocation changes to the space map log (condensing it
    /// when it has grown too long) and returns the new head.
    /// `force_condense`: write a fresh base whatever the log's length (a
    /// vdev left the pool and no entry may name it any more).
    fn sync_space_map(
        &self,
        txg: u64,
        state: &mut Committed,
        force_condense: bool,
    ) -> Result<BlockPtr, SpaError> {
        // Ditto copies: on distinct vdevs where the pool has them, else at
        // distinct offsets of the one vdev.
        let copies = tunables::POOL_METADATA_COPIES;
        let delta_len = self.alloc.lock().txg_entries(txg).len();
        let log_len = state.chain_entries + delta_len;
        let min = self.condense_min_entries.load(Ordering::Relaxed);
        // Counting the allocated ranges walks every metaslab: only do it
        // once the log is long enough that condensing could be due.
        let condense = force_condense
            || log_len > min && {
                let base_len = self.alloc.lock().allocated_ranges_at(txg).len();
                log_len > tunables::SPACEMAP_CONDENSE_RATIO * base_len + min
            };
        if condense {
            let mut alloc = self.alloc.lock();
            for bp in &state.chain {
                for dva in bp.dvas.iter().filter(|d| !d.is_empty()) {
                    alloc.free(txg, dva);
                }
            }
        }
        // Plan k blocks so that k blocks hold every entry, including the
        // `copies` allocation entries each block adds for itself.
        let planned = if condense {
            self.alloc.lock().allocated_ranges_at(txg).len()
        } else {
            delta_len
        };
        if planned == 0 && !condense {
            return Ok(state.ub.spacemap_bp);
        }
        let mut k = 1;
        while k * SPACEMAP_ENTRIES_MAX < planned + copies * k {
            k += 1;
        }
        let total = planned + copies * k;
        let mut block_dvas = Vec::with_capacity(k);
        let mut sizes = Vec::with_capacity(k);
        for i in 0..k {
            let n = (total - i * SPACEMAP_ENTRIES_MAX).min(SPACEMAP_ENTRIES_MAX);
            let psize = SpaceMapBlock::encoded_len(n) as u64;
            block_dvas.push(self.allocate(txg, psize, copies)?);
            sizes.push(psize as usize);
        }
        let entries: Vec<SpaceMapEntry> = if condense {
            self.alloc.lock().allocated_ranges_at(txg)
        } else {
            self.alloc.lock().txg_entries(txg).to_vec()
        };
        assert!(entries.len() <= k * SPACEMAP_ENTRIES_MAX, "space map plan");
        let kind = if condense {
            SpaceMapKind::Base
        } else {
            SpaceMapKind::Delta
        };
        let mut prev = if condense {
            BlockPtr::HOLE
        } else {
            state.ub.spacemap_bp
        };
        let mut chain = if condense {
            Vec::new()
        } else {
            state.chain.clone()
        };
        for (i, dvas) in block_dvas.iter().enumerate() {
            let lo = (i * SPACEMAP_ENTRIES_MAX).min(entries.len());
            let hi = ((i + 1) * SPACEMAP_ENTRIES_MAX).min(entries.len());
            let block = SpaceMapBlock {
                txg,
                kind,
                prev,
                entries: entries[lo..hi].to_vec(),
            };
            let mut bytes = block.encode();
            bytes.resize(sizes[i], 0);
            let bp = self.write_with_dvas(txg, dvas, &bytes, ObjType::SpaceMap)?;
            chain.push(bp);
            prev = bp;
        }
        state.chain = chain;
        state.chain_entries = if condense {
            entries.len()
        } else {
            state.chain_entries + entries.len()
        };
        Ok(prev)
    }

    /// Writes an uncompressed metadata block to DVAs allocated beforehand.
    fn write_with_dvas(
        &self,
        txg: u64,
        dvas: &[Dva],
        bytes: &[u8],
        typ: ObjType,
    ) -> Result<BlockPtr, StoreError> {
        self.write_copies(dvas, bytes)?;
        let mut all = [Dva::default(); 3];
        all[..dvas.len()].copy_from_slice(dvas);
        Ok(BlockPtr {
            dvas: all,
            lsize: bytes.len() as u32,
            psize: bytes.len() as u32,
            comp: Compression::Off,
            cksum: ChecksumAlg::Fletcher4,
            typ,
            level: 0,
            birth: txg,
            phys_birth: txg,
            fill: 1,
            checksum: tarn_codec::checksum(ChecksumAlg::Fletcher4, bytes),
        })
    }

    // ---- Import -----------------------------------------------------------

    /// Opens a pool from its top-level configs (assembled from labels) and
    /// the devices found for its leaves. Picks the newest valid uberblock and
    /// replays the space map log.
    pub fn open(
        name: &str,
        guid: u64,
        configs: Vec<VdevConfig>,
        devices: &dyn Fn(&VdevConfig) -> Option<Arc<dyn BlockDevice>>,
    ) -> Result<Spa, SpaError> {
        let mut tops = Vec::new();
        for cfg in configs {
            tops.push((Arc::new(open_top(&cfg, devices)?), cfg));
        }
        let spa = Spa::assemble(name, guid, tops);
        spa.fault_lost_logs();
        spa.check_replicas()?;
        let ub = spa.newest_uberblock()?;
        // Offline leaves count as missing too: check again with them.
        for top in spa.vdev_set().live() {
            load_leaf_states(&top.vdev, &top.config, ub.txg);
        }
        spa.fault_lost_logs();
        spa.check_replicas()?;
        if ub.unknown_features() != 0 {
            return Err(SpaError::Import(format!(
                "pool uses features this tarn does not support (bits {:#x}); \
                 it was written by a newer version",
                ub.unknown_features()
            )));
        }
        spa.load_space_map(&ub)?;
        spa.features.store(ub.features, Ordering::Relaxed);
        spa.state.lock().ub = ub;
        Ok(spa)
    }

    fn newest_uberblock(&self) -> Result<Uberblock, SpaError> {
        let set = self.vdev_set();
        let want = set.guid_sum();
        let mut best: Option<Uberblock> = None;
        for top in set.live().map(|t| &t.vdev) {
            for leaf in top.leaves() {
                for ub in tarn_vdev::read_uberblocks(leaf.dev.as_ref(), top.ashift()) {
                    if ub.guid_sum != want {
                        continue;
                    }
                    if best.is_none_or(|b| ub.is_newer_than(&b)) {
                        best = Some(ub);
                    }
                }
            }
        }
        best.ok_or_else(|| SpaError::Import("no valid uberblock found on any device".into()))
    }

    fn load_space_map(&self, ub: &Uberblock) -> Result<(), SpaError> {
        let mut blocks = Vec::new();
        let mut bp = ub.spacemap_bp;
        while !bp.is_hole() {
            if bp.typ != ObjType::SpaceMap || blocks.len() > 1 << 20 {
                return Err(SpaError::Import("space map chain is corrupt".into()));
            }
            let bytes = self.read(&bp)?;
            let block = SpaceMapBlock::decode(&bytes)?;
            let prev = block.prev;
            blocks.push((bp, block));
            bp = prev;
        }
        let mut alloc = self.alloc.lock();
        let mut n = 0;
        for (_, block) in blocks.iter().rev() {
            for e in &block.entries {
                alloc
                    .replay(e)
                    .map_err(|why| SpaError::Import(format!("space map replay: {why}")))?;
                n += 1;
            }
        }
        let mut st = self.state.lock();
        st.chain = blocks.iter().rev().map(|(bp, _)| *bp).collect();
        st.chain_entries = n;
        Ok(())
    }

    // ---- Space --------------------------------------------------------------

    /// (SIZE, ALLOC) over normal-class vdevs, raw bytes as `zpool list`.
    pub fn raw_space(&self) -> (u64, u64) {
        let alloc = self.alloc.lock();
        let normal = alloc.groups.iter().filter(|g| g.class == VdevClass::Normal);
        normal.fold((0, 0), |(s, a), g| (s + g.size(), a + g.allocated()))
    }

    /// One top-level vdev's (SIZE, ALLOC, free-segment histogram), raw bytes
    /// as `zpool list -v` shows them.
    pub fn vdev_space(&self, vdev: u32) -> Option<(u64, u64, [u64; 64])> {
        let alloc = self.alloc.lock();
        let g = alloc.groups.iter().find(|g| g.vdev == vdev)?;
        Some((g.size(), g.allocated(), g.free_histogram()))
    }

    /// Free-segment histogram over all metaslabs (for FRAG).
    pub fn free_histogram(&self) -> [u64; 64] {
        let alloc = self.alloc.lock();
        let mut h = [0u64; 64];
        for g in &alloc.groups {
            for (i, n) in g.free_histogram().iter().enumerate() {
                h[i] += n;
            }
        }
        h
    }

    /// What the capacity rules need to know about each top-level vdev.
    pub fn top_specs(&self) -> Vec<accounting::TopSpec> {
        self.vdev_set()
            .live()
            .map(|t| top_spec(&t.vdev, &t.config))
            .collect()
    }

    /// Deflated bytes allocated over normal-class vdevs: what USED of the
    /// whole pool is measured in.
    pub fn allocated_deflated(&self) -> u64 {
        let alloc = self.alloc.lock();
        let set = self.vdev_set();
        alloc
            .groups
            .iter()
            .filter(|g| g.class == VdevClass::Normal)
            .map(|g| (g.allocated() >> 9) * set.ratio(g.vdev))
            .sum()
    }

    /// Raw bytes allocated on each top-level vdev (every class), for the
    /// space checks that compare them with what is reachable.
    pub fn allocated_by_vdev(&self) -> std::collections::BTreeMap<u32, u64> {
        let alloc = self.alloc.lock();
        alloc
            .groups
            .iter()
            .map(|g| (g.vdev, g.allocated()))
            .collect()
    }

    /// Raw bytes an intent-log block at `at` takes on its vdev.
    pub fn log_asize(&self, at: &tarn_format::zil::LogPtr) -> u64 {
        let alloc = self.alloc.lock();
        alloc
            .groups
            .iter()
            .find(|g| g.vdev == at.vdev)
            .map_or(0, |g| g.asize(u64::from(at.size)))
    }

    /// Devices' paths, for the cache file.
    pub fn device_paths(&self) -> Vec<PathBuf> {
        self.vdev_set()
            .live()
            .flat_map(|t| t.config.leaves().into_iter().cloned().collect::<Vec<_>>())
            .chain(self.spare_configs())
            .filter_map(|l| l.path.as_ref().map(PathBuf::from))
            .collect()
    }
}

/// What the capacity rules need to know about one top-level vdev.
pub(crate) fn top_spec(top: &TopVdev, cfg: &VdevConfig) -> accounting::TopSpec {
    let n = top.width();
    let layout = match top.layout() {
        Layout::Single => accounting::TopLayout::Single,
        Layout::Mirror => accounting::TopLayout::Mirror { children: n },
        Layout::Raidz { nparity } => accounting::TopLayout::Raidz {
            children: n,
            nparity,
        },
    };
    let min_child_bytes = top.leaves().iter().map(|l| l.dev.size()).min().unwrap_or(0);
    accounting::TopSpec {
        layout,
        ashift: top.ashift(),
        min_child_bytes,
        is_log: cfg.class == VdevClass::Log,
    }
}

/// Opens one new top-level vdev with id `id` created in `create_txg`: its
/// `TopVdev` and its config (GUIDs drawn now).
pub(crate) fn build_top(
    id: u32,
    nt: NewTop,
    create_txg: u64,
) -> Result<(TopVdev, VdevConfig), SpaError> {
    let top_guid = new_guid();
    let single = matches!(nt.layout, Layout::Single);
    let mut children = Vec::new();
    let mut leaves = Vec::new();
    for (i, (path, dev, is_blk)) in nt.leaves.into_iter().enumerate() {
        // A single-disk top-level vdev *is* its leaf, as in ZFS.
        let g = if single { top_guid } else { new_guid() };
        children.push(VdevConfig {
            kind: if is_blk {
                VdevKind::Disk
            } else {
                VdevKind::File
            },
            id: if single { u64::from(id) } else { i as u64 },
            guid: g,
            path: Some(path.clone()),
            ashift: 0,
            asize: 0,
            metaslab_shift: 0,
            class: nt.class,
            create_txg,
            children: vec![],
            offline: false,
            faulted: false,
            dtl: vec![],
        });
        leaves.push(Leaf::new(g, path, dev));
    }
    let top = TopVdev::new(id, top_guid, nt.ashift, nt.layout, leaves)?;
    let asize = top.asize();
    let cfg = if single {
        let mut leaf = children.pop().expect("one child");
        leaf.ashift = nt.ashift;
        leaf.asize = asize;
        leaf.metaslab_shift = accounting::metaslab_shift(asize);
        leaf
    } else {
        VdevConfig {
            kind: layout_kind(&nt.layout),
            id: u64::from(id),
            guid: top_guid,
            path: None,
            ashift: nt.ashift,
            asize,
            metaslab_shift: accounting::metaslab_shift(asize),
            class: nt.class,
            create_txg,
            children,
            offline: false,
            faulted: false,
            dtl: vec![],
        }
    };
    Ok((top, cfg))
}

/// How a top-level config maps onto a [`TopVdev`]: its layout and the
/// number of leaves at each position (2 where a `replacing` or `spare`
/// pair stands; see tarn-vdev's `top.rs`).
pub(crate) fn top_shape(cfg: &VdevConfig) -> (Layout, Vec<usize>) {
    let per_child = |cfg: &VdevConfig| -> Vec<usize> {
        cfg.children.iter().map(|c| c.leaves().len()).collect()
    };
    let sizes = match cfg.kind {
        VdevKind::File | VdevKind::Disk => vec![1],
        // A single device being replaced or spared: a mirror of the pair.
        VdevKind::Replacing | VdevKind::Spare => vec![cfg.leaves().len()],
        VdevKind::Mirror | VdevKind::Raidz { .. } => per_child(cfg),
    };
    (Layout::of(cfg.kind), sizes)
}

/// Whether `cfg` is a leaf: a file or disk with no children.
pub(crate) fn is_leaf_config(cfg: &VdevConfig) -> bool {
    matches!(cfg.kind, VdevKind::File | VdevKind::Disk) && cfg.children.is_empty()
}

/// Refuses a top-level vdev tree tarn never writes (damaged or crafted
/// labels): a leaf with children, a replacing or spare pair that is not
/// exactly two leaves, a mirror or raidz with anything but leaves and
/// pairs below it. Everything that walks the tree (pairs, spares, the
/// status tree) may then rely on that shape.
pub(crate) fn check_shape(cfg: &VdevConfig) -> Result<(), SpaError> {
    let pair = |c: &VdevConfig| {
        matches!(c.kind, VdevKind::Replacing | VdevKind::Spare)
            && c.children.len() == 2
            && c.children.iter().all(is_leaf_config)
    };
    let ok = match cfg.kind {
        VdevKind::File | VdevKind::Disk => cfg.children.is_empty(),
        VdevKind::Replacing | VdevKind::Spare => pair(cfg),
        VdevKind::Mirror | VdevKind::Raidz { .. } => {
            cfg.children.iter().all(|c| is_leaf_config(c) || pair(c))
        }
    };
    if ok {
        Ok(())
    } else {
        Err(SpaError::Import(format!(
            "top-level vdev {} has a malformed configuration in its labels \
             (a device with children, or a replacing/spare pair that is not two devices)",
            cfg.id
        )))
    }
}

fn open_top(
    cfg: &VdevConfig,
    devices: &dyn Fn(&VdevConfig) -> Option<Arc<dyn BlockDevice>>,
) -> Result<TopVdev, SpaError> {
    check_shape(cfg)?;
    let (layout, sizes) = top_shape(cfg);
    let mut leaves = Vec::new();
    for l in cfg.leaves() {
        let path = l.path.clone().unwrap_or_else(|| l.guid.to_string());
        // A device that cannot be opened gets a stand-in that fails all
        // I/O: the vdev keeps its geometry and runs degraded, if its
        // redundancy allows (`check_replicas`).
        let (dev, found): (Arc<dyn BlockDevice>, bool) = match devices(l) {
            Some(dev) => (dev, true),
            None => (
                Arc::new(tarn_vdev::MissingDevice::new(
                    path.clone(),
                    stand_in_size(cfg, sizes.len()),
                )),
                false,
            ),
        };
        let leaf = Leaf::new(l.guid, path, dev);
        if !found {
            leaf.set_state(tarn_vdev::LeafState::Unavail);
        }
        leaves.push(leaf);
    }
    Ok(TopVdev::grouped(
        cfg.id as u32,
        cfg.guid,
        cfg.ashift,
        layout,
        leaves,
        &sizes,
    )?)
}

/// A block after the CPU stages of the write pipeline (compression and
/// checksum), before allocation and device I/O.
struct Prepared<'a> {
    stored: std::borrow::Cow<'a, [u8]>,
    comp: Compression,
    cksum: ChecksumAlg,
    checksum: [u64; 4],
}

impl Spa {
    /// Compresses (if that saves a sector and 12.5 %) and checksums.
    fn prepare<'a>(&self, data: &'a [u8], props: &WriteProps) -> Prepared<'a> {
        assert!(
            !data.is_empty() && data.len().is_multiple_of(512),
            "block of {} bytes",
            data.len()
        );
        let compressed = match props.compression {
            Compression::Off => None,
            c => tarn_codec::compress(c, data, self.min_ashift.load(Ordering::Relaxed)),
        };
        let (stored, comp) = match compressed {
            Some(c) => (std::borrow::Cow::Owned(c), props.compression),
            None => (std::borrow::Cow::Borrowed(data), Compression::Off),
        };
        let cksum = match props.checksum {
            ChecksumAlg::Off if props.typ.is_metadata() => ChecksumAlg::Fletcher4,
            c => c,
        };
        let checksum = tarn_codec::checksum(cksum, &stored);
        Prepared {
            stored,
            comp,
            cksum,
            checksum,
        }
    }

    fn allocate_prepared(
        &self,
        txg: u64,
        p: &Prepared<'_>,
        props: &WriteProps,
    ) -> Result<Vec<Dva>, StoreError> {
        let copies = usize::from(props.copies.clamp(1, 3));
        self.allocate(txg, p.stored.len() as u64, copies)
    }

    /// Writes every copy of a prepared block to its DVAs and returns its
    /// pointer; on failure the DVAs are freed.
    fn write_prepared(
        &self,
        txg: u64,
        lsize: usize,
        p: &Prepared<'_>,
        dvas: &[Dva],
        props: &WriteProps,
    ) -> Result<BlockPtr, StoreError> {
        if let Err(e) = self.write_copies(dvas, &p.stored) {
            let mut alloc = self.alloc.lock();
            for d in dvas {
                alloc.free(txg, d);
            }
            return Err(e);
        }
        Ok(block_ptr(txg, lsize, p, dvas, props))
    }
}

/// The pointer to a block of `lsize` bytes, prepared as `p`, written in
/// `txg` at `dvas`.
fn block_ptr(
    txg: u64,
    lsize: usize,
    p: &Prepared<'_>,
    dvas: &[Dva],
    props: &WriteProps,
) -> BlockPtr {
    let mut all = [Dva::default(); 3];
    all[..dvas.len()].copy_from_slice(dvas);
    BlockPtr {
        dvas: all,
        lsize: lsize as u32,
        psize: p.stored.len() as u32,
        comp: p.comp,
        cksum: p.cksum,
        typ: props.typ,
        level: props.level,
        birth: txg,
        phys_birth: txg,
        fill: props.fill,
        checksum: p.checksum,
    }
}

impl Spa {
    /// One window of [`BlockStore::write_batch`]; on error nothing of the
    /// window stays allocated.
    fn write_window(
        &self,
        txg: u64,
        blocks: &[BlockWrite<'_>],
    ) -> Result<Vec<BlockPtr>, StoreError> {
        let prepared: Vec<Prepared<'_>> = crate::store::run_parallel(blocks.len(), 1, |i| {
            Ok(self.prepare(blocks[i].data, &blocks[i].props))
        })
        .into_iter()
        .map(|(_, p)| p.expect("prepare cannot fail"))
        .collect();
        if self.pushed() {
            return self.write_window_throttled(txg, blocks, &prepared);
        }
        let mut dvas: Vec<Vec<Dva>> = Vec::with_capacity(blocks.len());
        let release = |dvas: &[Vec<Dva>]| {
            let mut alloc = self.alloc.lock();
            for d in dvas.iter().flatten() {
                alloc.free(txg, d);
            }
        };
        for (b, p) in blocks.iter().zip(&prepared) {
            match self.allocate_prepared(txg, p, &b.props) {
                Ok(d) => dvas.push(d),
                Err(e) => {
                    release(&dvas);
                    return Err(e);
                }
            }
        }
        let per_top = copies_per_top(&dvas, &prepared);
        let threads = tunables::SYNC_WRITE_THREADS
            .div_ceil(per_top.len().max(1))
            .max(2);
        // A lost top-level vdev suspends the pool; after `zpool clear` the
        // whole window is written again (rewriting the same bytes at the
        // same places is harmless).
        let written = self.until_resumed(
            || match self.write_per_top(&per_top, threads) {
                Some(e) => Err(e),
                None => Ok(()),
            },
            |e| matches!(e, StoreError::Io(_)),
        );
        let first_err = written.err();
        if let Some(e) = first_err {
            release(&dvas);
            return Err(e);
        }
        Ok(blocks
            .iter()
            .zip(&prepared)
            .zip(&dvas)
            .map(|((b, p), ds)| block_ptr(txg, b.data.len(), p, ds, &b.props))
            .collect())
    }
}

/// Every copy of a window's blocks (block `i` prepared as `prepared[i]`
/// at `dvas[i]`), grouped by top-level vdev, as (DVA offset, bytes).
fn copies_per_top<'a>(
    dvas: &[Vec<Dva>],
    prepared: &'a [Prepared<'_>],
) -> std::collections::BTreeMap<u32, Vec<(u64, &'a [u8])>> {
    let mut per_top: std::collections::BTreeMap<u32, Vec<(u64, &'a [u8])>> =
        std::collections::BTreeMap::new();
    for (ds, p) in dvas.iter().zip(prepared) {
        for d in ds {
            per_top
                .entry(d.vdev)
                .or_default()
                .push((d.offset, &p.stored));
        }
    }
    per_top
}

/// A block copy queued for one top-level vdev's writer: its offset, its
/// bytes and when it was queued.
type Queued<'a> = (u64, &'a [u8], Instant);

impl Spa {
    /// Whether the txg being synced should be written under the
    /// allocation throttle ([`crate::throttle`]): the pool has more than
    /// one data vdev, and its writers pushed, or filled the txg faster
    /// than a split by free space could be written at the vdevs'
    /// measured rates (the slowest vdev's share would fall behind).
    fn pushed(&self) -> bool {
        let groups: Vec<(u32, u64)> = {
            let alloc = self.alloc.lock();
            alloc
                .groups
                .iter()
                .filter(|g| g.class == VdevClass::Normal && !g.disabled)
                .map(|g| (g.vdev, g.free()))
                .collect()
        };
        if groups.len() < 2 {
            return false;
        }
        let p = self.throttle.pressure();
        if p.pushed {
            return true;
        }
        let total: u64 = groups.iter().map(|g| g.1).sum();
        if p.fill_rate <= 0.0 || total == 0 {
            return false;
        }
        let mut keep_up = f64::INFINITY;
        for (vdev, free) in groups {
            let rate = self.throttle.rate(vdev);
            if rate <= 0.0 {
                return false; // not measured yet: nothing to go by
            }
            let share = free as f64 / total as f64;
            if share > 0.0 {
                keep_up = keep_up.min(rate / share);
            }
        }
        p.fill_rate > keep_up
    }

    /// [`Spa::write_window`] under the allocation throttle
    /// ([`crate::throttle`]): the blocks are allocated one at a time, each
    /// onto a vdev whose queue has room, and handed at once to that
    /// vdev's writer; a vdev that writes faster empties its queue sooner
    /// and is given more of them. On error nothing of the window stays
    /// allocated.
    fn write_window_throttled(
        &self,
        txg: u64,
        blocks: &[BlockWrite<'_>],
        prepared: &[Prepared<'_>],
    ) -> Result<Vec<BlockPtr>, StoreError> {
        let vdevs: Vec<u32> = {
            let alloc = self.alloc.lock();
            alloc
                .groups
                .iter()
                .filter(|g| g.class == VdevClass::Normal)
                .map(|g| g.vdev)
                .collect()
        };
        let threads = tunables::SYNC_WRITE_THREADS
            .div_ceil(vdevs.len().max(1))
            .max(2);
        let mut dvas: Vec<Vec<Dva>> = Vec::with_capacity(blocks.len());
        let (alloc_err, all_written) = std::thread::scope(|s| {
            let mut queues = std::collections::HashMap::new();
            let mut writers = Vec::with_capacity(vdevs.len());
            for &v in &vdevs {
                let (tx, rx) = std::sync::mpsc::channel::<Queued<'_>>();
                queues.insert(v, tx);
                writers.push(s.spawn(move || self.drain_queue(v, &rx, threads)));
            }
            let room = |v: u32| self.throttle.has_room(v);
            let mut alloc_err = None;
            for (b, p) in blocks.iter().zip(prepared) {
                let copies = usize::from(b.props.copies.clamp(1, 3));
                let psize = p.stored.len() as u64;
                let placed = loop {
                    let r = self.alloc.lock().alloc_throttled(txg, psize, copies, &room);
                    match r {
                        Ok(Some(ds)) => break Ok(ds),
                        Ok(None) => self.throttle.wait(),
                        Err(AllocError::NoSpace) => break Err(StoreError::NoSpace),
                    }
                };
                let ds = match placed {
                    Ok(ds) => ds,
                    Err(e) => {
                        alloc_err = Some(e);
                        break;
                    }
                };
                for d in &ds {
                    self.throttle.queued(d.vdev, psize);
                    let queue = queues.get(&d.vdev).expect("a data vdev's queue");
                    queue
                        .send((d.offset, &p.stored, Instant::now()))
                        .expect("a vdev writer outlives its queue");
                }
                dvas.push(ds);
            }
            drop(queues);
            let all_written = writers
                .into_iter()
                .map(|w| w.join().expect("vdev writer panicked"))
                .collect::<Vec<bool>>() // every writer joined, none skipped
                .into_iter()
                .all(|ok| ok);
            (alloc_err, all_written)
        });
        let release = |dvas: &[Vec<Dva>]| {
            let mut alloc = self.alloc.lock();
            for d in dvas.iter().flatten() {
                alloc.free(txg, d);
            }
        };
        if let Some(e) = alloc_err {
            release(&dvas);
            return Err(e);
        }
        if !all_written {
            // As in `write_window`: a lost top-level vdev suspends the
            // pool, and after `zpool clear` the window is written again.
            let per_top = copies_per_top(&dvas, prepared);
            let written = self.until_resumed(
                || match self.write_per_top(&per_top, threads) {
                    Some(e) => Err(e),
                    None => Ok(()),
                },
                |e| matches!(e, StoreError::Io(_)),
            );
            if let Err(e) = written {
                release(&dvas);
                return Err(e);
            }
        }
        Ok(blocks
            .iter()
            .zip(prepared)
            .zip(&dvas)
            .map(|((b, p), ds)| block_ptr(txg, b.data.len(), p, ds, &b.props))
            .collect())
    }

    /// One top-level vdev's writer under the throttle: takes what is
    /// queued (up to `ALLOC_QUEUE_MAX_BYTES` at once, so neighbours merge
    /// into long writes), writes it, and gives the room back. Whether
    /// every write succeeded.
    fn drain_queue(
        &self,
        vdev: u32,
        queue: &std::sync::mpsc::Receiver<Queued<'_>>,
        threads: usize,
    ) -> bool {
        let top = self.top(vdev).ok();
        let mut ok = top.is_some();
        while let Ok(first) = queue.recv() {
            let mut batch = vec![first];
            let mut bytes = first.1.len() as u64;
            while bytes < tunables::ALLOC_QUEUE_MAX_BYTES {
                match queue.try_recv() {
                    Ok(q) => {
                        bytes += q.1.len() as u64;
                        batch.push(q);
                    }
                    Err(_) => break,
                }
            }
            let n = batch.len() as u64;
            let waited = batch.iter().map(|q| crate::throttle::since(q.2)).sum();
            self.throttle.started(vdev, n, waited);
            let t0 = Instant::now();
            if let Some(top) = &top {
                let reqs: Vec<(u64, &[u8])> = batch.iter().map(|q| (q.0, q.1)).collect();
                ok &= top.write_many(&reqs, threads).iter().all(Result::is_ok);
            }
            self.throttle.completed(vdev, n, bytes, t0.elapsed());
        }
        ok
    }

    /// Writes each top-level vdev's blocks on its own threads; the first
    /// error, if any.
    fn write_per_top(
        &self,
        per_top: &std::collections::BTreeMap<u32, Vec<(u64, &[u8])>>,
        threads: usize,
    ) -> Option<StoreError> {
        std::thread::scope(|s| {
            let jobs: Vec<_> = per_top
                .iter()
                .map(|(&vdev, reqs)| {
                    s.spawn(move || -> Option<StoreError> {
                        let top = match self.top(vdev) {
                            Ok(t) => t,
                            Err(e) => return Some(e),
                        };
                        let t0 = Instant::now();
                        let err = top
                            .write_many(reqs, threads)
                            .into_iter()
                            .find_map(Result::err)
                            .map(|e| StoreError::Io(e.to_string()));
                        if err.is_none() {
                            let bytes = reqs.iter().map(|r| r.1.len() as u64).sum();
                            self.throttle.measured(vdev, bytes, t0.elapsed());
                        }
                        err
                    })
                })
                .collect();
            let errs: Vec<Option<StoreError>> = jobs
                .into_iter()
                .map(|j| j.join().expect("vdev writer panicked"))
                .collect();
            errs.into_iter().flatten().next()
        })
    }

    /// On a file vdev, the first write to space the file never held makes
    /// the host file system allocate it, and a durable write then also
    /// waits for that file system's journal, which made a log block write
    /// much slower there than in space written before (docs/MEASUREMENTS.md,
    /// "Pool: log blocks in file holes"). On a fresh pool the log
    /// walks into new space (its blocks are reused only a txg or two after
    /// they are freed), so every `fsync` would pay that.
    ///
    /// So when a new log block (`dva`, allocated in `txg`, which the caller
    /// holds open) lies in such a hole, the free space after it, up to
    /// `LOG_PREWRITE_BYTES`, is reserved for a moment, written with zeros
    /// together with the block's own place, and given back: the next log
    /// blocks, taken lowest first, land in space the files hold. Only
    /// space this pool owns and nothing references is written. A failed
    /// write is left to the log block's own write to meet.
    fn prewrite_for_log(&self, txg: u64, dva: &Dva) {
        let Ok(top) = self.top(dva.vdev) else {
            return;
        };
        if !top.has_hole(dva.offset, dva.asize()) {
            return;
        }
        let reserved = self
            .alloc
            .lock()
            .reserve_following(txg, dva, tunables::LOG_PREWRITE_BYTES);
        let end = reserved.map_or(dva.offset + dva.asize(), |r| r.offset + r.asize());
        if let Ok(len) = usize::try_from(end - dva.offset) {
            let _ = top.write(dva.offset, &vec![0u8; len]);
        }
        if let Some(r) = reserved {
            self.alloc.lock().unreserve(txg, &r);
        }
    }
}

/// A log block's bytes as written: always the whole allocated size, so a
/// raidz maps it the same way when it is read back.
fn log_block_bytes<'a>(
    at: &LogPtr,
    data: &'a [u8],
) -> Result<std::borrow::Cow<'a, [u8]>, StoreError> {
    if data.len() > at.size as usize || !at.size.is_multiple_of(512) || at.size == 0 {
        return Err(StoreError::Io(format!(
            "log block of {} bytes does not fit its {}",
            data.len(),
            at.size
        )));
    }
    if data.len() == at.size as usize {
        return Ok(std::borrow::Cow::Borrowed(data));
    }
    let mut b = data.to_vec();
    b.resize(at.size as usize, 0);
    Ok(std::borrow::Cow::Owned(b))
}

impl LogStore for Spa {
    fn log_alloc(&self, txg: u64, size: u32) -> Result<LogPtr, StoreError> {
        let prefer = self.data_vdevs_fastest_first();
        let dva = self
            .alloc
            .lock()
            .alloc_log(txg, u64::from(size), &prefer)
            .map_err(|AllocError::NoSpace| StoreError::NoSpace)?;
        self.prewrite_for_log(txg, &dva);
        Ok(LogPtr {
            vdev: dva.vdev,
            size,
            offset: dva.offset,
            seq: 0,
        })
    }

    fn log_write(&self, at: &LogPtr, data: &[u8]) -> Result<(), StoreError> {
        let top = self.top(at.vdev)?;
        let block = log_block_bytes(at, data)?;
        top.write_durable(at.offset, &block)
            .map_err(|e| self.log_io_failed(at.vdev, e))
    }

    /// The blocks of each top-level vdev go to it together
    /// ([`TopVdev::write_durable_many`]: all in flight at once), one vdev
    /// after the other.
    fn log_write_many(&self, blocks: &[(LogPtr, &[u8])]) -> Vec<Result<(), StoreError>> {
        let mut results: Vec<Option<Result<(), StoreError>>> =
            blocks.iter().map(|_| None).collect();
        let mut vdevs: Vec<u32> = blocks.iter().map(|(at, _)| at.vdev).collect();
        vdevs.sort_unstable();
        vdevs.dedup();
        for vdev in vdevs {
            let top = match self.top(vdev) {
                Ok(t) => t,
                Err(e) => {
                    for (i, (at, _)) in blocks.iter().enumerate() {
                        if at.vdev == vdev {
                            results[i] = Some(Err(StoreError::Io(e.to_string())));
                        }
                    }
                    continue;
                }
            };
            let mut index = Vec::new();
            let mut bytes = Vec::new();
            for (i, (at, data)) in blocks.iter().enumerate() {
                if at.vdev != vdev {
                    continue;
                }
                match log_block_bytes(at, data) {
                    Ok(b) => {
                        index.push(i);
                        bytes.push((at.offset, b));
                    }
                    Err(e) => results[i] = Some(Err(e)),
                }
            }
            let writes: Vec<(u64, &[u8])> = bytes.iter().map(|(o, b)| (*o, &b[..])).collect();
            for (i, r) in index.into_iter().zip(top.write_durable_many(&writes)) {
                results[i] = Some(r.map_err(|e| self.log_io_failed(vdev, e)));
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every block has a result"))
            .collect()
    }

    fn log_flush(&self, vdev: u32) -> Result<(), StoreError> {
        self.top(vdev)?
            .flush()
            .map_err(|e| self.log_io_failed(vdev, e))
    }

    fn log_read(
        &self,
        at: &LogPtr,
        verify: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Vec<u8>, StoreError> {
        // The end of a chain is an unwritten block: not a checksum error.
        let top = self.top(at.vdev)?;
        top.read_speculative(at.offset, u64::from(at.size), verify)
            .map_err(|e| StoreError::Io(e.to_string()))
    }

    fn log_claim(&self, txg: u64, at: &LogPtr) -> Result<bool, StoreError> {
        let dva = self.log_dva(at)?;
        self.alloc
            .lock()
            .claim_log(txg, &dva)
            .map_err(|why| StoreError::Corrupted(tarn_format::Corrupted::new("log block", why)))
    }

    fn has_log_devices(&self) -> bool {
        self.vdev_set()
            .live()
            .any(|t| t.config.class == VdevClass::Log && !t.is_faulted())
    }

    fn is_log_vdev(&self, vdev: u32) -> bool {
        self.vdev_class(vdev) == Some(VdevClass::Log)
    }

    fn log_txg_full(&self, txg: u64) -> bool {
        self.alloc.lock().log_txg_full(txg)
    }

    fn log_free(&self, txg: u64, at: &LogPtr) {
        match self.log_dva(at) {
            Ok(dva) => self.alloc.lock().free(txg, &dva),
            Err(e) => eprintln!("tarn: not freeing log block {at:?}: {e}; space leaked"),
        }
    }
}

impl BlockStore for Spa {
    fn write(&self, txg: u64, data: &[u8], props: &WriteProps) -> Result<BlockPtr, StoreError> {
        let p = self.prepare(data, props);
        let dvas = self.allocate_prepared(txg, &p, props)?;
        self.write_prepared(txg, data.len(), &p, &dvas, props)
    }

    fn write_stored(
        &self,
        txg: u64,
        data: &[u8],
        stored: &[u8],
        comp: Compression,
        props: &WriteProps,
    ) -> Result<BlockPtr, StoreError> {
        // Only a form that is smaller and whole sectors' worth is kept as
        // it is; anything else goes the usual way.
        if comp == Compression::Off
            || stored.is_empty()
            || stored.len() >= data.len()
            || !stored.len().is_multiple_of(512)
        {
            return self.write(txg, data, props);
        }
        let cksum = match props.checksum {
            ChecksumAlg::Off if props.typ.is_metadata() => ChecksumAlg::Fletcher4,
            c => c,
        };
        let p = Prepared {
            checksum: tarn_codec::checksum(cksum, stored),
            stored: std::borrow::Cow::Borrowed(stored),
            comp,
            cksum,
        };
        let dvas = self.allocate_prepared(txg, &p, props)?;
        self.write_prepared(txg, data.len(), &p, &dvas, props)
    }

    /// Writes a txg's blocks in windows of `tunables::WRITE_WINDOW_BYTES`: each
    /// window is compressed and checksummed on several threads, allocated
    /// in batch order (so a file's records land in order on disk), and
    /// written with per-leaf aggregation ([`TopVdev::write_many`]), every
    /// top-level vdev at once. All or nothing: on any error every block
    /// of the batch is freed again.
    ///
    /// The windows go one after another: preparing the next window while
    /// one is written (a two-stage pipeline) was tried and gained nothing
    /// beyond the host's noise, since preparing a window takes a small
    /// fraction of writing it; more write threads changed nothing either,
    /// fewer were slower (docs/MEASUREMENTS.md, "Pool: pipelined write
    /// windows").
    fn write_batch(
        &self,
        txg: u64,
        blocks: &[BlockWrite<'_>],
    ) -> Result<Vec<BlockPtr>, StoreError> {
        let mut done: Vec<BlockPtr> = Vec::with_capacity(blocks.len());
        let mut start = 0;
        while start < blocks.len() {
            let mut end = start + 1;
            let mut bytes = blocks[start].data.len();
            while end < blocks.len()
                && bytes + blocks[end].data.len() <= tunables::WRITE_WINDOW_BYTES
            {
                bytes += blocks[end].data.len();
                end += 1;
            }
            match self.write_window(txg, &blocks[start..end]) {
                Ok(bps) => done.extend(bps),
                Err(e) => {
                    for bp in &done {
                        self.free(txg, bp);
                    }
                    return Err(e);
                }
            }
            start = end;
        }
        Ok(done)
    }

    /// Reads the first copy that verifies. When no device holding any
    /// copy answers at all, the pool suspends and the read waits for
    /// `zpool clear`, then tries again ([`crate::suspend`]: OpenZFS's
    /// suspended read, under `failmode=wait`); an I/O or checksum error
    /// fails at once.
    fn read(&self, bp: &BlockPtr) -> Result<Vec<u8>, StoreError> {
        assert!(!bp.is_hole());
        loop {
            let mut unreachable = Vec::new();
            let mut last = None;
            for dva in bp.dvas.iter().filter(|d| !d.is_empty()) {
                match self.read_copy(bp, dva) {
                    Ok(data) => return Ok(data),
                    Err(CopyError::Unreachable(why)) => {
                        last = Some(StoreError::Io(why.clone()));
                        unreachable.push(why);
                    }
                    Err(CopyError::Store(e)) => last = Some(e),
                }
            }
            let last = last.expect("a non-hole pointer has a DVA");
            let all = unreachable.len() == bp.dvas.iter().filter(|d| !d.is_empty()).count();
            if !all || !self.gate.read_waits() {
                return Err(last);
            }
            if self.suspend_read_and_wait(&unreachable.join("; ")).is_err() {
                return Err(last);
            }
        }
    }

    /// The first copy that verifies, as stored (no suspension wait: a
    /// send that cannot read a block fails, as its reader expects).
    fn read_stored(&self, bp: &BlockPtr) -> Result<(Vec<u8>, Compression), StoreError> {
        assert!(!bp.is_hole());
        let mut last = None;
        for dva in bp.dvas.iter().filter(|d| !d.is_empty()) {
            match self.read_copy_stored(bp, dva) {
                Ok(data) => return Ok((data, bp.comp)),
                Err(CopyError::Unreachable(why)) => last = Some(StoreError::Io(why)),
                Err(CopyError::Store(e)) => last = Some(e),
            }
        }
        Err(last.expect("a non-hole pointer has a DVA"))
    }

    fn read_run(&self, bps: &[BlockPtr]) -> Vec<Result<Vec<u8>, StoreError>> {
        let one_by_one = || bps.iter().map(|bp| self.read(bp)).collect();
        let Some(first) = bps.first() else {
            return Vec::new();
        };
        let vdev = first.dvas[0].vdev;
        if bps.len() < 2 || bps.iter().any(|bp| bp.is_hole() || bp.dvas[0].vdev != vdev) {
            return one_by_one();
        }
        let Ok(top) = self.top(vdev) else {
            return one_by_one();
        };
        let blocks: Vec<(u64, u64)> = bps
            .iter()
            .map(|bp| (bp.dvas[0].offset, u64::from(bp.psize)))
            .collect();
        let mut verify = |i: usize, data: &[u8]| {
            let bp = &bps[i];
            bp.cksum == ChecksumAlg::Off || tarn_codec::checksum(bp.cksum, data) == bp.checksum
        };
        let got = top.read_run(&blocks, &mut verify);
        bps.iter()
            .zip(got)
            .map(|(bp, stored)| match stored {
                // Not read, or the copy was wrong: the full path tries
                // every copy and heals.
                None => self.read(bp),
                Some(stored) if bp.comp == Compression::Off => Ok(stored),
                Some(stored) => Ok(tarn_codec::decompress(bp.comp, &stored, bp.lsize as usize)?),
            })
            .collect()
    }

    fn dsize(&self, bp: &BlockPtr) -> u64 {
        bp.dvas
            .iter()
            .filter(|d| !d.is_empty())
            .map(|d| u64::from(d.asize_sectors) * self.vdevs.read().ratio(d.vdev))
            .sum()
    }

    fn free(&self, txg: u64, bp: &BlockPtr) {
        let mut alloc = self.alloc.lock();
        for dva in bp.dvas.iter().filter(|d| !d.is_empty()) {
            alloc.free(txg, dva);
        }
    }
}
