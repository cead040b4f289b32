//! The data plane's [`LeaderConfirm`] answered by the control plane's
//! leader, after its linearizable barrier.

use std::sync::Arc;
use std::time::Duration;

use narad_controlplane::node::wire::{ConfirmAnswer, ConfirmQuestion};
use narad_dataplane::dispatch::{GoneQuestion, LeaderConfirm, PartitionHolder};
use narad_meta::{AttachEpoch, IncarnationId};
use tokio::runtime::Handle;

use super::Bridge;
use super::nodes::Repeat;

/// How long one question may take, barrier and catch-up included.
const CONFIRM_WAIT: Duration = Duration::from_secs(10);

/// An incarnation id no topic holds: asked about when the question is
/// whether the topic exists at all, only for the leader's barrier.
const NO_INCARNATION: u64 = 0;

/// Asks the leader through the bridge's control node; see the module doc.
#[derive(Debug)]
pub(crate) struct ControlConfirm {
    bridge: Arc<Bridge>,
    runtime: Handle,
}

impl ControlConfirm {
    /// Answers through `bridge`, running calls on `runtime`.
    pub(crate) fn new(bridge: Arc<Bridge>, runtime: Handle) -> Self {
        Self { bridge, runtime }
    }

    /// `Some(id)`: the leader's answer. `None`: the leader's barrier, then
    /// the data node's replica once it applied everything the barrier
    /// covered (a replica that holds any incarnation of the topic then
    /// proves it is not gone).
    async fn ask(&self, question: &GoneQuestion) -> Result<bool, String> {
        let id = match &question.incarnation {
            Some(id) => IncarnationId::try_from(id.to_string()).map_err(|e| e.to_string())?,
            None => IncarnationId::from_bits(NO_INCARNATION),
        };
        let asked = ConfirmQuestion::Incarnation {
            name: question.topic.to_string(),
            id,
        };
        let answer = self.leader_answer(asked).await?;
        if question.incarnation.is_some() {
            return Ok(!answer.current);
        }
        if !self.bridge.wait_fed(answer.read_index, CONFIRM_WAIT).await {
            return Err(format!(
                "replica did not reach the confirmed index {} within {} s",
                answer.read_index,
                CONFIRM_WAIT.as_secs()
            ));
        }
        Ok(self.bridge.replica.topic_meta(&question.topic).is_none())
    }

    /// The leader's word on `child`'s link: whether it still carries
    /// `epoch`.
    async fn ask_epoch(&self, child: &str, epoch: &AttachEpoch) -> Result<bool, String> {
        let asked = ConfirmQuestion::AttachEpoch {
            child: child.to_owned(),
            epoch: epoch.clone(),
        };
        Ok(self.leader_answer(asked).await?.current)
    }

    /// The leader's word on whether `holder.member` still owns or
    /// receives the partition.
    async fn ask_holder(&self, holder: &PartitionHolder) -> Result<bool, String> {
        let asked = ConfirmQuestion::PartitionHolder {
            name: holder.topic.to_string(),
            id: IncarnationId::try_from(holder.incarnation.to_string())
                .map_err(|e| e.to_string())?,
            partition: holder.partition,
            member: holder.member.clone(),
        };
        Ok(self.leader_answer(asked).await?.current)
    }

    /// Asks the leader `asked` through the bridge's control node.
    async fn leader_answer(&self, asked: ConfirmQuestion) -> Result<ConfirmAnswer, String> {
        let client = &self.bridge.client;
        let answer = self
            .bridge
            .call(Repeat::Safe, |addr| client.confirm(addr, asked.clone()))
            .await
            .map_err(|e| format!("leader confirmation: {e}"))?;
        self.bridge.leader_answered();
        Ok(answer)
    }

    /// Runs `ask` to completion within [`CONFIRM_WAIT`] from a plain
    /// thread.
    fn block_on<F>(&self, ask: F) -> Result<bool, String>
    where
        F: Future<Output = Result<bool, String>>,
    {
        if Handle::try_current().is_ok() {
            // Blocking here would stall a runtime worker; callers ask from
            // their own threads, so this is a wiring error.
            return Err("leader confirmation asked from inside the async runtime".into());
        }
        self.runtime.block_on(async {
            tokio::time::timeout(CONFIRM_WAIT, ask)
                .await
                .unwrap_or_else(|_| Err("leader confirmation timed out".into()))
        })
    }
}

impl LeaderConfirm for ControlConfirm {
    fn confirm_gone(&self, question: &GoneQuestion) -> Result<bool, String> {
        self.block_on(self.ask(question))
    }

    fn confirm_attach_epoch(&self, child: &str, epoch: &AttachEpoch) -> Result<bool, String> {
        self.block_on(self.ask_epoch(child, epoch))
    }

    fn confirm_partition_holder(&self, holder: &PartitionHolder) -> Result<bool, String> {
        self.block_on(self.ask_holder(holder))
    }
}
