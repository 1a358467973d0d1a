//! ZAP objects: key → value maps stored in an object (ZFS's `zap.c`,
//! `zap_micro.c`; on-disk layout in `tarn_format::zap`).
//!
//! A ZAP is born *micro*: block 0 holds fixed 64-byte entries (key ≤ 47
//! bytes, one u64 value), the block doubling from 512 B up to 16 KiB as it
//! fills. The first entry a micro-ZAP cannot hold — a long key, a value
//! that is not one u64, or a full 16 KiB block — upgrades it, in the same
//! operation, to a *fat* ZAP (`fatzap`): extendible hashing over 16 KiB
//! leaves. The upgrade keeps every entry's salt-derived hash and collision
//! differentiator, so cookies handed out before it stay valid after it.
//!
//! Every operation runs with the objset's state lock held from start to
//! end (`Locked`), so a multi-block change — an upgrade, a leaf split, a
//! pointer-table doubling — is atomic with respect to `sync`'s freeze and
//! to other ZAP operations. Nothing decoded is kept between operations:
//! the blocks themselves (dirty or cached) are the only state, which keeps
//! memory bounded by the block cache. What is kept is which blocks read
//! from disk have passed the full check (`ZapChecked`): a block is checked
//! (every key re-hashed against its cookie) once when it is read in, and
//! later operations only walk its layout, so a lookup or insert costs one
//! pass over one leaf.
//!
//! Cursors (`zap_cursor`) are stateless: each step asks for the entry with
//! the smallest cookie ≥ the cursor, so entries present for a whole
//! iteration are returned exactly once however the map changes between
//! steps; entries added or removed meanwhile may or may not be seen.

use std::collections::{BTreeSet, HashSet};

use tarn_format::zap::{
    block_type, check_entry_limits, make_cookie, mzap_check_block, mzap_decode_header,
    mzap_encode_header, mzap_entry_unhashed, mzap_put_entry, mzap_slots, zap_hash, MicroEntry,
    ZapValue, MZAP_MAX_BLOCK_SIZE, MZAP_MIN_BLOCK_SIZE, MZAP_NAME_MAX, ZAP_MAX_CD, ZBT_HEADER,
    ZBT_MICRO,
};
use tarn_format::{BlockPtr, Corrupted, ObjType};

use crate::error::{DmuError, Result};
use crate::fatzap;
use crate::locked::Locked;
use crate::objset::Objset;

/// One step of a cursor: key, value and the cookie to resume after it.
pub type ZapEntry = (Vec<u8>, ZapValue, u64);

/// ZAP blocks read from the synced tree that passed their full check
/// (every key re-hashed against its cookie, the layout, the free space),
/// named by block identity and the salt they were checked under. A block
/// pointer's bytes never change, so one check per read-in is enough; dirty
/// blocks are built in memory from checked ones and need none. When the
/// set reaches `ZAP_CHECKED_MAX` it is emptied and blocks are checked
/// again as they are met: memory stays bounded, checks are only repeated.
#[derive(Default)]
pub(crate) struct ZapChecked(HashSet<(u32, u64, u64, u64)>);

/// Bound on `ZapChecked` (about 2 MiB).
const ZAP_CHECKED_MAX: usize = 1 << 16;

impl ZapChecked {
    fn key(bp: &BlockPtr, salt: u64) -> (u32, u64, u64, u64) {
        (bp.dvas[0].vdev, bp.dvas[0].offset, bp.birth, salt)
    }
}

pub(crate) enum Kind {
    Micro { salt: u64, block_size: usize },
    Fat(tarn_format::zap::FatHeader),
}

/// The per-ZAP hash salt: derived from the object number (splitmix64), so
/// that two directories hash the same names differently.
fn zap_salt(obj: u64) -> u64 {
    let mut z = obj.wrapping_add(0x9E37_79B9_7F4A_7C15) ^ 0x7461_726E_5A41_5021;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Objset {
    /// Creates an empty (micro) ZAP object of `typ`.
    pub fn zap_create(&self, typ: ObjType) -> Result<u64> {
        let mut l = self.locked();
        let obj = l.create_object(typ, MZAP_MIN_BLOCK_SIZE as u32, 0)?;
        let salt = zap_salt(obj);
        l.modify_block(obj, 0, true, |b| mzap_encode_header(b, salt))?;
        Ok(obj)
    }

    /// Creates an empty (micro) ZAP object of `typ` at number `obj`, as
    /// [`Objset::object_claim`] does for other objects (intent log replay).
    pub fn zap_claim(&self, obj: u64, typ: ObjType) -> Result<()> {
        let mut l = self.locked();
        l.claim_object(obj, typ, MZAP_MIN_BLOCK_SIZE as u32, 0)?;
        l.modify_block(obj, 0, true, |b| mzap_encode_header(b, zap_salt(obj)))
    }

    /// Adds `key`; `Exists` if it is already there.
    pub fn zap_add(&self, obj: u64, key: &[u8], value: &ZapValue) -> Result<()> {
        limits(key, value)?;
        let mut l = self.locked();
        // A fat ZAP's insert finds an existing key in the pass it makes
        // anyway; a micro ZAP's block is looked through first.
        if let Kind::Micro { .. } = l.zap_kind(obj)? {
            if l.zap_find(obj, key)?.is_some() {
                return Err(DmuError::Exists);
            }
        }
        l.zap_insert(obj, key, value, None)
    }

    /// Adds or replaces `key` (a replaced entry keeps its cookie).
    pub fn zap_update(&self, obj: u64, key: &[u8], value: &ZapValue) -> Result<()> {
        limits(key, value)?;
        let mut l = self.locked();
        let cookie = l.zap_delete(obj, key)?;
        l.zap_insert(obj, key, value, cookie)
    }

    pub fn zap_lookup(&self, obj: u64, key: &[u8]) -> Result<ZapValue> {
        let mut l = self.locked();
        l.zap_find(obj, key)?
            .map(|(_, v)| v)
            .ok_or(DmuError::NotFound)
    }

    pub fn zap_remove(&self, obj: u64, key: &[u8]) -> Result<()> {
        let mut l = self.locked();
        l.zap_delete(obj, key)?
            .map(|_| ())
            .ok_or(DmuError::NotFound)
    }

    pub fn zap_count(&self, obj: u64) -> Result<u64> {
        let mut l = self.locked();
        match l.zap_kind(obj)? {
            Kind::Micro { block_size, .. } => Ok(l.micro_entries(obj, block_size)?.len() as u64),
            Kind::Fat(h) => Ok(h.num_entries),
        }
    }

    /// The entry with the smallest cookie >= `cookie`, with its cookie.
    pub fn zap_next(&self, obj: u64, cookie: u64) -> Result<Option<ZapEntry>> {
        Ok(self.zap_next_batch(obj, cookie, 1)?.pop())
    }

    /// Up to `max` entries with the smallest cookies >= `cookie`, in
    /// cookie order, each with its cookie (a listing: one lock and one
    /// scan of each leaf for many entries).
    pub fn zap_next_batch(&self, obj: u64, cookie: u64, max: usize) -> Result<Vec<ZapEntry>> {
        let mut l = self.locked();
        match l.zap_kind(obj)? {
            Kind::Micro { block_size, .. } => {
                let mut all: Vec<_> = l
                    .micro_entries(obj, block_size)?
                    .into_iter()
                    .filter(|e| e.2 >= cookie)
                    .collect();
                all.sort_unstable_by_key(|e| e.2);
                all.truncate(max);
                Ok(all
                    .into_iter()
                    .map(|(k, v, c)| (k, ZapValue::u64(v), c))
                    .collect())
            }
            Kind::Fat(h) => fatzap::next_batch(&mut l, obj, &h, cookie, max),
        }
    }

    /// Iterates from `cookie` (0 = the start). Each item carries the
    /// cookie to pass to a later `zap_cursor` to resume after it.
    pub fn zap_cursor(&self, obj: u64, cookie: u64) -> ZapCursor<'_> {
        ZapCursor {
            os: self,
            obj,
            next: Some(cookie),
        }
    }
}

fn limits(key: &[u8], value: &ZapValue) -> Result<()> {
    check_entry_limits(key, value).map_err(|why| {
        if key.is_empty() {
            DmuError::InvalidArgument(why)
        } else {
            DmuError::TooBig(why)
        }
    })
}

/// A resumable iterator over a ZAP in cookie order.
pub struct ZapCursor<'a> {
    os: &'a Objset,
    obj: u64,
    next: Option<u64>,
}

impl Iterator for ZapCursor<'_> {
    type Item = Result<ZapEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        let cookie = self.next?;
        match self.os.zap_next(self.obj, cookie) {
            Ok(Some((k, v, c))) => {
                self.next = Some(c + 1);
                Some(Ok((k, v, c + 1)))
            }
            Ok(None) => {
                self.next = None;
                None
            }
            Err(e) => {
                self.next = None;
                Some(Err(e))
            }
        }
    }
}

impl Locked<'_> {
    /// Block `blkid` of ZAP `obj` (`None` = a hole). Bytes from the synced
    /// tree pass `check` the first time this object set meets their block
    /// pointer (see `ZapChecked`).
    pub(crate) fn zap_block(
        &mut self,
        obj: u64,
        blkid: u64,
        salt: u64,
        check: impl FnOnce(&[u8]) -> std::result::Result<(), Corrupted>,
    ) -> Result<Option<crate::dirty::Block>> {
        let Some((b, origin)) = self.read_block_origin(obj, blkid)? else {
            return Ok(None);
        };
        if let Some(bp) = origin {
            let key = ZapChecked::key(&bp, salt);
            if !self.st.zap_checked.0.contains(&key) {
                check(&b)?;
                if self.st.zap_checked.0.len() >= ZAP_CHECKED_MAX {
                    self.st.zap_checked.0.clear();
                }
                self.st.zap_checked.0.insert(key);
            }
        }
        Ok(Some(b))
    }

    pub(crate) fn zap_kind(&mut self, obj: u64) -> Result<Kind> {
        let (b, origin) = self
            .read_block_origin(obj, 0)?
            .ok_or_else(|| Corrupted::new("zap", format!("object {obj} has no block 0")))?;
        match block_type(&b)? {
            ZBT_MICRO => {
                let salt = mzap_decode_header(&b)?;
                if origin.is_some() {
                    // Checks the slots once per read-in (see `zap_block`).
                    self.zap_block(obj, 0, salt, |b| mzap_check_block(b, salt))?;
                }
                Ok(Kind::Micro {
                    salt,
                    block_size: b.len(),
                })
            }
            ZBT_HEADER => Ok(Kind::Fat(tarn_format::zap::FatHeader::decode(&b)?)),
            _ => Err(Corrupted::new("zap", format!("object {obj} is not a ZAP")).into()),
        }
    }

    /// `(key, value, cookie)` of every micro entry, plus nothing else.
    fn micro_entries(&mut self, obj: u64, bs: usize) -> Result<Vec<(Vec<u8>, u64, u64)>> {
        let b = self.read_block(obj, 0)?.expect("checked by zap_kind");
        let mut out = Vec::new();
        for slot in 0..mzap_slots(bs) {
            if let Some(e) = mzap_entry_unhashed(&b, slot)? {
                out.push((e.name.to_vec(), e.value, e.cookie));
            }
        }
        Ok(out)
    }

    /// `(slot, cookie, value)` of `key` in a micro-ZAP.
    fn micro_find(&mut self, obj: u64, bs: usize, key: &[u8]) -> Result<Option<(usize, u64, u64)>> {
        let b = self.read_block(obj, 0)?.expect("checked by zap_kind");
        for slot in 0..mzap_slots(bs) {
            match mzap_entry_unhashed(&b, slot)? {
                Some(e) if e.name == key => return Ok(Some((slot, e.cookie, e.value))),
                _ => {}
            }
        }
        Ok(None)
    }

    fn zap_find(&mut self, obj: u64, key: &[u8]) -> Result<Option<(u64, ZapValue)>> {
        match self.zap_kind(obj)? {
            Kind::Micro { block_size, .. } => {
                let found = self.micro_find(obj, block_size, key)?;
                Ok(found.map(|(_, c, v)| (c, ZapValue::u64(v))))
            }
            Kind::Fat(h) => fatzap::lookup(self, obj, &h, key),
        }
    }

    /// Removes `key` if present and returns its cookie.
    fn zap_delete(&mut self, obj: u64, key: &[u8]) -> Result<Option<u64>> {
        match self.zap_kind(obj)? {
            Kind::Micro { block_size, .. } => {
                let Some((slot, cookie, _)) = self.micro_find(obj, block_size, key)? else {
                    return Ok(None);
                };
                self.modify_block(obj, 0, false, |b| mzap_put_entry(b, slot, None))?;
                Ok(Some(cookie))
            }
            Kind::Fat(mut h) => fatzap::remove(self, obj, &mut h, key),
        }
    }

    /// Inserts a key known to be absent; `cookie` is kept if given.
    fn zap_insert(
        &mut self,
        obj: u64,
        key: &[u8],
        value: &ZapValue,
        cookie: Option<u64>,
    ) -> Result<()> {
        loop {
            match self.zap_kind(obj)? {
                Kind::Fat(mut h) => return fatzap::insert(self, obj, &mut h, key, value, cookie),
                Kind::Micro { salt, block_size } => {
                    let fits = key.len() <= MZAP_NAME_MAX && value.as_single_u64().is_some();
                    if fits && self.micro_insert(obj, salt, block_size, key, value, cookie)? {
                        return Ok(());
                    }
                    if fits && block_size < MZAP_MAX_BLOCK_SIZE {
                        self.set_block_size(obj, (block_size * 2) as u32)?;
                    } else {
                        self.upgrade(obj, salt, block_size)?;
                    }
                }
            }
        }
    }

    /// Puts the entry in a free slot; `false` if the block is full.
    fn micro_insert(
        &mut self,
        obj: u64,
        salt: u64,
        bs: usize,
        key: &[u8],
        value: &ZapValue,
        cookie: Option<u64>,
    ) -> Result<bool> {
        let hash = zap_hash(salt, key);
        let b = self.read_block(obj, 0)?.expect("checked by zap_kind");
        let (mut free, mut cds) = (None, BTreeSet::new());
        for slot in 0..mzap_slots(bs) {
            match mzap_entry_unhashed(&b, slot)? {
                None => free = free.or(Some(slot)),
                Some(e) if e.cookie >> 16 == hash => {
                    cds.insert(e.cookie & 0xFFFF);
                }
                Some(_) => {}
            }
        }
        drop(b);
        let Some(slot) = free else { return Ok(false) };
        let cookie = match cookie {
            Some(c) => c,
            None => make_cookie(hash, first_free_cd(&cds)?),
        };
        let entry = MicroEntry {
            value: value.as_single_u64().expect("checked by caller"),
            cookie,
            name: key,
        };
        self.modify_block(obj, 0, false, |b| mzap_put_entry(b, slot, Some(&entry)))?;
        Ok(true)
    }

    /// Rewrites a micro-ZAP as a fat ZAP with the same salt and cookies.
    fn upgrade(&mut self, obj: u64, salt: u64, bs: usize) -> Result<()> {
        let entries = self.micro_entries(obj, bs)?;
        let mut h = fatzap::init(self, obj, salt)?;
        for (key, value, cookie) in entries {
            fatzap::insert(self, obj, &mut h, &key, &ZapValue::u64(value), Some(cookie))?;
        }
        Ok(())
    }
}

/// The smallest collision differentiator not in `used`.
pub(crate) fn first_free_cd(used: &BTreeSet<u64>) -> Result<u64> {
    let cd = (0..=ZAP_MAX_CD).find(|c| !used.contains(c));
    cd.ok_or(DmuError::TooBig("too many keys with one hash"))
}
