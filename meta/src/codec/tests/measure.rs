//! Size and speed of a metastore of 1,000 topics in the binary state codec
//! against the serde JSON snapshots of earlier builds. Ignored by default:
//! run with `cargo test -p narad-controlplane -- --ignored --nocapture
//! state_of_1000_topics`. Sizes are deterministic; times depend on the
//! machine and the build, and are printed, never asserted.

use std::time::Instant;

use bytes::Bytes;

use super::super::{decode_state, encode_state};
use crate::tests::{Store, assign, create_user, grant};
use crate::{GrantAction, Metastore};

const TOPICS: usize = 1_000;
const ROUNDS: u32 = 20;

/// 1,000 topics of 3 partitions placed on 3 members, root and 10 users.
fn cluster_of_1000_topics() -> Metastore {
    let mut store = Store::new();
    for member in ["node-1", "node-2", "node-3"] {
        store.member(member);
    }
    for i in 0..TOPICS {
        let name = format!("bench-topic-{i:04}");
        store.ok(crate::tests::create_cmd(&name));
        store.ok(assign(
            &name,
            &[(0, "node-1"), (1, "node-2"), (2, "node-3")],
        ));
    }
    let root = store.root();
    for i in 0..10 {
        let grants = vec![grant(GrantAction::Produce, &["bench-topic-*"])];
        store.ok(create_user(root.clone(), &format!("user-{i}"), grants));
    }
    store.meta
}

/// Mean microseconds of `run` over [`ROUNDS`] rounds.
fn mean_us(mut run: impl FnMut()) -> u128 {
    let start = Instant::now();
    for _ in 0..ROUNDS {
        run();
    }
    start.elapsed().as_micros() / u128::from(ROUNDS)
}

#[test]
#[ignore = "a measurement: prints sizes and times"]
fn state_of_1000_topics() {
    let state = cluster_of_1000_topics();
    let binary = encode_state(&state);
    let json = Bytes::from(serde_json::to_vec(&state).expect("serializes"));
    assert_eq!(decode_state(binary.clone()).expect("binary"), state);
    assert_eq!(decode_state(json.clone()).expect("json"), state);
    let binary_encode = mean_us(|| drop(encode_state(&state)));
    let json_encode = mean_us(|| drop(serde_json::to_vec(&state)));
    let binary_decode = mean_us(|| drop(decode_state(binary.clone())));
    let json_decode = mean_us(|| drop(decode_state(json.clone())));
    println!(
        "metastore of {TOPICS} topics: binary {} bytes, JSON {} bytes ({:.1} %)",
        binary.len(),
        json.len(),
        100.0 * binary.len() as f64 / json.len() as f64
    );
    println!(
        "encode: binary {binary_encode} us, JSON {json_encode} us; \
         decode: binary {binary_decode} us, JSON {json_decode} us \
         (mean of {ROUNDS}, {} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
}
