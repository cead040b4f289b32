//! What a partition's files recover to (pure): the newest valid slot, then
//! the larger frontier of that and `consumer.offset`.

use super::format::{SLOT_COUNT, SlotError, SlotRecord};
use super::position::ConsumerPosition;
use super::position::OFFSET_LIMIT;

/// What a partition's files say, after the recovery rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// The position to seed the shard with.
    pub(crate) position: ConsumerPosition,
    /// The slot holding the newest valid record, if any: it stays the anchor
    /// while priming writes the other slot.
    pub(crate) newest_slot: Option<usize>,
    /// The newest valid record's generation (0 when none).
    pub(crate) generation: u64,
}

/// Recovery: the newest valid slot wins (two invalid slots mean frontier 0),
/// then the larger frontier of that and `consumer.offset` wins.
pub(crate) fn recover(
    slots: &[Result<SlotRecord, SlotError>; SLOT_COUNT],
    offset_frontier: Option<u64>,
) -> Recovered {
    let newest = slots
        .iter()
        .enumerate()
        .filter_map(|(index, slot)| slot.as_ref().ok().map(|record| (index, record)))
        .max_by_key(|(_, record)| record.generation);
    let (mut position, newest_slot, generation) = match newest {
        Some((index, record)) => (record.position.clone(), Some(index), record.generation),
        None => (ConsumerPosition::default(), None, 0),
    };
    if let Some(frontier) = offset_frontier.filter(|&frontier| frontier < OFFSET_LIMIT) {
        position.raise_frontier(frontier);
    }
    Recovered {
        position,
        newest_slot,
        generation,
    }
}
