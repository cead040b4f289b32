//! The metastore's per-operation errors. Each carries the text a client
//! sees, and [`MetastoreError::status`] gives the HTTP status the spec pairs
//! with it. Where the spec or the wire contract quotes a text, the text here
//! is that quote, because clients match on substrings of it.

use super::limits::{
    CHILDREN_MAX, FANOUT_DELAY_MS_MAX, IDEMPOTENCY_WINDOW_MS_MAX, IDEMPOTENCY_WINDOW_MS_MIN,
    PASSWORD_BYTES_MAX, REMOTE_CHILDREN_MAX, REMOTE_LANES_MAX, REMOTE_PARENT_RETENTION_MS_MIN,
    REMOTE_PAUSE_REASON_BYTES_MAX, REMOTE_SKIPS_PER_PARTITION_MAX, REMOTES_MAX,
    SCHEMA_CLUSTER_BYTES_MAX, SCHEMA_DOCUMENT_BYTES_MAX, SCHEMA_TOPIC_BYTES_MAX,
    SCHEMA_VERSIONS_MAX, TOPIC_NAME_BYTES_MAX,
};

/// Why a command was refused. A refused command changes nothing, except an
/// alter that failed in a later group (see [`super::Command::AlterTopic`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetastoreError {
    // ---- Topic names and settings (400) ----
    /// The topic name is empty.
    #[error("topic name required")]
    TopicNameEmpty,
    /// The topic name is longer than new names may be.
    #[error(
        "topic name is {bytes} bytes; new topic names are limited to {TOPIC_NAME_BYTES_MAX} bytes"
    )]
    TopicNameTooLong {
        /// Length of the refused name in bytes.
        bytes: usize,
    },
    /// The topic name has a character outside `A-Z a-z 0-9 . _ -`, or is
    /// `.` or `..`.
    #[error(
        "invalid topic name {name:?}: use only the characters A-Z a-z 0-9 . _ - (and not \".\" or \"..\")"
    )]
    TopicNameInvalid {
        /// The refused name.
        name: String,
    },
    /// Fewer partitions than the floor.
    #[error("partitions must be >= 3 (0 = use default)")]
    PartitionsTooFew,
    /// More partitions than the configured ceiling.
    #[error("partitions must be <= {max}")]
    PartitionsTooMany {
        /// The ceiling in force (`topic.max_partitions`).
        max: u32,
    },
    /// An alter asked for no more partitions than the topic has.
    #[error("partitions can only grow: the topic has {current}, asked for {requested}")]
    PartitionsCannotShrink {
        /// The topic's partition count.
        current: u32,
        /// The refused count.
        requested: u32,
    },
    /// A retention under zero.
    #[error("retention_ms must not be negative")]
    RetentionNegative,
    /// A retention between zero and one hour.
    #[error(
        "retention_ms must be 0 (keep forever) or at least 3600000 (1 hour), got {retention_ms}"
    )]
    RetentionBelowFloor {
        /// The refused retention.
        retention_ms: u64,
    },
    /// An idempotency window outside one second to one day (omitted asks
    /// for the default; there is no "0 = default").
    #[error(
        "idempotency_window_ms must be at least {IDEMPOTENCY_WINDOW_MS_MIN} (1 second) and at most {IDEMPOTENCY_WINDOW_MS_MAX} (1 day), got {idempotency_window_ms}"
    )]
    IdempotencyWindowOutOfRange {
        /// The refused window, as sent.
        idempotency_window_ms: i64,
    },
    /// A visibility timeout under zero (zero asks for the default).
    #[error("visibility_timeout_ms must not be negative")]
    VisibilityTimeoutNegative,
    /// A per-partition cap under zero (zero asks for the default).
    #[error("{field} must not be negative")]
    CapNegative {
        /// The JSON field name of the cap.
        field: &'static str,
    },
    /// An alter that changes nothing at all.
    #[error("nothing to change: give at least one field")]
    AlterEmpty,

    // ---- Topic state (404 / 409) ----
    /// No topic of that name.
    #[error("topic not found")]
    TopicNotFound,
    /// The parent named in a create does not exist.
    #[error("parent topic not found")]
    ParentNotFound,
    /// A topic of exactly that name exists.
    #[error("topic already exists")]
    TopicExists,
    /// A topic whose name differs only in letter case exists.
    #[error(
        "topic already exists: {name:?} differs only in letter case from the existing topic {existing:?}; on a case-insensitive filesystem both would share one directory, so choose another name"
    )]
    TopicNameCaseClash {
        /// The refused name.
        name: String,
        /// The existing topic's name.
        existing: String,
    },
    /// The topic was deleted (and perhaps recreated) since the proposer read
    /// it: the command names an incarnation or a shape that is gone.
    #[error("topic changed since it was read")]
    TopicChanged,

    // ---- Fan-out (400 / 404 / 409) ----
    /// An attach without a child name.
    #[error("child required")]
    ChildRequired,
    /// An attach of a topic to itself.
    #[error("a topic cannot be attached to itself")]
    ChildIsParent,
    /// A fan-out delay under zero.
    #[error("fan-out delay must not be negative")]
    FanoutDelayNegative,
    /// A fan-out delay over one year.
    #[error("fan-out delay too long: at most {FANOUT_DELAY_MS_MAX} ms (1 year)")]
    FanoutDelayTooLong,
    /// The link would break the flat roles (one parent per child, no
    /// children under a child, no chains).
    #[error("fan-out role conflict: {reason}")]
    FanoutRoleConflict {
        /// Which rule the link would break.
        reason: String,
    },
    /// The parent already has the most children allowed.
    #[error("fan-out child limit reached: a parent has at most {CHILDREN_MAX} children")]
    ChildLimit,
    /// The parent would keep records for less than a child's delay + 1 h.
    #[error(
        "parent retention must be at least the fan-out delay plus 1 hour: retention_ms is {retention_ms}, needs at least {required_ms}"
    )]
    DelayExceedsRetention {
        /// The parent's (proposed) retention.
        retention_ms: u64,
        /// The least retention the delay allows.
        required_ms: u64,
    },
    /// The two topics' schema histories cannot be made identical.
    #[error("fan-out schema mismatch: {reason}")]
    SchemaMismatch {
        /// What differs.
        reason: String,
    },
    /// A detach of a topic that is not this parent's child.
    #[error("child is not attached to this parent")]
    NotLinked,

    // ---- Schemas (400 / 409) ----
    /// An empty schema document.
    #[error("schema required")]
    SchemaEmpty,
    /// A schema document over the per-document limit.
    #[error("schema document is {bytes} bytes; the limit is {SCHEMA_DOCUMENT_BYTES_MAX} bytes")]
    SchemaTooLarge {
        /// Size of the refused document.
        bytes: usize,
    },
    /// The `schema_base_version` given is not the topic's current version.
    #[error("schema version conflict")]
    SchemaVersionConflict {
        /// The topic's schema version.
        current: u32,
        /// The version the change was based on.
        base: u32,
    },
    /// A schema change on a child: its parent manages its schema.
    #[error("schema managed by parent: a fan-out child takes its schema from its parent topic")]
    SchemaManaged,
    /// The history already holds the most versions allowed.
    #[error("schema history full: a topic keeps at most {SCHEMA_VERSIONS_MAX} schema versions")]
    SchemaVersionsFull,
    /// The topic's history would exceed its byte budget.
    #[error(
        "schema byte budget exceeded: a topic's schema history is limited to {SCHEMA_TOPIC_BYTES_MAX} bytes"
    )]
    SchemaTopicBudget,
    /// The cluster's schema histories would exceed their byte budget.
    #[error(
        "schema byte budget exceeded: all schema histories together are limited to {SCHEMA_CLUSTER_BYTES_MAX} bytes"
    )]
    SchemaClusterBudget,

    // ---- Members and assignments ----
    /// A member id that is empty or too long.
    #[error("invalid member id {id:?}")]
    MemberIdInvalid {
        /// The refused id.
        id: String,
    },
    /// A member address that is empty.
    #[error("member {id:?} needs both an HTTP and an RPC address")]
    MemberAddressMissing {
        /// The member.
        id: String,
    },
    /// No member with that id.
    #[error("member not found")]
    MemberNotFound,
    /// A dead-marking decided on a heartbeat that has since been superseded.
    #[error("member heartbeat changed since it was read")]
    HeartbeatChanged,
    /// An assignment to a member that is dead or draining.
    #[error("member {id:?} does not take partitions (dead or draining)")]
    MemberNotReceiver {
        /// The member.
        id: String,
    },
    /// A create while every alive data node is draining: its partitions
    /// could never be placed. (With no alive data node at all a create
    /// succeeds, and its partitions wait for one.)
    #[error(
        "every live data node is being decommissioned, so no node can take the new topic's partitions; retry later"
    )]
    AllNodesDraining,
    /// An assignment of a partition the topic does not have.
    #[error("partition {partition} out of range")]
    PartitionOutOfRange {
        /// The refused partition.
        partition: u32,
    },
    /// An assignment of a partition that has an owner: an owner changes only
    /// through a move, never by assignment (a dead owner's data is on its disk).
    #[error("partition {partition} already has an owner")]
    PartitionAssigned {
        /// The partition.
        partition: u32,
    },

    // ---- Moves and decommission (409) ----
    /// A move names an owner the partition no longer has.
    #[error("partition {partition} changed owner since it was read")]
    MoveOwnerChanged {
        /// The partition.
        partition: u32,
    },
    /// The planner set a target on a partition that has one.
    #[error("partition {partition} already has a move in progress")]
    MoveInProgress {
        /// The partition.
        partition: u32,
    },
    /// A move to the partition's own owner.
    #[error("partition {partition} cannot move to the node that owns it")]
    MoveToOwner {
        /// The partition.
        partition: u32,
    },
    /// An abort of a partition with no move.
    #[error("partition {partition} has no move in progress")]
    NoMove {
        /// The partition.
        partition: u32,
    },
    /// An abort naming another target than the move's.
    #[error("partition {partition} is moving to {current:?}, not to {asked:?}")]
    MoveTargetDiffers {
        /// The partition.
        partition: u32,
        /// The move's target.
        current: String,
        /// The target the abort named.
        asked: String,
    },
    /// An abort after the flip: the target owns the partition.
    #[error("the move of partition {partition} already completed: {owner:?} owns it")]
    MoveCompleted {
        /// The partition.
        partition: u32,
        /// Its owner now.
        owner: String,
    },
    /// A flip whose move changed (aborted, completed, another owner).
    #[error("the move of partition {partition} changed since it began")]
    MoveChanged {
        /// The partition.
        partition: u32,
    },
    /// A force-promote while the move's source is not marked dead.
    #[error(
        "partition {partition}'s source {member:?} is not marked dead; only its handoff can move it"
    )]
    SourceAlive {
        /// The partition.
        partition: u32,
        /// The source.
        member: String,
    },
    /// A removal of a member not being decommissioned.
    #[error("member {id:?} is not being decommissioned")]
    MemberNotDraining {
        /// The member.
        id: String,
    },
    /// A removal of a member that still owns partitions or is the target
    /// of a move.
    #[error(
        "member {id:?} still owns {partitions} partition(s) and is the target of {inbound} move(s)"
    )]
    MemberNotEmpty {
        /// The member.
        id: String,
        /// Partitions it owns.
        partitions: usize,
        /// Moves headed to it.
        inbound: usize,
    },
    /// A heartbeat under the id of a removed member.
    #[error("member {id:?} was removed from the cluster; restart the node to register it again")]
    MemberRemoved {
        /// The member.
        id: String,
    },

    // ---- Users and grants ----
    /// A username outside the rules.
    #[error(
        "invalid username {name:?}: use 1-64 characters of A-Z a-z 0-9 . _ - (and not \".\" or \"..\")"
    )]
    UsernameInvalid {
        /// The refused name.
        name: String,
    },
    /// A password outside 1 to 72 bytes.
    #[error("password must be 1-{PASSWORD_BYTES_MAX} bytes")]
    PasswordLength,
    /// A grant that breaks the grant rules.
    #[error("invalid grant: {reason}")]
    GrantInvalid {
        /// Which rule it breaks.
        reason: String,
    },
    /// A user of that name exists.
    #[error("user already exists")]
    UserExists,
    /// No user of that name.
    #[error("user not found")]
    UserNotFound,
    /// The password changed between the proposer's check of the current
    /// password and this command.
    #[error("password changed since it was checked; try again")]
    PasswordChanged,
    // ---- Remotes and remote children (v3.2) ----
    /// Remotes exist only on a cluster with security on.
    #[error("remotes require security")]
    RemotesRequireSecurity,
    /// A remote name outside `^[a-z][a-z0-9-]{0,62}$`.
    #[error("invalid remote name {name:?}: use a lowercase letter, then up to 62 of a-z 0-9 -")]
    RemoteNameInvalid {
        /// The refused name.
        name: String,
    },
    /// A remote of that name exists.
    #[error("remote already exists")]
    RemoteExists,
    /// No remote of that name.
    #[error("remote not found")]
    RemoteNotFound,
    /// The cluster has as many remotes as it may.
    #[error("a cluster has at most {REMOTES_MAX} remotes")]
    RemoteLimit,
    /// The remote changed since the proposer read it.
    #[error("remote changed since it was read (revision {current}, expected {expected})")]
    RemoteRevisionConflict {
        /// The stored revision.
        current: u64,
        /// The revision the request named.
        expected: u64,
    },
    /// A new url, username or CA without the password.
    #[error("changing url, username or ca_pem needs the password again")]
    RemotePasswordRequired,
    /// The cluster's remote key moved between the proposer's seal and this
    /// command (a concurrent first remote or re-encryption).
    #[error("the cluster's remote key changed while the request was made; try again")]
    RemoteKeyChanged,
    /// A delete without `force` of a remote that links still use.
    #[error("remote is used by {count} remote child link(s); detach them or delete with force=true", count = links.len())]
    RemoteInUse {
        /// The stubs of the links that use it.
        links: Vec<String>,
    },
    /// The parent has as many remote children as it may.
    #[error("a parent has at most {REMOTE_CHILDREN_MAX} remote children")]
    RemoteChildLimit,
    /// A parent with remote children keeps its records at least a day.
    #[error(
        "a parent with remote children needs retention_ms of 0 (forever) or at least {REMOTE_PARENT_RETENTION_MS_MIN} (24 h), got {retention_ms}"
    )]
    RemoteParentRetention {
        /// The refused (or current) retention.
        retention_ms: u64,
    },
    /// Another link already ships to that remote topic.
    #[error("remote topic {remote_topic:?} on remote {remote:?} is already linked (by {child:?})")]
    RemoteTopicLinked {
        /// The remote.
        remote: String,
        /// The topic there.
        remote_topic: String,
        /// The stub of the link that has it.
        child: String,
    },
    /// Lanes outside 1–8.
    #[error("lanes must be between 1 and {REMOTE_LANES_MAX}")]
    RemoteLanesInvalid,
    /// A produce, consume or change that a stub topic cannot take.
    #[error("remote child {name:?} lives on remote {remote}; consume it there")]
    RemoteStub {
        /// The stub.
        name: String,
        /// Its remote.
        remote: String,
    },
    /// A pause, resume or skip of a topic that is no remote child.
    #[error("topic {name:?} is not a remote child")]
    NotRemoteChild {
        /// The topic.
        name: String,
    },
    /// A pause reason that is too long or not printable.
    #[error("reason must be printable text of at most {REMOTE_PAUSE_REASON_BYTES_MAX} bytes")]
    PauseReasonInvalid,
    /// A partition already has as many skipped offsets as it may keep.
    #[error("partition {partition} already skips {REMOTE_SKIPS_PER_PARTITION_MAX} records")]
    SkipLimit {
        /// The parent partition.
        partition: u32,
    },
    /// The actor may not do this.
    #[error("{reason}")]
    Forbidden {
        /// What the actor lacks, as the client sees it.
        reason: &'static str,
    },
}

impl MetastoreError {
    /// The HTTP status the spec pairs with this error.
    pub fn status(&self) -> u16 {
        use MetastoreError::*;
        match self {
            TopicNotFound | ParentNotFound | NotLinked | MemberNotFound | UserNotFound
            | RemoteNotFound => 404,
            Forbidden { .. } | RemotesRequireSecurity => 403,
            AllNodesDraining => 503,
            TopicExists
            | TopicNameCaseClash { .. }
            | TopicChanged
            | FanoutRoleConflict { .. }
            | ChildLimit
            | DelayExceedsRetention { .. }
            | SchemaMismatch { .. }
            | SchemaVersionConflict { .. }
            | SchemaManaged
            | SchemaVersionsFull
            | SchemaTopicBudget
            | SchemaClusterBudget
            | HeartbeatChanged
            | MemberNotReceiver { .. }
            | PartitionAssigned { .. }
            | MoveOwnerChanged { .. }
            | MoveInProgress { .. }
            | MoveToOwner { .. }
            | NoMove { .. }
            | MoveTargetDiffers { .. }
            | MoveCompleted { .. }
            | MoveChanged { .. }
            | SourceAlive { .. }
            | MemberNotDraining { .. }
            | MemberNotEmpty { .. }
            | MemberRemoved { .. }
            | UserExists
            | PasswordChanged
            | RemoteExists
            | RemoteLimit
            | RemoteRevisionConflict { .. }
            | RemoteKeyChanged
            | RemoteInUse { .. }
            | RemoteChildLimit
            | RemoteParentRetention { .. }
            | RemoteTopicLinked { .. }
            | RemoteStub { .. }
            | NotRemoteChild { .. }
            | SkipLimit { .. } => 409,
            TopicNameEmpty
            | TopicNameTooLong { .. }
            | TopicNameInvalid { .. }
            | PartitionsTooFew
            | PartitionsTooMany { .. }
            | PartitionsCannotShrink { .. }
            | RetentionNegative
            | RetentionBelowFloor { .. }
            | IdempotencyWindowOutOfRange { .. }
            | VisibilityTimeoutNegative
            | CapNegative { .. }
            | AlterEmpty
            | ChildRequired
            | ChildIsParent
            | FanoutDelayNegative
            | FanoutDelayTooLong
            | SchemaEmpty
            | SchemaTooLarge { .. }
            | MemberIdInvalid { .. }
            | MemberAddressMissing { .. }
            | PartitionOutOfRange { .. }
            | UsernameInvalid { .. }
            | PasswordLength
            | GrantInvalid { .. }
            | RemoteNameInvalid { .. }
            | RemotePasswordRequired
            | RemoteLanesInvalid
            | PauseReasonInvalid => 400,
        }
    }
}
