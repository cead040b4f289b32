//! The data plane's [`Admin`] as control-plane proposals: the metastore
//! command the HTTP API built goes to the leader, and the answer waits for
//! the data node's replica to hold it. The command carries the actor the
//! data node authorized; the metastore checks the same rules for that
//! actor again when it applies.

use std::sync::Arc;
use std::time::Duration;

use narad_dataplane::admin::{Admin, AdminError, AdminFuture};
use narad_meta::Command;
use narad_meta::follow::AppliedOutcome;

use super::Bridge;
use super::nodes::Repeat;

/// How long an answer waits for the data node's replica to apply a change
/// the control node already applied (the spec's bounded read-your-writes
/// wait).
const FED_WAIT: Duration = Duration::from_secs(10);

/// Proposes admin changes through the control node; see the module doc.
#[derive(Debug)]
pub(crate) struct ControlAdmin {
    bridge: Arc<Bridge>,
}

impl ControlAdmin {
    pub(crate) fn new(bridge: Arc<Bridge>) -> Self {
        Self { bridge }
    }
}

impl Admin for ControlAdmin {
    fn propose(&self, command: Command) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let client = &self.bridge.client;
            let applied = self
                .bridge
                .call(Repeat::Once, |addr| client.propose(addr, command.clone()))
                .await
                .map_err(|error| AdminError::Unavailable(format!("control plane: {error}")))?;
            self.bridge.leader_answered();
            if let AppliedOutcome::Refused { status, message } = applied.outcome {
                return Err(AdminError::Refused { status, message });
            }
            if self.bridge.wait_fed(applied.index, FED_WAIT).await {
                Ok(())
            } else {
                Err(AdminError::Unavailable(format!(
                    "committed at index {} but not yet applied on this data node within {} s",
                    applied.index,
                    FED_WAIT.as_secs()
                )))
            }
        })
    }
}
