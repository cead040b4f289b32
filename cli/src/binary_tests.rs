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
        "--wal-dir",
        "--security-enabled",
        "--access-log",
        "--log-format",
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
        "--log-format",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

/// A copy of `narad` (a hard link, so `current_exe` names it) alone in a
/// fresh directory, where `narad bench` looks for the benchmarks.
fn narad_alone() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let narad = dir.path().join("narad");
    std::fs::hard_link(NARAD, &narad).expect("hard link to narad");
    (dir, narad)
}

#[test]
fn bench_without_the_benchmark_built_says_how_to_build_it() {
    let (_dir, narad) = narad_alone();
    let output = Command::new(&narad)
        .args(["bench", "flow"])
        .env_remove("NARAD_BIN")
        .output()
        .expect("narad runs");
    assert_eq!(output.status.code(), Some(2));
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains("cargo build --release -p narad -p narad-bench"),
        "{error}"
    );
}

#[test]
fn bench_runs_the_benchmark_beside_it_against_itself() {
    use std::os::unix::fs::PermissionsExt;

    let (dir, narad) = narad_alone();
    let seen = dir.path().join("seen");
    let script = dir.path().join("flow-bench");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$NARAD_BIN\" \"$@\" > '{}'\nexit 7\n",
            seen.display()
        ),
    )
    .expect("write the stand-in benchmark");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .expect("make it executable");
    // A process another test forked while the script was open for writing
    // holds it open until that process execs; until then the script cannot
    // run (ETXTBSY). Wait for that once here, so narad's own start is not
    // the one that meets it.
    for _ in 0..500 {
        match Command::new(&script).status() {
            Err(error) if error.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => break,
        }
    }
    let _ = std::fs::remove_file(&seen);
    let status = Command::new(&narad)
        .args(["bench", "flow", "--cluster", "3"])
        .env_remove("NARAD_BIN")
        .status()
        .expect("narad runs");
    assert_eq!(status.code(), Some(7), "the benchmark's exit status");
    let seen = std::fs::read_to_string(&seen).expect("the benchmark ran");
    assert_eq!(
        seen,
        format!("{}\n--cluster\n3\n", narad.display()),
        "NARAD_BIN names this narad, and the arguments pass through"
    );
}

#[test]
fn bench_json_prints_the_benchmarks_report_alone_on_stdout() {
    use std::os::unix::fs::PermissionsExt;

    let (dir, narad) = narad_alone();
    let seen = dir.path().join("seen");
    let script = dir.path().join("wal-bench");
    // A stand-in benchmark: a progress line on its stdout, its report
    // copied where narad asks, its arguments noted.
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho 'round 1 of 3'\nprintf '%s\\n' \"$@\" > '{}'\n\
             printf '{{\"benchmark\":\"wal\",\"x\":1}}\\n' > \"$NARAD_BENCH_JSON_COPY\"\n",
            seen.display()
        ),
    )
    .expect("write the stand-in benchmark");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .expect("make it executable");
    for _ in 0..500 {
        match Command::new(&script)
            .env("NARAD_BENCH_JSON_COPY", "/dev/null")
            .status()
        {
            Err(error) if error.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => break,
        }
    }
    for words in [
        ["--json", "bench", "wal", "--size", "1"],
        ["bench", "wal", "--size", "1", "--json"],
    ] {
        let output = Command::new(&narad)
            .args(words)
            .output()
            .expect("narad runs");
        assert!(output.status.success(), "{words:?}: {output:?}");
        let json: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("stdout is the report alone");
        assert_eq!(json["benchmark"], "wal");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("round 1 of 3"),
            "the benchmark's own lines go to stderr"
        );
        let passed = std::fs::read_to_string(&seen).expect("the benchmark ran");
        assert_eq!(
            passed, "--size\n1\n",
            "--json is narad's, not the benchmark's"
        );
    }
}

#[test]
fn bench_takes_any_other_name_for_a_topic_on_a_server() {
    let output = Command::new(NARAD)
        .args([
            "bench",
            "nonesuch",
            "--count",
            "1",
            "-s",
            "http://127.0.0.1:1",
        ])
        .env_remove("NARAD_ADDR")
        .output()
        .expect("narad runs");
    assert_eq!(output.status.code(), Some(3), "cannot reach the server");
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("cannot reach the server"), "{error}");
}

#[test]
fn bench_help_names_both_forms() {
    let output = Command::new(NARAD)
        .args(["bench", "--help"])
        .output()
        .expect("narad runs");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for text in [
        "disk-baseline",
        "move (",
        "remote (",
        "narad bench TOPIC",
        "--topic NAME",
        "p50/p95/p99",
    ] {
        assert!(help.contains(text), "{text} missing from:\n{help}");
    }
}

/// The help of `narad ARGS`.
fn help(args: &[&str]) -> String {
    let output = Command::new(NARAD)
        .args(args)
        .arg("--help")
        .output()
        .expect("narad runs");
    assert!(output.status.success(), "{args:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn client_flags_show_on_client_verbs_only() {
    for verb in ["dev", "control", "data", "completion"] {
        let text = help(&[verb]);
        for flag in ["--server", "--user", "--password", "--ctx", "--json"] {
            assert!(!text.contains(flag), "narad {verb} shows {flag}:\n{text}");
        }
    }
    for verb in [
        &["topic", "ls"][..],
        &["pub"],
        &["sub"],
        &["user", "ls"],
        &["ctx"],
    ] {
        let text = help(verb);
        for flag in ["--server", "--json", "NARAD_ADDR"] {
            assert!(text.contains(flag), "narad {verb:?} lacks {flag}:\n{text}");
        }
    }
}

#[test]
fn flags_filled_from_the_environment_do_not_look_required() {
    let output = Command::new(NARAD)
        .arg("pub")
        .env("NARAD_ADDR", "http://127.0.0.1:1")
        .env("NARAD_USER", "someone")
        .env("NARAD_PASS", "secret")
        .output()
        .expect("narad runs");
    assert_eq!(output.status.code(), Some(2));
    let error = String::from_utf8_lossy(&output.stderr);
    let usage = error
        .lines()
        .find(|line| line.starts_with("Usage:"))
        .unwrap_or_else(|| panic!("no usage line:\n{error}"));
    assert_eq!(usage, "Usage: narad pub <TOPIC> [MESSAGE]");
}
