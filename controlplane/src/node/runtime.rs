//! Starting and stopping a control node.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use narad_clock::Clock;
use narad_protocol::{ClusterAuth, ClusterSecret, Expired, Node, NodeConfig, Router};
use openraft::{BasicNode, ServerState, SnapshotPolicy};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::apply_stall::ApplyStall;
use super::config::{ClusterSecurity, ControlConfig};
use super::wire::Status;
use super::{controller_loop, http, join, propose};
use crate::network::{LeaderContact, RaftGate, RaftNetworkClients, RaftSlot, raft_routes};
use crate::raft::ControlRaft;
use crate::store::{self, ApplyFaults, DATABASE_FILE, MachineView};

/// Why a control node did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The data directory could not be created.
    #[error("cannot create the control directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The Raft database did not open.
    #[error(transparent)]
    Store(#[from] store::OpenError),
    /// The cluster socket did not bind.
    #[error("cluster transport on {addr}: {reason}")]
    Transport {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The HTTP listener did not bind.
    #[error("http.addr {addr}: {source}")]
    Http {
        /// The address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// openraft refused its configuration or failed to start.
    #[error("raft: {0}")]
    Raft(String),
}

/// A running control node.
#[derive(Debug)]
pub struct ControlNode {
    pub(super) shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

/// Why `/readyz` answers 503.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unready {
    /// The reason, as `/readyz`'s `error`.
    pub(super) error: String,
    /// The expired cluster TLS certificates, as `/readyz`'s `degraded`.
    pub(super) degraded: Vec<Expired>,
}

/// What the node's tasks share.
pub(super) struct Shared {
    pub(super) config: ControlConfig,
    /// The node's clock: every reading of time on this node.
    pub(super) clock: Arc<dyn Clock>,
    pub(super) raft: ControlRaft,
    pub(super) view: MachineView,
    pub(super) transport: Arc<Node>,
    pub(super) contact: Arc<LeaderContact>,
    pub(super) raft_gate: Arc<RaftGate>,
    pub(super) shutting_down: AtomicBool,
    pub(super) metrics: http::ControlMetrics,
    /// Faults the Raft log store handed openraft, by kind.
    pub(super) apply_faults: Arc<ApplyFaults>,
    /// The stall decision of `narad_metastore_apply_stalled`, observed at
    /// each render.
    pub(super) apply_stall: parking_lot::Mutex<ApplyStall>,
}

/// How long a proposal may wait for commit and apply, and how long a
/// follower waits for its own replica to catch up with the leader's answer
/// (the spec's bounded read-your-writes wait).
pub(super) const PROPOSE_TIMEOUT: Duration = Duration::from_secs(10);

fn cluster_auth(security: &ClusterSecurity) -> Result<ClusterAuth, StartError> {
    let secret = |bytes: Vec<u8>| {
        ClusterSecret::new(bytes)
            .map(ClusterAuth::Secret)
            .map_err(|e| StartError::Transport {
                addr: String::new(),
                reason: e.to_string(),
            })
    };
    match security {
        ClusterSecurity::Secret(bytes) => secret(bytes.clone()),
        ClusterSecurity::Generated => {
            let bytes: [u8; 32] = rand::random();
            secret(bytes.to_vec())
        }
        ClusterSecurity::Insecure => Ok(ClusterAuth::InsecureDevOnly),
    }
}

fn raft_config(config: &ControlConfig) -> Result<Arc<openraft::Config>, StartError> {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let raft = openraft::Config {
        cluster_name: "narad-control".into(),
        heartbeat_interval: millis(config.heartbeat_interval),
        election_timeout_min: millis(config.election_timeout),
        election_timeout_max: millis(config.election_timeout) * 2,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_threshold),
        max_in_snapshot_log_to_keep: config.trailing_logs,
        ..Default::default()
    };
    raft.validate()
        .map(Arc::new)
        .map_err(|e| StartError::Raft(e.to_string()))
}

impl ControlNode {
    /// Opens the store, binds the cluster transport and the HTTP listener,
    /// starts openraft, and bootstraps (an initial voter with an empty log)
    /// or joins (a node outside the peer list). Every reading of time on
    /// the node (member heartbeats, the controller's passes, leader
    /// contact, metric timings) comes from `clock`.
    ///
    /// # Errors
    /// [`StartError`] naming what could not be opened or bound.
    pub async fn start(config: ControlConfig, clock: Arc<dyn Clock>) -> Result<Self, StartError> {
        let dir = config.data_dir.join("control");
        std::fs::create_dir_all(&dir).map_err(|source| StartError::DataDir {
            path: dir.display().to_string(),
            source,
        })?;
        let (log_store, machine) = store::open(&dir.join(DATABASE_FILE))?;
        let metrics = http::ControlMetrics::new();
        let machine =
            machine.with_snapshot_durations(metrics.snapshot_durations(), Arc::clone(&clock));
        let view = machine.view();
        let apply_faults = log_store.faults();
        let slot: RaftSlot = Arc::new(OnceLock::new());
        let contact = Arc::new(LeaderContact::new(Arc::clone(&clock)));
        let shared_slot: Arc<OnceLock<Arc<Shared>>> = Arc::new(OnceLock::new());
        let raft_gate = Arc::new(RaftGate::default());
        let router = raft_routes(Router::new(), &slot, &raft_gate, &contact);
        let router = propose::routes(router, &shared_slot);
        let mut transport_config =
            NodeConfig::new(config.cluster_addr, cluster_auth(&config.cluster_security)?);
        transport_config.tls = config.cluster_tls.clone();
        let transport =
            Node::bind(transport_config, router).map_err(|e| StartError::Transport {
                addr: config.cluster_addr.to_string(),
                reason: e.to_string(),
            })?;
        let transport = Arc::new(transport);
        transport.observe_calls(metrics.call_observer(Arc::clone(&clock)));
        let http_listener = tokio::net::TcpListener::bind(config.http_addr)
            .await
            .map_err(|source| StartError::Http {
                addr: config.http_addr.to_string(),
                source,
            })?;
        // The bound address: a configured port 0 (`narad dev`) picks one.
        let http_addr = http_listener.local_addr().unwrap_or(config.http_addr);
        let network = RaftNetworkClients::new(transport.clone(), config.node_id);
        let raft = ControlRaft::new(
            config.node_id,
            raft_config(&config)?,
            network,
            log_store,
            machine,
        )
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
        let _ = slot.set(raft.clone());
        let shared = Arc::new(Shared {
            config,
            clock,
            raft,
            view,
            transport,
            contact,
            raft_gate,
            shutting_down: AtomicBool::new(false),
            metrics,
            apply_faults,
            apply_stall: parking_lot::Mutex::new(ApplyStall::default()),
        });
        let _ = shared_slot.set(shared.clone());
        bootstrap(&shared).await?;
        let mut tasks = vec![
            tokio::spawn(http::serve(shared.clone(), http_listener)),
            tokio::spawn(controller_loop::run(shared.clone())),
            tokio::spawn(http::fold_histogram_samples(shared.clone())),
        ];
        if !shared.config.is_initial_member() {
            tasks.push(tokio::spawn(join::run(shared.clone())));
        }
        info!(
            node_id = shared.config.node_id,
            cluster_addr = %shared.transport.local_addr(),
            %http_addr,
            mutual_tls = shared.config.cluster_tls.is_some(),
            "control node started"
        );
        for expired in shared.tls_expired() {
            warn!(degraded = expired.code(), "{}", expired.describe());
        }
        Ok(Self { shared, tasks })
    }

    /// The Prometheus text of this node's series, as its `/metrics`
    /// serves them; the `process_*` series only with `process` (`narad dev`
    /// appends this to its data node's `/metrics`, which has them already).
    pub fn render_metrics(&self, process: bool) -> String {
        http::render(&self.shared, process)
    }

    /// [`Self::render_metrics`] as a function that outlives this handle's
    /// borrow, for a server that merges it into another `/metrics`.
    pub fn metrics_renderer(&self, process: bool) -> Arc<dyn Fn() -> String + Send + Sync> {
        let shared = Arc::clone(&self.shared);
        Arc::new(move || http::render(&shared, process))
    }

    /// This node's Raft status.
    pub fn status(&self) -> Status {
        self.shared.status()
    }

    /// The node's replica of the metastore.
    pub fn view(&self) -> &MachineView {
        &self.shared.view
    }

    /// Proposes `command` (see [`ProposeError`]).
    ///
    /// # Errors
    /// See [`ProposeError`].
    pub async fn propose(
        &self,
        command: narad_meta::Command,
    ) -> Result<crate::raft::Applied, propose::ProposeError> {
        propose::propose(&self.shared, command, false).await
    }

    /// Stops serving: `/healthz` and `/readyz` turn 503, Raft shuts down.
    pub async fn shutdown(self) {
        self.shared.shutting_down.store(true, Ordering::Relaxed);
        self.shared.raft_gate.close().await;
        if let Err(error) = self.shared.raft.shutdown().await {
            warn!(%error, "raft did not shut down cleanly");
        }
        for task in &self.tasks {
            task.abort();
        }
        // The transport closes when its last holder (this node and the
        // stopped Raft's network clients) is dropped.
    }
}

/// An initial voter whose log is empty proposes the peer list as the first
/// membership. Every initial voter does this; they propose the same list,
/// so whichever wins an election, the configuration is the same.
async fn bootstrap(shared: &Shared) -> Result<(), StartError> {
    if !shared.config.is_initial_member() {
        return Ok(());
    }
    let initialized = shared
        .raft
        .is_initialized()
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    if initialized {
        return Ok(());
    }
    let members: BTreeMap<_, _> = shared
        .config
        .peers
        .iter()
        .map(|peer| (peer.id, BasicNode::new(peer.addr.clone())))
        .collect();
    info!(voters = ?members.keys().collect::<Vec<_>>(), "bootstrapping the initial voters");
    if let Err(error) = shared.raft.initialize(members).await {
        // Another voter's membership may have arrived first; that is the
        // same list.
        info!(%error, "bootstrap not needed");
    }
    Ok(())
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("node_id", &self.config.node_id)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(super) fn status(&self) -> Status {
        let metrics = self.raft.metrics().borrow().clone();
        let state = match metrics.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        let membership = metrics.membership_config.membership();
        let applied_index = metrics.last_applied.map_or(0, |log_id| log_id.index);
        let leader_commit_index = if metrics.state == ServerState::Leader {
            applied_index
        } else {
            self.contact.commit_index()
        };
        Status {
            node_id: metrics.id,
            state: state.into(),
            term: metrics.current_term,
            leader: metrics.current_leader,
            last_log_index: metrics.last_log_index.unwrap_or(0),
            applied_index,
            leader_commit_index,
            snapshot_index: metrics.snapshot.map_or(0, |log_id| log_id.index),
            purged_index: metrics.purged.map_or(0, |log_id| log_id.index),
            voters: membership.voter_ids().collect(),
            learners: membership.learner_ids().collect(),
            command_version: Some(narad_meta::codec::COMMAND_VERSION),
        }
    }

    /// The `/readyz` verdict: `Ok`, or why not. An expired cluster TLS
    /// certificate keeps the node unready (its peers refuse it), and is
    /// listed under `degraded` whatever the reason given.
    pub(super) fn readiness(&self) -> Result<(), Unready> {
        let degraded = self.tls_expired();
        match self.cluster_readiness() {
            Err(error) => Err(Unready { error, degraded }),
            Ok(()) if degraded.is_empty() => Ok(()),
            Ok(()) => {
                let error = degraded
                    .iter()
                    .map(|expired| expired.describe())
                    .collect::<Vec<_>>()
                    .join("; ");
                Err(Unready { error, degraded })
            }
        }
    }

    /// The cluster TLS certificates past their `notAfter` now, on this
    /// node's wall clock; empty without cluster TLS.
    pub(super) fn tls_expired(&self) -> Vec<Expired> {
        let Some(tls) = &self.config.cluster_tls else {
            return Vec::new();
        };
        let now_s = i64::try_from(self.clock.unix_ms() / 1_000).unwrap_or(i64::MAX);
        tls.expiry().expired(now_s)
    }

    /// Whether the node takes part in the cluster: Raft leader in view and
    /// heard from, log applied; the reason if not.
    fn cluster_readiness(&self) -> Result<(), String> {
        /// The spec's "heard from within 5 s".
        const LEADER_CONTACT_MAX: Duration = Duration::from_secs(5);
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err("shutting down".into());
        }
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.state == ServerState::Leader {
            return match metrics.millis_since_quorum_ack {
                Some(ms) if Duration::from_millis(ms) < LEADER_CONTACT_MAX => Ok(()),
                _ => Err("leader without a quorum's acknowledgement within 5 s".into()),
            };
        }
        if metrics.current_leader.is_none() {
            return Err("no raft leader in view".into());
        }
        match self.contact.since_last() {
            Some(since) if since < LEADER_CONTACT_MAX => {}
            _ => return Err("leader not heard from within 5 s".into()),
        }
        let applied = metrics.last_applied.map_or(0, |log_id| log_id.index);
        let commit = self.contact.commit_index();
        if applied < commit {
            return Err(format!(
                "catching up: applied {applied} of committed {commit}"
            ));
        }
        Ok(())
    }
}
