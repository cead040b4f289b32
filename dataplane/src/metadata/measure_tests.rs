//! What one metadata batch costs a data node with 1,000 topics (each with a
//! small JSON schema, as typed topics have), next to two
//! baselines measured in the same run: cloning the metastore (the floor of
//! any batch: the follower applies a batch to a copy, so a reader never
//! sees half of one) and deriving every topic's view (what a batch cost
//! when the whole metastore was converted on every batch). Ignored by
//! default: run with `cargo test --release -p narad-dataplane -- --ignored
//! --nocapture batch_on_1000_topics`. Times are printed, never asserted.

use std::sync::Arc;
use std::time::Instant;

use narad_meta::codec::encode_command;
use narad_meta::{Actor, AlterTopic, Command, Metastore};
use narad_protocol::metadata::{MetadataBatch, MetadataChange};

use super::MetadataReplica;
use super::view::MetadataView;
use crate::testing::{LOCAL_NODE, create_command, place, register};

const TOPICS: u64 = 1_000;
const ROUNDS: u32 = 50;

/// Mean microseconds of `run` over [`ROUNDS`] rounds; `run` gets the round.
fn mean_us(mut run: impl FnMut(u32)) -> u128 {
    let start = Instant::now();
    for round in 0..ROUNDS {
        run(round);
    }
    start.elapsed().as_micros() / u128::from(ROUNDS)
}

/// A batch at `index` that alters one topic's retention.
fn one_alter(index: u64, round: u32) -> MetadataBatch {
    let name = format!("bench-{:04}", round % 7);
    let alter = Command::AlterTopic(AlterTopic {
        retention_ms: Some(3_600_000 + i64::from(round)),
        ..AlterTopic::named(Actor::SecurityOff, &name, None)
    });
    MetadataBatch {
        applied_index: index,
        leader_commit_index: index,
        snapshot: None,
        changes: vec![MetadataChange {
            index,
            command: encode_command(&alter),
        }],
    }
}

#[test]
#[ignore = "a measurement: prints times"]
fn batch_on_1000_topics() {
    let replica = MetadataReplica::new(LOCAL_NODE);
    register(&replica, LOCAL_NODE);
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "maxLength": 64},
            "amount": {"type": "integer", "minimum": 0},
            "currency": {"enum": ["EUR", "USD", "INR", "GBP"]},
            "lines": {"type": "array", "items": {"type": "object"}}
        },
        "required": ["order_id", "amount"]
    })
    .to_string();
    for i in 0..TOPICS {
        let mut create = create_command(&format!("bench-{i:04}"), 0x1000 + i, 3);
        create.schema = Some(schema.clone());
        place(&replica, create, LOCAL_NODE);
    }
    let view = replica.view();
    let metastore: Arc<Metastore> = Arc::clone(&view.metastore);
    let clone_us = mean_us(|_| drop(Metastore::clone(&metastore)));
    let empty = MetadataView::default();
    let derive_all_us = mean_us(|_| {
        let all = MetadataView::derive(&empty, Arc::clone(&metastore), view.applied_index);
        assert_eq!(all.topics.len() as u64, TOPICS);
    });
    let mut index = view.applied_index;
    let batch_us = mean_us(|round| {
        index += 1;
        replica
            .apply_batch(&one_alter(index, round))
            .expect("the batch applies");
    });
    assert_eq!(replica.view().applied_index, index);
    println!(
        "{TOPICS} topics, one alter per batch (mean of {ROUNDS}, {} build): \
         batch {batch_us} us; baselines: metastore clone {clone_us} us, \
         every topic derived {derive_all_us} us",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
}
