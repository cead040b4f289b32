//! The rebalance planner: which partitions move where, so that every
//! receiver holds its share.
//!
//! [`plan_moves`] is a pure function of the metastore and the set of
//! receivers (members alive, heard from, not draining). It only writes move
//! targets; the target nodes do the moving. Rules (spec §6, rebalance):
//!
//! - The balanced total `T` counts every placed partition whose owner is
//!   alive. A dead owner's partitions never move (their only copy is on its
//!   disk) and are left out of the arithmetic, so they neither block nor
//!   distort the balance of the rest.
//! - Each of the `R` receivers gets a quota of ⌊T/R⌋ or ⌈T/R⌉. The
//!   ⌈T/R⌉ quotas go to the receivers that already hold most, so the plan
//!   moves as little as it can.
//! - A partition with a move in flight counts at its target, not at its
//!   owner: the plan never undoes or doubles a move.
//! - Partitions of draining members move first (they must all leave), then
//!   the excess of receivers above their quota. Each goes to the receiver
//!   with the largest shortfall, avoiding, when another receiver has room,
//!   the node that owns the same partition of the child's parent (or of a
//!   parent's children): anti-affinity is a preference, never a blocker.
//! - At most [`MAX_IN_FLIGHT_MOVES`] moves are in flight across the cluster;
//!   a plan only tops up to that count.
//!
//! Everything iterates in name order, so two leaders with the same state
//! plan the same moves.

use std::collections::BTreeMap;

use narad_meta::{Command, MemberStatus, Metastore, MoveTarget, SetMoveTargets, Topic};

use super::constants::MAX_IN_FLIGHT_MOVES;

/// The moves that bring the cluster closer to balance, as one
/// [`SetMoveTargets`] per topic (topics in name order), and nothing when
/// there is no receiver.
pub fn plan_moves(state: &Metastore, receivers: &[&str]) -> Vec<Command> {
    let in_flight = state.moves().count();
    let budget = MAX_IN_FLIGHT_MOVES.saturating_sub(in_flight);
    if receivers.is_empty() || budget == 0 {
        return Vec::new();
    }
    let mut planner = Planner::new(state, receivers);
    let mut chosen: BTreeMap<&str, Vec<MoveTarget>> = BTreeMap::new();
    for (topic, partition, owner) in planner.candidates() {
        if chosen.values().map(Vec::len).sum::<usize>() >= budget {
            break;
        }
        let Some(target) = planner.destination(topic, partition) else {
            break;
        };
        planner.account(owner, target);
        chosen.entry(topic).or_default().push(MoveTarget {
            partition,
            owner: owner.to_owned(),
            target: target.to_owned(),
        });
    }
    chosen
        .into_iter()
        .filter_map(|(topic, moves)| {
            let id = state.topic(topic)?.id.clone();
            Some(Command::SetMoveTargets(SetMoveTargets {
                topic: topic.to_owned(),
                id,
                moves,
            }))
        })
        .collect()
}

/// The loads and quotas a plan works against.
struct Planner<'a> {
    state: &'a Metastore,
    /// Receivers, in id order.
    receivers: Vec<&'a str>,
    /// Partitions each receiver holds or is receiving.
    load: BTreeMap<&'a str, usize>,
    /// How many partitions each receiver should hold.
    quota: BTreeMap<&'a str, usize>,
}

impl<'a> Planner<'a> {
    fn new(state: &'a Metastore, receivers: &[&'a str]) -> Self {
        let mut receivers = receivers.to_vec();
        receivers.sort_unstable();
        receivers.dedup();
        let mut load: BTreeMap<&str, usize> = receivers.iter().map(|id| (*id, 0)).collect();
        let mut total = 0;
        for (_, _, owner, target) in placements(state) {
            if !is_alive(state, owner) {
                continue;
            }
            total += 1;
            if let Some(count) = load.get_mut(target.unwrap_or(owner)) {
                *count += 1;
            }
        }
        let quota = quotas(&load, total);
        Self {
            state,
            receivers,
            load,
            quota,
        }
    }

    /// Partitions that should move, in the order they should: every
    /// partition of a draining (alive) member, then each over-quota
    /// receiver's excess. Partitions already moving are never candidates.
    fn candidates(&self) -> Vec<(&'a str, u32, &'a str)> {
        let idle: Vec<(&str, u32, &str)> = placements(self.state)
            .filter(|(_, _, _, target)| target.is_none())
            .map(|(topic, partition, owner, _)| (topic, partition, owner))
            .collect();
        let mut out: Vec<(&str, u32, &str)> = idle
            .iter()
            .copied()
            .filter(|(_, _, owner)| {
                self.state
                    .member(owner)
                    .is_some_and(|m| m.status == MemberStatus::Alive && m.draining)
            })
            .collect();
        for receiver in &self.receivers {
            let excess = self.load[receiver].saturating_sub(self.quota[receiver]);
            // The highest partitions of the newest topics go first: an
            // arbitrary but stable choice.
            out.extend(
                idle.iter()
                    .rev()
                    .copied()
                    .filter(|(_, _, owner)| owner == receiver)
                    .take(excess),
            );
        }
        out
    }

    /// The receiver to take `partition` of `topic`: the one furthest below
    /// its quota (ties by id), preferring one that is not the owner of a
    /// related partition; `None` when every receiver is at its quota.
    fn destination(&self, topic: &str, partition: u32) -> Option<&'a str> {
        let avoid = self.related_owners(topic, partition);
        let short = |id: &&str| self.load[id] < self.quota[id];
        let pick = |allowed: &dyn Fn(&&str) -> bool| {
            self.receivers
                .iter()
                .copied()
                .filter(short)
                .filter(|id| allowed(id))
                .max_by_key(|id| (self.quota[id] - self.load[id], std::cmp::Reverse(*id)))
        };
        pick(&|id| !avoid.contains(id)).or_else(|| pick(&|_| true))
    }

    /// Records a planned move from `owner` to `target`.
    fn account(&mut self, owner: &str, target: &'a str) {
        if let Some(count) = self.load.get_mut(owner) {
            *count -= 1;
        }
        *self.load.entry(target).or_default() += 1;
    }

    /// Owners (and targets) of the partitions anti-affinity keeps apart
    /// from `partition` of `topic`: the same partition of its parent, or of
    /// its children.
    fn related_owners(&self, topic: &str, partition: u32) -> Vec<&'a str> {
        let Some(record) = self.state.topic(topic) else {
            return Vec::new();
        };
        related(record)
            .filter_map(|other| self.state.assignment(other, partition))
            .flat_map(|at| [Some(at.owner.as_str()), at.target.as_deref()])
            .flatten()
            .filter_map(|id| self.receivers.iter().copied().find(|r| *r == id))
            .collect()
    }
}

/// The parent and the children of `topic`.
fn related(topic: &Topic) -> impl Iterator<Item = &str> {
    let parent = topic.parent.as_ref().map(|link| link.parent.as_str());
    parent
        .into_iter()
        .chain(topic.children.iter().map(String::as_str))
}

/// Every placed partition: (topic, partition, owner, target), topics in
/// name order, partitions in index order.
fn placements(state: &Metastore) -> impl Iterator<Item = (&str, u32, &str, Option<&str>)> {
    state.topics().flat_map(move |topic| {
        (0..topic.partitions).filter_map(move |partition| {
            let at = state.assignment(&topic.name, partition)?;
            Some((
                topic.name.as_str(),
                partition,
                at.owner.as_str(),
                at.target.as_deref(),
            ))
        })
    })
}

fn is_alive(state: &Metastore, id: &str) -> bool {
    state
        .member(id)
        .is_some_and(|member| member.status == MemberStatus::Alive)
}

/// ⌊T/R⌋ for every receiver, plus one for the `T mod R` receivers that
/// hold most now (ties by id).
fn quotas<'a>(load: &BTreeMap<&'a str, usize>, total: usize) -> BTreeMap<&'a str, usize> {
    let count = load.len();
    if count == 0 {
        return BTreeMap::new();
    }
    let (base, extra) = (total / count, total % count);
    let mut by_load: Vec<(&str, usize)> = load.iter().map(|(id, n)| (*id, *n)).collect();
    by_load.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    by_load
        .into_iter()
        .enumerate()
        .map(|(rank, (id, _))| (id, base + usize::from(rank < extra)))
        .collect()
}
