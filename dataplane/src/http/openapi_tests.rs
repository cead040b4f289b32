//! The OpenAPI document against the router: every route and method of
//! [`super::router`] is documented and every documented operation is
//! routed, so the document cannot drift from the code; and
//! `GET /v1/openapi.json` serves it.

use std::collections::BTreeSet;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::Value;

use super::ApiConfig;
use super::openapi::DOCUMENT;
use super::tests::{api_with, send};
use crate::testing::basic;

/// The methods the router can be given in `router()`.
const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

fn document() -> Value {
    serde_json::from_str(DOCUMENT).expect("openapi.json is JSON")
}

/// `(path template, method)` of every operation in the document.
fn documented() -> BTreeSet<(String, String)> {
    let document = document();
    let paths = document["paths"].as_object().expect("paths");
    let mut operations = BTreeSet::new();
    for (path, item) in paths {
        for method in item.as_object().expect("path item").keys() {
            assert!(
                METHODS.contains(&method.as_str()),
                "{path}: {method} is not a method the router serves"
            );
            operations.insert((path.clone(), method.clone()));
        }
    }
    operations
}

/// `(path template, method)` of every `.route(...)` in `router()`, read
/// from its source: axum's router cannot list its routes.
fn routed() -> BTreeSet<(String, String)> {
    let source = include_str!("mod.rs");
    let start = source.find("pub fn router(").expect("router()");
    let end = start + source[start..].find(".fallback(").expect("fallback");
    let body = &source[start..end];
    let mut operations = BTreeSet::new();
    for route in body.split(".route(").skip(1) {
        let path = route
            .split('"')
            .nth(1)
            .expect("a route's path is a string literal");
        let methods = &route[route.find(path).expect("path") + path.len()..];
        let mut found = false;
        for method in METHODS {
            let called = methods.match_indices(&format!("{method}(")).any(|(at, _)| {
                at == 0 || {
                    let before = methods.as_bytes()[at - 1];
                    !before.is_ascii_alphanumeric() && before != b'_' && before != b':'
                }
            });
            if called {
                operations.insert((path.to_owned(), method.to_owned()));
                found = true;
            }
        }
        assert!(found, "no method found for route {path}");
    }
    operations
}

#[test]
fn every_route_of_the_router_is_documented_and_every_documented_operation_is_routed() {
    let routed = routed();
    let documented = documented();
    assert!(routed.len() > 20, "read too few routes: {routed:?}");
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from openapi.json: {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "operations in openapi.json the router does not serve: {unrouted:?}"
    );
}

/// `template` with every `{param}` replaced by a name the test replica
/// knows.
fn concrete(template: &str) -> String {
    template
        .replace("{topic}", "orders")
        .replace("{child}", "delayed")
        .replace("{user}", "bob")
        .replace("{id}", "1")
        .replace("{partition}", "0")
}

fn is_router_refusal(status: StatusCode, headers: &axum::http::HeaderMap) -> bool {
    let plain = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_none_or(|value| value.starts_with("text/plain"));
    status == StatusCode::METHOD_NOT_ALLOWED || (status == StatusCode::NOT_FOUND && plain)
}

/// The router agrees with the document at run time too: a documented
/// operation reaches a handler (no router 404 or 405), and a method the
/// document does not list on a documented path is the router's 405.
#[tokio::test]
async fn the_router_answers_exactly_the_documented_methods() {
    let api = api_with(ApiConfig {
        security: false,
        ..ApiConfig::default()
    });
    let document = document();
    for (path, item) in document["paths"].as_object().expect("paths") {
        let uri = concrete(path);
        for method in METHODS {
            let request = Request::builder()
                .method(Method::from_bytes(method.to_uppercase().as_bytes()).expect("method"))
                .uri(&uri)
                .header("x-narad-client", "openapi-test")
                .body(Body::empty())
                .expect("request");
            let answer = send(&api, request).await;
            if item.get(method).is_some() {
                assert!(
                    !is_router_refusal(answer.status, &answer.headers),
                    "{method} {path}: documented but the router answered {}",
                    answer.status
                );
            } else {
                assert_eq!(
                    answer.status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path}: not documented but routed"
                );
            }
        }
    }
}

/// Every `$ref` in the document points at something in it.
#[test]
fn the_document_is_openapi_3_1_and_every_reference_resolves() {
    let document = document();
    assert!(
        document["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1.")),
        "not OpenAPI 3.1"
    );
    let mut stack = vec![&document];
    let mut refs = 0;
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(fields) => {
                if let Some(Value::String(target)) = fields.get("$ref") {
                    let pointer = target.strip_prefix('#').expect("a local $ref");
                    assert!(
                        document.pointer(pointer).is_some(),
                        "$ref {target} does not resolve"
                    );
                    refs += 1;
                }
                stack.extend(fields.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    assert!(refs > 0);
    // Every operation documents its responses and has a unique id.
    let mut ids = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            assert!(
                operation["responses"]
                    .as_object()
                    .is_some_and(|r| !r.is_empty()),
                "{method} {path}: no responses"
            );
            let id = operation["operationId"].as_str().expect("operationId");
            assert!(ids.insert(id.to_owned()), "operationId {id} twice");
        }
    }
}

fn get_document(authorization: Option<&str>) -> Request<Body> {
    let mut request = Request::get("/v1/openapi.json");
    if let Some(authorization) = authorization {
        request = request.header(header::AUTHORIZATION, authorization);
    }
    request.body(Body::empty()).expect("request")
}

#[tokio::test]
async fn openapi_json_is_served_to_any_authenticated_user() {
    let api = api_with(ApiConfig::default());
    let refused = send(&api, get_document(None)).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    // bob holds no grant at all: reading the document needs none.
    let answer = send(&api, get_document(Some(&basic("bob", "bob-pw")))).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers[header::CONTENT_TYPE], "application/json");
    let served: Value = serde_json::from_str(&answer.body).expect("JSON");
    assert_eq!(served, document());
}

#[tokio::test]
async fn openapi_json_needs_no_credentials_with_security_off() {
    let api = api_with(ApiConfig {
        security: false,
        ..ApiConfig::default()
    });
    let answer = send(&api, get_document(None)).await;
    assert_eq!(answer.status, StatusCode::OK);
}
