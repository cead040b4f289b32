//! Which control nodes hold a remote write back, and the refusal's text.

use super::{behind, refusal_message};
use narad_clock::SystemClock;

#[test]
fn nodes_at_or_past_the_version_hold_nothing_back() {
    let reports = [(2, Ok(Some(4))), (3, Ok(Some(9)))];
    assert!(behind(&reports, 4).is_empty());
}

#[test]
fn an_older_version_no_version_or_no_answer_holds_the_write_back() {
    let reports = [
        (2, Ok(Some(3))),
        (3, Ok(None)),
        (4, Err("no answer within 2 s".to_owned())),
        (5, Ok(Some(4))),
    ];
    let behind = behind(&reports, 4);
    let ids: Vec<u64> = behind.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [2, 3, 4]);
    let message = refusal_message(4, &behind);
    assert!(message.contains("command version 4"), "{message}");
    assert!(
        message.contains("control node 2 (decodes command version 3)"),
        "{message}"
    );
    assert!(
        message.contains("control node 3 (reports no command version"),
        "{message}"
    );
    assert!(
        message.contains("control node 4 (its command version is not known: no answer"),
        "{message}"
    );
    assert!(!message.contains("control node 5"), "{message}");
}

/// A leader whose learner (a stand-in serving only status reads) reports
/// no command version refuses a remote write `412` without appending it,
/// still proposes other commands, and proposes the remote write once the
/// learner reports the version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_holds_a_remote_write_until_every_control_node_reports_the_version() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU8, Ordering};

    use narad_meta::follow::AppliedOutcome;
    use narad_meta::{Actor, Command, DeleteRemote, RegisterMember};
    use narad_protocol::{
        ClusterAuth, Inbound, Node, NodeConfig, OperationLimit, Response, Router,
    };
    use openraft::BasicNode;

    use super::super::metrics_tests::{single_node, wait_until};
    use super::super::runtime::ControlNode;
    use super::super::wire::{LocalRead, LocalReadAnswer};
    use crate::network::messages::opcodes;

    // 0: answers as a release before the report.
    let reported = Arc::new(AtomicU8::new(0));
    let answering = Arc::clone(&reported);
    let router = Router::new().route(
        opcodes::READ_LOCAL,
        OperationLimit::messaging(),
        move |inbound: Inbound| {
            let reported = Arc::clone(&answering);
            async move {
                let _: LocalRead = inbound.message()?;
                let version = reported.load(Ordering::Relaxed);
                let status = super::super::wire::Status {
                    node_id: 2,
                    state: "learner".into(),
                    term: 1,
                    leader: Some(1),
                    last_log_index: 0,
                    applied_index: 0,
                    leader_commit_index: 0,
                    snapshot_index: 0,
                    purged_index: 0,
                    voters: vec![1],
                    learners: vec![2],
                    command_version: (version > 0).then_some(version),
                };
                Ok(Response::message(&LocalReadAnswer::Status(status)))
            }
        },
    );
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let stand_in = Node::bind(
        NodeConfig::new(loopback, ClusterAuth::InsecureDevOnly),
        router,
    )
    .expect("bind the stand-in");
    let dir = tempfile::TempDir::new().expect("temporary directory");
    let node = ControlNode::start(single_node(dir.path()), Arc::new(SystemClock::new()))
        .await
        .expect("starts");
    wait_until("the node to lead", || node.status().state == "leader").await;
    node.shared
        .raft
        .add_learner(2, BasicNode::new(stand_in.local_addr().to_string()), false)
        .await
        .expect("learner added");

    let delete = || {
        Command::DeleteRemote(DeleteRemote {
            actor: Actor::User("root".into()),
            name: "dr".into(),
            force: false,
        })
    };
    let before = node.status().last_log_index;
    let refused = node.propose(delete()).await.expect("answered");
    let AppliedOutcome::Refused { status, message } = refused.outcome else {
        panic!("not refused: {refused:?}");
    };
    assert_eq!(status, 412, "{message}");
    assert!(
        message.contains("control node 2 (reports no command version"),
        "{message}"
    );
    assert_eq!(node.status().last_log_index, before, "nothing appended");

    // A command every release applies is not held back.
    let register = Command::RegisterMember(RegisterMember {
        id: "7".into(),
        http_addr: "node-7:http".into(),
        rpc_addr: "node-7:rpc".into(),
        at_ms: 1,
    });
    let applied = node.propose(register).await.expect("answered");
    assert_eq!(applied.outcome, AppliedOutcome::Applied);

    // Reporting an older version still holds it; the current one lets it
    // through to apply, which refuses it on its own terms.
    reported.store(3, Ordering::Relaxed);
    let refused = node.propose(delete()).await.expect("answered");
    assert!(
        matches!(&refused.outcome, AppliedOutcome::Refused { status: 412, message }
            if message.contains("decodes command version 3")),
        "{refused:?}"
    );
    reported.store(narad_meta::codec::COMMAND_VERSION, Ordering::Relaxed);
    let proposed = node.propose(delete()).await.expect("answered");
    assert!(
        matches!(&proposed.outcome, AppliedOutcome::Refused { status, .. } if *status != 412),
        "{proposed:?}"
    );
    assert!(node.status().last_log_index > before);
    node.shutdown().await;
    drop(stand_in);
}
