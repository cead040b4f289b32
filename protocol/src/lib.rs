//! Cluster wire types, their codecs, and the QUIC transport between Narad nodes.
//!
//! What it is:
//! - a small binary codec ([`codec`]: [`Encode`], [`Decode`], [`Message`]
//!   with a version byte) for cluster messages;
//! - the frame ([`frame`]): opcode, request id, length-prefixed fields, at
//!   most [`limits::FRAME_BYTES_MAX`] (16 MiB);
//! - the transport ([`Node`]): quinn + rustls with the `ring` provider, one
//!   connection per peer, streams pooled per [`Lane`], request ids,
//!   cancellation, timeouts, dial backoff, a liveness check after a
//!   deadline, a write timeout per frame, and per-operation concurrency
//!   limits on the serving side ([`Router`], [`OperationLimit`]);
//! - cluster authentication ([`ClusterAuth`]): every stream proves the shared
//!   secret, both ways, with an HMAC bound to the TLS session's exporter;
//! - optional mutual TLS on top of it ([`ClusterTls`]): both sides' certificates
//!   must chain to the cluster's CA.
//!
//! What it guarantees:
//! - no frame over the limit is sent (refused with
//!   [`CallError::RequestTooLarge`], nothing written) or read (the stream is
//!   refused before the claimed size is read or allocated);
//! - a decoder never panics on arbitrary bytes; unknown versions, unknown
//!   tags and trailing bytes are refused with an error that names them; an
//!   opcode without a handler is answered `400 unsupported rpc operation`;
//! - under a secret, no request is served on a stream, and none is sent,
//!   before both sides proved the secret on this TLS session;
//! - with [`ClusterTls`], no connection completes unless both certificates
//!   chain to the CA and are within their validity; a refused handshake is
//!   logged on both sides with its reason (unknown CA, expired, no client
//!   certificate).
//!
//! What it does not do: it knows nothing of topics, logs or Raft; it moves
//! requests and answers. It never retries a request (the caller knows whether
//! it is idempotent). Layout and protocol: `docs/internals/transport.md`.

pub mod auth;
mod backoff;
mod client;
mod client_stream;
pub mod cluster_tls;
pub mod codec;
pub mod commit;
pub mod consume;
pub mod fields;
pub mod frame;
mod handshake_failure;
mod lane;
pub mod limits;
pub mod metadata;
mod node;
pub mod node_status;
mod observe;
mod opcode;
pub mod remote_check;
mod server;
mod server_verifier;
mod stream;
pub mod tls;
pub mod transfer;
pub mod wire;

pub use auth::{ClusterAuth, ClusterSecret, SecretTooShort};
pub use client::CallError;
pub use cluster_tls::{CertificateExpiry, ClusterTls, ClusterTlsError, Expired, TlsFile};
pub use codec::{Decode, DecodeError, Encode, Message, Reader, Writer};
pub use commit::{
    BatchRecord, CommitProduceBatch, CommitProduceBatchAnswer, IncarnationId, IncarnationRun,
    RecordProvenance,
};
pub use consume::{
    AckBatch, AckBatchAnswer, ConsumeAnswer, ConsumeScope, CursorPosition, ForwardConsume,
    ForwardSettle, ForwardedRecord, LeaseRef, PartitionStatsEntry, RemoteCursor, SettleKind,
    TokenNotify, TokenRegister, TopicPartitionStats, TopicPartitionStatsAnswer,
};
pub use frame::{ContentType, Request, RequestId, Response, RpcError, Status};
pub use lane::Lane;
pub use node::{Node, NodeConfig, NodeError};
pub use node_status::{
    CredentialState, MoveReport, NodeStatus, NodeStatusAnswer, QuarantinedCopy, RemoteView,
    clip_text,
};
pub use observe::{CALL_SECONDS_BUCKETS, CallObserver, CallOutcome};
pub use opcode::Opcode;
pub use remote_check::{CheckRemoteTarget, FailedCheck, RemoteTargetAnswer, TargetCheckOutcome};
pub use server::{Handler, HandlerFuture, Inbound, OperationLimit, Router};
pub use stream::codes;

#[cfg(test)]
mod damage;
#[cfg(test)]
mod mtls_tests;
#[cfg(test)]
pub(crate) mod test_pki;
#[cfg(test)]
mod transport_tests;
