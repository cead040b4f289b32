//! The memory of owners that refused the trailing incarnation section: a
//! pure table, fed the time (the node clock's `now_ms`), so its tests need
//! no clock.

use std::collections::HashMap;

use crate::topology::NodeId;

/// How long commits to an owner that refused incarnation ids go without
/// them (the seed's `produceLegacyOwnerTTL`): long enough that a rolling
/// upgrade costs one refused batch per old owner every 2 minutes, short
/// enough that an upgraded owner gets the ids back soon.
pub const LEGACY_OWNER_TTL_MS: u64 = 120_000;

/// Owners remembered at most. A cluster is far smaller (the transport keeps
/// at most 4,096 peers); the bound only stops a bug from growing the table.
pub const LEGACY_OWNERS_MAX: usize = 4_096;

/// Owners that refused the incarnation section, each until its memory
/// lapses: a point on the monotonic clock ([`Clock::now_ms`]).
///
/// [`Clock::now_ms`]: narad_clock::Clock::now_ms
#[derive(Debug, Default)]
pub struct LegacyOwners {
    until_ms: HashMap<NodeId, u64>,
}

impl LegacyOwners {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether batches to `node` may carry incarnation ids at `now_ms`.
    pub fn sends_ids(&self, node: NodeId, now_ms: u64) -> bool {
        self.until_ms
            .get(&node)
            .is_none_or(|until_ms| now_ms >= *until_ms)
    }

    /// `node` refused the section at `now_ms`: send it none for
    /// [`LEGACY_OWNER_TTL_MS`].
    pub fn refused(&mut self, node: NodeId, now_ms: u64) {
        if self.until_ms.len() >= LEGACY_OWNERS_MAX {
            self.until_ms.retain(|_, until_ms| now_ms < *until_ms);
        }
        if self.until_ms.len() >= LEGACY_OWNERS_MAX && !self.until_ms.contains_key(&node) {
            // Still full of live entries: forgetting one costs that owner
            // one more refused batch, nothing else.
            if let Some(oldest) = self
                .until_ms
                .iter()
                .min_by_key(|(_, until_ms)| **until_ms)
                .map(|(node, _)| *node)
            {
                self.until_ms.remove(&oldest);
            }
        }
        self.until_ms
            .insert(node, now_ms.saturating_add(LEGACY_OWNER_TTL_MS));
        assert!(self.until_ms.len() <= LEGACY_OWNERS_MAX);
    }

    /// Owners remembered (lapsed ones included until the table fills).
    pub fn len(&self) -> usize {
        self.until_ms.len()
    }

    /// Whether no owner is remembered.
    pub fn is_empty(&self) -> bool {
        self.until_ms.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_never_refused_gets_ids() {
        assert!(LegacyOwners::new().sends_ids(2, 0));
    }

    #[test]
    fn a_refusing_owner_gets_no_ids_for_two_minutes() {
        let mut owners = LegacyOwners::new();
        let at_ms = 10_000;
        owners.refused(2, at_ms);
        assert!(!owners.sends_ids(2, at_ms));
        assert!(!owners.sends_ids(2, at_ms + LEGACY_OWNER_TTL_MS - 1));
        assert!(owners.sends_ids(2, at_ms + LEGACY_OWNER_TTL_MS));
    }

    #[test]
    fn the_memory_is_per_owner() {
        let mut owners = LegacyOwners::new();
        owners.refused(2, 0);
        assert!(owners.sends_ids(3, 0));
    }

    #[test]
    fn a_full_table_of_live_entries_forgets_one_and_stays_bounded() {
        let mut owners = LegacyOwners::new();
        for node in 0..LEGACY_OWNERS_MAX as u64 {
            owners.refused(node, node);
        }
        owners.refused(u64::MAX, 5_000);
        assert_eq!(owners.len(), LEGACY_OWNERS_MAX);
        assert!(!owners.sends_ids(u64::MAX, 5_000));
        assert!(owners.sends_ids(0, 5_000), "the oldest entry went");
    }

    #[test]
    fn a_full_table_drops_lapsed_entries_first() {
        let mut owners = LegacyOwners::new();
        for node in 0..LEGACY_OWNERS_MAX as u64 {
            owners.refused(node, 0);
        }
        owners.refused(u64::MAX, LEGACY_OWNER_TTL_MS * 2);
        assert_eq!(owners.len(), 1);
    }
}
