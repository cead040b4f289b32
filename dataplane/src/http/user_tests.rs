//! HTTP tests of the user routes.

use axum::http::StatusCode;
use serde_json::Value;

use super::ApiConfig;
use super::tests::{ALICE, Answer, Api, api_with, produce_request, request, send};

const ROOT: (&str, &str) = ("root", "root-pw");

fn api() -> Api {
    api_with(ApiConfig {
        bcrypt_cost: 4,
        ..ApiConfig::default()
    })
}

fn json(answer: &Answer) -> Value {
    serde_json::from_str(&answer.body).expect("JSON body")
}

async fn create_dave(api: &Api) -> Answer {
    let body = r#"{"username":"dave","password":"dave-pw","grants":[{"action":"produce","patterns":["orders"]}]}"#;
    send(api, request("POST", "/v1/users", ROOT, body)).await
}

#[tokio::test]
async fn root_creates_a_user_who_can_then_produce() {
    let api = api();
    let answer = create_dave(&api).await;
    assert_eq!(answer.status, StatusCode::CREATED);
    let user = json(&answer);
    assert_eq!(user["username"], "dave");
    assert_eq!(user["grants"][0]["action"], "produce");
    assert!(user.get("password_hash").is_none());
    let produced = send(
        &api,
        produce_request("/v1/topics/orders/produce", ("dave", "dave-pw"), "x"),
    )
    .await;
    assert_eq!(produced.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn an_existing_username_is_409() {
    let api = api();
    create_dave(&api).await;
    assert_eq!(create_dave(&api).await.status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn a_non_admin_cannot_create_users() {
    let api = api();
    let answer = send(
        &api,
        request(
            "POST",
            "/v1/users",
            ALICE,
            r#"{"username":"x","password":"p"}"#,
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_password_over_72_bytes_is_400() {
    let api = api();
    let body = format!(r#"{{"username":"x","password":"{}"}}"#, "p".repeat(73));
    assert_eq!(
        send(&api, request("POST", "/v1/users", ROOT, &body))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn a_star_inside_a_pattern_is_400() {
    let api = api();
    let body =
        r#"{"username":"x","password":"p","grants":[{"action":"produce","patterns":["a*b"]}]}"#;
    assert_eq!(
        send(&api, request("POST", "/v1/users", ROOT, body))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn an_admin_grant_with_patterns_is_400() {
    let api = api();
    let body = r#"{"username":"x","password":"p","grants":[{"action":"admin","patterns":["a"]}]}"#;
    assert_eq!(
        send(&api, request("POST", "/v1/users", ROOT, body))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn list_returns_users_in_name_order_with_root_marked() {
    let api = api();
    let users = json(&send(&api, request("GET", "/v1/users", ROOT, "")).await);
    let names: Vec<&str> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["alice", "bob", "root"]);
    assert_eq!(users[2]["root"], true);
    assert!(users[1].get("grants").is_none());
}

#[tokio::test]
async fn describe_of_an_unknown_user_is_404() {
    let api = api();
    assert_eq!(
        send(&api, request("GET", "/v1/users/nobody", ROOT, ""))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn root_cannot_be_deleted() {
    let api = api();
    assert_eq!(
        send(&api, request("DELETE", "/v1/users/root", ROOT, ""))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn a_deleted_user_can_no_longer_authenticate() {
    let api = api();
    assert_eq!(
        send(
            &api,
            produce_request("/v1/topics/orders/produce", ALICE, "x")
        )
        .await
        .status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        send(&api, request("DELETE", "/v1/users/alice", ROOT, ""))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn replaced_grants_take_effect_at_once() {
    let api = api();
    let answer = send(
        &api,
        request(
            "PUT",
            "/v1/users/bob/grants",
            ROOT,
            r#"{"grants":[{"action":"produce","patterns":["*"]}]}"#,
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    let produced = send(
        &api,
        produce_request("/v1/topics/legacy/produce", ("bob", "bob-pw"), "x"),
    )
    .await;
    assert_eq!(produced.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn root_grants_cannot_be_changed() {
    let api = api();
    let answer = send(
        &api,
        request("PUT", "/v1/users/root/grants", ROOT, r#"{"grants":[]}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_user_changes_its_own_password_with_the_current_one() {
    let api = api();
    let body = r#"{"new_password":"alice-2","current_password":"alice-pw"}"#;
    let answer = send(
        &api,
        request("PUT", "/v1/users/alice/password", ALICE, body),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    let old = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(old.status, StatusCode::UNAUTHORIZED);
    let new = send(
        &api,
        produce_request("/v1/topics/orders/produce", ("alice", "alice-2"), "x"),
    )
    .await;
    assert_eq!(new.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_wrong_current_password_is_refused() {
    let api = api();
    let body = r#"{"new_password":"alice-2","current_password":"nope"}"#;
    let answer = send(
        &api,
        request("PUT", "/v1/users/alice/password", ALICE, body),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn an_own_password_change_without_the_current_one_is_400() {
    let api = api();
    let body = r#"{"new_password":"alice-2"}"#;
    let answer = send(
        &api,
        request("PUT", "/v1/users/alice/password", ALICE, body),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "current_password required");
}

#[tokio::test]
async fn a_non_admin_cannot_change_another_password() {
    let api = api();
    let body = r#"{"new_password":"x","current_password":"alice-pw"}"#;
    let answer = send(&api, request("PUT", "/v1/users/bob/password", ALICE, body)).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn an_oversized_user_body_is_400_not_413() {
    let api = api();
    let body = " ".repeat(1024 * 1024 + 1);
    let answer = send(&api, request("POST", "/v1/users", ROOT, &body)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
}
