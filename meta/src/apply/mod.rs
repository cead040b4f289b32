//! `Metastore::apply`: the one way the state changes.

mod fanout;
mod members;
mod moves;
mod remotes;
mod topics;
mod users;

use super::command::{ApplyContext, Command, Outcome};
use super::error::MetastoreError;
use super::ids::IncarnationId;
use super::state::{Metastore, Topic};

/// The domain a change belongs to, for the change counters.
#[derive(Debug, Clone, Copy)]
enum Domain {
    Topics,
    Assignments,
    Members,
    Users,
    Remotes,
}

impl Metastore {
    /// Applies one committed command. Pure: the result depends only on the
    /// state and the command, so every replica that applies the same log
    /// holds the same state. A refused command changes nothing (except the
    /// groups an alter applied before the failing one) but still advances
    /// the applied index.
    ///
    /// # Errors
    /// The command's [`MetastoreError`]; the caller reports it to the client
    /// that proposed the command.
    ///
    /// # Panics
    /// If `context.index` does not exceed the last applied index: the log
    /// was replayed out of order, and continuing would diverge replicas.
    pub fn apply(
        &mut self,
        command: &Command,
        context: ApplyContext,
    ) -> Result<Outcome, MetastoreError> {
        self.note_applied(context);
        let outcome = match command {
            Command::CreateTopic(create) => self.create_topic(create),
            Command::AlterTopic(alter) => self.alter_topic(alter),
            Command::DeleteTopic(delete) => self.delete_topic(delete),
            Command::AddSchemaVersion(add) => self.add_schema_version(add),
            Command::AttachChild(attach) => self.attach_child(attach),
            Command::DetachChild(detach) => self.detach_child(detach),
            Command::AssignPartitions(assign) => self.assign_partitions(assign),
            Command::RegisterMember(register) => self.register_member(register),
            Command::Heartbeat(heartbeat) => self.heartbeat(heartbeat),
            Command::MarkDead(mark) => self.mark_dead(mark),
            Command::SetDraining(drain) => self.set_draining(drain),
            Command::SeedAdmin(seed) => self.seed_admin(seed),
            Command::CreateUser(create) => self.create_user(create),
            Command::DeleteUser(delete) => self.delete_user(delete),
            Command::SetPassword(set) => self.set_password(set),
            Command::SetGrants(set) => self.set_grants(set),
            Command::SetMoveTargets(set) => self.set_move_targets(set),
            Command::AbortMove(abort) => self.abort_move(abort),
            Command::CompleteMove(complete) => self.complete_move(complete),
            Command::ForcePromote(complete) => self.force_promote(complete),
            Command::RemoveMember(remove) => self.remove_member(remove),
            Command::CreateRemote(create) => self.create_remote(create),
            Command::UpdateRemote(update) => self.update_remote(update),
            Command::DeleteRemote(delete) => self.delete_remote(delete),
            Command::ResealRemotes(reseal) => self.reseal_remotes(reseal),
            Command::AttachRemoteChild(attach) => self.attach_remote_child(attach),
            Command::PauseRemoteChild(pause) => self.pause_remote_child(pause),
            Command::ResumeRemoteChild(resume) => self.resume_remote_child(resume),
            Command::SkipRemoteRecord(skip) => self.skip_remote_record(skip),
        };
        if cfg!(debug_assertions) {
            self.assert_invariants();
        }
        outcome
    }

    /// Records a log entry that carries no command (a blank entry a new
    /// leader appends, a membership change): the applied index advances and
    /// nothing else changes.
    ///
    /// # Panics
    /// If `context.index` does not exceed the last applied index.
    pub fn note_applied(&mut self, context: ApplyContext) {
        assert!(
            context.index > self.applied_index,
            "log index {} applied after {}",
            context.index,
            self.applied_index
        );
        self.applied_index = context.index;
    }

    /// Counts a change in `domain`.
    fn changed(&mut self, domain: Domain) {
        let counter = match domain {
            Domain::Topics => &mut self.versions.topics,
            Domain::Assignments => &mut self.versions.assignments,
            Domain::Members => &mut self.versions.members,
            Domain::Users => &mut self.versions.users,
            Domain::Remotes => &mut self.versions.remotes,
        };
        *counter += 1;
    }

    /// The topic called `name`, if it is still the incarnation the proposer
    /// read (when it read one).
    fn current_topic(
        &self,
        name: &str,
        expected_id: Option<&IncarnationId>,
    ) -> Result<&Topic, MetastoreError> {
        let topic = self.topics.get(name).ok_or(MetastoreError::TopicNotFound)?;
        match expected_id {
            Some(id) if *id != topic.id => Err(MetastoreError::TopicChanged),
            _ => Ok(topic),
        }
    }

    /// Checks the relations every state must keep: links agree from both
    /// sides, roles stay flat, exactly the stubs of remote children have no
    /// partitions and each has a parent, each topic has one placement slot per
    /// partition, every owner and move target is a known member, a target is
    /// never its owner, and no removed id is a member.
    ///
    /// # Panics
    /// On the first broken relation: the state machine has a bug.
    pub fn assert_invariants(&self) {
        for topic in self.topics.values() {
            let slots = self.assignments.get(&topic.name).map_or(0, Vec::len);
            assert_eq!(slots, topic.partitions as usize, "slots of {}", topic.name);
            if let Some(link) = &topic.parent {
                let parent = &self.topics[&link.parent];
                assert!(
                    parent.children.contains(&topic.name),
                    "{} not listed",
                    topic.name
                );
                assert!(parent.parent.is_none(), "chain through {}", parent.name);
                assert!(
                    topic.children.is_empty(),
                    "child {} has children",
                    topic.name
                );
                assert_eq!(parent.schemas, topic.schemas, "schemas of {}", topic.name);
            }
            for child in &topic.children {
                let link = self.topics[child]
                    .parent
                    .as_ref()
                    .map(|link| link.parent.as_str());
                assert_eq!(
                    link,
                    Some(topic.name.as_str()),
                    "child {child} of {}",
                    topic.name
                );
            }
            for (index, schema) in topic.schemas.iter().enumerate() {
                assert_eq!(
                    schema.version as usize,
                    index + 1,
                    "versions of {}",
                    topic.name
                );
            }
        }
        for (name, slots) in &self.assignments {
            assert!(
                self.topics.contains_key(name),
                "placements of missing topic {name}"
            );
            for assignment in slots.iter().flatten() {
                assert!(
                    self.members.contains_key(&assignment.owner),
                    "unknown owner"
                );
                if let Some(target) = &assignment.target {
                    assert!(self.members.contains_key(target), "unknown target");
                    assert_ne!(*target, assignment.owner, "a move to its owner");
                }
            }
        }
        for id in &self.removed {
            assert!(!self.members.contains_key(id), "removed member {id} listed");
        }
        for topic in self.topics.values() {
            let stub = self.remote_links.contains_key(&topic.name);
            assert_eq!(topic.partitions == 0, stub, "partitions of {}", topic.name);
        }
        for child in self.remote_links.keys() {
            let stub = &self.topics[child];
            assert!(stub.parent.is_some(), "stub {child} without a parent");
        }
    }
}
