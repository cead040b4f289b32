//! The metastore's rules, one behaviour per test, driven through `apply`.

mod determinism;
mod fanout;
mod members;
mod moves;
mod remotes;
mod schemas;
mod topics;
mod users;

use super::*;

/// A metastore and the next log index to apply at.
pub(super) struct Store {
    pub(super) meta: Metastore,
    index: u64,
}

impl Store {
    pub(super) fn new() -> Self {
        Self {
            meta: Metastore::new(),
            index: 0,
        }
    }

    pub(super) fn apply(&mut self, command: Command) -> Result<Outcome, MetastoreError> {
        self.index += 1;
        self.meta
            .apply(&command, ApplyContext { index: self.index })
    }

    /// Applies a command that must change the state.
    pub(super) fn ok(&mut self, command: Command) {
        let outcome = self.apply(command);
        assert_eq!(outcome, Ok(Outcome::Applied));
    }

    pub(super) fn topic(&self, name: &str) -> &Topic {
        self.meta.topic(name).unwrap()
    }

    /// Adds an alive member.
    pub(super) fn member(&mut self, id: &str) {
        self.ok(register(id, 1_000));
    }

    /// Seeds root `admin` and returns its actor.
    pub(super) fn root(&mut self) -> Actor {
        self.ok(Command::SeedAdmin(SeedAdmin {
            username: "admin".into(),
            password_hash: hash(1),
            at_ms: 1,
        }));
        Actor::User("admin".into())
    }

    /// Adds a user with `grants` (as root, seeding root first if needed).
    pub(super) fn user(&mut self, name: &str, grants: Vec<Grant>) -> Actor {
        if self.meta.user("admin").is_none() {
            self.root();
        }
        self.ok(create_user(Actor::User("admin".into()), name, grants));
        Actor::User(name.into())
    }
}

/// A deterministic incarnation id per name, so tests can name it again.
pub(super) fn id_of(name: &str) -> IncarnationId {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    IncarnationId::from_bits(hash)
}

/// `CreateTopic` for `name` with everything omitted, security off.
pub(super) fn create(name: &str) -> CreateTopic {
    CreateTopic::named(Actor::SecurityOff, name, id_of(name), 1_000)
}

pub(super) fn create_cmd(name: &str) -> Command {
    Command::CreateTopic(create(name))
}

/// `AlterTopic` for `name` with no group set.
pub(super) fn alter(name: &str) -> AlterTopic {
    AlterTopic::named(Actor::SecurityOff, name, None)
}

pub(super) fn delete(name: &str) -> Command {
    Command::DeleteTopic(DeleteTopic {
        actor: Actor::SecurityOff,
        name: name.into(),
        expected_id: None,
    })
}

pub(super) fn add_schema(name: &str, document: &str) -> AddSchemaVersion {
    AddSchemaVersion {
        actor: Actor::SecurityOff,
        name: name.into(),
        expected_id: None,
        document: document.into(),
        base_version: None,
    }
}

/// `AttachChild` of `child` under `parent` (3 partitions assumed for the
/// attach point), no delay.
pub(super) fn attach(parent: &str, child: &str) -> AttachChild {
    AttachChild {
        actor: Actor::SecurityOff,
        parent: parent.into(),
        parent_id: None,
        child: child.into(),
        child_id: None,
        delay_ms: None,
        attach_epoch: AttachEpoch::from_bits(7),
        attach_offsets: vec![0; 3],
    }
}

pub(super) fn detach(parent: &str, child: &str) -> Command {
    Command::DetachChild(DetachChild {
        actor: Actor::SecurityOff,
        parent: parent.into(),
        child: child.into(),
    })
}

/// The link of a create-as-child under a 3-partition `parent`.
pub(super) fn link(parent: &str) -> NewLink {
    NewLink {
        parent: parent.into(),
        parent_id: id_of(parent),
        fanout_delay_ms: None,
        attach_epoch: AttachEpoch::from_bits(9),
        attach_offsets: vec![0; 3],
    }
}

pub(super) fn register(id: &str, at_ms: u64) -> Command {
    Command::RegisterMember(RegisterMember {
        id: id.into(),
        http_addr: format!("{id}:7942"),
        rpc_addr: format!("{id}:7942"),
        at_ms,
    })
}

pub(super) fn assign(topic: &str, owners: &[(u32, &str)]) -> Command {
    Command::AssignPartitions(AssignPartitions {
        topic: topic.into(),
        id: id_of(topic),
        owners: owners
            .iter()
            .map(|(partition, owner)| PartitionOwner {
                partition: *partition,
                owner: (*owner).into(),
            })
            .collect(),
    })
}

pub(super) fn create_user(actor: Actor, name: &str, grants: Vec<Grant>) -> Command {
    Command::CreateUser(CreateUser {
        actor,
        username: name.into(),
        password_hash: hash(2),
        grants,
        at_ms: 5,
    })
}

pub(super) fn grant(action: GrantAction, patterns: &[&str]) -> Grant {
    Grant {
        action,
        patterns: patterns.iter().map(|p| (*p).to_owned()).collect(),
    }
}

/// A well-formed bcrypt hash text without running bcrypt (distinct per `n`).
pub(super) fn hash(n: u8) -> PasswordHash {
    let body: String = std::iter::repeat_n(char::from(b'a' + n % 26), 53).collect();
    PasswordHash::try_from(format!("$2b$04${body}")).unwrap()
}
