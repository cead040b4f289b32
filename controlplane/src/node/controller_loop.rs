//! The controller's runtime on the leader: call the pure
//! [`Controller::decide`] on the node's clock and propose what it decided.

use std::sync::Arc;
use std::time::Duration;

use narad_clock::millis;
use openraft::ServerState;
use tracing::{debug, info, warn};

use super::propose::propose;
use super::runtime::Shared;
use crate::controller::{Controller, ControllerConfig};
use narad_meta::follow::AppliedOutcome;
use narad_meta::{BCRYPT_COST, Command, SeedAdmin, admin_password, hash_password};

/// The root admin's username.
const ROOT_ADMIN: &str = "admin";

/// Unix time on this node's clock.
fn now(shared: &Shared) -> Duration {
    Duration::from_millis(shared.clock.unix_ms())
}

fn is_leader(shared: &Shared) -> bool {
    shared.raft.metrics().borrow().state == ServerState::Leader
}

/// Runs for the node's lifetime: idle while following, deciding while
/// leading.
pub(super) async fn run(shared: Arc<Shared>) {
    let mut metrics = shared.raft.metrics();
    loop {
        let became_leader = metrics
            .wait_for(|m| m.state == ServerState::Leader)
            .await
            .is_ok();
        if !became_leader {
            // Raft stopped.
            return;
        }
        lead(&shared).await;
    }
}

/// One leadership: passes until this node stops leading.
async fn lead(shared: &Shared) {
    let config = ControllerConfig {
        security_enabled: shared.config.security_enabled,
        ..ControllerConfig::default()
    };
    let controller = Controller::new(config, now(shared));
    info!("leading: controller running");
    let mut applied = shared.view.watch_applied();
    let mut metrics = shared.raft.metrics();
    while is_leader(shared) {
        let decision = shared
            .view
            .read(|metastore| controller.decide(metastore, now(shared)));
        if decision.seed_admin {
            seed_admin(shared).await;
        }
        if !decision.dead_marking_refused.is_empty() {
            warn!(members = ?decision.dead_marking_refused, "dead marking refused by the breaker");
        }
        for command in decision.commands {
            match propose(shared, command, false).await {
                Ok(applied) => {
                    debug!(index = applied.index, outcome = ?applied.outcome, "controller proposal")
                }
                Err(error) => {
                    debug!(%error, "controller proposal failed");
                    break;
                }
            }
        }
        let wait = decision.next_pass_at.saturating_sub(now(shared));
        let wake_ms = shared.clock.now_ms().saturating_add(millis(wait));
        // Raft's metrics change on every heartbeat acknowledgement; only a
        // lost leadership matters here, so wait for that, not for any change.
        tokio::select! {
            () = shared.clock.sleep_until(wake_ms) => {}
            _ = applied.changed() => {}
            _ = metrics.wait_for(|m| m.state != ServerState::Leader) => {}
        }
    }
    info!("no longer leading: controller stopped");
}

/// Proposes the root admin: `NARAD_ADMIN_PASSWORD`, or a random password
/// logged once, when the seed is applied.
async fn seed_admin(shared: &Shared) {
    let password = admin_password(shared.config.admin_password.clone(), &mut rand::rng());
    let secret = password.password.clone();
    let salt: [u8; 16] = rand::random();
    // bcrypt is slow on purpose; keep it off the runtime's workers.
    let hashed =
        tokio::task::spawn_blocking(move || hash_password(secret.as_bytes(), BCRYPT_COST, salt))
            .await;
    let password_hash = match hashed {
        Ok(Ok(hash)) => hash,
        Ok(Err(error)) => {
            warn!(%error, "NARAD_ADMIN_PASSWORD is not a usable password; root admin not seeded");
            return;
        }
        Err(error) => {
            warn!(%error, "hashing the root admin password failed");
            return;
        }
    };
    let command = Command::SeedAdmin(SeedAdmin {
        username: ROOT_ADMIN.into(),
        password_hash,
        at_ms: shared.clock.unix_ms(),
    });
    match propose(shared, command, false).await {
        Ok(applied) if applied.outcome == AppliedOutcome::Applied => {
            if password.generated {
                warn!(
                    username = ROOT_ADMIN,
                    password = %password.password,
                    "root admin created with a generated password; it is shown only this once"
                );
            } else {
                info!(
                    username = ROOT_ADMIN,
                    "root admin created from NARAD_ADMIN_PASSWORD"
                );
            }
        }
        Ok(_) => debug!("root admin already exists"),
        Err(error) => debug!(%error, "root admin seed not committed; retried next pass"),
    }
}
