//! The positions running cursors report: what `GET
//! /v1/topics/{parent}/children` sums into lag and what the fan-out gauges
//! show. A cursor that stops removes its entry.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

/// One cursor: a (parent partition, child) pair.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CursorKey {
    /// The parent topic.
    pub parent: Arc<str>,
    /// The parent partition the cursor reads.
    pub partition: u32,
    /// The child it feeds.
    pub child: Arc<str>,
}

/// What a cursor last reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CursorReport {
    /// The first parent offset not yet delivered to the child (the offset
    /// its cursor file holds, or will once anchored).
    pub next_offset: u64,
    /// The parent partition's high watermark when the cursor reported.
    pub high_watermark: u64,
    /// For a delay child, how late the oldest due, undelivered record is
    /// (0 when none is due); `None` for a child without delay.
    pub due_lag_ms: Option<u64>,
    /// For a remote child, its link state and shipping times.
    pub remote: Option<super::remote::RemoteReport>,
}

impl CursorReport {
    /// Records committed to the parent partition and not yet delivered.
    pub fn lag_messages(&self) -> u64 {
        self.high_watermark.saturating_sub(self.next_offset)
    }
}

/// The node's running cursors and their last reports.
#[derive(Debug, Default)]
pub struct FanoutStatus {
    cursors: RwLock<BTreeMap<CursorKey, CursorReport>>,
}

impl FanoutStatus {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `report` for `key`.
    pub fn report(&self, key: CursorKey, report: CursorReport) {
        self.cursors.write().insert(key, report);
    }

    /// Forgets `key` (its cursor stopped).
    pub fn forget(&self, key: &CursorKey) {
        self.cursors.write().remove(key);
    }

    /// The last report of one cursor, if it runs here.
    pub fn cursor(&self, parent: &str, partition: u32, child: &str) -> Option<CursorReport> {
        let key = CursorKey {
            parent: parent.into(),
            partition,
            child: child.into(),
        };
        self.cursors.read().get(&key).cloned()
    }

    /// Every cursor of one parent partition, by child name.
    pub fn cursors_of(&self, parent: &str, partition: u32) -> Vec<(Arc<str>, CursorReport)> {
        self.cursors
            .read()
            .iter()
            .filter(|(key, _)| &*key.parent == parent && key.partition == partition)
            .map(|(key, report)| (Arc::clone(&key.child), report.clone()))
            .collect()
    }

    /// The commit time of the oldest record not yet shipped by any cursor
    /// of remote child `child` over `parent` that runs here (Unix ms).
    /// Reads only `parent`'s cursors.
    pub fn oldest_pending_ms(&self, parent: &str, child: &str) -> Option<u64> {
        let first = CursorKey {
            parent: parent.into(),
            partition: 0,
            child: "".into(),
        };
        self.cursors
            .read()
            .range(first..)
            .take_while(|(key, _)| &*key.parent == parent)
            .filter(|(key, _)| &*key.child == child)
            .filter_map(|(_, report)| report.remote.as_ref()?.oldest_pending_ms)
            .min()
    }

    /// Every cursor this node runs, in key order.
    pub fn all(&self) -> Vec<(CursorKey, CursorReport)> {
        self.cursors
            .read()
            .iter()
            .map(|(key, report)| (key.clone(), report.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(parent: &str, partition: u32, child: &str) -> CursorKey {
        CursorKey {
            parent: parent.into(),
            partition,
            child: child.into(),
        }
    }

    fn report(next_offset: u64, high_watermark: u64) -> CursorReport {
        CursorReport {
            next_offset,
            high_watermark,
            due_lag_ms: None,
            remote: None,
        }
    }

    #[test]
    fn lag_is_the_high_watermark_less_the_cursor_and_never_negative() {
        assert_eq!(report(40, 100).lag_messages(), 60);
        assert_eq!(report(100, 100).lag_messages(), 0);
        assert_eq!(report(120, 100).lag_messages(), 0);
    }

    #[test]
    fn a_forgotten_cursor_no_longer_reports() {
        let status = FanoutStatus::new();
        status.report(key("orders", 0, "audit"), report(1, 2));
        status.report(key("orders", 0, "billing"), report(3, 4));
        status.report(key("orders", 1, "audit"), report(5, 6));
        let children: Vec<String> = status
            .cursors_of("orders", 0)
            .into_iter()
            .map(|(child, _)| child.to_string())
            .collect();
        assert_eq!(children, ["audit", "billing"]);
        status.forget(&key("orders", 0, "audit"));
        assert_eq!(status.cursor("orders", 0, "audit"), None);
        assert_eq!(status.cursor("orders", 1, "audit"), Some(report(5, 6)));
        assert_eq!(status.all().len(), 2);
    }

    fn shipping(oldest_pending_ms: Option<u64>) -> CursorReport {
        CursorReport {
            remote: Some(super::super::remote::RemoteReport {
                state: "running".into(),
                oldest_pending_ms,
                ..Default::default()
            }),
            ..report(0, 0)
        }
    }

    #[test]
    fn a_links_oldest_pending_record_is_the_oldest_over_its_cursors_and_no_others() {
        let status = FanoutStatus::new();
        status.report(key("orders", 0, "dr"), shipping(Some(50)));
        status.report(key("orders", 2, "dr"), shipping(Some(30)));
        status.report(key("orders", 3, "dr"), shipping(None));
        status.report(key("orders", 1, "audit"), shipping(Some(10)));
        status.report(key("orders-x", 0, "dr"), shipping(Some(5)));
        status.report(key("order", 0, "dr"), shipping(Some(1)));
        assert_eq!(status.oldest_pending_ms("orders", "dr"), Some(30));
        assert_eq!(status.oldest_pending_ms("orders", "audit"), Some(10));
        assert_eq!(status.oldest_pending_ms("orders", "nobody"), None);
        status.report(key("refunds", 0, "dr"), report(7, 8));
        assert_eq!(status.oldest_pending_ms("refunds", "dr"), None);
    }
}
