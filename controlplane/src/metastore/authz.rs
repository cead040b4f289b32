//! The authorization re-check done under apply. The node the client reached
//! already authorized the request; checking again here, against the state
//! the command meets, closes the gap between that check and the commit
//! (a grant revoked or an owner's topic recreated in between).

use super::command::Actor;
use super::error::MetastoreError;
use super::state::{GrantAction, Metastore, Topic, User};

/// Texts of the 403 answers. Each names what the actor lacks.
pub(super) mod forbidden {
    pub(in crate::metastore) const UNKNOWN_ACTOR: &str = "your user no longer exists";
    pub(in crate::metastore) const NO_CREATE_GRANT: &str = "no create grant for this topic name";
    pub(in crate::metastore) const NOT_OWNER: &str =
        "only the topic's owner or an admin may change this topic";
    pub(in crate::metastore) const ADMIN_REQUIRED: &str = "admin required";
    pub(in crate::metastore) const ADMIN_GRANT_NEEDS_ROOT: &str =
        "only the root admin may give the admin grant";
    pub(in crate::metastore) const DELETE_ROOT: &str = "cannot delete the root admin";
    pub(in crate::metastore) const DELETE_SELF: &str = "cannot delete yourself";
    pub(in crate::metastore) const OWN_GRANTS: &str = "cannot change your own grants";
    pub(in crate::metastore) const ROOT_GRANTS: &str = "cannot change the root admin's grants";
    pub(in crate::metastore) const ROOT_PASSWORD: &str =
        "only the root admin may change the root admin's password";
    pub(in crate::metastore) const OTHERS_PASSWORD: &str =
        "only an admin may change another user's password";
    pub(in crate::metastore) const CURRENT_PASSWORD: &str =
        "current_password required to change your own password";
}

fn deny(reason: &'static str) -> MetastoreError {
    MetastoreError::Forbidden { reason }
}

impl Metastore {
    /// The acting user; `None` with security off, where every check passes.
    pub(super) fn acting_user(&self, actor: &Actor) -> Result<Option<&User>, MetastoreError> {
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
    pub(super) fn require_create(&self, actor: &Actor, name: &str) -> Result<(), MetastoreError> {
        let Some(user) = self.acting_user(actor)? else {
            return Ok(());
        };
        let granted = user
            .grants
            .iter()
            .any(|grant| grant.covers(GrantAction::Create, name));
        if user.is_admin() || granted {
            Ok(())
        } else {
            Err(deny(forbidden::NO_CREATE_GRANT))
        }
    }

    /// Alter, delete, attach and detach need ownership or admin.
    pub(super) fn require_manage(
        &self,
        actor: &Actor,
        topic: &Topic,
    ) -> Result<(), MetastoreError> {
        let Some(user) = self.acting_user(actor)? else {
            return Ok(());
        };
        if user.is_admin() || topic.owner.as_deref() == Some(user.username.as_str()) {
            Ok(())
        } else {
            Err(deny(forbidden::NOT_OWNER))
        }
    }

    /// The user routes need admin. Returns whether the actor is root (true
    /// with security off, where nothing is checked).
    pub(super) fn require_admin(&self, actor: &Actor) -> Result<bool, MetastoreError> {
        match self.acting_user(actor)? {
            None => Ok(true),
            Some(user) if user.is_admin() => Ok(user.root),
            Some(_) => Err(deny(forbidden::ADMIN_REQUIRED)),
        }
    }
}
