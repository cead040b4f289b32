//! The checks of a remote child's target: run by an attach (its dry run
//! reports them), and by a resume. The node is given a [`RemoteProbe`];
//! the outbound client (`narad_remotes`) provides the real one. Without
//! one, [`NoRemoteProbe`] reports every check as skipped, so an attach
//! links without having reached the target.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use narad_meta::Remote;
use serde::Serialize;

/// A future a probe returns.
pub type ProbeFuture<'a> = Pin<Box<dyn Future<Output = CheckReport> + Send + 'a>>;

/// Checks a target topic on a remote.
pub trait RemoteProbe: Send + Sync + fmt::Debug {
    /// Checks `topic` on `remote` (its URL, user and sealed password as
    /// the metastore holds them; the probe opens the password).
    fn check<'a>(&'a self, remote: &'a Remote, topic: &'a str) -> ProbeFuture<'a>;
}

/// How one check ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    /// The target passed it.
    Passed,
    /// The target failed it: the attach is refused.
    Failed,
    /// It did not run.
    Skipped,
}

/// One check of a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked (`reachable`, `auth`, `topic`, …).
    pub name: String,
    /// How it ended.
    pub outcome: CheckOutcome,
    /// The link state a failure stands for (`auth_failed`,
    /// `target_missing`, …); `None` unless failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Human-readable detail.
    pub detail: String,
}

/// What the target takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// Messages per batch produce the target accepts (1,000, or 100 for an
    /// older release); 0 when unknown.
    pub max_messages: u32,
    /// Whether it takes zstd bodies.
    pub zstd: bool,
}

/// The outcome of a probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// Every check, in the order run.
    pub checks: Vec<Check>,
    /// The target topic's incarnation id, when read.
    #[serde(skip)]
    pub target_id: Option<String>,
    /// What the target takes.
    pub capabilities: Capabilities,
}

impl CheckReport {
    /// The first failed check, if any.
    pub fn failure(&self) -> Option<&Check> {
        self.checks
            .iter()
            .find(|check| check.outcome == CheckOutcome::Failed)
    }
}

/// The probe of a node that cannot reach remotes: every check skipped.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRemoteProbe;

/// The detail of [`NoRemoteProbe`]'s skipped check.
pub const NO_PROBE_DETAIL: &str =
    "this node has no outbound client for remotes; the target was not checked";

impl RemoteProbe for NoRemoteProbe {
    fn check<'a>(&'a self, _remote: &'a Remote, _topic: &'a str) -> ProbeFuture<'a> {
        Box::pin(async {
            CheckReport {
                checks: vec![Check {
                    name: "target".to_owned(),
                    outcome: CheckOutcome::Skipped,
                    state: None,
                    detail: NO_PROBE_DETAIL.to_owned(),
                }],
                target_id: None,
                capabilities: Capabilities {
                    max_messages: 0,
                    zstd: false,
                },
            }
        })
    }
}
