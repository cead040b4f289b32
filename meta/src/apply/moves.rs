//! Partition moves and the end of a decommission: the planner's targets,
//! the flip, aborts, and a member's removal.
//!
//! A move lives in its partition's placement as `target`. The planner sets
//! it; the target node copies the partition and then proposes the flip
//! ([`CompleteMove`]), a compare-and-set that makes it the owner only if
//! nothing changed since the move began; an abort clears the target under
//! the same kind of check. So of a flip and an abort racing for one move,
//! exactly one applies.

use std::collections::BTreeSet;

use super::super::command::{AbortMove, CompleteMove, Outcome, RemoveMember, SetMoveTargets};
use super::super::error::MetastoreError;
use super::super::state::{Assignment, MemberStatus, Metastore};
use super::Domain;

impl Metastore {
    /// The placement of `partition` of `topic` (incarnation `id`), which
    /// must have an owner.
    fn placed(
        &self,
        topic: &str,
        id: &super::super::IncarnationId,
        partition: u32,
    ) -> Result<&Assignment, MetastoreError> {
        let record = self.current_topic(topic, Some(id))?;
        if partition >= record.partitions {
            return Err(MetastoreError::PartitionOutOfRange { partition });
        }
        self.assignment(topic, partition)
            .ok_or(MetastoreError::MoveOwnerChanged { partition })
    }

    fn placed_mut(&mut self, topic: &str, partition: u32) -> Option<&mut Assignment> {
        self.assignments
            .get_mut(topic)?
            .get_mut(partition as usize)?
            .as_mut()
    }

    pub(super) fn set_move_targets(
        &mut self,
        set: &SetMoveTargets,
    ) -> Result<Outcome, MetastoreError> {
        let mut seen = BTreeSet::new();
        for step in &set.moves {
            let partition = step.partition;
            let placed = self.placed(&set.topic, &set.id, partition)?;
            if placed.owner != step.owner {
                return Err(MetastoreError::MoveOwnerChanged { partition });
            }
            if placed.target.is_some() || !seen.insert(partition) {
                return Err(MetastoreError::MoveInProgress { partition });
            }
            if step.target == step.owner {
                return Err(MetastoreError::MoveToOwner { partition });
            }
            let member = self
                .members
                .get(&step.target)
                .ok_or(MetastoreError::MemberNotFound)?;
            if !member.is_receiver() {
                return Err(MetastoreError::MemberNotReceiver {
                    id: member.id.clone(),
                });
            }
        }
        if set.moves.is_empty() {
            return Ok(Outcome::Unchanged);
        }
        for step in &set.moves {
            if let Some(placed) = self.placed_mut(&set.topic, step.partition) {
                placed.target = Some(step.target.clone());
            }
        }
        self.changed(Domain::Assignments);
        Ok(Outcome::Applied)
    }

    pub(super) fn abort_move(&mut self, abort: &AbortMove) -> Result<Outcome, MetastoreError> {
        let partition = abort.partition;
        let placed = self.placed(&abort.topic, &abort.id, partition)?;
        match &placed.target {
            Some(current) if *current == abort.target => {}
            Some(current) => {
                return Err(MetastoreError::MoveTargetDiffers {
                    partition,
                    current: current.clone(),
                    asked: abort.target.clone(),
                });
            }
            None if placed.owner == abort.target => {
                return Err(MetastoreError::MoveCompleted {
                    partition,
                    owner: placed.owner.clone(),
                });
            }
            None => return Err(MetastoreError::NoMove { partition }),
        }
        if let Some(placed) = self.placed_mut(&abort.topic, partition) {
            placed.target = None;
        }
        self.changed(Domain::Assignments);
        Ok(Outcome::Applied)
    }

    pub(super) fn complete_move(
        &mut self,
        complete: &CompleteMove,
    ) -> Result<Outcome, MetastoreError> {
        let partition = complete.partition;
        let placed = self.placed(&complete.topic, &complete.id, partition)?;
        if placed.owner == complete.target && placed.target.is_none() {
            // The same flip, applied already (a retried proposal).
            return Ok(Outcome::Unchanged);
        }
        if placed.owner != complete.source
            || placed.target.as_deref() != Some(complete.target.as_str())
        {
            return Err(MetastoreError::MoveChanged { partition });
        }
        if let Some(placed) = self.placed_mut(&complete.topic, partition) {
            *placed = Assignment::owned_by(&complete.target);
        }
        self.changed(Domain::Assignments);
        Ok(Outcome::Applied)
    }

    /// [`Command::ForcePromote`]: the flip's compare-and-set, and the
    /// source must be marked dead now. A source alive again (its heartbeat
    /// applied since) serves its partition; the move goes on normally.
    pub(super) fn force_promote(
        &mut self,
        complete: &CompleteMove,
    ) -> Result<Outcome, MetastoreError> {
        let placed = self.placed(&complete.topic, &complete.id, complete.partition)?;
        let applied_already = placed.owner == complete.target && placed.target.is_none();
        let source_dead = self
            .members
            .get(&complete.source)
            .is_some_and(|member| member.status == MemberStatus::Dead);
        if !applied_already && !source_dead {
            return Err(MetastoreError::SourceAlive {
                partition: complete.partition,
                member: complete.source.clone(),
            });
        }
        self.complete_move(complete)
    }

    pub(super) fn remove_member(
        &mut self,
        remove: &RemoveMember,
    ) -> Result<Outcome, MetastoreError> {
        let id = remove.id.as_str();
        if self.removed.contains(id) && !self.members.contains_key(id) {
            return Ok(Outcome::Unchanged);
        }
        let member = self.members.get(id).ok_or(MetastoreError::MemberNotFound)?;
        if !member.draining {
            return Err(MetastoreError::MemberNotDraining { id: id.to_owned() });
        }
        let (partitions, inbound) = self.holdings(id);
        if partitions > 0 || inbound > 0 {
            return Err(MetastoreError::MemberNotEmpty {
                id: id.to_owned(),
                partitions,
                inbound,
            });
        }
        self.members.remove(id);
        self.removed.insert(id.to_owned());
        self.changed(Domain::Members);
        Ok(Outcome::Applied)
    }
}
