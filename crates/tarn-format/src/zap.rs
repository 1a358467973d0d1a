//! ZAP objects: key → value maps stored in an object's blocks (ZFS's
//! `mzap_phys_t`, `zap_phys_t` and `zap_leaf_phys_t`).
//!
//! Keys are byte strings of 1..=255 bytes; values are an array of u64 or a
//! byte string of at most 8 KiB. A ZAP starts as a *micro-ZAP* (one block of
//! fixed 64-byte entries, each a key of at most 47 bytes and one u64) and is
//! upgraded to a *fat ZAP* (extendible hashing) when an entry does not fit
//! or the block is full.
//!
//! ## Hash and cookies
//! `hash48 = top 48 bits of fmix64(crc64(salt, key))`: CRC-64/ECMA-182
//! (reflected polynomial 0xC96C5795D7870F42, as ZFS's `zap_hash`) seeded
//! with the per-ZAP salt kept in the ZAP's first block, then MurmurHash3's
//! 64-bit finaliser so every output bit depends on every input bit (the
//! fat ZAP splits on the *top* bits). Entries with equal `hash48` get
//! distinct *collision differentiators* `cd` (0..=ZAP_MAX_CD, the smallest
//! one free at insert) and keep them for life. The 64-bit
//! `cookie = hash48 << 16 | cd` is unique per entry, stored with it, and
//! iteration visits entries in cookie order; a cursor is a cookie ("resume
//! at the first entry with cookie >= c"), so it stays valid across inserts,
//! removes, leaf splits and the micro → fat upgrade.
//!
//! ## Micro-ZAP (one block of 512 B .. 16 KiB, grown by doubling)
//! ```text
//! off  size  field
//!   0     8  block_type  ZBT_MICRO
//!   8     8  salt
//!  16    48  reserved    zero
//!  64  64*n  entries, n = block_size/64 - 1:
//!            0   8  value     u64
//!            8   8  cookie    hash48 << 16 | cd
//!           16   1  name_len  0 = free entry (then all 64 bytes are zero)
//!           17  47  name      bytes past name_len are zero
//! ```
//!
//! ## Fat ZAP (16 KiB blocks)
//! Block 0 is the header; the pointer table maps the top `ptrtbl_shift` bits
//! of `hash48` to a leaf block id. While `ptrtbl_shift == 10` the table is
//! embedded in the second half of block 0; when it doubles beyond that it
//! moves to `ptrtbl_numblks` consecutive blocks starting at `ptrtbl_blk`,
//! and each later doubling copies it to twice as many new blocks (the old
//! ones are freed). Block ids are handed out from `next_free_blk`.
//! ```text
//! header block (block 0):
//! off   size  field
//!    0     8  block_type      ZBT_HEADER
//!    8     8  salt
//!   16     8  num_entries
//!   24     8  num_leafs
//!   32     8  next_free_blk   first never-used block id
//!   40     8  ptrtbl_blk      0 = embedded at offset 8192
//!   48     8  ptrtbl_numblks  0 when embedded
//!   56     1  ptrtbl_shift    10..=ZAP_MAX_PTRTBL_SHIFT
//!   57  8135  reserved        zero
//! 8192  8192  embedded pointer table: 1024 x u64 leaf block ids
//!
//! leaf block:
//! off  size  field
//!   0     8  block_type  ZBT_LEAF
//!   8     8  prefix      the top prefix_len bits of hash48 of every entry
//!  16     1  prefix_len  0..=ptrtbl_shift
//!  17     1  reserved    zero
//!  18     2  nentries
//!  20     2  used        bytes of entries following the header
//!  22    42  reserved    zero
//!  64     -  entries, packed, unordered:
//!            0   8  cookie
//!            8   1  key_len     1..=255
//!            9   1  value_kind  1 = u64 array, 2 = byte string
//!           10   2  value_len   elements (u64s or bytes)
//!           12   -  key, then the value (u64s little-endian)
//! ```
//! A leaf that cannot take a new entry splits in two by the next hash bit
//! (doubling the pointer table first when the leaf's prefix is as long as
//! the table's). Leaves are never merged. Entries whose `hash48` are equal
//! must share a leaf; two 8 KiB values colliding on all 48 bits would not fit
//! and are refused — a 2^-48 event per pair.

use crate::le::{put_u16, put_u64, u16_at, u64_at};
use crate::Corrupted;

pub const ZAP_MAX_KEY_LEN: usize = 255;
pub const ZAP_MAX_VALUE_BYTES: usize = 8192;
pub const ZAP_HASH_BITS: u32 = 48;
pub const ZAP_CD_BITS: u32 = 16;
/// Largest collision differentiator; `cookie + 1` therefore never overflows.
pub const ZAP_MAX_CD: u64 = 0xFFFE;

pub const ZBT_MICRO: u64 = u64::from_le_bytes(*b"tZAPmicr");
pub const ZBT_HEADER: u64 = u64::from_le_bytes(*b"tZAPhead");
pub const ZBT_LEAF: u64 = u64::from_le_bytes(*b"tZAPleaf");

pub const MZAP_MIN_BLOCK_SIZE: usize = 512;
pub const MZAP_MAX_BLOCK_SIZE: usize = 16384;
pub const MZAP_ENT_SIZE: usize = 64;
pub const MZAP_NAME_MAX: usize = 47;
pub const MZAP_HEADER_SIZE: usize = 64;

pub const FZAP_BLOCK_SIZE: usize = 16384;
pub const FZAP_EMBEDDED_PTRTBL_OFF: usize = FZAP_BLOCK_SIZE / 2;
pub const FZAP_EMBEDDED_PTRTBL_SHIFT: u8 = 10;
/// Pointers per table block (16 KiB / 8).
pub const FZAP_PTRS_PER_BLOCK_SHIFT: u8 = 11;
/// 2^40 table entries (8 TiB of table) is far beyond any real ZAP; the cap
/// keeps arithmetic on a corrupt header in range.
pub const ZAP_MAX_PTRTBL_SHIFT: u8 = 40;
pub const ZAP_LEAF_HEADER_SIZE: usize = 64;
pub const ZAP_LEAF_SPACE: usize = FZAP_BLOCK_SIZE - ZAP_LEAF_HEADER_SIZE;
pub const ZAP_LEAF_ENTRY_HEADER: usize = 12;

const _: () =
    assert!(ZAP_LEAF_ENTRY_HEADER + ZAP_MAX_KEY_LEN + ZAP_MAX_VALUE_BYTES <= ZAP_LEAF_SPACE);
const _: () = assert!(1usize << FZAP_EMBEDDED_PTRTBL_SHIFT == FZAP_EMBEDDED_PTRTBL_OFF / 8);

// ---------------------------------------------------------------- hashing

const CRC64_POLY: u64 = 0xC96C_5795_D787_0F42;

const fn crc64_table() -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u64;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ CRC64_POLY
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC64_TABLE: [u64; 256] = crc64_table();

/// The 48-bit hash of `key` under `salt` (see the module comment).
pub fn zap_hash(salt: u64, key: &[u8]) -> u64 {
    let mut h = salt;
    for &c in key {
        h = (h >> 8) ^ CRC64_TABLE[((h ^ u64::from(c)) & 0xFF) as usize];
    }
    fmix64(h) >> (64 - ZAP_HASH_BITS)
}

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

pub fn make_cookie(hash48: u64, cd: u64) -> u64 {
    debug_assert!(hash48 < 1 << ZAP_HASH_BITS && cd <= ZAP_MAX_CD);
    hash48 << ZAP_CD_BITS | cd
}

pub fn cookie_hash(cookie: u64) -> u64 {
    cookie >> ZAP_CD_BITS
}

pub fn cookie_cd(cookie: u64) -> u64 {
    cookie & ((1 << ZAP_CD_BITS) - 1)
}

// ---------------------------------------------------------------- values

/// A ZAP value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ZapValue {
    U64s(Vec<u64>),
    Bytes(Vec<u8>),
}

impl ZapValue {
    pub fn u64(v: u64) -> Self {
        ZapValue::U64s(vec![v])
    }
    /// Size of the encoded value in bytes.
    pub fn encoded_len(&self) -> usize {
        match self {
            ZapValue::U64s(v) => v.len() * 8,
            ZapValue::Bytes(b) => b.len(),
        }
    }
    /// The single u64 of a one-element array (what a micro-ZAP can hold).
    pub fn as_single_u64(&self) -> Option<u64> {
        match self {
            ZapValue::U64s(v) if v.len() == 1 => Some(v[0]),
            _ => None,
        }
    }
    fn kind(&self) -> u8 {
        match self {
            ZapValue::U64s(_) => VALUE_KIND_U64,
            ZapValue::Bytes(_) => VALUE_KIND_BYTES,
        }
    }
    fn elements(&self) -> usize {
        match self {
            ZapValue::U64s(v) => v.len(),
            ZapValue::Bytes(b) => b.len(),
        }
    }
}

const VALUE_KIND_U64: u8 = 1;
const VALUE_KIND_BYTES: u8 = 2;

/// Checks the limits every ZAP key and value must meet.
pub fn check_entry_limits(key: &[u8], value: &ZapValue) -> Result<(), &'static str> {
    if key.is_empty() || key.len() > ZAP_MAX_KEY_LEN {
        return Err("key must be 1..=255 bytes");
    }
    if value.encoded_len() > ZAP_MAX_VALUE_BYTES {
        return Err("value larger than 8 KiB");
    }
    Ok(())
}

/// Block type of a ZAP block (its first u64).
pub fn block_type(b: &[u8]) -> Result<u64, Corrupted> {
    b.get(..8)
        .map(|x| u64_at(x, 0))
        .ok_or_else(|| Corrupted::new("zap", "short block"))
}

// ---------------------------------------------------------------- micro

/// One micro-ZAP entry, borrowed from its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MicroEntry<'a> {
    pub value: u64,
    pub cookie: u64,
    pub name: &'a [u8],
}

/// Checks a micro-ZAP block's header and returns its salt.
pub fn mzap_decode_header(b: &[u8]) -> Result<u64, Corrupted> {
    let bad = |why: &str| Corrupted::new("micro-zap", why.to_string());
    let n = b.len();
    if !(MZAP_MIN_BLOCK_SIZE..=MZAP_MAX_BLOCK_SIZE).contains(&n) || !n.is_power_of_two() {
        return Err(bad("bad block size"));
    }
    if u64_at(b, 0) != ZBT_MICRO {
        return Err(bad("bad block type"));
    }
    if b[16..MZAP_HEADER_SIZE].iter().any(|&x| x != 0) {
        return Err(bad("reserved bytes not zero"));
    }
    Ok(u64_at(b, 8))
}

pub fn mzap_encode_header(b: &mut [u8], salt: u64) {
    b[..MZAP_HEADER_SIZE].fill(0);
    put_u64(b, 0, ZBT_MICRO);
    put_u64(b, 8, salt);
}

/// Number of entry slots in a micro-ZAP block of `block_size` bytes.
pub fn mzap_slots(block_size: usize) -> usize {
    block_size / MZAP_ENT_SIZE - 1
}

fn mzap_slot_range(slot: usize) -> std::ops::Range<usize> {
    let off = MZAP_HEADER_SIZE + slot * MZAP_ENT_SIZE;
    off..off + MZAP_ENT_SIZE
}

/// Decodes slot `slot`; `Ok(None)` is a free slot. `salt` lets the decoder
/// check that the stored cookie matches the name's hash.
pub fn mzap_entry(b: &[u8], slot: usize, salt: u64) -> Result<Option<MicroEntry<'_>>, Corrupted> {
    let entry = mzap_entry_unhashed(b, slot)?;
    if let Some(e) = &entry {
        check_cookie("micro-zap", e.cookie, salt, e.name)?;
    }
    Ok(entry)
}

/// Checks every slot of a micro-ZAP block, cookies included: what a block
/// read from disk must pass once before [`mzap_entry_unhashed`] may be
/// used on it.
pub fn mzap_check_block(b: &[u8], salt: u64) -> Result<(), Corrupted> {
    mzap_decode_header(b)?;
    for slot in 0..mzap_slots(b.len()) {
        mzap_entry(b, slot, salt)?;
    }
    Ok(())
}

/// [`mzap_entry`] without re-hashing the name: for a block that passed
/// [`mzap_check_block`] (or was built in memory). The layout is still
/// checked, so any bytes decode without a panic.
pub fn mzap_entry_unhashed(b: &[u8], slot: usize) -> Result<Option<MicroEntry<'_>>, Corrupted> {
    let e = b
        .get(mzap_slot_range(slot))
        .ok_or_else(|| Corrupted::new("micro-zap", "slot beyond block"))?;
    let len = usize::from(e[16]);
    if len == 0 {
        if e.iter().any(|&x| x != 0) {
            return Err(Corrupted::new("micro-zap", "free entry not zero"));
        }
        return Ok(None);
    }
    if len > MZAP_NAME_MAX || e[17 + len..].iter().any(|&x| x != 0) {
        return Err(Corrupted::new(
            "micro-zap",
            format!("bad name length {len}"),
        ));
    }
    Ok(Some(MicroEntry {
        value: u64_at(e, 0),
        cookie: u64_at(e, 8),
        name: &e[17..17 + len],
    }))
}

pub fn mzap_put_entry(b: &mut [u8], slot: usize, entry: Option<&MicroEntry<'_>>) {
    let e = &mut b[mzap_slot_range(slot)];
    e.fill(0);
    if let Some(ent) = entry {
        assert!(!ent.name.is_empty() && ent.name.len() <= MZAP_NAME_MAX);
        put_u64(e, 0, ent.value);
        put_u64(e, 8, ent.cookie);
        e[16] = ent.name.len() as u8;
        e[17..17 + ent.name.len()].copy_from_slice(ent.name);
    }
}

fn check_cookie(what: &'static str, cookie: u64, salt: u64, name: &[u8]) -> Result<(), Corrupted> {
    if cookie_hash(cookie) != zap_hash(salt, name) || cookie_cd(cookie) > ZAP_MAX_CD {
        return Err(Corrupted::new(what, "entry cookie does not match its key"));
    }
    Ok(())
}

// ---------------------------------------------------------------- fat header

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FatHeader {
    pub salt: u64,
    pub num_entries: u64,
    pub num_leafs: u64,
    pub next_free_blk: u64,
    pub ptrtbl_blk: u64,
    pub ptrtbl_numblks: u64,
    pub ptrtbl_shift: u8,
}

impl FatHeader {
    /// Encodes the header fields into block 0 (the embedded table and the
    /// reserved bytes are left untouched).
    pub fn encode_into(&self, b: &mut [u8]) {
        put_u64(b, 0, ZBT_HEADER);
        put_u64(b, 8, self.salt);
        put_u64(b, 16, self.num_entries);
        put_u64(b, 24, self.num_leafs);
        put_u64(b, 32, self.next_free_blk);
        put_u64(b, 40, self.ptrtbl_blk);
        put_u64(b, 48, self.ptrtbl_numblks);
        b[56] = self.ptrtbl_shift;
    }

    pub fn decode(b: &[u8]) -> Result<FatHeader, Corrupted> {
        let bad = |why: String| Err(Corrupted::new("fat-zap header", why));
        if b.len() != FZAP_BLOCK_SIZE || u64_at(b, 0) != ZBT_HEADER {
            return bad("bad block size or type".into());
        }
        // Every lookup decodes the header, so the 8 KiB of reserved bytes
        // are OR-ed together without an early exit (it vectorizes).
        if b[57..FZAP_EMBEDDED_PTRTBL_OFF]
            .iter()
            .fold(0, |a, &x| a | x)
            != 0
        {
            return bad("reserved bytes not zero".into());
        }
        let h = FatHeader {
            salt: u64_at(b, 8),
            num_entries: u64_at(b, 16),
            num_leafs: u64_at(b, 24),
            next_free_blk: u64_at(b, 32),
            ptrtbl_blk: u64_at(b, 40),
            ptrtbl_numblks: u64_at(b, 48),
            ptrtbl_shift: b[56],
        };
        h.validate()?;
        Ok(h)
    }

    fn validate(&self) -> Result<(), Corrupted> {
        let bad = |why: String| Err(Corrupted::new("fat-zap header", why));
        let s = self.ptrtbl_shift;
        if !(FZAP_EMBEDDED_PTRTBL_SHIFT..=ZAP_MAX_PTRTBL_SHIFT).contains(&s) {
            return bad(format!("ptrtbl_shift {s}"));
        }
        let want_blks = self.table_blocks_for_shift(s);
        if self.ptrtbl_numblks != want_blks || (want_blks == 0) != (self.ptrtbl_blk == 0) {
            return bad(format!(
                "table of {} blocks at {}",
                self.ptrtbl_numblks, self.ptrtbl_blk
            ));
        }
        let table_end = self.ptrtbl_blk.checked_add(self.ptrtbl_numblks);
        if table_end.is_none_or(|e| e > self.next_free_blk) || self.num_leafs == 0 {
            return bad("table or leaves beyond next_free_blk".into());
        }
        if self.num_leafs >= self.next_free_blk {
            return bad("more leaves than blocks".into());
        }
        Ok(())
    }

    /// Blocks a separate table of 2^shift pointers takes (0 = embedded).
    pub fn table_blocks_for_shift(&self, shift: u8) -> u64 {
        if shift <= FZAP_EMBEDDED_PTRTBL_SHIFT {
            0
        } else {
            1u64 << (shift - FZAP_PTRS_PER_BLOCK_SHIFT)
        }
    }

    /// Where table entry `idx` lives: (block id, byte offset in the block).
    pub fn table_slot(&self, idx: u64) -> (u64, usize) {
        assert!(idx < 1u64 << self.ptrtbl_shift);
        if self.ptrtbl_blk == 0 {
            (0, FZAP_EMBEDDED_PTRTBL_OFF + idx as usize * 8)
        } else {
            let per = 1u64 << FZAP_PTRS_PER_BLOCK_SHIFT;
            (self.ptrtbl_blk + idx / per, (idx % per) as usize * 8)
        }
    }
}

/// Reads a pointer-table entry and checks it names a plausible leaf block.
pub fn table_entry(b: &[u8], off: usize, h: &FatHeader) -> Result<u64, Corrupted> {
    let blk = u64_at(b, off);
    let in_table =
        h.ptrtbl_blk != 0 && (h.ptrtbl_blk..h.ptrtbl_blk + h.ptrtbl_numblks).contains(&blk);
    if blk == 0 || blk >= h.next_free_blk || in_table {
        return Err(Corrupted::new(
            "fat-zap table",
            format!("entry names block {blk}"),
        ));
    }
    Ok(blk)
}

// ---------------------------------------------------------------- leaves

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafHeader {
    pub prefix: u64,
    pub prefix_len: u8,
    pub nentries: u16,
    pub used: u16,
}

impl LeafHeader {
    pub fn encode_into(&self, b: &mut [u8]) {
        b[..ZAP_LEAF_HEADER_SIZE].fill(0);
        put_u64(b, 0, ZBT_LEAF);
        put_u64(b, 8, self.prefix);
        b[16] = self.prefix_len;
        put_u16(b, 18, self.nentries);
        put_u16(b, 20, self.used);
    }

    pub fn decode(b: &[u8]) -> Result<LeafHeader, Corrupted> {
        let bad = |why: String| Err(Corrupted::new("zap leaf", why));
        if b.len() != FZAP_BLOCK_SIZE || u64_at(b, 0) != ZBT_LEAF {
            return bad("bad block size or type".into());
        }
        if b[17] != 0 || b[22..ZAP_LEAF_HEADER_SIZE].iter().any(|&x| x != 0) {
            return bad("reserved bytes not zero".into());
        }
        let h = LeafHeader {
            prefix: u64_at(b, 8),
            prefix_len: b[16],
            nentries: u16_at(b, 18),
            used: u16_at(b, 20),
        };
        if u32::from(h.prefix_len) > ZAP_HASH_BITS
            || (h.prefix_len < 64 && h.prefix >> h.prefix_len != 0)
        {
            return bad(format!("prefix {:#x}/{}", h.prefix, h.prefix_len));
        }
        if usize::from(h.used) > ZAP_LEAF_SPACE {
            return bad(format!("used {}", h.used));
        }
        Ok(h)
    }

    /// Does `hash48` belong in this leaf?
    pub fn covers(&self, hash48: u64) -> bool {
        hash_prefix(hash48, self.prefix_len) == self.prefix
    }
}

/// The top `len` bits of a 48-bit hash.
pub fn hash_prefix(hash48: u64, len: u8) -> u64 {
    if len == 0 {
        0
    } else {
        hash48 >> (ZAP_HASH_BITS - u32::from(len))
    }
}

/// One leaf entry, borrowed from its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafEntry<'a> {
    pub cookie: u64,
    pub key: &'a [u8],
    kind: u8,
    count: usize,
    value: &'a [u8],
    /// Byte offset of the entry in its block and its encoded length.
    pub offset: usize,
    pub len: usize,
}

impl LeafEntry<'_> {
    pub fn value(&self) -> ZapValue {
        match self.kind {
            VALUE_KIND_U64 => {
                ZapValue::U64s(self.value.chunks_exact(8).map(|c| u64_at(c, 0)).collect())
            }
            _ => ZapValue::Bytes(self.value.to_vec()),
        }
    }
}

/// Encoded size of an entry.
pub fn leaf_entry_len(key: &[u8], value: &ZapValue) -> usize {
    ZAP_LEAF_ENTRY_HEADER + key.len() + value.encoded_len()
}

/// Writes an entry at `off`; the caller has checked it fits.
pub fn leaf_put_entry(
    b: &mut [u8],
    off: usize,
    cookie: u64,
    key: &[u8],
    value: &ZapValue,
) -> usize {
    let len = leaf_entry_len(key, value);
    let e = &mut b[off..off + len];
    put_u64(e, 0, cookie);
    e[8] = key.len() as u8;
    e[9] = value.kind();
    put_u16(e, 10, value.elements() as u16);
    e[12..12 + key.len()].copy_from_slice(key);
    let v = &mut e[12 + key.len()..];
    match value {
        ZapValue::U64s(xs) => xs
            .iter()
            .enumerate()
            .for_each(|(i, x)| put_u64(v, i * 8, *x)),
        ZapValue::Bytes(bs) => v.copy_from_slice(bs),
    }
    len
}

/// The entries of a leaf, decoded for their layout only (lengths stay
/// inside `used`): for a leaf that passed [`leaf_entries`] once when it
/// was read from disk, or that was built in memory. No key is re-hashed,
/// so a lookup costs one pass over the leaf's bytes. Any bytes decode
/// without a panic; a damaged entry ends the walk with `Err`.
pub fn leaf_scan(b: &[u8]) -> Result<(LeafHeader, LeafScan<'_>), Corrupted> {
    let h = LeafHeader::decode(b)?;
    let end = ZAP_LEAF_HEADER_SIZE + usize::from(h.used);
    Ok((
        h,
        LeafScan {
            b: &b[..end],
            off: ZAP_LEAF_HEADER_SIZE,
        },
    ))
}

/// Iterator of [`leaf_scan`].
pub struct LeafScan<'a> {
    b: &'a [u8],
    off: usize,
}

impl<'a> Iterator for LeafScan<'a> {
    type Item = Result<LeafEntry<'a>, Corrupted>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.off >= self.b.len() {
            return None;
        }
        match leaf_entry_at(self.b, self.off) {
            Ok(e) => {
                self.off += e.len;
                Some(Ok(e))
            }
            Err(e) => {
                self.off = self.b.len();
                Some(Err(e))
            }
        }
    }
}

/// Calls `f` with every entry of a leaf whose hash is `hash48`, until it
/// returns `true`, in one pass that decodes only each entry's cookie and
/// length (a lookup in a full leaf passes some 500 entries). For a leaf
/// whose layout [`leaf_scan`] would accept; damage ends the walk with
/// `Err`, as there.
pub fn leaf_same_hash<'a>(
    b: &'a [u8],
    hash48: u64,
    mut f: impl FnMut(LeafEntry<'a>) -> bool,
) -> Result<(), Corrupted> {
    let h = LeafHeader::decode(b)?;
    let b = &b[..ZAP_LEAF_HEADER_SIZE + usize::from(h.used)];
    let mut off = ZAP_LEAF_HEADER_SIZE;
    while off < b.len() {
        let (cookie, _, len) = entry_shape(b, off)?;
        if cookie_hash(cookie) == hash48 && f(leaf_entry_at(b, off)?) {
            break;
        }
        off += len;
    }
    Ok(())
}

/// The entry of `key` (whose hash is `hash48`) in a leaf, as
/// [`leaf_same_hash`] walks it.
pub fn leaf_find<'a>(
    b: &'a [u8],
    hash48: u64,
    key: &[u8],
) -> Result<Option<LeafEntry<'a>>, Corrupted> {
    let mut found = None;
    leaf_same_hash(b, hash48, |e| {
        let hit = e.key == key;
        if hit {
            found = Some(e);
        }
        hit
    })?;
    Ok(found)
}

/// All entries of a leaf, validated: lengths stay inside `used`, the count
/// matches, every cookie matches its key and the leaf's prefix.
pub fn leaf_entries(b: &[u8], salt: u64) -> Result<(LeafHeader, Vec<LeafEntry<'_>>), Corrupted> {
    let h = LeafHeader::decode(b)?;
    let end = ZAP_LEAF_HEADER_SIZE + usize::from(h.used);
    let mut out = Vec::with_capacity(usize::from(h.nentries).min(ZAP_LEAF_SPACE / 13));
    let mut off = ZAP_LEAF_HEADER_SIZE;
    while off < end {
        let e = leaf_entry_at(&b[..end], off)?;
        check_cookie("zap leaf", e.cookie, salt, e.key)?;
        if !h.covers(cookie_hash(e.cookie)) {
            return Err(Corrupted::new(
                "zap leaf",
                "entry outside the leaf's prefix",
            ));
        }
        off += e.len;
        out.push(e);
    }
    if out.len() != usize::from(h.nentries) || b[end..].iter().any(|&x| x != 0) {
        return Err(Corrupted::new(
            "zap leaf",
            "entry count or free space mismatch",
        ));
    }
    Ok((h, out))
}

/// `(cookie, key length, encoded length)` of the entry at `off`, checked
/// to lie inside `b`.
#[inline]
fn entry_shape(b: &[u8], off: usize) -> Result<(u64, usize, usize), Corrupted> {
    let bad = |why: &str| Corrupted::new("zap leaf", format!("entry at {off}: {why}"));
    let hdr = b
        .get(off..off + ZAP_LEAF_ENTRY_HEADER)
        .ok_or_else(|| bad("truncated"))?;
    let key_len = usize::from(hdr[8]);
    let count = usize::from(u16_at(hdr, 10));
    let vbytes = match hdr[9] {
        VALUE_KIND_U64 => count * 8,
        VALUE_KIND_BYTES => count,
        _ => return Err(bad("unknown value kind")),
    };
    if key_len == 0 || vbytes > ZAP_MAX_VALUE_BYTES {
        return Err(bad("bad key or value length"));
    }
    let len = ZAP_LEAF_ENTRY_HEADER + key_len + vbytes;
    if off + len > b.len() {
        return Err(bad("runs past used bytes"));
    }
    Ok((u64_at(hdr, 0), key_len, len))
}

fn leaf_entry_at(b: &[u8], off: usize) -> Result<LeafEntry<'_>, Corrupted> {
    let (cookie, key_len, len) = entry_shape(b, off)?;
    let body = &b[off..off + len];
    Ok(LeafEntry {
        cookie,
        key: &body[ZAP_LEAF_ENTRY_HEADER..ZAP_LEAF_ENTRY_HEADER + key_len],
        kind: body[9],
        count: usize::from(u16_at(body, 10)),
        value: &body[ZAP_LEAF_ENTRY_HEADER + key_len..],
        offset: off,
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_reference() {
        // CRC-64/XZ uses this table with init/xorout !0; check the table
        // against its published check value for "123456789".
        let mut h = !0u64;
        for &c in b"123456789" {
            h = (h >> 8) ^ CRC64_TABLE[((h ^ u64::from(c)) & 0xFF) as usize];
        }
        assert_eq!(!h, 0x995D_C9BB_DF19_39FA);
    }

    #[test]
    fn golden_hash() {
        // Pinned: changing the hash changes every ZAP's layout on disk.
        assert_eq!(zap_hash(0, b"a"), zap_hash(0, b"a"));
        assert_ne!(zap_hash(0, b"a"), zap_hash(1, b"a"));
        assert!(zap_hash(42, b"hello") < 1 << 48);
        let pinned = zap_hash(0x1234, b"hello");
        assert_eq!(pinned, 0xe49d_87a4_0b00, "{pinned:#x}");
    }

    #[test]
    fn micro_golden() {
        let mut b = vec![0u8; 512];
        mzap_encode_header(&mut b, 0x55);
        let cookie = make_cookie(zap_hash(0x55, b"ab"), 1);
        let e = MicroEntry {
            value: 7,
            cookie,
            name: b"ab",
        };
        mzap_put_entry(&mut b, 2, Some(&e));
        let mut want = vec![0u8; 512];
        want[0..8].copy_from_slice(b"tZAPmicr");
        want[8] = 0x55;
        let off = 64 + 2 * 64;
        want[off] = 7;
        want[off + 8..off + 16].copy_from_slice(&cookie.to_le_bytes());
        want[off + 16] = 2;
        want[off + 17..off + 19].copy_from_slice(b"ab");
        assert_eq!(b, want);
        assert_eq!(mzap_decode_header(&b).unwrap(), 0x55);
        assert_eq!(mzap_entry(&b, 2, 0x55).unwrap(), Some(e));
        assert_eq!(mzap_entry(&b, 0, 0x55).unwrap(), None);
        assert!(mzap_entry(&b, 2, 0x56).is_err(), "cookie bound to salt");
        assert_eq!(mzap_slots(512), 7);
    }

    #[test]
    fn fat_header_golden() {
        let h = FatHeader {
            salt: 9,
            num_entries: 3,
            num_leafs: 2,
            next_free_blk: 5,
            ptrtbl_blk: 3,
            ptrtbl_numblks: 2,
            ptrtbl_shift: 12,
        };
        let mut b = vec![0u8; FZAP_BLOCK_SIZE];
        h.encode_into(&mut b);
        let mut want = vec![0u8; FZAP_BLOCK_SIZE];
        want[0..8].copy_from_slice(b"tZAPhead");
        want[8] = 9;
        want[16] = 3;
        want[24] = 2;
        want[32] = 5;
        want[40] = 3;
        want[48] = 2;
        want[56] = 12;
        assert_eq!(b, want);
        assert_eq!(FatHeader::decode(&b).unwrap(), h);
        assert_eq!(h.table_slot(2049), (4, 8));
        let emb = FatHeader {
            ptrtbl_blk: 0,
            ptrtbl_numblks: 0,
            ptrtbl_shift: 10,
            ..h
        };
        assert_eq!(emb.table_slot(3), (0, 8192 + 24));
        let mut bad = b.clone();
        bad[48] = 3; // table size disagrees with shift
        assert!(FatHeader::decode(&bad).is_err());
    }

    #[test]
    fn leaf_golden() {
        let salt = 3;
        let hash = zap_hash(salt, b"k");
        let mut b = vec![0u8; FZAP_BLOCK_SIZE];
        let v = ZapValue::U64s(vec![1, 2]);
        let len = leaf_put_entry(&mut b, 64, make_cookie(hash, 0), b"k", &v);
        assert_eq!(len, 12 + 1 + 16);
        let h = LeafHeader {
            prefix: hash_prefix(hash, 1),
            prefix_len: 1,
            nentries: 1,
            used: len as u16,
        };
        h.encode_into(&mut b);
        let mut want = vec![0u8; FZAP_BLOCK_SIZE];
        want[0..8].copy_from_slice(b"tZAPleaf");
        want[8] = (hash >> 47) as u8;
        want[16] = 1;
        want[18] = 1;
        want[20] = 29;
        want[64..72].copy_from_slice(&make_cookie(hash, 0).to_le_bytes());
        want[72] = 1;
        want[73] = 1;
        want[74] = 2;
        want[76] = b'k';
        want[77] = 1;
        want[85] = 2;
        assert_eq!(b, want);
        let (hh, es) = leaf_entries(&b, salt).unwrap();
        assert_eq!(hh, h);
        assert_eq!(es.len(), 1);
        assert_eq!(es[0].key, b"k");
        assert_eq!(es[0].value(), v);
    }

    #[test]
    fn unhashed_decoders_agree_with_checked_ones() {
        let salt = 5;
        let mut m = vec![0u8; 1024];
        mzap_encode_header(&mut m, salt);
        let name = b"entry";
        let e = MicroEntry {
            value: 9,
            cookie: make_cookie(zap_hash(salt, name), 0),
            name,
        };
        mzap_put_entry(&mut m, 3, Some(&e));
        mzap_check_block(&m, salt).unwrap();
        assert!(
            mzap_check_block(&m, salt + 1).is_err(),
            "cookie bound to salt"
        );
        for slot in 0..mzap_slots(m.len()) {
            assert_eq!(
                mzap_entry_unhashed(&m, slot).unwrap(),
                mzap_entry(&m, slot, salt).unwrap()
            );
        }
        let mut b = vec![0u8; FZAP_BLOCK_SIZE];
        let mut off = ZAP_LEAF_HEADER_SIZE;
        for k in [&b"a"[..], b"bb", b"ccc"] {
            let v = ZapValue::Bytes(k.to_vec());
            off += leaf_put_entry(&mut b, off, make_cookie(zap_hash(salt, k), 0), k, &v);
        }
        let used = (off - ZAP_LEAF_HEADER_SIZE) as u16;
        LeafHeader {
            prefix: 0,
            prefix_len: 0,
            nentries: 3,
            used,
        }
        .encode_into(&mut b);
        let (h, checked) = leaf_entries(&b, salt).unwrap();
        let (h2, scan) = leaf_scan(&b).unwrap();
        assert_eq!(h, h2);
        assert_eq!(scan.collect::<Result<Vec<_>, _>>().unwrap(), checked);
        b[ZAP_LEAF_HEADER_SIZE + 8] = 0; // first key length: zero
        let (_, mut scan) = leaf_scan(&b).unwrap();
        assert!(scan.next().unwrap().is_err());
        assert!(scan.next().is_none(), "a damaged entry ends the walk");
    }

    proptest::proptest! {
        #[test]
        fn leaf_decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200), off in 0usize..64) {
            let mut b = vec![0u8; FZAP_BLOCK_SIZE];
            LeafHeader { prefix: 0, prefix_len: 0, nentries: 2, used: bytes.len() as u16 }.encode_into(&mut b);
            b[64..64 + bytes.len()].copy_from_slice(&bytes);
            b[off] ^= 1;
            let _ = leaf_entries(&b, 0);
            if let Ok((_, scan)) = leaf_scan(&b) {
                for e in scan { let _ = e; }
            }
            let hash = bytes.get(..8).map_or(0, |c| cookie_hash(u64_at(c, 0)));
            let _ = leaf_find(&b, hash, bytes.get(12..14).unwrap_or(b"k"));
            let _ = leaf_same_hash(&b, hash, |_| false);
        }

        #[test]
        fn header_decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 64)) {
            let mut b = vec![0u8; FZAP_BLOCK_SIZE];
            b[..64].copy_from_slice(&bytes);
            b[..8].copy_from_slice(b"tZAPhead");
            if let Ok(h) = FatHeader::decode(&b) {
                let _ = h.table_slot((1u64 << h.ptrtbl_shift) - 1);
            }
            let _ = LeafHeader::decode(&b);
        }

        #[test]
        fn micro_decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 512)) {
            if mzap_decode_header(&bytes).is_ok() {
                for s in 0..mzap_slots(512) { let _ = mzap_entry(&bytes, s, 0); }
            }
            for s in 0..mzap_slots(512) { let _ = mzap_entry(&bytes, s, 0); }
            for s in 0..mzap_slots(512) { let _ = mzap_entry_unhashed(&bytes, s); }
            let _ = mzap_check_block(&bytes, 0);
        }

        #[test]
        fn leaf_round_trip(keys in proptest::collection::btree_set(proptest::collection::vec(1u8..=255, 1..40), 1..30)) {
            let salt = 11;
            let mut b = vec![0u8; FZAP_BLOCK_SIZE];
            let mut off = 64;
            for (i, k) in keys.iter().enumerate() {
                off += leaf_put_entry(&mut b, off, make_cookie(zap_hash(salt, k), 0), k, &ZapValue::Bytes(vec![i as u8; i]));
            }
            LeafHeader { prefix: 0, prefix_len: 0, nentries: keys.len() as u16, used: (off - 64) as u16 }.encode_into(&mut b);
            let (_, es) = leaf_entries(&b, salt).unwrap();
            for (i, (e, k)) in es.iter().zip(keys.iter()).enumerate() {
                proptest::prop_assert_eq!(e.key, &k[..]);
                proptest::prop_assert_eq!(e.value(), ZapValue::Bytes(vec![i as u8; i]));
                // The lean search finds the same entry the full decode did.
                proptest::prop_assert_eq!(leaf_find(&b, zap_hash(salt, k), k).unwrap(), Some(*e));
            }
            let absent = [0u8; 41]; // longer than any generated key
            proptest::prop_assert_eq!(leaf_find(&b, zap_hash(salt, &absent), &absent).unwrap(), None);
        }

        #[test]
        fn leaf_same_hash_visits_every_colliding_entry(n in 1usize..40, cut in 0usize..40) {
            // Entries whose cookies share one hash (differentiators 0..n),
            // among others; the walk sees exactly those, in order, and stops
            // when told to.
            let mut b = vec![0u8; FZAP_BLOCK_SIZE];
            let mut off = 64;
            let hash = 0xABCD_EF01_2345;
            for cd in 0..n as u64 {
                off += leaf_put_entry(&mut b, off, make_cookie(hash + 1, cd), b"other", &ZapValue::u64(cd));
                off += leaf_put_entry(&mut b, off, make_cookie(hash, cd), format!("k{cd}").as_bytes(), &ZapValue::u64(cd));
            }
            LeafHeader { prefix: 0, prefix_len: 0, nentries: 2 * n as u16, used: (off - 64) as u16 }.encode_into(&mut b);
            let mut seen = Vec::new();
            leaf_same_hash(&b, hash, |e| { seen.push(cookie_cd(e.cookie)); seen.len() > cut }).unwrap();
            let want: Vec<u64> = (0..n as u64).take(cut + 1).collect();
            proptest::prop_assert_eq!(seen, want);
        }
    }
}
