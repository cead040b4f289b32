//! The data plane's [`Admin`] as control-plane proposals.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use narad_controlplane::metastore::{self as cp, Actor, Command, IncarnationId, PasswordHash};
use narad_controlplane::raft::AppliedOutcome;
use narad_dataplane::admin::{Admin, AdminError, AdminFuture, AlterTopic, CreateTopic};
use narad_dataplane::metadata::{Grant, TopicMeta, User};

use super::Bridge;
use super::convert::grant_to_control;
use super::nodes::Repeat;

/// How long an answer waits for the data node's replica to apply a change
/// the control node already applied (the spec's bounded read-your-writes
/// wait).
const FED_WAIT: Duration = Duration::from_secs(10);

/// Which kind of record a command is about: a 404 names it.
#[derive(Clone, Copy, Debug)]
enum Subject {
    Topic,
    User,
}

/// Proposes admin changes through the control node; see the module doc.
#[derive(Debug)]
pub(crate) struct ControlAdmin {
    bridge: Arc<Bridge>,
}

impl ControlAdmin {
    pub(crate) fn new(bridge: Arc<Bridge>) -> Self {
        Self { bridge }
    }

    /// Proposes `command`; answers once the data node's replica holds it,
    /// with the control plane's refusal mapped to the API's error.
    async fn propose(&self, command: Command, subject: Subject) -> Result<(), AdminError> {
        let client = &self.bridge.client;
        let applied = self
            .bridge
            .call(Repeat::Once, |addr| client.propose(addr, command.clone()))
            .await
            .map_err(|error| AdminError::Unavailable(format!("control plane: {error}")))?;
        self.bridge.leader_answered();
        if let AppliedOutcome::Refused { status, message } = applied.outcome {
            return Err(refusal(status, message, subject));
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
    }

    fn topic(&self, name: &str) -> Result<Arc<TopicMeta>, AdminError> {
        self.bridge
            .replica
            .topic_meta(name)
            .ok_or(AdminError::NotFound)
    }

    fn user(&self, username: &str) -> Result<Arc<User>, AdminError> {
        self.bridge
            .replica
            .user(username)
            .0
            .ok_or(AdminError::UserNotFound)
    }
}

/// The metastore's refusal as the API's error. The API's errors carry no
/// 403: the data node authorized the request before the call, so the
/// metastore's own re-check refuses only when a grant or user changed in
/// between. That refusal, and any status without its own variant, keeps its
/// text as a 400.
fn refusal(status: u16, message: String, subject: Subject) -> AdminError {
    match (status, subject) {
        (404, Subject::Topic) => AdminError::NotFound,
        (404, Subject::User) => AdminError::UserNotFound,
        (409, _) => AdminError::Conflict(message),
        (503, _) => AdminError::Unavailable(message),
        _ => AdminError::Invalid(message),
    }
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn password_hash(hash: String) -> Result<PasswordHash, AdminError> {
    PasswordHash::try_from(hash).map_err(|error| AdminError::Invalid(error.to_string()))
}

fn grants(grants: &[Grant]) -> Vec<cp::Grant> {
    grants.iter().map(grant_to_control).collect()
}

/// An alter that changes one group of fields only.
fn alter(name: &str) -> cp::AlterTopic {
    cp::AlterTopic {
        actor: Actor::SecurityOff,
        name: name.to_owned(),
        expected_id: None,
        retention_ms: None,
        max_in_flight_per_partition: None,
        max_acked_ahead_per_partition: None,
        partitions: None,
        defaults: cp::TopicDefaults::default(),
    }
}

impl Admin for ControlAdmin {
    fn create_topic(&self, request: CreateTopic) -> AdminFuture<'_, Arc<TopicMeta>> {
        Box::pin(async move {
            let name = request.name.clone();
            let command = Command::CreateTopic(cp::CreateTopic {
                actor: request.owner.map_or(Actor::SecurityOff, Actor::User),
                name: request.name,
                id: IncarnationId::mint(&mut rand::rng()),
                partitions: Some(i64::from(request.partitions)),
                retention_ms: Some(signed(request.retention_ms)),
                visibility_timeout_ms: Some(signed(request.visibility_timeout_ms)),
                max_in_flight_per_partition: Some(i64::from(request.max_in_flight_per_partition)),
                max_acked_ahead_per_partition: Some(i64::from(
                    request.max_acked_ahead_per_partition,
                )),
                schema: request.schema.map(|document| document.to_string()),
                parent: None,
                defaults: cp::TopicDefaults::default(),
                created_at_ms: now_ms(),
            });
            self.propose(command, Subject::Topic).await?;
            self.topic(&name)
        })
    }

    fn delete_topic(&self, name: String) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let command = Command::DeleteTopic(cp::DeleteTopic {
                actor: Actor::SecurityOff,
                name,
                expected_id: None,
            });
            self.propose(command, Subject::Topic).await
        })
    }

    fn alter_topic(&self, name: String, change: AlterTopic) -> AdminFuture<'_, Arc<TopicMeta>> {
        Box::pin(async move {
            // Groups in the spec's order, each its own command: the first
            // refusal answers and the earlier groups stay applied.
            if let Some(retention) = change.retention_ms {
                let mut command = alter(&name);
                command.retention_ms = Some(signed(retention));
                self.propose(Command::AlterTopic(command), Subject::Topic)
                    .await?;
            }
            if change.max_in_flight_per_partition.is_some()
                || change.max_acked_ahead_per_partition.is_some()
            {
                let mut command = alter(&name);
                command.max_in_flight_per_partition =
                    change.max_in_flight_per_partition.map(i64::from);
                command.max_acked_ahead_per_partition =
                    change.max_acked_ahead_per_partition.map(i64::from);
                self.propose(Command::AlterTopic(command), Subject::Topic)
                    .await?;
            }
            if let Some(partitions) = change.partitions {
                let mut command = alter(&name);
                command.partitions = Some(i64::from(partitions));
                self.propose(Command::AlterTopic(command), Subject::Topic)
                    .await?;
            }
            if let Some(document) = change.schema {
                let command = Command::AddSchemaVersion(cp::AddSchemaVersion {
                    actor: Actor::SecurityOff,
                    name: name.clone(),
                    expected_id: None,
                    document: document.to_string(),
                    base_version: change.schema_base_version,
                });
                self.propose(command, Subject::Topic).await?;
            }
            self.topic(&name)
        })
    }

    fn create_user(&self, user: User) -> AdminFuture<'_, Arc<User>> {
        Box::pin(async move {
            let username = user.username.clone();
            let command = Command::CreateUser(cp::CreateUser {
                actor: Actor::SecurityOff,
                username: user.username,
                password_hash: password_hash(user.password_hash)?,
                grants: grants(&user.grants),
                at_ms: user.created_at_ms,
            });
            self.propose(command, Subject::User).await?;
            self.user(&username)
        })
    }

    fn delete_user(&self, username: String) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let command = Command::DeleteUser(cp::DeleteUser {
                actor: Actor::SecurityOff,
                username,
            });
            self.propose(command, Subject::User).await
        })
    }

    fn set_grants(&self, username: String, grants_now: Vec<Grant>) -> AdminFuture<'_, Arc<User>> {
        Box::pin(async move {
            let command = Command::SetGrants(cp::SetGrants {
                actor: Actor::SecurityOff,
                username: username.clone(),
                grants: grants(&grants_now),
                at_ms: now_ms(),
            });
            self.propose(command, Subject::User).await?;
            self.user(&username)
        })
    }

    fn set_password(&self, username: String, hash: String) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let command = Command::SetPassword(cp::SetPassword {
                actor: Actor::SecurityOff,
                username,
                password_hash: password_hash(hash)?,
                checked_hash: None,
                at_ms: now_ms(),
            });
            self.propose(command, Subject::User).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_the_control_planes_status_and_text() {
        let text = || "topic already exists".to_owned();
        assert_eq!(
            refusal(409, text(), Subject::Topic),
            AdminError::Conflict(text())
        );
        assert_eq!(
            refusal(400, text(), Subject::Topic),
            AdminError::Invalid(text())
        );
        assert_eq!(
            refusal(503, text(), Subject::User),
            AdminError::Unavailable(text())
        );
    }

    #[test]
    fn a_404_names_the_kind_of_record_asked_about() {
        assert_eq!(
            refusal(404, String::new(), Subject::Topic),
            AdminError::NotFound
        );
        assert_eq!(
            refusal(404, String::new(), Subject::User),
            AdminError::UserNotFound
        );
    }
}
