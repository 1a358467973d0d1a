//! Vdev labels: how a leaf device identifies itself and its pool.
//!
//! A leaf device carries four 256 KiB labels, two at the front and two at the
//! back, so that a device overwritten at either end still identifies itself:
//!
//! ```text
//! 0        256K      512K              4M                      osize-512K  osize
//! | L0     | L1      | boot (reserved) | allocatable space ... | L2 | L3  |
//! ```
//!
//! `osize` is the device size rounded down to 256 KiB. The allocatable space
//! starts at `VDEV_LABEL_START_SIZE` (4 MiB) and ends at `osize -
//! VDEV_LABEL_END_SIZE`. DVA offsets are relative to its start.
//!
//! Each label:
//!
//! ```text
//! off     size   field
//!    0     16K   reserved (blank; never written by tarn)
//!  16K    112K   config: LabelConfigHeader (48 bytes) + JSON payload
//! 128K    128K   uberblock ring: slots of max(1 KiB, 2^ashift) bytes
//! ```
//!
//! Config header:
//!
//! ```text
//! off size field
//!   0    8 magic     LABEL_MAGIC ("tarnLABL")
//!   8    4 version   FORMAT_VERSION
//!  12    4 length    payload length in bytes (<= LABEL_CONFIG_MAX_PAYLOAD)
//!  16   32 checksum  SHA-256 of (label's device offset as u64 LE, payload)
//!  48    …  payload  UTF-8 JSON of `LabelConfig`
//! ```
//!
//! The payload is the *name-value list* of the label, as ZFS's nvlist is:
//! pool name and GUID, state, the txg the label was written at, this leaf's
//! GUID, and the subtree of the top-level vdev this leaf belongs to. JSON
//! keeps it readable with `dd | jq`; the header's length and checksum make
//! it as safe to decode as a binary struct, and serde rejects unknown types.

use crate::le::{put_u32, put_u64, u32_at, u64_at};
use crate::{Corrupted, FORMAT_VERSION};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const VDEV_LABEL_SIZE: u64 = 256 << 10;
pub const VDEV_LABELS: usize = 4;
/// Two front labels plus the 3.5 MiB boot reserve.
pub const VDEV_LABEL_START_SIZE: u64 = 4 << 20;
/// Two back labels.
pub const VDEV_LABEL_END_SIZE: u64 = 2 * VDEV_LABEL_SIZE;
/// Leaf sizes are aligned down to this.
pub const VDEV_SIZE_ALIGN: u64 = 256 << 10;
/// Smallest device tarn accepts, as OpenZFS's SPA_MINDEVSIZE.
pub const MIN_DEVICE_SIZE: u64 = 64 << 20;

pub const LABEL_OFF_CONFIG: u64 = 16 << 10;
pub const LABEL_CONFIG_SIZE: u64 = 112 << 10;
pub const LABEL_CONFIG_HEADER: usize = 48;
pub const LABEL_CONFIG_MAX_PAYLOAD: usize = LABEL_CONFIG_SIZE as usize - LABEL_CONFIG_HEADER;
pub const LABEL_OFF_UBER_RING: u64 = 128 << 10;
pub const LABEL_UBER_RING_SIZE: u64 = 128 << 10;
/// "tarnLABL" read as a little-endian u64.
pub const LABEL_MAGIC: u64 = u64::from_le_bytes(*b"tarnLABL");

/// Rounds a raw device size to the usable `osize` (256 KiB alignment).
pub fn osize(device_bytes: u64) -> u64 {
    device_bytes & !(VDEV_SIZE_ALIGN - 1)
}

/// Byte offset of label `l` (0..4) on a leaf of `osize` bytes.
pub fn label_offset(l: usize, osize: u64) -> u64 {
    assert!(l < VDEV_LABELS);
    if l < 2 {
        l as u64 * VDEV_LABEL_SIZE
    } else {
        osize - VDEV_LABEL_END_SIZE + (l as u64 - 2) * VDEV_LABEL_SIZE
    }
}

/// Allocatable bytes of a leaf of `osize` bytes (OpenZFS: osize − 4.5 MiB).
pub fn leaf_asize(osize: u64) -> u64 {
    osize.saturating_sub(VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE)
}

/// Size of one uberblock slot for a vdev of `ashift`.
pub fn uberblock_slot_size(ashift: u8) -> u64 {
    (1u64 << ashift).max(crate::UBERBLOCK_SIZE as u64)
}

/// Number of slots in the ring (128 at ashift ≤ 10, 32 at ashift 12).
pub fn uberblock_slots(ashift: u8) -> u64 {
    LABEL_UBER_RING_SIZE / uberblock_slot_size(ashift)
}

/// Byte offset (within the device) of the slot for `txg` in label `l`.
pub fn uberblock_offset(l: usize, osize: u64, ashift: u8, txg: u64) -> u64 {
    let slot = txg % uberblock_slots(ashift);
    label_offset(l, osize) + LABEL_OFF_UBER_RING + slot * uberblock_slot_size(ashift)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolState {
    /// Imported (in use) by some daemon.
    Active,
    /// Cleanly exported: importable without `-f`.
    Exported,
    /// Destroyed: not listed by `zpool import`.
    Destroyed,
    /// The label of an available hot spare of the pool: its `vdev_tree`
    /// is the spare leaf alone (`top_guid` 0). A spare in use carries the
    /// label of the vdev it serves in instead.
    Spare,
}

/// Kind of a vdev in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "type")]
pub enum VdevKind {
    /// A regular file leaf.
    File,
    /// A block device leaf.
    Disk,
    Mirror,
    Raidz {
        nparity: u8,
    },
    /// A member being replaced: children are the old device and the new
    /// one, which is resilvered; the old one leaves when that is done
    /// (OpenZFS's `replacing-N`). A child of a mirror or raidz, or a
    /// top-level vdev in place of a single device.
    Replacing,
    /// A hot spare standing in for a failed member: children are that
    /// member and the spare (OpenZFS's `spare-N`), placed like
    /// `Replacing`. It stays until `zpool detach` of either.
    Spare,
}

/// Where a top-level vdev serves: normal data, or a separate intent log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum VdevClass {
    #[default]
    Normal,
    Log,
}

/// One node of the vdev tree, as stored in labels and in the MOS config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdevConfig {
    #[serde(flatten)]
    pub kind: VdevKind,
    /// Index among the pool's top-level vdevs (top-level only; children use
    /// their index among siblings).
    pub id: u64,
    pub guid: u64,
    /// Leaves: the path the device was last opened at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Top-level only: allocation unit is 2^ashift.
    #[serde(default)]
    pub ashift: u8,
    /// Top-level only: allocatable bytes (sum over columns for raidz).
    #[serde(default)]
    pub asize: u64,
    /// Top-level only: metaslabs are 2^metaslab_shift bytes.
    #[serde(default)]
    pub metaslab_shift: u8,
    #[serde(default)]
    pub class: VdevClass,
    #[serde(default)]
    pub create_txg: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<VdevConfig>,
    /// Leaves: taken offline by `zpool offline` (without `-t`), so the
    /// pool opens it OFFLINE (OpenZFS's `ZPOOL_CONFIG_OFFLINE`). Absent
    /// when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub offline: bool,
    /// Leaves: faulted by too many I/O errors (OpenZFS's
    /// `ZPOOL_CONFIG_FAULTED`): the pool opens it FAULTED, until `zpool
    /// clear`. Absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub faulted: bool,
    /// Leaves: the txgs whose writes this leaf missed while it was
    /// offline, missing or failing — its dirty time log (OpenZFS's DTL),
    /// as inclusive `[first, last]` ranges, sorted and disjoint.
    /// `last = DTL_OPEN` means "still missing when the label was
    /// written". Absent when empty (the leaf holds every txg).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dtl: Vec<[u64; 2]>,
}

/// The `last` of a DTL range that was still growing when its label was
/// written: the leaf was unavailable then.
pub const DTL_OPEN: u64 = u64::MAX;

/// At most this many ranges are kept in a leaf's DTL: the oldest ones are
/// merged beyond it (a larger range is safe, it only means more to
/// resilver), so a flapping device cannot outgrow its label.
pub const DTL_RANGES_MAX: usize = 64;

fn is_false(b: &bool) -> bool {
    !*b
}

impl VdevConfig {
    pub fn is_leaf(&self) -> bool {
        matches!(self.kind, VdevKind::File | VdevKind::Disk)
    }
    /// All leaves beneath (or self).
    pub fn leaves(&self) -> Vec<&VdevConfig> {
        if self.is_leaf() {
            vec![self]
        } else {
            self.children.iter().flat_map(|c| c.leaves()).collect()
        }
    }
}

/// The decoded payload of a label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelConfig {
    pub version: u64,
    pub name: String,
    pub pool_guid: u64,
    pub state: PoolState,
    /// txg at which this label's config was written.
    pub txg: u64,
    pub hostname: String,
    /// This leaf's GUID.
    pub guid: u64,
    /// GUID of the top-level vdev this leaf belongs to.
    pub top_guid: u64,
    /// How many top-level vdevs the pool has (holes included).
    pub vdev_children: u64,
    /// The subtree of the top-level vdev this leaf belongs to.
    pub vdev_tree: VdevConfig,
    #[serde(default)]
    pub features_for_read: Vec<String>,
    /// Ids below `vdev_children` of removed top-level vdevs (OpenZFS's
    /// hole array): no device describes them, and none is missing. An id
    /// is never reused, because block pointers name vdevs by id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holes: Vec<u64>,
    /// The pool's hot spares (leaf configs: kind, GUID, path), in use or
    /// not (OpenZFS's `ZPOOL_CONFIG_SPARES`). Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spares: Vec<VdevConfig>,
    /// The subtrees of the pool's log vdevs (every label carries them), so
    /// that a pool whose log devices are all gone can still be imported
    /// with `zpool import -m`: nothing else describes them then. Absent
    /// when the pool has no log vdev.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<VdevConfig>,
}

impl LabelConfig {
    /// Encodes the 112 KiB config area for the label at `label_offset`.
    pub fn encode(&self, label_offset: u64) -> Result<Vec<u8>, Corrupted> {
        let payload = serde_json::to_vec(self).expect("label config serializes");
        if payload.len() > LABEL_CONFIG_MAX_PAYLOAD {
            return Err(Corrupted::new(
                "label config",
                format!("config of {} bytes does not fit in a label", payload.len()),
            ));
        }
        let mut b = vec![0u8; LABEL_CONFIG_SIZE as usize];
        put_u64(&mut b, 0, LABEL_MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION as u32);
        put_u32(&mut b, 12, payload.len() as u32);
        b[16..48].copy_from_slice(&config_checksum(label_offset, &payload));
        b[LABEL_CONFIG_HEADER..LABEL_CONFIG_HEADER + payload.len()].copy_from_slice(&payload);
        Ok(b)
    }

    /// Decodes the config area read from the label at `label_offset`.
    pub fn decode(b: &[u8], label_offset: u64) -> Result<LabelConfig, Corrupted> {
        let err = |why: String| Corrupted::new("label config", why);
        if b.len() < LABEL_CONFIG_HEADER || u64_at(b, 0) != LABEL_MAGIC {
            return Err(err("no tarn label (bad magic)".into()));
        }
        let version = u64::from(u32_at(b, 8));
        if version == 0 || version > FORMAT_VERSION {
            return Err(err(format!("unsupported label version {version}")));
        }
        let len = u32_at(b, 12) as usize;
        if len > LABEL_CONFIG_MAX_PAYLOAD || LABEL_CONFIG_HEADER + len > b.len() {
            return Err(err(format!("payload length {len} out of range")));
        }
        let payload = &b[LABEL_CONFIG_HEADER..LABEL_CONFIG_HEADER + len];
        if config_checksum(label_offset, payload) != b[16..48] {
            return Err(err("checksum mismatch".into()));
        }
        serde_json::from_slice(payload).map_err(|e| err(format!("bad payload: {e}")))
    }
}

fn config_checksum(label_offset: u64, payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(label_offset.to_le_bytes());
    h.update(payload);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LabelConfig {
        let leaf = |id, guid| VdevConfig {
            kind: VdevKind::File,
            id,
            guid,
            path: Some(format!("/tmp/d{id}.img")),
            ashift: 0,
            asize: 0,
            metaslab_shift: 0,
            class: VdevClass::Normal,
            create_txg: 0,
            children: vec![],
            offline: false,
            faulted: false,
            dtl: vec![],
        };
        LabelConfig {
            version: 1,
            name: "tank".into(),
            pool_guid: 99,
            state: PoolState::Active,
            txg: 4,
            hostname: "h".into(),
            guid: 11,
            top_guid: 10,
            vdev_children: 1,
            vdev_tree: VdevConfig {
                kind: VdevKind::Mirror,
                id: 0,
                guid: 10,
                path: None,
                ashift: 12,
                asize: 1 << 30,
                metaslab_shift: 24,
                class: VdevClass::Normal,
                create_txg: 4,
                children: vec![leaf(0, 11), leaf(1, 12)],
                offline: false,
                faulted: false,
                dtl: vec![],
            },
            features_for_read: vec![],
            holes: vec![],
            spares: vec![],
            logs: vec![],
        }
    }

    #[test]
    fn layout() {
        let os = osize(100 << 20 | 12345);
        assert_eq!(os, 100 << 20);
        assert_eq!(label_offset(0, os), 0);
        assert_eq!(label_offset(1, os), 256 << 10);
        assert_eq!(label_offset(2, os), os - (512 << 10));
        assert_eq!(label_offset(3, os), os - (256 << 10));
        assert_eq!(leaf_asize(os), os - (4 << 20) - (512 << 10));
        assert_eq!(uberblock_slots(9), 128);
        assert_eq!(uberblock_slots(12), 32);
        assert_eq!(uberblock_slots(16), 2);
        assert_eq!(
            uberblock_offset(1, os, 12, 33),
            (256 << 10) + (128 << 10) + 4096
        );
    }

    #[test]
    fn config_round_trip_and_header_bytes() {
        let c = sample();
        let b = c.encode(256 << 10).unwrap();
        assert_eq!(b.len(), 112 << 10);
        assert_eq!(&b[0..8], b"tarnLABL");
        assert_eq!(u32_at(&b, 8), 1);
        let len = u32_at(&b, 12) as usize;
        assert!(b[48 + len..].iter().all(|&x| x == 0));
        assert_eq!(LabelConfig::decode(&b, 256 << 10).unwrap(), c);
        // Checksum is bound to the label's position.
        assert!(LabelConfig::decode(&b, 0).is_err());
    }

    /// The leaf fields of device states, byte for byte: `offline` and
    /// `dtl` appear only when set, after `children`'s place.
    #[test]
    fn offline_and_dtl_bytes() {
        let mut c = sample();
        let plain = serde_json::to_string(&c.vdev_tree.children[0]).unwrap();
        assert!(
            !plain.contains("offline") && !plain.contains("dtl"),
            "{plain}"
        );
        c.vdev_tree.children[0].offline = true;
        c.vdev_tree.children[0].dtl = vec![[5, 9], [12, DTL_OPEN]];
        let json = serde_json::to_string(&c.vdev_tree.children[0]).unwrap();
        assert_eq!(
            json,
            r#"{"type":"file","id":0,"guid":11,"path":"/tmp/d0.img","ashift":0,"asize":0,"#
                .to_owned()
                + r#""metaslab_shift":0,"class":"normal","create_txg":0,"offline":true,"#
                + r#""dtl":[[5,9],[12,18446744073709551615]]}"#
        );
        let b = c.encode(0).unwrap();
        assert_eq!(LabelConfig::decode(&b, 0).unwrap(), c);
        // A label written before these fields existed still decodes.
        let old = r#"{"type":"file","id":0,"guid":11,"ashift":0,"asize":0,"metaslab_shift":0,"class":"normal","create_txg":0}"#;
        let leaf: VdevConfig = serde_json::from_str(old).unwrap();
        assert!(!leaf.offline && leaf.dtl.is_empty());
    }

    #[test]
    fn corrupt_lengths_are_errors() {
        let mut b = sample().encode(0).unwrap();
        put_u32(&mut b, 12, u32::MAX);
        assert!(LabelConfig::decode(&b, 0).is_err());
        assert!(LabelConfig::decode(&b[..10], 0).is_err());
    }
}
