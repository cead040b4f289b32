//! `narad control` refuses an invalid configuration before opening
//! anything, naming the setting.

use std::process::Command;

use narad_tests::cluster::narad_binary;

#[test]
fn an_invalid_setting_exits_2_naming_it_and_its_source() {
    let output = Command::new(narad_binary())
        .args(["control", "--node-id", "1"])
        .env("NARAD_CLUSTER_RAFT_ELECTION_TIMEOUT", "soon")
        .output()
        .expect("narad runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cluster.raft_election_timeout (from NARAD_CLUSTER_RAFT_ELECTION_TIMEOUT)"),
        "{stderr}"
    );
}

#[test]
fn a_missing_node_id_exits_2_naming_it() {
    let output = Command::new(narad_binary())
        .arg("control")
        .env_remove("NARAD_NODE_ID")
        .output()
        .expect("narad runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cluster.node_id"), "{stderr}");
}

#[test]
fn an_unknown_key_in_the_config_file_exits_2_naming_it() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("control.json");
    std::fs::write(&path, r#"{"cluster": {"node_id": 1, "peer": "1@a:1"}}"#).expect("written");
    let output = Command::new(narad_binary())
        .arg("control")
        .arg("--config")
        .arg(&path)
        .output()
        .expect("narad runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unknown setting \"cluster.peer\""),
        "{stderr}"
    );
}
