//! The state of a pool scan (scrub), kept in the MOS so that a scrub
//! survives export/import and a daemon restart (OpenZFS's `dsl_scan_phys`).
//!
//! Stored as the 128-byte bonus of a bonus-only MOS object named by the
//! object directory's `scan` entry:
//!
//! ```text
//! off size field
//!   0    8 func           0 none, 1 scrub, 2 resilver
//!   8    8 state          0 none, 1 scanning, 2 finished, 3 canceled
//!  16    8 max_txg        blocks born after it are not the scan's business
//!  24    8 start_time     seconds since the epoch
//!  32    8 end_time       0 while scanning
//!  40    8 to_examine     allocated bytes when the scan started
//!  48    8 examined       bytes of blocks found so far
//!  56    8 issued         bytes read and verified so far
//!  64    8 processed      bytes repaired
//!  72    8 errors         blocks that could not be repaired
//!  80    8 bm_mos_obj     bookmark: the MOS object the walk resumes at
//!  88    8 bm_obj         bookmark: inside that MOS object's object set
//!                         (a dataset), the object to resume at; 0 = from
//!                         its header
//!  96    8 pause_time     0 unless paused (`zpool scrub -p`)
//! 104    8 target_guid    resilver: the leaf being rebuilt; 0 for a scrub
//! 112    8 replaces_guid  resilver of `zpool replace`: the leaf detached
//!                         when it is done; 0 otherwise
//! 120    8 reserved       zero
//! ```
//!
//! A decoder given unknown `func`/`state` codes reports corruption rather
//! than guessing.

use crate::le::{put_u64, u64_at};
use crate::Corrupted;

pub const SCAN_PHYS_SIZE: usize = 128;
const WORDS: usize = 15;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScanFunc {
    #[default]
    None = 0,
    Scrub = 1,
    Resilver = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScanPhase {
    #[default]
    None = 0,
    Scanning = 1,
    Finished = 2,
    Canceled = 3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanPhys {
    pub func: ScanFunc,
    pub state: ScanPhase,
    pub max_txg: u64,
    pub start_time: u64,
    pub end_time: u64,
    pub to_examine: u64,
    pub examined: u64,
    pub issued: u64,
    pub processed: u64,
    pub errors: u64,
    pub bm_mos_obj: u64,
    pub bm_obj: u64,
    pub pause_time: u64,
    pub target_guid: u64,
    pub replaces_guid: u64,
}

impl ScanPhys {
    fn words(&self) -> [u64; WORDS] {
        [
            self.func as u64,
            self.state as u64,
            self.max_txg,
            self.start_time,
            self.end_time,
            self.to_examine,
            self.examined,
            self.issued,
            self.processed,
            self.errors,
            self.bm_mos_obj,
            self.bm_obj,
            self.pause_time,
            self.target_guid,
            self.replaces_guid,
        ]
    }

    pub fn encode(&self) -> [u8; SCAN_PHYS_SIZE] {
        let mut b = [0u8; SCAN_PHYS_SIZE];
        for (i, v) in self.words().iter().enumerate() {
            put_u64(&mut b, i * 8, *v);
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, Corrupted> {
        let b = b
            .get(..SCAN_PHYS_SIZE)
            .ok_or_else(|| Corrupted::new("scan state", "short bonus"))?;
        if b[WORDS * 8..].iter().any(|&x| x != 0) {
            return Err(Corrupted::new("scan state", "reserved bytes are not zero"));
        }
        let w = |i: usize| u64_at(b, i * 8);
        let func = match w(0) {
            0 => ScanFunc::None,
            1 => ScanFunc::Scrub,
            2 => ScanFunc::Resilver,
            f => {
                return Err(Corrupted::new(
                    "scan state",
                    format!("unknown function {f}"),
                ))
            }
        };
        let state = match w(1) {
            0 => ScanPhase::None,
            1 => ScanPhase::Scanning,
            2 => ScanPhase::Finished,
            3 => ScanPhase::Canceled,
            s => return Err(Corrupted::new("scan state", format!("unknown state {s}"))),
        };
        Ok(ScanPhys {
            func,
            state,
            max_txg: w(2),
            start_time: w(3),
            end_time: w(4),
            to_examine: w(5),
            examined: w(6),
            issued: w(7),
            processed: w(8),
            errors: w(9),
            bm_mos_obj: w(10),
            bm_obj: w(11),
            pause_time: w(12),
            target_guid: w(13),
            replaces_guid: w(14),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_layout() {
        let s = ScanPhys {
            func: ScanFunc::Scrub,
            state: ScanPhase::Scanning,
            max_txg: 3,
            start_time: 4,
            end_time: 5,
            to_examine: 6,
            examined: 7,
            issued: 8,
            processed: 9,
            errors: 10,
            bm_mos_obj: 11,
            bm_obj: 12,
            pause_time: 13,
            target_guid: 14,
            replaces_guid: 15,
        };
        let b = s.encode();
        for (i, want) in (1u64..=15).enumerate() {
            let want = if i == 1 { 1 } else { want };
            assert_eq!(u64_at(&b, i * 8), want, "word {i}");
        }
        assert!(b[120..].iter().all(|&x| x == 0));
        assert_eq!(ScanPhys::decode(&b).unwrap(), s);
    }

    #[test]
    fn rejects_damage() {
        let mut b = ScanPhys::default().encode();
        assert!(ScanPhys::decode(&b[..100]).is_err());
        b[0] = 9;
        assert!(ScanPhys::decode(&b).is_err());
        let mut b = ScanPhys::default().encode();
        b[8] = 7;
        assert!(ScanPhys::decode(&b).is_err());
        let mut b = ScanPhys::default().encode();
        b[120] = 1;
        assert!(ScanPhys::decode(&b).is_err());
    }
}
