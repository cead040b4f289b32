//! Acks, extends and nacks: the settle split of the consume front. A handle
//! whose partition this node owns is settled in its shard here; any other
//! is forwarded to its owner, one `AckBatch` per owner for a batch.

use super::{ConsumeFront, FrontError};
use crate::consume::handle::ReceiptHandle;
use crate::consume::service::{Delivery, SettleError};
use crate::consume::shard::Settle;
use crate::forward::SettleOutcome;

/// One handle's outcome in a batch settle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettleResult {
    /// Settled here, or this node's refusal.
    Local(Result<(), SettleError>),
    /// The owner's answer to the forwarded settle.
    Forwarded(SettleOutcome),
}

impl ConsumeFront<'_> {
    /// Settles one lease where its partition lives, and counts an extend
    /// or a nack.
    ///
    /// # Errors
    /// The consume service's refusal, or the forward to the owner failing.
    pub async fn settle(
        &self,
        topic: &str,
        handle: ReceiptHandle,
        how: Settle,
    ) -> Result<(), FrontError<SettleError>> {
        match self.remote_owner(topic, handle.partition) {
            Some(forwarder) => {
                forwarder
                    .settle(topic, handle, how)
                    .await
                    .map_err(FrontError::Forward)?;
                self.count_settle(topic, how);
                Ok(())
            }
            None => self
                .settle_here(topic, handle, how)
                .map_err(FrontError::Local),
        }
    }

    /// Settles a batch's handles, one result each in request order:
    /// locally owned ones here, the rest forwarded, one `AckBatch` per
    /// owner in parallel.
    pub async fn settle_many(
        &self,
        topic: &str,
        handles: &[ReceiptHandle],
        how: Settle,
    ) -> Vec<SettleResult> {
        let mut results: Vec<Option<SettleResult>> = vec![None; handles.len()];
        let mut remote: Vec<(usize, ReceiptHandle)> = Vec::new();
        for (index, handle) in handles.iter().copied().enumerate() {
            if self.remote_owner(topic, handle.partition).is_some() {
                remote.push((index, handle));
                continue;
            }
            results[index] = Some(SettleResult::Local(self.settle_here(topic, handle, how)));
        }
        if let (Some(forwarder), false) = (self.forwarder, remote.is_empty()) {
            let forwarded: Vec<ReceiptHandle> = remote.iter().map(|(_, handle)| *handle).collect();
            let outcomes = forwarder.settle_many(topic, &forwarded, how).await;
            for ((index, _), outcome) in remote.into_iter().zip(outcomes) {
                if outcome.status == 204 {
                    self.count_settle(topic, how);
                }
                results[index] = Some(SettleResult::Forwarded(outcome));
            }
        }
        results
            .into_iter()
            .map(|result| result.expect("every handle has a result"))
            .collect()
    }

    /// Releases leased records a consume will not answer with (they did not
    /// fit the answer), so they are redelivered at once rather than after a
    /// visibility timeout: at this node, or forwarded as nacks to their owners.
    pub async fn release(&self, overflow: &[Delivery]) {
        for delivery in overflow {
            let remote = self.remote_owner(&delivery.topic, delivery.partition);
            let released = match remote {
                Some(forwarder) => forwarder
                    .settle(
                        &delivery.topic,
                        ReceiptHandle {
                            partition: delivery.partition,
                            offset: delivery.record.offset,
                            nonce: delivery.nonce,
                        },
                        Settle::Nack,
                    )
                    .await
                    .map_err(|error| format!("{error}")),
                None => self
                    .service
                    .settle(
                        &delivery.topic,
                        delivery.partition,
                        delivery.record.offset,
                        delivery.nonce,
                        Settle::Nack,
                    )
                    .map_err(|error| format!("{error:?}")),
            };
            match released {
                Ok(()) => self
                    .metrics
                    .topic(&delivery.topic)
                    .nacks(self.metrics)
                    .increment(1),
                // The lease lapses by itself; the record is redelivered later.
                Err(error) => tracing::warn!(
                    topic = %delivery.topic,
                    partition = delivery.partition,
                    offset = delivery.record.offset,
                    %error,
                    "releasing a batch consume record past the answer size failed"
                ),
            }
        }
    }

    /// Settles one lease of a partition this node owns and counts extends
    /// and nacks.
    fn settle_here(
        &self,
        topic: &str,
        handle: ReceiptHandle,
        how: Settle,
    ) -> Result<(), SettleError> {
        self.service
            .settle(topic, handle.partition, handle.offset, handle.nonce, how)?;
        self.count_settle(topic, how);
        Ok(())
    }

    /// Counts an extend or a nack.
    fn count_settle(&self, topic: &str, how: Settle) {
        let handles = self.metrics.topic(topic);
        let counter = match how {
            Settle::Ack => return,
            Settle::Extend => handles.extends(self.metrics),
            Settle::Nack => handles.nacks(self.metrics),
        };
        counter.increment(1);
    }
}
