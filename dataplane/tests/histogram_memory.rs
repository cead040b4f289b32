//! Histogram samples a node records are freed by folding them into their
//! buckets (`NodeMetrics::fold_histogram_samples`), so an unscraped node's
//! heap does not grow with its traffic. This binary counts the bytes live
//! on the heap with its own global allocator; it holds one test so that no
//! other test allocates beside it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use narad_dataplane::metrics::NodeMetrics;

/// The system allocator, counting the bytes it has handed out and not
/// taken back.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call goes to `System` with the caller's layout; the
// counter only adds and subtracts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
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
