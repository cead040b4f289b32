//! What the benchmark asks the cluster about its topic and does to it
//! outside the load: create it, fill one partition, describe where each
//! partition lives and how large it is, wait for the ingress backlogs to
//! drain, read the move metrics of a data node.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use narad_bench::baseline::drop_cached_pages;
use narad_bench::cluster::wait_assigned;
use narad_bench::http::{Connection, http_request, pinned_batch_produce_request};

/// Bytes each fill message is stored as (a JSON string payload, quotes
/// included): large, so the fill is quick and its records few.
pub(crate) const FILL_MESSAGE_BYTES: usize = 10_000;
/// Messages per fill request: a batch produce's most.
pub(crate) const FILL_BATCH: usize = 100;
/// Fill requests in flight at once.
const FILL_CONNECTIONS: usize = 4;
/// The most a batch produce body may hold (wire contract §4.2).
const BATCH_BODY_BYTES_MAX: usize = 1 << 20;
// A fill request's body: every message's payload and its
// `{"payload":,"partition":N}` frame (under 40 bytes with commas), and the
// `{"messages":[]}` around them.
const _: () = assert!(FILL_BATCH * (FILL_MESSAGE_BYTES + 40) + 16 <= BATCH_BODY_BYTES_MAX);
/// How long the ingress backlogs may take to drain after the fill.
const DRAIN_MAX: Duration = Duration::from_secs(300);

/// One partition as `GET /v1/topics/{topic}` describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PartitionStats {
    /// The owner's node id (`""` when unassigned).
    pub(crate) owner: String,
    /// Bytes of its segments.
    pub(crate) size_bytes: u64,
    /// The exclusive upper bound of committed offsets.
    pub(crate) high_watermark: u64,
    /// Whether the owner answered with real numbers (`"ok"`).
    pub(crate) available: bool,
}

/// Creates `topic` with `partitions` partitions through `addrs[0]` and
/// waits until every one of `addrs` sees them all assigned.
///
/// # Errors
/// When the create is not answered `201`, or the partitions are not
/// assigned in time.
pub(crate) async fn create_topic(
    addrs: &[SocketAddr],
    topic: &str,
    partitions: usize,
) -> io::Result<()> {
    let body = format!(
        "{{\"name\":\"{topic}\",\"partitions\":{partitions},\"visibility_timeout_ms\":30000}}"
    );
    let request = http_request("POST", "/v1/topics", "application/json", body.as_bytes());
    let response = Connection::open(addrs[0]).await?.send(&request).await?;
    if response.status != 201 {
        return Err(io::Error::other(format!(
            "creating {topic} answered {}: {}",
            response.status,
            String::from_utf8_lossy(&response.body)
        )));
    }
    for addr in addrs {
        wait_assigned(*addr, topic, partitions).await?;
    }
    Ok(())
}

/// Every partition of `topic` as `addr` describes it, in index order.
///
/// # Errors
/// When `addr` does not answer `200` with partition stats.
pub(crate) async fn describe(addr: SocketAddr, topic: &str) -> io::Result<Vec<PartitionStats>> {
    let request = http_request(
        "GET",
        &format!("/v1/topics/{topic}"),
        "application/json",
        b"",
    );
    let response = Connection::open(addr).await?.send(&request).await?;
    if response.status != 200 {
        return Err(io::Error::other(format!(
            "describing {topic} answered {}",
            response.status
        )));
    }
    let described: serde_json::Value =
        serde_json::from_slice(&response.body).map_err(io::Error::other)?;
    let entries = described["partition_stats"].as_array().ok_or_else(|| {
        io::Error::other(format!("{topic} was described without partition_stats"))
    })?;
    let mut partitions: Vec<(u64, PartitionStats)> = entries
        .iter()
        .map(|entry| {
            let status = entry["status"].as_str().unwrap_or("");
            let stats = PartitionStats {
                owner: entry["owner_node"].as_str().unwrap_or("").to_owned(),
                size_bytes: entry["size_bytes"].as_u64().unwrap_or(0),
                high_watermark: entry["high_watermark"].as_u64().unwrap_or(0),
                available: status.is_empty() || status == "ok",
            };
            (entry["index"].as_u64().unwrap_or(u64::MAX), stats)
        })
        .collect();
    partitions.sort_by_key(|(index, _)| *index);
    Ok(partitions.into_iter().map(|(_, stats)| stats).collect())
}

/// The owners of `partitions`, as `["1", "2", ...]`.
pub(crate) fn owners(partitions: &[PartitionStats]) -> Vec<String> {
    partitions
        .iter()
        .map(|partition| partition.owner.clone())
        .collect()
}

/// What filling a partition took.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Filled {
    /// Messages answered `202`.
    pub(crate) messages: u64,
    /// From the first request to the last answer.
    pub(crate) accepted_after: Duration,
}

/// Produces at least `bytes` of [`FILL_MESSAGE_BYTES`]-byte messages to
/// `partition` of `topic` through `addr`, in batch produces of
/// [`FILL_BATCH`], [`FILL_CONNECTIONS`] at a time.
///
/// # Errors
/// When a connection fails or a batch is answered anything but `202`.
pub(crate) async fn fill(
    addr: SocketAddr,
    topic: &str,
    partition: u32,
    bytes: u64,
) -> io::Result<Filled> {
    let batch_bytes = (FILL_BATCH * FILL_MESSAGE_BYTES) as u64;
    let batches = bytes.div_ceil(batch_bytes);
    let request = Arc::new(pinned_batch_produce_request(
        topic,
        FILL_BATCH,
        FILL_MESSAGE_BYTES,
        partition,
    ));
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(FILL_CONNECTIONS);
    for _ in 0..FILL_CONNECTIONS {
        let mut connection = Connection::open(addr).await?;
        let (request, next) = (Arc::clone(&request), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < batches {
                let response = connection.send(&request).await?;
                if response.status != 202 {
                    return Err(io::Error::other(format!(
                        "a fill batch was answered {}: {}",
                        response.status,
                        String::from_utf8_lossy(&response.body)
                    )));
                }
            }
            io::Result::Ok(())
        }));
    }
    for task in tasks {
        task.await.map_err(io::Error::other)??;
    }
    Ok(Filled {
        messages: batches * FILL_BATCH as u64,
        accepted_after: started.elapsed(),
    })
}

/// Waits until every node of `addrs` has committed everything it accepted
/// (`narad_ingress_dispatch_backlog_records` is 0).
///
/// # Errors
/// When a node does not answer, or a backlog is left after [`DRAIN_MAX`].
pub(crate) async fn wait_drained(addrs: &[SocketAddr]) -> io::Result<()> {
    let started = Instant::now();
    for addr in addrs {
        while metric(*addr, "narad_ingress_dispatch_backlog_records").await? != Some(0.0) {
            if started.elapsed() > DRAIN_MAX {
                return Err(io::Error::other(format!(
                    "{addr}'s dispatch backlog did not drain within {DRAIN_MAX:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The sum of every series of metric `name` on `addr`'s `/metrics`
/// (whatever their labels); `None` when it has none.
///
/// # Errors
/// When `addr` does not answer.
pub(crate) async fn metric(addr: SocketAddr, name: &str) -> io::Result<Option<f64>> {
    let request = http_request("GET", "/metrics", "text/plain", b"");
    let response = Connection::open(addr).await?.send(&request).await?;
    Ok(metric_sum(&String::from_utf8_lossy(&response.body), name))
}

/// The sum of the series of metric `name` in Prometheus text.
fn metric_sum(text: &str, name: &str) -> Option<f64> {
    narad_bench::metrics::series(text, name)
        .map(|(_, value)| value)
        .reduce(|sum, value| sum + value)
}

/// Drops the cached pages of every file of a partition directory, so the
/// move reads the partition from the disk as the raw read baseline does
/// (see [`drop_cached_pages`]: it syncs first, and reaches only this
/// kernel's cache). Returns the files' bytes.
///
/// # Errors
/// When the directory cannot be listed or a file cannot be opened.
pub(crate) fn drop_partition_cache(dir: &Path) -> io::Result<u64> {
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            let file = std::fs::File::open(entry.path())?;
            bytes += file.metadata()?.len();
            drop_cached_pages(&file)?;
        }
    }
    Ok(bytes)
}

/// Reads every file in `dir` back in 1 MiB reads, each file's cached
/// pages dropped first: the sequential read rate of the partition's own
/// files, in MB/s.
///
/// # Errors
/// Any I/O error.
pub(crate) fn read_back_cold(dir: &Path) -> io::Result<f64> {
    let (mut bytes, mut seconds) = (0.0, 0.0);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            let size = entry.metadata()?.len() as f64;
            let mb_per_s = narad_bench::baseline::seq_read_mb_per_s(&entry.path())?;
            if mb_per_s > 0.0 {
                bytes += size;
                seconds += size / 1e6 / mb_per_s;
            }
        }
    }
    Ok(if seconds > 0.0 {
        bytes / 1e6 / seconds
    } else {
        0.0
    })
}

/// Bytes of the files in `dir` now; 0 when it does not exist yet.
pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|entry| entry.ok()?.metadata().ok())
        .filter(std::fs::Metadata::is_file)
        .map(|metadata| metadata.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sum_adds_every_series_of_that_name_only() {
        let text = "# TYPE narad_moves_total counter\n\
                    narad_moves_total{outcome=\"completed\"} 1\n\
                    narad_moves_total{outcome=\"force_promoted\"} 2\n\
                    narad_moves_total_x 7\n\
                    narad_moves_inflight 1\n";
        assert_eq!(metric_sum(text, "narad_moves_total"), Some(3.0));
        assert_eq!(metric_sum(text, "narad_moves_inflight"), Some(1.0));
        assert_eq!(metric_sum(text, "narad_moves_blocked"), None);
    }
}
