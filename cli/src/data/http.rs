//! Serving a data node's HTTP API as a process does: `/readyz` also asks
//! what only the process knows (has a control-plane leader been heard
//! recently?), and a stop drains in-flight requests within a bound.

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use narad_dataplane::node::DataNode;
use narad_protocol::Expired;
use tokio::sync::watch;
use tracing::warn;

use super::front::{FrontPlan, Fronts};

/// One readiness condition: `Err(reason)` keeps `/readyz` at `503`.
pub(crate) type ReadyCheck = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What is expired now among the cluster TLS certificates: each keeps
/// `/readyz` at `503` and is listed under `degraded`.
pub(crate) type ExpiredCheck = Box<dyn Fn() -> Vec<Expired> + Send + Sync>;

/// The conditions `/readyz` checks before the data node's own ones
/// (started, not stopping, metadata replica caught up).
pub(crate) struct ReadyGate {
    checks: Vec<ReadyCheck>,
    expired: Option<ExpiredCheck>,
}

impl std::fmt::Debug for ReadyGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadyGate")
            .field("checks", &self.checks.len())
            .field("expired", &self.expired.is_some())
            .finish()
    }
}

impl ReadyGate {
    /// A gate of `checks`, asked in order on every `/readyz`.
    pub(crate) fn new(checks: Vec<ReadyCheck>) -> Self {
        Self {
            checks,
            expired: None,
        }
    }

    /// The gate, also refusing while `expired` names an expired cluster
    /// TLS certificate.
    pub(crate) fn with_expired(mut self, expired: ExpiredCheck) -> Self {
        self.expired = Some(expired);
        self
    }

    /// The `503` answer's reason and `degraded` list, if any: a failed
    /// check's reason first, else the expired certificates'; the expired
    /// certificates are listed either way.
    fn refusal(&self) -> Option<(String, Vec<Expired>)> {
        let expired = self
            .expired
            .as_ref()
            .map(|check| check())
            .unwrap_or_default();
        if let Some(reason) = self.checks.iter().find_map(|check| check().err()) {
            return Some((reason, expired));
        }
        if expired.is_empty() {
            return None;
        }
        let reason = expired
            .iter()
            .map(|expired| expired.describe())
            .collect::<Vec<_>>()
            .join("; ");
        Some((reason, expired))
    }
}

/// `{"error":reason}`, with `"degraded":[codes]` when a cluster TLS
/// certificate is expired: the shape the control node answers too.
fn unready_body(reason: &str, expired: &[Expired]) -> serde_json::Value {
    let mut body = serde_json::json!({ "error": reason });
    if !expired.is_empty() {
        let codes: Vec<&str> = expired.iter().map(|expired| expired.code()).collect();
        body["degraded"] = serde_json::json!(codes);
    }
    body
}

fn unready(reason: &str, expired: &[Expired]) -> Response {
    let mut body = unready_body(reason, expired).to_string();
    body.push('\n');
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

async fn gate_readiness(
    State(gate): State<Arc<ReadyGate>>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path() == "/readyz"
        && let Some((reason, expired)) = gate.refusal()
    {
        return unready(&reason, &expired);
    }
    next.run(request).await
}

/// More Prometheus text to serve after the data node's on `/metrics`:
/// `narad dev` adds its in-process control node's series.
pub(crate) type MetricsSource = Arc<dyn Fn() -> String + Send + Sync>;

/// Appends `source`'s text to a successful `/metrics` answer.
async fn append_metrics(
    State(source): State<MetricsSource>,
    request: Request,
    next: Next,
) -> Response {
    let is_metrics = request.uri().path() == "/metrics";
    let response = next.run(request).await;
    if !is_metrics || response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&source());
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(text))
}

/// Serves `node`'s API on `listener` until `stop` resolves: then
/// `/healthz` and `/readyz` turn `503`, no new connection is taken, parked
/// long polls are answered, and in-flight requests get `grace` to finish
/// before their connections are dropped. With `fronts` above 0, that many
/// front threads serve the connections (see [`super::front`]); with 0, the
/// calling runtime does.
///
/// # Errors
/// The listener failed.
pub(crate) async fn serve(
    node: &DataNode,
    listener: tokio::net::TcpListener,
    gate: ReadyGate,
    extra_metrics: Option<MetricsSource>,
    grace: Duration,
    fronts: usize,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut router = node.router().layer(middleware::from_fn_with_state(
        Arc::new(gate),
        gate_readiness,
    ));
    if let Some(source) = extra_metrics {
        router = router.layer(middleware::from_fn_with_state(source, append_metrics));
    }
    if fronts > 0 {
        return serve_on_fronts(node, listener, router, fronts, grace, stop).await;
    }
    let health = Arc::clone(&node.api().health);
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    // The client's address: the consume cap counts per address with
    // security off.
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let serving = axum::serve(listener, service)
        .with_graceful_shutdown(async move {
            stop.await;
            health.shutting_down.store(true, Ordering::Release);
            let _ = stopping.send(());
        })
        .into_future();
    let mut serving = std::pin::pin!(serving);
    tokio::select! {
        biased;
        served = &mut serving => return served,
        _ = stopped => {}
    }
    answer_parked_consumes(node);
    match tokio::time::timeout(grace, serving).await {
        Ok(served) => served,
        Err(_) => {
            warn_grace_ran_out(grace);
            Ok(())
        }
    }
}

/// [`serve`] with `fronts` front threads: this runtime accepts and hands
/// each connection over; the fronts serve it.
async fn serve_on_fronts(
    node: &DataNode,
    listener: tokio::net::TcpListener,
    router: axum::Router,
    fronts: usize,
    grace: Duration,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (drain, draining) = watch::channel(false);
    let (abort, aborting) = watch::channel(false);
    let plan = FrontPlan {
        count: fronts,
        local: listener.local_addr()?,
        draining,
        abort: aborting,
    };
    let mut fronts = Fronts::start(plan, router)?;
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                if !fronts.hand_off(stream, peer).await {
                    warn!("every HTTP front thread ended; no longer serving");
                    break;
                }
            }
            Err(error) => pause_after_accept_error(&error).await,
        }
    }
    drop(listener);
    node.api()
        .health
        .shutting_down
        .store(true, Ordering::Release);
    let _ = drain.send(true);
    answer_parked_consumes(node);
    if tokio::time::timeout(grace, fronts.ended()).await.is_err() {
        warn_grace_ran_out(grace);
        let _ = abort.send(true);
        fronts.ended().await;
    }
    tokio::task::block_in_place(|| fronts.join());
    Ok(())
}

/// After a failed accept: a connection that died before it was taken is
/// nothing to wait for; anything else (out of descriptors, say) is logged
/// and waited out for a second, so the loop does not spin on it.
async fn pause_after_accept_error(error: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    warn!(%error, "accepting an HTTP connection failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Parked long polls answer now instead of holding the drain; consumer
/// positions are written out (blocking I/O, off the async workers).
fn answer_parked_consumes(node: &DataNode) {
    tokio::task::block_in_place(|| node.stop_consumes());
}

fn warn_grace_ran_out(grace: Duration) {
    warn!(
        grace_ms = grace.as_millis() as u64,
        "requests still in flight after the shutdown grace; dropping their connections"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(reason: &'static str) -> ReadyCheck {
        Box::new(move || Err(reason.to_owned()))
    }

    #[test]
    fn an_expired_certificate_refuses_an_otherwise_ready_node_and_is_listed() {
        let gate = ReadyGate::new(vec![Box::new(|| Ok(()))])
            .with_expired(Box::new(|| vec![Expired::Certificate]));
        let (reason, expired) = gate.refusal().expect("refused");
        assert_eq!(reason, Expired::Certificate.describe());
        assert_eq!(
            unready_body(&reason, &expired),
            serde_json::json!({
                "error": Expired::Certificate.describe(),
                "degraded": ["raft_tls_certificate_expired"],
            })
        );
    }

    #[test]
    fn a_failed_check_keeps_its_reason_and_lists_what_is_expired() {
        let gate = ReadyGate::new(vec![refused("no leader")])
            .with_expired(Box::new(|| vec![Expired::Certificate, Expired::Ca]));
        let (reason, expired) = gate.refusal().expect("refused");
        assert_eq!(
            unready_body(&reason, &expired),
            serde_json::json!({
                "error": "no leader",
                "degraded": ["raft_tls_certificate_expired", "raft_tls_ca_expired"],
            })
        );
    }

    #[test]
    fn without_expired_certificates_the_answer_has_no_degraded_list() {
        let gate = ReadyGate::new(vec![refused("no leader")]).with_expired(Box::new(Vec::new));
        let (reason, expired) = gate.refusal().expect("refused");
        assert_eq!(
            unready_body(&reason, &expired),
            serde_json::json!({ "error": "no leader" })
        );
        let ready = ReadyGate::new(Vec::new()).with_expired(Box::new(Vec::new));
        assert!(ready.refusal().is_none());
    }
}
