//! The metastore's limits and floors, each with the reason for its value.
//! They are spec rules, the same on every replica, so `apply` checks them
//! itself. Settings an operator may change (default partition count, the
//! partition ceiling, default retention) are not here: the proposer resolves
//! them (see [`super::TopicDefaults`]).

/// New topic names are at most this many bytes: a topic name is a directory
/// name, and the spec leaves room below the common 255-byte file name limit
/// for the `.stale-<id>` suffix of a quarantined incarnation.
pub const TOPIC_NAME_BYTES_MAX: usize = 200;

/// Names up to this many bytes, created by older releases, keep working
/// (they can be looked up, granted and deleted), but no new one is accepted.
pub const TOPIC_NAME_BYTES_MAX_LEGACY: usize = 255;

/// A topic has at least this many partitions (the spec's floor), so a queue
/// spreads over three owners on a cluster of three or more data nodes.
pub const PARTITIONS_MIN: u32 = 3;

/// Retention is `0` (keep forever) or at least one hour: a shorter age would
/// delete sealed segments faster than consumers and fan-out cursors can
/// reasonably be expected to recover from a short outage.
pub const RETENTION_MS_MIN: u64 = 3_600_000;

/// A topic's idempotency window when its create does not give one: two
/// minutes, long enough for a producer's retries through a node restart or
/// a partition moving, short enough that the keys of a busy topic fit the
/// partition's memory of them.
pub const IDEMPOTENCY_WINDOW_MS_DEFAULT: u64 = 120_000;

/// The shortest idempotency window: one second. A shorter one would forget
/// a key before a producer's first retry could reach the partition.
pub const IDEMPOTENCY_WINDOW_MS_MIN: u64 = 1_000;

/// The longest idempotency window: one day. A partition remembers a bounded
/// number of keys and rebuilds its memory from a bounded number of newest
/// records after a restart, so a longer window would promise more than it
/// keeps on any busy topic.
pub const IDEMPOTENCY_WINDOW_MS_MAX: u64 = 86_400_000;

/// A parent keeps a record at least this long past a delay child's delay, so
/// the record still exists when it falls due and its cursor reads it.
pub const DELAY_RETENTION_MARGIN_MS: u64 = 3_600_000;

/// A fan-out delay is at most one year (365 days): beyond that a delay child
/// is an archive, and the parent would have to keep a year of data anyway.
pub const FANOUT_DELAY_MS_MAX: u64 = 31_536_000_000;

/// A parent has at most this many children (the spec's number, equal to the
/// default partition ceiling): each child costs one cursor per parent
/// partition on the parent's owners, so the bound caps that work.
pub const CHILDREN_MAX: usize = 108;

/// A topic keeps at most this many schema versions, which bounds the history
/// every replica stores and every produce path may consult.
pub const SCHEMA_VERSIONS_MAX: usize = 1_000;

/// One schema document is at most 256 KiB, so compiling it stays cheap.
pub const SCHEMA_DOCUMENT_BYTES_MAX: usize = 256 * 1024;

/// A topic's whole schema history is at most 4 MiB.
pub const SCHEMA_TOPIC_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// All schema histories of the cluster together are at most 256 MiB: every
/// replica holds them in memory and in every snapshot.
pub const SCHEMA_CLUSTER_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Usernames are 1 to 64 characters: they appear in logs, grants and topic
/// ownership, and a short bound keeps the users domain small.
pub const USERNAME_BYTES_MAX: usize = 64;

/// Passwords are 1 to 72 bytes: bcrypt reads only the first 72 bytes, and a
/// longer password would silently be checked on its prefix only.
pub const PASSWORD_BYTES_MAX: usize = 72;

/// A grant pattern (without its `*`) is a topic name, so it is bounded by
/// the legacy name limit.
pub const GRANT_PATTERN_BYTES_MAX: usize = TOPIC_NAME_BYTES_MAX_LEGACY;

/// Incarnation ids and attach epochs are 8 random bytes written as this many
/// lowercase hex characters.
pub const HEX_ID_CHARS: usize = 16;

/// A member id is a node name (by default the host name, at most 253
/// characters in DNS).
pub const MEMBER_ID_BYTES_MAX: usize = 253;

const _: () = assert!(TOPIC_NAME_BYTES_MAX <= TOPIC_NAME_BYTES_MAX_LEGACY);
const _: () = assert!(SCHEMA_DOCUMENT_BYTES_MAX as u64 <= SCHEMA_TOPIC_BYTES_MAX);
const _: () = assert!(SCHEMA_TOPIC_BYTES_MAX <= SCHEMA_CLUSTER_BYTES_MAX);
const _: () = assert!(FANOUT_DELAY_MS_MAX == 365 * 24 * 3_600_000);
const _: () = assert!(IDEMPOTENCY_WINDOW_MS_MIN <= IDEMPOTENCY_WINDOW_MS_DEFAULT);
const _: () = assert!(IDEMPOTENCY_WINDOW_MS_DEFAULT <= IDEMPOTENCY_WINDOW_MS_MAX);
const _: () = assert!(IDEMPOTENCY_WINDOW_MS_MAX == 24 * 3_600_000);

/// At most this many partition moves are in flight across the cluster (the
/// spec's `MaxInFlightMoves`). Each move copies a partition while traffic
/// flows; eight keep a rebalance going on every node of a small cluster
/// without letting copies crowd out produce and consume on the disks.
pub const MOVES_IN_FLIGHT_MAX: usize = 8;

/// A cluster has at most this many remotes (spec §1.10): each one is a set
/// of outbound connections on every data node and a credential every node
/// keeps open.
pub const REMOTES_MAX: usize = 64;

/// A parent has at most this many remote children (spec §1.4): each costs
/// one cursor per parent partition and outbound requests to another cluster.
pub const REMOTE_CHILDREN_MAX: usize = 16;

/// A remote child ships in at most this many lanes (spec §1.4).
pub const REMOTE_LANES_MAX: u8 = 8;

/// A parent with remote children keeps its records at least this long (or
/// forever): a remote cluster that is down for a day must find what it
/// missed still in the parent's log.
pub const REMOTE_PARENT_RETENTION_MS_MIN: u64 = 86_400_000;

/// A remote child remembers at most this many skipped offsets per parent
/// partition (spec §1.4).
pub const REMOTE_SKIPS_PER_PARTITION_MAX: usize = 4_000;

/// A pause reason is at most this many bytes of printable text.
pub const REMOTE_PAUSE_REASON_BYTES_MAX: usize = 256;
