//! `narad topic attach|detach|children` and `topic add --parent/--delay`
//! (spec §1.4) against a real `narad dev --secure`.

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::{fails, ok, shared};

#[test]
fn add_with_parent_creates_a_child_that_receives_the_parents_records() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ch-parent"]));
    let created = ok(&server.run(&["topic", "add", "ch-child", "--parent", "ch-parent"]));
    assert!(created.contains("topic ch-child created"), "{created}");
    let children = ok(&server.run(&["topic", "children", "ch-parent"]));
    assert!(
        children
            .lines()
            .any(|line| line.trim_start().starts_with("ch-child ")),
        "{children}"
    );
    let info = ok(&server.run(&["topic", "info", "ch-child"]));
    assert!(info.contains("role:            child"), "{info}");
    ok(&server.run(&["pub", "ch-parent", "copied"]));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = ok(&server.run(&["sub", "ch-child", "--max", "1", "--idle", "2s", "--raw"]));
        if out == "copied\n" {
            break;
        }
        assert!(Instant::now() < deadline, "the child never got the record");
    }
}

#[test]
fn attach_with_a_delay_lists_it_and_detach_unlinks() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ch-delay-parent", "--retention", "2h"]));
    ok(&server.run(&["topic", "add", "ch-delay-child"]));
    let attached = ok(&server.run(&[
        "topic",
        "attach",
        "ch-delay-parent",
        "ch-delay-child",
        "--delay",
        "15m",
    ]));
    assert!(attached.contains("with a delay of 15m"), "{attached}");
    let children = ok(&server.run(&["topic", "children", "ch-delay-parent"]));
    let row = children
        .lines()
        .find(|line| line.contains("ch-delay-child"))
        .unwrap_or_else(|| panic!("child missing from:\n{children}"));
    assert!(row.contains("15m"), "{row}");
    let json = ok(&server.run(&["topic", "children", "ch-delay-parent", "--json"]));
    let child: serde_json::Value = serde_json::from_str(json.trim()).expect("one JSON line");
    assert_eq!(child["delay_ms"], 900_000);
    ok(&server.run(&["topic", "detach", "ch-delay-parent", "ch-delay-child"]));
    let children = ok(&server.run(&["topic", "children", "ch-delay-parent"]));
    assert!(!children.contains("ch-delay-child"), "{children}");
    let error = fails(
        &server.run(&["topic", "detach", "ch-delay-parent", "ch-delay-child"]),
        1,
    );
    assert!(error.contains("404"), "{error}");
}

#[test]
fn attaching_a_missing_child_is_refused() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ch-lonely"]));
    let error = fails(
        &server.run(&["topic", "attach", "ch-lonely", "ch-nobody"]),
        1,
    );
    assert!(
        error.contains("attach ch-nobody to ch-lonely: server answered 404"),
        "{error}"
    );
    let error = fails(
        &server.run(&["topic", "add", "ch-orphan", "--parent", "ch-none"]),
        1,
    );
    assert!(error.contains("404"), "{error}");
}

#[test]
fn delay_without_parent_is_a_usage_error() {
    let server = shared();
    fails(
        &server.run(&["topic", "add", "ch-usage", "--delay", "1m"]),
        2,
    );
}

#[test]
fn a_remote_attach_to_an_unknown_remote_is_refused_and_creates_nothing() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ch-remote-parent"]));
    let error = fails(
        &server.run(&[
            "topic",
            "attach",
            "ch-remote-parent",
            "ch-remote-stub",
            "--remote",
            "nowhere",
            "--lanes",
            "2",
        ]),
        1,
    );
    assert!(
        error.contains(
            "attach ch-remote-stub to ch-remote-parent on remote nowhere: server answered 404"
        ),
        "{error}"
    );
    fails(&server.run(&["topic", "info", "ch-remote-stub"]), 1);
    let children = ok(&server.run(&["topic", "children", "ch-remote-parent"]));
    assert!(
        children.contains("REMOTE") && children.contains("STATE"),
        "{children}"
    );
}

#[test]
fn remote_flags_need_remote_and_lanes_stay_in_range() {
    let server = shared();
    for flags in [
        &["--lanes", "2"][..],
        &["--dry-run"][..],
        &["--remote", "dr", "--lanes", "9"][..],
        &["--remote", "dr", "--from", "tail"][..],
        &["--remote", "dr", "--delay", "1m"][..],
    ] {
        let mut args = vec!["topic", "attach", "ch-p", "ch-c"];
        args.extend_from_slice(flags);
        fails(&server.run(&args), 2);
    }
}

#[test]
fn pause_resume_and_skip_name_a_local_child_as_no_remote_child() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ch-plain-parent"]));
    ok(&server.run(&[
        "topic",
        "add",
        "ch-plain-child",
        "--parent",
        "ch-plain-parent",
    ]));
    for args in [
        &["topic", "pause", "ch-plain-child", "--reason", "x"][..],
        &["topic", "resume", "ch-plain-child"][..],
        &[
            "topic",
            "skip",
            "ch-plain-child",
            "--partition",
            "0",
            "--offset",
            "1",
        ][..],
    ] {
        let error = fails(&server.run(args), 2);
        assert!(
            error.contains("topic ch-plain-child is not a remote child"),
            "{error}"
        );
    }
}
