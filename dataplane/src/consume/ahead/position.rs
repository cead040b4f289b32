//! A partition's consumer position (frontier and acked-ahead set), what
//! the store persists, and the trait through which it reads the live one.

use std::fmt;

/// Offsets are below 2^63, as in the partition log.
pub const OFFSET_LIMIT: u64 = 1 << 63;

/// Frontier (every offset below it is settled) and the settled offsets above it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerPosition {
    /// Every offset below it is settled; the frontier itself is not.
    pub frontier: u64,
    /// Settled offsets above the frontier, sorted ascending, all `> frontier`.
    pub acked_ahead: Vec<u64>,
}

impl ConsumerPosition {
    /// A position at `frontier` with nothing acked ahead.
    pub fn at(frontier: u64) -> Self {
        Self {
            frontier,
            acked_ahead: Vec::new(),
        }
    }

    /// Whether the position keeps its invariants: offsets below
    /// [`OFFSET_LIMIT`], the set strictly ascending and above the frontier.
    pub fn is_well_formed(&self) -> bool {
        let mut previous = self.frontier;
        self.frontier < OFFSET_LIMIT
            && self.acked_ahead.iter().all(|&offset| {
                let ordered = offset > previous && offset < OFFSET_LIMIT;
                previous = offset;
                ordered
            })
    }

    /// Raises the frontier to `frontier` (a larger frontier from
    /// `consumer.offset`): acked-ahead offsets below it are dropped, and a
    /// run of settled offsets starting at the new frontier is absorbed.
    pub(super) fn raise_frontier(&mut self, frontier: u64) {
        if frontier <= self.frontier {
            return;
        }
        self.frontier = frontier;
        self.acked_ahead.retain(|&offset| offset >= frontier);
        let absorbed = self
            .acked_ahead
            .iter()
            .zip(frontier..)
            .take_while(|(offset, expected)| **offset == *expected)
            .count();
        self.acked_ahead.drain(..absorbed);
        self.frontier += absorbed as u64;
    }
}

/// Something that can report a partition's current position (the service's shard).
///
/// The store calls [`PositionSource::position`] while it holds its own lock,
/// so an implementation must not call back into the store, and the store's
/// methods must not be called while holding a lock that `position` takes.
pub trait PositionSource: Send + Sync + fmt::Debug {
    /// The partition's current position.
    fn position(&self) -> ConsumerPosition;
}
