//! The access log: one `info` line a request on the `narad::access`
//! target with the route template, method, status, duration, identity and
//! bytes, only while `access_log` is on.

use std::cell::RefCell;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Once};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;

use super::tests::{api_with, send};
use super::{ACCESS_LOG_TARGET, ApiConfig};
use crate::testing::basic;

/// Logs of this thread (the test's current-thread runtime) as JSON lines.
///
/// One process-wide subscriber formats every event and hands the line to
/// the emitting thread's capture, if any. A thread-local subscriber is not
/// enough: tracing caches each callsite's interest for the whole process,
/// and a sibling test with no subscriber that reaches the access log's
/// callsite first would cache it as "never".
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static THIS_THREAD: RefCell<Option<Captured>> = const { RefCell::new(None) };
}

/// Stops this thread's capture when dropped.
struct Capturing;

impl Drop for Capturing {
    fn drop(&mut self) {
        THIS_THREAD.with(|capture| capture.borrow_mut().take());
    }
}

/// Writes a formatted line to the emitting thread's capture, or nowhere.
struct ToThisThread;

impl Write for ToThisThread {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        THIS_THREAD.with(|capture| {
            if let Some(captured) = capture.borrow().as_ref() {
                captured.0.lock().expect("lock").extend_from_slice(bytes);
            }
        });
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The access log lines written so far, parsed.
    fn access_lines(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().expect("lock").clone()).expect("UTF-8");
        text.lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("one JSON object a line"))
            .filter(|line| line["target"] == ACCESS_LOG_TARGET)
            .collect()
    }
}

fn capture() -> (Captured, Capturing) {
    static GLOBAL: Once = Once::new();
    GLOBAL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_max_level(tracing::Level::INFO)
            .with_writer(|| ToThisThread)
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
    });
    let captured = Captured::default();
    THIS_THREAD.with(|capture| *capture.borrow_mut() = Some(captured.clone()));
    (captured, Capturing)
}

fn config(security: bool, access_log: bool) -> ApiConfig {
    ApiConfig {
        security,
        access_log,
        ..ApiConfig::default()
    }
}

#[tokio::test]
async fn a_request_is_one_line_with_route_status_identity_and_bytes() {
    let (captured, _guard) = capture();
    let api = api_with(config(true, true));
    let request = Request::post("/v1/topics/orders/produce?key=k")
        .header(header::AUTHORIZATION, basic("alice", "alice-pw"))
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, "5")
        .body(Body::from("hello"))
        .expect("request");
    assert_eq!(send(&api, request).await.status, StatusCode::ACCEPTED);
    let lines = captured.access_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["route"], "/v1/topics/{topic}/produce");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["status"], 202);
    assert_eq!(line["identity"], "alice");
    assert_eq!(line["bytes_in"], 5);
    assert_eq!(line["bytes_out"], 0);
    assert!(line["duration_ms"].as_f64().is_some_and(|ms| ms >= 0.0));
}

#[tokio::test]
async fn without_a_user_the_identity_is_the_client_address() {
    let (captured, _guard) = capture();
    let api = api_with(config(false, true));
    let mut request = Request::get("/v1/topics/orders/schema")
        .body(Body::empty())
        .expect("request");
    let client: SocketAddr = "192.0.2.7:50000".parse().expect("address");
    request.extensions_mut().insert(ConnectInfo(client));
    let answer = send(&api, request).await;
    assert_eq!(answer.status, StatusCode::OK);
    // Secured, a refused request has no user either: the address (or "-").
    let unknown = Request::get("/nothing")
        .body(Body::empty())
        .expect("request");
    assert_eq!(send(&api, unknown).await.status, StatusCode::NOT_FOUND);
    let lines = captured.access_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["route"], "/v1/topics/{topic}/schema");
    assert_eq!(lines[0]["identity"], "192.0.2.7");
    assert_eq!(lines[0]["bytes_out"], answer.body.len());
    assert_eq!(lines[1]["route"], "unmatched");
    assert_eq!(lines[1]["status"], 404);
    assert_eq!(lines[1]["identity"], "-");
}

#[tokio::test]
async fn no_line_while_the_access_log_is_off() {
    let (captured, _guard) = capture();
    let api = api_with(config(false, false));
    let request = Request::get("/healthz")
        .body(Body::empty())
        .expect("request");
    assert_eq!(send(&api, request).await.status, StatusCode::OK);
    assert!(captured.access_lines().is_empty());
}
