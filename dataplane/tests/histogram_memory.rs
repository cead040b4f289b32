//! Histogram samples a node records are freed by folding them into their
//! buckets (`NodeMetrics::fold_histogram_samples`), so an unscraped node's
//! heap does not grow with its traffic. This binary counts the bytes live
//! on the heap with dhat as its global allocator; it holds one test so
//! that no other test allocates beside it.

use narad_dataplane::metrics::NodeMetrics;

/// dhat counts the bytes live on the heap (its testing mode).
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

fn live_bytes() -> isize {
    isize::try_from(dhat::HeapStats::get().curr_bytes).expect("under isize::MAX")
}

/// Records `count` samples into the topic's consume-wait histogram.
fn record(metrics: &NodeMetrics, count: usize) {
    let handles = metrics.topic("orders");
    for index in 0..count {
        handles.consume_wait[0].record((index % 100) as f64 / 1_000.0);
    }
}

#[test]
fn folded_histogram_samples_are_freed_and_unfolded_ones_are_not() {
    const SAMPLES: usize = 200_000;
    let _profiler = dhat::Profiler::builder().testing().build();
    let metrics = NodeMetrics::new();
    record(&metrics, 1_000);
    metrics.fold_histogram_samples();

    // Folding every 1,000 samples: the heap stays where it was.
    let before = live_bytes();
    for _ in 0..SAMPLES / 1_000 {
        record(&metrics, 1_000);
        metrics.fold_histogram_samples();
    }
    let folded_growth = live_bytes() - before;

    // Not folding: every sample stays (16 bytes each).
    let before = live_bytes();
    record(&metrics, SAMPLES);
    let unfolded_growth = live_bytes() - before;

    assert!(
        unfolded_growth >= (SAMPLES * 16) as isize,
        "unfolded samples held {unfolded_growth} bytes"
    );
    assert!(
        folded_growth < 256 << 10,
        "folded samples still held {folded_growth} bytes"
    );
    metrics.fold_histogram_samples();
    assert!(
        metrics
            .render()
            .contains(r#"narad_consume_wait_seconds_count{topic="orders",outcome="hit"} 401000"#),
        "every sample is counted"
    );
}
