//! Data-node membership: register, heartbeat, mark dead, drain. Removal
//! (the end of a decommission) is in `moves.rs`, beside the moves that
//! empty a member first.

use super::super::command::{Heartbeat, MarkDead, Outcome, RegisterMember, SetDraining};
use super::super::error::MetastoreError;
use super::super::limits::MEMBER_ID_BYTES_MAX;
use super::super::state::{Member, MemberStatus, Metastore};
use super::Domain;

fn check_member_id(id: &str) -> Result<(), MetastoreError> {
    let printable = id.bytes().all(|byte| byte.is_ascii_graphic());
    if id.is_empty() || id.len() > MEMBER_ID_BYTES_MAX || !printable {
        return Err(MetastoreError::MemberIdInvalid { id: id.to_owned() });
    }
    Ok(())
}

impl Metastore {
    fn member_mut(&mut self, id: &str) -> Result<&mut Member, MetastoreError> {
        self.members
            .get_mut(id)
            .ok_or(MetastoreError::MemberNotFound)
    }

    /// A node (re)announces itself: it is alive from now, at the addresses it
    /// gives; a draining mark survives.
    pub(super) fn register_member(
        &mut self,
        register: &RegisterMember,
    ) -> Result<Outcome, MetastoreError> {
        check_member_id(&register.id)?;
        if register.http_addr.is_empty() || register.rpc_addr.is_empty() {
            return Err(MetastoreError::MemberAddressMissing {
                id: register.id.clone(),
            });
        }
        let fresh = Member {
            id: register.id.clone(),
            http_addr: register.http_addr.clone(),
            rpc_addr: register.rpc_addr.clone(),
            last_heartbeat_ms: register.at_ms,
            status: MemberStatus::Alive,
            draining: false,
        };
        // A node starting again under a removed id is the operator's doing:
        // it joins as a new member.
        self.removed.remove(&register.id);
        let routing_changed = match self.members.get_mut(&register.id) {
            None => {
                self.members.insert(register.id.clone(), fresh);
                true
            }
            Some(member) => {
                let draining = member.draining;
                let same = member.http_addr == fresh.http_addr
                    && member.rpc_addr == fresh.rpc_addr
                    && member.status == MemberStatus::Alive;
                *member = Member { draining, ..fresh };
                !same
            }
        };
        if routing_changed {
            self.changed(Domain::Members);
        }
        Ok(Outcome::Applied)
    }

    /// A heartbeat stamps the leader's time; a dead member that heartbeats
    /// is alive again. A removed member's heartbeat is refused.
    pub(super) fn heartbeat(&mut self, heartbeat: &Heartbeat) -> Result<Outcome, MetastoreError> {
        if self.removed.contains(&heartbeat.id) {
            return Err(MetastoreError::MemberRemoved {
                id: heartbeat.id.clone(),
            });
        }
        let member = self.member_mut(&heartbeat.id)?;
        member.last_heartbeat_ms = heartbeat.at_ms;
        let revived = member.status == MemberStatus::Dead;
        member.status = MemberStatus::Alive;
        if revived {
            self.changed(Domain::Members);
        }
        Ok(Outcome::Applied)
    }

    /// The controller's verdict, refused if a heartbeat arrived after the
    /// heartbeat it judged.
    pub(super) fn mark_dead(&mut self, mark: &MarkDead) -> Result<Outcome, MetastoreError> {
        let member = self.member_mut(&mark.id)?;
        if member.status == MemberStatus::Dead {
            return Ok(Outcome::Unchanged);
        }
        if member.last_heartbeat_ms != mark.observed_heartbeat_ms {
            return Err(MetastoreError::HeartbeatChanged);
        }
        member.status = MemberStatus::Dead;
        self.changed(Domain::Members);
        Ok(Outcome::Applied)
    }

    pub(super) fn set_draining(&mut self, drain: &SetDraining) -> Result<Outcome, MetastoreError> {
        let member = self.member_mut(&drain.id)?;
        if member.draining == drain.draining {
            return Ok(Outcome::Unchanged);
        }
        member.draining = drain.draining;
        self.changed(Domain::Members);
        Ok(Outcome::Applied)
    }
}
