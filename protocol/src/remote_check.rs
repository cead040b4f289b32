//! A data node checks a remote child's target from where it stands (spec
//! §1.4, v3.2: a resume "re-runs checks on every member"; opcode 34,
//! `CheckRemoteTarget`). The node that takes the resume asks every other
//! live data member to run the same checks it runs itself, because each
//! member ships its own partitions over its own client: its DNS, its
//! secret, its route.
//!
//! ```text
//! CheckRemoteTarget (34), a Message, version 1
//!   str   remote       the remote's name
//!   str   remote_id    its id: a replica holding another remote of that
//!                      name (deleted and added again) does not check it
//!   str   topic        the target topic
//!
//! RemoteTargetAnswer, a Message, version 1
//!   u8    outcome      0 passed, 1 failed, 2 skipped (not checked)
//!   u8    has_target_id · [str target_id]
//!   u8    has_failure  · [str check · str state · str detail]
//! ```
//!
//! Every text is at most [`NODE_STATUS_TEXT_BYTES_MAX`](crate::node_status::NODE_STATUS_TEXT_BYTES_MAX) bytes, checked by
//! the decoder before it copies anything; a sender cuts its details to
//! that.

use crate::codec::{Decode, DecodeError, Encode, Message, Reader, Writer};
use crate::fields::{get_option, invalid, put_option};
use crate::node_status::{get_text, put_text};

/// The request of opcode 34: check `topic` on remote `remote`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckRemoteTarget {
    /// The remote's name.
    pub remote: String,
    /// The remote's id in the asker's replica.
    pub remote_id: String,
    /// The target topic on the remote.
    pub topic: String,
}

impl Encode for CheckRemoteTarget {
    fn encode(&self, writer: &mut Writer) {
        put_text(writer, "remote", &self.remote);
        put_text(writer, "remote_id", &self.remote_id);
        put_text(writer, "topic", &self.topic);
    }
}

impl Decode for CheckRemoteTarget {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            remote: get_text(reader, "remote")?,
            remote_id: get_text(reader, "remote_id")?,
            topic: get_text(reader, "topic")?,
        })
    }
}

impl Message for CheckRemoteTarget {
    const NAME: &'static str = "CheckRemoteTarget";
    const VERSION: u8 = 1;
}

/// How a member's checks ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetCheckOutcome {
    /// Every check passed.
    Passed,
    /// A check failed: [`RemoteTargetAnswer::failure`] says which.
    Failed,
    /// The member did not check (it has no outbound client for remotes).
    Skipped,
}

/// The check that failed on a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedCheck {
    /// The check's name (`reachable`, `auth`, `topic`, …).
    pub check: String,
    /// The link state it stands for (`auth_failed`, `target_missing`, …).
    pub state: String,
    /// What the member saw.
    pub detail: String,
}

/// The answer to [`CheckRemoteTarget`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteTargetAnswer {
    /// How the checks ended.
    pub outcome: TargetCheckOutcome,
    /// The target topic's incarnation id, when the member read it.
    pub target_id: Option<String>,
    /// The first failed check, when one failed.
    pub failure: Option<FailedCheck>,
}

impl Encode for RemoteTargetAnswer {
    fn encode(&self, writer: &mut Writer) {
        writer.u8(match self.outcome {
            TargetCheckOutcome::Passed => 0,
            TargetCheckOutcome::Failed => 1,
            TargetCheckOutcome::Skipped => 2,
        });
        put_option(writer, self.target_id.as_deref(), |writer, id| {
            put_text(writer, "target_id", id);
        });
        put_option(writer, self.failure.as_ref(), |writer, failure| {
            put_text(writer, "failure check", &failure.check);
            put_text(writer, "failure state", &failure.state);
            put_text(writer, "failure detail", &failure.detail);
        });
    }
}

impl Decode for RemoteTargetAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let outcome = match reader.u8("outcome")? {
            0 => TargetCheckOutcome::Passed,
            1 => TargetCheckOutcome::Failed,
            2 => TargetCheckOutcome::Skipped,
            other => return Err(invalid("outcome", other)),
        };
        let target_id = get_option(reader, "has_target_id", |reader| {
            get_text(reader, "target_id")
        })?;
        let failure = get_option(reader, "has_failure", |reader| {
            Ok(FailedCheck {
                check: get_text(reader, "failure check")?,
                state: get_text(reader, "failure state")?,
                detail: get_text(reader, "failure detail")?,
            })
        })?;
        Ok(Self {
            outcome,
            target_id,
            failure,
        })
    }
}

impl Message for RemoteTargetAnswer {
    const NAME: &'static str = "RemoteTargetAnswer";
    const VERSION: u8 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_message, encode_message};

    fn answer(outcome: TargetCheckOutcome) -> RemoteTargetAnswer {
        RemoteTargetAnswer {
            outcome,
            target_id: Some("t-01".into()),
            failure: (outcome == TargetCheckOutcome::Failed).then(|| FailedCheck {
                check: "auth".into(),
                state: "auth_failed".into(),
                detail: "401 from the target".into(),
            }),
        }
    }

    #[test]
    fn requests_and_answers_survive_the_wire() {
        let request = CheckRemoteTarget {
            remote: "dr".into(),
            remote_id: "r-1".into(),
            topic: "orders-copy".into(),
        };
        let back = decode_message::<CheckRemoteTarget>(encode_message(&request));
        assert_eq!(back, Ok(request));
        for outcome in [
            TargetCheckOutcome::Passed,
            TargetCheckOutcome::Failed,
            TargetCheckOutcome::Skipped,
        ] {
            let sent = answer(outcome);
            let back = decode_message::<RemoteTargetAnswer>(encode_message(&sent));
            assert_eq!(back, Ok(sent));
        }
    }

    #[test]
    fn an_unknown_outcome_is_refused() {
        let mut writer = Writer::new();
        writer.u8(3);
        writer.u8(0);
        writer.u8(0);
        let error = RemoteTargetAnswer::decode(&mut Reader::new(writer.finish()));
        assert_eq!(error, Err(invalid("outcome", 3u8)));
    }

    #[test]
    fn a_text_over_the_limit_is_refused_before_it_is_copied() {
        let mut writer = Writer::new();
        writer.u32(crate::node_status::NODE_STATUS_TEXT_BYTES_MAX as u32 + 1);
        let error = CheckRemoteTarget::decode(&mut Reader::new(writer.finish()));
        assert_eq!(
            error,
            Err(invalid(
                "remote",
                crate::node_status::NODE_STATUS_TEXT_BYTES_MAX as u64 + 1
            ))
        );
    }
}
