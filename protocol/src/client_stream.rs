//! One authenticated stream of a lane, as the caller sees it: the table of
//! requests waiting for an answer, the task that reads answers and hands them
//! out by request id, and the guard that turns a dropped call into a cancel
//! frame.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use quinn::{RecvStream, VarInt};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::warn;

use crate::auth::AuthError;
use crate::client::CallError;
use crate::frame::{Frame, RequestId, Response, RpcError};
use crate::limits::FRAME_BYTES_MAX;
use crate::opcode::Opcode;
use crate::stream::{Outgoing, codes};
use crate::wire::{WireError, read_frame};

/// What a waiting call receives: the peer's answer, or why none will come.
pub(crate) type Answer = Result<Result<Response, RpcError>, CallError>;

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every structure behind these locks stays consistent between statements.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A server that refuses our proof resets the stream with the auth code;
/// say so instead of reporting a bare stream reset.
pub(crate) fn refine_auth_error(error: AuthError) -> AuthError {
    match error {
        AuthError::Wire(WireError::Io(ref io_error))
            if reset_code(io_error) == Some(codes::AUTH_FAILED) =>
        {
            AuthError::RefusedByPeer
        }
        other => other,
    }
}

/// The code a peer reset a stream with, when that is what failed.
fn reset_code(error: &io::Error) -> Option<VarInt> {
    match error.get_ref()?.downcast_ref::<quinn::ReadError>()? {
        quinn::ReadError::Reset(code) => Some(*code),
        _ => None,
    }
}

fn describe_reset(code: VarInt) -> &'static str {
    match code {
        codes::AUTH_FAILED => "peer refused the stream's authentication",
        codes::FRAME_TOO_LARGE => "peer refused a frame over the size limit",
        codes::PROTOCOL_VIOLATION => "peer refused a malformed frame",
        codes::WRITE_TIMEOUT => "peer gave up writing a frame this node did not take in time",
        codes::SHUTDOWN => "peer closed the stream",
        _ => "peer reset the stream with an unknown code",
    }
}

#[derive(Debug, Default)]
pub(crate) struct StreamState {
    pending: HashMap<RequestId, oneshot::Sender<Answer>>,
    failure: Option<CallError>,
}

/// One authenticated stream of a lane.
#[derive(Debug)]
pub(crate) struct ClientStream {
    pub(crate) peer: SocketAddr,
    pub(crate) outgoing: mpsc::Sender<Outgoing>,
    pub(crate) permits: Semaphore,
    pub(crate) state: Mutex<StreamState>,
}

impl ClientStream {
    pub(crate) fn lost(&self, reason: &str) -> CallError {
        CallError::ConnectionLost {
            peer: self.peer,
            reason: reason.to_owned(),
        }
    }

    pub(crate) fn failure(&self) -> Option<CallError> {
        lock(&self.state).failure.clone()
    }

    pub(crate) fn register(
        &self,
        request_id: RequestId,
        answer: oneshot::Sender<Answer>,
    ) -> Result<(), CallError> {
        let mut state = lock(&self.state);
        if let Some(failure) = &state.failure {
            return Err(failure.clone());
        }
        let previous = state.pending.insert(request_id, answer);
        assert!(previous.is_none(), "request id {request_id} issued twice");
        Ok(())
    }

    pub(crate) fn complete(&self, request_id: RequestId, outcome: Result<Response, RpcError>) {
        // Absent when the caller gave up first: the answer has nobody to go to.
        if let Some(answer) = lock(&self.state).pending.remove(&request_id) {
            let _ = answer.send(Ok(outcome));
        }
    }

    /// Marks the stream failed (the first failure wins) and fails every
    /// waiting call with it.
    pub(crate) fn fail(&self, failure: CallError) {
        let waiting: Vec<_> = {
            let mut state = lock(&self.state);
            state.failure.get_or_insert(failure);
            state.pending.drain().map(|(_, answer)| answer).collect()
        };
        let failure = self.failure();
        for answer in waiting {
            if let Some(failure) = &failure {
                let _ = answer.send(Err(failure.clone()));
            }
        }
    }
}

/// Unregisters a call whose future was dropped, and tells the peer.
pub(crate) struct PendingGuard<'a> {
    pub(crate) stream: &'a ClientStream,
    pub(crate) request_id: RequestId,
    pub(crate) opcode: Opcode,
    pub(crate) answered: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let waiting = lock(&self.stream.state)
            .pending
            .remove(&self.request_id)
            .is_some();
        if !waiting {
            return;
        }
        let Ok(cancel) = (Frame::Cancel {
            request_id: self.request_id,
            opcode: self.opcode,
        })
        .encode() else {
            return;
        };
        // Queued behind the request on the same stream, so the peer sees
        // them in that order. A full queue hands the cancel to a task.
        match self.stream.outgoing.try_send(Outgoing::Frame(cancel)) {
            Err(mpsc::error::TrySendError::Full(item)) => {
                let outgoing = self.stream.outgoing.clone();
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move { outgoing.send(item).await });
                }
            }
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

/// Hands each answer on `recv` to its waiting call until the stream ends.
pub(crate) async fn read_answers(
    stream: Arc<ClientStream>,
    mut recv: RecvStream,
    outgoing: mpsc::Sender<Outgoing>,
) {
    let peer = stream.peer;
    let failure = loop {
        let refuse =
            |code: VarInt, reason: String| (code, CallError::StreamRefused { peer, reason });
        match read_frame(&mut recv, FRAME_BYTES_MAX).await {
            Ok(Some(bytes)) => match Frame::decode(bytes) {
                Ok(Frame::Response {
                    request_id,
                    outcome,
                    ..
                }) => stream.complete(request_id, outcome),
                Ok(other) => {
                    break Some(refuse(
                        codes::PROTOCOL_VIOLATION,
                        format!(
                            "peer sent a {:?} frame on a client stream",
                            other.header().kind
                        ),
                    ));
                }
                Err(error) => break Some(refuse(codes::PROTOCOL_VIOLATION, error.to_string())),
            },
            Ok(None) => break None,
            Err(WireError::Frame(error)) => {
                break Some(refuse(codes::FRAME_TOO_LARGE, error.to_string()));
            }
            Err(WireError::Io(error)) => {
                let failure = match reset_code(&error) {
                    Some(code) if code != codes::SHUTDOWN => CallError::StreamRefused {
                        peer,
                        reason: describe_reset(code).to_owned(),
                    },
                    _ => CallError::ConnectionLost {
                        peer,
                        reason: error.to_string(),
                    },
                };
                stream.fail(failure);
                return;
            }
            Err(error) => {
                stream.fail(CallError::ConnectionLost {
                    peer,
                    reason: error.to_string(),
                });
                return;
            }
        }
    };
    match failure {
        Some((code, failure)) => {
            warn!(%peer, error = %failure, "cluster stream refused");
            let _ = recv.stop(code);
            let _ = outgoing.send(Outgoing::Reset(code)).await;
            stream.fail(failure);
        }
        None => stream.fail(stream.lost("peer finished the stream")),
    }
}
