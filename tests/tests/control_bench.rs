//! A short measurement, not a test (ignored; run it by hand):
//! `cargo test -p narad-tests --test control_bench -- --ignored --nocapture`.
//!
//! Three `narad control` processes on loopback. Reported with a baseline from
//! the same run: the round trip of a local read (`ReadLocal`) on the leader,
//! which is the transport and the handler without Raft.
//! - creates per second through the leader, one at a time and 16 at once;
//! - metadata stream fan-out: from a create's answer to each of three
//!   subscribers (one per node) holding it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use narad_controlplane::node::ControlClient;
use narad_meta::follow::Follower as MetadataReplica;
use narad_meta::{Actor, Command, CreateTopic, IncarnationId};
use narad_tests::cluster::ControlCluster;
use tokio::sync::watch;

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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

fn report(what: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let p50 = percentile(&samples, 0.5);
    println!(
        "{what}: n={} p50={:?} p99={:?} max={:?}",
        samples.len(),
        p50,
        percentile(&samples, 0.99),
        samples[samples.len() - 1]
    );
    p50
}

/// Follows the stream from `addr` and publishes the replica's index.
async fn subscriber(client: ControlClient, addr: SocketAddr, applied: watch::Sender<u64>) {
    let mut replica = MetadataReplica::new();
    loop {
        if let Ok(batch) = client
            .fetch_metadata(addr, replica.applied_index(), 1_000)
            .await
            && replica.apply(&batch).is_ok()
        {
            applied.send_replace(replica.applied_index());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn control_plane_create_rate_and_stream_fanout() {
    const ROUNDS: usize = 200;
    let cluster = ControlCluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let addr = cluster.nodes[leader].cluster_addr;
    let client = cluster.client().clone();

    let mut baseline = Vec::new();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        client.status(addr).await.expect("status");
        baseline.push(start.elapsed());
    }
    let base = report("baseline ReadLocal round trip on the leader", baseline);

    let mut creates = Vec::new();
    let started = Instant::now();
    for i in 0..ROUNDS {
        let start = Instant::now();
        client
            .propose(addr, create_topic(&format!("seq-{i}")))
            .await
            .expect("create");
        creates.push(start.elapsed());
    }
    let sequential_rate = ROUNDS as f64 / started.elapsed().as_secs_f64();
    let create = report("create through the leader, one at a time", creates);
    println!(
        "sequential creates/s: {sequential_rate:.0}; p50 ratio to baseline: {:.1}",
        create.as_secs_f64() / base.as_secs_f64()
    );

    let started = Instant::now();
    let tasks: Vec<_> = (0..16)
        .map(|worker| {
            let client = client.clone();
            tokio::spawn(async move {
                for i in 0..ROUNDS / 16 {
                    client
                        .propose(addr, create_topic(&format!("par-{worker}-{i}")))
                        .await
                        .expect("create");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("worker");
    }
    let parallel = (ROUNDS / 16 * 16) as f64 / started.elapsed().as_secs_f64();
    println!("creates/s with 16 proposers: {parallel:.0}");

    let watchers: Vec<watch::Receiver<u64>> = cluster
        .nodes
        .iter()
        .map(|node| {
            let (sender, receiver) = watch::channel(0);
            tokio::spawn(subscriber(client.clone(), node.cluster_addr, sender));
            receiver
        })
        .collect();
    let watchers = Arc::new(watchers);
    let mut fanout = Vec::new();
    for i in 0..50 {
        let applied = client
            .propose(addr, create_topic(&format!("fan-{i}")))
            .await
            .expect("create");
        let answered = Instant::now();
        for watcher in watchers.iter() {
            let mut watcher = watcher.clone();
            watcher
                .wait_for(|index| *index >= applied.index)
                .await
                .expect("subscriber runs");
            fanout.push(answered.elapsed());
        }
    }
    report(
        "stream fan-out, create answered to subscriber holding it (3 subscribers)",
        fanout,
    );
}
