//! The blocking HTTP client of the API: Basic auth, the `X-Narad-Client`
//! header the cross-site guard asks of state changes (spec §1.1), and the
//! translation of answers into [`Failure`]s that say what to do.

use std::thread::sleep;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

use super::Failure;
use super::connection::Target;

/// Longest one request may take: above the server's 10 s consume wait cap,
/// so a long-poll is never cut short by the client.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest answer body read (a batch consume is ≤ 8 MiB).
const ANSWER_BYTES_MAX: u64 = 64 << 20;
/// Attempts of a request retried on transient failures, and the first and
/// largest wait between them.
const RETRY_ATTEMPTS_MAX: u32 = 6;
const RETRY_WAIT_FIRST: Duration = Duration::from_millis(100);
const RETRY_WAIT_MAX: Duration = Duration::from_secs(2);
/// The value of `X-Narad-Client` this CLI sends.
const CLIENT_NAME: &str = concat!("narad-cli/", env!("CARGO_PKG_VERSION"));

/// An answer: status, body, and the `Retry-After` seconds when given.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    pub(crate) retry_after_s: Option<u64>,
}

/// What a request is about, for the hint of a refusal: each kind of name
/// has its own listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subject {
    Topic,
    User,
    Node,
    Remote,
}

impl Answer {
    /// The body as JSON.
    ///
    /// # Errors
    /// The body is not JSON (counted as a refusal: the server is not one
    /// this client understands).
    pub(crate) fn json(&self) -> Result<Value, Failure> {
        serde_json::from_slice(&self.body).map_err(|e| {
            Failure::Refused(format!(
                "the server's answer is not the JSON expected ({e}); is --server a narad server?"
            ))
        })
    }

    /// The server's error text: `{"error":...}`, else the plain body.
    pub(crate) fn error_text(&self) -> String {
        serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|value| value.get("error")?.as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&self.body).trim().to_owned())
    }
}

/// A request body and its content type.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Body<'a> {
    Json(&'a Value),
    /// JSON already encoded.
    JsonText(&'a [u8]),
    Bytes(&'a [u8]),
}

/// The API of one server, as one user.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    agent: ureq::Agent,
    server: String,
    user: Option<String>,
    authorization: Option<String>,
}

impl Api {
    /// A client of `target`.
    ///
    /// # Errors
    /// A server URL whose scheme is not `http://` or `https://`.
    pub(crate) fn new(target: Target) -> Result<Self, Failure> {
        if !(target.server.starts_with("http://") || target.server.starts_with("https://")) {
            return Err(Failure::Usage(format!(
                "--server {:?}: narad speaks http:// and https:// only; give a URL like \
                 http://127.0.0.1:7942, or HOST:PORT for http",
                target.server
            )));
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .user_agent(CLIENT_NAME)
            .build()
            .new_agent();
        let authorization = target.user.as_ref().map(|user| {
            let password = target.password.as_deref().unwrap_or("");
            format!("Basic {}", BASE64.encode(format!("{user}:{password}")))
        });
        Ok(Self {
            agent,
            server: target.server,
            user: target.user,
            authorization,
        })
    }

    /// Sends one request; `path` holds the query too.
    ///
    /// # Errors
    /// [`Failure::Unreachable`] when no answer came.
    pub(crate) fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Body<'_>>,
    ) -> Result<Answer, Failure> {
        let url = format!("{}{path}", self.server);
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("X-Narad-Client", CLIENT_NAME);
        if let Some(authorization) = &self.authorization {
            request = request.header("Authorization", authorization);
        }
        let usage = |e: ureq::http::Error| Failure::Usage(format!("bad request to {url}: {e}"));
        let sent = match body {
            None => self.agent.run(request.body(()).map_err(usage)?),
            Some(Body::Json(value)) => self.agent.run(
                request
                    .header("Content-Type", "application/json")
                    .body(value.to_string())
                    .map_err(usage)?,
            ),
            Some(Body::JsonText(text)) => self.agent.run(
                request
                    .header("Content-Type", "application/json")
                    .body(text)
                    .map_err(usage)?,
            ),
            Some(Body::Bytes(bytes)) => self.agent.run(
                request
                    .header("Content-Type", "application/octet-stream")
                    .body(bytes)
                    .map_err(usage)?,
            ),
        };
        let response = sent.map_err(|e| self.transport_failure(&e))?;
        let status = response.status().as_u16();
        let retry_after_s = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok()?.trim().parse().ok());
        let body = response
            .into_body()
            .with_config()
            .limit(ANSWER_BYTES_MAX)
            .read_to_vec()
            .map_err(|e| self.transport_failure(&e))?;
        Ok(Answer {
            status,
            body,
            retry_after_s,
        })
    }

    /// [`Self::send`] retried with backoff while the failure is transient
    /// (no answer, `421`, `429`, `5xx`; spec §2 "Retriable codes"). The
    /// answer comes with the number of attempts, so a caller can tell a
    /// retry apart (an ack that landed answers `410` the next time).
    ///
    /// # Errors
    /// The last attempt's failure when every attempt failed transiently.
    pub(crate) fn send_retrying(
        &self,
        method: &str,
        path: &str,
        body: Option<Body<'_>>,
    ) -> Result<(Answer, u32), Failure> {
        let mut wait = RETRY_WAIT_FIRST;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = self.send(method, path, body);
            let transient = match &outcome {
                Ok(answer) => is_transient(answer.status),
                Err(Failure::Unreachable(_)) => true,
                Err(_) => false,
            };
            if !transient || attempt >= RETRY_ATTEMPTS_MAX {
                return outcome.map(|answer| (answer, attempt));
            }
            sleep(wait);
            wait = (wait * 2).min(RETRY_WAIT_MAX);
        }
    }

    /// `GET path`, expecting `200` and JSON.
    ///
    /// # Errors
    /// No answer, or any other status (as [`Self::refusal`] words it).
    pub(crate) fn get_json(&self, path: &str, what: &str) -> Result<Value, Failure> {
        let answer = self.send("GET", path, None)?;
        self.expect(answer, &[200], what)?.json()
    }

    /// `answer` when its status is one of `ok`, else the refusal (a
    /// request about a topic).
    ///
    /// # Errors
    /// Any status outside `ok`.
    pub(crate) fn expect(&self, answer: Answer, ok: &[u16], what: &str) -> Result<Answer, Failure> {
        self.expect_about(answer, ok, what, Subject::Topic)
    }

    /// [`Self::expect`] for a request about `subject`.
    ///
    /// # Errors
    /// Any status outside `ok`.
    pub(crate) fn expect_about(
        &self,
        answer: Answer,
        ok: &[u16],
        what: &str,
        subject: Subject,
    ) -> Result<Answer, Failure> {
        if ok.contains(&answer.status) {
            Ok(answer)
        } else {
            Err(self.refusal_about(&answer, what, subject))
        }
    }

    /// The failure for a refused `what` about a topic.
    pub(crate) fn refusal(&self, answer: &Answer, what: &str) -> Failure {
        self.refusal_about(answer, what, Subject::Topic)
    }

    /// The failure for a refused `what` about `subject`: the status, the
    /// server's words and what to do about it.
    pub(crate) fn refusal_about(&self, answer: &Answer, what: &str, subject: Subject) -> Failure {
        let text = answer.error_text();
        let hint = hint(answer, &text, subject, self.user.as_deref());
        let text = if text.is_empty() {
            String::new()
        } else {
            format!(": {text}")
        };
        Failure::Refused(format!(
            "{what}: server answered {}{text}{hint}",
            answer.status
        ))
    }

    fn transport_failure(&self, error: &ureq::Error) -> Failure {
        match error {
            ureq::Error::BadUri(_) | ureq::Error::Http(_) => Failure::Usage(format!(
                "--server {}: {error}; give a URL like http://127.0.0.1:7942",
                self.server
            )),
            _ => Failure::Unreachable(format!(
                "cannot reach the server at {}: {error}; is it running? Check --server, \
                 NARAD_ADDR or the context (`narad ctx ls`)",
                self.server
            )),
        }
    }
}

/// What to do about a refusal with the server's words `text`, as `; ...`
/// (or nothing), for a request about `subject` sent as `user`.
fn hint(answer: &Answer, text: &str, subject: Subject, user: Option<&str>) -> String {
    let listing = match subject {
        Subject::Topic => "`narad topic ls` lists topics",
        Subject::User => "`narad user ls` lists users",
        Subject::Node => "`narad cluster members` lists the nodes",
        Subject::Remote => "`narad remote ls` lists remotes",
    };
    match (answer.status, user) {
        (401, Some(user)) => format!(
            "; check the user ({user}) and password: -u/-p, NARAD_USER/NARAD_PASS or the context"
        ),
        (401, None) => "; no credentials were given: pass -u and -p, set NARAD_USER and \
                        NARAD_PASS, or select a context (`narad ctx`)"
            .to_owned(),
        (403, _) if !lacks_a_grant(text) => String::new(),
        (403, Some(user)) => {
            format!("; user {user} lacks the grant: an admin can add it with `narad user grant`")
        }
        (403, None) => "; an admin can add the grant with `narad user grant`".to_owned(),
        (404, _) if subject == Subject::Node => format!("; check the node id ({listing})"),
        (404, _) => format!("; check the name ({listing})"),
        (409, _) if subject == Subject::User => format!("; that user exists ({listing})"),
        (409, _) if subject == Subject::Remote => {
            "; read the current state (`narad remote info`) and decide".to_owned()
        }
        (412, _) if subject == Subject::Remote => {
            "; a remote's password needs TLS in front of the node and \
             remotes.api_hop_encrypted=true there"
                .to_owned()
        }
        (409, _) if subject == Subject::Node => {
            "; read the current state (`narad cluster members`) and decide".to_owned()
        }
        (409, _) => "; read the current state (`narad topic info`) and decide".to_owned(),
        (429, user) if text.contains("failed authentication") => {
            let wait = match answer.retry_after_s {
                Some(seconds) => format!("retry after {seconds}s"),
                None => "wait before trying again (a failed login is forgiven every few \
                         seconds)"
                    .to_owned(),
            };
            format!(
                "; too many failed logins as {}: {wait}, and check the password",
                user.unwrap_or("this user")
            )
        }
        (429, _) => match answer.retry_after_s {
            Some(seconds) => format!("; the server is busy: retry after {seconds}s"),
            None => "; the server is busy: retry in a moment".to_owned(),
        },
        (503, _) => "; the server is busy or changing: retry in a moment".to_owned(),
        (500..=599, _) => "; the server failed: retry, or read its log".to_owned(),
        _ => String::new(),
    }
}

/// Whether a `403` says the user lacks a grant an admin could give, as
/// opposed to a rule no grant lifts ("cannot delete the root admin").
fn lacks_a_grant(text: &str) -> bool {
    (text.starts_with("no ") && text.contains(" grant"))
        || text == "admin required"
        || text.contains("owner or an admin")
}

/// Whether a status is worth retrying unchanged after a wait.
pub(crate) fn is_transient(status: u16) -> bool {
    matches!(status, 421 | 429 | 500 | 502 | 503 | 504)
}

/// `text` escaped for a URL path segment or query value.
pub(crate) fn encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    /// A one-thread HTTP server on loopback answering each request with
    /// the next status of `statuses` (a connection each), then stopping.
    /// Returns its URL.
    fn scripted_server(statuses: &[u16]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let statuses = statuses.to_vec();
        std::thread::spawn(move || {
            for status in statuses {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let answer = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        url
    }

    fn api(server: String) -> Api {
        Api::new(Target {
            server,
            user: None,
            password: None,
        })
        .expect("a client")
    }

    #[test]
    fn transient_failures_are_retried_until_an_answer_settles_it() {
        let api = api(scripted_server(&[503, 502, 204]));
        let (answer, attempts) = api
            .send_retrying("POST", "/v1/topics/t/ack?receipt_handle=0:0:1", None)
            .expect("answered");
        assert_eq!((answer.status, attempts), (204, 3));
    }

    #[test]
    fn a_refusal_is_not_retried() {
        let api = api(scripted_server(&[410, 204]));
        let (answer, attempts) = api
            .send_retrying("POST", "/v1/topics/t/ack?receipt_handle=0:0:1", None)
            .expect("answered");
        assert_eq!((answer.status, attempts), (410, 1));
    }

    #[test]
    fn no_server_is_unreachable() {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let api = api(format!("http://127.0.0.1:{port}"));
        let failure = api
            .send("GET", "/v1/topics", None)
            .expect_err("nothing listens");
        assert_eq!(failure.exit_code(), super::super::EXIT_UNREACHABLE);
    }

    #[test]
    fn encode_escapes_reserved_bytes() {
        assert_eq!(encode("a b/c:d"), "a%20b%2Fc%3Ad");
        assert_eq!(encode("orders-1.x_y~"), "orders-1.x_y~");
    }

    #[test]
    fn the_error_text_comes_from_the_error_field_or_the_plain_body() {
        let json = Answer {
            status: 404,
            body: br#"{"error":"topic not found"}"#.to_vec(),
            ..Answer::default()
        };
        assert_eq!(json.error_text(), "topic not found");
        let plain = Answer {
            status: 404,
            body: b"page not found\n".to_vec(),
            ..Answer::default()
        };
        assert_eq!(plain.error_text(), "page not found");
    }

    fn refusal(status: u16, text: &str, subject: Subject, user: Option<&str>) -> String {
        let answer = Answer {
            status,
            body: format!(r#"{{"error":"{text}"}}"#).into_bytes(),
            retry_after_s: None,
        };
        let api = Api::new(Target {
            server: "http://127.0.0.1:1".into(),
            user: user.map(str::to_owned),
            password: None,
        })
        .expect("a client");
        match api.refusal_about(&answer, "do it", subject) {
            Failure::Refused(text) => text,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn user_refusals_point_at_the_user_listing() {
        for status in [404, 409] {
            let text = refusal(status, "x", Subject::User, Some("admin"));
            assert!(text.contains("`narad user ls`"), "{text}");
            assert!(!text.contains("narad topic"), "{text}");
        }
    }

    #[test]
    fn a_missing_node_points_at_the_members() {
        let text = refusal(404, "member not found", Subject::Node, Some("admin"));
        assert!(
            text.contains("check the node id (`narad cluster members`"),
            "{text}"
        );
        assert!(!text.contains("topic"), "{text}");
    }

    #[test]
    fn only_a_missing_grant_suggests_a_grant() {
        let root = refusal(
            403,
            "cannot delete the root admin",
            Subject::User,
            Some("admin"),
        );
        assert!(!root.contains("grant"), "{root}");
        let lacking = refusal(
            403,
            "no produce grant on this topic",
            Subject::Topic,
            Some("bob"),
        );
        assert!(lacking.contains("user bob lacks the grant"), "{lacking}");
    }

    #[test]
    fn the_login_throttle_is_named_not_called_busy() {
        let text = refusal(
            429,
            "too many failed authentication attempts",
            Subject::Topic,
            Some("admin"),
        );
        assert!(text.contains("too many failed logins as admin"), "{text}");
        assert!(!text.contains("busy"), "{text}");
    }

    #[test]
    fn no_credentials_are_said_plainly() {
        let text = refusal(401, "authentication required", Subject::Topic, None);
        assert!(text.contains("no credentials were given"), "{text}");
        assert!(!text.contains("(none)"), "{text}");
    }

    #[test]
    fn only_retriable_statuses_are_transient() {
        for status in [421, 429, 500, 502, 503] {
            assert!(is_transient(status), "{status}");
        }
        for status in [200, 204, 400, 401, 403, 404, 409, 410] {
            assert!(!is_transient(status), "{status}");
        }
    }
}
