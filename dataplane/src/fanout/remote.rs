//! Remote children (spec §4, v3.2): a cursor whose child is a topic on
//! another cluster ships each lane of a slab through a [`RemoteShipper`]
//! instead of committing buckets to child partitions. The cursor's rules
//! stay: it advances only once every lane of the slab is stored by the
//! target, and a failure holds it where it is.
//!
//! The shipper (the outbound client, sealed credentials, the gate) is
//! built by the process that runs the node and plugged in after the node
//! starts ([`RemotePlane::attach`]); until then, and on a node built
//! without one, every shipment fails as `unavailable`.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use narad_meta::{AttachEpoch, RemoteLink};
use narad_remotes::state::LinkState;
use parking_lot::Mutex;

use super::machine::ParentRecord;

/// One lane's records of one slab, for the target.
#[derive(Clone, Debug)]
pub struct Shipment {
    /// The stub topic (the remote child's local name).
    pub child: Arc<str>,
    /// The parent topic.
    pub parent: Arc<str>,
    /// The parent partition the records come from.
    pub parent_partition: u32,
    /// The link as the metastore holds it: remote, remote topic, lanes.
    pub link: RemoteLink,
    /// The lane (0-based).
    pub lane: u32,
    /// The records, in parent offset order.
    pub records: Vec<ParentRecord>,
    /// The link's attach epoch: with the parent's incarnation, a record's
    /// partition and offset, it names the record for good, so a resend
    /// carries the same idempotency key and the target stores it once.
    pub attach_epoch: AttachEpoch,
    /// The parent's incarnation id (`None` for a topic from before ids).
    pub parent_incarnation: Option<Arc<str>>,
}

impl Shipment {
    /// The link's id as the target's idempotency keys name it: the attach
    /// epoch, so a re-attach starts a new key space.
    pub fn link_id(&self) -> &str {
        self.attach_epoch.as_str()
    }
}

/// How a shipment ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShipOutcome {
    /// The target answered `202` for every record.
    Shipped,
    /// It did not. `shipped` records at the head were stored; `state` is
    /// the link state of the failure (`unavailable`, `auth_failed`,
    /// `rejected_record`, …).
    Failed {
        /// Records at the head that the target acknowledged.
        shipped: usize,
        /// The link state the failure puts the cursor in.
        state: LinkState,
    },
}

/// The future of a shipment.
pub type Shipping = Pin<Box<dyn Future<Output = ShipOutcome> + Send>>;

/// Ships lanes to remote clusters.
pub trait RemoteShipper: Send + Sync + fmt::Debug {
    /// Ships `shipment`; the future ends once the target acknowledged every
    /// record or the shipment failed. Never panics on the target's answers.
    fn ship(&self, shipment: Shipment) -> Shipping;
}

/// Key and payload bytes of parent records held in memory for each remote
/// on this node: lanes being shipped, and lanes that failed and wait to be
/// sent again.
#[derive(Debug, Default)]
struct HeldBytes(Mutex<HashMap<String, u64>>);

impl HeldBytes {
    /// Replaces `before` of `remote`'s bytes with `after`; the node's
    /// total.
    fn change(&self, remote: &str, before: u64, after: u64) -> u64 {
        let mut held = self.0.lock();
        let bytes = held.entry(remote.to_owned()).or_insert(0);
        *bytes = bytes.saturating_sub(before) + after;
        held.values().sum()
    }

    fn of(&self, remote: &str) -> u64 {
        self.0.lock().get(remote).copied().unwrap_or(0)
    }
}

/// Gives a shipment's bytes back when it ends, or is dropped unfinished.
struct Holding {
    held: Arc<HeldBytes>,
    remote: String,
    bytes: u64,
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.held.change(&self.remote, self.bytes, 0);
    }
}

/// The key and payload bytes of `records`.
pub fn record_bytes(records: &[ParentRecord]) -> u64 {
    records
        .iter()
        .map(|record| (record.key.len() + record.payload.len()) as u64)
        .sum()
}

/// Where the node's shipper is plugged in, and what the node's remote
/// children hold in memory against `remotes.max_held_bytes`.
#[derive(Debug)]
pub struct RemotePlane {
    shipper: OnceLock<Arc<dyn RemoteShipper>>,
    held: Arc<HeldBytes>,
    max_held_bytes: AtomicU64,
}

impl Default for RemotePlane {
    fn default() -> Self {
        Self {
            shipper: OnceLock::new(),
            held: Arc::default(),
            max_held_bytes: AtomicU64::new(u64::MAX),
        }
    }
}

impl RemotePlane {
    /// A plane with no shipper yet, and no limit on held bytes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Plugs in the shipper; a second call is ignored (returns false).
    pub fn attach(&self, shipper: Arc<dyn RemoteShipper>) -> bool {
        self.shipper.set(shipper).is_ok()
    }

    /// Sets `remotes.max_held_bytes`: past it, a lane that failed is not
    /// kept for its retry but read again from the parent's log.
    pub fn set_max_held_bytes(&self, bytes: u64) {
        self.max_held_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Ships through the plugged-in shipper, or fails as `unavailable`.
    /// The lane's bytes count as held until the shipment ends.
    pub fn ship(&self, shipment: Shipment) -> Shipping {
        let bytes = record_bytes(&shipment.records);
        self.held.change(&shipment.link.remote, 0, bytes);
        let holding = Holding {
            held: Arc::clone(&self.held),
            remote: shipment.link.remote.clone(),
            bytes,
        };
        let shipping = match self.shipper.get() {
            Some(shipper) => shipper.ship(shipment),
            None => Box::pin(async {
                ShipOutcome::Failed {
                    shipped: 0,
                    state: LinkState::Unavailable,
                }
            }),
        };
        Box::pin(async move {
            let outcome = shipping.await;
            drop(holding);
            outcome
        })
    }

    /// Records that a cursor of a link to `remote` now holds `after`
    /// bytes for a retry where it held `before`; whether it must let them
    /// go (the node holds more than `remotes.max_held_bytes`).
    pub fn hold_for_retry(&self, remote: &str, before: u64, after: u64) -> bool {
        let total = self.held.change(remote, before, after);
        after > 0 && total > self.max_held_bytes.load(Ordering::Relaxed)
    }

    /// Bytes held for `remote` now (`narad_remote_held_bytes`).
    pub fn held_bytes(&self, remote: &str) -> u64 {
        self.held.of(remote)
    }
}

/// What a remote child's cursor reports beside its position.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteReport {
    /// `running` while nothing fails, else the last failure's state.
    pub state: String,
    /// The offset of the first record the target would not take, while the
    /// state is `rejected_record` or `record_too_large` (what `skip` names).
    pub blocked_at: Option<u64>,
    /// When a lane was last stored in full (Unix ms).
    pub last_success_at_ms: Option<u64>,
    /// When the oldest record not yet shipped was committed to the parent
    /// (Unix ms), while a slab is being shipped.
    pub oldest_pending_ms: Option<u64>,
}

/// Milliseconds until a parent kept `retention_ms` deletes the oldest
/// record not yet shipped, committed at `oldest_pending_ms`, at `now_ms`:
/// the whole retention when nothing waits, `None` for a parent kept
/// forever (`retention_ms` 0).
pub fn retention_headroom_ms(
    oldest_pending_ms: Option<u64>,
    retention_ms: u64,
    now_ms: u64,
) -> Option<u64> {
    if retention_ms == 0 {
        return None;
    }
    Some(oldest_pending_ms.map_or(retention_ms, |at| {
        (at + retention_ms).saturating_sub(now_ms)
    }))
}

/// Whether `state` names one record the target refuses (which `skip` can
/// move past) rather than something about the target or the way there.
pub fn names_a_record(state: &str) -> bool {
    [LinkState::RejectedRecord, LinkState::RecordTooLarge]
        .iter()
        .any(|named| named.as_str() == state)
}

/// A cursor's running account of its shipments, updated as they end.
#[derive(Debug)]
pub(super) struct ShipTrack {
    report: Mutex<RemoteReport>,
}

impl ShipTrack {
    pub(super) fn new() -> Self {
        Self {
            report: Mutex::new(RemoteReport {
                state: LinkState::Running.as_str().to_owned(),
                ..RemoteReport::default()
            }),
        }
    }

    /// Records how a shipment of `records` ended at `now_ms`.
    pub(super) fn ended(&self, records: &[ParentRecord], outcome: &ShipOutcome, now_ms: u64) {
        let mut report = self.report.lock();
        match outcome {
            ShipOutcome::Shipped => {
                report.state = LinkState::Running.as_str().to_owned();
                report.blocked_at = None;
                report.last_success_at_ms = Some(now_ms);
            }
            ShipOutcome::Failed { shipped, state } => {
                report.state = state.as_str().to_owned();
                report.blocked_at = names_a_record(state.as_str())
                    .then(|| records.get(*shipped).map(|record| record.offset))
                    .flatten();
            }
        }
    }

    /// The report, with the cursor's oldest pending record.
    pub(super) fn report(&self, oldest_pending_ms: Option<u64>) -> RemoteReport {
        RemoteReport {
            oldest_pending_ms,
            ..self.report.lock().clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::retention_headroom_ms;

    const DAY_MS: u64 = 86_400_000;

    #[test]
    fn headroom_is_what_retention_leaves_of_the_oldest_unshipped_record() {
        // Committed 1 h ago, kept a day: 23 h left.
        let now = 10 * DAY_MS;
        assert_eq!(
            retention_headroom_ms(Some(now - 3_600_000), DAY_MS, now),
            Some(DAY_MS - 3_600_000)
        );
        // Past its retention: none left, never negative.
        assert_eq!(
            retention_headroom_ms(Some(now - 2 * DAY_MS), DAY_MS, now),
            Some(0)
        );
        // Nothing waits: the whole retention.
        assert_eq!(retention_headroom_ms(None, DAY_MS, now), Some(DAY_MS));
        // Kept forever: no figure.
        assert_eq!(retention_headroom_ms(Some(now), 0, now), None);
    }
}

#[cfg(test)]
mod plane_tests {
    use super::*;

    #[test]
    fn a_cursor_lets_its_lanes_go_only_while_the_node_holds_more_than_the_limit() {
        let plane = RemotePlane::new();
        plane.set_max_held_bytes(100);
        assert!(!plane.hold_for_retry("dr", 0, 60));
        assert_eq!(plane.held_bytes("dr"), 60);
        // Another cursor, to another remote: the limit is the node's.
        assert!(plane.hold_for_retry("backup", 0, 50));
        // The first cursor's retry is sent: it holds nothing now.
        assert!(!plane.hold_for_retry("dr", 60, 0));
        assert!(!plane.hold_for_retry("backup", 50, 50));
        assert_eq!(plane.held_bytes("dr"), 0);
        assert_eq!(plane.held_bytes("backup"), 50);
    }

    #[test]
    fn a_shipment_holds_its_bytes_until_it_ends() {
        let plane = RemotePlane::new();
        let shipment = Shipment {
            child: Arc::from("orders-dr"),
            parent: Arc::from("orders"),
            parent_partition: 0,
            link: narad_meta::RemoteLink {
                remote: "dr".into(),
                remote_id: narad_meta::RemoteId::from_bits(1),
                remote_topic: "orders".into(),
                target_id: None,
                lanes: 1,
                from: narad_meta::RemoteFrom::Attach,
                paused: None,
                skip: Default::default(),
                created_at_ms: 0,
            },
            lane: 0,
            records: vec![ParentRecord {
                offset: 0,
                key: bytes::Bytes::from_static(b"k"),
                payload: bytes::Bytes::from_static(b"payload"),
                committed_at_ms: 0,
            }],
            attach_epoch: AttachEpoch::from_bits(1),
            parent_incarnation: None,
        };
        let shipping = plane.ship(shipment);
        assert_eq!(plane.held_bytes("dr"), 8);
        // No shipper plugged in: it fails as unavailable, and lets go.
        let outcome = run_to_end(shipping);
        assert!(matches!(outcome, ShipOutcome::Failed { .. }));
        assert_eq!(plane.held_bytes("dr"), 0);
    }

    /// Runs a future that never waits.
    fn run_to_end(future: Shipping) -> ShipOutcome {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(future)
    }
}
