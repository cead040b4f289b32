//! The partition logs this node owns, opened on first use.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use narad_disk::Disk;
use narad_plog::{LogConfig, LogError, PartitionLog};
use parking_lot::Mutex;

use crate::dispatch::Destination;

/// Where a partition's log lives: `<data>/topics/<topic>/p<5 digits>`.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: u32) -> PathBuf {
    data_dir
        .join("topics")
        .join(topic)
        .join(format!("p{partition:05}"))
}

#[derive(Debug)]
struct OpenLog {
    incarnation: Option<Arc<str>>,
    log: Arc<PartitionLog>,
}

/// Open partition logs, keyed by destination, each remembering the topic
/// incarnation it was opened for.
#[derive(Debug)]
pub struct LocalLogs {
    disk: Arc<dyn Disk>,
    data_dir: PathBuf,
    config: LogConfig,
    open: Mutex<HashMap<Destination, OpenLog>>,
}

impl LocalLogs {
    /// Logs under `data_dir` on `disk`.
    pub fn new(disk: Arc<dyn Disk>, data_dir: impl Into<PathBuf>, config: LogConfig) -> Self {
        Self {
            disk,
            data_dir: data_dir.into(),
            config,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The log of `destination` for the live `incarnation`, opened (or
    /// recovered) on first use. A log opened for another incarnation is
    /// closed and opened again.
    ///
    /// # Errors
    /// As [`PartitionLog::open`].
    pub fn resolve(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
    ) -> Result<Arc<PartitionLog>, LogError> {
        let mut open = self.open.lock();
        if let Some(entry) = open.get(destination) {
            if entry.incarnation.as_ref() == incarnation {
                return Ok(Arc::clone(&entry.log));
            }
            // A delete and recreate under the same name. Quarantining the
            // old incarnation's directory is not built yet: the log is
            // reopened in place.
            tracing::warn!(%destination, "partition log reopened for a new topic incarnation");
            if let Some(stale) = open.remove(destination)
                && let Err(error) = stale.log.close()
            {
                tracing::warn!(%destination, %error, "closing the stale partition log failed");
            }
        }
        let dir = partition_dir(&self.data_dir, &destination.topic, destination.partition);
        let log = Arc::new(PartitionLog::open(
            Arc::clone(&self.disk),
            &dir,
            self.config.clone(),
        )?);
        open.insert(
            destination.clone(),
            OpenLog {
                incarnation: incarnation.cloned(),
                log: Arc::clone(&log),
            },
        );
        Ok(log)
    }

    /// The open log of `destination`, if any (reads, tests).
    pub fn get(&self, destination: &Destination) -> Option<Arc<PartitionLog>> {
        self.open
            .lock()
            .get(destination)
            .map(|entry| Arc::clone(&entry.log))
    }

    /// Closes every open log (writes each `hwm` file).
    pub fn close_all(&self) {
        let open = std::mem::take(&mut *self.open.lock());
        for (destination, entry) in open {
            if let Err(error) = entry.log.close() {
                tracing::warn!(%destination, %error, "closing a partition log failed");
            }
        }
    }
}
