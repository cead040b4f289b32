//! Three `narad control` processes on loopback: election, replication
//! through any node, failover after SIGKILL, restart, and a joining node.

use std::time::{SystemTime, UNIX_EPOCH};

use narad_controlplane::node::wire::{ConfirmQuestion, MemberReport};
use narad_meta::follow::AppliedOutcome;
use narad_meta::{Actor, Command, CreateTopic, DeleteTopic, IncarnationId};
use narad_tests::cluster::{ControlCluster, http_get};

fn create_topic(name: &str) -> Command {
    let created_at_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64;
    Command::CreateTopic(CreateTopic::named(
        Actor::SecurityOff,
        name,
        IncarnationId::mint(&mut rand::rng()),
        created_at_ms,
    ))
}

/// Creates `name` through the node at `index`, retrying while the cluster
/// has no leader (an election in progress answers 503).
async fn create_through(cluster: &ControlCluster, index: usize, name: &str) -> u64 {
    let addr = cluster.nodes[index].cluster_addr;
    let what = format!("create {name} through node {}", index + 1);
    cluster
        .wait_until(&what, || async {
            let applied = cluster
                .client()
                .propose(addr, create_topic(name))
                .await
                .ok()?;
            match &applied.outcome {
                AppliedOutcome::Applied => {}
                // An earlier attempt whose answer was lost (an election,
                // a timeout) committed it: names are unique per test.
                AppliedOutcome::Refused {
                    status: 409,
                    message,
                } if message == "topic already exists" => {}
                other => panic!("create {name}: {other:?}"),
            }
            Some(applied.index)
        })
        .await
}

/// Waits until every running node's replica has topic `name`.
async fn wait_visible_everywhere(cluster: &ControlCluster, name: &str) {
    for node in cluster.nodes.iter().filter(|node| node.is_running()) {
        let what = format!("topic {name} on node {}", node.id);
        cluster
            .wait_until(&what, || async {
                let (topic, _) = cluster.client().topic(node.cluster_addr, name).await.ok()?;
                topic.map(|_| ())
            })
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_one_leader_and_all_turn_ready() {
    let cluster = ControlCluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let statuses = cluster.statuses().await;
    assert_eq!(
        statuses.iter().filter(|(_, s)| s.state == "leader").count(),
        1
    );
    assert!(statuses.iter().all(|(_, s)| s.voters == vec![1, 2, 3]));
    for node in &cluster.nodes {
        cluster
            .wait_until("/readyz 200", || async {
                let (code, _) = http_get(node.http_addr, "/readyz").await;
                (code == 200).then_some(())
            })
            .await;
    }
    let (code, body) = http_get(cluster.nodes[leader].http_addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        body.contains("narad_raft_state{state=\"leader\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("narad_colocated_child_partitions 0"),
        "{body}"
    );
    // The leader's heartbeats to its followers are its calls to peers.
    let appends_ok = body
        .lines()
        .find_map(|line| {
            line.strip_prefix(
                r#"narad_cluster_rpc_requests_total{op="raft_append_entries",outcome="ok"} "#,
            )
        })
        .and_then(|value| value.parse::<f64>().ok());
    assert!(appends_ok.is_some_and(|count| count >= 1.0), "{body}");
    assert!(
        body.contains(
            r#"narad_cluster_rpc_request_seconds_bucket{op="raft_append_entries",le="0.001"}"#
        ),
        "a histogram with the call buckets: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_through_a_follower_is_visible_on_every_node() {
    let cluster = ControlCluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let follower = (leader + 1) % 3;
    let index = create_through(&cluster, follower, "orders").await;
    // Answered only after the answering follower applied it.
    let (topic, applied) = cluster
        .client()
        .topic(cluster.nodes[follower].cluster_addr, "orders")
        .await
        .expect("follower answers");
    assert!(topic.is_some());
    assert!(applied >= index);
    wait_visible_everywhere(&cluster, "orders").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_elects_another_and_creates_keep_working() {
    let mut cluster = ControlCluster::start(3).await;
    let old_leader = cluster.wait_for_leader().await;
    create_through(&cluster, old_leader, "before").await;
    cluster.kill(old_leader);
    let new_leader = cluster.wait_for_leader().await;
    assert_ne!(new_leader, old_leader);
    let survivor = (0..3).find(|&i| i != old_leader).expect("a survivor");
    create_through(&cluster, survivor, "after").await;
    wait_visible_everywhere(&cluster, "before").await;
    wait_visible_everywhere(&cluster, "after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_cluster_keeps_every_committed_change() {
    let mut cluster = ControlCluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let names: Vec<String> = (0..5).map(|i| format!("kept-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        create_through(&cluster, (leader + i) % 3, name).await;
    }
    for index in 0..3 {
        cluster.kill(index);
    }
    for index in 0..3 {
        cluster.spawn(index);
    }
    cluster.wait_for_leader().await;
    for name in &names {
        wait_visible_everywhere(&cluster, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_joins_as_a_learner_and_is_promoted_to_voter() {
    let mut cluster = ControlCluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    create_through(&cluster, leader, "seen-by-joiner").await;
    let joiner = cluster.add_joiner();
    let addr = cluster.nodes[joiner].cluster_addr;
    cluster
        .wait_until("node 4 a voter in its own view", || async {
            let status = cluster.client().status(addr).await.ok()?;
            status.voters.contains(&4).then_some(())
        })
        .await;
    wait_visible_everywhere(&cluster, "seen-by-joiner").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_confirmation_through_a_follower_sees_a_delete_committed_before_it() {
    let cluster = ControlCluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.nodes[(leader + 1) % 3].cluster_addr;
    create_through(&cluster, leader, "doomed").await;
    let (topic, _) = cluster
        .client()
        .topic(cluster.nodes[leader].cluster_addr, "doomed")
        .await
        .expect("leader answers");
    let id = topic.expect("created").id;
    let question = ConfirmQuestion::Incarnation {
        name: "doomed".into(),
        id: id.clone(),
    };
    let before = cluster
        .client()
        .confirm(follower, question.clone())
        .await
        .expect("confirmed");
    assert!(before.current);
    let delete = Command::DeleteTopic(DeleteTopic {
        actor: Actor::SecurityOff,
        name: "doomed".into(),
        expected_id: Some(id),
    });
    let deleted = cluster
        .client()
        .propose(cluster.nodes[leader].cluster_addr, delete)
        .await
        .expect("delete committed");
    assert_eq!(deleted.outcome, AppliedOutcome::Applied);
    let after = cluster
        .client()
        .confirm(follower, question)
        .await
        .expect("confirmed");
    assert!(!after.current, "the incarnation is gone");
    assert!(after.read_index >= deleted.index);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_behind_a_compacted_log_is_sent_a_snapshot() {
    let mut cluster = ControlCluster::start_with(
        3,
        &[
            "--raft-snapshot-threshold",
            "4",
            "--raft-trailing-logs",
            "0",
        ],
    )
    .await;
    let leader = cluster.wait_for_leader().await;
    for i in 0..12 {
        create_through(&cluster, leader, &format!("compacted-{i}")).await;
    }
    let leader_addr = cluster.nodes[leader].cluster_addr;
    cluster
        .wait_until("the leader to purge its log behind a snapshot", || async {
            let status = cluster.client().status(leader_addr).await.ok()?;
            (status.purged_index > 1).then_some(())
        })
        .await;
    let joiner = cluster.add_joiner();
    let addr = cluster.nodes[joiner].cluster_addr;
    cluster
        .wait_until("node 4 a voter holding a snapshot", || async {
            let status = cluster.client().status(addr).await.ok()?;
            (status.voters.contains(&4) && status.snapshot_index > 0).then_some(())
        })
        .await;
    for i in 0..12 {
        wait_visible_everywhere(&cluster, &format!("compacted-{i}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_controller_places_a_new_topic_on_a_registered_data_node() {
    let cluster = ControlCluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.nodes[(leader + 1) % 3].cluster_addr;
    let register = MemberReport::Register {
        id: "data-1".into(),
        http_addr: "127.0.0.1:1".into(),
        rpc_addr: "127.0.0.1:2".into(),
    };
    let applied = cluster
        .client()
        .report_member(follower, register)
        .await
        .expect("registered through a follower");
    assert_eq!(applied.outcome, AppliedOutcome::Applied);
    let heartbeat = MemberReport::Heartbeat {
        id: "data-1".into(),
    };
    cluster
        .client()
        .report_member(follower, heartbeat)
        .await
        .expect("heartbeat through a follower");
    create_through(&cluster, leader, "placed").await;
    cluster
        .wait_until("every partition of placed owned by data-1", || async {
            let owners = cluster.client().owners(follower, "placed").await.ok()?;
            (!owners.is_empty() && owners.iter().all(|o| o.as_deref() == Some("data-1")))
                .then_some(())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secured_cluster_seeds_its_root_admin_once_with_a_password_logged_once() {
    const LOGGED: &str = "root admin created with a generated password";
    let mut cluster = ControlCluster::start_with(3, &["--security-enabled", "true"]).await;
    let leader = cluster.wait_for_leader().await;
    let addr = cluster.nodes[(leader + 1) % 3].cluster_addr;
    cluster
        .wait_until("the root admin on a follower", || async {
            let users = cluster.client().usernames(addr).await.ok()?;
            (users == vec!["admin".to_owned()]).then_some(())
        })
        .await;
    cluster
        .wait_until("a leader to log the generated password", || async {
            let logged = cluster.nodes.iter().any(|node| node.log().contains(LOGGED));
            logged.then_some(())
        })
        .await;
    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader().await;
    create_through(&cluster, new_leader, "after-seed").await;
    let logged: usize = cluster
        .nodes
        .iter()
        .map(|node| node.log().matches(LOGGED).count())
        .sum();
    assert_eq!(logged, 1, "the generated password is logged exactly once");
    let users = cluster
        .client()
        .usernames(cluster.nodes[new_leader].cluster_addr)
        .await
        .expect("new leader answers");
    assert_eq!(users, vec!["admin".to_owned()]);
}
