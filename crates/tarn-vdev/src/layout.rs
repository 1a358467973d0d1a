//! How a top-level vdev stores data: its [`Layout`], and the [`Shape`]
//! mirror and raidz I/O work on — the leaves, which of them hold each
//! position, and the redundancy rule — so that `mirror.rs` and `raidz.rs`
//! need nothing of [`crate::TopVdev`] itself.

use std::ops::Range;

use tarn_format::label::VdevKind;

use crate::error::VdevError;
use crate::leaf::Leaf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Single,
    Mirror,
    Raidz { nparity: usize },
}

impl Layout {
    /// The layout a vdev of this kind stores data with (a `replacing` or
    /// `spare` pair is a mirror of its devices).
    pub fn of(kind: VdevKind) -> Layout {
        match kind {
            VdevKind::File | VdevKind::Disk => Layout::Single,
            VdevKind::Mirror | VdevKind::Replacing | VdevKind::Spare => Layout::Mirror,
            VdevKind::Raidz { nparity } => Layout::Raidz {
                nparity: usize::from(nparity),
            },
        }
    }

    /// How many of `children` may be lost with every block still
    /// readable: the one rule behind I/O failures, `zpool offline`, the
    /// fault rules and the health `zpool status` shows.
    pub fn tolerated_failures(self, children: usize) -> usize {
        match self {
            Layout::Single => 0,
            Layout::Mirror => children.saturating_sub(1),
            Layout::Raidz { nparity } => nparity,
        }
    }
}

/// The verify callback of reads: true when the bytes match the checksum.
pub type Verify<'a> = &'a mut dyn FnMut(&[u8]) -> bool;

/// One top-level vdev as its I/O sees it (see `top.rs` for positions).
#[derive(Clone, Copy)]
pub(crate) struct Shape<'a> {
    pub id: u32,
    pub ashift: u8,
    pub layout: Layout,
    pub leaves: &'a [Leaf],
    /// Leaf index ranges by position.
    pub groups: &'a [Range<usize>],
}

impl Shape<'_> {
    /// Number of positions: raidz columns, mirror sides.
    pub fn width(&self) -> usize {
        match self.layout {
            Layout::Raidz { .. } => self.groups.len(),
            Layout::Single | Layout::Mirror => self.leaves.len(),
        }
    }

    /// The leaf indices of raidz column (or position) `pos`.
    pub fn group(&self, pos: usize) -> Range<usize> {
        self.groups.get(pos).cloned().unwrap_or(0..0)
    }

    /// An operation on the vdev succeeds while no more children failed
    /// than the layout tolerates.
    pub fn check_failures(
        &self,
        op: &'static str,
        failed: usize,
        last: String,
    ) -> Result<(), VdevError> {
        let tolerated = self.layout.tolerated_failures(self.leaves.len());
        if failed <= tolerated {
            return Ok(());
        }
        Err(VdevError::TooManyFailures {
            vdev: self.id,
            op,
            failed,
            total: self.width(),
            tolerated,
            last,
        })
    }
}
