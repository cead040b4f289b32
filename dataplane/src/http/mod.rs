//! The client HTTP API on axum: produce and batch produce, consume, replay
//! and ack, topics and users, `/healthz`, `/readyz`, `/metrics` and the
//! OpenAPI document at `/v1/openapi.json` ([`openapi`]), with the
//! status codes, error bodies and texts of the spec (§1) and the wire
//! contract (§1–5, §7).
//!
//! Every `/v1` route authenticates first (security on), then applies the
//! cross-site guard to state-changing methods, then checks the grant.

pub mod ack;
pub mod auth;
pub mod body;
pub mod children;
mod cluster;
pub mod consume;
pub mod error;
pub mod go_duration;
mod health;
pub mod openapi;
mod produce;
pub mod produce_cap;
mod query;
mod remote_children;
mod remote_resume;
pub mod remotes;
pub mod topics;
pub mod users;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ::metrics::Gauge;
use axum::Router;
use axum::body::HttpBody;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use narad_clock::Clock;
use narad_wal::Wal;

use crate::admin::Admin;
use crate::consume::service::ConsumeService;
use crate::consume_front::ConsumeFront;
use crate::credentials::RemoteCredentials;
use crate::dispatch::DispatchStatus;
use crate::fanout::FanoutStatus;
use crate::forward::Forwarder;
use crate::http::auth::Authenticator;
use crate::http::body::BodyBudget;
use crate::http::error::ApiError;
use crate::http::produce_cap::ProduceCap;
use crate::ingress::Acceptor;
use crate::metadata::{GrantAction, MetadataReplica, User};
use crate::metrics::{self, NodeMetrics};
use crate::partitions::LocalLogs;
use crate::remote_children::{NoRemoteProbe, RemoteChildLimits, RemoteProbe};
use crate::status::StatusSources;

/// How the API behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiConfig {
    /// Basic auth and grants on every `/v1` route (the default).
    pub security: bool,
    /// Serve `/metrics` without credentials even with security on.
    pub metrics_unauthenticated: bool,
    /// bcrypt cost of password hashes this node makes.
    pub bcrypt_cost: u32,
    /// Produces in flight per identity (user, or "anonymous" with security
    /// off); 0 turns the cap off (the default).
    pub produce_in_flight_per_identity: usize,
    /// The longest consume `wait` (`http.max_consume_wait`); longer waits
    /// are clamped.
    pub max_consume_wait: Duration,
    /// Consumes in flight per identity (user, or client address with
    /// security off), a batch counting as its `max`; 0 turns the cap off.
    pub consume_in_flight_per_identity: usize,
    /// One `info` line a request on the [`ACCESS_LOG_TARGET`] target
    /// (`http.access_log`); off by default.
    pub access_log: bool,
    /// The `remotes.*` settings.
    pub remotes: remotes::RemotesConfig,
}

/// bcrypt cost of new password hashes: the common default, tens of
/// milliseconds per check in release builds.
pub const BCRYPT_COST_DEFAULT: u32 = 10;

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            security: true,
            metrics_unauthenticated: false,
            bcrypt_cost: BCRYPT_COST_DEFAULT,
            produce_in_flight_per_identity: 0,
            max_consume_wait: consume::CONSUME_WAIT_MAX_DEFAULT,
            consume_in_flight_per_identity: consume::CONSUME_IN_FLIGHT_PER_IDENTITY_DEFAULT,
            access_log: false,
            remotes: remotes::RemotesConfig::default(),
        }
    }
}

/// Liveness and readiness flags of the node.
#[derive(Debug, Default)]
pub struct Health {
    /// Startup work is done (the dispatcher runs).
    pub started: AtomicBool,
    /// Graceful shutdown began: `/healthz` answers `503`.
    pub shutting_down: AtomicBool,
}

/// What the handlers share.
#[derive(Debug)]
pub struct ApiState {
    /// Behaviour switches.
    pub config: ApiConfig,
    /// The accept stage.
    pub acceptor: Arc<Acceptor>,
    /// The local metadata replica.
    pub replica: Arc<MetadataReplica>,
    /// Basic auth.
    pub auth: Authenticator,
    /// The node's metrics.
    pub metrics: Arc<NodeMetrics>,
    /// Liveness and readiness.
    pub health: Arc<Health>,
    /// What the dispatcher reports: reroutes and restarts, for their
    /// counters.
    pub dispatch: Arc<DispatchStatus>,
    /// Budget of large batch bodies being read.
    pub body_budget: BodyBudget,
    /// Topic changes, forwarded to the control plane.
    pub admin: Arc<dyn Admin>,
    /// Produces in flight per identity.
    pub produce_cap: ProduceCap,
    /// This node's partition logs, for partition statistics.
    pub logs: Option<Arc<LocalLogs>>,
    /// The consume path; without it consume and ack answer `503`.
    pub consume: Option<Arc<ConsumeService>>,
    /// Consumes in flight per identity. The produce cap's counting serves
    /// both; only the refusal text differs.
    pub consume_cap: ProduceCap,
    /// Consume, replay, settle and statistics for partitions another node
    /// owns; unset, those answer `503` (owner unavailable). Set once, after
    /// the node's transport is bound.
    pub forwarder: OnceLock<Arc<Forwarder>>,
    /// Positions of the fan-out cursors this node runs, for the children
    /// listing's lag.
    pub fanout: Arc<FanoutStatus>,
    /// What the node status is read from (this node's, and other nodes'
    /// over node RPC); the produce handlers count in-flight produces there.
    pub status: Arc<StatusSources>,
    /// Checks a remote child's target on attach and resume, once the
    /// process plugs in its outbound client; until then
    /// [`ApiState::remote_probe`] is [`NoRemoteProbe`] (every check
    /// skipped).
    pub remote_probe: OnceLock<Arc<dyn RemoteProbe>>,
    /// The node's rate limits of remote-child changes and checks.
    pub remote_limits: RemoteChildLimits,
    /// Sealing and opening remote credentials; without a secret it seals
    /// nothing.
    pub credentials: Arc<RemoteCredentials>,
    /// The remote write rate of this node.
    pub remote_writes: parking_lot::Mutex<remotes::write_rate::WriteRate>,
}

impl ApiState {
    /// The node's clock (the accept stage's, which stamps records).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        self.acceptor.clock()
    }

    /// State for a node.
    pub fn new(
        config: ApiConfig,
        acceptor: Arc<Acceptor>,
        replica: Arc<MetadataReplica>,
        metrics: Arc<NodeMetrics>,
        health: Arc<Health>,
        checkpoint_stored: Arc<AtomicU64>,
        admin: Arc<dyn Admin>,
    ) -> Self {
        // Counters of rare events (body budget and schema rejections, 5xx
        // answers) start at 0 with their handles, so a rate or an increase
        // over them is defined before the first event.
        metrics.http();
        let status = Arc::new(StatusSources::new(
            Arc::clone(&replica),
            Arc::clone(acceptor.wal()),
            checkpoint_stored,
        ));
        Self {
            produce_cap: ProduceCap::new(config.produce_in_flight_per_identity),
            consume_cap: ProduceCap::new(config.consume_in_flight_per_identity),
            admin,
            logs: None,
            consume: None,
            forwarder: OnceLock::new(),
            fanout: Arc::new(FanoutStatus::new()),
            config,
            auth: Authenticator::new(Arc::clone(&replica), Arc::clone(acceptor.clock())),
            acceptor,
            replica,
            metrics,
            health,
            status,
            remote_probe: OnceLock::new(),
            remote_limits: RemoteChildLimits::new(),
            dispatch: Default::default(),
            body_budget: BodyBudget::default(),
            credentials: Arc::new(RemoteCredentials::default()),
            remote_writes: Default::default(),
        }
    }

    fn wal(&self) -> &Wal {
        self.acceptor.wal()
    }

    /// The probe of remote children's targets: the plugged-in one, else
    /// [`NoRemoteProbe`].
    pub fn remote_probe(&self) -> &dyn RemoteProbe {
        match self.remote_probe.get() {
            Some(probe) => &**probe,
            None => &NoRemoteProbe,
        }
    }

    /// The consume service.
    ///
    /// # Errors
    /// `503` on a node built without one.
    fn consume_service(&self) -> Result<&ConsumeService, ApiError> {
        self.consume.as_deref().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "consume is not available on this node",
            )
        })
    }

    /// The consume front over the consume service and, once bound, the
    /// forwarder.
    ///
    /// # Errors
    /// `503` on a node built without a consume service.
    fn consume_front(&self) -> Result<ConsumeFront<'_>, ApiError> {
        let service = self.consume_service()?;
        Ok(ConsumeFront::new(
            service,
            self.forwarder.get(),
            &self.metrics,
        ))
    }

    /// Refreshes the gauges that are read rather than counted.
    fn refresh_gauges(&self) {
        let wal = self.wal();
        self.metrics.set(
            metrics::INGRESS_WAL_FAILED,
            &[],
            if wal.is_failed() { 1.0 } else { 0.0 },
        );
        self.metrics.set(
            metrics::INGRESS_DISPATCH_BACKLOG_RECORDS,
            &[],
            self.status.dispatch_backlog() as f64,
        );
        self.metrics.count_absolute(
            metrics::DISPATCH_REROUTES_TOTAL,
            &[],
            self.dispatch.reroutes.load(Ordering::Relaxed),
        );
        self.metrics.count_absolute(
            metrics::DISPATCH_REROUTED_RECORDS_TOTAL,
            &[],
            self.dispatch.rerouted_records.load(Ordering::Relaxed),
        );
        self.metrics.count_absolute(
            metrics::DISPATCH_RESTARTS_TOTAL,
            &[],
            self.dispatch.restarts.load(Ordering::Relaxed),
        );
        self.metrics.set(
            metrics::DISPATCH_LOOKAHEAD_EXHAUSTED,
            &[],
            if self.dispatch.lookahead_exhausted.load(Ordering::Relaxed) {
                1.0
            } else {
                0.0
            },
        );
        self.metrics.set(
            metrics::DISPATCH_FAILING_DESTINATIONS,
            &[],
            self.dispatch.failing_destinations.load(Ordering::Relaxed) as f64,
        );
        self.metrics.set(
            metrics::DISPATCH_LONGEST_FAILURE_SECONDS,
            &[],
            self.dispatch.longest_failure_ms.load(Ordering::Relaxed) as f64 / 1_000.0,
        );
        for (worker, panics) in self.status.wal_worker_panics() {
            self.metrics.count_absolute(
                metrics::WAL_WORKER_PANICS_TOTAL,
                &[("worker", worker.to_owned())],
                panics,
            );
        }
        self.metrics
            .set(metrics::AUTH_VERIFY_QUEUED, &[], self.auth.queued() as f64);
        self.metrics.set(
            metrics::SCHEMA_VALIDATIONS_IN_FLIGHT,
            &[],
            self.acceptor.validations_in_flight() as f64,
        );
        self.refresh_topology_gauges();
        self.refresh_consume_gauges();
        remotes::gauges::refresh(self);
        self.refresh_disk_gauges();
    }

    /// Topics known, partitions owned here, partition logs open.
    fn refresh_topology_gauges(&self) {
        let view = self.replica.view();
        let local = self.replica.local_node();
        let owned = view
            .topics
            .values()
            .flat_map(|topic| topic.owners.iter())
            .filter(|owner| **owner == Some(local))
            .count();
        self.metrics
            .set(metrics::TOPICS_TOTAL, &[], view.topics.len() as f64);
        self.metrics
            .set(metrics::PARTITIONS_TOTAL, &[], owned as f64);
        if let Some(logs) = &self.logs {
            self.metrics
                .set(metrics::OPEN_PARTITION_LOGS, &[], logs.open_count() as f64);
        }
    }

    /// The data directory's size and the space left on its file system,
    /// read from the disk now (blocking). A failed read counts
    /// `narad_errors_total{component="metrics",kind="data_dir"}` and leaves
    /// the gauge at its last value.
    fn refresh_disk_gauges(&self) {
        let Some(logs) = &self.logs else {
            return;
        };
        let dir = logs.data_dir();
        let available = rustix::fs::statvfs(dir)
            .map(|stats| stats.f_bavail.saturating_mul(stats.f_frsize))
            .map_err(std::io::Error::from);
        let size = tree_bytes(dir);
        for (name, read) in [
            (metrics::DATA_DIR_AVAILABLE_BYTES, available),
            (metrics::DATA_DIR_SIZE_BYTES, size),
        ] {
            match read {
                Ok(bytes) => self.metrics.set(name, &[], bytes as f64),
                Err(error) => {
                    tracing::warn!(%error, dir = %dir.display(), series = name, "cannot read the data directory for a metric");
                    self.metrics.count(
                        metrics::ERRORS_TOTAL,
                        &[
                            ("component", "metrics".to_owned()),
                            ("kind", "data_dir".to_owned()),
                        ],
                        1,
                    );
                }
            }
        }
    }

    /// Copies the queue figures of each partition with a consume shard
    /// into its series, and the count of shards open and released. Its
    /// lag is not among them: the partition poller exports every owned
    /// partition's (`partitions::poller`).
    fn refresh_consume_gauges(&self) {
        let Some(service) = &self.consume else {
            return;
        };
        let partitions = service.gauges();
        self.metrics
            .set(metrics::CONSUME_SHARDS_OPEN, &[], partitions.len() as f64);
        self.metrics.count_absolute(
            metrics::CONSUME_SHARDS_RELEASED_TOTAL,
            &[],
            service.shards_released(),
        );
        for partition in partitions {
            let labels = [
                ("topic", partition.topic.to_string()),
                ("partition", partition.partition.to_string()),
            ];
            let gauges = [
                (metrics::INFLIGHT_SIZE, partition.in_flight),
                (metrics::ACKED_AHEAD_SIZE, partition.acked_ahead),
                (metrics::CONSUMER_DROPPED_MESSAGES, partition.dropped),
            ];
            for (name, value) in gauges {
                self.metrics.set(name, &labels, value as f64);
            }
            self.metrics.count_absolute(
                metrics::CONSUMER_CORRUPT_SKIPPED_TOTAL,
                &labels,
                partition.corrupt_skipped_total,
            );
        }
    }
}

/// Bytes of every regular file under `dir`, symbolic links not followed.
/// An entry removed while the walk runs (a segment retention deleted) is
/// skipped rather than failing the walk.
fn tree_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    let mut total = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        for entry in entries {
            let entry = entry?;
            let metadata = match entry.metadata() {
                Ok(metadata) => metadata,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            if metadata.is_dir() {
                pending.push(entry.path());
            } else if metadata.is_file() {
                total = total.saturating_add(metadata.len());
            }
        }
    }
    Ok(total)
}

/// The router of the client API.
pub fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/v1/topics/{topic}/produce", post(produce::produce))
        .route(
            "/v1/topics/{topic}/produce/batch",
            post(produce::produce_batch),
        )
        .route("/v1/topics/{topic}/consume", get(consume::consume))
        .route("/v1/topics/{topic}/ack", post(ack::ack))
        .route("/v1/topics", post(topics::create).get(topics::list))
        .route(
            "/v1/topics/{topic}",
            get(topics::describe)
                .delete(topics::delete)
                .patch(topics::alter),
        )
        .route("/v1/topics/{topic}/schema", get(topics::schema_history))
        .route(
            "/v1/topics/{topic}/children",
            post(children::attach).get(children::list),
        )
        .route(
            "/v1/topics/{topic}/children/{child}",
            delete(children::detach),
        )
        .route(
            "/v1/topics/{topic}/children/{child}/pause",
            post(remote_children::pause)
                .layer(middleware::map_response(remote_children::no_store_layer)),
        )
        .route(
            "/v1/topics/{topic}/children/{child}/resume",
            post(remote_resume::resume)
                .layer(middleware::map_response(remote_children::no_store_layer)),
        )
        .route(
            "/v1/topics/{topic}/children/{child}/skip",
            post(remote_children::skip)
                .layer(middleware::map_response(remote_children::no_store_layer)),
        )
        .route("/v1/users", post(users::create).get(users::list))
        .route(
            "/v1/users/{user}",
            get(users::describe).delete(users::delete),
        )
        .route("/v1/users/{user}/grants", put(users::set_grants))
        .route("/v1/users/{user}/password", put(users::set_password))
        .route("/v1/cluster/members", get(cluster::members))
        .route(
            "/v1/cluster/members/{id}/decommission",
            post(cluster::decommission).delete(cluster::cancel_decommission),
        )
        .route("/v1/cluster/members/{id}/forget", post(cluster::forget))
        .route("/v1/cluster/moves", get(cluster::moves))
        .route(
            "/v1/cluster/moves/{topic}/{partition}/abort",
            post(cluster::abort_move),
        )
        .route(
            "/v1/remotes",
            post(remotes::create)
                .get(remotes::list)
                .layer(middleware::map_response(remotes::no_store)),
        )
        .route(
            "/v1/remotes/{name}",
            get(remotes::describe)
                .patch(remotes::update)
                .delete(remotes::delete)
                .layer(middleware::map_response(remotes::no_store)),
        )
        .route(
            "/v1/remotes/{name}/test",
            post(remotes::test).layer(middleware::map_response(remotes::no_store)),
        )
        .route(
            "/v1/cluster/reencrypt-remotes",
            post(remotes::reencrypt).layer(middleware::map_response(remotes::no_store)),
        )
        .route("/v1/openapi.json", get(openapi::document))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            count_request,
        ))
        .layer(middleware::from_fn(body::discard_unread_body))
        .with_state(state)
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "404 page not found\n",
    )
        .into_response()
}

/// Counts every answer in `narad_http_requests_total` and its duration.
async fn count_request(
    State(state): State<Arc<ApiState>>,
    request: Request,
    next: Next,
) -> Response {
    let clock = Arc::clone(state.clock());
    let started_us = clock.now_us();
    let elapsed = move || Duration::from_micros(clock.now_us().saturating_sub(started_us));
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let metrics = &state.metrics;
    let handles = metrics.http().route(metrics, route);
    let method = metrics::method_label(request.method().as_str());
    let declared_bytes = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or(0);
    handles.bytes_in.increment(declared_bytes);
    let in_flight = InFlight::enter(&metrics.http().in_flight);
    let response = if state.config.access_log {
        let route = route.to_owned();
        let client = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(address)| address.ip());
        let identity = Arc::new(OnceLock::new());
        let response = ACCESS_IDENTITY
            .scope(Arc::clone(&identity), next.run(request))
            .await;
        access_log(&AccessLine {
            route: &route,
            method,
            status: response.status(),
            duration: elapsed(),
            identity: identity.get().map(String::as_str),
            client,
            bytes_in: declared_bytes,
            bytes_out: response_bytes(&response),
        });
        response
    } else {
        next.run(request).await
    };
    drop(in_flight);
    if let Some(bytes) = HttpBody::size_hint(response.body()).exact() {
        handles.bytes_out.increment(bytes);
    }
    let status = response.status();
    let answer = handles.answered(metrics, method, status.as_u16());
    answer.requests.increment(1);
    answer.duration.record(elapsed().as_secs_f64());
    if status.is_server_error() {
        metrics.http().server_errors.increment(1);
    }
    response
}

/// The `tracing` target of the access log: filter it on its own with
/// `narad::access=info` (or off), apart from the node's other logs.
pub const ACCESS_LOG_TARGET: &str = "narad::access";

tokio::task_local! {
    /// The user a request authenticated as, set by [`authenticate`] for
    /// the access log of that request.
    static ACCESS_IDENTITY: Arc<OnceLock<String>>;
}

/// One access log line's fields.
struct AccessLine<'a> {
    route: &'a str,
    method: &'a str,
    status: StatusCode,
    duration: Duration,
    identity: Option<&'a str>,
    client: Option<IpAddr>,
    bytes_in: u64,
    bytes_out: Option<u64>,
}

/// Emits one access log line: the matched route template (not the path,
/// so topic names do not make every line distinct), the method, status,
/// duration, the identity (the authenticated user, else the client IP),
/// and the bytes in (declared) and out (when the body's size is known).
fn access_log(line: &AccessLine<'_>) {
    let client = line.client.map(|ip| ip.to_string());
    let identity = line.identity.or(client.as_deref()).unwrap_or("-");
    tracing::info!(
        target: ACCESS_LOG_TARGET,
        route = line.route,
        method = line.method,
        status = line.status.as_u16(),
        duration_ms = line.duration.as_secs_f64() * 1000.0,
        identity,
        client = client.as_deref().unwrap_or("-"),
        bytes_in = line.bytes_in,
        bytes_out = line.bytes_out.unwrap_or(0),
        "request"
    );
}

/// The response body's size when it is known before it is sent (every
/// answer of this API but none is streamed).
fn response_bytes(response: &Response) -> Option<u64> {
    use axum::body::HttpBody;
    response.body().size_hint().exact().or_else(|| {
        response
            .headers()
            .get(header::CONTENT_LENGTH)?
            .to_str()
            .ok()?
            .parse()
            .ok()
    })
}

/// Counts a request in `narad_http_requests_in_flight` until dropped, so a
/// request whose client went away (its future dropped) is counted out too.
struct InFlight<'a>(&'a Gauge);

impl<'a> InFlight<'a> {
    fn enter(gauge: &'a Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Authenticates (security on), then applies the cross-site guard to
/// state-changing methods. `None` with security off: there is no user.
///
/// # Errors
/// `401`/`429`/`500` from authentication, then `415` from the guard.
async fn authenticate(
    state: &ApiState,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Option<Arc<User>>, ApiError> {
    let user = if state.config.security {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .map(|value| value.as_bytes());
        let user = state.auth.authenticate(authorization).await?;
        // Outside a request with the access log on there is no slot.
        let _ = ACCESS_IDENTITY.try_with(|slot| slot.set(user.username.clone()));
        Some(user)
    } else {
        None
    };
    cross_site_guard(method, headers)?;
    Ok(user)
}

/// A `POST`, `PUT` or `PATCH` must carry an API content type or an
/// `X-Narad-Client` header: a browser form cannot send either without a
/// CORS preflight, so a cross-site page cannot produce with a user's
/// cookies or cached credentials.
fn cross_site_guard(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    if !matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
        return Ok(());
    }
    if headers.contains_key("x-narad-client") {
        return Ok(());
    }
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(|value| value.trim().to_ascii_lowercase());
    match media_type.as_deref() {
        Some("application/json" | "application/octet-stream") => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported content type: send Content-Type application/json or application/octet-stream, or an X-Narad-Client header",
        )),
    }
}

/// Checks that `user` may do `action` on `topic`; security off passes.
fn authorize(user: Option<&User>, action: GrantAction, topic: &str) -> Result<(), ApiError> {
    match user {
        None => Ok(()),
        Some(user) if user.may(action, topic) => Ok(()),
        Some(_) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("no {} grant on this topic", action_name(action)),
        )),
    }
}

fn action_name(action: GrantAction) -> &'static str {
    match action {
        GrantAction::Produce => "produce",
        GrantAction::Consume => "consume",
        GrantAction::Create => "create",
        GrantAction::Admin => "admin",
    }
}

#[cfg(test)]
mod access_log_tests;
#[cfg(test)]
mod actor_tests;
#[cfg(test)]
mod children_tests;
#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod consume_tests;
#[cfg(test)]
mod openapi_tests;
#[cfg(test)]
mod placement_tests;
#[cfg(test)]
mod remote_children_tests;
#[cfg(test)]
mod shared_rules_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod topic_tests;
#[cfg(test)]
mod unread_body_tests;
#[cfg(test)]
mod user_tests;
