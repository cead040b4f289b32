//! The commands the metastore applies: one per Raft log entry.
//!
//! A command carries everything `apply` needs beyond the state: the
//! client's request as it was given (so `apply` checks it against the same
//! rules on every replica), the proposer's configured defaults, and every
//! value that is random or read from a clock (incarnation ids, attach
//! epochs, bcrypt hashes, timestamps). Nothing in `apply` reads a clock, a
//! random source, the configuration or the disk.

use serde::{Deserialize, Serialize};

use super::ids::{AttachEpoch, IncarnationId, PasswordHash};
use super::remote_command::{
    AttachRemoteChild, CreateRemote, DeleteRemote, PauseRemoteChild, ResealRemotes,
    ResumeRemoteChild, SkipRemoteRecord, UpdateRemote,
};
use super::state::Grant;

/// Who asked for a change, for the authorization re-check under apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Actor {
    /// Security is off: every check passes and there is no user.
    SecurityOff,
    /// An authenticated user.
    User(String),
}

/// Topic settings an operator configures; the proposer copies its own into
/// each topic command so every replica resolves defaults identically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicDefaults {
    /// `topic.default_partitions`.
    pub partitions: u32,
    /// `topic.max_partitions`: the ceiling for creates and growth.
    pub partitions_max: u32,
    /// `topic.default_retention_age_ms`.
    pub retention_ms: u64,
    /// `topic.default_visibility_timeout_ms`.
    pub visibility_timeout_ms: u64,
    /// `topic.default_max_in_flight_per_partition`.
    pub max_in_flight_per_partition: u64,
    /// `topic.default_max_acked_ahead_per_partition`.
    pub max_acked_ahead_per_partition: u64,
}

impl Default for TopicDefaults {
    /// The spec's built-in defaults.
    fn default() -> Self {
        Self {
            partitions: 3,
            partitions_max: 108,
            // 7 days.
            retention_ms: 604_800_000,
            visibility_timeout_ms: 30_000,
            max_in_flight_per_partition: 1_024,
            max_acked_ahead_per_partition: 1_024,
        }
    }
}

/// `POST /v1/topics`. Numeric fields are as the client sent them: `None`
/// when omitted, `Some(0)` for "use the default" (except retention, where 0
/// means keep forever and only omission means default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateTopic {
    /// Who creates it; becomes the owner.
    pub actor: Actor,
    /// The new topic's name.
    pub name: String,
    /// Minted by the proposer.
    pub id: IncarnationId,
    /// Partition count; default, or the parent's count under `parent`.
    pub partitions: Option<i64>,
    /// Retention; omitted = default, 0 = forever.
    pub retention_ms: Option<i64>,
    /// Lease length.
    pub visibility_timeout_ms: Option<i64>,
    /// Per-partition in-flight cap.
    pub max_in_flight_per_partition: Option<i64>,
    /// Per-partition acked-ahead cap.
    pub max_acked_ahead_per_partition: Option<i64>,
    /// Idempotency window; omitted = the default (two minutes). Absent from
    /// the JSON and the version-2 binary form of older builds.
    #[serde(default)]
    pub idempotency_window_ms: Option<i64>,
    /// A schema document (JSON text), registered as version 1.
    pub schema: Option<String>,
    /// Create as a fan-out child of an existing topic, atomically.
    pub parent: Option<NewLink>,
    /// The proposer's defaults.
    pub defaults: TopicDefaults,
    /// The proposer's clock, Unix ms.
    pub created_at_ms: u64,
}

impl CreateTopic {
    /// The create of `name` as incarnation `id` by `actor` at
    /// `created_at_ms`, with every setting omitted (the defaults decide)
    /// and no parent: what `POST /v1/topics {"name": ...}` proposes.
    pub fn named(actor: Actor, name: &str, id: IncarnationId, created_at_ms: u64) -> Self {
        Self {
            actor,
            name: name.to_owned(),
            id,
            partitions: None,
            retention_ms: None,
            visibility_timeout_ms: None,
            max_in_flight_per_partition: None,
            max_acked_ahead_per_partition: None,
            idempotency_window_ms: None,
            schema: None,
            parent: None,
            defaults: TopicDefaults::default(),
            created_at_ms,
        }
    }
}

/// The fan-out link of a create-as-child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewLink {
    /// The parent topic's name.
    pub parent: String,
    /// The parent incarnation the proposer read (and asked owners about).
    pub parent_id: IncarnationId,
    /// The child's fan-out delay (`fanout_delay_ms`).
    pub fanout_delay_ms: Option<i64>,
    /// Minted by the proposer.
    pub attach_epoch: AttachEpoch,
    /// One committed high watermark per parent partition.
    pub attach_offsets: Vec<u64>,
}

/// `PATCH /v1/topics/{topic}` without the schema (which is
/// [`AddSchemaVersion`]). Groups apply in the spec's order, retention, then
/// caps, then partitions, with the idempotency window right after
/// retention, and no transaction: the first failing group returns its
/// error and earlier groups stay applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterTopic {
    /// Who alters it (owner or admin).
    pub actor: Actor,
    /// The topic.
    pub name: String,
    /// The incarnation the proposer read, if it read one.
    pub expected_id: Option<IncarnationId>,
    /// New retention (0 = forever).
    pub retention_ms: Option<i64>,
    /// New in-flight cap (0 = default).
    pub max_in_flight_per_partition: Option<i64>,
    /// New acked-ahead cap (0 = default).
    pub max_acked_ahead_per_partition: Option<i64>,
    /// New idempotency window. Absent from the JSON and the version-2
    /// binary form of older builds.
    #[serde(default)]
    pub idempotency_window_ms: Option<i64>,
    /// New partition count, strictly larger.
    pub partitions: Option<i64>,
    /// The proposer's defaults.
    pub defaults: TopicDefaults,
}

/// `DELETE /v1/topics/{topic}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteTopic {
    /// Who deletes it (owner or admin).
    pub actor: Actor,
    /// The topic.
    pub name: String,
    /// The incarnation the proposer read, if it read one.
    pub expected_id: Option<IncarnationId>,
}

impl AlterTopic {
    /// An alter of `name` (incarnation `expected_id`, if the proposer read
    /// one) by `actor` that changes no field yet, under the built-in
    /// defaults: a caller sets the fields of the one group it proposes.
    pub fn named(actor: Actor, name: &str, expected_id: Option<IncarnationId>) -> Self {
        Self {
            actor,
            name: name.to_owned(),
            expected_id,
            retention_ms: None,
            max_in_flight_per_partition: None,
            max_acked_ahead_per_partition: None,
            idempotency_window_ms: None,
            partitions: None,
            defaults: TopicDefaults::default(),
        }
    }
}

/// A new schema version (the schema part of `PATCH /v1/topics/{topic}`).
/// The proposer has validated the document and checked that it is a
/// compatible widening; an identical document is a no-op.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddSchemaVersion {
    /// Who changes it (owner or admin).
    pub actor: Actor,
    /// The topic.
    pub name: String,
    /// The incarnation the proposer read, if it read one.
    pub expected_id: Option<IncarnationId>,
    /// The document, JSON text.
    pub document: String,
    /// `schema_base_version`: apply only if the topic is at this version.
    pub base_version: Option<u32>,
}

/// `POST /v1/topics/{parent}/children`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachChild {
    /// Who attaches (manages both topics).
    pub actor: Actor,
    /// The parent topic.
    pub parent: String,
    /// The parent incarnation the proposer read.
    pub parent_id: Option<IncarnationId>,
    /// The child topic.
    pub child: String,
    /// The child incarnation the proposer read.
    pub child_id: Option<IncarnationId>,
    /// `delay_ms`; omitted = 0.
    pub delay_ms: Option<i64>,
    /// Minted by the proposer.
    pub attach_epoch: AttachEpoch,
    /// One committed high watermark per parent partition.
    pub attach_offsets: Vec<u64>,
}

/// `DELETE /v1/topics/{parent}/children/{child}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetachChild {
    /// Who detaches (manages either topic).
    pub actor: Actor,
    /// The parent topic.
    pub parent: String,
    /// The child topic.
    pub child: String,
}

/// One placement decided by the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionOwner {
    /// The partition index.
    pub partition: u32,
    /// The member to own it.
    pub owner: String,
}

/// Placements for partitions that wait for an owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignPartitions {
    /// The topic.
    pub topic: String,
    /// The incarnation the controller read.
    pub id: IncarnationId,
    /// The placements, applied all or none.
    pub owners: Vec<PartitionOwner>,
}

/// A data node announces itself (first start or restart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterMember {
    /// Node id.
    pub id: String,
    /// HTTP API address.
    pub http_addr: String,
    /// Node RPC address.
    pub rpc_addr: String,
    /// The leader's clock, Unix ms.
    pub at_ms: u64,
}

/// A data node is still running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Node id.
    pub id: String,
    /// The leader's clock, Unix ms.
    pub at_ms: u64,
}

/// The controller marks a silent data node dead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkDead {
    /// Node id.
    pub id: String,
    /// The heartbeat stamp the decision was based on: a heartbeat applied
    /// since then makes the mark stale, and it is refused.
    pub observed_heartbeat_ms: u64,
}

/// Start or stop decommissioning a data node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetDraining {
    /// Node id.
    pub id: String,
    /// `true` to drain, `false` to clear the mark.
    pub draining: bool,
}

/// One move the planner decided: take a partition from the owner it read
/// to a receiver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveTarget {
    /// The partition index.
    pub partition: u32,
    /// The owner the planner read; the move is refused if it changed.
    pub owner: String,
    /// The member to take it.
    pub target: String,
}

/// The planner's moves for one topic, applied all or none. Each partition
/// must still have the owner the planner read and no target yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetMoveTargets {
    /// The topic.
    pub topic: String,
    /// The incarnation the planner read.
    pub id: IncarnationId,
    /// The moves.
    pub moves: Vec<MoveTarget>,
}

/// Clear a partition's move target, if it is still `target`: an operator's
/// abort, or the controller giving up on a dead target. Once the flip has
/// committed the target is the owner, and the abort is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortMove {
    /// The topic.
    pub topic: String,
    /// The incarnation the proposer read.
    pub id: IncarnationId,
    /// The partition index.
    pub partition: u32,
    /// The target the proposer means to clear.
    pub target: String,
}

/// The flip of a move: the target installed its copy, so it becomes the
/// owner. Applied only if the owner is still `source` and the target still
/// `target` (a compare-and-set), so a flip can commit at most once and
/// never after an abort.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteMove {
    /// The topic.
    pub topic: String,
    /// The incarnation the target copied.
    pub id: IncarnationId,
    /// The partition index.
    pub partition: u32,
    /// The owner the copy was taken from.
    pub source: String,
    /// The member that installed the copy.
    pub target: String,
}

/// A decommissioned member leaves the cluster: refused unless it is
/// draining, owns nothing and no move is headed to it. Its id is
/// remembered, so its heartbeats are refused from then on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveMember {
    /// Node id.
    pub id: String,
}

/// Seed the root admin of a secured cluster that has no users yet. The
/// proposer chose the password (`NARAD_ADMIN_PASSWORD`, or random and
/// logged once) and hashed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedAdmin {
    /// The root admin's username.
    pub username: String,
    /// bcrypt hash of its password.
    pub password_hash: PasswordHash,
    /// The proposer's clock, Unix ms.
    pub at_ms: u64,
}

/// `POST /v1/users`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateUser {
    /// Who creates it (an admin; root to give `admin`).
    pub actor: Actor,
    /// The new username.
    pub username: String,
    /// bcrypt hash of the password, computed by the proposer after checking
    /// the password's length.
    pub password_hash: PasswordHash,
    /// The user's grants.
    pub grants: Vec<Grant>,
    /// The proposer's clock, Unix ms.
    pub at_ms: u64,
}

/// `DELETE /v1/users/{u}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteUser {
    /// Who deletes (an admin, not the user itself).
    pub actor: Actor,
    /// The user.
    pub username: String,
}

/// `PUT /v1/users/{u}/password`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetPassword {
    /// Who changes it (an admin, or the user itself).
    pub actor: Actor,
    /// The user.
    pub username: String,
    /// bcrypt hash of the new password.
    pub password_hash: PasswordHash,
    /// When the proposer checked `current_password`: the hash it checked it
    /// against. A user changing its own password without admin rights must
    /// have been checked; a different hash now means the password changed
    /// in between.
    pub checked_hash: Option<PasswordHash>,
    /// The proposer's clock, Unix ms.
    pub at_ms: u64,
}

/// `PUT /v1/users/{u}/grants`: replaces all grants (`[]` revokes all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetGrants {
    /// Who changes them (an admin, not for itself, not for root).
    pub actor: Actor,
    /// The user.
    pub username: String,
    /// The new grants.
    pub grants: Vec<Grant>,
    /// The proposer's clock, Unix ms.
    pub at_ms: u64,
}

/// One metastore change, as carried by one log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// See [`CreateTopic`].
    CreateTopic(CreateTopic),
    /// See [`AlterTopic`].
    AlterTopic(AlterTopic),
    /// See [`DeleteTopic`].
    DeleteTopic(DeleteTopic),
    /// See [`AddSchemaVersion`].
    AddSchemaVersion(AddSchemaVersion),
    /// See [`AttachChild`].
    AttachChild(AttachChild),
    /// See [`DetachChild`].
    DetachChild(DetachChild),
    /// See [`AssignPartitions`].
    AssignPartitions(AssignPartitions),
    /// See [`RegisterMember`].
    RegisterMember(RegisterMember),
    /// See [`Heartbeat`].
    Heartbeat(Heartbeat),
    /// See [`MarkDead`].
    MarkDead(MarkDead),
    /// See [`SetDraining`].
    SetDraining(SetDraining),
    /// See [`SeedAdmin`].
    SeedAdmin(SeedAdmin),
    /// See [`CreateUser`].
    CreateUser(CreateUser),
    /// See [`DeleteUser`].
    DeleteUser(DeleteUser),
    /// See [`SetPassword`].
    SetPassword(SetPassword),
    /// See [`SetGrants`].
    SetGrants(SetGrants),
    /// See [`SetMoveTargets`].
    SetMoveTargets(SetMoveTargets),
    /// See [`AbortMove`].
    AbortMove(AbortMove),
    /// See [`CompleteMove`].
    CompleteMove(CompleteMove),
    /// A flip without the source's handoff (spec §6 "Force-promote"): the
    /// same compare-and-set as [`Command::CompleteMove`], applied only while
    /// the source is marked dead. The target proposes it once the source
    /// has been dead for the force-promote delay and its copy reached the
    /// source's last known high watermark.
    ForcePromote(CompleteMove),
    /// See [`RemoveMember`].
    RemoveMember(RemoveMember),
    /// See [`CreateRemote`].
    CreateRemote(CreateRemote),
    /// See [`UpdateRemote`].
    UpdateRemote(UpdateRemote),
    /// See [`DeleteRemote`].
    DeleteRemote(DeleteRemote),
    /// See [`ResealRemotes`].
    ResealRemotes(ResealRemotes),
    /// See [`AttachRemoteChild`].
    AttachRemoteChild(AttachRemoteChild),
    /// See [`PauseRemoteChild`].
    PauseRemoteChild(PauseRemoteChild),
    /// See [`ResumeRemoteChild`].
    ResumeRemoteChild(ResumeRemoteChild),
    /// See [`SkipRemoteRecord`].
    SkipRemoteRecord(SkipRemoteRecord),
}

/// Where a command sits in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApplyContext {
    /// The log index of the entry carrying the command. Indexes only grow.
    pub index: u64,
}

/// What an accepted command did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The state changed.
    Applied,
    /// Nothing needed changing (an identical schema, a seed after users
    /// exist, a draining mark already set).
    Unchanged,
}
