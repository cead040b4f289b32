//! A topic as the data plane reads it: the metastore's record, plus what
//! the replica derives from it once per change instead of once per request
//! (owners as node numbers, schema documents parsed).

use std::ops::Deref;
use std::sync::Arc;

use narad_meta::{Assignment, RemoteLink, Topic};

use crate::topology::{NodeId, node_of};

/// One schema version with its document parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicSchema {
    /// Version number, from 1.
    pub version: u32,
    /// The JSON Schema document (an object, or `true`).
    pub document: serde_json::Value,
}

/// A topic record and what the data plane derives from it. It reads as the
/// metastore's [`Topic`] (through `Deref`); the fields here are derived.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicMeta {
    record: Topic,
    /// The name, shared cheaply with destinations.
    pub name: Arc<str>,
    /// The incarnation id. The metastore mints one for every topic; the
    /// type is optional because the stages that compare it with WAL
    /// records and partition directories take an optional id (WAL format 1
    /// records carry none).
    pub incarnation_id: Option<Arc<str>>,
    /// The owner of each partition, `None` while unassigned; one entry per
    /// partition.
    pub owners: Vec<Option<NodeId>>,
    /// Every schema version, oldest first, parsed.
    pub schema_history: Vec<Arc<TopicSchema>>,
    /// The remote link of a remote child's stub (spec §4, v3.2): a stub has
    /// no partitions, takes no produce and serves no consume.
    pub remote: Option<Arc<RemoteLink>>,
}

impl Deref for TopicMeta {
    type Target = Topic;

    fn deref(&self) -> &Topic {
        &self.record
    }
}

impl TopicMeta {
    /// Derives the data plane's view of `record` owned by `owners` (see
    /// [`owners_of`]), with `remote`, its link when it is a remote child's
    /// stub. `previous`, the view of an earlier state, lends its parsed
    /// schemas when they did not change.
    ///
    /// # Panics
    /// If the record has no partition and is no stub, or `owners` does not
    /// have one entry per partition: the metastore never holds such a
    /// topic, and serving it would route records nowhere.
    pub(super) fn derive(
        record: &Topic,
        owners: Vec<Option<NodeId>>,
        remote: Option<&RemoteLink>,
        previous: Option<&TopicMeta>,
    ) -> Self {
        assert!(
            record.partitions > 0 || remote.is_some(),
            "topic {} has no partition",
            record.name
        );
        assert_eq!(
            owners.len(),
            record.partitions as usize,
            "topic {} has {} owners for {} partitions",
            record.name,
            owners.len(),
            record.partitions
        );
        let schema_history = match previous {
            Some(previous) if previous.record.schemas == record.schemas => {
                previous.schema_history.clone()
            }
            _ => record.schemas.iter().map(parse_schema).collect(),
        };
        Self {
            record: record.clone(),
            name: Arc::from(record.name.as_str()),
            incarnation_id: Some(Arc::from(record.id.as_str())),
            owners,
            schema_history,
            remote: remote.map(|link| Arc::new(link.clone())),
        }
    }

    /// The metastore's record.
    pub fn record(&self) -> &Topic {
        &self.record
    }

    /// The newest schema, if the topic has one.
    pub fn schema(&self) -> Option<&Arc<TopicSchema>> {
        self.schema_history.last()
    }

    /// Whether this view still describes `record` placed as `owners`, with
    /// remote link `remote`.
    pub(super) fn describes(
        &self,
        record: &Topic,
        owners: &[Option<NodeId>],
        remote: Option<&RemoteLink>,
    ) -> bool {
        self.record == *record && self.owners == owners && self.remote.as_deref() == remote
    }

    /// Whether this is a remote child's stub.
    pub fn is_stub(&self) -> bool {
        self.remote.is_some()
    }
}

/// The owner of each of `record`'s partitions as a node number, from its
/// placement `slots` (a missing slot, or an owner that names no data node
/// number, is unassigned).
pub(super) fn owners_of(record: &Topic, slots: &[Option<Assignment>]) -> Vec<Option<NodeId>> {
    (0..record.partitions as usize)
        .map(|partition| {
            let slot = slots.get(partition).and_then(Option::as_ref)?;
            node_of(&slot.owner)
        })
        .collect()
}

/// A stored schema version, parsed. The metastore stores only documents its
/// proposer parsed; one that no longer parses is carried as a string
/// rather than dropped.
fn parse_schema(version: &narad_meta::SchemaVersion) -> Arc<TopicSchema> {
    let document = serde_json::from_str(&version.document)
        .unwrap_or_else(|_| serde_json::Value::String(version.document.clone()));
    Arc::new(TopicSchema {
        version: version.version,
        document,
    })
}
