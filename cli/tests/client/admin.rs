//! `narad user`, `narad cluster`, `narad server report` and credentials.

use crate::support::{fails, ok, shared};

#[test]
fn a_user_acts_within_its_grants_only() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ad-granted"]));
    let created = ok(&server.run(&[
        "user",
        "add",
        "ad-alice",
        "--user-password",
        "alice-pw",
        "--grant",
        "consume:ad-granted",
    ]));
    assert!(created.contains("user ad-alice created"), "{created}");
    let as_alice = |args: &[&str]| {
        server
            .narad()
            .args(args)
            .args(["-u", "ad-alice", "-p", "alice-pw"])
            .output()
            .expect("narad runs")
    };
    let error = fails(&as_alice(&["pub", "ad-granted", "x"]), 1);
    assert!(error.contains("server answered 403"), "{error}");
    assert!(error.contains("user ad-alice lacks the grant"), "{error}");
    assert!(error.contains("narad user grant"), "{error}");
    ok(&server.run(&[
        "user",
        "grant",
        "ad-alice",
        "--grant",
        "produce:ad-*",
        "--grant",
        "consume:ad-granted",
    ]));
    ok(&as_alice(&["pub", "ad-granted", "x"]));
    let listing = ok(&server.run(&["user", "ls"]));
    let row = listing
        .lines()
        .find(|line| line.contains("ad-alice"))
        .unwrap_or_else(|| panic!("ad-alice missing from:\n{listing}"));
    assert!(
        row.contains("produce:ad-*") && row.contains("consume:ad-granted"),
        "{row}"
    );
    ok(&server.run(&["user", "rm", "ad-alice"]));
    let error = fails(&as_alice(&["topic", "ls"]), 1);
    assert!(error.contains("401"), "{error}");
}

#[test]
fn a_user_without_admin_cannot_manage_users() {
    let server = shared();
    ok(&server.run_with_input(
        &[
            "user",
            "add",
            "ad-bob",
            "--user-password-stdin",
            "--grant",
            "create:bob-*",
        ],
        "bob-pw\n",
    ));
    let output = server
        .narad()
        .args(["user", "ls", "-u", "ad-bob", "-p", "bob-pw"])
        .output()
        .expect("narad runs");
    let error = fails(&output, 1);
    assert!(error.contains("list users: server answered 403"), "{error}");
}

#[test]
fn a_wrong_password_is_refused_with_what_to_check() {
    let server = shared();
    let output = server
        .narad()
        .args(["topic", "ls", "-p", "not-the-password"])
        .output()
        .expect("narad runs");
    let error = fails(&output, 1);
    assert!(error.contains("server answered 401"), "{error}");
    assert!(
        error.contains("check the user (admin) and password"),
        "{error}"
    );
}

#[test]
fn the_password_can_come_from_stdin() {
    let server = shared();
    let mut command = server.narad();
    command.env_remove("NARAD_PASS").env_remove("NARAD_USER");
    let mut child = command
        .args(["topic", "ls", "--password-stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("narad runs");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{}\n", crate::support::ADMIN_PASSWORD).as_bytes())
        .expect("write the password");
    ok(&child.wait_with_output().expect("narad exits"));
}

#[test]
fn cluster_verbs_show_the_dev_nodes_membership() {
    let server = shared();
    let members = ok(&server.run(&["cluster", "members"]));
    let row = members
        .lines()
        .find(|line| line.split_whitespace().next() == Some("1"))
        .unwrap_or_else(|| panic!("no row for data node 1:\n{members}"));
    assert!(row.contains("alive") && row.contains("false"), "{row}");
    let moves = ok(&server.run(&["cluster", "moves"]));
    assert!(
        moves.contains("TOPIC") && moves.contains("BLOCKED"),
        "{moves}"
    );
    assert_eq!(moves.lines().count(), 1, "one node moves nothing:\n{moves}");
    for args in [
        &["cluster", "decommission", "99"][..],
        &["cluster", "decommission", "99", "--cancel"][..],
    ] {
        let error = fails(&server.run(args), 1);
        assert!(
            !error.contains("not supported") && error.contains("404"),
            "{args:?}: {error}"
        );
        assert!(
            error.contains("check the node id (`narad cluster members`"),
            "{args:?}: {error}"
        );
        assert!(!error.contains("topic"), "{args:?}: {error}");
    }
}

#[test]
fn server_report_has_a_row_per_topic() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ad-report", "--partitions", "3"]));
    for n in 0..4 {
        ok(&server.run(&["pub", "ad-report", &format!("r{n}")]));
    }
    // The produce is answered once durable in the ingress; the partition
    // log (what the report counts) follows within moments.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let report = ok(&server.run(&["server", "report"]));
        assert!(
            report.contains("TOPIC") && report.contains("OWNERS"),
            "{report}"
        );
        let row: Vec<String> = report
            .lines()
            .find(|line| line.trim_start().starts_with("ad-report "))
            .unwrap_or_else(|| panic!("ad-report missing from:\n{report}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if row[2] == "4" {
            assert_eq!(row[1], "3", "partitions: {row:?}");
            assert_eq!(row.last().map(String::as_str), Some("standalone"));
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{report}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn user_refusals_point_at_users_not_topics() {
    let server = shared();
    let error = fails(&server.run(&["user", "rm", "ad-nobody"]), 1);
    assert!(error.contains("404"), "{error}");
    assert!(error.contains("`narad user ls`"), "{error}");
    assert!(!error.contains("narad topic"), "{error}");
    let add = ["user", "add", "ad-twice", "--user-password", "twice-pw"];
    ok(&server.run(&add));
    let error = fails(&server.run(&add), 1);
    assert!(error.contains("409"), "{error}");
    assert!(error.contains("`narad user ls`"), "{error}");
    assert!(!error.contains("narad topic"), "{error}");
    let error = fails(&server.run(&["user", "rm", "admin"]), 1);
    assert!(error.contains("cannot delete the root admin"), "{error}");
    assert!(!error.contains("narad user grant"), "{error}");
}

#[test]
fn no_credentials_are_named_as_such() {
    let server = shared();
    let output = server
        .narad()
        .args(["topic", "ls"])
        .env_remove("NARAD_USER")
        .env_remove("NARAD_PASS")
        .output()
        .expect("narad runs");
    let error = fails(&output, 1);
    assert!(error.contains("401"), "{error}");
    assert!(error.contains("no credentials were given"), "{error}");
    assert!(!error.contains("(none)"), "{error}");
}

#[test]
fn the_login_throttle_is_named_as_such() {
    let server = shared();
    ok(&server.run(&["user", "add", "ad-throttled", "--user-password", "right-pw"]));
    let wrong = || {
        server
            .narad()
            .args(["topic", "ls", "-u", "ad-throttled", "-p", "wrong-pw"])
            .output()
            .expect("narad runs")
    };
    let mut error = String::new();
    for _ in 0..10 {
        error = fails(&wrong(), 1);
        if error.contains("429") {
            break;
        }
    }
    assert!(error.contains("429"), "{error}");
    assert!(
        error.contains("too many failed logins as ad-throttled"),
        "{error}"
    );
    assert!(!error.contains("busy"), "{error}");
}
