//! `narad data` behind three `narad control` processes on loopback, with
//! security on and a cluster secret: it turns ready, creates topics and
//! accepts produces through its HTTP API, a second data node serves what
//! the first created, `/readyz` turns 503 when no leader is heard, keeps accepting produces while
//! the control leader is SIGKILLed and creates again once a new leader
//! exists, and stops with exit 0 on SIGTERM. And `narad data` refuses an
//! invalid configuration before opening anything, naming the setting.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use narad_tests::cluster::{ControlCluster, DataProcess, SECRET, http_request, narad_binary};

const ADMIN_PASSWORD: &str = "data-cluster-admin-password";
/// The root admin the control plane seeds with `ADMIN_PASSWORD`.
const ADMIN: Option<(&str, &str)> = Some(("admin", ADMIN_PASSWORD));

/// Three control nodes with security on (users, the root admin).
async fn secured_control_plane() -> ControlCluster {
    ControlCluster::start_with_env(
        3,
        &["--security-enabled", "true"],
        &[("NARAD_ADMIN_PASSWORD", ADMIN_PASSWORD)],
    )
    .await
}

/// A ready data node following `cluster`.
async fn ready_data_node(cluster: &ControlCluster) -> DataProcess {
    let data = DataProcess::start(cluster, 1, &[]);
    data.wait_ready().await;
    data
}

/// One create attempt: `Some(true)` created (or created by an earlier
/// attempt whose answer was lost), `Some(false)` refused for now (no
/// leader yet, or the root admin not seeded yet), `None` no answer.
async fn try_create(data: &DataProcess, name: &str) -> Option<bool> {
    let body = format!(r#"{{"name":"{name}"}}"#);
    let (status, text) = data.request(ADMIN, "POST", "/v1/topics", &body).await?;
    match status {
        201 => Some(true),
        // Names are unique per test: an earlier attempt that answered 503
        // (its control node went quiet after the commit) created it.
        409 if text.contains("topic already exists") => Some(true),
        401 | 503 => Some(false),
        other => panic!("create {name}: {other} {text}"),
    }
}

/// Creates `name`, retrying while the control plane cannot take it yet.
async fn create_topic(data: &DataProcess, name: &str) {
    let what = format!("topic {name} created");
    data.wait_until(&what, || async {
        try_create(data, name).await.filter(|created| *created)
    })
    .await;
}

async fn produce(data: &DataProcess, topic: &str, n: u64) -> (u16, String) {
    let path = format!("/v1/topics/{topic}/produce");
    data.request(ADMIN, "POST", &path, &format!(r#"{{"n":{n}}}"#))
        .await
        .unwrap_or_else(|| panic!("produce {n} to {topic}: no answer\n{}", data.log()))
}

/// The sum of `topic`'s partition high watermarks.
async fn records_in_logs(data: &DataProcess, topic: &str) -> Option<u64> {
    let path = format!("/v1/topics/{topic}");
    let (status, body) = data.request(ADMIN, "GET", &path, "").await?;
    if status != 200 {
        return None;
    }
    let described: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(
        described["partition_stats"]
            .as_array()?
            .iter()
            .filter_map(|stats| stats["high_watermark"].as_u64())
            .sum(),
    )
}

async fn wait_for_records(data: &DataProcess, topic: &str, records: u64) {
    let what = format!("{records} records of {topic} in the partition logs");
    data.wait_until(&what, || async {
        (records_in_logs(data, topic).await? == records).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_data_node_creates_topics_and_accepts_produces_that_reach_its_logs() {
    let cluster = secured_control_plane().await;
    let data = ready_data_node(&cluster).await;
    let (status, body) = data
        .request(None, "GET", "/readyz", "")
        .await
        .expect("an answer");
    assert_eq!((status, body.trim()), (200, r#"{"status":"ready"}"#));
    create_topic(&data, "orders").await;
    for n in 0..5 {
        let (status, body) = produce(&data, "orders", n).await;
        assert_eq!(status, 202, "{body}");
    }
    wait_for_records(&data, "orders", 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_on_refuses_a_produce_without_credentials() {
    let cluster = secured_control_plane().await;
    let data = ready_data_node(&cluster).await;
    create_topic(&data, "guarded").await;
    let (status, body) = data
        .request(None, "POST", "/v1/topics/guarded/produce", "{}")
        .await
        .expect("an answer");
    assert_eq!(status, 401, "{body}");
}

/// Produces to `topic` through the node at `addr` until `stop` turns
/// true; returns how many were answered, by status.
async fn produce_until(
    addr: SocketAddr,
    topic: &'static str,
    stop: Arc<AtomicBool>,
) -> BTreeMap<u16, u64> {
    let mut answers = BTreeMap::new();
    let path = format!("/v1/topics/{topic}/produce");
    while !stop.load(Ordering::Acquire) {
        let status = http_request(addr, ADMIN, "POST", &path, r#"{"during":"failover"}"#)
            .await
            .map_or(0, |(status, _)| status);
        *answers.entry(status).or_insert(0) += 1;
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produces_keep_their_202_and_creates_resume_after_the_control_leader_is_killed() {
    let mut cluster = secured_control_plane().await;
    let data = ready_data_node(&cluster).await;
    create_topic(&data, "steady").await;
    let old_leader = cluster.wait_for_leader().await;
    cluster.kill(old_leader);

    // A producer runs from the kill until a create succeeds again: the
    // data node's WAL needs no control plane, so every produce is a 202.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce_until(data.http_addr, "steady", Arc::clone(&stop)));
    data.wait_until("a create after the leader was killed", || async {
        try_create(&data, "after-failover")
            .await
            .filter(|created| *created)
    })
    .await;
    stop.store(true, Ordering::Release);
    let answers = producer.await.expect("the producer ran");
    let accepted = answers.get(&202).copied().unwrap_or(0);
    assert_eq!(answers.len(), 1, "answers by status: {answers:?}");
    assert!(
        accepted > 0,
        "no produce was answered while the leader was gone"
    );
    eprintln!("{accepted} produces answered 202 between the kill and the first new create");

    let new_leader = cluster.wait_for_leader().await;
    assert_ne!(new_leader, old_leader);
    data.wait_ready().await;
    wait_for_records(&data, "steady", accepted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_turns_503_when_no_control_leader_is_heard() {
    let mut cluster = secured_control_plane().await;
    let data = ready_data_node(&cluster).await;
    let leader = cluster.wait_for_leader().await;
    let other = (leader + 1) % cluster.nodes.len();
    cluster.kill(leader);
    cluster.kill(other);
    let reason = data
        .wait_until("/readyz to answer 503", || async {
            let (status, body) = data.request(None, "GET", "/readyz", "").await?;
            (status == 503).then_some(body)
        })
        .await;
    assert!(reason.contains("no control-plane leader"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_through_one_data_node_is_served_by_another() {
    let cluster = secured_control_plane().await;
    let first = ready_data_node(&cluster).await;
    let second = DataProcess::start(&cluster, 2, &[]);
    second.wait_ready().await;
    create_topic(&first, "shared").await;
    second
        .wait_until("topic shared described by the second data node", || async {
            let (status, _) = second
                .request(ADMIN, "GET", "/v1/topics/shared", "")
                .await?;
            (status == 200).then_some(())
        })
        .await;
    let (status, body) = produce(&second, "shared", 1).await;
    assert_eq!(status, 202, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_node_exits_0_on_sigterm() {
    let cluster = secured_control_plane().await;
    let mut data = ready_data_node(&cluster).await;
    create_topic(&data, "brief").await;
    let (status, body) = produce(&data, "brief", 1).await;
    assert_eq!(status, 202, "{body}");
    let exit = data.terminate().await;
    assert!(exit.success(), "exit {exit:?}\n{}", data.log());
}

/// `narad data` with the two settings that have no default, the secret,
/// and `extra` flags; its exit status and stderr.
fn data_with(extra: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let output = Command::new(narad_binary())
        .args([
            "data",
            "--node-id",
            "1",
            "--control-nodes",
            "127.0.0.1:7943",
        ])
        .args(extra)
        .env("NARAD_CLUSTER_SECRET", SECRET)
        .envs(env.iter().copied())
        .output()
        .expect("narad runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

#[test]
fn a_bad_setting_exits_2_naming_it_and_its_source() {
    let (code, stderr) = data_with(&[], &[("NARAD_HTTP_SHUTDOWN_GRACE", "soon")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("http.shutdown_grace (from NARAD_HTTP_SHUTDOWN_GRACE)"),
        "{stderr}"
    );
}

#[test]
fn a_bad_setting_stops_the_start_before_the_data_directory_is_made() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data_dir = dir.path().join("data");
    let data_dir_text = data_dir.to_string_lossy().into_owned();
    let (code, stderr) = data_with(&["--data-dir", &data_dir_text, "--log-level", "loud"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("log.level (from --log-level)"), "{stderr}");
    assert!(!data_dir.exists());
}

#[test]
fn security_on_without_the_cluster_secret_exits_2_naming_it() {
    let output = Command::new(narad_binary())
        .args([
            "data",
            "--node-id",
            "1",
            "--control-nodes",
            "127.0.0.1:7943",
        ])
        .env_remove("NARAD_CLUSTER_SECRET")
        .output()
        .expect("narad runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("NARAD_CLUSTER_SECRET"), "{stderr}");
}

#[test]
fn an_unknown_key_in_the_config_file_exits_2_naming_it() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("data.json");
    std::fs::write(&path, r#"{"http": {"adress": "127.0.0.1:7942"}}"#).expect("written");
    let path_text = path.to_string_lossy().into_owned();
    let (code, stderr) = data_with(&["--config", &path_text], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown setting \"http.adress\""),
        "{stderr}"
    );
}
