//! The `narad` binary as a user runs it.

use std::process::Command;

const NARAD: &str = env!("CARGO_BIN_EXE_narad");

#[test]
fn data_help_lists_its_settings() {
    let output = Command::new(NARAD)
        .args(["data", "--help"])
        .output()
        .expect("narad runs");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--node-id",
        "--control-nodes",
        "--config",
        "--http-addr",
        "--rpc-addr",
        "--data-dir",
        "--security-enabled",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn control_help_lists_its_settings() {
    let output = Command::new(NARAD)
        .args(["control", "--help"])
        .output()
        .expect("narad runs");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--node-id",
        "--peers",
        "--config",
        "--http-addr",
        "--data-dir",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}
