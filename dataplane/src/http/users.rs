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

use super::body::read_limited;
use super::error::ApiError;
use super::topics::{admin_error, json_response};
use super::{ApiState, authenticate};
use crate::admin::{Actor, PasswordChange};
use crate::ingress::now_unix_ms;
use crate::metadata::{Grant, GrantAction, User};

/// User request bodies are at most this large; over it answers `400`, not
/// `413` (spec §1.1).
pub const USER_BODY_BYTES_MAX: usize = 1024 * 1024;
/// Longest username.
pub const USERNAME_CHARS_MAX: usize = 64;
/// Longest password in bytes (bcrypt reads no further).
pub const PASSWORD_BYTES_MAX: usize = 72;
/// Longest grant pattern.
pub const PATTERN_CHARS_MAX: usize = 255;

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

fn forbidden(message: &str) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, message)
}

/// Security off passes as an admin with no identity.
fn require_admin(user: Option<&User>) -> Result<(), ApiError> {
    match user {
        Some(user) if !user.is_admin() => Err(forbidden("admin required")),
        _ => Ok(()),
    }
}

fn caller_is_root(user: Option<&User>) -> bool {
    user.is_none_or(|user| user.root)
}

/// Only root may give the admin grant, whether creating a user or replacing
/// a user's grants.
fn check_admin_grant_giver(grants: &[Grant], caller: Option<&User>) -> Result<(), ApiError> {
    let gives_admin = grants
        .iter()
        .any(|grant| grant.action == GrantAction::Admin);
    if gives_admin && !caller_is_root(caller) {
        return Err(forbidden("only root may give the admin grant"));
    }
    Ok(())
}

async fn read_json<T: for<'de> Deserialize<'de>>(
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let bytes = read_limited(headers, body, USER_BODY_BYTES_MAX, None)
        .await
        .map_err(|error| ApiError::bad_request(error.message))?;
    serde_json::from_slice(&bytes)
        .map_err(|error| ApiError::bad_request(format!("invalid json: {error}")))
}

/// `POST /v1/users` → `201` User.
pub(crate) async fn create(
    State(state): State<Arc<ApiState>>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &method, &headers).await?;
    require_admin(caller.as_deref())?;
    let request: CreateBody = read_json(&headers, body).await?;
    check_username(&request.username)?;
    check_password(&request.password, "password")?;
    let grants = parse_grants(request.grants)?;
    check_admin_grant_giver(&grants, caller.as_deref())?;
    let password_hash = state
        .auth
        .hash_password(request.password, state.config.bcrypt_cost)
        .await?;
    let now = now_unix_ms();
    let user = User {
        username: request.username,
        password_hash,
        root: false,
        grants,
        created_at_ms: now,
        updated_at_ms: now,
    };
    let user = state
        .admin
        .create_user(Actor::of(caller.as_deref()), user)
        .await
        .map_err(admin_error)?;
    Ok(json_response(StatusCode::CREATED, &user_json(&user)))
}

/// `GET /v1/users` → every user in name order, without hashes.
pub(crate) async fn list(
    State(state): State<Arc<ApiState>>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &method, &headers).await?;
    require_admin(caller.as_deref())?;
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
    require_admin(caller.as_deref())?;
    let user = state.replica.user(&username).0.ok_or_else(user_not_found)?;
    Ok(json_response(StatusCode::OK, &user_json(&user)))
}

/// `DELETE /v1/users/{user}` → `204`; never root, never oneself.
pub(crate) async fn delete(
    State(state): State<Arc<ApiState>>,
    Path(username): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &method, &headers).await?;
    require_admin(caller.as_deref())?;
    let user = state.replica.user(&username).0.ok_or_else(user_not_found)?;
    if user.root {
        return Err(forbidden("the root user cannot be deleted"));
    }
    if caller
        .as_deref()
        .is_some_and(|caller| caller.username == username)
    {
        return Err(forbidden("a user cannot delete itself"));
    }
    state
        .admin
        .delete_user(Actor::of(caller.as_deref()), username)
        .await
        .map_err(admin_error)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `PUT /v1/users/{user}/grants` → `200` User; not one's own, not root's,
/// and `admin` only from root.
pub(crate) async fn set_grants(
    State(state): State<Arc<ApiState>>,
    Path(username): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &method, &headers).await?;
    require_admin(caller.as_deref())?;
    let request: GrantsBody = read_json(&headers, body).await?;
    let grants = parse_grants(request.grants)?;
    let user = state.replica.user(&username).0.ok_or_else(user_not_found)?;
    if user.root {
        return Err(forbidden("the root user's grants cannot be changed"));
    }
    if caller
        .as_deref()
        .is_some_and(|caller| caller.username == username)
    {
        return Err(forbidden("a user cannot change its own grants"));
    }
    check_admin_grant_giver(&grants, caller.as_deref())?;
    let user = state
        .admin
        .set_grants(Actor::of(caller.as_deref()), username, grants)
        .await
        .map_err(admin_error)?;
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
    let request: PasswordBody = read_json(&headers, body).await?;
    check_password(&request.new_password, "new_password")?;
    let user = state.replica.user(&username).0.ok_or_else(user_not_found)?;
    // The hash `current_password` was verified against travels with the
    // change, so the control plane refuses it if the password changed since.
    let mut checked_hash = None;
    if let Some(caller) = caller.as_deref() {
        let own = caller.username == username;
        if user.root && !caller.root {
            return Err(forbidden("only root may change root's password"));
        }
        if !caller.is_admin() {
            if !own {
                return Err(forbidden("a user may change only its own password"));
            }
            let current = request
                .current_password
                .clone()
                .ok_or_else(|| ApiError::bad_request("current_password required"))?;
            if !state
                .auth
                .verify_password(current, user.password_hash.clone())
                .await?
            {
                return Err(forbidden("current_password is wrong"));
            }
            checked_hash = Some(user.password_hash.clone());
        }
    }
    let password_hash = state
        .auth
        .hash_password(request.new_password, state.config.bcrypt_cost)
        .await?;
    let change = PasswordChange {
        username,
        password_hash,
        checked_hash,
    };
    state
        .admin
        .set_password(Actor::of(caller.as_deref()), change)
        .await
        .map_err(admin_error)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn user_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "user not found")
}

/// 1–64 characters of `A-Z a-z 0-9 . _ -`, not `.` or `..`.
fn check_username(name: &str) -> Result<(), ApiError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty()
        || name.len() > USERNAME_CHARS_MAX
        || name == "."
        || name == ".."
        || !name.chars().all(allowed)
    {
        return Err(ApiError::bad_request(
            "invalid username: use 1-64 characters of A-Z a-z 0-9 . _ - (not . or ..)",
        ));
    }
    Ok(())
}

fn check_password(password: &str, field: &str) -> Result<(), ApiError> {
    if password.is_empty() || password.len() > PASSWORD_BYTES_MAX {
        return Err(ApiError::bad_request(format!("{field} must be 1-72 bytes")));
    }
    Ok(())
}

fn parse_grants(wire: Vec<WireGrant>) -> Result<Vec<Grant>, ApiError> {
    wire.into_iter().map(parse_grant).collect()
}

fn parse_grant(wire: WireGrant) -> Result<Grant, ApiError> {
    let action = match wire.action.as_str() {
        "produce" => GrantAction::Produce,
        "consume" => GrantAction::Consume,
        "create" => GrantAction::Create,
        "admin" => GrantAction::Admin,
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown grant action {other:?}"
            )));
        }
    };
    match (action, wire.patterns.is_empty()) {
        (GrantAction::Admin, false) => {
            return Err(ApiError::bad_request("the admin grant takes no patterns"));
        }
        (GrantAction::Admin, true) => {}
        (_, true) => {
            return Err(ApiError::bad_request(format!(
                "the {} grant needs at least one pattern",
                wire.action
            )));
        }
        (_, false) => {}
    }
    for pattern in &wire.patterns {
        check_pattern(pattern)?;
    }
    Ok(Grant {
        action,
        patterns: wire.patterns,
    })
}

/// Topic-name characters (at most 255), optionally ending in one `*`.
fn check_pattern(pattern: &str) -> Result<(), ApiError> {
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    if body.contains('*') {
        return Err(ApiError::bad_request(format!(
            "invalid pattern {pattern:?}: '*' may only end a pattern"
        )));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if pattern.is_empty() || pattern.len() > PATTERN_CHARS_MAX || !body.chars().all(allowed) {
        return Err(ApiError::bad_request(format!(
            "invalid pattern {pattern:?}"
        )));
    }
    Ok(())
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
                let action = match grant.action {
                    GrantAction::Produce => "produce",
                    GrantAction::Consume => "consume",
                    GrantAction::Create => "create",
                    GrantAction::Admin => "admin",
                };
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
