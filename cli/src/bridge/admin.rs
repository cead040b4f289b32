//! The data plane's [`Admin`] as control-plane proposals.
//!
//! Each proposal carries the data plane's [`Actor`] as the metastore's
//! actor: the data node authorized the request, and the metastore checks
//! the spec's rules for the same user again when the command applies (who
//! may create, alter and delete a topic; who may manage users, grants and
//! passwords). Building the commands is separate from proposing them, so
//! what a proposal carries is testable without a control node.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use narad_controlplane::metastore::{self as cp, Command, IncarnationId, PasswordHash};
use narad_controlplane::raft::AppliedOutcome;
use narad_dataplane::admin::{
    Actor, Admin, AdminError, AdminFuture, AlterTopic, CreateTopic, PasswordChange,
};
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
        assert!(
            command_actor(&command).is_some(),
            "every admin command names its actor"
        );
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

/// The metastore's refusal as the API's error. The data node authorized
/// the request before the call, so the metastore's re-check refuses (`403`)
/// only when a grant, a user or an owner changed in between; any status
/// without its own variant keeps its text as a `400`.
fn refusal(status: u16, message: String, subject: Subject) -> AdminError {
    match (status, subject) {
        (403, _) => AdminError::Forbidden(message),
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

/// The data plane's actor as the metastore's.
fn control_actor(actor: Actor) -> cp::Actor {
    match actor {
        Actor::SecurityOff => cp::Actor::SecurityOff,
        Actor::User(name) => cp::Actor::User(name),
    }
}

/// The actor an admin command carries; `None` for commands no admin
/// request proposes.
fn command_actor(command: &Command) -> Option<&cp::Actor> {
    match command {
        Command::CreateTopic(create) => Some(&create.actor),
        Command::DeleteTopic(delete) => Some(&delete.actor),
        Command::AlterTopic(alter) => Some(&alter.actor),
        Command::AddSchemaVersion(add) => Some(&add.actor),
        Command::CreateUser(create) => Some(&create.actor),
        Command::DeleteUser(delete) => Some(&delete.actor),
        Command::SetGrants(set) => Some(&set.actor),
        Command::SetPassword(set) => Some(&set.actor),
        _ => None,
    }
}

/// The create command of `request` by `actor`, who becomes the owner.
fn create_topic_command(
    actor: Actor,
    request: CreateTopic,
    id: IncarnationId,
    at_ms: u64,
) -> Command {
    Command::CreateTopic(cp::CreateTopic {
        actor: control_actor(actor),
        name: request.name,
        id,
        partitions: Some(i64::from(request.partitions)),
        retention_ms: Some(signed(request.retention_ms)),
        visibility_timeout_ms: Some(signed(request.visibility_timeout_ms)),
        max_in_flight_per_partition: Some(i64::from(request.max_in_flight_per_partition)),
        max_acked_ahead_per_partition: Some(i64::from(request.max_acked_ahead_per_partition)),
        schema: request.schema.map(|document| document.to_string()),
        parent: None,
        defaults: cp::TopicDefaults::default(),
        created_at_ms: at_ms,
    })
}

fn delete_topic_command(actor: Actor, name: String) -> Command {
    Command::DeleteTopic(cp::DeleteTopic {
        actor: control_actor(actor),
        name,
        expected_id: None,
    })
}

/// An alter by `actor` that changes no field yet.
fn alter(actor: &Actor, name: &str) -> cp::AlterTopic {
    cp::AlterTopic {
        actor: control_actor(actor.clone()),
        name: name.to_owned(),
        expected_id: None,
        retention_ms: None,
        max_in_flight_per_partition: None,
        max_acked_ahead_per_partition: None,
        partitions: None,
        defaults: cp::TopicDefaults::default(),
    }
}

/// The commands of one alter, in the spec's group order (retention, caps,
/// partitions, schema), each group its own command.
fn alter_commands(actor: &Actor, name: &str, change: AlterTopic) -> Vec<Command> {
    let mut commands = Vec::new();
    if let Some(retention) = change.retention_ms {
        let mut command = alter(actor, name);
        command.retention_ms = Some(signed(retention));
        commands.push(Command::AlterTopic(command));
    }
    if change.max_in_flight_per_partition.is_some()
        || change.max_acked_ahead_per_partition.is_some()
    {
        let mut command = alter(actor, name);
        command.max_in_flight_per_partition = change.max_in_flight_per_partition.map(i64::from);
        command.max_acked_ahead_per_partition = change.max_acked_ahead_per_partition.map(i64::from);
        commands.push(Command::AlterTopic(command));
    }
    if let Some(partitions) = change.partitions {
        let mut command = alter(actor, name);
        command.partitions = Some(i64::from(partitions));
        commands.push(Command::AlterTopic(command));
    }
    if let Some(document) = change.schema {
        commands.push(Command::AddSchemaVersion(cp::AddSchemaVersion {
            actor: control_actor(actor.clone()),
            name: name.to_owned(),
            expected_id: None,
            document: document.to_string(),
            base_version: change.schema_base_version,
        }));
    }
    commands
}

fn create_user_command(actor: Actor, user: User) -> Result<Command, AdminError> {
    Ok(Command::CreateUser(cp::CreateUser {
        actor: control_actor(actor),
        username: user.username,
        password_hash: password_hash(user.password_hash)?,
        grants: grants(&user.grants),
        at_ms: user.created_at_ms,
    }))
}

fn delete_user_command(actor: Actor, username: String) -> Command {
    Command::DeleteUser(cp::DeleteUser {
        actor: control_actor(actor),
        username,
    })
}

fn set_grants_command(actor: Actor, username: String, now: &[Grant], at_ms: u64) -> Command {
    Command::SetGrants(cp::SetGrants {
        actor: control_actor(actor),
        username,
        grants: grants(now),
        at_ms,
    })
}

fn set_password_command(
    actor: Actor,
    change: PasswordChange,
    at_ms: u64,
) -> Result<Command, AdminError> {
    Ok(Command::SetPassword(cp::SetPassword {
        actor: control_actor(actor),
        username: change.username,
        password_hash: password_hash(change.password_hash)?,
        checked_hash: change.checked_hash.map(password_hash).transpose()?,
        at_ms,
    }))
}

impl Admin for ControlAdmin {
    fn create_topic(&self, actor: Actor, request: CreateTopic) -> AdminFuture<'_, Arc<TopicMeta>> {
        Box::pin(async move {
            let name = request.name.clone();
            let id = IncarnationId::mint(&mut rand::rng());
            let command = create_topic_command(actor, request, id, now_ms());
            self.propose(command, Subject::Topic).await?;
            self.topic(&name)
        })
    }

    fn delete_topic(&self, actor: Actor, name: String) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let command = delete_topic_command(actor, name);
            self.propose(command, Subject::Topic).await
        })
    }

    fn alter_topic(
        &self,
        actor: Actor,
        name: String,
        change: AlterTopic,
    ) -> AdminFuture<'_, Arc<TopicMeta>> {
        Box::pin(async move {
            // The first refusal answers and the earlier groups stay applied.
            for command in alter_commands(&actor, &name, change) {
                self.propose(command, Subject::Topic).await?;
            }
            self.topic(&name)
        })
    }

    fn create_user(&self, actor: Actor, user: User) -> AdminFuture<'_, Arc<User>> {
        Box::pin(async move {
            let username = user.username.clone();
            let command = create_user_command(actor, user)?;
            self.propose(command, Subject::User).await?;
            self.user(&username)
        })
    }

    fn delete_user(&self, actor: Actor, username: String) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let command = delete_user_command(actor, username);
            self.propose(command, Subject::User).await
        })
    }

    fn set_grants(
        &self,
        actor: Actor,
        username: String,
        grants_now: Vec<Grant>,
    ) -> AdminFuture<'_, Arc<User>> {
        Box::pin(async move {
            let command = set_grants_command(actor, username.clone(), &grants_now, now_ms());
            self.propose(command, Subject::User).await?;
            self.user(&username)
        })
    }

    fn set_password(&self, actor: Actor, change: PasswordChange) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let command = set_password_command(actor, change, now_ms())?;
            self.propose(command, Subject::User).await
        })
    }
}

#[cfg(test)]
mod tests {
    use narad_controlplane::metastore::{ApplyContext, Metastore, MetastoreError, SeedAdmin};
    use narad_dataplane::metadata::GrantAction;

    use super::*;

    /// A bcrypt-shaped hash, distinct per `n`: the metastore checks the
    /// shape only.
    fn hash(n: u8) -> String {
        format!("$2b$04${}", char::from(b'a' + n).to_string().repeat(53))
    }

    fn bob() -> Actor {
        Actor::User("bob".into())
    }

    fn create_request(name: &str) -> CreateTopic {
        CreateTopic {
            name: name.into(),
            partitions: 3,
            retention_ms: 0,
            visibility_timeout_ms: 30_000,
            max_in_flight_per_partition: 1_024,
            max_acked_ahead_per_partition: 1_024,
            schema: None,
        }
    }

    fn new_user(name: &str, action: GrantAction) -> User {
        User {
            username: name.into(),
            password_hash: hash(1),
            root: false,
            grants: vec![Grant {
                action,
                patterns: vec!["*".into()],
            }],
            created_at_ms: 1,
            updated_at_ms: 1,
        }
    }

    /// Every command an admin request may propose, built for `actor`.
    fn every_command(actor: &Actor) -> Vec<Command> {
        let id = IncarnationId::mint(&mut rand::rng());
        let change = AlterTopic {
            retention_ms: Some(0),
            max_in_flight_per_partition: Some(8),
            max_acked_ahead_per_partition: None,
            partitions: Some(6),
            schema: Some(serde_json::json!(true)),
            schema_base_version: None,
        };
        let password = PasswordChange {
            username: "bob".into(),
            password_hash: hash(2),
            checked_hash: Some(hash(1)),
        };
        let mut commands = vec![
            create_topic_command(actor.clone(), create_request("orders"), id, 1),
            delete_topic_command(actor.clone(), "orders".into()),
            create_user_command(actor.clone(), new_user("eve", GrantAction::Create))
                .expect("a valid hash"),
            delete_user_command(actor.clone(), "eve".into()),
            set_grants_command(actor.clone(), "eve".into(), &[], 1),
            set_password_command(actor.clone(), password, 1).expect("valid hashes"),
        ];
        commands.extend(alter_commands(actor, "orders", change));
        commands
    }

    #[test]
    fn every_proposal_carries_the_acting_user() {
        let commands = every_command(&bob());
        assert_eq!(commands.len(), 10);
        for command in &commands {
            assert_eq!(
                command_actor(command),
                Some(&cp::Actor::User("bob".into())),
                "{command:?}"
            );
        }
    }

    #[test]
    fn with_security_off_every_proposal_acts_as_security_off() {
        for command in &every_command(&Actor::SecurityOff) {
            assert_eq!(
                command_actor(command),
                Some(&cp::Actor::SecurityOff),
                "{command:?}"
            );
        }
    }

    #[test]
    fn an_alter_proposes_its_groups_in_the_spec_order() {
        let change = AlterTopic {
            retention_ms: Some(0),
            max_acked_ahead_per_partition: Some(8),
            partitions: Some(6),
            schema: Some(serde_json::json!(true)),
            ..AlterTopic::default()
        };
        let commands = alter_commands(&bob(), "orders", change);
        let groups: Vec<&str> = commands
            .iter()
            .map(|command| match command {
                Command::AlterTopic(alter) if alter.retention_ms.is_some() => "retention",
                Command::AlterTopic(alter) if alter.max_acked_ahead_per_partition.is_some() => {
                    "caps"
                }
                Command::AlterTopic(alter) if alter.partitions.is_some() => "partitions",
                Command::AddSchemaVersion(_) => "schema",
                other => panic!("unexpected command {other:?}"),
            })
            .collect();
        assert_eq!(groups, ["retention", "caps", "partitions", "schema"]);
    }

    #[test]
    fn a_password_change_carries_the_checked_hash() {
        let change = PasswordChange {
            username: "bob".into(),
            password_hash: hash(2),
            checked_hash: Some(hash(1)),
        };
        let Ok(Command::SetPassword(set)) = set_password_command(bob(), change, 1) else {
            panic!("a set-password command");
        };
        assert_eq!(set.checked_hash.map(String::from), Some(hash(1)));
    }

    /// A metastore with root `admin`, and the next log index.
    struct Leader {
        metastore: Metastore,
        index: u64,
    }

    impl Leader {
        fn new() -> Self {
            let mut leader = Self {
                metastore: Metastore::new(),
                index: 0,
            };
            let seed = Command::SeedAdmin(SeedAdmin {
                username: "admin".into(),
                password_hash: password_hash(hash(0)).expect("a valid hash"),
                at_ms: 1,
            });
            leader.apply(seed).expect("seed root");
            leader
        }

        fn apply(&mut self, command: Command) -> Result<(), MetastoreError> {
            self.index += 1;
            let context = ApplyContext { index: self.index };
            self.metastore.apply(&command, context).map(drop)
        }

        /// The metastore's refusal of `command` as the bridge answers it.
        fn refusal_of(&mut self, command: Command, subject: Subject) -> AdminError {
            let error = self.apply(command).expect_err("refused");
            refusal(error.status(), error.to_string(), subject)
        }
    }

    /// Root creates users `bob` and `eve` with a create grant on every
    /// name; bob creates topic `orders`.
    fn leader_with_bobs_topic() -> Leader {
        let mut leader = Leader::new();
        let root = Actor::User("admin".into());
        for name in ["bob", "eve"] {
            let user = new_user(name, GrantAction::Create);
            let command = create_user_command(root.clone(), user).expect("a valid hash");
            leader.apply(command).expect("create user");
        }
        let id = IncarnationId::mint(&mut rand::rng());
        let create = create_topic_command(bob(), create_request("orders"), id, 1);
        leader.apply(create).expect("bob creates orders");
        leader
    }

    #[test]
    fn the_metastore_refuses_a_non_owners_delete_the_node_did_not_check() {
        let mut leader = leader_with_bobs_topic();
        let eve = Actor::User("eve".into());
        let error = leader.refusal_of(delete_topic_command(eve, "orders".into()), Subject::Topic);
        assert_eq!(
            error,
            AdminError::Forbidden(
                "only the topic's owner or an admin may change this topic".into()
            )
        );
        assert!(leader.metastore.topic("orders").is_some());
    }

    #[test]
    fn the_metastore_refuses_a_non_owners_alter_the_node_did_not_check() {
        let mut leader = leader_with_bobs_topic();
        let eve = Actor::User("eve".into());
        let change = AlterTopic {
            retention_ms: Some(0),
            ..AlterTopic::default()
        };
        for command in alter_commands(&eve, "orders", change) {
            let error = leader.refusal_of(command, Subject::Topic);
            assert!(matches!(error, AdminError::Forbidden(_)), "{error:?}");
        }
    }

    #[test]
    fn the_owner_deletes_its_topic_through_the_same_commands() {
        let mut leader = leader_with_bobs_topic();
        leader
            .apply(delete_topic_command(bob(), "orders".into()))
            .expect("the owner deletes");
        assert!(leader.metastore.topic("orders").is_none());
    }

    #[test]
    fn the_metastore_refuses_user_changes_by_a_non_admin() {
        let mut leader = leader_with_bobs_topic();
        let by_bob = delete_user_command(bob(), "eve".into());
        assert_eq!(
            leader.refusal_of(by_bob, Subject::User),
            AdminError::Forbidden("admin required".into())
        );
        let grants = set_grants_command(bob(), "eve".into(), &[], 1);
        assert_eq!(
            leader.refusal_of(grants, Subject::User),
            AdminError::Forbidden("admin required".into())
        );
    }

    #[test]
    fn a_password_changed_since_the_node_checked_it_is_a_conflict() {
        let mut leader = leader_with_bobs_topic();
        let stale = PasswordChange {
            username: "bob".into(),
            password_hash: hash(2),
            checked_hash: Some(hash(3)),
        };
        let command = set_password_command(bob(), stale, 1).expect("valid hashes");
        let error = leader.refusal_of(command, Subject::User);
        assert!(matches!(error, AdminError::Conflict(_)), "{error:?}");
    }

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
        assert_eq!(
            refusal(403, text(), Subject::User),
            AdminError::Forbidden(text())
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
