//! Create, alter, delete, schema versions and partition placement.

use std::collections::BTreeSet;

use super::super::command::{
    AddSchemaVersion, AlterTopic, AssignPartitions, CreateTopic, DeleteTopic, Outcome,
};
use super::super::error::MetastoreError;
use super::super::limits::{SCHEMA_CLUSTER_BYTES_MAX, SCHEMA_TOPIC_BYTES_MAX, SCHEMA_VERSIONS_MAX};
use super::super::rules;
use super::super::state::{Assignment, MemberStatus, Metastore, SchemaVersion, Topic};
use super::Domain;

impl Metastore {
    pub(super) fn create_topic(&mut self, create: &CreateTopic) -> Result<Outcome, MetastoreError> {
        rules::check_new_topic_name(&create.name)?;
        self.require_create(&create.actor, &create.name)?;
        if self.topics.contains_key(&create.name) {
            return Err(MetastoreError::TopicExists);
        }
        if let Some(existing) = self.topic_ignoring_case(&create.name) {
            return Err(MetastoreError::TopicNameCaseClash {
                name: create.name.clone(),
                existing: existing.name.clone(),
            });
        }
        let parent = self.create_parent(create)?;
        let mut topic = rules::new_topic(create, parent.map(|parent| parent.partitions))?;
        if let (Some(link), Some(parent)) = (&create.parent, parent) {
            let delay_ms = rules::fanout_delay_ms(link.fanout_delay_ms)?;
            let (parent_link, schemas) = self.check_link(parent, &topic, delay_ms, link)?;
            topic.parent = Some(parent_link);
            topic.schemas = schemas;
        }
        self.check_cluster_schema_budget(topic.schema_bytes())?;
        self.check_not_all_draining()?;
        self.insert_topic(topic);
        Ok(Outcome::Applied)
    }

    /// The parent of a create-as-child: it must exist, be the incarnation
    /// the proposer read, and be managed by the actor.
    fn create_parent(&self, create: &CreateTopic) -> Result<Option<&Topic>, MetastoreError> {
        let Some(link) = &create.parent else {
            return Ok(None);
        };
        let parent = self
            .topics
            .get(&link.parent)
            .ok_or(MetastoreError::ParentNotFound)?;
        if parent.id != link.parent_id {
            return Err(MetastoreError::TopicChanged);
        }
        self.require_manage(&create.actor, parent)?;
        Ok(Some(parent))
    }

    /// Refuses a create when data nodes are alive but every one of them is
    /// draining.
    fn check_not_all_draining(&self) -> Result<(), MetastoreError> {
        let mut alive = self
            .members
            .values()
            .filter(|member| member.status == MemberStatus::Alive);
        let any_alive = alive.clone().next().is_some();
        if any_alive && alive.all(|member| member.draining) {
            return Err(MetastoreError::AllNodesDraining);
        }
        Ok(())
    }

    /// Stores a new topic, its empty placement slots and its parent's link.
    pub(super) fn insert_topic(&mut self, topic: Topic) {
        let slots = vec![None; topic.partitions as usize];
        self.assignments.insert(topic.name.clone(), slots);
        if let Some(link) = &topic.parent
            && let Some(parent) = self.topics.get_mut(&link.parent)
        {
            parent.children.push(topic.name.clone());
        }
        self.topics.insert(topic.name.clone(), topic);
        self.changed(Domain::Topics);
        self.changed(Domain::Assignments);
    }

    pub(super) fn alter_topic(&mut self, alter: &AlterTopic) -> Result<Outcome, MetastoreError> {
        let topic = self.current_topic(&alter.name, alter.expected_id.as_ref())?;
        self.require_manage(&alter.actor, topic)?;
        if let Some(refusal) = self.stub_refusal(&alter.name) {
            return Err(refusal);
        }
        let nothing = alter.retention_ms.is_none()
            && alter.idempotency_window_ms.is_none()
            && alter.max_in_flight_per_partition.is_none()
            && alter.max_acked_ahead_per_partition.is_none()
            && alter.partitions.is_none();
        if nothing {
            return Err(MetastoreError::AlterEmpty);
        }
        // Groups in the spec's order, each stored before the next is
        // checked: a later failure leaves earlier groups applied.
        let mut changed = false;
        let result = self
            .alter_retention(alter, &mut changed)
            .and_then(|()| self.alter_idempotency_window(alter, &mut changed))
            .and_then(|()| self.alter_caps(alter, &mut changed))
            .and_then(|()| self.alter_partitions(alter, &mut changed));
        if changed {
            self.changed(Domain::Topics);
        }
        result.map(|()| {
            if changed {
                Outcome::Applied
            } else {
                Outcome::Unchanged
            }
        })
    }

    fn alter_retention(
        &mut self,
        alter: &AlterTopic,
        changed: &mut bool,
    ) -> Result<(), MetastoreError> {
        if alter.retention_ms.is_none() {
            return Ok(());
        }
        let retention_ms = rules::retention_ms(alter.retention_ms, &alter.defaults)?;
        let topic = &self.topics[&alter.name];
        self.check_retention_for_remote_children(topic, retention_ms)?;
        for child in &topic.children {
            let delay_ms = self.topics[child]
                .parent
                .as_ref()
                .map_or(0, |link| link.fanout_delay_ms);
            rules::check_delay_fits(retention_ms, delay_ms)?;
        }
        let topic = self.topic_mut(&alter.name);
        *changed |= topic.retention_ms != retention_ms;
        topic.retention_ms = retention_ms;
        Ok(())
    }

    fn alter_idempotency_window(
        &mut self,
        alter: &AlterTopic,
        changed: &mut bool,
    ) -> Result<(), MetastoreError> {
        if alter.idempotency_window_ms.is_none() {
            return Ok(());
        }
        let window_ms = rules::idempotency_window_ms(alter.idempotency_window_ms)?;
        let topic = self.topic_mut(&alter.name);
        *changed |= topic.idempotency_window_ms != window_ms;
        topic.idempotency_window_ms = window_ms;
        Ok(())
    }

    fn alter_caps(&mut self, alter: &AlterTopic, changed: &mut bool) -> Result<(), MetastoreError> {
        let in_flight = alter
            .max_in_flight_per_partition
            .map(|sent| rules::max_in_flight(Some(sent), &alter.defaults))
            .transpose()?;
        let acked_ahead = alter
            .max_acked_ahead_per_partition
            .map(|sent| rules::max_acked_ahead(Some(sent), &alter.defaults))
            .transpose()?;
        let topic = self.topic_mut(&alter.name);
        if let Some(cap) = in_flight {
            *changed |= topic.max_in_flight_per_partition != cap;
            topic.max_in_flight_per_partition = cap;
        }
        if let Some(cap) = acked_ahead {
            *changed |= topic.max_acked_ahead_per_partition != cap;
            topic.max_acked_ahead_per_partition = cap;
        }
        Ok(())
    }

    fn alter_partitions(
        &mut self,
        alter: &AlterTopic,
        changed: &mut bool,
    ) -> Result<(), MetastoreError> {
        let Some(requested) = alter.partitions else {
            return Ok(());
        };
        let current = self.topics[&alter.name].partitions;
        if requested <= i64::from(current) {
            let requested = u32::try_from(requested).unwrap_or(0);
            return Err(MetastoreError::PartitionsCannotShrink { current, requested });
        }
        let partitions = rules::bounded_partitions(requested, &alter.defaults)?;
        self.topic_mut(&alter.name).partitions = partitions;
        if let Some(slots) = self.assignments.get_mut(&alter.name) {
            slots.resize(partitions as usize, None);
        }
        self.changed(Domain::Assignments);
        *changed = true;
        Ok(())
    }

    /// A topic known to exist (the caller looked it up in this command).
    fn topic_mut(&mut self, name: &str) -> &mut Topic {
        self.topics
            .get_mut(name)
            .unwrap_or_else(|| panic!("topic {name} vanished mid-apply"))
    }

    pub(super) fn delete_topic(&mut self, delete: &DeleteTopic) -> Result<Outcome, MetastoreError> {
        let topic = self.current_topic(&delete.name, delete.expected_id.as_ref())?;
        self.require_manage(&delete.actor, topic)?;
        if self.is_stub(&delete.name) {
            self.remove_stub(&delete.name);
            self.changed(Domain::Topics);
            self.changed(Domain::Assignments);
            return Ok(Outcome::Applied);
        }
        let Some(topic) = self.topics.remove(&delete.name) else {
            return Err(MetastoreError::TopicNotFound);
        };
        if let Some(link) = &topic.parent {
            self.topic_mut(&link.parent)
                .children
                .retain(|child| *child != topic.name);
        }
        // Its children become standalone; they keep their schema history.
        // A remote child's stub means nothing without its parent and goes.
        for child in &topic.children {
            if self.is_stub(child) {
                self.remove_stub(child);
            } else {
                self.topic_mut(child).parent = None;
            }
        }
        self.assignments.remove(&topic.name);
        self.changed(Domain::Topics);
        self.changed(Domain::Assignments);
        Ok(Outcome::Applied)
    }

    pub(super) fn add_schema_version(
        &mut self,
        add: &AddSchemaVersion,
    ) -> Result<Outcome, MetastoreError> {
        let topic = self.current_topic(&add.name, add.expected_id.as_ref())?;
        self.require_manage(&add.actor, topic)?;
        rules::check_schema_document(&add.document)?;
        if topic.parent.is_some() {
            return Err(MetastoreError::SchemaManaged);
        }
        let current = topic.schema_version();
        if let Some(base) = add.base_version
            && base != current
        {
            return Err(MetastoreError::SchemaVersionConflict { current, base });
        }
        if topic
            .schemas
            .last()
            .is_some_and(|last| last.document == add.document)
        {
            return Ok(Outcome::Unchanged);
        }
        if topic.schemas.len() >= SCHEMA_VERSIONS_MAX {
            return Err(MetastoreError::SchemaVersionsFull);
        }
        let bytes = add.document.len() as u64;
        if !rules::within_budget(topic.schema_bytes(), bytes, SCHEMA_TOPIC_BYTES_MAX) {
            return Err(MetastoreError::SchemaTopicBudget);
        }
        // The parent manages its children's schemas: each gets the version.
        let copies = 1 + topic.children.len() as u64;
        self.check_cluster_schema_budget(bytes * copies)?;
        let version = SchemaVersion {
            version: current + 1,
            document: add.document.clone(),
        };
        let holders: Vec<String> = std::iter::once(add.name.clone())
            .chain(topic.children.iter().cloned())
            .collect();
        for name in holders {
            self.topic_mut(&name).schemas.push(version.clone());
        }
        self.changed(Domain::Topics);
        Ok(Outcome::Applied)
    }

    /// Refuses `added` more bytes of schema history if the cluster's budget
    /// would be exceeded.
    pub(super) fn check_cluster_schema_budget(&self, added: u64) -> Result<(), MetastoreError> {
        if added > 0 && !rules::within_budget(self.schema_bytes(), added, SCHEMA_CLUSTER_BYTES_MAX)
        {
            return Err(MetastoreError::SchemaClusterBudget);
        }
        Ok(())
    }

    pub(super) fn assign_partitions(
        &mut self,
        assign: &AssignPartitions,
    ) -> Result<Outcome, MetastoreError> {
        let topic = self.current_topic(&assign.topic, Some(&assign.id))?;
        let slots = &self.assignments[&assign.topic];
        let mut seen = BTreeSet::new();
        for placement in &assign.owners {
            let partition = placement.partition;
            if partition >= topic.partitions {
                return Err(MetastoreError::PartitionOutOfRange { partition });
            }
            if slots[partition as usize].is_some() || !seen.insert(partition) {
                return Err(MetastoreError::PartitionAssigned { partition });
            }
            let member = self
                .members
                .get(&placement.owner)
                .ok_or(MetastoreError::MemberNotFound)?;
            if !member.is_receiver() {
                return Err(MetastoreError::MemberNotReceiver {
                    id: member.id.clone(),
                });
            }
        }
        if assign.owners.is_empty() {
            return Ok(Outcome::Unchanged);
        }
        if let Some(slots) = self.assignments.get_mut(&assign.topic) {
            for placement in &assign.owners {
                slots[placement.partition as usize] = Some(Assignment::owned_by(&placement.owner));
            }
        }
        self.changed(Domain::Assignments);
        Ok(Outcome::Applied)
    }
}
