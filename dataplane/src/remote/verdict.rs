//! What an owner's answer means for the dispatcher: a pure function, so the
//! mapping is tested without a network.

use narad_protocol::commit::{NOT_OWNER, is_unsupported_operation};
use narad_protocol::{CallError, CommitProduceBatchAnswer, Status};

use crate::dispatch::CommitOutcome;

/// What to do after one attempt of a remote commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The attempt ended the commit with this outcome. `reason` says why it
    /// was not committed, for the log; empty when committed.
    Done {
        /// The outcome to report.
        outcome: CommitOutcome,
        /// Why, when it is not [`CommitOutcome::Committed`].
        reason: String,
    },
    /// The owner does not know the trailing incarnation section: send the
    /// batch again without it, and remember the owner.
    RetryWithoutIds,
}

impl Verdict {
    fn done(outcome: CommitOutcome, reason: impl Into<String>) -> Self {
        Self::Done {
            outcome,
            reason: reason.into(),
        }
    }
}

/// Judges one attempt: `answer` is the transport's result, `sent_ids`
/// whether the batch carried the incarnation section, `records` how many
/// records it carried.
pub fn judge(
    answer: &Result<CommitProduceBatchAnswer, CallError>,
    sent_ids: bool,
    records: usize,
) -> Verdict {
    let error = match answer {
        Ok(answer) => {
            let taken =
                answer.offsets.end - answer.offsets.start + u64::from(answer.already_stored);
            return if taken == records as u64 {
                Verdict::done(CommitOutcome::Committed, "")
            } else {
                // Reported as failed: the records are sent again, which at
                // worst duplicates them; taking the answer could lose some.
                Verdict::done(
                    CommitOutcome::Failed,
                    format!(
                        "owner answered offsets {:?} ({taken} records) for {records} records",
                        answer.offsets
                    ),
                )
            };
        }
        Err(error) => error,
    };
    match error {
        CallError::Rejected(rejected) if rejected.status == Status::PRECONDITION_FAILED => {
            Verdict::done(CommitOutcome::IncarnationMismatch, rejected.message.clone())
        }
        CallError::Rejected(rejected) if sent_ids && is_unsupported_operation(rejected) => {
            Verdict::RetryWithoutIds
        }
        CallError::Rejected(rejected) if rejected.status == NOT_OWNER => Verdict::done(
            CommitOutcome::Failed,
            format!("the node is not the owner: {}", rejected.message),
        ),
        other => Verdict::done(CommitOutcome::Failed, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use narad_protocol::RpcError;
    use narad_protocol::commit::{incarnation_mismatch, not_owner};

    use super::*;

    fn answer(offsets: std::ops::Range<u64>) -> Result<CommitProduceBatchAnswer, CallError> {
        Ok(CommitProduceBatchAnswer {
            offsets,
            already_stored: 0,
        })
    }

    fn rejected(error: RpcError) -> Result<CommitProduceBatchAnswer, CallError> {
        Err(CallError::Rejected(error))
    }

    fn outcome(verdict: Verdict) -> CommitOutcome {
        match verdict {
            Verdict::Done { outcome, .. } => outcome,
            Verdict::RetryWithoutIds => panic!("expected an outcome"),
        }
    }

    #[test]
    fn offsets_for_every_record_are_committed() {
        assert_eq!(
            outcome(judge(&answer(10..13), true, 3)),
            CommitOutcome::Committed
        );
    }

    #[test]
    fn offsets_for_another_count_are_a_failure() {
        assert_eq!(
            outcome(judge(&answer(10..12), true, 3)),
            CommitOutcome::Failed
        );
    }

    #[test]
    fn precondition_failed_is_the_retriable_incarnation_mismatch() {
        let verdict = judge(&rejected(incarnation_mismatch("a", "b")), true, 1);
        assert_eq!(outcome(verdict), CommitOutcome::IncarnationMismatch);
    }

    #[test]
    fn unsupported_operation_after_sending_ids_retries_without_them() {
        let error = RpcError::bad_request("unsupported rpc operation: 24 trailing bytes");
        assert_eq!(judge(&rejected(error), true, 1), Verdict::RetryWithoutIds);
    }

    #[test]
    fn unsupported_operation_without_ids_is_a_failure() {
        let error = RpcError::bad_request("unsupported rpc operation: CommitProduceBatch (11)");
        assert_eq!(
            outcome(judge(&rejected(error), false, 1)),
            CommitOutcome::Failed
        );
    }

    #[test]
    fn a_plain_bad_request_is_not_a_reason_to_drop_ids() {
        let error = RpcError::bad_request("malformed request: topic is not valid UTF-8");
        assert_eq!(
            outcome(judge(&rejected(error), true, 1)),
            CommitOutcome::Failed
        );
    }

    #[test]
    fn not_the_owner_is_a_failure() {
        assert_eq!(
            outcome(judge(&rejected(not_owner("orders", 1)), true, 1)),
            CommitOutcome::Failed
        );
    }

    #[test]
    fn no_answer_is_a_failure() {
        let timeout = Err(CallError::Timeout {
            after: Duration::from_secs(30),
        });
        assert_eq!(outcome(judge(&timeout, true, 1)), CommitOutcome::Failed);
    }
}
