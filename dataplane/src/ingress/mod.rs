//! The accept stage of the produce path (seed, "Accept stage"): validation,
//! partition choice from the local metadata replica, and staging into the
//! ingress WAL in record format 2. A produce is answered `202` only after
//! the group commit covering it.

mod accept;
pub mod batch;
pub mod partition;
pub mod schema;

pub use accept::{
    AcceptError, Acceptor, BATCH_BODY_BYTES_MAX, BATCH_MESSAGES_MAX, BatchRefusal,
    MESSAGE_BYTES_MAX, ProduceMessage, SCHEMA_BUSY_TEXT, SCHEMA_SLOT_PAYLOAD_BYTES_MIN,
    SCHEMA_SLOT_WAIT, valid_idempotency_key,
};
