//! Mutual TLS between nodes, with real processes: three `narad control`
//! and two `narad data` processes whose cluster TLS files come from one CA
//! create a topic, take produces on one data node and serve them to a
//! consumer on the other, and export their certificates' expiry; a control
//! node whose certificate expired answers `/readyz` 503 naming it under
//! `degraded`; and a secured node of several without the files refuses to
//! start, naming the settings.

use std::collections::BTreeSet;
use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use narad_tests::cluster::{
    ADMIN, DataCluster, DataProcess, SECRET, WAIT_MAX, http_get, narad_binary,
};
use narad_tests::metrics_list::assert_served_when;
use narad_tests::tls::{NodeCertificate, TestPki, YEAR_2001_S, YEAR_2100_S};

const TOPIC: &str = "sealed";
const MESSAGES: usize = 12;

/// The value of the sample `series` (name and labels) in Prometheus text.
fn sample(text: &str, series: &str) -> Option<f64> {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

/// Every series `ops/metrics.tsv` lists as served by nodes with cluster
/// TLS files is in `text` with its listed type and label keys.
fn assert_served_with_cluster_tls(text: &str, what: &str) {
    assert_served_when(text, "cluster-tls", what);
}

/// Consumes and acks through `node`, one message a request, until `count`
/// messages came.
async fn consume_all(node: &DataProcess, count: usize) {
    let received = AtomicUsize::new(0);
    node.wait_until("every produced message consumed", || async {
        let path = format!("/v1/topics/{TOPIC}/consume?wait=1s");
        let (status, body) = node.request(Some(ADMIN), "GET", &path, "").await?;
        assert!(!(400..500).contains(&status), "consume: {status} {body}");
        if status == 200 {
            let message: serde_json::Value = serde_json::from_str(&body).ok()?;
            let handle = message["receipt_handle"].as_str()?;
            let path = format!("/v1/topics/{TOPIC}/ack?receipt_handle={handle}");
            let (status, body) = node.request(Some(ADMIN), "POST", &path, "").await?;
            assert_eq!(status, 204, "ack: {body}");
            received.fetch_add(1, Ordering::SeqCst);
        }
        (received.load(Ordering::SeqCst) >= count).then_some(())
    })
    .await;
    assert_eq!(
        received.load(Ordering::SeqCst),
        count,
        "each message delivered once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_mutual_tls_creates_produces_and_consumes() {
    let pki = Arc::new(TestPki::new(NodeCertificate::Current));
    let cluster = DataCluster::start_with_tls(3, 2, pki).await;
    cluster
        .create_topic(0, &format!(r#"{{"name":"{TOPIC}","partitions":4}}"#))
        .await;
    let owners: BTreeSet<u64> = cluster
        .partition_owners(0, TOPIC)
        .await
        .into_iter()
        .collect();
    assert_eq!(
        owners,
        BTreeSet::from([1, 2]),
        "both data nodes own partitions, so produces and consumes cross between them"
    );
    let path = format!("/v1/topics/{TOPIC}/produce");
    for n in 0..MESSAGES {
        let (status, body) = cluster.data[0]
            .request(Some(ADMIN), "POST", &path, &format!(r#"{{"n":{n}}}"#))
            .await
            .expect("the data node answers");
        assert_eq!(status, 202, "{body}");
    }
    consume_all(&cluster.data[1], MESSAGES).await;

    let (status, control_metrics) = http_get(cluster.control.nodes[0].http_addr, "/metrics").await;
    assert_eq!(status, 200);
    let (status, data_metrics) = cluster.data[1]
        .request(Some(ADMIN), "GET", "/metrics", "")
        .await
        .expect("the data node answers");
    assert_eq!(status, 200);
    for (what, text) in [
        ("control node", &control_metrics),
        ("data node", &data_metrics),
    ] {
        assert_served_with_cluster_tls(text, what);
        for kind in ["leaf", "ca"] {
            let series = format!("narad_raft_tls_cert_not_after_seconds{{kind=\"{kind}\"}}");
            assert_eq!(
                sample(text, &series),
                Some(YEAR_2100_S as f64),
                "{what}: {series}"
            );
        }
    }
}

/// A free loopback UDP and TCP address, as `host:port` text.
fn free_addrs() -> (String, String) {
    let udp = UdpSocket::bind("127.0.0.1:0")
        .and_then(|socket| socket.local_addr())
        .expect("a free UDP port");
    let tcp = TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free TCP port");
    (udp.to_string(), tcp.to_string())
}

/// Kills the child when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_node_whose_certificate_expired_is_unready_and_names_it_degraded() {
    let pki = TestPki::new(NodeCertificate::Expired);
    let dir = tempfile::tempdir().expect("temporary directory");
    let (cluster_addr, http_addr) = free_addrs();
    let _node = Killed(
        Command::new(narad_binary())
            .args(["control", "--node-id", "1"])
            .args(["--cluster-addr", &cluster_addr])
            .args(["--http-addr", &http_addr])
            .arg("--data-dir")
            .arg(dir.path())
            .env("NARAD_CLUSTER_SECRET", SECRET)
            .envs(pki.env())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("narad control starts"),
    );
    let http_addr = http_addr.parse().expect("address");
    let expired =
        "this node's cluster TLS certificate (security.cluster_tls_cert_file) has expired";
    let deadline = std::time::Instant::now() + WAIT_MAX;
    // Unready while it elects itself too, with the certificate listed; once
    // it leads, the expired certificate is the reason.
    let body = loop {
        if tokio::net::TcpStream::connect(http_addr).await.is_ok() {
            let (status, body) = http_get(http_addr, "/readyz").await;
            assert_eq!(status, 503, "{body}");
            let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
            assert_eq!(
                body["degraded"],
                serde_json::json!(["raft_tls_certificate_expired"]),
                "{body}"
            );
            if body["error"] == expired {
                break body;
            }
        }
        assert!(std::time::Instant::now() < deadline, "never led");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(
        body,
        serde_json::json!({"error": expired, "degraded": ["raft_tls_certificate_expired"]})
    );
    let (_, metrics) = http_get(http_addr, "/metrics").await;
    let leaf = r#"narad_raft_tls_cert_not_after_seconds{kind="leaf"}"#;
    assert_eq!(sample(&metrics, leaf), Some(YEAR_2001_S as f64));
    assert_eq!(sample(&metrics, "narad_control_ready"), Some(0.0));
}

/// Runs `narad` with `args`, the cluster secret, and neither TLS files nor
/// the plaintext allowance; its exit code and stderr.
fn secured_without_tls(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(narad_binary())
        .args(args)
        .env("NARAD_CLUSTER_SECRET", SECRET)
        .env_remove("NARAD_ALLOW_PLAINTEXT_RAFT")
        .env_remove("NARAD_CLUSTER_TLS_CERT_FILE")
        .env_remove("NARAD_CLUSTER_TLS_KEY_FILE")
        .env_remove("NARAD_CLUSTER_TLS_CA_FILE")
        .output()
        .expect("narad runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

#[test]
fn a_secured_control_node_with_peers_and_no_tls_files_refuses_to_start_naming_the_settings() {
    let (code, stderr) = secured_without_tls(&[
        "control",
        "--node-id",
        "1",
        "--peers",
        "1@127.0.0.1:17001,2@127.0.0.1:17002,3@127.0.0.1:17003",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("security.cluster_tls_cert_file"),
        "{stderr}"
    );
    assert!(stderr.contains("security.allow_plaintext_raft"), "{stderr}");
}

#[test]
fn a_secured_data_node_without_tls_files_refuses_to_start_naming_the_settings() {
    let (code, stderr) = secured_without_tls(&[
        "data",
        "--node-id",
        "1",
        "--control-nodes",
        "127.0.0.1:17001",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("security.cluster_tls_cert_file"),
        "{stderr}"
    );
    assert!(stderr.contains("security.allow_plaintext_raft"), "{stderr}");
}
