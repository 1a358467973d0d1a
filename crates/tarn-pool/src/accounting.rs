//! OpenZFS-compatible capacity accounting: the numbers `zpool list` and
//! `zfs list` print, as pure functions of the vdev layout (no I/O).
//!
//! An admin moving from OpenZFS expects the same SIZE and AVAIL for the same
//! disks, so these functions follow OpenZFS 2.3 (`module/zfs/`) rule by rule;
//! the function named in each doc comment is the one being copied:
//!
//! 1. A leaf loses its labels and boot area: `asize = osize − 4.5 MiB`, with
//!    `osize` the device size aligned down to 256 KiB (`vdev_open`).
//! 2. A mirror is as large as its smallest child; a raidz is the smallest
//!    child times its width (`vdev_mirror_open`, `vdev_raidz_open`).
//! 3. A top-level vdev is cut into `2^shift`-byte metaslabs
//!    (`vdev_metaslab_set_size`); the tail past the last whole metaslab is
//!    never used. With more than 64 metaslabs, one goes to the embedded log
//!    class, which `zpool list` counts in SIZE but `zfs list` never in AVAIL.
//! 4. A block of `psize` bytes costs `block_asize` bytes of raw space,
//!    parity and raidz padding included (`vdev_raidz_asize`).
//! 5. Raw space is shown to datasets *deflated* by the cost of a 128 KiB
//!    block (`vdev_set_deflate_ratio`), so a raidz's AVAIL is roughly what a
//!    user can write, not what the disks hold.
//! 6. A slop of about 3.2 % (at least 128 MiB, at most 128 GiB) is held back
//!    so that frees and metadata can always make progress
//!    (`spa_get_slop_space`).
//!
//! **Invariant: these functions do no I/O and never panic on any layout**;
//! degenerate layouts (raidz with no data columns, devices smaller than the
//! labels) give zero space rather than an error, and the pool layer rejects
//! them before creating anything.

use tarn_format::label::{leaf_asize, osize, VDEV_LABEL_END_SIZE, VDEV_LABEL_START_SIZE};

/// Bytes at the front of every leaf that hold no data (two labels + boot).
pub const LABEL_START: u64 = VDEV_LABEL_START_SIZE;
/// Bytes at the end of every leaf that hold no data (two labels).
pub const LABEL_END: u64 = VDEV_LABEL_END_SIZE;

/// `SPA_MINBLOCKSHIFT`: deflate ratios and deflated space count 512 B units.
pub const MIN_BLOCK_SHIFT: u32 = 9;
/// `SPA_MAXBLOCKSHIFT` (16 MiB): the smallest metaslab shift.
pub const MS_SHIFT_MIN: u8 = 24;
/// `zfs_vdev_default_ms_shift`: 512 MiB metaslabs when the count allows.
pub const MS_SHIFT_DEFAULT: u8 = 29;
/// `zfs_vdev_max_ms_shift`: metaslabs grow no larger than 16 GiB…
pub const MS_SHIFT_MAX: u8 = 34;
/// `zfs_vdev_min_ms_count`: fewer than this and metaslabs shrink.
pub const MS_COUNT_MIN: u64 = 16;
/// `zfs_vdev_default_ms_count`: more than this and metaslabs grow.
pub const MS_COUNT_DEFAULT: u64 = 200;
/// `zfs_vdev_ms_count_limit`: …unless that would exceed this many.
pub const MS_COUNT_LIMIT: u64 = 131_072;
/// `zfs_embedded_slog_min_ms`: a top-level vdev with more metaslabs than
/// this gives one to the embedded log class.
pub const EMBEDDED_SLOG_MIN_MS: u64 = 64;
/// `spa_slop_shift`: slop is 1/32 of the deflated space…
pub const SLOP_SHIFT: u32 = 5;
/// `spa_max_slop`: …at most 128 GiB…
pub const SLOP_MAX_BYTES: u64 = 128 << 30;
/// `spa_min_slop`: …and at least 128 MiB (or half the pool if smaller).
pub const SLOP_MIN_BYTES: u64 = 128 << 20;
/// The block size whose cost defines the deflate ratio (`SPA_OLD_MAXBLOCKSIZE`).
const DEFLATE_BLOCK_BYTES: u64 = 1 << 17;

/// Bit length of `x`: the 1-based index of its top set bit, 0 for 0
/// (OpenZFS `highbit64`).
pub fn highbit64(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

/// Metaslab shift for a top-level vdev of `asize` allocatable bytes
/// (`vdev_metaslab_set_size`): aim for 512 MiB metaslabs, keep between 16
/// and 200 of them, sizes from 16 MiB to 16 GiB, and never more than 131072.
pub fn metaslab_shift(asize: u64) -> u8 {
    let count = asize >> MS_SHIFT_DEFAULT;
    let mut shift = if count < MS_COUNT_MIN {
        highbit64(asize / MS_COUNT_MIN)
    } else if count > MS_COUNT_DEFAULT {
        highbit64(asize / MS_COUNT_DEFAULT)
    } else {
        u32::from(MS_SHIFT_DEFAULT)
    };
    if shift < u32::from(MS_SHIFT_MIN) {
        shift = u32::from(MS_SHIFT_MIN);
    } else if shift > u32::from(MS_SHIFT_MAX) {
        shift = u32::from(MS_SHIFT_MAX);
        if asize >> shift > MS_COUNT_LIMIT {
            shift = highbit64(asize / MS_COUNT_LIMIT);
        }
    }
    // highbit64 of a u64 is at most 64, so this never truncates.
    debug_assert!((u32::from(MS_SHIFT_MIN)..=64).contains(&shift));
    shift as u8
}

/// Number of whole metaslabs of `2^shift` bytes in `asize`.
pub fn metaslab_count(asize: u64, shift: u8) -> u64 {
    asize.checked_shr(u32::from(shift)).unwrap_or(0)
}

/// Shape of a top-level vdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopLayout {
    Single,
    Mirror { children: usize },
    Raidz { children: usize, nparity: usize },
}

/// What accounting needs to know about one top-level vdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopSpec {
    pub layout: TopLayout,
    pub ashift: u8,
    /// Raw device size in bytes of the smallest child (of the disk itself
    /// for `Single`).
    pub min_child_bytes: u64,
    /// A separate intent-log vdev: never part of SIZE or AVAIL.
    pub is_log: bool,
}

/// Allocatable address space of a top-level vdev: every child contributes
/// as much as the smallest one's `leaf_asize`, a mirror keeps one copy's
/// worth, a raidz sums all columns (parity included, `vdev_raidz_open`).
pub fn top_asize(spec: &TopSpec) -> u64 {
    let leaf = leaf_asize(osize(spec.min_child_bytes));
    match spec.layout {
        TopLayout::Single | TopLayout::Mirror { .. } => leaf,
        TopLayout::Raidz { children, .. } => leaf.saturating_mul(children as u64),
    }
}

/// Raw bytes a block of `psize` bytes occupies on a top-level vdev
/// (`vdev_default_asize`, `vdev_raidz_asize`). For raidz: data sectors,
/// plus `p` parity sectors per row of `cols − p` data sectors, rounded up to
/// a multiple of `p + 1` sectors so that no unusable hole is left behind.
pub fn block_asize(layout: &TopLayout, ashift: u8, psize: u64) -> u64 {
    let sector = 1u64 << ashift.min(63);
    match *layout {
        TopLayout::Single | TopLayout::Mirror { .. } => psize.div_ceil(sector) * sector,
        TopLayout::Raidz { children, nparity } => {
            let p = nparity as u64;
            let data_cols = (children as u64).saturating_sub(p).max(1);
            let mut sectors = psize.div_ceil(sector);
            sectors += p * sectors.div_ceil(data_cols);
            sectors.div_ceil(p + 1) * (p + 1) * sector
        }
    }
}

/// Deflate ratio in 1/512 units (`vdev_set_deflate_ratio`): how many bytes
/// of user data 512 raw bytes hold, judged by a 128 KiB block. 512 for
/// single disks and mirrors; e.g. 372 for a 4-wide raidz1 at ashift 12.
pub fn deflate_ratio(layout: &TopLayout, ashift: u8) -> u64 {
    let cost = block_asize(layout, ashift, DEFLATE_BLOCK_BYTES) >> MIN_BLOCK_SHIFT;
    DEFLATE_BLOCK_BYTES / cost.max(1)
}

/// Space of one top-level vdev after metaslab layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopSpace {
    pub asize: u64,
    pub ms_shift: u8,
    /// All metaslabs, including the one given to the embedded log.
    pub ms_count: u64,
    pub deflate_ratio: u64,
    /// Raw bytes in metaslabs (`zpool list` SIZE contribution).
    pub raw: u64,
    /// Deflated bytes available to the normal class.
    pub dspace: u64,
    /// Deflated bytes of the metaslab lent to the embedded log class.
    pub embedded_log: u64,
}

/// Lays out one top-level vdev: its metaslabs, their deflated space, and
/// whether one of them is lent to the embedded log (`vdev_metaslab_init`).
pub fn top_space(spec: &TopSpec) -> TopSpace {
    let asize = top_asize(spec);
    let ms_shift = metaslab_shift(asize);
    let ms_count = metaslab_count(asize, ms_shift);
    let ratio = deflate_ratio(&spec.layout, spec.ashift);
    let ms_deflated = ((1u64 << ms_shift) >> MIN_BLOCK_SHIFT).saturating_mul(ratio);
    let log_ms = u64::from(ms_count > EMBEDDED_SLOG_MIN_MS);
    TopSpace {
        asize,
        ms_shift,
        ms_count,
        deflate_ratio: ratio,
        raw: ms_count.saturating_mul(1 << ms_shift),
        dspace: (ms_count - log_ms).saturating_mul(ms_deflated),
        embedded_log: log_ms * ms_deflated,
    }
}

/// Pool-wide space, as `zpool list` and the root dataset see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolSpace {
    /// `zpool list` SIZE: bytes in metaslabs, raw (parity included).
    pub size: u64,
    /// Deflated normal-class space (`spa_get_dspace`).
    pub dspace: u64,
    /// Deflated space held back from normal writes (`spa_get_slop_space`).
    pub slop: u64,
    /// Deflated space lent to the embedded log class.
    pub embedded_log: u64,
}

/// Sums the top-level vdevs of a pool; separate log vdevs are left out.
pub fn pool_space(tops: &[TopSpec]) -> PoolSpace {
    let mut space = PoolSpace::default();
    for top in tops.iter().filter(|t| !t.is_log).map(top_space) {
        space.size = space.size.saturating_add(top.raw);
        space.dspace = space.dspace.saturating_add(top.dspace);
        space.embedded_log = space.embedded_log.saturating_add(top.embedded_log);
    }
    space.slop = slop_space(space.dspace, space.embedded_log);
    space
}

/// `spa_get_slop_space`: 1/32 of the space capped at 128 GiB, less the
/// embedded log (which already keeps ZIL blocks out of the normal class, up
/// to half the slop), but never below min(128 MiB, half the pool).
pub fn slop_space(dspace: u64, embedded_log: u64) -> u64 {
    let mut slop = (dspace >> SLOP_SHIFT).min(SLOP_MAX_BYTES);
    slop -= embedded_log.min(slop >> 1);
    slop.max((dspace >> 1).min(SLOP_MIN_BYTES))
}

/// AVAIL for normal writes: deflated space less slop less what is used.
pub fn avail(space: &PoolSpace, used_deflated: u64) -> u64 {
    space
        .dspace
        .saturating_sub(space.slop)
        .saturating_sub(used_deflated)
}

/// `zfs_frag_table`: the fragmentation charged to free space held in
/// segments of 512 B, 1 KiB, … 16 MiB and up. Free space in segments of
/// 16 MiB or more counts as unfragmented; each halving of the segment size
/// below that adds roughly 10 %.
pub const FRAG_TABLE: [u8; 16] = [
    100, 100, 98, 95, 90, 80, 70, 60, 50, 40, 30, 20, 15, 10, 5, 0,
];

/// Fragmentation of one metaslab in percent (`metaslab_set_fragmentation`):
/// the mean of [`FRAG_TABLE`] over the free space, weighted by bytes.
///
/// `free_segments_histogram[i]` counts free segments of `2^i` to
/// `2^(i+1) − 1` bytes (a range tree histogram). As OpenZFS does, each
/// bucket is charged at its lower bound, and segments under 512 B count as
/// 512 B ones. Returns `None` when there is no free space to judge; OpenZFS
/// stores 0 in that case, so callers aggregating like `zpool list` should use
/// `unwrap_or(0)`.
pub fn fragmentation(free_segments_histogram: &[u64; 64]) -> Option<u8> {
    let mut total: u128 = 0;
    let mut weighted: u128 = 0;
    for (i, &count) in free_segments_histogram.iter().enumerate() {
        let idx = i
            .saturating_sub(MIN_BLOCK_SHIFT as usize)
            .min(FRAG_TABLE.len() - 1);
        let space = u128::from(count) << i;
        total += space;
        weighted += space * u128::from(FRAG_TABLE[idx]);
    }
    if total == 0 {
        return None;
    }
    let pct = weighted / total;
    debug_assert!(pct <= 100);
    Some(pct as u8)
}

/// Pool FRAG (`metaslab_class_fragmentation`): each top-level vdev's
/// fragmentation (the plain mean over its metaslabs) weighted by its raw
/// metaslab space. `None` when no vdev has a valid value, shown as `-`.
pub fn pool_fragmentation(tops: &[(u64, Option<u8>)]) -> Option<u8> {
    let mut space: u128 = 0;
    let mut weighted: u128 = 0;
    for &(raw, frag) in tops {
        if let Some(f) = frag {
            space += u128::from(raw);
            weighted += u128::from(raw) * u128::from(f.min(100));
        }
    }
    (space > 0).then(|| (weighted / space) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;
    /// A typical "4 TB" drive: 7,814,037,168 sectors of 512 B.
    const DISK_4TB: u64 = 4_000_787_030_016;
    /// A typical "2 TB" drive: 3,907,029,168 sectors.
    const DISK_2TB: u64 = 2_000_398_934_016;
    /// A typical "1 TB" drive: 1,953,525,168 sectors.
    const DISK_1TB: u64 = 1_000_204_886_016;

    fn raidz(children: usize, nparity: usize, ashift: u8, disk: u64) -> TopSpec {
        TopSpec {
            layout: TopLayout::Raidz { children, nparity },
            ashift,
            min_child_bytes: disk,
            is_log: false,
        }
    }

    fn mirror(children: usize, disk: u64) -> TopSpec {
        TopSpec {
            layout: TopLayout::Mirror { children },
            ashift: 12,
            min_child_bytes: disk,
            is_log: false,
        }
    }

    fn single(disk: u64) -> TopSpec {
        TopSpec {
            layout: TopLayout::Single,
            ashift: 12,
            min_child_bytes: disk,
            is_log: false,
        }
    }

    #[test]
    fn label_constants_match_openzfs() {
        assert_eq!(LABEL_START, 4 << 20);
        assert_eq!(LABEL_END, 512 << 10);
    }

    #[test]
    fn highbit64_is_bit_length() {
        assert_eq!(highbit64(0), 0);
        assert_eq!(highbit64(1), 1);
        assert_eq!(highbit64(2), 2);
        assert_eq!(highbit64(3), 2);
        assert_eq!(highbit64(1 << 29), 30);
        assert_eq!(highbit64(u64::MAX), 64);
    }

    #[test]
    fn deflate_ratios_match_worked_examples() {
        // By hand at ashift 12, 128 KiB = 32 sectors:
        // raidz1 × 4: 32 + 1·⌈32/3⌉ = 43 → 44 sectors → 352 units → 131072/352 = 372.
        // raidz2 × 6: 32 + 2·⌈32/4⌉ = 48 → 48 → 384 units → 341.
        // raidz2 × 8: 32 + 2·⌈32/6⌉ = 44 → 45 → 360 units → 364.
        // raidz2 × 10: 32 + 2·⌈32/8⌉ = 40 → 42 → 336 units → 390.
        // raidz3 × 24: 32 + 3·⌈32/21⌉ = 38 → 40 → 320 units → 409.
        let cases = [
            (4, 1, 372),
            (6, 2, 341),
            (8, 2, 364),
            (10, 2, 390),
            (24, 3, 409),
        ];
        for (children, nparity, want) in cases {
            let layout = TopLayout::Raidz { children, nparity };
            assert_eq!(
                deflate_ratio(&layout, 12),
                want,
                "{children}-wide raidz{nparity}"
            );
        }
        // ashift 9, raidz3 × 24: 256 + 3·⌈256/21⌉ = 295 → 296 units → 442.
        let wide = TopLayout::Raidz {
            children: 24,
            nparity: 3,
        };
        assert_eq!(deflate_ratio(&wide, 9), 442);
        assert_eq!(deflate_ratio(&TopLayout::Single, 12), 512);
        assert_eq!(deflate_ratio(&TopLayout::Mirror { children: 3 }, 9), 512);
    }

    #[test]
    fn block_asize_rounds_and_pads() {
        let rz1 = TopLayout::Raidz {
            children: 4,
            nparity: 1,
        };
        // 4 KiB on raidz1 at ashift 12: 1 data + 1 parity = 2 sectors.
        assert_eq!(block_asize(&rz1, 12, 4 * KIB), 8 * KIB);
        // 5 KiB: 2 data + 1 parity = 3 → padded to 4 sectors.
        assert_eq!(block_asize(&rz1, 12, 5 * KIB), 16 * KIB);
        assert_eq!(block_asize(&TopLayout::Single, 12, 1), 4 * KIB);
        assert_eq!(block_asize(&TopLayout::Mirror { children: 2 }, 9, 513), KIB);
        assert_eq!(block_asize(&TopLayout::Single, 12, 0), 0);
        // A raidz with no data columns must not divide by zero.
        let bad = TopLayout::Raidz {
            children: 2,
            nparity: 2,
        };
        assert!(block_asize(&bad, 12, 128 * KIB) > 0);
    }

    #[test]
    fn metaslab_shift_rules() {
        // 6 × 1 GiB raidz2: 6 × (1024 − 4.5) MiB = 6117 MiB; 6117 >> 9 = 11
        // (< 16) so shift = highbit64(6117 MiB / 16 ≈ 382 MiB) = 29:
        // 11 metaslabs of 512 MiB, the last 485 MiB unused.
        let asize = top_asize(&raidz(6, 2, 12, GIB));
        assert_eq!(asize, 6117 * MIB);
        assert_eq!(metaslab_shift(asize), 29);
        assert_eq!(metaslab_count(asize, 29), 11);
        // Tiny vdev: floor at 16 MiB.
        assert_eq!(metaslab_shift(100 * MIB), 24);
        // 100 GiB: 200 × 512 MiB fits exactly, so shift stays at 29.
        assert_eq!(metaslab_shift(100 * GIB), 29);
        // 1 PiB: 1 PiB / 200 ≈ 5.1 TiB → 43, capped at 34 → 65536 metaslabs.
        assert_eq!(metaslab_shift(1 << 50), 34);
        // 4 PiB at shift 34 is 262144 > 131072 metaslabs: highbit64(2^52 / 2^17) = 36.
        assert_eq!(metaslab_shift(1 << 52), 36);
        assert_eq!(metaslab_shift(u64::MAX), 47);
        assert_eq!(metaslab_count(u64::MAX, 64), 0);
    }

    #[test]
    fn six_one_gib_raidz2_keeps_eleven_metaslabs() {
        let top = top_space(&raidz(6, 2, 12, GIB));
        assert_eq!((top.ms_shift, top.ms_count), (29, 11));
        assert_eq!(top.raw, 11 * 512 * MIB);
        // 11 × (512 MiB >> 9) × 341 = 11 × 1048576 × 341 bytes.
        assert_eq!(top.dspace, 11 * 1_048_576 * 341);
        assert_eq!(top.embedded_log, 0);
    }

    #[test]
    fn mirror_of_two_one_gib_files() {
        // leaf 1019.5 MiB → shift highbit64(63.7 MiB) = 26 → 15 × 64 MiB = 960 MiB,
        // as `zpool list` shows for a pool of 1 GiB files. Slop: 960M/32 = 30 MiB,
        // raised to min(480 MiB, 128 MiB) = 128 MiB; AVAIL 832 MiB.
        let space = pool_space(&[mirror(2, GIB)]);
        assert_eq!(space.size, 960 * MIB);
        assert_eq!(space.dspace, 960 * MIB);
        assert_eq!(space.slop, 128 * MIB);
        assert_eq!(avail(&space, 0), 832 * MIB);
        assert_eq!(pool_space(&[single(GIB)]), space);
    }

    #[test]
    fn small_single_disk_slop_is_half_the_pool() {
        // 100 MiB disk: 95.5 MiB → 16 MiB metaslabs (floor), 5 of them = 80 MiB.
        // Slop: max(2.5 MiB, min(40 MiB, 128 MiB)) = 40 MiB.
        let space = pool_space(&[single(100 * MIB)]);
        assert_eq!(space.size, 80 * MIB);
        assert_eq!(space.slop, 40 * MIB);
        assert_eq!(avail(&space, 0), 40 * MIB);
        assert_eq!(avail(&space, 50 * MIB), 0);
    }

    #[test]
    fn slop_floor_and_cap() {
        // Floor: 1 GiB → 32 MiB raised to 128 MiB; 100 MiB → half = 50 MiB.
        assert_eq!(slop_space(GIB, 0), 128 * MIB);
        assert_eq!(slop_space(100 * MIB, 0), 50 * MIB);
        assert_eq!(slop_space(0, 0), 0);
        // Plain 1/32: 1 TiB → 32 GiB.
        assert_eq!(slop_space(TIB, 0), 32 * GIB);
        // Cap: 10 TiB / 32 = 320 GiB → 128 GiB.
        assert_eq!(slop_space(10 * TIB, 0), 128 * GIB);
        // Embedded log is subtracted, but at most half the slop.
        assert_eq!(slop_space(10 * TIB, 16 * GIB), 112 * GIB);
        assert_eq!(slop_space(10 * TIB, 500 * GIB), 64 * GIB);
        // …and the floor still applies afterwards.
        assert_eq!(slop_space(4 * GIB, GIB), 128 * MIB);
    }

    #[test]
    fn log_vdevs_never_count() {
        let mut log = mirror(2, 100 * GIB);
        log.is_log = true;
        let data = single(10 * GIB);
        assert_eq!(pool_space(&[data, log]), pool_space(&[data]));
        assert_eq!(pool_space(&[log]), PoolSpace::default());
    }

    #[test]
    fn mixed_mirrors_give_about_three_tb() {
        // 2 TB mirror: asize 2,000,394,125,312 → >200 × 512 MiB, highbit64(asize/200
        // ≈ 9.3 GiB) = 34 → 116 × 16 GiB; one lent to the embedded log.
        // 1 TB mirror: highbit64(≈ 4.66 GiB) = 33 → 116 × 8 GiB; one lent too.
        // dspace = 115 × 16 GiB + 115 × 8 GiB = 2760 GiB; embedded log 24 GiB.
        // slop = 2760/32 = 86.25 GiB − 24 GiB = 62.25 GiB; AVAIL 2697.75 GiB
        // = 2,896,687,005,696 B ≈ 2.90 TB (2.63 TiB).
        let space = pool_space(&[mirror(2, DISK_2TB), mirror(2, DISK_1TB)]);
        assert_eq!(space.size, 116 * 16 * GIB + 116 * 8 * GIB);
        assert_eq!(space.dspace, 2760 * GIB);
        assert_eq!(space.embedded_log, 24 * GIB);
        assert_eq!(space.slop, 62 * GIB + 256 * MIB);
        let usable = avail(&space, 0);
        assert_eq!(usable, 2_896_687_005_696);
        assert!((2_850_000_000_000..3_000_000_000_000).contains(&usable));
    }

    /// The seed's 24 × 4 TB raidz3 under today's rules. By hand:
    /// leaf = 4,000,786,939,904 − 4.5 MiB = 4,000,782,221,312; × 24 =
    /// 96,018,773,311,488 (87.33 TiB); asize/200 ≈ 447 GiB → shift 39 → capped
    /// at 34; 5589 metaslabs of 16 GiB, 5588 for data.
    /// ashift 12: 5588 × 2^25 × 409 = 76,688,385,900,544 (69.748 TiB); embedded
    /// log 2^25 × 409 = 13,723,762,688; slop 128 GiB − that = 123,715,190,784;
    /// AVAIL 76,564,670,709,760 = 69.635 TiB.
    /// ashift 9: ratio 442 → 82,875,957,379,072; slop 128 GiB − 14,831,058,944
    /// = 122,607,894,528; AVAIL 82,753,349,484,544 = 75.264 TiB.
    #[test]
    fn wide_raidz3_modern_rules() {
        let a12 = pool_space(&[raidz(24, 3, 12, DISK_4TB)]);
        let a9 = pool_space(&[raidz(24, 3, 9, DISK_4TB)]);
        assert_eq!(a12.size, 5589 * 16 * GIB);
        assert_eq!(a12.dspace, 76_688_385_900_544);
        assert_eq!(a12.slop, 123_715_190_784);
        assert_eq!(avail(&a12, 0), 76_564_670_709_760);
        assert_eq!(a9.dspace, 82_875_957_379_072);
        assert_eq!(avail(&a9, 0), 82_753_349_484_544);
        // The seed saw 68.4 T vs 73.9 T; today's rules give the same ratio.
        let ratio = avail(&a12, 0) as f64 / avail(&a9, 0) as f64;
        let seed = 68.4 / 73.9;
        assert!(
            (ratio / seed - 1.0).abs() < 0.01,
            "ratio {ratio} vs seed {seed}"
        );
    }

    /// The seed was measured in 2014 (ZoL 0.6.3), whose rules REFERENCE lists
    /// as the zfs-fuse ones: shift = highbit64(asize / 200) with no 16 GiB cap
    /// (17 floor), and slop = max(1/64, 32 MiB). Under them the same
    /// deflate ratios give the seed's AVAIL: shift 39 → 174 × 512 GiB;
    /// ashift 12: 174 × 409 GiB = 71,166 GiB − 1/64 = 68.41 TiB;
    /// ashift 9: 174 × 442 GiB = 76,908 GiB − 1/64 = 73.93 TiB.
    #[test]
    fn wide_raidz3_matches_seed_under_2014_rules() {
        fn legacy_avail(spec: &TopSpec) -> u64 {
            let asize = top_asize(spec);
            let shift = highbit64(asize / 200).max(17);
            let count = asize >> shift;
            let ratio = deflate_ratio(&spec.layout, spec.ashift);
            let dspace = count * ((1u64 << shift) >> 9) * ratio;
            dspace - (dspace >> 6).max(32 * MIB)
        }
        let tib = |b: u64| b as f64 / TIB as f64;
        let a12 = tib(legacy_avail(&raidz(24, 3, 12, DISK_4TB)));
        let a9 = tib(legacy_avail(&raidz(24, 3, 9, DISK_4TB)));
        assert!((a12 / 68.4 - 1.0).abs() < 0.01, "ashift 12: {a12} TiB");
        assert!((a9 / 73.9 - 1.0).abs() < 0.01, "ashift 9: {a9} TiB");
        assert!((a12 - 68.41).abs() < 0.01 && (a9 - 73.93).abs() < 0.01);
    }

    #[test]
    fn degenerate_layouts_do_not_panic() {
        let tiny = single(1 << 20);
        assert_eq!(top_asize(&tiny), 0);
        assert_eq!(pool_space(&[tiny]).dspace, 0);
        let huge = raidz(usize::MAX, 3, 12, u64::MAX);
        let _ = pool_space(&[huge]);
        let _ = pool_space(&[raidz(3, 3, 12, GIB)]);
        assert_eq!(avail(&PoolSpace::default(), 1), 0);
    }

    #[test]
    fn fragmentation_table() {
        let mut h = [0u64; 64];
        assert_eq!(fragmentation(&h), None);
        // All free space in 16 MiB segments: 0 %.
        h[24] = 10;
        assert_eq!(fragmentation(&h), Some(0));
        // All free space in 4 KiB segments: 95 %.
        let mut small = [0u64; 64];
        small[12] = 1000;
        assert_eq!(fragmentation(&small), Some(95));
        // Under 512 B counts as 512 B; huge segments count as 16 MiB.
        let mut tiny = [0u64; 64];
        tiny[3] = 1;
        assert_eq!(fragmentation(&tiny), Some(100));
        let mut giant = [0u64; 64];
        giant[63] = u64::MAX;
        assert_eq!(fragmentation(&giant), Some(0));
        // Equal space in 128 KiB (50 %) and 8 MiB (5 %) segments: 27 %.
        let mut mixed = [0u64; 64];
        mixed[17] = 64;
        mixed[23] = 1;
        assert_eq!(fragmentation(&mixed), Some(27));
    }

    #[test]
    fn pool_fragmentation_is_space_weighted() {
        assert_eq!(pool_fragmentation(&[]), None);
        assert_eq!(pool_fragmentation(&[(GIB, None)]), None);
        assert_eq!(
            pool_fragmentation(&[(3 * GIB, Some(10)), (GIB, Some(50))]),
            Some(20)
        );
        assert_eq!(
            pool_fragmentation(&[(GIB, Some(40)), (GIB, None)]),
            Some(40)
        );
    }
}
