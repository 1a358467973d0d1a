//! Label I/O on one leaf device: config areas and uberblock rings.
//!
//! The byte layout (four 256 KiB labels, config at +16K, uberblock ring at
//! +128K) is defined once, in `tarn_format::label`; this module only moves
//! those bytes to and from a [`BlockDevice`].
//!
//! Update order: [`write_labels`] writes labels 0 and 2, flushes, then
//! writes 1 and 3 and flushes. A crash at any point leaves at least one
//! front and one back label whole — either both old or both new — and every
//! config carries a checksum bound to its position, so a torn or misplaced
//! label is rejected and the other pair is used. Uberblocks are written to
//! a slot chosen by txg, so a torn uberblock write only damages the slot of
//! the txg being committed; the previous txg's slot stays intact.

use crate::device::BlockDevice;
use crate::error::VdevError;
use tarn_format::label::{
    label_offset, osize, uberblock_offset, uberblock_slot_size, uberblock_slots, LabelConfig,
    LABEL_CONFIG_SIZE, LABEL_OFF_CONFIG, LABEL_OFF_UBER_RING, LABEL_UBER_RING_SIZE, VDEV_LABELS,
    VDEV_LABEL_END_SIZE, VDEV_LABEL_SIZE, VDEV_LABEL_START_SIZE,
};
use tarn_format::Uberblock;

fn io(dev: &dyn BlockDevice, source: std::io::Error) -> VdevError {
    VdevError::Io {
        path: dev.describe(),
        source,
    }
}

/// `osize` of the device, or `TooSmall` if it cannot hold four labels.
fn labelled_osize(dev: &dyn BlockDevice) -> Result<u64, VdevError> {
    let os = osize(dev.size());
    let min = VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE;
    if os < min {
        return Err(VdevError::TooSmall {
            path: dev.describe(),
            size: dev.size(),
            min,
        });
    }
    Ok(os)
}

/// Writes the config area of label `index` (0..4).
pub fn write_label_config(
    dev: &dyn BlockDevice,
    index: usize,
    cfg: &LabelConfig,
) -> Result<(), VdevError> {
    if index >= VDEV_LABELS {
        return Err(VdevError::BadRequest(format!(
            "label index {index} is not 0..4"
        )));
    }
    let lo = label_offset(index, labelled_osize(dev)?);
    let bytes = cfg.encode(lo)?;
    debug_assert_eq!(bytes.len() as u64, LABEL_CONFIG_SIZE);
    dev.write_at(&bytes, lo + LABEL_OFF_CONFIG)
        .map_err(|e| io(dev, e))
}

/// Writes all four label configs in the crash-safe order (see module doc).
pub fn write_labels(dev: &dyn BlockDevice, cfg: &LabelConfig) -> Result<(), VdevError> {
    for pair in [[0, 2], [1, 3]] {
        for l in pair {
            write_label_config(dev, l, cfg)?;
        }
        dev.flush().map_err(|e| io(dev, e))?;
    }
    Ok(())
}

/// Reads and validates the four label configs; a damaged one is an error
/// in its entry, never a panic.
pub fn read_labels(dev: &dyn BlockDevice) -> Vec<Result<LabelConfig, VdevError>> {
    let os = match labelled_osize(dev) {
        Ok(os) => os,
        Err(_) => return (0..VDEV_LABELS).map(|_| Err(too_small(dev))).collect(),
    };
    (0..VDEV_LABELS)
        .map(|l| {
            let lo = label_offset(l, os);
            let mut buf = vec![0u8; LABEL_CONFIG_SIZE as usize];
            dev.read_at(&mut buf, lo + LABEL_OFF_CONFIG)
                .map_err(|e| io(dev, e))?;
            Ok(LabelConfig::decode(&buf, lo)?)
        })
        .collect()
}

fn too_small(dev: &dyn BlockDevice) -> VdevError {
    labelled_osize(dev)
        .err()
        .unwrap_or(VdevError::Config("device too small".into()))
}

/// Writes `ub` into the slot for `ub.txg` of all four labels (the rest of
/// the slot zero). Does not flush: the caller orders uberblock writes after
/// a flush of the data they point to and flushes afterwards. Every label is
/// attempted; the first error is returned.
pub fn write_uberblock(dev: &dyn BlockDevice, ashift: u8, ub: &Uberblock) -> Result<(), VdevError> {
    let os = labelled_osize(dev)?;
    let slot = uberblock_slot_size(ashift) as usize;
    let mut first_err = None;
    for l in 0..VDEV_LABELS {
        let off = uberblock_offset(l, os, ashift, ub.txg);
        let mut buf = vec![0u8; slot];
        let enc = ub.encode(off);
        buf[..enc.len()].copy_from_slice(&enc);
        if let Err(e) = dev.write_at(&buf, off) {
            first_err.get_or_insert(io(dev, e));
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Every valid uberblock in every label's ring (empty, torn and misplaced
/// slots are skipped). The caller picks the newest.
pub fn read_uberblocks(dev: &dyn BlockDevice, ashift: u8) -> Vec<Uberblock> {
    let Ok(os) = labelled_osize(dev) else {
        return Vec::new();
    };
    let slot = uberblock_slot_size(ashift);
    let mut out = Vec::new();
    for l in 0..VDEV_LABELS {
        let ring_off = label_offset(l, os) + LABEL_OFF_UBER_RING;
        let mut ring = vec![0u8; LABEL_UBER_RING_SIZE as usize];
        if dev.read_at(&mut ring, ring_off).is_err() {
            continue;
        }
        for s in 0..uberblock_slots(ashift) {
            let at = (s * slot) as usize;
            if let Ok(ub) = Uberblock::decode(&ring[at..at + slot as usize], ring_off + s * slot) {
                out.push(ub);
            }
        }
    }
    out
}

/// Zeroes all four labels, uberblock rings included: the device belongs
/// to no pool any more (`zpool remove` and `zpool detach` of a device;
/// `zpool destroy` instead marks the pool state destroyed in the config).
pub fn clear_labels(dev: &dyn BlockDevice) -> Result<(), VdevError> {
    let os = labelled_osize(dev)?;
    let zeros = vec![0u8; VDEV_LABEL_SIZE as usize];
    for l in 0..VDEV_LABELS {
        dev.write_at(&zeros, label_offset(l, os))
            .map_err(|e| io(dev, e))?;
    }
    dev.flush().map_err(|e| io(dev, e))
}

#[cfg(test)]
mod tests;
