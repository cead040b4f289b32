//! The node's [`RemoteShipper`]: what a remote child's lane goes through
//! on its way to another cluster. It finds the link's remote in the
//! metastore, opens its sealed password (once per credential version),
//! keeps one `narad_remotes` client and shipper per remote (built again
//! when the remote changes), and ships each lane on a small runtime of its
//! own so TLS and encoding do not run on the fan-out thread.
//!
//! Failures before anything is sent are link states too: a remote deleted
//! under its links is `remote_missing`, a node without the cluster secret
//! `node_insecure`, a password that does not open `credential_unreadable`,
//! a URL this node's `remotes.allowed_ports` or `remotes.allowed_hosts`
//! refuses, or that the client refuses, `destination_refused`, a CA the
//! client refuses `tls_failed`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use narad_clock::Clock;
use narad_meta::{Compression, Remote, RemoteId};
use narad_remotes::check;
use narad_remotes::chunk::Record;
use narad_remotes::client::RemoteClient;
use narad_remotes::encode::LinkIdentity;
use narad_remotes::guard::AddressGuard;
use narad_remotes::ship::{self, Shipper};
use narad_remotes::state::LinkState;
use narad_remotes::url::UrlPolicy;
use parking_lot::Mutex;

use super::remote::{RemoteShipper, ShipOutcome, Shipment, Shipping};
use crate::credentials::{ClientFailure, RemoteCredentials, client_of};
use crate::http::remotes::settings::checked_url;
use crate::metadata::MetadataReplica;
use crate::metrics::{self, NodeMetrics};
use crate::remote_children::{
    Capabilities, Check, CheckOutcome, CheckReport, ProbeFuture, RemoteProbe,
};

/// Worker threads of the shipping runtime.
const SHIPPING_THREADS: usize = 2;

/// Which version of a remote a shipper was built for: a new id, revision
/// or credential means a new client.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    id: RemoteId,
    revision: u64,
    credential_version: u64,
}

#[derive(Debug)]
struct Built {
    stamp: Stamp,
    shipper: Arc<Shipper>,
    client: Arc<RemoteClient>,
    check_interval_ms: u64,
}

/// What a shipment goes through: the remote's shipper, its client (for the
/// periodic look at the target) and how often that look is due.
struct Route {
    shipper: Arc<Shipper>,
    client: Arc<RemoteClient>,
    check_interval_ms: u64,
}

/// A link as the periodic look knows it: its stub, attach epoch and the
/// target incarnation it was attached to (a resume that accepts a new
/// target changes it, and the look starts over).
type LinkKey = (Arc<str>, String, Option<String>);

/// The last look at a link's target: when, and the link state it found
/// that stops shipping until the next look.
#[derive(Clone, Debug)]
struct Look {
    at_ms: u64,
    stops: Option<LinkState>,
}

/// What the periodic look decides for a shipment.
#[derive(Clone, Debug, PartialEq, Eq)]
enum LookVerdict {
    /// Look at the target first.
    Look,
    /// The last look found the target unfit: fail with this state.
    Stop(LinkState),
    /// Ship.
    Ship,
}

/// When each link's target was last looked at (`check_interval_ms`, with
/// ±20% jitter so links do not look in step), and a gate per link that a
/// look holds, so the link's other lanes wait for what it finds.
#[derive(Debug, Default)]
struct Looks {
    last: Mutex<HashMap<LinkKey, Look>>,
    gates: Mutex<HashMap<LinkKey, Arc<tokio::sync::Mutex<()>>>>,
}

impl Looks {
    /// The gate of `link`.
    fn gate(&self, link: &LinkKey) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(self.gates.lock().entry(link.clone()).or_default())
    }

    /// The verdict for a shipment of `link` at `now_ms`, asked under the
    /// link's gate. A due look is noted at once, so the lanes of one slab
    /// look once.
    fn verdict(&self, link: LinkKey, interval_ms: u64, now_ms: u64) -> LookVerdict {
        let mut looks = self.last.lock();
        let due = match looks.get(&link) {
            None => true,
            Some(look) => {
                now_ms.saturating_sub(look.at_ms) >= jittered(interval_ms, &link, look.at_ms)
            }
        };
        if due {
            looks.insert(
                link,
                Look {
                    at_ms: now_ms,
                    stops: None,
                },
            );
            return LookVerdict::Look;
        }
        match looks.get(&link).and_then(|look| look.stops) {
            Some(state) => LookVerdict::Stop(state),
            None => LookVerdict::Ship,
        }
    }

    /// Notes what the look of `link` found.
    fn found(&self, link: &LinkKey, stops: Option<LinkState>) {
        if let Some(look) = self.last.lock().get_mut(link) {
            look.stops = stops;
        }
    }
}

/// `interval_ms` moved by up to 20% either way, the same for one link and
/// one look time.
fn jittered(interval_ms: u64, link: &LinkKey, at_ms: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (link, at_ms).hash(&mut hasher);
    let spread = interval_ms / 5;
    let offset = hasher.finish() % (2 * spread + 1);
    interval_ms - spread + offset
}

/// Whether a look's finding stops shipping: the target is not the one
/// attached, is gone, or refuses the credential. A look that got no
/// answer leaves shipping to find out for itself.
fn stops_shipping(state: LinkState) -> bool {
    matches!(
        state,
        LinkState::TargetReplaced
            | LinkState::TargetMissing
            | LinkState::AuthFailed
            | LinkState::Forbidden
    )
}

/// Which lane of which link a shipment is: a link's attach epoch, the
/// stub's name, the parent partition and the lane.
type LaneKey = (String, Arc<str>, u32, u32);

/// The highest parent offset each lane has sent, to tell a resend (after a
/// failure, the cursor sends a lane again from its first unstored record)
/// from records sent for the first time. One entry per lane of a link
/// this node shipped.
#[derive(Debug, Default)]
struct SentThrough(Mutex<HashMap<LaneKey, u64>>);

impl SentThrough {
    /// Notes that `offsets` (ascending) of `lane` are being sent; how many
    /// of them that lane sent before.
    fn note(&self, lane: LaneKey, offsets: impl DoubleEndedIterator<Item = u64> + Clone) -> u64 {
        let mut sent = self.0.lock();
        let before = sent.get(&lane).copied();
        let resent = before.map_or(0, |through| {
            offsets.clone().filter(|offset| *offset <= through).count() as u64
        });
        if let Some(last) = offsets.max() {
            let through = sent.entry(lane).or_insert(last);
            *through = (*through).max(last);
        }
        resent
    }
}

/// Ships remote children's lanes for one data node.
#[derive(Debug)]
pub struct NodeShipper {
    replica: Arc<MetadataReplica>,
    credentials: Arc<RemoteCredentials>,
    url_policy: UrlPolicy,
    guard: AddressGuard,
    clock: Arc<dyn Clock>,
    metrics: Arc<NodeMetrics>,
    runtime: Option<tokio::runtime::Runtime>,
    shippers: Mutex<HashMap<String, Built>>,
    sent_through: SentThrough,
    looks: Looks,
}

impl NodeShipper {
    /// A shipper for the node with these parts; `url_policy` is the
    /// node's `remotes.allowed_ports` and `remotes.allowed_hosts`, `guard`
    /// its outbound address guard (`remotes.allow_addresses`,
    /// `remotes.allow_loopback`).
    ///
    /// # Errors
    /// If the shipping runtime's threads cannot start.
    pub fn new(
        replica: Arc<MetadataReplica>,
        credentials: Arc<RemoteCredentials>,
        url_policy: UrlPolicy,
        guard: AddressGuard,
        clock: Arc<dyn Clock>,
        metrics: Arc<NodeMetrics>,
    ) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(SHIPPING_THREADS)
            .thread_name("narad-remote")
            .enable_all()
            .build()?;
        Ok(Self {
            replica,
            credentials,
            url_policy,
            guard,
            clock,
            metrics,
            runtime: Some(runtime),
            shippers: Mutex::new(HashMap::new()),
            sent_through: SentThrough::default(),
            looks: Looks::default(),
        })
    }

    /// The shipper of the link's remote, built anew when the remote
    /// changed; or the link state that stops it.
    fn shipper_for(&self, shipment: &Shipment) -> Result<Route, LinkState> {
        let view = self.replica.view();
        let remote = view
            .metastore
            .remote(&shipment.link.remote)
            .filter(|remote| remote.id == shipment.link.remote_id)
            .ok_or(LinkState::RemoteMissing)?;
        let stamp = Stamp {
            id: remote.id.clone(),
            revision: remote.revision,
            credential_version: remote.credential_version,
        };
        let mut shippers = self.shippers.lock();
        let check_interval_ms = remote.limits.check_interval_ms;
        if let Some(built) = shippers.get(&remote.name)
            && built.stamp == stamp
        {
            return Ok(Route {
                shipper: Arc::clone(&built.shipper),
                client: Arc::clone(&built.client),
                check_interval_ms: built.check_interval_ms,
            });
        }
        self.check_url(remote)?;
        let client = client_of(
            &view.metastore,
            &self.credentials,
            remote,
            self.guard.clone(),
            Arc::clone(&self.clock),
        )
        .map_err(|failure| {
            tracing::warn!(remote = %remote.name, step = failure.step, detail = %failure.detail, "a remote's client cannot be made on this node");
            failure.state
        })?;
        let client = Arc::new(client);
        let zstd = remote.limits.compression == Compression::Zstd;
        let shipper = Arc::new(Shipper::new(
            Arc::clone(&client),
            Arc::clone(&self.clock),
            zstd,
        ));
        if zstd {
            self.learn_capabilities(
                Arc::clone(&client),
                Arc::clone(&shipper),
                shipment.link.remote_topic.clone(),
            );
        }
        shippers.insert(
            remote.name.clone(),
            Built {
                stamp,
                shipper: Arc::clone(&shipper),
                client: Arc::clone(&client),
                check_interval_ms,
            },
        );
        Ok(Route {
            shipper,
            client,
            check_interval_ms,
        })
    }

    /// `destination_refused` when this node's `remotes.allowed_ports` or
    /// `remotes.allowed_hosts` refuse the remote's URL (counted), which
    /// another node with other settings may have accepted.
    fn check_url(&self, remote: &Remote) -> Result<(), LinkState> {
        checked_url(&self.url_policy, &self.metrics, &remote.name, &remote.url)
            .map(|_| ())
            .map_err(|error| {
                tracing::warn!(remote = %remote.name, %error, "this node's remote settings refuse a remote's URL");
                LinkState::DestinationRefused
            })
    }

    /// Asks the target once what it takes (zstd, chunk size, keys), in
    /// the background; until it answers the shipper assumes a current
    /// target without zstd.
    fn learn_capabilities(&self, client: Arc<RemoteClient>, shipper: Arc<Shipper>, topic: String) {
        let Some(runtime) = &self.runtime else { return };
        runtime.spawn(async move {
            let report = check::check(&client, &topic).await;
            if report.pass() {
                shipper.set_capabilities(report.capabilities);
            }
        });
    }

    /// The periodic look at a link's target before one of its shipments:
    /// waits while another lane of the link looks, looks when one is due,
    /// and returns the link state that stops shipping if the last look
    /// found one.
    async fn look_before_shipping(
        &self,
        link: &LinkKey,
        interval_ms: u64,
        client: &RemoteClient,
        shipment: &Shipment,
    ) -> Option<LinkState> {
        let labels = [
            ("parent", shipment.parent.to_string()),
            ("child", shipment.child.to_string()),
        ];
        // Counted at 0 too, so the series exists from the first shipment.
        self.metrics
            .count(metrics::FANOUT_REMOTE_CHECK_FAILURES_TOTAL, &labels, 0);
        let gate = self.looks.gate(link);
        let _looking = gate.lock().await;
        match self
            .looks
            .verdict(link.clone(), interval_ms, self.clock.now_ms())
        {
            LookVerdict::Stop(state) => return Some(state),
            LookVerdict::Ship => return None,
            LookVerdict::Look => {}
        }
        let remote = &shipment.link.remote;
        let expected = shipment.link.target_id.as_deref();
        let started_us = self.clock.now_us();
        let looked = check::verify_target(client, &shipment.link.remote_topic, expected).await;
        // The look is one small GET: its time, answered, stands for the
        // round trip to the remote.
        let answered = looked
            .as_ref()
            .err()
            .is_none_or(|fault| fault.status.is_some());
        if answered {
            let rtt_us = self.clock.now_us().saturating_sub(started_us);
            self.metrics.set(
                metrics::REMOTE_RTT_SECONDS,
                &[("remote", remote.clone())],
                rtt_us as f64 / 1_000_000.0,
            );
        }
        let stops = match looked {
            Ok(()) => None,
            Err(fault) => {
                self.metrics
                    .count(metrics::FANOUT_REMOTE_CHECK_FAILURES_TOTAL, &labels, 1);
                tracing::warn!(parent = %shipment.parent, child = %shipment.child, remote = %remote, state = fault.state.as_str(), detail = %fault.detail, "the periodic look at a remote child's target failed");
                stops_shipping(fault.state).then_some(fault.state)
            }
        };
        self.looks.found(link, stops);
        stops
    }

    fn record_exchanges(&self, remote: &str, stats: &ship::ShipStats) {
        let remote_label = || ("remote", remote.to_owned());
        // The address guard's refusals; a URL's port or host refused by
        // this node's settings counts in `check_url`.
        let refused = stats
            .exchanges
            .iter()
            .filter(|exchange| exchange.failure == Some(LinkState::DestinationRefused))
            .count();
        self.metrics.count(
            metrics::REMOTE_DESTINATION_REFUSED_TOTAL,
            &[remote_label(), ("reason", "address".to_owned())],
            refused as u64,
        );
        for exchange in &stats.exchanges {
            let code = exchange
                .status
                .map_or_else(|| "none".to_owned(), |status| status.to_string());
            self.metrics.count(
                metrics::REMOTE_REQUESTS_TOTAL,
                &[remote_label(), ("code", code)],
                1,
            );
            self.metrics.observe(
                metrics::REMOTE_REQUEST_SECONDS,
                &[remote_label()],
                Duration::from_micros(exchange.elapsed_us),
            );
            self.metrics.observe(
                metrics::REMOTE_INFLIGHT_WAIT_SECONDS,
                &[remote_label()],
                Duration::from_micros(exchange.waited_us),
            );
            if let Some(failure) = exchange.failure {
                self.metrics.count(
                    metrics::REMOTE_ERRORS_TOTAL,
                    &[remote_label(), ("class", failure.as_str().to_owned())],
                    1,
                );
            }
        }
        self.metrics.count(
            metrics::REMOTE_BODY_BYTES_TOTAL,
            &[remote_label()],
            stats.body_bytes,
        );
        self.metrics.count(
            metrics::REMOTE_WIRE_BYTES_TOTAL,
            &[remote_label()],
            stats.wire_bytes,
        );
    }

    /// Counts the shipment's records that its lane sent before.
    fn count_resent(&self, shipment: &Shipment) {
        let lane = (
            shipment.link_id().to_owned(),
            Arc::clone(&shipment.child),
            shipment.parent_partition,
            shipment.lane,
        );
        let resent = self
            .sent_through
            .note(lane, shipment.records.iter().map(|record| record.offset));
        self.metrics.count(
            metrics::REMOTE_RESENT_RECORDS_TOTAL,
            &[("remote", shipment.link.remote.clone())],
            resent,
        );
    }

    fn record_shipper(&self, remote: &str, shipper: &Shipper) {
        let labels = [("remote", remote.to_owned())];
        self.metrics.set(
            metrics::REMOTE_CHUNK_BYTES_LIMIT,
            &labels,
            shipper.chunk_bytes_limit() as f64,
        );
        self.metrics.set(
            metrics::REMOTE_GATE_BACKOFF_SECONDS,
            &labels,
            shipper.gate_backoff().as_secs_f64(),
        );
    }
}

impl Drop for NodeShipper {
    fn drop(&mut self) {
        // Dropped from wherever the node is: possibly inside a runtime,
        // where a blocking shutdown would panic.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn failed(state: LinkState) -> Shipping {
    Box::pin(async move { ShipOutcome::Failed { shipped: 0, state } })
}

impl RemoteShipper for SharedShipper {
    fn ship(&self, shipment: Shipment) -> Shipping {
        let node = &self.0;
        let Route {
            shipper,
            client,
            check_interval_ms,
        } = match node.shipper_for(&shipment) {
            Ok(route) => route,
            Err(state) => return failed(state),
        };
        let link_key: LinkKey = (
            Arc::clone(&shipment.child),
            shipment.link_id().to_owned(),
            shipment.link.target_id.clone(),
        );
        let incarnation = shipment.parent_incarnation.as_deref().unwrap_or("none");
        let identity = match LinkIdentity::new(shipment.link_id(), incarnation) {
            Ok(identity) => identity,
            Err(error) => {
                tracing::error!(%error, "a remote child's link identity is malformed");
                return failed(LinkState::Unknown);
            }
        };
        let Some(runtime) = &node.runtime else {
            return failed(LinkState::Unavailable);
        };
        let records: Vec<Record> = shipment
            .records
            .iter()
            .map(|record| Record {
                partition: shipment.parent_partition,
                offset: record.offset,
                key: (!record.key.is_empty()).then(|| record.key.clone()),
                payload: record.payload.clone(),
                committed_at_unix_ms: record.committed_at_ms,
            })
            .collect();
        node.count_resent(&shipment);
        let node = Arc::clone(node);
        let task = runtime.spawn(async move {
            let remote = shipment.link.remote.clone();
            let stops = node
                .look_before_shipping(&link_key, check_interval_ms, &client, &shipment)
                .await;
            if let Some(state) = stops {
                return ShipOutcome::Failed { shipped: 0, state };
            }
            let outcome = shipper
                .ship(&identity, &shipment.link.remote_topic, &records, 1)
                .await;
            node.record_shipper(&remote, &shipper);
            match outcome {
                ship::ShipOutcome::Shipped(stats) => {
                    node.record_exchanges(&remote, &stats);
                    ShipOutcome::Shipped
                }
                ship::ShipOutcome::Failed { failure, stats, .. } => {
                    node.record_exchanges(&remote, &stats);
                    ShipOutcome::Failed {
                        shipped: stats.records,
                        state: failure.state,
                    }
                }
                ship::ShipOutcome::Held { state, .. } => ShipOutcome::Failed { shipped: 0, state },
                _ => ShipOutcome::Failed {
                    shipped: 0,
                    state: LinkState::Unknown,
                },
            }
        });
        Box::pin(async move {
            task.await.unwrap_or(ShipOutcome::Failed {
                shipped: 0,
                state: LinkState::Unknown,
            })
        })
    }
}

impl RemoteProbe for NodeShipper {
    /// The target's checks (reach, auth, topic, batch produce, keys,
    /// zstd) through the same client shipping would use.
    fn check<'a>(&'a self, remote: &'a Remote, topic: &'a str) -> ProbeFuture<'a> {
        Box::pin(async move {
            let view = self.replica.view();
            let client = checked_url(&self.url_policy, &self.metrics, &remote.name, &remote.url)
                .map_err(|error| ClientFailure {
                    step: "url",
                    state: LinkState::DestinationRefused,
                    detail: error.to_string(),
                })
                .and_then(|_| {
                    client_of(
                        &view.metastore,
                        &self.credentials,
                        remote,
                        self.guard.clone(),
                        Arc::clone(&self.clock),
                    )
                });
            let client = match client {
                Ok(client) => client,
                Err(failure) => {
                    return CheckReport {
                        checks: vec![Check {
                            name: failure.step.to_owned(),
                            outcome: CheckOutcome::Failed,
                            state: Some(failure.state.as_str().to_owned()),
                            detail: failure.detail,
                        }],
                        target_id: None,
                        capabilities: Capabilities {
                            max_messages: 0,
                            zstd: false,
                        },
                    };
                }
            };
            let report = check::check(&client, topic).await;
            CheckReport {
                checks: report
                    .checks
                    .iter()
                    .map(|check| Check {
                        name: check.name.to_owned(),
                        outcome: if check.pass {
                            CheckOutcome::Passed
                        } else {
                            CheckOutcome::Failed
                        },
                        state: check.class.map(|state| state.as_str().to_owned()),
                        detail: check.detail.clone(),
                    })
                    .collect(),
                target_id: report.target_id.clone(),
                capabilities: Capabilities {
                    max_messages: u32::try_from(report.capabilities.max_messages)
                        .unwrap_or(u32::MAX),
                    zstd: report.capabilities.zstd,
                },
            }
        })
    }
}

/// The node's shipper as the fan-out plane's [`RemoteShipper`] and the API's
/// [`RemoteProbe`], one object behind both.
#[derive(Debug, Clone)]
pub struct SharedShipper(pub Arc<NodeShipper>);

impl RemoteProbe for SharedShipper {
    fn check<'a>(&'a self, remote: &'a Remote, topic: &'a str) -> ProbeFuture<'a> {
        self.0.check(remote, topic)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn lane(lane: u32) -> LaneKey {
        ("epoch-1".to_owned(), Arc::from("dr-orders"), 0, lane)
    }

    fn link(target: &str) -> LinkKey {
        (
            Arc::from("orders-dr"),
            "epoch-1".to_owned(),
            Some(target.to_owned()),
        )
    }

    #[test]
    fn a_target_is_looked_at_once_per_interval_and_a_replaced_one_stops_shipping_until_then() {
        let looks = Looks::default();
        let interval = 60_000;
        assert_eq!(looks.verdict(link("a"), interval, 0), LookVerdict::Look);
        // The other lanes of the slab ship without looking again.
        assert_eq!(looks.verdict(link("a"), interval, 10), LookVerdict::Ship);
        looks.found(&link("a"), Some(LinkState::TargetReplaced));
        assert_eq!(
            looks.verdict(link("a"), interval, 1_000),
            LookVerdict::Stop(LinkState::TargetReplaced)
        );
        // Past the interval and its jitter the target is looked at again.
        assert_eq!(
            looks.verdict(link("a"), interval, 72_000),
            LookVerdict::Look
        );
        looks.found(&link("a"), None);
        assert_eq!(
            looks.verdict(link("a"), interval, 72_001),
            LookVerdict::Ship
        );
        // A resume that accepts another target is a new link to look at.
        assert_eq!(
            looks.verdict(link("b"), interval, 72_002),
            LookVerdict::Look
        );
    }

    #[test]
    fn the_jitter_keeps_a_look_within_a_fifth_of_its_interval() {
        let spread: BTreeSet<u64> = (0..200)
            .map(|at| jittered(60_000, &link("a"), at))
            .collect();
        assert!(spread.iter().all(|ms| (48_000..=72_000).contains(ms)));
        assert!(spread.len() > 100, "looks of one link do not fall in step");
    }

    #[test]
    fn a_lane_sent_again_from_its_first_unstored_record_counts_those_records_as_resent() {
        let sent = SentThrough::default();
        assert_eq!(sent.note(lane(0), [1, 3, 5].into_iter()), 0);
        // The target stored 1 and failed on 3: the cursor sends 3 and 5
        // again, with 7 that is new.
        assert_eq!(sent.note(lane(0), [3, 5, 7].into_iter()), 2);
        assert_eq!(sent.note(lane(0), [9].into_iter()), 0);
        // Another lane, or the same lane of another link, is its own.
        assert_eq!(sent.note(lane(1), [2, 4].into_iter()), 0);
        let relinked = ("epoch-2".to_owned(), Arc::from("dr-orders"), 0, 0);
        assert_eq!(sent.note(relinked, [1, 3].into_iter()), 0);
    }
}
