//! A running control node renders the metastore's snapshot and stall
//! series: one node, in this process, with a snapshot threshold low enough
//! that a few proposals build a snapshot.

use narad_clock::SystemClock;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use narad_meta::{Command, Heartbeat};

use super::config::{ClusterSecurity, ControlConfig, Peer, defaults};
use super::http::render;
use super::runtime::ControlNode;

/// A ceiling on waits: it turns a hang into a failure, it asserts no speed.
const WAIT_MAX: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);
/// Log entries between snapshots: a handful of proposals build one.
const SNAPSHOT_THRESHOLD: u64 = 4;

/// One voter on a free loopback port, snapshotting every few entries.
pub(super) fn single_node(data_dir: &std::path::Path) -> ControlConfig {
    let cluster_addr = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|socket| socket.local_addr())
        .expect("a free loopback UDP port");
    ControlConfig {
        node_id: 1,
        cluster_addr,
        advertise_addr: cluster_addr.to_string(),
        peers: vec![Peer {
            id: 1,
            addr: cluster_addr.to_string(),
        }],
        heartbeat_interval: defaults::HEARTBEAT,
        election_timeout: defaults::ELECTION,
        snapshot_threshold: SNAPSHOT_THRESHOLD,
        trailing_logs: 0,
        http_addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        data_dir: data_dir.to_owned(),
        security_enabled: false,
        cluster_security: ClusterSecurity::Insecure,
        cluster_tls: None,
        log_level: defaults::LOG_LEVEL.into(),
        log_format: "text".into(),
        admin_password: None,
    }
}

/// Polls `done` until it holds, failing after [`WAIT_MAX`].
pub(super) async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// The value of the sample `series` (a name and its labels) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_built_a_snapshot_renders_its_size_duration_and_no_failure_or_stall() {
    let dir = tempfile::TempDir::new().expect("temporary directory");
    let node = ControlNode::start(
        single_node(dir.path()),
        std::sync::Arc::new(SystemClock::new()),
    )
    .await
    .expect("starts");
    wait_until("the node to lead", || node.status().state == "leader").await;
    for _ in 0..2 * SNAPSHOT_THRESHOLD {
        let heartbeat = Command::Heartbeat(Heartbeat {
            id: "nobody".into(),
            at_ms: 1,
        });
        node.propose(heartbeat)
            .await
            .expect("applied (as a refusal)");
    }
    wait_until("a snapshot", || node.status().snapshot_index > 0).await;
    let text = render(&node.shared, false);
    let bytes = sample(&text, "narad_metastore_snapshot_bytes");
    assert!(
        bytes.is_some_and(|bytes| bytes > 0.0),
        "bytes {bytes:?}\n{text}"
    );
    assert!(
        text.contains("# TYPE narad_metastore_snapshot_duration_seconds histogram"),
        "{text}"
    );
    let builds = sample(&text, "narad_metastore_snapshot_duration_seconds_count");
    assert!(
        builds.is_some_and(|count| count >= 1.0),
        "builds {builds:?}\n{text}"
    );
    assert_eq!(
        sample(&text, "narad_metastore_snapshot_failures_total"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "narad_metastore_apply_stalled"),
        Some(0.0),
        "{text}"
    );
    node.shutdown().await;
}
