//! A single `narad control` process: serves health before and during its
//! life, and stops cleanly on SIGTERM.

use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use narad_tests::cluster::{WAIT_MAX, http_get, narad_binary};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_becomes_ready_and_exits_0_on_sigterm() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let cluster_addr = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("udp port");
    let http_addr = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("tcp port");
    let mut child = Command::new(narad_binary())
        .arg("control")
        .args(["--node-id", "1"])
        .args(["--cluster-addr", &cluster_addr.to_string()])
        .args(["--http-addr", &http_addr.to_string()])
        .args(["--security-enabled", "false"])
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("NARAD_CLUSTER_SECRET")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("narad control starts");
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let ready = match tokio::net::TcpStream::connect(http_addr).await {
            Ok(_) => http_get(http_addr, "/readyz").await.0 == 200,
            Err(_) => false,
        };
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, body) = http_get(http_addr, "/healthz").await;
    assert_eq!((code, body.as_str()), (200, r#"{"status":"ok"}"#));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let deadline = Instant::now() + WAIT_MAX;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("narad control did not stop on SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(0));
}
