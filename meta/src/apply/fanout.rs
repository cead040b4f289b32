//! Fan-out links: attach (also used by create-as-child) and detach.

use super::super::command::{AttachChild, DetachChild, NewLink, Outcome};
use super::super::error::MetastoreError;
use super::super::ids::AttachEpoch;
use super::super::limits::CHILDREN_MAX;
use super::super::rules;
use super::super::state::{Metastore, ParentLink, SchemaVersion, Topic};
use super::Domain;

/// The parts of a link request that the shared checks read.
pub(super) trait LinkRequest {
    fn attach_epoch(&self) -> &AttachEpoch;
    fn attach_offsets(&self) -> &[u64];
}

impl LinkRequest for NewLink {
    fn attach_epoch(&self) -> &AttachEpoch {
        &self.attach_epoch
    }
    fn attach_offsets(&self) -> &[u64] {
        &self.attach_offsets
    }
}

impl LinkRequest for AttachChild {
    fn attach_epoch(&self) -> &AttachEpoch {
        &self.attach_epoch
    }
    fn attach_offsets(&self) -> &[u64] {
        &self.attach_offsets
    }
}

fn role_conflict(reason: String) -> MetastoreError {
    MetastoreError::FanoutRoleConflict { reason }
}

impl Metastore {
    /// The fan-out rules for linking `child` under `parent`: flat roles,
    /// the child limit, delay against the parent's retention, an attach
    /// point per parent partition, identical schema histories. Returns the
    /// child's link and the schema history it will hold.
    pub(super) fn check_link(
        &self,
        parent: &Topic,
        child: &Topic,
        delay_ms: u64,
        request: &impl LinkRequest,
    ) -> Result<(ParentLink, Vec<SchemaVersion>), MetastoreError> {
        if let Some(grandparent) = &parent.parent {
            let reason = format!(
                "{:?} is a child of {:?}; fan-out does not chain",
                parent.name, grandparent.parent
            );
            return Err(role_conflict(reason));
        }
        if let Some(link) = &child.parent {
            let reason = format!("{:?} is already a child of {:?}", child.name, link.parent);
            return Err(role_conflict(reason));
        }
        if !child.children.is_empty() {
            let reason = format!("{:?} is a parent; a child cannot have children", child.name);
            return Err(role_conflict(reason));
        }
        if parent.children.len() >= CHILDREN_MAX {
            return Err(MetastoreError::ChildLimit);
        }
        rules::check_delay_fits(parent.retention_ms, delay_ms)?;
        // One attach point per parent partition: a different count means the
        // parent grew after the proposer asked its owners.
        if request.attach_offsets().len() != parent.partitions as usize {
            return Err(MetastoreError::TopicChanged);
        }
        let schemas = linked_schemas(parent, child)?;
        let link = ParentLink {
            parent: parent.name.clone(),
            attach_epoch: request.attach_epoch().clone(),
            fanout_delay_ms: delay_ms,
            attach_offsets: request.attach_offsets().to_vec(),
        };
        Ok((link, schemas))
    }

    pub(super) fn attach_child(&mut self, attach: &AttachChild) -> Result<Outcome, MetastoreError> {
        if attach.child.is_empty() {
            return Err(MetastoreError::ChildRequired);
        }
        if attach.child == attach.parent {
            return Err(MetastoreError::ChildIsParent);
        }
        let delay_ms = rules::fanout_delay_ms(attach.delay_ms)?;
        let parent = self.current_topic(&attach.parent, attach.parent_id.as_ref())?;
        let child = self.current_topic(&attach.child, attach.child_id.as_ref())?;
        self.require_manage(&attach.actor, parent)?;
        self.require_manage(&attach.actor, child)?;
        let (link, schemas) = self.check_link(parent, child, delay_ms, attach)?;
        let added = schema_bytes(&schemas).saturating_sub(child.schema_bytes());
        self.check_cluster_schema_budget(added)?;
        if let Some(child) = self.topics.get_mut(&attach.child) {
            child.parent = Some(link);
            child.schemas = schemas;
        }
        if let Some(parent) = self.topics.get_mut(&attach.parent) {
            parent.children.push(attach.child.clone());
        }
        self.changed(Domain::Topics);
        Ok(Outcome::Applied)
    }

    pub(super) fn detach_child(&mut self, detach: &DetachChild) -> Result<Outcome, MetastoreError> {
        let parent = self.current_topic(&detach.parent, None)?;
        let child = self.current_topic(&detach.child, None)?;
        let linked = child
            .parent
            .as_ref()
            .is_some_and(|link| link.parent == parent.name);
        if !linked {
            return Err(MetastoreError::NotLinked);
        }
        // Managing either side is enough.
        self.require_manage(&detach.actor, parent)
            .or_else(|_| self.require_manage(&detach.actor, child))?;
        if self.is_stub(&detach.child) {
            // A remote child's stub is nothing but its link: detaching it
            // deletes it.
            self.remove_stub(&detach.child);
            self.changed(Domain::Assignments);
        } else {
            if let Some(child) = self.topics.get_mut(&detach.child) {
                child.parent = None;
            }
            if let Some(parent) = self.topics.get_mut(&detach.parent) {
                parent.children.retain(|name| *name != detach.child);
            }
        }
        self.changed(Domain::Topics);
        Ok(Outcome::Applied)
    }
}

/// The schema history a child holds once linked: the parent's. A child
/// without a schema adopts it; a child with one must already hold exactly
/// the parent's history, and cannot go under a parent without a schema.
fn linked_schemas(parent: &Topic, child: &Topic) -> Result<Vec<SchemaVersion>, MetastoreError> {
    let mismatch = |reason: &str| MetastoreError::SchemaMismatch {
        reason: reason.to_owned(),
    };
    if child.schemas.is_empty() {
        return Ok(parent.schemas.clone());
    }
    if parent.schemas.is_empty() {
        return Err(mismatch(
            "a child with a schema cannot go under a parent without one",
        ));
    }
    if parent.schemas != child.schemas {
        return Err(mismatch(
            "the child's schema history differs from the parent's",
        ));
    }
    Ok(parent.schemas.clone())
}

fn schema_bytes(schemas: &[SchemaVersion]) -> u64 {
    schemas
        .iter()
        .map(|schema| schema.document.len() as u64)
        .sum()
}
