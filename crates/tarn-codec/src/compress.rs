//! Per-record compression: the rule for when compression is worth it, the
//! on-disk framing of a compressed block, and the lz4 / zle / gzip / zstd
//! back ends.
//!
//! **Framing.** A compressed block is `[n: u32 LE][n payload bytes][zeros]`,
//! padded to a multiple of 512 bytes; that padded length is the block's psize.
//! The header exists because every back end needs the exact payload length
//! and the padding would otherwise be read as stream bytes. The decoder trusts
//! nothing in it: `4 + n` must fit in the stored bytes, and the output must
//! come out at exactly `lsize` (the size from the block pointer, which the
//! caller has validated) — a payload that decodes to more or fewer bytes, or
//! leaves input unread, is `Corrupted`. Output buffers are allocated from
//! `lsize` only, never from a length found in the data.
//!
//! **Back ends.** lz4 uses `lz4_flex`'s raw block format through
//! `compress_into` / `decompress_into` (the size-prepended API trusts a
//! 4-byte length; fuzzing found a 4 GiB allocation through it). zstd uses the
//! bulk API: one-shot decompression into the exact-size buffer, so a frame
//! claiming a larger content size fails instead of allocating. "gzip" uses
//! **zlib framing** (2-byte header, Adler-32 trailer), like ZFS's gzip, which
//! calls zlib's `compress2`; it is 14 bytes smaller than gzip framing and the
//! Adler-32 check catches a damaged stream. zle is ours, see [`crate::zle`].
//! Compression contexts for zstd and zlib are kept per thread, because
//! building one costs more than compressing a small record.
//!
//! **The rule** ([`worth_storing`]): a record is stored compressed only when
//! that saves at least one allocation unit (2^ashift bytes) *and* at least
//! 12.5 % of the logical size, as ZFS does; otherwise the CPU cost on every
//! read buys nothing. [`compress`] works out the largest psize that could pass
//! before compressing and hands the back end an output budget of that size,
//! so hopeless records (4 KiB at ashift 12) cost nothing and incompressible
//! ones stop as soon as the budget is exceeded (where the back end allows).
//!
//! **lz4's early abort.** `lz4_flex` wants a worst-case output buffer and
//! cannot stop at the budget as ZFS's lz4 does, so a large record that lz4
//! only nearly compresses (fio's data: random bytes with a small header every
//! 4 KiB, 6 % smaller) cost a full compression for nothing
//! (docs/MEASUREMENTS.md, "Codec: lz4 on nearly incompressible records").
//! Records of at least [`LZ4_PROBE_MIN_BYTES`] are first probed: lz4 on
//! [`LZ4_PROBE_CHUNKS`] chunks taken evenly across the record. When the
//! probe saves less than [`LZ4_PROBE_MIN_SAVING_PERCENT`], the record is
//! stored as is (btrfs decides the same way from a sample). A probe that
//! guesses wrong only loses some compression: any compressible stretch
//! long enough to make the record worth compressing spans a chunk.

use std::cell::RefCell;

use tarn_format::{Compression, Corrupted, MAX_BLOCK_SIZE, SECTOR_SIZE};

use crate::zle;

/// Bytes of the little-endian payload-length header at the start of a
/// compressed block.
pub const FRAME_HEADER_BYTES: usize = 4;

const SECTOR: usize = SECTOR_SIZE as usize;

/// ZFS's rule for keeping a compressed record: the compressed size padded to
/// sectors (`compressed_padded`) must save at least one 2^ashift allocation
/// unit once both sizes are rounded up to that unit, and must be at most
/// 87.5 % of `lsize`.
pub fn worth_storing(lsize: usize, compressed_padded: usize, ashift: u8) -> bool {
    let Some(unit) = 1usize.checked_shl(u32::from(ashift)) else {
        return false;
    };
    let allocated = |bytes: usize| bytes.div_ceil(unit).saturating_mul(unit);
    let saves_unit = allocated(compressed_padded).saturating_add(unit) <= allocated(lsize);
    let saves_eighth = compressed_padded.saturating_mul(8) <= lsize.saturating_mul(7);
    saves_unit && saves_eighth
}

/// The largest sector-aligned psize that [`worth_storing`] could accept for
/// a record of `lsize` bytes, or `None` when no size can pass.
fn psize_budget(lsize: usize, ashift: u8) -> Option<usize> {
    let unit = 1usize.checked_shl(u32::from(ashift))?;
    let by_unit = lsize.div_ceil(unit).checked_mul(unit)?.checked_sub(unit)?;
    let by_eighth = lsize / 8 * 7 + (lsize % 8) * 7 / 8;
    let budget = by_unit.min(by_eighth) / SECTOR * SECTOR;
    (budget >= SECTOR).then_some(budget)
}

/// Compresses one record for storage at a vdev of `ashift`. Returns the
/// stored bytes (length = psize, a multiple of 512, `< src.len()`) only when
/// [`worth_storing`] accepts them; `None` means "store the record as is".
pub fn compress(alg: Compression, src: &[u8], ashift: u8) -> Option<Vec<u8>> {
    if alg == Compression::Off {
        return None;
    }
    if alg == Compression::Lz4 && !lz4_probe_promising(src) {
        return None;
    }
    let budget = psize_budget(src.len(), ashift)?;
    let payload_max = budget - FRAME_HEADER_BYTES;
    // lz4_flex insists on a worst-case-sized output; the others stop at the budget.
    let capacity = match alg {
        Compression::Lz4 => payload_max.max(lz4_flex::block::get_maximum_output_size(src.len())),
        _ => payload_max,
    };
    // Compressed into a per-thread scratch buffer, which stays allocated:
    // most blocks that do not compress (media, encrypted or random data)
    // then cost no allocation or zeroing at all, and those that do are
    // copied out at their compressed size.
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        if scratch.len() < FRAME_HEADER_BYTES + capacity {
            scratch.resize(FRAME_HEADER_BYTES + capacity, 0);
        }
        let payload = &mut scratch[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + capacity];
        let n = match alg {
            Compression::Off => return None,
            Compression::Lz4 => lz4_flex::block::compress_into(src, payload).ok()?,
            Compression::Zle => zle::encode(src, payload)?,
            Compression::Gzip(level) => zlib_compress(src, payload, level)?,
            Compression::Zstd(level) => zstd_compress(src, payload, level)?,
        };
        if n > payload_max {
            return None;
        }
        let padded = (FRAME_HEADER_BYTES + n).div_ceil(SECTOR) * SECTOR;
        if !worth_storing(src.len(), padded, ashift) {
            return None;
        }
        let mut out = scratch[..padded].to_vec();
        out[..FRAME_HEADER_BYTES].copy_from_slice(&(n as u32).to_le_bytes());
        // A back end may scribble past its reported length (and the
        // scratch holds older blocks' bytes); the padding is covered by
        // the block checksum, so it must be deterministic zeros.
        out[FRAME_HEADER_BYTES + n..].fill(0);
        assert!(out.len() < src.len() && out.len().is_multiple_of(SECTOR));
        Some(out)
    })
}

/// Records shorter than this are compressed without a probe (it would
/// cost more than an eighth of the record).
pub const LZ4_PROBE_MIN_BYTES: usize = 64 << 10;
/// The probe: this many chunks of [`LZ4_PROBE_CHUNK_BYTES`] (8 KiB in
/// all), the first at the record's start, the others an eighth of the
/// record and 512 bytes apart. The extra 512 bytes move each chunk an
/// eighth of 4 KiB further into any 4 KiB-periodic layout (pages, fio's
/// blocks), so the chunks see every part of a period equally often
/// instead of always its header.
pub const LZ4_PROBE_CHUNKS: usize = 8;
pub const LZ4_PROBE_CHUNK_BYTES: usize = 1 << 10;
/// The probe must come out at least this much smaller for the whole record
/// to be compressed. Below ZFS's 12.5 %: the whole record gives lz4 more
/// context than the chunks, so it usually does better than its probe.
pub const LZ4_PROBE_MIN_SAVING_PERCENT: usize = 8;

/// Does lz4 on a sample of `src` save enough to try the whole record?
pub fn lz4_probe_promising(src: &[u8]) -> bool {
    if src.len() < LZ4_PROBE_MIN_BYTES {
        return true;
    }
    const PROBE: usize = LZ4_PROBE_CHUNKS * LZ4_PROBE_CHUNK_BYTES;
    PROBE_SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let out_max = lz4_flex::block::get_maximum_output_size(PROBE);
        if scratch.len() < PROBE + out_max {
            scratch.resize(PROBE + out_max, 0);
        }
        let (sample, out) = scratch.split_at_mut(PROBE);
        // The last chunk ends by 7/8 of the record + 4.5 KiB, inside it
        // for any record of LZ4_PROBE_MIN_BYTES or more.
        let stride = src.len() / LZ4_PROBE_CHUNKS + 512;
        for (i, chunk) in sample.chunks_exact_mut(LZ4_PROBE_CHUNK_BYTES).enumerate() {
            chunk.copy_from_slice(&src[i * stride..i * stride + LZ4_PROBE_CHUNK_BYTES]);
        }
        match lz4_flex::block::compress_into(sample, out) {
            Ok(n) => n * 100 <= PROBE * (100 - LZ4_PROBE_MIN_SAVING_PERCENT),
            Err(_) => true, // cannot happen (worst-case buffer); let the real attempt decide
        }
    })
}

thread_local! {
    /// Per-thread sample and output buffers of the lz4 probe (16 KiB).
    static PROBE_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Per-thread output buffer of [`compress`] (grows to the largest
    /// block's worst case, 16 MiB and a little, and stays).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Inverse of [`compress`]: `stored` is the psize bytes of the block, the
/// result is exactly `lsize` bytes or `Corrupted`.
pub fn decompress(alg: Compression, stored: &[u8], lsize: usize) -> Result<Vec<u8>, Corrupted> {
    if lsize as u64 > MAX_BLOCK_SIZE {
        return Err(corrupt(format!(
            "lsize {lsize} exceeds the maximum block size"
        )));
    }
    if alg == Compression::Off {
        if stored.len() != lsize {
            return Err(corrupt(format!(
                "uncompressed block of {} bytes, expected {lsize}",
                stored.len()
            )));
        }
        return Ok(stored.to_vec());
    }
    let payload = unframe(stored)?;
    let mut out = vec![0u8; lsize];
    match alg {
        Compression::Off => unreachable!("handled above"),
        Compression::Lz4 => lz4_decompress(payload, &mut out)?,
        Compression::Zle => zle::decode(payload, &mut out).map_err(corrupt)?,
        Compression::Gzip(_) => zlib_decompress(payload, &mut out)?,
        Compression::Zstd(_) => zstd_decompress(payload, &mut out)?,
    }
    Ok(out)
}

fn corrupt(why: impl Into<String>) -> Corrupted {
    Corrupted::new("compressed block", why)
}

/// Returns the payload named by the frame header, after checking it lies
/// inside `stored`.
fn unframe(stored: &[u8]) -> Result<&[u8], Corrupted> {
    let Some((header, rest)) = stored.split_first_chunk::<FRAME_HEADER_BYTES>() else {
        return Err(corrupt(format!(
            "{} bytes is too short for a frame header",
            stored.len()
        )));
    };
    let n = u32::from_le_bytes(*header) as usize;
    rest.get(..n).ok_or_else(|| {
        corrupt(format!(
            "payload length {n} exceeds the {} stored bytes after the header",
            rest.len()
        ))
    })
}

fn lz4_decompress(payload: &[u8], out: &mut [u8]) -> Result<(), Corrupted> {
    let got =
        lz4_flex::block::decompress_into(payload, out).map_err(|e| corrupt(format!("lz4: {e}")))?;
    expect_len(got, out.len())
}

fn expect_len(got: usize, lsize: usize) -> Result<(), Corrupted> {
    if got != lsize {
        return Err(corrupt(format!(
            "decompressed to {got} bytes, expected {lsize}"
        )));
    }
    Ok(())
}

thread_local! {
    static ZSTD_COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    static ZSTD_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
    static ZLIB_COMPRESSOR: RefCell<Option<(u8, flate2::Compress)>> = const { RefCell::new(None) };
    static ZLIB_DECOMPRESSOR: RefCell<Option<flate2::Decompress>> = const { RefCell::new(None) };
}

fn zstd_compress(src: &[u8], payload: &mut [u8], level: u8) -> Option<usize> {
    let level = i32::from(level);
    ZSTD_COMPRESSOR.with_borrow_mut(|slot| {
        // The context goes back into the slot only after a finished frame:
        // after "destination too small" libzstd leaves it mid-frame and it
        // then refuses a new level (test `context_reuse_after_overflow`).
        let mut c = match slot.take() {
            Some((l, c)) if l == level => c,
            Some((_, mut c)) => match c.set_compression_level(level) {
                Ok(()) => c,
                Err(_) => zstd::bulk::Compressor::new(level).ok()?,
            },
            None => zstd::bulk::Compressor::new(level).ok()?,
        };
        // An error here is almost always "destination too small", i.e. the
        // record does not compress well enough; either way we store it as is.
        let n = c.compress_to_buffer(src, payload).ok()?;
        *slot = Some((level, c));
        Some(n)
    })
}

fn zstd_decompress(payload: &[u8], out: &mut [u8]) -> Result<(), Corrupted> {
    let got = ZSTD_DECOMPRESSOR.with_borrow_mut(|slot| {
        if slot.is_none() {
            let d = zstd::bulk::Decompressor::new()
                .map_err(|e| corrupt(format!("zstd: cannot create a context: {e}")))?;
            *slot = Some(d);
        }
        let d = slot.as_mut().expect("initialised above");
        d.decompress_to_buffer(payload, out)
            .map_err(|e| corrupt(format!("zstd: {e}")))
    })?;
    expect_len(got, out.len())
}

fn zlib_level(level: u8) -> flate2::Compression {
    flate2::Compression::new(u32::from(level.min(9)))
}

fn zlib_compress(src: &[u8], payload: &mut [u8], level: u8) -> Option<usize> {
    ZLIB_COMPRESSOR.with_borrow_mut(|slot| {
        // As for zstd, only a context whose last stream finished is reused:
        // zlib-rs 0.6 at level 1 (deflate_quick) emits a corrupt stream after
        // `reset` when the previous stream stopped on a full output buffer
        // (test `context_reuse_after_overflow`).
        let mut c = match slot.take() {
            Some((l, mut c)) if l == level => {
                c.reset();
                c
            }
            _ => flate2::Compress::new(zlib_level(level), true),
        };
        let status = c
            .compress(src, payload, flate2::FlushCompress::Finish)
            .ok()?;
        let done = status == flate2::Status::StreamEnd && c.total_in() == src.len() as u64;
        if !done {
            return None;
        }
        let n = c.total_out() as usize;
        *slot = Some((level, c));
        Some(n)
    })
}

fn zlib_decompress(payload: &[u8], out: &mut [u8]) -> Result<(), Corrupted> {
    ZLIB_DECOMPRESSOR.with_borrow_mut(|slot| {
        let d = slot.get_or_insert_with(|| flate2::Decompress::new(true));
        d.reset(true);
        let status = d
            .decompress(payload, out, flate2::FlushDecompress::Finish)
            .map_err(|e| corrupt(format!("zlib: {e}")))?;
        // The output buffer is exactly lsize, so a stream that would produce
        // more cannot reach its end: an overrun shows up as a missing StreamEnd.
        if status != flate2::Status::StreamEnd {
            return Err(corrupt(format!(
                "zlib stream did not end within {} output bytes",
                out.len()
            )));
        }
        if d.total_in() != payload.len() as u64 {
            return Err(corrupt("zlib stream ends before its payload does"));
        }
        expect_len(d.total_out() as usize, out.len())
    })
}
