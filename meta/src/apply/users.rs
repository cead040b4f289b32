//! Users and grants: seed the root admin, create, delete, password, grants.

use super::super::authz::forbidden;
use super::super::command::{
    Actor, CreateUser, DeleteUser, Outcome, SeedAdmin, SetGrants, SetPassword,
};
use super::super::error::MetastoreError;
use super::super::rules;
use super::super::state::{Metastore, User};
use super::Domain;

fn deny(reason: &'static str) -> MetastoreError {
    MetastoreError::Forbidden { reason }
}

fn is_actor(actor: &Actor, username: &str) -> bool {
    matches!(actor, Actor::User(name) if name == username)
}

impl Metastore {
    /// Seeds the root admin once: only a metastore without users takes it.
    pub(super) fn seed_admin(&mut self, seed: &SeedAdmin) -> Result<Outcome, MetastoreError> {
        rules::check_username(&seed.username)?;
        if !self.users.is_empty() {
            return Ok(Outcome::Unchanged);
        }
        let root = User {
            username: seed.username.clone(),
            password_hash: seed.password_hash.clone(),
            root: true,
            grants: Vec::new(),
            created_at_ms: seed.at_ms,
            updated_at_ms: seed.at_ms,
        };
        self.users.insert(seed.username.clone(), root);
        self.changed(Domain::Users);
        Ok(Outcome::Applied)
    }

    pub(super) fn create_user(&mut self, create: &CreateUser) -> Result<Outcome, MetastoreError> {
        let actor_is_root = self.require_admin(&create.actor)?;
        rules::check_username(&create.username)?;
        rules::check_grants(&create.grants)?;
        rules::check_admin_grant_giver(&create.grants, actor_is_root)?;
        if self.users.contains_key(&create.username) {
            return Err(MetastoreError::UserExists);
        }
        let user = User {
            username: create.username.clone(),
            password_hash: create.password_hash.clone(),
            root: false,
            grants: create.grants.clone(),
            created_at_ms: create.at_ms,
            updated_at_ms: create.at_ms,
        };
        self.users.insert(create.username.clone(), user);
        self.changed(Domain::Users);
        Ok(Outcome::Applied)
    }

    pub(super) fn delete_user(&mut self, delete: &DeleteUser) -> Result<Outcome, MetastoreError> {
        self.require_admin(&delete.actor)?;
        let target = self
            .users
            .get(&delete.username)
            .ok_or(MetastoreError::UserNotFound)?;
        if target.root {
            return Err(deny(forbidden::DELETE_ROOT));
        }
        if is_actor(&delete.actor, &delete.username) {
            return Err(deny(forbidden::DELETE_SELF));
        }
        self.users.remove(&delete.username);
        self.changed(Domain::Users);
        Ok(Outcome::Applied)
    }

    /// Whether `actor` may set `username`'s password; `proves_current` says
    /// whether the change carries the hash the current password was checked
    /// against (a non-admin changing its own password must). Returns the
    /// user whose password changes. A proposer asks it before hashing the
    /// new password; `apply` asks it again.
    ///
    /// # Errors
    /// [`MetastoreError::UserNotFound`], or `Forbidden` with the rule the
    /// actor breaks.
    pub fn check_set_password(
        &self,
        actor: &Actor,
        username: &str,
        proves_current: bool,
    ) -> Result<&User, MetastoreError> {
        let target = self
            .users
            .get(username)
            .ok_or(MetastoreError::UserNotFound)?;
        if let Some(actor) = self.acting_user(actor)? {
            let own = actor.username == target.username;
            if target.root && !actor.root {
                return Err(deny(forbidden::ROOT_PASSWORD));
            }
            if !own && !actor.is_admin() {
                return Err(deny(forbidden::OTHERS_PASSWORD));
            }
            if own && !actor.is_admin() && !proves_current {
                return Err(deny(forbidden::CURRENT_PASSWORD));
            }
        }
        Ok(target)
    }

    pub(super) fn set_password(&mut self, set: &SetPassword) -> Result<Outcome, MetastoreError> {
        let target =
            self.check_set_password(&set.actor, &set.username, set.checked_hash.is_some())?;
        if let Some(checked) = &set.checked_hash
            && *checked != target.password_hash
        {
            return Err(MetastoreError::PasswordChanged);
        }
        if let Some(user) = self.users.get_mut(&set.username) {
            user.password_hash = set.password_hash.clone();
            user.updated_at_ms = set.at_ms;
        }
        self.changed(Domain::Users);
        Ok(Outcome::Applied)
    }

    pub(super) fn set_grants(&mut self, set: &SetGrants) -> Result<Outcome, MetastoreError> {
        let actor_is_root = self.require_admin(&set.actor)?;
        let target = self
            .users
            .get(&set.username)
            .ok_or(MetastoreError::UserNotFound)?;
        if is_actor(&set.actor, &set.username) {
            return Err(deny(forbidden::OWN_GRANTS));
        }
        if target.root {
            return Err(deny(forbidden::ROOT_GRANTS));
        }
        rules::check_grants(&set.grants)?;
        rules::check_admin_grant_giver(&set.grants, actor_is_root)?;
        if let Some(user) = self.users.get_mut(&set.username) {
            user.grants = set.grants.clone();
            user.updated_at_ms = set.at_ms;
        }
        self.changed(Domain::Users);
        Ok(Outcome::Applied)
    }
}
