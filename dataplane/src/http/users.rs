//! User routes: create, list, describe, delete, replace grants, change a
//! password (spec §1.8). Admin only, except a user changing its own
//! password. Changes go through [`crate::admin::Admin`].

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use narad_meta::{
    Actor, Command, CreateUser, DeleteUser, MetastoreError, PasswordHash, SetGrants, SetPassword,
    rules,
};

use super::body::read_json_refusing_400;
use super::error::ApiError;
use super::topics::{found, json_response, propose, refused};
use super::{ApiState, authenticate};
use crate::admin::actor_of;
use crate::metadata::{Grant, GrantAction, User};

/// User request bodies are at most this large; over it answers `400`, not
/// `413` (spec §1.1).
pub const USER_BODY_BYTES_MAX: usize = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireGrant {
    action: String,
    #[serde(default)]
    patterns: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    username: String,
    password: String,
    #[serde(default)]
    grants: Vec<WireGrant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantsBody {
    grants: Vec<WireGrant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PasswordBody {
    new_password: String,
    #[serde(default)]
    current_password: Option<String>,
}

/// Who acts, if the metastore's rule lets them manage users (an admin;
/// everyone with security off); returns also whether the actor is root.
fn require_admin(state: &ApiState, user: Option<&User>) -> Result<(Actor, bool), ApiError> {
    let actor = actor_of(user);
    let root = state
        .replica
        .view()
        .metastore
        .require_admin(&actor)
        .map_err(refused)?;
    Ok((actor, root))
}

async fn read_json<T: for<'de> Deserialize<'de>>(
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    read_json_refusing_400(headers, body, USER_BODY_BYTES_MAX).await
}

/// `POST /v1/users` → `201` User.
pub(crate) async fn create(
    State(state): State<Arc<ApiState>>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &method, &headers).await?;
    let (actor, root) = require_admin(&state, caller.as_deref())?;
    let request: CreateBody = read_json(&headers, body).await?;
    rules::check_username(&request.username).map_err(refused)?;
    check_password(&request.password)?;
    let grants = parse_grants(request.grants)?;
    rules::check_admin_grant_giver(&grants, root).map_err(refused)?;
    let password_hash = hash(&state, request.password).await?;
    let username = request.username;
    let create = CreateUser {
        actor,
        username: username.clone(),
        password_hash,
        grants,
        at_ms: state.clock().unix_ms(),
    };
    propose(&state, Command::CreateUser(create)).await?;
    let user = known_user(&state, &username)?;
    Ok(json_response(StatusCode::CREATED, &user_json(&user)))
}

/// `password` hashed at the node's bcrypt cost, under the bcrypt slots.
async fn hash(state: &ApiState, password: String) -> Result<PasswordHash, ApiError> {
    let hash = state
        .auth
        .hash_password(password, state.config.bcrypt_cost)
        .await?;
    PasswordHash::try_from(hash)
        .map_err(|error| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))
}

fn known_user(state: &ApiState, username: &str) -> Result<Arc<User>, ApiError> {
    found(state.replica.user(username).0, MetastoreError::UserNotFound)
}

/// `GET /v1/users` → every user in name order, without hashes.
pub(crate) async fn list(
    State(state): State<Arc<ApiState>>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &method, &headers).await?;
    require_admin(&state, caller.as_deref())?;
    let view = state.replica.view();
    let users: Vec<Value> = view.users.values().map(|user| user_json(user)).collect();
    Ok(json_response(StatusCode::OK, &Value::Array(users)))
}

/// `GET /v1/users/{user}`.
pub(crate) async fn describe(
    State(state): State<Arc<ApiState>>,
    Path(username): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &method, &headers).await?;
    require_admin(&state, caller.as_deref())?;
    let user = known_user(&state, &username)?;
    Ok(json_response(StatusCode::OK, &user_json(&user)))
}

/// `DELETE /v1/users/{user}` → `204`; never root, never oneself (the
/// metastore's rules).
pub(crate) async fn delete(
    State(state): State<Arc<ApiState>>,
    Path(username): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &method, &headers).await?;
    let (actor, _) = require_admin(&state, caller.as_deref())?;
    known_user(&state, &username)?;
    propose(&state, Command::DeleteUser(DeleteUser { actor, username })).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `PUT /v1/users/{user}/grants` → `200` User; not one's own, not root's,
/// and `admin` only from root (the metastore's rules).
pub(crate) async fn set_grants(
    State(state): State<Arc<ApiState>>,
    Path(username): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &method, &headers).await?;
    let (actor, root) = require_admin(&state, caller.as_deref())?;
    let request: GrantsBody = read_json(&headers, body).await?;
    let grants = parse_grants(request.grants)?;
    known_user(&state, &username)?;
    rules::check_admin_grant_giver(&grants, root).map_err(refused)?;
    let set = SetGrants {
        actor,
        username: username.clone(),
        grants,
        at_ms: state.clock().unix_ms(),
    };
    propose(&state, Command::SetGrants(set)).await?;
    let user = known_user(&state, &username)?;
    Ok(json_response(StatusCode::OK, &user_json(&user)))
}

/// `PUT /v1/users/{user}/password` → `204`. An admin changes anyone's but
/// root's (only root changes root's); anyone else only its own, proving the
/// current password.
pub(crate) async fn set_password(
    State(state): State<Arc<ApiState>>,
    Path(username): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &method, &headers).await?;
    let actor = actor_of(caller.as_deref());
    let request: PasswordBody = read_json(&headers, body).await?;
    check_password(&request.new_password)?;
    let target = known_user(&state, &username)?;
    // Who may change whose password is the metastore's rule; a non-admin
    // must also prove its current password here, and the hash it was
    // verified against travels with the change, so the metastore refuses
    // it if the password changed since.
    state
        .replica
        .view()
        .metastore
        .check_set_password(&actor, &username, true)
        .map_err(refused)?;
    let must_prove = caller.as_deref().is_some_and(|caller| !caller.is_admin());
    if must_prove && request.current_password.is_none() {
        return Err(ApiError::bad_request("current_password required"));
    }
    let mut checked_hash = None;
    if let (true, Some(current)) = (must_prove, request.current_password) {
        let stored = target.password_hash.as_str().to_owned();
        if !state.auth.verify_password(current, stored).await? {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "current_password is wrong",
            ));
        }
        checked_hash = Some(target.password_hash.clone());
    }
    let set = SetPassword {
        actor,
        username,
        password_hash: hash(&state, request.new_password).await?,
        checked_hash,
        at_ms: state.clock().unix_ms(),
    };
    propose(&state, Command::SetPassword(set)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A password field, by the metastore's length rule (the proposer checks
/// it: the metastore sees only hashes).
fn check_password(password: &str) -> Result<(), ApiError> {
    rules::check_password(password.as_bytes()).map_err(refused)
}

fn parse_grants(wire: Vec<WireGrant>) -> Result<Vec<Grant>, ApiError> {
    wire.into_iter().map(parse_grant).collect()
}

fn parse_grant(wire: WireGrant) -> Result<Grant, ApiError> {
    let action = GrantAction::from_name(&wire.action)
        .ok_or_else(|| ApiError::bad_request(format!("unknown grant action {:?}", wire.action)))?;
    let grant = Grant {
        action,
        patterns: wire.patterns,
    };
    rules::check_grants(std::slice::from_ref(&grant)).map_err(refused)?;
    Ok(grant)
}

/// The User JSON: no hash; `grants` absent when none; `root` only on root.
fn user_json(user: &User) -> Value {
    let mut value = json!({
        "username": user.username,
        "created_at_ms": user.created_at_ms,
        "updated_at_ms": user.updated_at_ms,
    });
    if !user.grants.is_empty() {
        let grants: Vec<Value> = user
            .grants
            .iter()
            .map(|grant| {
                let action = grant.action.name();
                if grant.patterns.is_empty() {
                    json!({ "action": action })
                } else {
                    json!({ "action": action, "patterns": grant.patterns })
                }
            })
            .collect();
        value["grants"] = Value::Array(grants);
    }
    if user.root {
        value["root"] = json!(true);
    }
    value
}
