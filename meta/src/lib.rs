//! The Narad metastore: the cluster metadata, the rules it obeys, and the
//! pure state machine that changes it. Both planes use this one model: the
//! control plane's Raft state machine applies committed commands to it, and
//! every data node's metadata replica applies the same commands, from the
//! metadata stream, with the same [`Metastore::apply`]. The data plane
//! checks client requests with the same rule functions ([`rules`]) and
//! limits ([`limits`]) the leader applies, so both refuse the same input
//! with the same text.
//!
//! [`Metastore::apply`] takes one committed [`Command`] and returns an
//! [`Outcome`] or a [`MetastoreError`]. It does no I/O and reads no clock,
//! no random source and no configuration: everything random or time-based
//! (incarnation ids, attach epochs, bcrypt hashes, timestamps) and the
//! operator's topic defaults are decided by the proposer and carried in the
//! command. So every replica that applies the same log holds the same
//! state, byte for byte once serialized.
//!
//! What it holds: topics (with schema histories and fan-out links),
//! partition placements (with the targets of moves), data-node members
//! (and the ids of removed ones), users and grants, and per-domain change
//! counters. Validation follows the spec's topic (§1.3), fan-out
//! (§1.4) and user (§1.8) rules; each error carries the client-facing text
//! and its HTTP status. [`codec`] holds the binary forms of a command and of
//! the whole state; [`follow`] applies metadata-stream batches to a
//! subscriber's copy.
//!
//! It depends on no workspace crate but `narad-protocol` (for the wire
//! codec primitives and the metadata stream's batch type).

mod apply;
mod authz;
pub mod codec;
mod command;
mod decommission;
mod error;
pub mod follow;
mod ids;
pub mod limits;
mod password;
mod remote_command;
mod remotes;
pub mod rules;
mod state;

pub use command::{
    AbortMove, Actor, AddSchemaVersion, AlterTopic, ApplyContext, AssignPartitions, AttachChild,
    Command, CompleteMove, CreateTopic, CreateUser, DeleteTopic, DeleteUser, DetachChild,
    Heartbeat, MarkDead, MoveTarget, NewLink, Outcome, PartitionOwner, RegisterMember,
    RemoveMember, SeedAdmin, SetDraining, SetGrants, SetMoveTargets, SetPassword, TopicDefaults,
};
pub use decommission::DecommissionBlock;
pub use error::MetastoreError;
pub use ids::{AttachEpoch, BadId, IncarnationId, PasswordHash, RemoteId};
pub use password::{
    AdminPassword, BCRYPT_COST, GENERATED_PASSWORD_CHARS, admin_password, hash_password,
    verify_password,
};
pub use remote_command::{
    AttachRemoteChild, CreateRemote, DeleteRemote, PauseRemoteChild, ResealRemotes,
    ResealedPassword, ResumeRemoteChild, SkipRemoteRecord, UpdateRemote,
};
pub use remotes::{
    Compression, Remote, RemoteFrom, RemoteKey, RemoteLimits, RemoteLink, RemotePause,
    SealedPassword,
};
pub use rules::check_password;
pub use state::{
    Assignment, DomainVersions, Grant, GrantAction, Member, MemberStatus, Metastore, ParentLink,
    Role, SchemaVersion, Topic, User, pattern_matches,
};

#[cfg(test)]
mod tests;
