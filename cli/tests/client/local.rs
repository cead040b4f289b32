//! What needs no server, or no reachable one: usage errors, an unreachable
//! server, contexts and completions.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::support::{NARAD, exits, fails, free_port, ok, shared, temp_dir};

#[test]
fn an_unreachable_server_exits_3_and_says_so() {
    let port = free_port();
    let output = Command::new(NARAD)
        .args(["topic", "ls", "-s", &format!("http://127.0.0.1:{port}")])
        .output()
        .expect("narad runs");
    let error = fails(&output, 3);
    assert!(error.contains("cannot reach the server"), "{error}");
    assert!(error.contains("is it running?"), "{error}");
}

#[test]
fn bad_usage_exits_2() {
    let server = shared();
    let error = fails(
        &server.run(&["topic", "add", "x", "--retention", "12 hours"]),
        2,
    );
    assert!(error.contains("not a duration"), "{error}");
    fails(&server.run(&["pub"]), 2);
    fails(&server.run(&["sub", "x", "--from", "3"]), 2);
    fails(
        &server.run(&[
            "user",
            "add",
            "x",
            "--grant",
            "delete:x",
            "--user-password",
            "p",
        ]),
        2,
    );
    let error = fails(
        &server.run(&["topic", "ls", "-s", "ftp://127.0.0.1:7942"]),
        2,
    );
    assert!(
        error.contains("narad speaks http:// and https:// only"),
        "{error}"
    );
}

#[test]
fn an_address_without_a_scheme_is_taken_as_http() {
    let server = shared();
    let address = format!("127.0.0.1:{}", server.port);
    ok(&server.run(&["topic", "ls", "-s", &address]));
    ok(&server
        .narad()
        .args(["topic", "ls"])
        .env("NARAD_ADDR", &address)
        .output()
        .expect("narad runs"));
}

#[test]
fn a_closed_pipe_ends_completion_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    // The zsh script is larger than a pipe holds: narad is still writing
    // when the reader leaves.
    let mut child = Command::new(NARAD)
        .args(["completion", "zsh"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("narad runs");
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("a first line");
    assert_eq!(line, "#compdef narad\n");
    drop(reader);
    let output = child.wait_with_output().expect("narad exits");
    assert_eq!(fails(&output, 0), "", "nothing on stderr");
}

#[test]
fn help_documents_the_exit_statuses() {
    let help = ok(&Command::new(NARAD)
        .arg("--help")
        .output()
        .expect("narad runs"));
    for text in [
        "Exit status",
        "1  the server refused",
        "2  usage",
        "3  the server could not be reached",
        "NARAD_ADDR",
    ] {
        assert!(help.contains(text), "{text} missing from:\n{help}");
    }
}

#[test]
fn contexts_are_saved_private_selected_and_applied() {
    let server = shared();
    let config = temp_dir();
    let narad = || {
        let mut command = Command::new(NARAD);
        command
            .env("XDG_CONFIG_HOME", &config)
            .env_remove("NARAD_ADDR")
            .env_remove("NARAD_USER")
            .env_remove("NARAD_PASS");
        command
    };
    ok(&narad()
        .args([
            "ctx",
            "add",
            "dev",
            "--url",
            &server.url,
            "-u",
            "admin",
            "--save-password",
        ])
        .env("NARAD_PASS", crate::support::ADMIN_PASSWORD)
        .output()
        .expect("narad runs"));
    let file = config.join("narad").join("contexts.json");
    let mode = std::fs::metadata(&file)
        .expect("contexts file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "contexts file mode {mode:o}");
    // The first context is selected: no flag or environment is needed.
    ok(&narad().args(["topic", "ls"]).output().expect("narad runs"));
    ok(&narad()
        .args([
            "ctx",
            "add",
            "nowhere",
            "--url",
            &format!("http://127.0.0.1:{}", free_port()),
        ])
        .output()
        .expect("narad runs"));
    let listing = ok(&narad().args(["ctx", "ls"]).output().expect("narad runs"));
    assert!(
        listing
            .lines()
            .any(|line| line.contains('*') && line.contains("dev")),
        "{listing}"
    );
    ok(&narad()
        .args(["ctx", "select", "nowhere"])
        .output()
        .expect("narad runs"));
    exits(
        &narad().args(["topic", "ls"]).output().expect("narad runs"),
        3,
    );
    // --ctx beats the selection; a flag beats the context.
    ok(&narad()
        .args(["topic", "ls", "--ctx", "dev"])
        .output()
        .expect("narad runs"));
    let flagged = narad()
        .args([
            "topic",
            "ls",
            "-s",
            &server.url,
            "-p",
            crate::support::ADMIN_PASSWORD,
        ])
        .output()
        .expect("narad runs");
    ok(&flagged);
    // The environment beats the context too.
    let from_env = narad()
        .args(["topic", "ls"])
        .env("NARAD_ADDR", &server.url)
        .env("NARAD_PASS", crate::support::ADMIN_PASSWORD)
        .output()
        .expect("narad runs");
    ok(&from_env);
    ok(&narad()
        .args(["ctx", "rm", "nowhere"])
        .output()
        .expect("narad runs"));
    let error = fails(
        &narad()
            .args(["ctx", "select", "nowhere"])
            .output()
            .expect("narad runs"),
        2,
    );
    assert!(error.contains("no context named"), "{error}");
    let error = fails(
        &narad()
            .args(["topic", "ls", "--ctx", "gone"])
            .output()
            .expect("narad runs"),
        2,
    );
    assert!(error.contains("narad ctx ls"), "{error}");
}

#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, marker) in [
        ("bash", "_narad()"),
        ("zsh", "#compdef narad"),
        ("fish", "complete -c narad"),
    ] {
        let script = ok(&Command::new(NARAD)
            .args(["completion", shell])
            .output()
            .expect("narad runs"));
        assert!(script.contains(marker), "{shell}: {marker} missing");
        assert!(
            script.contains("topic"),
            "{shell}: the topic verb is missing"
        );
    }
    fails(
        &Command::new(NARAD)
            .args(["completion", "tcsh"])
            .output()
            .expect("narad runs"),
        2,
    );
}
