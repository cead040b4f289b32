//! The memory of owners that refused the trailing incarnation section: a
//! pure table, fed the time, so its tests need no clock.

use std::collections::HashMap;
use std::time::Duration;

use crate::topology::NodeId;

/// How long commits to an owner that refused incarnation ids go without
/// them (the seed's `produceLegacyOwnerTTL`): long enough that a rolling
/// upgrade costs one refused batch per old owner every 2 minutes, short
/// enough that an upgraded owner gets the ids back soon.
pub const LEGACY_OWNER_TTL: Duration = Duration::from_secs(120);

/// Owners remembered at most. A cluster is far smaller (the transport keeps
/// at most 4,096 peers); the bound only stops a bug from growing the table.
pub const LEGACY_OWNERS_MAX: usize = 4_096;

/// Owners that refused the incarnation section, each until its memory
/// lapses.
#[derive(Debug, Default)]
pub struct LegacyOwners {
    until: HashMap<NodeId, Duration>,
}

impl LegacyOwners {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether batches to `node` may carry incarnation ids at `now`.
    pub fn sends_ids(&self, node: NodeId, now: Duration) -> bool {
        self.until.get(&node).is_none_or(|until| now >= *until)
    }

    /// `node` refused the section at `now`: send it none for
    /// [`LEGACY_OWNER_TTL`].
    pub fn refused(&mut self, node: NodeId, now: Duration) {
        if self.until.len() >= LEGACY_OWNERS_MAX {
            self.until.retain(|_, until| now < *until);
        }
        if self.until.len() >= LEGACY_OWNERS_MAX && !self.until.contains_key(&node) {
            // Still full of live entries: forgetting one costs that owner
            // one more refused batch, nothing else.
            if let Some(oldest) = self
                .until
                .iter()
                .min_by_key(|(_, until)| **until)
                .map(|(node, _)| *node)
            {
                self.until.remove(&oldest);
            }
        }
        self.until.insert(node, now + LEGACY_OWNER_TTL);
        assert!(self.until.len() <= LEGACY_OWNERS_MAX);
    }

    /// Owners remembered (lapsed ones included until the table fills).
    pub fn len(&self) -> usize {
        self.until.len()
    }

    /// Whether no owner is remembered.
    pub fn is_empty(&self) -> bool {
        self.until.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_never_refused_gets_ids() {
        assert!(LegacyOwners::new().sends_ids(2, Duration::ZERO));
    }

    #[test]
    fn a_refusing_owner_gets_no_ids_for_two_minutes() {
        let mut owners = LegacyOwners::new();
        let at = Duration::from_secs(10);
        owners.refused(2, at);
        assert!(!owners.sends_ids(2, at));
        assert!(!owners.sends_ids(2, at + LEGACY_OWNER_TTL - Duration::from_millis(1)));
        assert!(owners.sends_ids(2, at + LEGACY_OWNER_TTL));
    }

    #[test]
    fn the_memory_is_per_owner() {
        let mut owners = LegacyOwners::new();
        owners.refused(2, Duration::ZERO);
        assert!(owners.sends_ids(3, Duration::ZERO));
    }

    #[test]
    fn a_full_table_of_live_entries_forgets_one_and_stays_bounded() {
        let mut owners = LegacyOwners::new();
        for node in 0..LEGACY_OWNERS_MAX as u64 {
            owners.refused(node, Duration::from_millis(node));
        }
        owners.refused(u64::MAX, Duration::from_secs(5));
        assert_eq!(owners.len(), LEGACY_OWNERS_MAX);
        assert!(!owners.sends_ids(u64::MAX, Duration::from_secs(5)));
        assert!(
            owners.sends_ids(0, Duration::from_secs(5)),
            "the oldest entry went"
        );
    }

    #[test]
    fn a_full_table_drops_lapsed_entries_first() {
        let mut owners = LegacyOwners::new();
        for node in 0..LEGACY_OWNERS_MAX as u64 {
            owners.refused(node, Duration::ZERO);
        }
        owners.refused(u64::MAX, LEGACY_OWNER_TTL * 2);
        assert_eq!(owners.len(), 1);
    }
}
