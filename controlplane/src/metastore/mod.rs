//! The metastore: the cluster metadata every control node replicates, and
//! the pure state machine that changes it.
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
//! partition placements, data-node members, users and grants, and per-domain
//! change counters. Validation follows the spec's topic (§1.3), fan-out
//! (§1.4) and user (§1.8) rules; each error carries the client-facing text
//! and its HTTP status.

mod apply;
mod authz;
pub(crate) mod codec;
mod command;
mod error;
mod ids;
pub mod limits;
mod password;
mod rules;
mod state;

pub use command::{
    Actor, AddSchemaVersion, AlterTopic, ApplyContext, AssignPartitions, AttachChild, Command,
    CreateTopic, CreateUser, DeleteTopic, DeleteUser, DetachChild, Heartbeat, MarkDead, NewLink,
    Outcome, PartitionOwner, RegisterMember, SeedAdmin, SetDraining, SetGrants, SetPassword,
    TopicDefaults,
};
pub use error::MetastoreError;
pub use ids::{AttachEpoch, BadId, IncarnationId, PasswordHash};
pub use password::{
    AdminPassword, BCRYPT_COST, GENERATED_PASSWORD_CHARS, admin_password, hash_password,
    verify_password,
};
pub use rules::check_password;
pub use state::{
    Assignment, DomainVersions, Grant, GrantAction, Member, MemberStatus, Metastore, ParentLink,
    Role, SchemaVersion, Topic, User, pattern_matches,
};

#[cfg(test)]
mod tests;
