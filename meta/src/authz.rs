//! The authorization re-check done under apply. The node the client reached
//! already authorized the request; checking again here, against the state
//! the command meets, closes the gap between that check and the commit
//! (a grant revoked or an owner's topic recreated in between). The data
//! plane runs the same checks against its replica before it proposes, so
//! both refuse with the same text.

use super::command::Actor;
use super::error::MetastoreError;
use super::state::{GrantAction, Metastore, Topic, User};

/// Texts of the 403 answers. Each names what the actor lacks.
pub(super) mod forbidden {
    pub(crate) const UNKNOWN_ACTOR: &str = "your user no longer exists";
    pub(crate) const NO_CREATE_GRANT: &str = "no create grant for this topic name";
    pub(crate) const NOT_OWNER: &str = "only the topic's owner or an admin may change this topic";
    pub(crate) const ADMIN_REQUIRED: &str = "admin required";
    pub(crate) const ADMIN_GRANT_NEEDS_ROOT: &str = "only the root admin may give the admin grant";
    pub(crate) const DELETE_ROOT: &str = "cannot delete the root admin";
    pub(crate) const DELETE_SELF: &str = "cannot delete yourself";
    pub(crate) const OWN_GRANTS: &str = "cannot change your own grants";
    pub(crate) const ROOT_GRANTS: &str = "cannot change the root admin's grants";
    pub(crate) const ROOT_PASSWORD: &str =
        "only the root admin may change the root admin's password";
    pub(crate) const OTHERS_PASSWORD: &str = "only an admin may change another user's password";
    pub(crate) const CURRENT_PASSWORD: &str =
        "current_password required to change your own password";
}

fn deny(reason: &'static str) -> MetastoreError {
    MetastoreError::Forbidden { reason }
}

impl Metastore {
    /// The acting user; `None` with security off, where every check passes.
    pub fn acting_user(&self, actor: &Actor) -> Result<Option<&User>, MetastoreError> {
        match actor {
            Actor::SecurityOff => Ok(None),
            Actor::User(name) => self
                .users
                .get(name)
                .map(Some)
                .ok_or(deny(forbidden::UNKNOWN_ACTOR)),
        }
    }

    /// Create needs a `create` grant on the name (or admin).
    pub fn require_create(&self, actor: &Actor, name: &str) -> Result<(), MetastoreError> {
        let Some(user) = self.acting_user(actor)? else {
            return Ok(());
        };
        if user.may(GrantAction::Create, name) {
            Ok(())
        } else {
            Err(deny(forbidden::NO_CREATE_GRANT))
        }
    }

    /// Alter, delete, attach and detach need ownership or admin.
    pub fn require_manage(&self, actor: &Actor, topic: &Topic) -> Result<(), MetastoreError> {
        let Some(user) = self.acting_user(actor)? else {
            return Ok(());
        };
        if user.may_manage(topic) {
            Ok(())
        } else {
            Err(deny(forbidden::NOT_OWNER))
        }
    }

    /// The user routes need admin. Returns whether the actor is root (true
    /// with security off, where nothing is checked).
    pub fn require_admin(&self, actor: &Actor) -> Result<bool, MetastoreError> {
        match self.acting_user(actor)? {
            None => Ok(true),
            Some(user) if user.is_admin() => Ok(user.root),
            Some(_) => Err(deny(forbidden::ADMIN_REQUIRED)),
        }
    }
}
