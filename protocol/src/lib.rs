//! Cluster wire types, their codecs, and the QUIC transport between Narad nodes.
//!
//! This crate will own everything two Narad processes say to each other: the
//! versioned binary codecs of every cluster message (control-plane RPCs, Raft
//! traffic, `CommitProduceBatch`, forwarded consume and ack), the frame format
//! (opcode, request id, length-prefixed fields, a 16 MiB frame limit refused
//! before sending and on receipt), and the QUIC transport built on quinn and
//! rustls with the `ring` provider, where every stream proves the cluster
//! secret with an HMAC bound to the TLS session.
//!
//! Guarantees it is built to give: a decoder never panics on arbitrary bytes,
//! unknown opcodes and trailing fields are refused with a clear error, and no
//! frame larger than the limit is ever sent or accepted.
//!
//! It does not know about topics, logs or Raft state: it moves typed messages
//! and nothing else. Neither plane depends on the other; both depend on this.
//!
//! Status: not yet built (see the control-plane issue).
