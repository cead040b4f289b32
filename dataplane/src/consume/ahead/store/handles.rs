//! The bound on held `consumer.ahead` handles: reopening an evicted
//! partition's file, and evicting the least recently touched partition,
//! written out first, to make room.

use std::path::Path;

use narad_disk::{Disk, OpenOptions};
use tracing::debug;

use super::writeout::{flush_one, latch};
use super::{ConsumerStateStore, Inner};
use crate::consume::ahead::format::AHEAD_FILE_NAME;

impl ConsumerStateStore {
    /// Reopens an evicted partition's file within the handle bound (never
    /// creating it: a missing file means the directory was replaced, and
    /// the partition is latched rather than writing into the new one).
    pub(super) fn reopen(&self, inner: &mut Inner, dir: &Path) {
        let needed = inner
            .partitions
            .get(dir)
            .is_some_and(|partition| partition.file.is_none() && !partition.latched);
        if !needed {
            return;
        }
        inner.make_room(&*self.disk, self.config.handles_max - 1, Some(dir));
        let Some(partition) = inner.partitions.get_mut(dir) else {
            return;
        };
        match self
            .disk
            .open(&dir.join(AHEAD_FILE_NAME), OpenOptions::EXISTING)
        {
            Ok(file) => {
                partition.file = Some(file);
                inner.handles_open += 1;
            }
            Err(error) => latch(dir, partition, "reopening consumer.ahead", &error),
        }
    }
}

impl Inner {
    /// Evicts least recently touched partitions (never `spare`) until at
    /// most `keep` handles are held, writing each out before closing it.
    pub(super) fn make_room(&mut self, disk: &dyn Disk, keep: usize, spare: Option<&Path>) {
        while self.handles_open > keep {
            let victim = self
                .partitions
                .iter()
                .filter(|(dir, partition)| partition.file.is_some() && Some(dir.as_path()) != spare)
                .min_by_key(|(_, partition)| partition.last_used)
                .map(|(dir, _)| dir.clone());
            let Some(victim) = victim else {
                return;
            };
            if let Some(partition) = self.partitions.get_mut(&victim) {
                debug!(dir = %victim.display(), "closing consumer.ahead to stay within the handle bound");
                // Only the window already written is made durable here; what
                // the source reports now is written at its next touch.
                flush_one(disk, &victim, partition, None);
                // A closed partition has nothing waiting in its window, or
                // is latched and written no more.
                assert!(
                    partition.latched || !partition.unsynced,
                    "evicted an unsynced window"
                );
                partition.file = None;
                self.handles_open -= 1;
            }
        }
    }

    /// Drops the handles of latched partitions: nothing is written to them.
    pub(super) fn close_latched(&mut self) {
        for partition in self.partitions.values_mut() {
            if partition.latched && partition.file.take().is_some() {
                self.handles_open -= 1;
            }
        }
    }
}
