//! Remotes and remote-child links: add, change, delete and re-seal remotes;
//! attach a remote child (its stub topic and link), pause, resume, skip.

use super::super::command::{Actor, Outcome};
use super::super::error::MetastoreError;
use super::super::limits::{
    CHILDREN_MAX, REMOTE_CHILDREN_MAX, REMOTE_LANES_MAX, REMOTE_PARENT_RETENTION_MS_MIN,
    REMOTE_SKIPS_PER_PARTITION_MAX, REMOTES_MAX,
};
use super::super::remote_command::{
    AttachRemoteChild, CreateRemote, DeleteRemote, PauseRemoteChild, ResealRemotes,
    ResumeRemoteChild, SkipRemoteRecord, UpdateRemote,
};
use super::super::remotes::{RemoteKey, RemoteLink, RemotePause, SealedPassword};
use super::super::rules;
use super::super::state::{Metastore, ParentLink, Topic};
use super::Domain;

impl Metastore {
    /// Remotes need security on and an admin.
    fn require_remote_admin(&self, actor: &Actor) -> Result<(), MetastoreError> {
        if *actor == Actor::SecurityOff {
            return Err(MetastoreError::RemotesRequireSecurity);
        }
        self.require_admin(actor).map(|_| ())
    }

    /// `password` must be sealed under `key`, and `key` must be the
    /// cluster's (or become it, when the cluster has none yet). Keys are
    /// compared by [`RemoteKey::same_key`]: a proposer's copy of the
    /// cluster key is the same key whatever it says of the mint time.
    fn check_sealed_under(
        &self,
        password: &SealedPassword,
        key: &RemoteKey,
    ) -> Result<(), MetastoreError> {
        let sealed_under_key = password.key_version == key.version && password.key_id == key.key_id;
        let key_is_current = self
            .remote_key
            .as_ref()
            .is_none_or(|current| current.same_key(key));
        if sealed_under_key && key_is_current {
            Ok(())
        } else {
            Err(MetastoreError::RemoteKeyChanged)
        }
    }

    pub(super) fn create_remote(
        &mut self,
        create: &CreateRemote,
    ) -> Result<Outcome, MetastoreError> {
        self.require_remote_admin(&create.actor)?;
        let remote = &create.remote;
        rules::check_remote_name(&remote.name)?;
        if self.remotes.contains_key(&remote.name) {
            return Err(MetastoreError::RemoteExists);
        }
        if self.remotes.len() >= REMOTES_MAX {
            return Err(MetastoreError::RemoteLimit);
        }
        self.check_sealed_under(&remote.password, &create.key)?;
        if self.remote_key.is_none() {
            self.remote_key = Some(first_key(create));
        }
        self.remotes.insert(remote.name.clone(), remote.clone());
        self.changed(Domain::Remotes);
        Ok(Outcome::Applied)
    }

    pub(super) fn update_remote(
        &mut self,
        update: &UpdateRemote,
    ) -> Result<Outcome, MetastoreError> {
        self.require_remote_admin(&update.actor)?;
        let remote = self
            .remotes
            .get(&update.name)
            .ok_or(MetastoreError::RemoteNotFound)?;
        if let Some(expected) = update.expected_revision
            && expected != remote.revision
        {
            return Err(MetastoreError::RemoteRevisionConflict {
                current: remote.revision,
                expected,
            });
        }
        let new_url = update.url.as_ref().filter(|url| **url != remote.url);
        let new_username = update
            .username
            .as_ref()
            .filter(|username| **username != remote.username);
        let new_ca = update.ca_pem.as_ref().filter(|ca| **ca != remote.ca_pem);
        let new_limits = update.limits.filter(|limits| *limits != remote.limits);
        let opens_anew = new_url.is_some() || new_username.is_some() || new_ca.is_some();
        match (&update.password, &update.key) {
            (Some(password), Some(key)) => self.check_sealed_under(password, key)?,
            (Some(_), None) => return Err(MetastoreError::RemoteKeyChanged),
            (None, _) if opens_anew => return Err(MetastoreError::RemotePasswordRequired),
            (None, _) => {}
        }
        if !opens_anew && new_limits.is_none() && update.password.is_none() {
            return Ok(Outcome::Unchanged);
        }
        let (url, username, ca) = (new_url.cloned(), new_username.cloned(), new_ca.cloned());
        let Some(remote) = self.remotes.get_mut(&update.name) else {
            return Err(MetastoreError::RemoteNotFound);
        };
        if let Some(url) = url {
            remote.url = url;
        }
        if let Some(username) = username {
            remote.username = username;
        }
        if let Some(ca) = ca {
            remote.ca_pem = ca;
        }
        if let Some(limits) = new_limits {
            remote.limits = limits;
        }
        if let Some(password) = &update.password {
            remote.password = password.clone();
            remote.credential_version += 1;
        }
        remote.revision += 1;
        self.changed(Domain::Remotes);
        Ok(Outcome::Applied)
    }

    pub(super) fn delete_remote(
        &mut self,
        delete: &DeleteRemote,
    ) -> Result<Outcome, MetastoreError> {
        self.require_remote_admin(&delete.actor)?;
        if !self.remotes.contains_key(&delete.name) {
            return Err(MetastoreError::RemoteNotFound);
        }
        let links = self.links_of_remote(&delete.name);
        if !links.is_empty() && !delete.force {
            return Err(MetastoreError::RemoteInUse { links });
        }
        self.remotes.remove(&delete.name);
        self.changed(Domain::Remotes);
        Ok(Outcome::Applied)
    }

    pub(super) fn reseal_remotes(
        &mut self,
        reseal: &ResealRemotes,
    ) -> Result<Outcome, MetastoreError> {
        self.require_remote_admin(&reseal.actor)?;
        let Some(current) = &self.remote_key else {
            return Ok(Outcome::Unchanged);
        };
        let key = &reseal.key;
        let same_key = key.same_key(current);
        let next_key = key.version == current.version + 1
            && key.salt == current.salt
            && key.key_id != current.key_id;
        if !same_key && !next_key {
            return Err(MetastoreError::RemoteKeyChanged);
        }
        let mut changed = !same_key;
        if !same_key {
            // The next version, minted by this command's proposer; the
            // current key keeps the time it was minted at.
            self.remote_key = Some(key.clone());
        }
        for resealed in &reseal.passwords {
            let sealed_under_key = resealed.password.key_version == key.version
                && resealed.password.key_id == key.key_id;
            let Some(remote) = self.remotes.get_mut(&resealed.name) else {
                continue;
            };
            // A credential changed since the proposer opened it keeps the
            // newer password, sealed by whoever changed it.
            if sealed_under_key && remote.credential_version == resealed.credential_version {
                remote.password = resealed.password.clone();
                changed = true;
            }
        }
        if !changed {
            return Ok(Outcome::Unchanged);
        }
        self.changed(Domain::Remotes);
        Ok(Outcome::Applied)
    }

    pub(super) fn attach_remote_child(
        &mut self,
        attach: &AttachRemoteChild,
    ) -> Result<Outcome, MetastoreError> {
        self.require_remote_admin(&attach.actor)?;
        let parent = self.current_topic(&attach.parent, Some(&attach.parent_id))?;
        if let Some(grandparent) = &parent.parent {
            return Err(MetastoreError::FanoutRoleConflict {
                reason: format!(
                    "{:?} is a child of {:?}; fan-out does not chain",
                    parent.name, grandparent.parent
                ),
            });
        }
        rules::check_new_topic_name(&attach.child)?;
        if self.topics.contains_key(&attach.child) {
            return Err(MetastoreError::TopicExists);
        }
        if let Some(existing) = self.topic_ignoring_case(&attach.child) {
            return Err(MetastoreError::TopicNameCaseClash {
                name: attach.child.clone(),
                existing: existing.name.clone(),
            });
        }
        let link = &attach.link;
        let remote = self
            .remotes
            .get(&link.remote)
            .filter(|remote| remote.id == link.remote_id)
            .ok_or(MetastoreError::RemoteNotFound)?;
        if link.remote_topic.is_empty() {
            return Err(MetastoreError::TopicNameEmpty);
        }
        if !(1..=REMOTE_LANES_MAX).contains(&link.lanes) {
            return Err(MetastoreError::RemoteLanesInvalid);
        }
        if let Some((child, _)) = self.remote_links.iter().find(|(_, other)| {
            other.remote == remote.name && other.remote_topic == link.remote_topic
        }) {
            return Err(MetastoreError::RemoteTopicLinked {
                remote: remote.name.clone(),
                remote_topic: link.remote_topic.clone(),
                child: child.clone(),
            });
        }
        let remote_children = parent
            .children
            .iter()
            .filter(|child| self.remote_links.contains_key(*child))
            .count();
        if remote_children >= REMOTE_CHILDREN_MAX {
            return Err(MetastoreError::RemoteChildLimit);
        }
        if parent.children.len() >= CHILDREN_MAX {
            return Err(MetastoreError::ChildLimit);
        }
        check_remote_parent_retention(parent.retention_ms)?;
        if attach.attach_offsets.len() != parent.partitions as usize {
            return Err(MetastoreError::TopicChanged);
        }
        self.check_cluster_schema_budget(parent.schema_bytes())?;
        let stub = Topic {
            name: attach.child.clone(),
            id: attach.child_id.clone(),
            partitions: 0,
            retention_ms: parent.retention_ms,
            visibility_timeout_ms: parent.visibility_timeout_ms,
            max_in_flight_per_partition: parent.max_in_flight_per_partition,
            max_acked_ahead_per_partition: parent.max_acked_ahead_per_partition,
            idempotency_window_ms: parent.idempotency_window_ms,
            created_at_ms: link.created_at_ms,
            owner: match &attach.actor {
                Actor::User(name) => Some(name.clone()),
                Actor::SecurityOff => None,
            },
            schemas: parent.schemas.clone(),
            parent: Some(ParentLink {
                parent: parent.name.clone(),
                attach_epoch: attach.attach_epoch.clone(),
                fanout_delay_ms: 0,
                attach_offsets: attach.attach_offsets.clone(),
            }),
            children: Vec::new(),
        };
        let link = RemoteLink {
            paused: None,
            skip: Default::default(),
            ..link.clone()
        };
        self.remote_links.insert(attach.child.clone(), link);
        self.insert_topic(stub);
        Ok(Outcome::Applied)
    }

    /// The link of stub `child`, for a change by `actor`.
    fn remote_link_mut(
        &mut self,
        actor: &Actor,
        child: &str,
    ) -> Result<&mut RemoteLink, MetastoreError> {
        self.require_remote_admin(actor)?;
        if !self.topics.contains_key(child) {
            return Err(MetastoreError::TopicNotFound);
        }
        self.remote_links
            .get_mut(child)
            .ok_or_else(|| MetastoreError::NotRemoteChild {
                name: child.to_owned(),
            })
    }

    pub(super) fn pause_remote_child(
        &mut self,
        pause: &PauseRemoteChild,
    ) -> Result<Outcome, MetastoreError> {
        rules::check_pause_reason(&pause.reason)?;
        let by = match &pause.actor {
            Actor::User(name) => name.clone(),
            Actor::SecurityOff => String::new(),
        };
        let link = self.remote_link_mut(&pause.actor, &pause.child)?;
        link.paused = Some(RemotePause {
            reason: pause.reason.clone(),
            at_ms: pause.at_ms,
            by,
        });
        self.changed(Domain::Topics);
        Ok(Outcome::Applied)
    }

    pub(super) fn resume_remote_child(
        &mut self,
        resume: &ResumeRemoteChild,
    ) -> Result<Outcome, MetastoreError> {
        let link = self.remote_link_mut(&resume.actor, &resume.child)?;
        let new_target = resume.target_id.is_some() && resume.target_id != link.target_id;
        if link.paused.is_none() && !new_target {
            return Ok(Outcome::Unchanged);
        }
        link.paused = None;
        if new_target {
            link.target_id.clone_from(&resume.target_id);
        }
        self.changed(Domain::Topics);
        Ok(Outcome::Applied)
    }

    pub(super) fn skip_remote_record(
        &mut self,
        skip: &SkipRemoteRecord,
    ) -> Result<Outcome, MetastoreError> {
        let partitions = self
            .topics
            .get(&skip.child)
            .and_then(|stub| stub.parent.as_ref())
            .map_or(0, |link| link.attach_offsets.len());
        let link = self.remote_link_mut(&skip.actor, &skip.child)?;
        if skip.partition as usize >= partitions {
            return Err(MetastoreError::PartitionOutOfRange {
                partition: skip.partition,
            });
        }
        let offsets = link.skip.entry(skip.partition).or_default();
        if offsets.contains(&skip.offset) {
            return Ok(Outcome::Unchanged);
        }
        if offsets.len() >= REMOTE_SKIPS_PER_PARTITION_MAX {
            return Err(MetastoreError::SkipLimit {
                partition: skip.partition,
            });
        }
        offsets.insert(skip.offset);
        self.changed(Domain::Topics);
        Ok(Outcome::Applied)
    }

    /// Removes stub `name`'s topic, placements, parent listing and link.
    pub(super) fn remove_stub(&mut self, name: &str) {
        if let Some(stub) = self.topics.remove(name)
            && let Some(link) = &stub.parent
            && let Some(parent) = self.topics.get_mut(&link.parent)
        {
            parent.children.retain(|child| child != name);
        }
        self.assignments.remove(name);
        self.remote_links.remove(name);
    }

    /// Whether `name` is a remote child's stub.
    pub(super) fn is_stub(&self, name: &str) -> bool {
        self.remote_links.contains_key(name)
    }

    /// The error for a change a stub cannot take.
    pub(super) fn stub_refusal(&self, name: &str) -> Option<MetastoreError> {
        self.remote_links
            .get(name)
            .map(|link| MetastoreError::RemoteStub {
                name: name.to_owned(),
                remote: link.remote.clone(),
            })
    }

    /// A parent with remote children keeps its records a day or forever.
    pub(super) fn check_retention_for_remote_children(
        &self,
        parent: &Topic,
        retention_ms: u64,
    ) -> Result<(), MetastoreError> {
        if parent.children.iter().any(|child| self.is_stub(child)) {
            check_remote_parent_retention(retention_ms)?;
        }
        Ok(())
    }
}

fn check_remote_parent_retention(retention_ms: u64) -> Result<(), MetastoreError> {
    if retention_ms == 0 || retention_ms >= REMOTE_PARENT_RETENTION_MS_MIN {
        Ok(())
    } else {
        Err(MetastoreError::RemoteParentRetention { retention_ms })
    }
}

/// The key a first remote makes the cluster's. A proposer of a build
/// before the key's mint time (command version 2) sent none; it minted the
/// key in the same call that sealed the password, at the same clock
/// reading, so the password's `set_at_ms` is the key's mint time.
fn first_key(create: &CreateRemote) -> RemoteKey {
    let mut key = create.key.clone();
    key.created_at_ms = key.created_at_ms.or(Some(create.remote.password.set_at_ms));
    key
}
