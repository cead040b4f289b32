//! The control nodes a data node follows, and when to turn from one to the
//! next.
//!
//! Any control node serves the metadata stream and forwards proposals,
//! member reports and leader confirmations to the leader, so the bridge
//! talks to one node at a time (the current one) and moves on when it stops
//! answering. Which errors move it on, and whether the same request may be
//! sent again to the next node, is decided by [`after_error`], a pure
//! function of the error and of whether the request may be repeated.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use narad_controlplane::node::client::ClientError;
use narad_protocol::CallError;
use tracing::{debug, info};

/// The status a control node answers while it knows no leader, cannot reach
/// it, or has not applied a change yet.
const UNAVAILABLE: u16 = 503;

/// Whether a request may be sent twice without changing its effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Reads, member reports and confirmations: sending again is harmless.
    Safe,
    /// Proposals: a second copy of a create that already committed would be
    /// refused as a conflict, a wrong answer for the client. Sent once.
    Once,
}

/// What to do after a call to the current node failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The node answered: the error is the answer.
    Answer,
    /// Move to the next node and send the request there.
    RetryElsewhere,
    /// Move to the next node for later calls, and report this error: the
    /// request may have taken effect, so it is not sent again.
    FailOver,
}

/// Decides what follows `error` on a request of kind `repeat`.
pub(crate) fn after_error(error: &ClientError, repeat: Repeat) -> Next {
    let ambiguous = match repeat {
        Repeat::Safe => Next::RetryElsewhere,
        Repeat::Once => Next::FailOver,
    };
    let ClientError::Call(call) = error else {
        return Next::Answer;
    };
    match call {
        // Nothing reached the node: any request may go elsewhere.
        CallError::Dial { .. } | CallError::Auth { .. } | CallError::TooManyPeers => {
            Next::RetryElsewhere
        }
        // The node may have acted before it went quiet, or told us it has
        // no leader (a proposal it forwarded may still commit).
        CallError::Timeout { .. } | CallError::ConnectionLost { .. } => ambiguous,
        CallError::Rejected(rejected) if rejected.status.0 == UNAVAILABLE => ambiguous,
        CallError::StreamRefused { .. } => ambiguous,
        CallError::Rejected(_)
        | CallError::RequestTooLarge(_)
        | CallError::MalformedAnswer { .. } => Next::Answer,
        // A kind of failure added later: treat it as the node going quiet.
        _ => ambiguous,
    }
}

/// The control nodes' cluster addresses and which one is current.
#[derive(Debug)]
pub(crate) struct ControlNodes {
    addrs: Vec<SocketAddr>,
    current: AtomicUsize,
}

impl ControlNodes {
    /// Follows `addrs`, starting with the first.
    ///
    /// # Panics
    /// If `addrs` is empty: the configuration refuses that before here.
    pub(crate) fn new(addrs: Vec<SocketAddr>) -> Self {
        assert!(
            !addrs.is_empty(),
            "a data node follows at least one control node"
        );
        Self {
            addrs,
            current: AtomicUsize::new(0),
        }
    }

    /// How many nodes there are.
    pub(crate) fn len(&self) -> usize {
        self.addrs.len()
    }

    /// The current node: its position and address.
    pub(crate) fn current(&self) -> (usize, SocketAddr) {
        let at = self.current.load(Ordering::Acquire) % self.addrs.len();
        (at, self.addrs[at])
    }

    /// Calls `call` on the current node; when that node does not answer,
    /// moves on and (for a request that may be repeated) tries the next,
    /// each node at most once per call. See [`after_error`].
    pub(crate) async fn call<T, F, Fut>(&self, repeat: Repeat, call: F) -> Result<T, ClientError>
    where
        F: Fn(SocketAddr) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let mut tries = 0;
        loop {
            let (at, addr) = self.current();
            let error = match call(addr).await {
                Ok(answer) => return Ok(answer),
                Err(error) => error,
            };
            tries += 1;
            match after_error(&error, repeat) {
                Next::Answer => return Err(error),
                Next::FailOver => {
                    info!(%addr, %error, "control node did not answer; moving to the next");
                    self.move_past(at);
                    return Err(error);
                }
                Next::RetryElsewhere => {
                    debug!(%addr, %error, "control node did not answer; trying the next");
                    self.move_past(at);
                    if tries >= self.len() {
                        return Err(error);
                    }
                }
            }
        }
    }

    /// Moves past the node at `failed`, unless another caller already moved
    /// past it (two calls failing on the same node move on once, not twice).
    pub(crate) fn move_past(&self, failed: usize) {
        let next = (failed + 1) % self.addrs.len();
        let _ = self
            .current
            .compare_exchange(failed, next, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use narad_protocol::{RpcError, Status};

    use super::*;

    fn peer() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 7943))
    }

    fn call(error: CallError) -> ClientError {
        ClientError::Call(error)
    }

    #[test]
    fn a_failed_dial_sends_any_request_to_the_next_node() {
        let error = call(CallError::Dial {
            peer: peer(),
            reason: "refused".into(),
        });
        assert_eq!(after_error(&error, Repeat::Safe), Next::RetryElsewhere);
        assert_eq!(after_error(&error, Repeat::Once), Next::RetryElsewhere);
    }

    #[test]
    fn a_timeout_repeats_only_requests_that_may_be_repeated() {
        let error = call(CallError::Timeout {
            after: Duration::from_secs(5),
        });
        assert_eq!(after_error(&error, Repeat::Safe), Next::RetryElsewhere);
        assert_eq!(after_error(&error, Repeat::Once), Next::FailOver);
    }

    #[test]
    fn a_node_without_a_leader_is_left_for_the_next() {
        let error = call(CallError::Rejected(RpcError::unavailable("no raft leader")));
        assert_eq!(after_error(&error, Repeat::Safe), Next::RetryElsewhere);
        assert_eq!(after_error(&error, Repeat::Once), Next::FailOver);
    }

    #[test]
    fn any_other_answer_of_the_node_is_the_answer() {
        let error = call(CallError::Rejected(RpcError::new(
            Status::BAD_REQUEST,
            "unsupported rpc operation",
        )));
        assert_eq!(after_error(&error, Repeat::Safe), Next::Answer);
        let error = ClientError::Answer("a status instead of a topic".into());
        assert_eq!(after_error(&error, Repeat::Once), Next::Answer);
    }

    fn node(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn unreachable(addr: SocketAddr) -> ClientError {
        call(CallError::Dial {
            peer: addr,
            reason: "refused".into(),
        })
    }

    #[tokio::test]
    async fn a_repeatable_call_is_answered_by_the_first_node_that_answers() {
        let nodes = ControlNodes::new(vec![node(1), node(2), node(3)]);
        let asked = std::sync::Mutex::new(Vec::new());
        let answer = nodes
            .call(Repeat::Safe, |addr| {
                asked.lock().expect("not poisoned").push(addr.port());
                async move {
                    if addr.port() == 3 {
                        Ok(addr.port())
                    } else {
                        Err(unreachable(addr))
                    }
                }
            })
            .await;
        assert_eq!(answer, Ok(3));
        assert_eq!(*asked.lock().expect("not poisoned"), vec![1, 2, 3]);
        assert_eq!(nodes.current().1, node(3));
    }

    #[tokio::test]
    async fn a_proposal_that_timed_out_is_not_sent_again_but_the_next_call_goes_elsewhere() {
        let nodes = ControlNodes::new(vec![node(1), node(2)]);
        let asked = std::sync::Mutex::new(Vec::new());
        let timed_out = nodes
            .call(Repeat::Once, |addr| {
                asked.lock().expect("not poisoned").push(addr.port());
                async move {
                    Err::<(), _>(call(CallError::Timeout {
                        after: Duration::from_secs(5),
                    }))
                }
            })
            .await;
        assert!(timed_out.is_err());
        assert_eq!(*asked.lock().expect("not poisoned"), vec![1]);
        assert_eq!(nodes.current().1, node(2));
    }

    #[tokio::test]
    async fn a_call_every_node_fails_tries_each_once() {
        let nodes = ControlNodes::new(vec![node(1), node(2), node(3)]);
        let asked = std::sync::Mutex::new(Vec::new());
        let failed = nodes
            .call(Repeat::Safe, |addr| {
                asked.lock().expect("not poisoned").push(addr.port());
                async move { Err::<(), _>(unreachable(addr)) }
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(*asked.lock().expect("not poisoned"), vec![1, 2, 3]);
    }

    #[test]
    fn the_current_node_moves_round_the_list() {
        let nodes = ControlNodes::new(vec![peer(), peer(), peer()]);
        assert_eq!(nodes.current().0, 0);
        nodes.move_past(0);
        nodes.move_past(1);
        assert_eq!(nodes.current().0, 2);
        nodes.move_past(2);
        assert_eq!(nodes.current().0, 0);
    }

    #[test]
    fn two_failures_on_one_node_move_on_once() {
        let nodes = ControlNodes::new(vec![peer(), peer(), peer()]);
        nodes.move_past(0);
        nodes.move_past(0);
        assert_eq!(nodes.current().0, 1);
    }
}
