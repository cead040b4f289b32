//! The controller's decision pass.

use std::time::Duration;

use narad_meta::{
    AbortMove, AssignPartitions, Command, MarkDead, Member, MemberStatus, Metastore,
    PartitionOwner, Topic,
};

use super::constants::{
    DEAD_AFTER, DEAD_TARGET_ABORT_AFTER, ELECTION_GRACE, HEARTBEAT_INTERVAL,
    MEMBERSHIP_WATCH_INTERVAL, REBALANCE_INTERVAL, SWEEP_INTERVAL,
};
use super::plan::plan_moves;

/// The controller's timings. Defaults are the spec's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerConfig {
    /// How often data nodes heartbeat.
    pub heartbeat_interval: Duration,
    /// Silence after which an alive member is marked dead.
    pub dead_after: Duration,
    /// How long a new leader waits before marking anyone dead.
    pub election_grace: Duration,
    /// Re-check interval while partitions wait for an owner.
    pub membership_watch_interval: Duration,
    /// Longest gap between passes.
    pub sweep_interval: Duration,
    /// Longest gap between passes while moves are in flight or members
    /// drain.
    pub rebalance_interval: Duration,
    /// A move whose target has been dead this long (after it was found
    /// dead) is aborted.
    pub dead_target_abort_after: Duration,
    /// Security on: a metastore without users needs its root admin.
    pub security_enabled: bool,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: HEARTBEAT_INTERVAL,
            dead_after: DEAD_AFTER,
            election_grace: ELECTION_GRACE,
            membership_watch_interval: MEMBERSHIP_WATCH_INTERVAL,
            sweep_interval: SWEEP_INTERVAL,
            rebalance_interval: REBALANCE_INTERVAL,
            dead_target_abort_after: DEAD_TARGET_ABORT_AFTER,
            security_enabled: true,
        }
    }
}

/// What one pass decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Commands to propose, in this order: dead markings; placements (one
    /// command per topic, topics in name order, parents before children);
    /// aborts of moves to long-dead targets; new move targets (one command
    /// per topic).
    pub commands: Vec<Command>,
    /// Propose a root admin ([`narad_meta::SeedAdmin`]): security is
    /// on and there are no users. The runtime picks and hashes the password.
    pub seed_admin: bool,
    /// Members that are overdue but were not marked dead because the
    /// breaker tripped (for the `narad_dead_marking_refused` metric and a
    /// warning).
    pub dead_marking_refused: Vec<String>,
    /// Pass again no later than this (same clock as `now`).
    pub next_pass_at: Duration,
}

/// The leader's controller. Holds only its configuration and when this node
/// became leader; everything else is read from the metastore each pass.
#[derive(Debug, Clone)]
pub struct Controller {
    config: ControllerConfig,
    leader_since: Duration,
}

impl Controller {
    /// A controller for a node that became leader at `leader_since` (Unix
    /// time on this node's clock, the clock that stamps heartbeats).
    ///
    /// # Panics
    /// If `dead_after` is not longer than the heartbeat interval: every
    /// member would be marked dead between two heartbeats.
    pub fn new(config: ControllerConfig, leader_since: Duration) -> Self {
        assert!(
            config.dead_after > config.heartbeat_interval,
            "dead_after {:?} must exceed the heartbeat interval {:?}",
            config.dead_after,
            config.heartbeat_interval
        );
        Self {
            config,
            leader_since,
        }
    }

    /// One pass over `state` at `now` (Unix time on this leader's clock).
    ///
    /// Dead marking: an alive member whose last heartbeat is at least
    /// `dead_after` old is overdue. Nobody is marked before the leader has
    /// led for `election_grace`. The breaker: data nodes are not Raft
    /// voters here, so it counts data-node members instead: if marking every
    /// overdue member would leave fewer than a majority of all members
    /// alive, the silence more likely lies at the leader's end than at the
    /// nodes', and the pass marks nobody (the spec's breaker refuses for all
    /// in the pass, too).
    pub fn decide(&self, state: &Metastore, now: Duration) -> Decision {
        let now_ms = millis(now);
        let overdue: Vec<&Member> = state
            .members()
            .filter(|member| member.status == MemberStatus::Alive)
            .filter(|member| self.is_silent(member, now_ms))
            .collect();
        let mut commands = Vec::new();
        let mut dead_marking_refused = Vec::new();
        if !overdue.is_empty() && self.in_grace(now) {
            // Held back by the grace, not refused: nothing to report.
        } else if breaker_trips(state, overdue.len()) {
            dead_marking_refused = overdue.iter().map(|member| member.id.clone()).collect();
        } else {
            commands.extend(overdue.iter().map(|member| mark_dead(member)));
        }
        let receivers: Vec<&str> = state
            .members()
            .filter(|member| member.is_receiver() && !self.is_silent(member, now_ms))
            .map(|member| member.id.as_str())
            .collect();
        let (placements, waiting) = place_waiting(state, &receivers);
        commands.extend(placements);
        let aborts = self.abort_dead_targets(state, now_ms);
        if aborts.is_empty() {
            // Plan against the moves that stay; after aborts, the next
            // pass (woken by their apply) plans again.
            commands.extend(plan_moves(state, &receivers));
        } else {
            commands.extend(aborts);
        }
        Decision {
            commands,
            seed_admin: self.config.security_enabled && state.users().next().is_none(),
            dead_marking_refused,
            next_pass_at: self.next_pass_at(state, now, waiting),
        }
    }

    /// Aborts of moves whose target is dead and has been silent for the
    /// dead-after span plus the abort delay: a restart within that time
    /// resumes the move instead.
    fn abort_dead_targets(&self, state: &Metastore, now_ms: u64) -> Vec<Command> {
        let limit = millis(self.config.dead_after + self.config.dead_target_abort_after);
        state
            .moves()
            .filter_map(|(topic, partition, assignment)| {
                let target = assignment.target.as_deref()?;
                let member = state.member(target)?;
                let given_up = member.status == MemberStatus::Dead
                    && now_ms.saturating_sub(member.last_heartbeat_ms) >= limit;
                if !given_up {
                    return None;
                }
                Some(Command::AbortMove(AbortMove {
                    topic: topic.to_owned(),
                    id: state.topic(topic)?.id.clone(),
                    partition,
                    target: target.to_owned(),
                }))
            })
            .collect()
    }

    fn in_grace(&self, now: Duration) -> bool {
        now < self.leader_since + self.config.election_grace
    }

    /// Not heard from for the dead-after span.
    fn is_silent(&self, member: &Member, now_ms: u64) -> bool {
        now_ms.saturating_sub(member.last_heartbeat_ms) >= millis(self.config.dead_after)
    }

    /// The earliest of: the next sweep; the watch interval while partitions
    /// wait; the rebalance interval while moves are in flight or members
    /// drain; the end of the grace; the moment the next alive member falls
    /// silent.
    fn next_pass_at(&self, state: &Metastore, now: Duration, waiting: bool) -> Duration {
        let mut next = now + self.config.sweep_interval;
        if waiting {
            next = next.min(now + self.config.membership_watch_interval);
        }
        let rebalancing =
            state.moves().next().is_some() || state.members().any(|member| member.draining);
        if rebalancing {
            next = next.min(now + self.config.rebalance_interval);
        }
        let grace_end = self.leader_since + self.config.election_grace;
        if grace_end > now {
            next = next.min(grace_end);
        }
        let silent_at = state
            .members()
            .filter(|member| member.status == MemberStatus::Alive)
            .map(|member| Duration::from_millis(member.last_heartbeat_ms) + self.config.dead_after)
            .filter(|at| *at > now)
            .min();
        silent_at.map_or(next, |at| next.min(at))
    }
}

fn millis(time: Duration) -> u64 {
    u64::try_from(time.as_millis()).unwrap_or(u64::MAX)
}

fn mark_dead(member: &Member) -> Command {
    Command::MarkDead(MarkDead {
        id: member.id.clone(),
        observed_heartbeat_ms: member.last_heartbeat_ms,
    })
}

/// Whether marking `overdue` members dead would leave fewer than a majority
/// of all members alive.
fn breaker_trips(state: &Metastore, overdue: usize) -> bool {
    if overdue == 0 {
        return false;
    }
    let members = state.members().count();
    let alive = state
        .members()
        .filter(|member| member.status == MemberStatus::Alive)
        .count();
    let majority = members / 2 + 1;
    alive - overdue < majority
}

/// Placements for every waiting partition, and whether some partition still
/// waits afterwards (no receiver at all).
fn place_waiting(state: &Metastore, receivers: &[&str]) -> (Vec<Command>, bool) {
    let mut placer = Placer::new(state, receivers);
    let mut commands = Vec::new();
    let mut waiting = false;
    // Parents and standalone topics first, so a child sees its parent's
    // owners, including those placed in this same pass.
    let (children, others): (Vec<&Topic>, Vec<&Topic>) =
        state.topics().partition(|topic| topic.parent.is_some());
    for topic in others.into_iter().chain(children) {
        let open = open_partitions(state, topic);
        if open.is_empty() {
            continue;
        }
        if receivers.is_empty() {
            waiting = true;
            continue;
        }
        let owners = open
            .into_iter()
            .map(|partition| placer.place(topic, partition))
            .collect::<Vec<_>>();
        commands.push(Command::AssignPartitions(AssignPartitions {
            topic: topic.name.clone(),
            id: topic.id.clone(),
            owners,
        }));
    }
    (commands, waiting)
}

/// Partitions of `topic` with no owner, in index order.
fn open_partitions(state: &Metastore, topic: &Topic) -> Vec<u32> {
    (0..topic.partitions)
        .filter(|partition| state.owner(&topic.name, *partition).is_none())
        .collect()
}

/// Round-robin over receivers. The rotation starts at the number of
/// partitions already placed in the cluster, so successive passes (and a
/// new leader) continue the rotation instead of restarting at the first
/// receiver.
struct Placer<'a> {
    state: &'a Metastore,
    receivers: &'a [&'a str],
    next: usize,
    /// Placements made in this pass, for children of topics placed in it.
    placed: Vec<(String, u32, String)>,
}

impl<'a> Placer<'a> {
    fn new(state: &'a Metastore, receivers: &'a [&'a str]) -> Self {
        let placed_before: usize = state
            .topics()
            .filter_map(|topic| state.assignments(&topic.name))
            .map(|slots| slots.iter().flatten().count())
            .sum();
        Self {
            state,
            receivers,
            next: placed_before,
            placed: Vec::new(),
        }
    }

    /// The owner for `topic`'s `partition`: the next receiver in rotation,
    /// skipping the owner of the parent's same partition if another
    /// receiver exists.
    fn place(&mut self, topic: &Topic, partition: u32) -> PartitionOwner {
        let avoid = self.parent_owner(topic, partition);
        let count = self.receivers.len();
        let skip = (0..count)
            .find(|step| Some(self.receivers[(self.next + step) % count]) != avoid.as_deref())
            .unwrap_or(0);
        let owner = self.receivers[(self.next + skip) % count].to_owned();
        self.next += skip + 1;
        self.placed
            .push((topic.name.clone(), partition, owner.clone()));
        PartitionOwner { partition, owner }
    }

    /// The owner of the parent's partition with the same index, if any.
    fn parent_owner(&self, topic: &Topic, partition: u32) -> Option<String> {
        let parent = &topic.parent.as_ref()?.parent;
        if let Some(owner) = self.state.owner(parent, partition) {
            return Some(owner.to_owned());
        }
        self.placed
            .iter()
            .find(|(name, index, _)| name == parent && *index == partition)
            .map(|(_, _, owner)| owner.clone())
    }
}
