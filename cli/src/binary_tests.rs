//! The `narad` binary as a user runs it.

use std::process::Command;

const NARAD: &str = env!("CARGO_BIN_EXE_narad");

#[test]
fn data_says_it_is_not_built_yet() {
    let output = Command::new(NARAD)
        .arg("data")
        .output()
        .expect("narad runs");
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is not built yet"), "{stderr}");
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
