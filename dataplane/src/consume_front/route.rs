//! Where a queue consume's records come from, and where a replay is read:
//! the routing policy of the consume front.

use std::sync::Arc;
use std::time::Duration;

use narad_clock::millis;

use narad_plog::Record;

use super::{ConsumeFront, FrontError};
use crate::consume::handle::ReceiptHandle;
use crate::consume::service::{
    ConsumeError, ConsumeRequest, ConsumeService, Delivery, ReplayError,
};
use crate::consume::shard::Settle;
use crate::forward::{Forwarder, Placement, REPROBE_FIRST, REPROBE_MAX, delivery_of};

impl ConsumeFront<'_> {
    /// A queue consume: up to `request.max` leased records, from this
    /// node's partitions or (with a forwarder) its peers', waiting up to
    /// `request.wait` when none is ready (the policy is `consume_anywhere`'s).
    ///
    /// # Errors
    /// The consume service's refusals, and a pinned remote partition's
    /// forward failing.
    pub async fn consume(
        &self,
        request: ConsumeRequest,
    ) -> Result<Vec<Delivery>, FrontError<ConsumeError>> {
        match self.forwarder {
            Some(forwarder) => consume_anywhere(forwarder, self.service, request).await,
            None => self
                .service
                .consume(request)
                .await
                .map_err(FrontError::Local),
        }
    }

    /// The record at `offset` of `partition`, without a lease, read by
    /// the partition's owner; `None` past the end.
    ///
    /// # Errors
    /// The consume service's refusals, or the forward to the owner failing.
    pub async fn replay(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<Option<Record>, FrontError<ReplayError>> {
        match self.remote_owner(topic, partition) {
            Some(forwarder) => forwarded_replay(forwarder, topic, partition, offset).await,
            None => self
                .service
                .replay(topic, partition, offset)
                .await
                .map_err(FrontError::Local),
        }
    }
}

/// Where a queue consume's records come from: this node's partitions
/// first; for a pinned partition another node owns, that owner (a
/// forwarded long poll); otherwise, when nothing is ready here, one
/// non-blocking probe of every live remote owner. When all are empty the
/// consume parks here and probes the remote owners again after 100 ms,
/// the pause doubling to 1 s, until its wait ends. The wait and the pauses
/// run on the consume service's clock, as its parks do.
///
/// # Errors
/// The local refusals, and for a pinned remote partition the forward's
/// ([`FrontError::Forward`]).
async fn consume_anywhere(
    forwarder: &Arc<Forwarder>,
    service: &ConsumeService,
    request: ConsumeRequest,
) -> Result<Vec<Delivery>, FrontError<ConsumeError>> {
    if let Some(partition) = request.partition {
        if let Placement::Remote { .. } = forwarder.placement(&request.topic, partition) {
            let records = forwarder
                .consume_pinned(&request.topic, partition, request.max, request.wait)
                .await
                .map_err(FrontError::Forward)?;
            let topic: Arc<str> = Arc::from(request.topic.as_str());
            return Ok(records
                .into_iter()
                .map(|record| delivery_of(&topic, record))
                .collect());
        }
        return service.consume(request).await.map_err(FrontError::Local);
    }
    if forwarder.live_remote_owners(&request.topic).is_empty() {
        // Nothing to probe: one park keeps the consume's place in line.
        return service.consume(request).await.map_err(FrontError::Local);
    }
    let clock = service.clock();
    let wait_ms = millis(request.wait);
    let deadline_ms = clock.now_ms().saturating_add(wait_ms);
    let mut pause = REPROBE_FIRST;
    loop {
        let now = ConsumeRequest {
            wait: Duration::ZERO,
            ..request.clone()
        };
        let local = service.consume(now).await.map_err(FrontError::Local)?;
        if !local.is_empty() {
            return Ok(local);
        }
        let remote = probe_remote_owners(forwarder, &request.topic, request.max).await;
        if !remote.is_empty() {
            return Ok(remote);
        }
        let left_ms = deadline_ms.saturating_sub(clock.now_ms());
        if left_ms == 0 {
            return Ok(Vec::new());
        }
        let left = Duration::from_millis(left_ms);
        forwarder.register_tokens(&request.topic, left);
        let parked = ConsumeRequest {
            wait: pause.min(left),
            ..request.clone()
        };
        let parked = match forwarder.token_waker(&request.topic) {
            // An owner's notification ends the park early: scan and probe
            // again at once (the consume service's park is cancel safe).
            Some(waker) => {
                tokio::select! {
                    parked = service.consume(parked) => parked.map_err(FrontError::Local)?,
                    () = waker.notified() => Vec::new(),
                }
            }
            None => service.consume(parked).await.map_err(FrontError::Local)?,
        };
        if !parked.is_empty() {
            return Ok(parked);
        }
        pause = (pause * 2).min(REPROBE_MAX);
    }
}

/// One non-blocking probe of each live remote owner of `topic` in turn,
/// asking each for what is still wanted, until `max` records are in hand.
/// If the consume goes away between probes (its client left), the records
/// already leased are nacked at their owners at once.
async fn probe_remote_owners(forwarder: &Arc<Forwarder>, topic: &str, max: usize) -> Vec<Delivery> {
    let name: Arc<str> = Arc::from(topic);
    let mut leased = LeasedRemotely {
        forwarder: Arc::clone(forwarder),
        deliveries: Vec::new(),
    };
    for node in forwarder.live_remote_owners(topic) {
        let wanted = max.saturating_sub(leased.deliveries.len());
        if wanted == 0 {
            break;
        }
        let records = forwarder.probe(node, topic, wanted).await;
        leased
            .deliveries
            .extend(records.into_iter().map(|record| delivery_of(&name, record)));
    }
    std::mem::take(&mut leased.deliveries)
}

/// Records leased at remote owners and not yet handed on. Dropped while
/// holding some (the consume was cancelled), it nacks them at their owners
/// so they are redelivered at once instead of after a visibility timeout.
pub(crate) struct LeasedRemotely {
    pub(crate) forwarder: Arc<Forwarder>,
    pub(crate) deliveries: Vec<Delivery>,
}

impl Drop for LeasedRemotely {
    fn drop(&mut self) {
        if self.deliveries.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let forwarder = Arc::clone(&self.forwarder);
        let deliveries = std::mem::take(&mut self.deliveries);
        runtime.spawn(async move {
            for delivery in deliveries {
                let handle = ReceiptHandle {
                    partition: delivery.partition,
                    offset: delivery.record.offset,
                    nonce: delivery.nonce,
                };
                if let Err(error) = forwarder
                    .settle(&delivery.topic, handle, Settle::Nack)
                    .await
                {
                    tracing::debug!(topic = %delivery.topic, %handle, %error, "releasing a record of a cancelled consume failed; its lease lapses");
                }
            }
        });
    }
}

/// A replay of a partition another node owns, read by its owner.
async fn forwarded_replay(
    forwarder: &Forwarder,
    topic: &str,
    partition: u32,
    offset: u64,
) -> Result<Option<Record>, FrontError<ReplayError>> {
    let record = forwarder
        .replay(topic, partition, offset)
        .await
        .map_err(FrontError::Forward)?;
    let name: Arc<str> = Arc::from(topic);
    Ok(record.map(|record| delivery_of(&name, record).record))
}
