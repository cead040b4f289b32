//! `narad` on a terminal (a pseudo-terminal): the progress bar of a long
//! publish and the confirmation prompt of `topic rm`.

use rexpect::process::WaitStatus;
use rexpect::session::{PtySession, spawn_command};

use crate::support::{exits, ok, shared};

/// Longest a terminal session waits for an expected text.
const EXPECT_TIMEOUT_MS: u64 = 30_000;

fn on_terminal(args: &[&str]) -> PtySession {
    let mut command = shared().narad_inheriting();
    command.args(args).env("TERM", "xterm");
    spawn_command(command, Some(EXPECT_TIMEOUT_MS)).expect("narad starts on a terminal")
}

fn exit_code(session: &mut PtySession) -> i32 {
    match session.process().wait().expect("narad exits") {
        WaitStatus::Exited(_, code) => code,
        other => panic!("narad ended with {other:?}"),
    }
}

#[test]
fn a_long_publish_draws_a_progress_bar() {
    let server = shared();
    ok(&server.run(&["topic", "add", "tty-progress"]));
    let mut session = on_terminal(&[
        "pub",
        "tty-progress",
        "tick",
        "--count",
        "300",
        "--rate",
        "400",
    ]);
    session
        .exp_string("/300 messages")
        .expect("the progress bar shows the count");
    session
        .exp_regex(r"messages  [0-9]+ msg/s  eta")
        .expect("the rate is in whole messages a second");
    session
        .exp_string("published 300 messages to tty-progress")
        .expect("the summary follows");
    assert_eq!(exit_code(&mut session), 0);
}

#[test]
fn rm_asks_and_keeps_the_topic_unless_told_yes() {
    let server = shared();
    ok(&server.run(&["topic", "add", "tty-rm"]));
    let mut session = on_terminal(&["topic", "rm", "tty-rm"]);
    session
        .exp_string("Delete topic tty-rm and all its messages?")
        .expect("the prompt");
    session.send_line("n").expect("answer no");
    session.exp_string("topic tty-rm kept").expect("kept");
    assert_eq!(
        exit_code(&mut session),
        2,
        "no confirmation is exit status 2"
    );
    exits(&server.run(&["topic", "info", "tty-rm"]), 0);

    let mut session = on_terminal(&["topic", "rm", "tty-rm"]);
    session.exp_string("[y/N]").expect("the prompt");
    session.send_line("y").expect("answer yes");
    session.exp_string("topic tty-rm deleted").expect("deleted");
    assert_eq!(exit_code(&mut session), 0);
    exits(&server.run(&["topic", "info", "tty-rm"]), 1);
}
