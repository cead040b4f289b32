//! Leader confirmation: before anything destructive (discarding WAL records
//! of a deleted topic, removing a stale incarnation's directory, anchoring
//! fan-out cursors, reclaiming a partition copy after a move) a data node asks the leader, which first proves it still
//! leads and has applied everything committed before the question
//! (openraft's `ensure_linearizable`: a heartbeat round to a quorum, then
//! waiting for apply), and only then reads its state. A follower forwards
//! the question to the leader once.

use narad_protocol::{Inbound, Response, RpcError};
use openraft::ServerState;

use super::propose::call_leader;
use super::runtime::Shared;
use super::wire::{ConfirmAnswer, ConfirmQuestion, ConfirmRequest};
use crate::network::messages::opcodes;
use narad_meta::Metastore;

/// Whether the answer to `question` is "still current" in `state`.
fn is_current(state: &Metastore, question: &ConfirmQuestion) -> bool {
    match question {
        ConfirmQuestion::Incarnation { name, id } => {
            state.topic(name).is_some_and(|topic| topic.id == *id)
        }
        ConfirmQuestion::AttachEpoch { child, epoch } => state
            .topic(child)
            .and_then(|topic| topic.parent.as_ref())
            .is_some_and(|link| link.attach_epoch == *epoch),
        ConfirmQuestion::PartitionHolder {
            name,
            id,
            partition,
            member,
        } => {
            state.topic(name).is_some_and(|topic| topic.id == *id)
                && state
                    .assignment(name, *partition)
                    .is_some_and(|assignment| {
                        assignment.owner == *member
                            || assignment.target.as_deref() == Some(member.as_str())
                    })
        }
    }
}

/// Serves `LeaderConfirm`.
pub(super) async fn serve(shared: &Shared, inbound: Inbound) -> Result<Response, RpcError> {
    let request: ConfirmRequest = inbound.message()?;
    let answer = if shared.raft.metrics().borrow().state == ServerState::Leader {
        confirm(shared, &request.question).await?
    } else if request.forwarded {
        return Err(RpcError::unavailable("not the leader"));
    } else {
        forward(shared, request).await?
    };
    Ok(Response::message(&answer))
}

async fn confirm(shared: &Shared, question: &ConfirmQuestion) -> Result<ConfirmAnswer, RpcError> {
    let read_log_id = shared
        .raft
        .ensure_linearizable()
        .await
        .map_err(|e| RpcError::unavailable(format!("leadership not confirmed: {e}")))?;
    let read_index = read_log_id.map_or(0, |log_id| log_id.index);
    let current = shared.view.read(|state| is_current(state, question));
    Ok(ConfirmAnswer {
        current,
        read_index,
    })
}

async fn forward(shared: &Shared, request: ConfirmRequest) -> Result<ConfirmAnswer, RpcError> {
    let message = ConfirmRequest {
        forwarded: true,
        ..request
    };
    call_leader(shared, opcodes::LEADER_CONFIRM, &message).await
}

#[cfg(test)]
mod tests {
    use narad_meta::{
        Actor, ApplyContext, AssignPartitions, Command, CreateTopic, IncarnationId, Metastore,
        MoveTarget, PartitionOwner, RegisterMember, SetMoveTargets,
    };

    use super::{ConfirmQuestion, is_current};

    const ID: u64 = 0xa1;

    /// `orders` (3 partitions) owned by node 1, with partition 1 moving
    /// to node 2.
    fn state() -> Metastore {
        let mut meta = Metastore::new();
        let id = IncarnationId::from_bits(ID);
        let mut commands = vec![];
        for member in ["1", "2", "3"] {
            commands.push(Command::RegisterMember(RegisterMember {
                id: member.into(),
                http_addr: format!("{member}:7942"),
                rpc_addr: format!("{member}:7942"),
                at_ms: 1_000,
            }));
        }
        commands.push(Command::CreateTopic(CreateTopic {
            partitions: Some(3),
            ..CreateTopic::named(Actor::SecurityOff, "orders", id.clone(), 0)
        }));
        commands.push(Command::AssignPartitions(AssignPartitions {
            topic: "orders".into(),
            id: id.clone(),
            owners: (0..3)
                .map(|partition| PartitionOwner {
                    partition,
                    owner: "1".into(),
                })
                .collect(),
        }));
        commands.push(Command::SetMoveTargets(SetMoveTargets {
            topic: "orders".into(),
            id,
            moves: vec![MoveTarget {
                partition: 1,
                owner: "1".into(),
                target: "2".into(),
            }],
        }));
        for (index, command) in commands.iter().enumerate() {
            let context = ApplyContext {
                index: index as u64 + 1,
            };
            meta.apply(command, context).expect("applied");
        }
        meta
    }

    fn holder(id: u64, partition: u32, member: &str) -> ConfirmQuestion {
        ConfirmQuestion::PartitionHolder {
            name: "orders".into(),
            id: IncarnationId::from_bits(id),
            partition,
            member: member.into(),
        }
    }

    #[test]
    fn a_partition_is_held_by_its_owner_and_its_move_target_only() {
        let state = state();
        assert!(is_current(&state, &holder(ID, 0, "1")), "the owner");
        assert!(is_current(&state, &holder(ID, 1, "1")), "the owner, moving");
        assert!(is_current(&state, &holder(ID, 1, "2")), "the move's target");
        assert!(!is_current(&state, &holder(ID, 0, "2")), "not its target");
        assert!(!is_current(&state, &holder(ID, 0, "3")), "neither");
        assert!(
            !is_current(&state, &holder(ID + 1, 0, "1")),
            "another incarnation"
        );
        assert!(
            !is_current(&state, &holder(ID, 7, "1")),
            "no such partition"
        );
    }
}
