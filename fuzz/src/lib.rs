//! The bodies of tarn's fuzz targets, one function per target.
//!
//! Every decoder of the on-disk format (`tarn-format`) and every block
//! decompressor (`tarn-codec`) is fed arbitrary bytes. Each target checks:
//!
//! * **no panic** (and, under the sanitizer, no out-of-bounds access and no
//!   huge allocation) whatever the bytes;
//! * **round trip** where an encoder exists: a decoded value re-encodes and
//!   decodes to the same value, and for structures whose encoding is
//!   canonical the re-encoding is byte-identical to the input.
//!
//! Random bytes rarely get past a magic number and a SHA-256, so most
//! targets read a *mode* byte first: with its low bit set, the target
//! patches the magic and recomputes the checksum (or the ZAP cookies) before
//! decoding, so the fuzzer spends its time on the field checks behind them.
//!
//! A target that finds a bug panics with the input; `scripts/fuzz.sh`
//! reports the artifact. Decoders are fixed in `tarn-format`/`tarn-codec`,
//! never here.

use sha2::{Digest, Sha256};
use tarn_format::blkptr::{BlockPtr, BLKPTR_SIZE};
use tarn_format::dnode::{DnodePhys, DNODE_SIZE};
use tarn_format::dsl::{DslDatasetPhys, DslDirPhys};
use tarn_format::label::{LabelConfig, LABEL_CONFIG_HEADER, LABEL_CONFIG_SIZE, LABEL_MAGIC};
use tarn_format::objset::{ObjsetPhys, OBJSET_MAGIC, OBJSET_PHYS_SIZE};
use tarn_format::scan::ScanPhys;
use tarn_format::spacemap::{SpaceMapBlock, SPACEMAP_MAGIC};
use tarn_format::uberblock::{Uberblock, UBERBLOCK_MAGIC, UBERBLOCK_SIZE, UB_OFF_CHECKSUM};
use tarn_format::zap::{self, FatHeader, LeafHeader, ZapValue};
use tarn_format::{Compression, FORMAT_VERSION};

/// Largest record the decompression targets ask for (keeps runs fast; the
/// decoders' bounds do not depend on it).
pub const FUZZ_LSIZE_MAX: usize = 1 << 20;

/// A cursor over the fuzzer's bytes that yields zeros once they run out.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }
    pub fn u8(&mut self) -> u8 {
        let (v, rest) = self
            .data
            .split_first()
            .map_or((0, &[][..]), |(v, r)| (*v, r));
        self.data = rest;
        v
    }
    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let n = self.data.len().min(8);
        b[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        u64::from_le_bytes(b)
    }
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// `src` copied into a zeroed buffer of exactly `len` bytes.
fn padded(src: &[u8], len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    let n = src.len().min(len);
    b[..n].copy_from_slice(&src[..n]);
    b
}

/// XORs `(position u16 LE, value)` triples from `patches` into `buf`.
fn apply_patches(buf: &mut [u8], patches: &[u8]) {
    if buf.is_empty() {
        return;
    }
    for p in patches.chunks_exact(3) {
        let pos = usize::from(u16::from_le_bytes([p[0], p[1]])) % buf.len();
        buf[pos] ^= p[2];
    }
}

fn sha256_at(offset: u64, bytes: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(offset.to_le_bytes());
    h.update(bytes);
    h.finalize().into()
}

// ------------------------------------------------------------------ format

/// `BlockPtr::decode` on 128 bytes; a valid pointer is canonical.
pub fn blkptr(data: &[u8]) {
    if let Ok(bp) = BlockPtr::decode(data) {
        let enc = bp.encode();
        assert_eq!(
            enc[..],
            data[..BLKPTR_SIZE],
            "block pointer encoding is not canonical"
        );
        assert_eq!(BlockPtr::decode(&enc).unwrap(), bp);
    }
}

/// `Uberblock::decode`: mode bit 0 fixes magic and checksum so that the
/// version, txg and both block pointers are what is being fuzzed.
pub fn uberblock(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let slot_offset = input.u64();
    let mut slot = padded(input.rest(), UBERBLOCK_SIZE);
    if mode & 1 == 1 {
        slot[..8].copy_from_slice(&UBERBLOCK_MAGIC.to_le_bytes());
        let sum = sha256_at(slot_offset, &slot[..UB_OFF_CHECKSUM]);
        slot[UB_OFF_CHECKSUM..].copy_from_slice(&sum);
    }
    if let Ok(ub) = Uberblock::decode(&slot, slot_offset) {
        let enc = ub.encode(slot_offset);
        assert_eq!(Uberblock::decode(&enc, slot_offset).unwrap(), ub);
        assert!(
            Uberblock::decode(&enc, slot_offset ^ 512).is_err(),
            "misdirected slot accepted"
        );
    }
}

/// `LabelConfig::decode`: mode bit 0 wraps the rest of the input as the JSON
/// payload of a header with a correct magic, length and checksum.
pub fn label_config(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let label_offset = input.u64();
    let area = if mode & 1 == 1 {
        let payload = input.rest();
        let mut b = vec![0u8; LABEL_CONFIG_HEADER + payload.len()];
        b[..8].copy_from_slice(&LABEL_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&(FORMAT_VERSION as u32).to_le_bytes());
        b[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        b[16..48].copy_from_slice(&sha256_at(label_offset, payload));
        b[LABEL_CONFIG_HEADER..].copy_from_slice(payload);
        b
    } else {
        input.rest().to_vec()
    };
    if let Ok(cfg) = LabelConfig::decode(&area, label_offset) {
        if let Ok(enc) = cfg.encode(label_offset) {
            assert_eq!(enc.len() as u64, LABEL_CONFIG_SIZE);
            assert_eq!(LabelConfig::decode(&enc, label_offset).unwrap(), cfg);
        }
    }
}

/// `SpaceMapBlock::decode`: mode bit 0 fixes the magic.
pub fn spacemap(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let mut b = input.rest().to_vec();
    if mode & 1 == 1 && b.len() >= 8 {
        b[..8].copy_from_slice(&SPACEMAP_MAGIC.to_le_bytes());
    }
    if let Ok(blk) = SpaceMapBlock::decode(&b) {
        let enc = blk.encode();
        assert_eq!(SpaceMapBlock::decode(&enc).unwrap(), blk);
    }
}

/// `DslDirPhys::decode`, `DslDatasetPhys::decode` and `ScanPhys::decode`
/// (the MOS records); each is canonical.
pub fn dsl(data: &[u8]) {
    if let Ok(d) = DslDirPhys::decode(data) {
        let enc = d.encode();
        assert_eq!(
            enc[..],
            data[..enc.len()],
            "dsl_dir encoding is not canonical"
        );
        assert_eq!(DslDirPhys::decode(&enc).unwrap(), d);
    }
    if let Ok(d) = DslDatasetPhys::decode(data) {
        let enc = d.encode();
        assert_eq!(
            enc[..],
            data[..enc.len()],
            "dsl_dataset encoding is not canonical"
        );
        assert_eq!(DslDatasetPhys::decode(&enc).unwrap(), d);
    }
    if let Ok(s) = ScanPhys::decode(data) {
        let enc = s.encode();
        assert_eq!(
            enc[..],
            data[..enc.len()],
            "scan state encoding is not canonical"
        );
        assert_eq!(ScanPhys::decode(&enc).unwrap(), s);
    }
}

/// `DnodePhys::decode` on one 512-byte slot; a valid dnode is canonical.
pub fn dnode(data: &[u8]) {
    let b = padded(data, DNODE_SIZE);
    if let Ok(Some(dn)) = DnodePhys::decode(&b) {
        let mut enc = vec![0u8; DNODE_SIZE];
        dn.encode(&mut enc);
        assert_eq!(enc, b, "dnode encoding is not canonical");
        assert_eq!(DnodePhys::decode(&enc).unwrap(), Some(dn));
    }
}

/// `ObjsetPhys::decode`: mode bit 0 fixes magic and version; a valid header
/// is canonical.
pub fn objset(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let mut b = padded(input.rest(), OBJSET_PHYS_SIZE);
    if mode & 1 == 1 {
        b[..8].copy_from_slice(&OBJSET_MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    }
    if let Ok(os) = ObjsetPhys::decode(&b) {
        assert_eq!(os.encode(), b, "objset encoding is not canonical");
        assert_eq!(ObjsetPhys::decode(&os.encode()).unwrap(), os);
    }
}

// ------------------------------------------------------------------ ZAP

/// The micro-ZAP decoders on a block of 512 B .. 16 KiB (or a bad size).
/// Mode bit 0 writes a valid header; bit 1 recomputes every entry's cookie
/// from its name so that the length and padding checks are reached.
pub fn zap_micro(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let salt = input.u64();
    let size_sel = input.u8();
    let size = match size_sel % 8 {
        k @ 0..=5 => zap::MZAP_MIN_BLOCK_SIZE << k,
        6 => 100, // not a valid block size
        _ => 1000,
    };
    let mut b = padded(input.rest(), size);
    if mode & 1 == 1 && size >= zap::MZAP_HEADER_SIZE {
        zap::mzap_encode_header(&mut b, salt);
    }
    let slots = size / zap::MZAP_ENT_SIZE;
    if mode & 2 == 2 {
        fix_micro_cookies(&mut b, salt, slots);
    }
    let header_ok = zap::mzap_decode_header(&b).is_ok();
    // One slot past the last is asked for too: it must be an error.
    for slot in 0..=slots {
        let Ok(Some(e)) = zap::mzap_entry(&b, slot, salt) else {
            continue;
        };
        let mut fresh = vec![0u8; zap::MZAP_MIN_BLOCK_SIZE];
        zap::mzap_put_entry(&mut fresh, 0, Some(&e));
        assert_eq!(zap::mzap_entry(&fresh, 0, salt).unwrap(), Some(e));
        if header_ok {
            assert!(
                slot < zap::mzap_slots(size),
                "entry decoded beyond the last slot"
            );
        }
    }
}

fn fix_micro_cookies(b: &mut [u8], salt: u64, slots: usize) {
    for slot in 0..slots.saturating_sub(1) {
        let off = zap::MZAP_HEADER_SIZE + slot * zap::MZAP_ENT_SIZE;
        let Some(e) = b.get_mut(off..off + zap::MZAP_ENT_SIZE) else {
            return;
        };
        let len = usize::from(e[16]).min(zap::MZAP_NAME_MAX);
        if len == 0 {
            continue;
        }
        let cd = u64::from(e[8]);
        let cookie = zap::make_cookie(zap::zap_hash(salt, &e[17..17 + len]), cd);
        e[8..16].copy_from_slice(&cookie.to_le_bytes());
    }
}

/// `FatHeader::decode` on block 0; mode bit 0 writes the block type. A valid
/// header's table slots and embedded table entries are looked up too.
pub fn zap_fat_header(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let probe = input.u64();
    let mut b = padded(input.rest(), zap::FZAP_BLOCK_SIZE);
    if mode & 1 == 1 {
        b[..8].copy_from_slice(&zap::ZBT_HEADER.to_le_bytes());
    }
    let Ok(h) = FatHeader::decode(&b) else {
        return;
    };
    let entries = 1u64 << h.ptrtbl_shift;
    for idx in [0, entries - 1, probe % entries] {
        let (blk, off) = h.table_slot(idx);
        assert!(off + 8 <= zap::FZAP_BLOCK_SIZE, "table slot past the block");
        if blk == 0 {
            let _ = zap::table_entry(&b, off, &h);
        } else {
            assert!(blk >= h.ptrtbl_blk && blk < h.ptrtbl_blk + h.ptrtbl_numblks);
        }
    }
    let mut enc = b.clone();
    h.encode_into(&mut enc);
    assert_eq!(enc, b, "fat header encoding is not canonical");
    assert_eq!(FatHeader::decode(&enc).unwrap(), h);
}

/// `leaf_entries` on a leaf block. Mode bit 0: raw bytes (block type
/// forced). Otherwise a valid leaf is built from the input (keys and values
/// with correct cookies) and then damaged by patches from the input's tail.
/// A valid leaf is canonical: rebuilding it from its entries gives the same
/// bytes.
pub fn zap_leaf(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let salt = input.u64();
    let b = if mode & 1 == 1 {
        let mut b = padded(input.rest(), zap::FZAP_BLOCK_SIZE);
        b[..8].copy_from_slice(&zap::ZBT_LEAF.to_le_bytes());
        b
    } else {
        built_leaf(&mut input, salt)
    };
    let probe = input_key(&b);
    let _ = zap::leaf_find(&b, zap::zap_hash(salt, probe), probe);
    let Ok((h, entries)) = zap::leaf_entries(&b, salt) else {
        return;
    };
    for e in &entries {
        let found = zap::leaf_find(&b, zap::cookie_hash(e.cookie), e.key);
        assert!(
            found.is_ok_and(|f| f.is_some()),
            "leaf_find misses an entry"
        );
    }
    let mut rebuilt = vec![0u8; zap::FZAP_BLOCK_SIZE];
    let mut off = zap::ZAP_LEAF_HEADER_SIZE;
    for e in &entries {
        off += zap::leaf_put_entry(&mut rebuilt, off, e.cookie, e.key, &e.value());
    }
    h.encode_into(&mut rebuilt);
    assert_eq!(rebuilt, b, "zap leaf encoding is not canonical");
}

/// Some key to look up in leaf `b`: the bytes where its first entry's key
/// would be.
fn input_key(b: &[u8]) -> &[u8] {
    let at = zap::ZAP_LEAF_HEADER_SIZE + zap::ZAP_LEAF_ENTRY_HEADER;
    let len = usize::from(b[zap::ZAP_LEAF_HEADER_SIZE + 8]).max(1);
    &b[at..at + len]
}

fn built_leaf(input: &mut Input<'_>, salt: u64) -> Vec<u8> {
    let mut b = vec![0u8; zap::FZAP_BLOCK_SIZE];
    let count = usize::from(input.u8() % 16);
    let mut off = zap::ZAP_LEAF_HEADER_SIZE;
    let mut n = 0u16;
    for i in 0..count {
        let key_len = usize::from(input.u8()).max(1);
        let key = padded(input.bytes(key_len), key_len);
        let vlen = usize::from(input.u8());
        let value = if i % 2 == 0 {
            ZapValue::Bytes(padded(input.bytes(vlen), vlen))
        } else {
            ZapValue::U64s((0..vlen % 16).map(|_| input.u64()).collect())
        };
        let len = zap::leaf_entry_len(&key, &value);
        if off + len > zap::FZAP_BLOCK_SIZE {
            break;
        }
        let cookie = zap::make_cookie(zap::zap_hash(salt, &key), u64::from(input.u8()));
        off += zap::leaf_put_entry(&mut b, off, cookie, &key, &value);
        n += 1;
    }
    let used = (off - zap::ZAP_LEAF_HEADER_SIZE) as u16;
    LeafHeader {
        prefix: 0,
        prefix_len: 0,
        nentries: n,
        used,
    }
    .encode_into(&mut b);
    apply_patches(&mut b, input.rest());
    b
}

// ------------------------------------------------------------------ codec

/// `tarn_codec::decompress(alg, stored, lsize)` with `lsize` taken from the
/// first three bytes (at most [`FUZZ_LSIZE_MAX`]). Mode bit 0 of the fourth
/// byte wraps the rest in a correct frame header, so the back end's own
/// decoder is what gets fuzzed. A success must yield exactly `lsize` bytes,
/// and recompressing them must round-trip.
pub fn decompress(alg: Compression, data: &[u8]) {
    let mut input = Input::new(data);
    let l = [input.u8(), input.u8(), input.u8()];
    let lsize = (usize::from(l[0]) | usize::from(l[1]) << 8 | usize::from(l[2]) << 16)
        % (FUZZ_LSIZE_MAX + 1);
    let mode = input.u8();
    let rest = input.rest();
    let stored = if mode & 1 == 1 {
        let mut s = (rest.len() as u32).to_le_bytes().to_vec();
        s.extend_from_slice(rest);
        s.resize(s.len().div_ceil(512) * 512, 0);
        s
    } else {
        rest.to_vec()
    };
    let Ok(out) = tarn_codec::decompress(alg, &stored, lsize) else {
        return;
    };
    assert_eq!(out.len(), lsize, "decompressed to the wrong size");
    if let Some(again) = tarn_codec::compress(alg, &out, 9) {
        assert_eq!(tarn_codec::decompress(alg, &again, lsize).unwrap(), out);
    }
}

/// `tarn_codec::compress` then `decompress` for every algorithm and level:
/// the stored form must be sector-padded, smaller than the record, and
/// decompress to the record.
pub fn compress_roundtrip(data: &[u8]) {
    let mut input = Input::new(data);
    let sel = input.u8();
    let level = input.u8();
    let alg = match sel % 5 {
        0 => Compression::Off,
        1 => Compression::Lz4,
        2 => Compression::Zle,
        3 => Compression::Gzip(1 + level % 9),
        _ => Compression::Zstd(1 + level % 19),
    };
    let ashift = 9 + input.u8() % 4;
    let record = input.rest();
    let Some(stored) = tarn_codec::compress(alg, record, ashift) else {
        return;
    };
    assert!(
        stored.len() < record.len() && stored.len() % 512 == 0,
        "bad psize {}",
        stored.len()
    );
    let back = tarn_codec::decompress(alg, &stored, record.len()).expect("own output decompresses");
    assert_eq!(back, record, "{alg:?} round trip changed the record");
}

// ------------------------------------------------------------------ ZPL

/// `ZnodePhys::decode` on a bonus of up to 320 bytes (mode bit 0 fixes the
/// magic) and `dirent_decode` on the first eight bytes; both round-trip.
pub fn znode(data: &[u8]) {
    use tarn_format::zpl;
    let mut input = Input::new(data);
    let mode = input.u8();
    let dirent = input.u64();
    if let Ok((obj, dtype)) = zpl::dirent_decode(dirent) {
        assert_eq!(zpl::dirent_encode(obj, u32::from(dtype) << 12), dirent);
    }
    let mut b = input.rest().to_vec();
    b.truncate(tarn_format::dnode::DNODE_BONUS_SIZE);
    if mode & 1 == 1 && b.len() >= 4 {
        b[..4].copy_from_slice(&zpl::ZNODE_MAGIC.to_le_bytes());
    }
    if let Ok(z) = zpl::ZnodePhys::decode(&b) {
        let enc = z.encode();
        assert_eq!(zpl::ZnodePhys::decode(&enc).unwrap(), z);
        assert_eq!(enc, b, "znode encoding is not canonical");
    }
}

// ------------------------------------------------------------------ send stream

/// The send stream reader on arbitrary bytes (mode bit 0 clear): no panic,
/// no allocation beyond one bounded payload, every error a value. With
/// mode bit 0 set the input is cut into record headers and payloads that
/// decode, written again with their running checksums by the real
/// writer, and read back: every record and payload must round-trip.
pub fn send_stream(data: &[u8]) {
    use tarn_format::stream::{Record, StreamReader, StreamWriter, RECORD_SIZE};
    let mut input = Input::new(data);
    let mode = input.u8();
    let rest = input.rest();
    if mode & 1 == 0 {
        let mut r = StreamReader::new(rest);
        while let Ok(Some(_)) = r.next_record() {}
        return;
    }
    let mut recs: Vec<(Record, Vec<u8>)> = Vec::new();
    let mut at = 0;
    while at + RECORD_SIZE <= rest.len() && recs.len() < 64 {
        let Ok(rec) = Record::decode(&rest[at..at + RECORD_SIZE]) else {
            break;
        };
        at += RECORD_SIZE;
        let len = rec.payload_len() as usize;
        if at + len > rest.len() {
            break;
        }
        recs.push((rec, rest[at..at + len].to_vec()));
        at += len;
    }
    let mut w = StreamWriter::new(Vec::new());
    for (rec, payload) in &recs {
        w.write(rec, payload).expect("writing to memory");
    }
    let bytes = w.get_mut().clone();
    let mut r = StreamReader::new(&bytes[..]);
    for want in &recs {
        let got = r.next_record().expect("a stream we wrote reads back");
        assert_eq!(got.as_ref(), Some(want), "record does not round-trip");
    }
    assert!(r.next_record().expect("clean end").is_none());
}
