//! Fat ZAPs: extendible hashing over 16 KiB leaf blocks (ZFS's `zap.c`,
//! `zap_leaf.c`; layout in `tarn_format::zap`).
//!
//! The pointer table maps the top `ptrtbl_shift` bits of an entry's
//! 48-bit hash to its leaf; a leaf with prefix length `p` is named by
//! `2^(shift - p)` consecutive table entries. Inserting into a full leaf
//! splits it on the next hash bit, moving the upper half of its table
//! range to a new leaf; when `p == shift` the table first doubles (every
//! entry `i` of the new table copies entry `i / 2` of the old one). Table
//! blocks and leaves are allocated from `next_free_blk`; a replaced table
//! becomes a hole. Lookups cost one table read and one leaf scan.
//!
//! Invariants checked on every access (a violation is `Corrupted`, never a
//! loop): the leaf a table entry names covers the hash being looked up,
//! and its prefix is no longer than the table's shift.

use std::collections::BTreeSet;

use tarn_format::zap::{
    cookie_hash, hash_prefix, leaf_entries, leaf_entry_len, leaf_find, leaf_put_entry,
    leaf_same_hash, leaf_scan, make_cookie, table_entry, zap_hash, FatHeader, LeafEntry,
    LeafHeader, ZapValue, FZAP_BLOCK_SIZE, FZAP_EMBEDDED_PTRTBL_OFF, FZAP_EMBEDDED_PTRTBL_SHIFT,
    FZAP_PTRS_PER_BLOCK_SHIFT, ZAP_CD_BITS, ZAP_HASH_BITS, ZAP_LEAF_HEADER_SIZE, ZAP_LEAF_SPACE,
    ZAP_MAX_PTRTBL_SHIFT,
};
use tarn_format::Corrupted;

use crate::dirty::Block;
use crate::error::{DmuError, Result};
use crate::locked::Locked;
use crate::zap::{first_free_cd, ZapEntry};

/// Turns block 0 into a fat header whose embedded table names one empty
/// leaf (block 1, prefix length 0).
pub(crate) fn init(l: &mut Locked<'_>, obj: u64, salt: u64) -> Result<FatHeader> {
    l.set_block_size(obj, FZAP_BLOCK_SIZE as u32)?;
    let h = FatHeader {
        salt,
        num_entries: 0,
        num_leafs: 1,
        next_free_blk: 2,
        ptrtbl_blk: 0,
        ptrtbl_numblks: 0,
        ptrtbl_shift: FZAP_EMBEDDED_PTRTBL_SHIFT,
    };
    l.modify_block(obj, 0, true, |b| {
        b.fill(0);
        h.encode_into(b);
        for e in b[FZAP_EMBEDDED_PTRTBL_OFF..].chunks_exact_mut(8) {
            e.copy_from_slice(&1u64.to_le_bytes());
        }
    })?;
    write_leaf(l, obj, 1, 0, 0, &[])?;
    Ok(h)
}

fn put_header(l: &mut Locked<'_>, obj: u64, h: &FatHeader) -> Result<()> {
    l.modify_block(obj, 0, false, |b| h.encode_into(b))
}

fn block(l: &mut Locked<'_>, obj: u64, blkid: u64) -> Result<Block> {
    let b = l.read_block(obj, blkid)?;
    let b = b.ok_or_else(|| Corrupted::new("fat zap", format!("block {blkid} is a hole")))?;
    if b.len() != FZAP_BLOCK_SIZE {
        return Err(Corrupted::new("fat zap", format!("block of {} bytes", b.len())).into());
    }
    Ok(b)
}

fn table_get(l: &mut Locked<'_>, obj: u64, h: &FatHeader, idx: u64) -> Result<u64> {
    let (blk, off) = h.table_slot(idx);
    let b = block(l, obj, blk)?;
    Ok(table_entry(&b, off, h)?)
}

/// Sets table entries `lo..hi` to `leaf`, one block modification per
/// table block touched.
fn table_fill(
    l: &mut Locked<'_>,
    obj: u64,
    h: &FatHeader,
    lo: u64,
    hi: u64,
    leaf: u64,
) -> Result<()> {
    let mut idx = lo;
    while idx < hi {
        let (blk, off) = h.table_slot(idx);
        let room = if h.ptrtbl_blk == 0 {
            hi - idx
        } else {
            (1 << FZAP_PTRS_PER_BLOCK_SHIFT) - off as u64 / 8
        };
        let n = room.min(hi - idx) as usize;
        l.modify_block(obj, blk, false, |b| {
            for e in b[off..off + n * 8].chunks_exact_mut(8) {
                e.copy_from_slice(&leaf.to_le_bytes());
            }
        })?;
        idx += n as u64;
    }
    Ok(())
}

/// Leaf block `blk`. A leaf read from disk gets the full check once
/// (`leaf_entries`: every key re-hashed against its cookie and the leaf's
/// prefix, the count, the free space); after that, and for dirty leaves,
/// `leaf_scan` decodes only the layout.
fn leaf(l: &mut Locked<'_>, obj: u64, h: &FatHeader, blk: u64) -> Result<Block> {
    let salt = h.salt;
    let b = l.zap_block(obj, blk, salt, |b| {
        if b.len() != FZAP_BLOCK_SIZE {
            return Err(Corrupted::new(
                "fat zap",
                format!("block of {} bytes", b.len()),
            ));
        }
        leaf_entries(b, salt).map(|_| ())
    })?;
    let b = b.ok_or_else(|| Corrupted::new("fat zap", format!("block {blk} is a hole")))?;
    if b.len() != FZAP_BLOCK_SIZE {
        return Err(Corrupted::new("fat zap", format!("block of {} bytes", b.len())).into());
    }
    Ok(b)
}

/// The leaf for `hash48`: its block id, bytes and header.
fn leaf_for(l: &mut Locked<'_>, obj: u64, h: &FatHeader, hash: u64) -> Result<(u64, Block)> {
    let idx = hash >> (ZAP_HASH_BITS - u32::from(h.ptrtbl_shift));
    let blk = table_get(l, obj, h, idx)?;
    let b = leaf(l, obj, h, blk)?;
    let lh = LeafHeader::decode(&b)?;
    if !lh.covers(hash) || lh.prefix_len > h.ptrtbl_shift {
        return Err(Corrupted::new(
            "fat zap",
            format!("leaf {blk} does not cover its table entry"),
        )
        .into());
    }
    Ok((blk, b))
}

/// The entry of `key` (whose hash is `hash`) in a leaf.
fn find<'b>(b: &'b [u8], hash: u64, key: &[u8]) -> Result<Option<LeafEntry<'b>>> {
    Ok(leaf_find(b, hash, key)?)
}

pub(crate) fn lookup(
    l: &mut Locked<'_>,
    obj: u64,
    h: &FatHeader,
    key: &[u8],
) -> Result<Option<(u64, ZapValue)>> {
    let hash = zap_hash(h.salt, key);
    let (_, b) = leaf_for(l, obj, h, hash)?;
    Ok(find(&b, hash, key)?.map(|e| (e.cookie, e.value())))
}

/// Inserts `key`, splitting leaves until it fits. Unless `cookie` is
/// given (the key is known to be absent and keeps that cookie), the one
/// pass that picks the new entry's collision differentiator also finds an
/// existing `key`, which is `DmuError::Exists`.
pub(crate) fn insert(
    l: &mut Locked<'_>,
    obj: u64,
    h: &mut FatHeader,
    key: &[u8],
    value: &ZapValue,
    cookie: Option<u64>,
) -> Result<()> {
    let hash = zap_hash(h.salt, key);
    let len = leaf_entry_len(key, value);
    loop {
        let (blk, b) = leaf_for(l, obj, h, hash)?;
        let lh = LeafHeader::decode(&b)?;
        let cookie = match cookie {
            Some(c) => c,
            None => {
                let (mut same, mut exists) = (BTreeSet::new(), false);
                leaf_same_hash(&b, hash, |e| {
                    exists = e.key == key;
                    same.insert(e.cookie & 0xFFFF);
                    exists
                })?;
                if exists {
                    return Err(DmuError::Exists);
                }
                make_cookie(hash, first_free_cd(&same)?)
            }
        };
        if usize::from(lh.used) + len > ZAP_LEAF_SPACE {
            split(l, obj, h, blk, &b)?;
            continue;
        }
        drop(b);
        l.modify_block(obj, blk, false, |b| {
            let at = ZAP_LEAF_HEADER_SIZE + usize::from(lh.used);
            leaf_put_entry(b, at, cookie, key, value);
            let nh = LeafHeader {
                nentries: lh.nentries + 1,
                used: lh.used + len as u16,
                ..lh
            };
            nh.encode_into(b);
        })?;
        h.num_entries += 1;
        return put_header(l, obj, h);
    }
}

/// Removes `key` if present, returning its cookie.
pub(crate) fn remove(
    l: &mut Locked<'_>,
    obj: u64,
    h: &mut FatHeader,
    key: &[u8],
) -> Result<Option<u64>> {
    let hash = zap_hash(h.salt, key);
    let (blk, b) = leaf_for(l, obj, h, hash)?;
    let lh = LeafHeader::decode(&b)?;
    let Some(e) = find(&b, hash, key)? else {
        return Ok(None);
    };
    let (off, len, cookie) = (e.offset, e.len, e.cookie);
    drop(b);
    l.modify_block(obj, blk, false, |b| {
        let end = ZAP_LEAF_HEADER_SIZE + usize::from(lh.used);
        b.copy_within(off + len..end, off);
        b[end - len..end].fill(0);
        let nh = LeafHeader {
            nentries: lh.nentries - 1,
            used: lh.used - len as u16,
            ..lh
        };
        nh.encode_into(b);
    })?;
    h.num_entries = h.num_entries.saturating_sub(1);
    put_header(l, obj, h)?;
    Ok(Some(cookie))
}

/// Up to `max` entries with the smallest cookies >= `cookie`, in cookie
/// order, walking leaves in prefix order. Each leaf is scanned once for
/// all the entries it gives (a directory listing read one entry per scan
/// was quadratic in the leaf's size: docs/MEASUREMENTS.md, "ZAP: a
/// listing scanning each leaf once").
pub(crate) fn next_batch(
    l: &mut Locked<'_>,
    obj: u64,
    h: &FatHeader,
    cookie: u64,
    max: usize,
) -> Result<Vec<ZapEntry>> {
    let mut out = Vec::new();
    let mut c = cookie;
    while out.len() < max {
        let hash = cookie_hash(c);
        let (_, b) = leaf_for(l, obj, h, hash)?;
        let (lh, scan) = leaf_scan(&b)?;
        let mut found: Vec<LeafEntry<'_>> = Vec::new();
        for e in scan {
            let e = e?;
            if e.cookie >= c {
                found.push(e);
            }
        }
        found.sort_unstable_by_key(|e| e.cookie);
        let room = max - out.len();
        out.extend(
            found
                .iter()
                .take(room)
                .map(|e| (e.key.to_vec(), e.value(), e.cookie)),
        );
        if found.len() > room {
            break;
        }
        let following = lh.prefix + 1;
        if lh.prefix_len == 0 || following >> lh.prefix_len != 0 {
            break;
        }
        c = (following << (ZAP_HASH_BITS - u32::from(lh.prefix_len))) << ZAP_CD_BITS;
    }
    Ok(out)
}

/// Splits leaf `blk` on its next hash bit into itself and a new leaf.
fn split(l: &mut Locked<'_>, obj: u64, h: &mut FatHeader, blk: u64, b: &Block) -> Result<()> {
    let (lh, scan) = leaf_scan(b)?;
    let entries = scan.collect::<std::result::Result<Vec<_>, _>>()?;
    if u32::from(lh.prefix_len) >= ZAP_HASH_BITS {
        return Err(DmuError::TooBig(
            "zap entries with one 48-bit hash overflow a leaf",
        ));
    }
    if lh.prefix_len == h.ptrtbl_shift {
        grow_table(l, obj, h)?;
    }
    let new_blk = h.next_free_blk;
    h.next_free_blk += 1;
    h.num_leafs += 1;
    let plen = lh.prefix_len + 1;
    let (mut lo, mut hi): (Vec<&[u8]>, Vec<&[u8]>) = (Vec::new(), Vec::new());
    for e in &entries {
        let side = if hash_prefix(cookie_hash(e.cookie), plen) & 1 == 0 {
            &mut lo
        } else {
            &mut hi
        };
        side.push(&b[e.offset..e.offset + e.len]);
    }
    write_leaf(l, obj, blk, lh.prefix << 1, plen, &lo)?;
    write_leaf(l, obj, new_blk, lh.prefix << 1 | 1, plen, &hi)?;
    let width = 1u64 << (h.ptrtbl_shift - lh.prefix_len);
    let start = lh.prefix << (h.ptrtbl_shift - lh.prefix_len);
    table_fill(l, obj, h, start + width / 2, start + width, new_blk)?;
    put_header(l, obj, h)
}

/// Writes a whole leaf from already-encoded entries.
fn write_leaf(
    l: &mut Locked<'_>,
    obj: u64,
    blk: u64,
    prefix: u64,
    plen: u8,
    raw: &[&[u8]],
) -> Result<()> {
    let used: usize = raw.iter().map(|r| r.len()).sum();
    assert!(used <= ZAP_LEAF_SPACE);
    l.modify_block(obj, blk, true, |b| {
        b.fill(0);
        let mut at = ZAP_LEAF_HEADER_SIZE;
        for r in raw {
            b[at..at + r.len()].copy_from_slice(r);
            at += r.len();
        }
        let lh = LeafHeader {
            prefix,
            prefix_len: plen,
            nentries: raw.len() as u16,
            used: used as u16,
        };
        lh.encode_into(b);
    })
}

/// Doubles the pointer table into newly allocated blocks; new entry `i`
/// is old entry `i / 2`. The old table becomes a hole (or, if embedded,
/// zeros).
fn grow_table(l: &mut Locked<'_>, obj: u64, h: &mut FatHeader) -> Result<()> {
    let new_shift = h.ptrtbl_shift + 1;
    if new_shift > ZAP_MAX_PTRTBL_SHIFT {
        return Err(DmuError::TooBig("zap pointer table"));
    }
    let new_blks = h.table_blocks_for_shift(new_shift);
    let new_start = h.next_free_blk;
    let per_blk = 1u64 << FZAP_PTRS_PER_BLOCK_SHIFT;
    for j in 0..new_blks {
        let mut buf = vec![0u8; FZAP_BLOCK_SIZE];
        let (src_blk, src_off) = h.table_slot(j * per_blk / 2);
        let src = block(l, obj, src_blk)?;
        for (k, e) in buf.chunks_exact_mut(8).enumerate() {
            let off = src_off + (k / 2) * 8;
            e.copy_from_slice(&table_entry(&src, off, h)?.to_le_bytes());
        }
        l.modify_block(obj, new_start + j, true, |b| b.copy_from_slice(&buf))?;
    }
    if h.ptrtbl_blk == 0 {
        l.modify_block(obj, 0, false, |b| b[FZAP_EMBEDDED_PTRTBL_OFF..].fill(0))?;
    } else {
        l.free_blocks(obj, h.ptrtbl_blk, h.ptrtbl_blk + h.ptrtbl_numblks);
    }
    h.ptrtbl_blk = new_start;
    h.ptrtbl_numblks = new_blks;
    h.ptrtbl_shift = new_shift;
    h.next_free_blk += new_blks;
    put_header(l, obj, h)
}
