//! A client of control nodes over the cluster transport: what data nodes,
//! tools and tests use to propose and to read a node's replica.

use std::net::SocketAddr;
use std::sync::Arc;

use narad_protocol::metadata::{MetadataBatch, MetadataFetch};
use narad_protocol::{CallError, Lane, Node};

use super::wire::{
    ConfirmAnswer, ConfirmQuestion, ConfirmRequest, LocalRead, LocalReadAnswer, MemberReport,
    MemberRequest, ProposeRequest, Status,
};
use crate::network::messages::opcodes;
use crate::raft::Applied;
use narad_meta::{Command, Topic};

/// Why a call to a control node failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The transport failed, or the node answered with an error (503 while
    /// no leader is known, for instance).
    #[error(transparent)]
    Call(#[from] CallError),
    /// The node's answer is not what the operation answers.
    #[error("unexpected answer: {0}")]
    Answer(String),
}

/// Calls control nodes through a transport node of the caller's.
#[derive(Debug, Clone)]
pub struct ControlClient {
    transport: Arc<Node>,
}

impl ControlClient {
    /// A client calling through `transport`.
    pub fn new(transport: Arc<Node>) -> Self {
        Self { transport }
    }

    /// Proposes `command` through the control node at `addr`; answered
    /// after that node applied it.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn propose(
        &self,
        addr: SocketAddr,
        command: Command,
    ) -> Result<Applied, ClientError> {
        let request = ProposeRequest {
            command,
            forwarded: false,
        };
        Ok(self
            .transport
            .call_message(addr, Lane::Control, opcodes::PROPOSE, &request)
            .await?)
    }

    /// The topic `name` in the replica at `addr`, and that replica's
    /// applied index.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn topic(
        &self,
        addr: SocketAddr,
        name: &str,
    ) -> Result<(Option<Topic>, u64), ClientError> {
        match self
            .read(addr, LocalRead::Topic { name: name.into() })
            .await?
        {
            LocalReadAnswer::Topic {
                topic,
                applied_index,
            } => Ok((topic, applied_index)),
            other => Err(ClientError::Answer(format!("{other:?}"))),
        }
    }

    /// The owners of `topic`'s partitions in the replica at `addr` (one
    /// slot per partition, `None` while waiting; empty for an unknown topic).
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn owners(
        &self,
        addr: SocketAddr,
        topic: &str,
    ) -> Result<Vec<Option<String>>, ClientError> {
        match self
            .read(
                addr,
                LocalRead::Owners {
                    topic: topic.into(),
                },
            )
            .await?
        {
            LocalReadAnswer::Owners { owners } => Ok(owners),
            other => Err(ClientError::Answer(format!("{other:?}"))),
        }
    }

    /// The usernames in the replica at `addr`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn usernames(&self, addr: SocketAddr) -> Result<Vec<String>, ClientError> {
        match self.read(addr, LocalRead::Users).await? {
            LocalReadAnswer::Users { usernames } => Ok(usernames),
            other => Err(ClientError::Answer(format!("{other:?}"))),
        }
    }

    /// The Raft status of the node at `addr`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn status(&self, addr: SocketAddr) -> Result<Status, ClientError> {
        match self.read(addr, LocalRead::Status).await? {
            LocalReadAnswer::Status(status) => Ok(status),
            other => Err(ClientError::Answer(format!("{other:?}"))),
        }
    }

    /// One fetch of the metadata stream from the node at `addr`: the
    /// changes after `after_index` (or a snapshot), waiting up to `wait_ms`
    /// when there are none.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn fetch_metadata(
        &self,
        addr: SocketAddr,
        after_index: u64,
        wait_ms: u32,
    ) -> Result<MetadataBatch, ClientError> {
        let fetch = MetadataFetch {
            after_index,
            wait_ms,
        };
        Ok(self
            .transport
            .call_message(addr, Lane::Control, opcodes::METADATA_FETCH, &fetch)
            .await?)
    }

    /// Asks the leader (through the node at `addr`) whether an incarnation
    /// or attach epoch is still current, after a linearizable barrier.
    ///
    /// # Errors
    /// [`ClientError`]; `503` while no leader can confirm.
    pub async fn confirm(
        &self,
        addr: SocketAddr,
        question: ConfirmQuestion,
    ) -> Result<ConfirmAnswer, ClientError> {
        let request = ConfirmRequest {
            question,
            forwarded: false,
        };
        Ok(self
            .transport
            .call_message(addr, Lane::Control, opcodes::LEADER_CONFIRM, &request)
            .await?)
    }

    /// Registers or heartbeats a data node through the control node at
    /// `addr`; the leader stamps the time. Answered after `addr` applied it.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn report_member(
        &self,
        addr: SocketAddr,
        report: MemberReport,
    ) -> Result<Applied, ClientError> {
        let request = MemberRequest {
            report,
            forwarded: false,
        };
        Ok(self
            .transport
            .call_message(addr, Lane::Control, opcodes::REGISTER_MEMBER, &request)
            .await?)
    }

    async fn read(
        &self,
        addr: SocketAddr,
        read: LocalRead,
    ) -> Result<LocalReadAnswer, ClientError> {
        Ok(self
            .transport
            .call_message(addr, Lane::Control, opcodes::READ_LOCAL, &read)
            .await?)
    }
}
