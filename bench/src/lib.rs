//! Benchmarks for Narad.
//!
//! Every figure a benchmark here reports stands next to a baseline measured in
//! the same run (raw fdatasync latency, raw sequential bandwidth, an HTTP
//! handler that does nothing), because the machines it runs on are shared and
//! noisy. Results are written as JSON under `target/bench/` with a PNG chart.
//!
//! Status: the harness grows with the components it measures.
