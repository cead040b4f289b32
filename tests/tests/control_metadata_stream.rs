//! A metadata stream subscriber receives every change, in order, across a
//! leader change (SIGKILL of the leader it may be reading from).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use narad_controlplane::node::ControlClient;
use narad_meta::follow::AppliedOutcome;
use narad_meta::follow::Follower as MetadataReplica;
use narad_meta::{Actor, Command, CreateTopic, IncarnationId};
use narad_tests::cluster::ControlCluster;

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

/// What the subscriber saw: every created topic with its log index, in the
/// order the changes arrived.
type Seen = Arc<Mutex<Vec<(u64, String)>>>;

/// Follows the stream from `nodes`, moving to the next node on any error.
async fn subscribe(
    client: ControlClient,
    nodes: Vec<SocketAddr>,
    seen: Seen,
    replica: Arc<Mutex<MetadataReplica>>,
) {
    let mut node = 0;
    loop {
        let after = replica.lock().expect("replica").applied_index();
        match client.fetch_metadata(nodes[node], after, 500).await {
            Ok(batch) => {
                let changes = replica
                    .lock()
                    .expect("replica")
                    .apply(&batch)
                    .expect("batch applies");
                let mut seen = seen.lock().expect("seen");
                for change in changes {
                    // A retried create that an earlier attempt committed is
                    // refused: only applied creates count.
                    if let (Command::CreateTopic(create), AppliedOutcome::Applied) =
                        (change.command, change.outcome)
                    {
                        seen.push((change.index, create.name));
                    }
                }
            }
            Err(_) => node = (node + 1) % nodes.len(),
        }
    }
}

async fn create_through(cluster: &ControlCluster, index: usize, name: &str) {
    let addr = cluster.nodes[index].cluster_addr;
    cluster
        .wait_until(&format!("create {name}"), || async {
            cluster
                .client()
                .propose(addr, create_topic(name))
                .await
                .ok()
                .map(|_| ())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_receives_every_change_in_order_across_a_leader_change() {
    let mut cluster = ControlCluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    // Read from the leader first, so its death moves the subscriber.
    let mut nodes: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.cluster_addr).collect();
    nodes.rotate_left(leader);
    let seen: Seen = Arc::default();
    let replica = Arc::new(Mutex::new(MetadataReplica::new()));
    let subscriber = tokio::spawn(subscribe(
        cluster.client().clone(),
        nodes,
        seen.clone(),
        replica.clone(),
    ));
    let names: Vec<String> = (0..10).map(|i| format!("stream-{i}")).collect();
    for name in &names[..5] {
        create_through(&cluster, leader, name).await;
    }
    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader().await;
    for name in &names[5..] {
        create_through(&cluster, new_leader, name).await;
    }
    cluster
        .wait_until("the subscriber to see all ten creates", || async {
            (seen.lock().expect("seen").len() >= names.len()).then_some(())
        })
        .await;
    subscriber.abort();
    let seen = seen.lock().expect("seen").clone();
    let seen_names: Vec<&str> = seen.iter().map(|(_, name)| name.as_str()).collect();
    assert_eq!(
        seen_names,
        names.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(
        seen.windows(2).all(|pair| pair[0].0 < pair[1].0),
        "indexes strictly increase: {seen:?}"
    );
    let replica = replica.lock().expect("replica");
    for name in &names {
        assert!(
            replica.metastore().topic(name).is_some(),
            "{name} in the replica"
        );
    }
}
