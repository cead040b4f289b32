//! The consume front: where a consume, a replay or a settle is served once
//! the HTTP layer has parsed and authorized it. Partitions this node owns
//! go to the consume service; partitions another node owns go to their
//! owner through the [`Forwarder`].
//!
//! It mirrors the accept stage of the produce path
//! ([`crate::ingress::Acceptor`]): a handler hands it a parsed request and
//! renders the typed result, so the routing policy (`route`: local first,
//! then a probe of the remote owners, then a park with backoff) and the
//! settle split (`settle`: local shard or remote owner, per handle) live
//! here and not in the handlers.
//!
//! What it does not do: parse, authorize, cap or render; time long polls
//! or count deliveries (the HTTP layer does, from what it answered).

use std::sync::Arc;

use crate::consume::service::ConsumeService;
use crate::forward::{ForwardError, Forwarder, Placement};
use crate::metrics::NodeMetrics;

mod route;
mod settle;
#[cfg(test)]
mod tests;

// The forward tests drop one by hand to check that a cancelled consume
// releases what it leased remotely.
#[cfg(test)]
pub(crate) use route::LeasedRemotely;
pub use settle::SettleResult;

/// Why the front refused: this node's own refusal, or the forward to the
/// partition's owner failing or being refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrontError<E> {
    /// This node refused (its consume service's error).
    #[error(transparent)]
    Local(E),
    /// The forward to the owner got no answer or was refused.
    #[error(transparent)]
    Forward(ForwardError),
}

/// The consume front of one node, for one request: the node's consume
/// service, its forwarder once the transport is bound, and its metrics
/// (extends and nacks are counted where they are settled).
#[derive(Clone, Copy, Debug)]
pub struct ConsumeFront<'a> {
    service: &'a ConsumeService,
    forwarder: Option<&'a Arc<Forwarder>>,
    metrics: &'a NodeMetrics,
}

impl<'a> ConsumeFront<'a> {
    /// A front over `service`; without a `forwarder`, every partition is
    /// served here (pinned ones owned elsewhere are refused by the service).
    pub fn new(
        service: &'a ConsumeService,
        forwarder: Option<&'a Arc<Forwarder>>,
        metrics: &'a NodeMetrics,
    ) -> Self {
        Self {
            service,
            forwarder,
            metrics,
        }
    }

    /// The forwarder, when `partition` of `topic` is owned by another node.
    fn remote_owner(&self, topic: &str, partition: u32) -> Option<&'a Arc<Forwarder>> {
        self.forwarder.filter(|forwarder| {
            matches!(
                forwarder.placement(topic, partition),
                Placement::Remote { .. }
            )
        })
    }
}
