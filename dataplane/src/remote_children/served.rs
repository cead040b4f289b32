//! Opcode 34 (`CheckRemoteTarget`) served: another data node taking a
//! resume asks this one to check the target from here, through this
//! node's own probe (its outbound client, its opening of the sealed
//! credential). See `narad_protocol::remote_check` for the wire.

use std::sync::{Arc, OnceLock};

use narad_protocol::consume::decode_forward_request;
use narad_protocol::{
    CheckRemoteTarget, FailedCheck, Inbound, Opcode, OperationLimit, RemoteTargetAnswer, Response,
    Router, RpcError, TargetCheckOutcome, clip_text,
};

use super::probe::{CheckOutcome, CheckReport, RemoteProbe};
use crate::metadata::MetadataReplica;

/// Target checks one node runs for others at once. A resume asks each
/// member once; a few permits bound the outbound requests a burst of
/// resumes can start.
pub const REMOTE_CHECK_PERMITS: usize = 4;

/// The name of that operation class.
pub const REMOTE_CHECK_LIMIT_NAME: &str = "remote-check";

/// The link state of a remote this node's replica does not hold.
const REMOTE_MISSING: &str = "remote_missing";

/// `report` as the wire carries it: passed, failed (with the first failed
/// check), or skipped when no check ran.
pub fn answer_of(report: &CheckReport) -> RemoteTargetAnswer {
    let failure = report.failure().map(|check| {
        let mut detail = check.detail.clone();
        clip_text(&mut detail);
        let mut name = check.name.clone();
        clip_text(&mut name);
        FailedCheck {
            check: name,
            state: check.state.clone().unwrap_or_else(|| "unknown".to_owned()),
            detail,
        }
    });
    let outcome = if failure.is_some() {
        TargetCheckOutcome::Failed
    } else if report
        .checks
        .iter()
        .all(|check| check.outcome == CheckOutcome::Skipped)
    {
        TargetCheckOutcome::Skipped
    } else {
        TargetCheckOutcome::Passed
    };
    RemoteTargetAnswer {
        outcome,
        target_id: report.target_id.clone(),
        failure,
    }
}

/// Serves opcode 34 through the node's probe. Routed before the data node
/// exists (the transport is bound first), it answers `503` until
/// [`RemoteCheckService::attach`].
#[derive(Default)]
pub struct RemoteCheckService {
    parts: OnceLock<(Arc<MetadataReplica>, Arc<dyn RemoteProbe>)>,
}

impl std::fmt::Debug for RemoteCheckService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteCheckService")
            .field("attached", &self.parts.get().is_some())
            .finish()
    }
}

impl RemoteCheckService {
    /// A service answering `503` until attached.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Starts checking with `probe`, finding remotes in `replica`.
    ///
    /// # Panics
    /// If attached already.
    pub fn attach(&self, replica: Arc<MetadataReplica>, probe: Arc<dyn RemoteProbe>) {
        assert!(
            self.parts.set((replica, probe)).is_ok(),
            "remote check service attached twice"
        );
    }

    /// `router` with opcode 34 served by this service, at most
    /// [`REMOTE_CHECK_PERMITS`] at once.
    pub fn route(self: &Arc<Self>, router: Router) -> Router {
        let service = Arc::clone(self);
        let limit = OperationLimit::new(REMOTE_CHECK_LIMIT_NAME, REMOTE_CHECK_PERMITS);
        router.route(
            Opcode::CHECK_REMOTE_TARGET,
            limit,
            move |inbound: Inbound| {
                let service = Arc::clone(&service);
                async move { service.handle(inbound).await }
            },
        )
    }

    async fn handle(&self, inbound: Inbound) -> Result<Response, RpcError> {
        let (replica, probe) = self.parts.get().ok_or_else(|| {
            RpcError::unavailable("this data node does not check remote targets yet")
        })?;
        let request = decode_forward_request::<CheckRemoteTarget>(inbound.request.body)?;
        let remote = replica
            .view()
            .metastore
            .remote(&request.remote)
            .filter(|remote| remote.id.as_str() == request.remote_id)
            .cloned();
        let answer = match remote {
            Some(remote) => answer_of(&probe.check(&remote, &request.topic).await),
            None => missing(&request),
        };
        Ok(Response::message(&answer))
    }
}

/// The answer of a node whose replica does not hold the remote asked
/// about (not yet, or it was deleted and added again under another id).
fn missing(request: &CheckRemoteTarget) -> RemoteTargetAnswer {
    let mut detail = format!(
        "this node's replica does not hold remote {:?} with id {}",
        request.remote, request.remote_id
    );
    clip_text(&mut detail);
    RemoteTargetAnswer {
        outcome: TargetCheckOutcome::Failed,
        target_id: None,
        failure: Some(FailedCheck {
            check: "remote".to_owned(),
            state: REMOTE_MISSING.to_owned(),
            detail,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::probe::{Capabilities, Check};
    use super::*;

    fn check(name: &str, outcome: CheckOutcome, state: Option<&str>) -> Check {
        Check {
            name: name.into(),
            outcome,
            state: state.map(str::to_owned),
            detail: format!("{name} detail"),
        }
    }

    fn report(checks: Vec<Check>, target_id: Option<&str>) -> CheckReport {
        CheckReport {
            checks,
            target_id: target_id.map(str::to_owned),
            capabilities: Capabilities {
                max_messages: 1_000,
                zstd: true,
            },
        }
    }

    #[test]
    fn a_report_maps_to_its_outcome_and_first_failure() {
        let passed = report(
            vec![
                check("reachable", CheckOutcome::Passed, None),
                check("topic", CheckOutcome::Passed, None),
            ],
            Some("t1"),
        );
        let answer = answer_of(&passed);
        assert_eq!(answer.outcome, TargetCheckOutcome::Passed);
        assert_eq!(answer.target_id.as_deref(), Some("t1"));
        assert_eq!(answer.failure, None);

        let failed = report(
            vec![
                check("reachable", CheckOutcome::Passed, None),
                check("auth", CheckOutcome::Failed, Some("auth_failed")),
                check("topic", CheckOutcome::Failed, Some("target_missing")),
            ],
            None,
        );
        let answer = answer_of(&failed);
        assert_eq!(answer.outcome, TargetCheckOutcome::Failed);
        let failure = answer.failure.expect("a failure");
        assert_eq!(
            (failure.check.as_str(), failure.state.as_str()),
            ("auth", "auth_failed")
        );

        let skipped = report(vec![check("target", CheckOutcome::Skipped, None)], None);
        assert_eq!(answer_of(&skipped).outcome, TargetCheckOutcome::Skipped);
    }

    #[test]
    fn a_long_detail_is_cut_to_what_the_wire_takes() {
        let mut long = check("auth", CheckOutcome::Failed, Some("auth_failed"));
        long.detail = "x".repeat(narad_protocol::node_status::NODE_STATUS_TEXT_BYTES_MAX * 2);
        let answer = answer_of(&report(vec![long], None));
        let detail = answer.failure.expect("a failure").detail;
        assert_eq!(
            detail.len(),
            narad_protocol::node_status::NODE_STATUS_TEXT_BYTES_MAX
        );
        // It encodes: the encoder asserts every text's limit.
        let _ = narad_protocol::codec::encode_message(&RemoteTargetAnswer {
            outcome: TargetCheckOutcome::Failed,
            target_id: None,
            failure: Some(FailedCheck {
                check: "auth".into(),
                state: "auth_failed".into(),
                detail,
            }),
        });
    }
}
