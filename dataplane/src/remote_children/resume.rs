//! What a resume decides from every member's checks of the target (spec
//! §1.4, v3.2: `resume` "re-runs checks on every member", `409`
//! `target_replaced` unless accepted). No I/O: the HTTP handler gathers
//! the checks and acts on the verdict.
//!
//! The rules:
//! - A member that read the target topic's incarnation id reports it.
//!   When the members that read one do not all read the same, they reach
//!   different targets (a split DNS, a load balancer over two clusters):
//!   the resume is refused, accepted or not, since no one id can be
//!   recorded for all of them.
//! - When they agree on an id other than the attached one, the target was
//!   replaced: refused unless `accept_target`, which records the new id.
//! - A link attached without an id (unverified) records the one the
//!   members agree on.
//! - A failed check (the credential refused, the target down) or a member
//!   that did not answer does not refuse the resume: each member's
//!   shipper looks at the target itself before it ships, and the link
//!   shows the failure as its state. The answer lists every member's
//!   result so the operator sees them at once.

use std::collections::BTreeMap;

use narad_protocol::{RemoteTargetAnswer, TargetCheckOutcome};
use serde_json::{Value, json};

use crate::topology::NodeId;

/// What one member's checks of the target found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberCheck {
    /// It ran them (or skipped them, having no outbound client).
    Checked(RemoteTargetAnswer),
    /// It was not asked, or gave no answer: why.
    NotAnswering(String),
}

impl MemberCheck {
    /// The target topic's id the member read, if it read one.
    fn target_id(&self) -> Option<&str> {
        match self {
            Self::Checked(answer) => answer.target_id.as_deref(),
            Self::NotAnswering(_) => None,
        }
    }

    /// This member's entry in the resume's answer:
    /// `{"node","result","target_id"}` with `result` one of `pass`,
    /// `fail`, `skipped`, `not_answering`, and for a failure its `check`,
    /// `class` and `detail` (for no answer, `detail` says why).
    pub fn to_json(&self, node: NodeId) -> Value {
        match self {
            Self::Checked(answer) => {
                let result = match answer.outcome {
                    TargetCheckOutcome::Passed => "pass",
                    TargetCheckOutcome::Failed => "fail",
                    TargetCheckOutcome::Skipped => "skipped",
                };
                let mut entry = json!({
                    "node": node,
                    "result": result,
                    "target_id": answer.target_id,
                });
                if let Some(failure) = &answer.failure {
                    entry["check"] = json!(failure.check);
                    entry["class"] = json!(failure.state);
                    entry["detail"] = json!(failure.detail);
                }
                entry
            }
            Self::NotAnswering(why) => json!({
                "node": node,
                "result": "not_answering",
                "target_id": null,
                "detail": why,
            }),
        }
    }
}

/// Why a resume is refused (`409`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResumeRefusal {
    /// The members agree on a target topic other than the attached one,
    /// and the resume did not accept it.
    Replaced {
        /// The id recorded at attach (or at the last accepted resume).
        attached: String,
        /// The id the members read now.
        found: String,
        /// The members that read it.
        nodes: Vec<NodeId>,
    },
    /// The members read different ids: they reach different targets.
    Split {
        /// Each member that read an id, with it.
        found: Vec<(NodeId, String)>,
    },
}

impl std::fmt::Display for ResumeRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Replaced {
                attached,
                found,
                nodes,
            } => write!(
                f,
                "target_replaced: the target topic is incarnation {found} (seen from node(s) {}); the link was attached to {attached}; resume with accept_target=true to ship to it",
                list(nodes.iter())
            ),
            Self::Split { found } => write!(
                f,
                "target_replaced: members reach different incarnations of the target topic ({}); fix the route to the remote so every member reaches one cluster, then resume",
                found
                    .iter()
                    .map(|(node, id)| format!("node {node}: {id}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

fn list<'a>(nodes: impl Iterator<Item = &'a NodeId>) -> String {
    nodes
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The resume's verdict over `members`' checks of a link attached to
/// `attached` (`None`: unverified): the target id to record (`None`:
/// keep what the link has), or why it is refused.
///
/// # Errors
/// [`ResumeRefusal`] by the rules of this module.
pub fn resume_verdict(
    attached: Option<&str>,
    members: &BTreeMap<NodeId, MemberCheck>,
    accept_target: bool,
) -> Result<Option<String>, ResumeRefusal> {
    let found: Vec<(NodeId, &str)> = members
        .iter()
        .filter_map(|(node, check)| check.target_id().map(|id| (*node, id)))
        .collect();
    let Some(&(_, first)) = found.first() else {
        return Ok(None);
    };
    if found.iter().any(|(_, id)| *id != first) {
        return Err(ResumeRefusal::Split {
            found: found
                .into_iter()
                .map(|(node, id)| (node, id.to_owned()))
                .collect(),
        });
    }
    match attached {
        Some(attached) if attached != first && !accept_target => Err(ResumeRefusal::Replaced {
            attached: attached.to_owned(),
            found: first.to_owned(),
            nodes: found.into_iter().map(|(node, _)| node).collect(),
        }),
        _ => Ok(Some(first.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use narad_protocol::FailedCheck;

    use super::*;

    fn read(id: &str) -> MemberCheck {
        MemberCheck::Checked(RemoteTargetAnswer {
            outcome: TargetCheckOutcome::Passed,
            target_id: Some(id.to_owned()),
            failure: None,
        })
    }

    fn refused_auth() -> MemberCheck {
        MemberCheck::Checked(RemoteTargetAnswer {
            outcome: TargetCheckOutcome::Failed,
            target_id: None,
            failure: Some(FailedCheck {
                check: "auth".into(),
                state: "auth_failed".into(),
                detail: "401".into(),
            }),
        })
    }

    fn members(checks: Vec<MemberCheck>) -> BTreeMap<NodeId, MemberCheck> {
        checks
            .into_iter()
            .enumerate()
            .map(|(node, check)| (node as NodeId + 1, check))
            .collect()
    }

    #[test]
    fn members_agreeing_on_the_attached_target_resume_and_keep_it() {
        let all = members(vec![read("a"), read("a"), read("a")]);
        assert_eq!(resume_verdict(Some("a"), &all, false), Ok(Some("a".into())));
    }

    #[test]
    fn a_replaced_target_is_refused_unless_accepted() {
        let all = members(vec![read("b"), read("b")]);
        let refusal = resume_verdict(Some("a"), &all, false).expect_err("replaced");
        assert!(matches!(
            &refusal,
            ResumeRefusal::Replaced { attached, found, nodes }
                if attached == "a" && found == "b" && nodes.len() == 2
        ));
        assert!(refusal.to_string().starts_with("target_replaced:"));
        assert_eq!(resume_verdict(Some("a"), &all, true), Ok(Some("b".into())));
    }

    #[test]
    fn one_member_seeing_another_target_is_enough_to_refuse() {
        // Node 1 (the one taking the resume) still sees the attached
        // target; node 2 reaches a replaced one.
        let all = members(vec![read("a"), read("b")]);
        let refusal = resume_verdict(Some("a"), &all, true).expect_err("split");
        assert_eq!(
            refusal,
            ResumeRefusal::Split {
                found: vec![(1, "a".into()), (2, "b".into())]
            }
        );
    }

    #[test]
    fn failures_and_silent_members_do_not_refuse() {
        let all = members(vec![
            read("a"),
            refused_auth(),
            MemberCheck::NotAnswering("no answer within 15 s".into()),
        ]);
        assert_eq!(resume_verdict(Some("a"), &all, false), Ok(Some("a".into())));
        let none_read = members(vec![
            refused_auth(),
            MemberCheck::NotAnswering("marked dead".into()),
        ]);
        assert_eq!(resume_verdict(Some("a"), &none_read, false), Ok(None));
    }

    #[test]
    fn an_unverified_link_records_the_id_the_members_agree_on() {
        let all = members(vec![read("c"), refused_auth()]);
        assert_eq!(resume_verdict(None, &all, false), Ok(Some("c".into())));
    }

    #[test]
    fn each_member_has_an_entry_saying_how_its_checks_ended() {
        let node: NodeId = 2;
        let failed = refused_auth().to_json(node);
        assert_eq!(failed["result"], "fail");
        assert_eq!(failed["class"], "auth_failed");
        assert_eq!(failed["check"], "auth");
        let silent = MemberCheck::NotAnswering("marked dead".into()).to_json(node);
        assert_eq!(silent["result"], "not_answering");
        assert_eq!(silent["detail"], "marked dead");
        assert_eq!(read("a").to_json(node)["target_id"], "a");
    }
}
