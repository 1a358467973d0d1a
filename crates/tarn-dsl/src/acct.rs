//! Space accounting of one dataset, kept as blocks are born and killed.
//!
//! Each dataset's object set writes through its own [`AcctStore`], which
//! passes every call to the pool and counts what it charged: deflated
//! (`dsize`), physical and logical bytes of every block born (written) and
//! killed (freed). The sync path takes the counts after the dataset's sync
//! and adds them to the dataset's and its ancestors' records, as OpenZFS's
//! `dsl_dataset_block_born` / `dsl_dataset_block_kill` do.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tarn_format::BlockPtr;
use tarn_pool::{BlockStore, BlockWrite, StoreError, WriteProps};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpaceDelta {
    pub dsize: i64,
    pub psize: i64,
    pub lsize: i64,
}

pub struct AcctStore {
    inner: Arc<dyn BlockStore>,
    dsize: AtomicI64,
    psize: AtomicI64,
    lsize: AtomicI64,
}

impl AcctStore {
    pub fn new(inner: Arc<dyn BlockStore>) -> AcctStore {
        AcctStore {
            inner,
            dsize: AtomicI64::new(0),
            psize: AtomicI64::new(0),
            lsize: AtomicI64::new(0),
        }
    }

    fn charge(&self, bp: &BlockPtr, sign: i64) {
        // USED counts every copy (deflated); the compressed and logical
        // sizes count the block once, as OpenZFS's do.
        self.dsize
            .fetch_add(sign * self.inner.dsize(bp) as i64, Ordering::Relaxed);
        self.psize
            .fetch_add(sign * i64::from(bp.psize), Ordering::Relaxed);
        self.lsize
            .fetch_add(sign * i64::from(bp.lsize), Ordering::Relaxed);
    }

    /// Counts a block the dataset stops referencing without freeing it (a
    /// snapshot still holds it: it goes to the dead list).
    pub fn kill(&self, bp: &BlockPtr) {
        self.charge(bp, -1);
    }

    /// Counts since the last call.
    pub fn take(&self) -> SpaceDelta {
        SpaceDelta {
            dsize: self.dsize.swap(0, Ordering::Relaxed),
            psize: self.psize.swap(0, Ordering::Relaxed),
            lsize: self.lsize.swap(0, Ordering::Relaxed),
        }
    }
}

impl BlockStore for AcctStore {
    fn write(&self, txg: u64, data: &[u8], props: &WriteProps) -> Result<BlockPtr, StoreError> {
        let bp = self.inner.write(txg, data, props)?;
        self.charge(&bp, 1);
        Ok(bp)
    }
    fn write_stored(
        &self,
        txg: u64,
        data: &[u8],
        stored: &[u8],
        comp: tarn_format::Compression,
        props: &WriteProps,
    ) -> Result<BlockPtr, StoreError> {
        let bp = self.inner.write_stored(txg, data, stored, comp, props)?;
        self.charge(&bp, 1);
        Ok(bp)
    }
    /// Forwarded whole, so the pool allocates the batch in order (long
    /// sequential runs on disk); every block written is charged.
    fn write_batch(
        &self,
        txg: u64,
        blocks: &[BlockWrite<'_>],
    ) -> Result<Vec<BlockPtr>, StoreError> {
        let bps = self.inner.write_batch(txg, blocks)?;
        for bp in &bps {
            self.charge(bp, 1);
        }
        Ok(bps)
    }
    fn read(&self, bp: &BlockPtr) -> Result<Vec<u8>, StoreError> {
        self.inner.read(bp)
    }
    fn read_stored(
        &self,
        bp: &BlockPtr,
    ) -> Result<(Vec<u8>, tarn_format::Compression), StoreError> {
        self.inner.read_stored(bp)
    }
    /// Forwarded whole, so back-to-back blocks are one device read.
    fn read_run(&self, bps: &[BlockPtr]) -> Vec<Result<Vec<u8>, StoreError>> {
        self.inner.read_run(bps)
    }
    fn free(&self, txg: u64, bp: &BlockPtr) {
        self.charge(bp, -1);
        self.inner.free(txg, bp)
    }
    fn dsize(&self, bp: &BlockPtr) -> u64 {
        self.inner.dsize(bp)
    }
}
