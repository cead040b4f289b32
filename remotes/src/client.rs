//! The outbound HTTPS client of one remote (spec §4, "Outbound").
//!
//! - HTTPS only, TLS 1.2 or 1.3 by rustls with the ring provider;
//! - the remote's pinned CA (1 to 16 PEM certificates) is the only trust
//!   when given, else Mozilla's roots (`webpki-roots`);
//! - no proxy (environment proxies are ignored), no redirect followed: a
//!   `3xx` comes back as an answer and is classified `redirect_refused`;
//! - Basic auth with the remote's credential on every request;
//! - the request timeout of the remote's limits, measured on the node's
//!   [`Clock`]; idle connections close after the idle timeout, and no
//!   connection is used past the maximum age (the pool is replaced);
//! - the [`AddressGuard`] checks every address a host resolves to, and
//!   an IP-literal host, before anything connects.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use narad_clock::{Clock, millis};
use reqwest::header::{self, HeaderMap, HeaderValue};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::sync::Mutex;

use crate::guard::{AddressGuard, DestinationRefused};
use crate::state::{Answer, NoAnswer};

/// The most PEM certificates a pinned CA holds.
pub const CA_CERTS_MAX: usize = 16;
/// How much of an answer's body is read (wire contract §1.6).
pub const ANSWER_BODY_MAX: usize = 8 * 1024;
/// `X-Narad-Client` and `User-Agent` of the remote client.
pub const CLIENT_NAME: &str = concat!("narad-remote/", env!("CARGO_PKG_VERSION"));

/// The timing limits of a remote's client (the remote's `limits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    /// Each request's deadline, from sending to the end of the answer.
    pub request_timeout: Duration,
    /// An idle pooled connection closes after this.
    pub idle_conn_timeout: Duration,
    /// No connection is used once this old.
    pub conn_max_age: Duration,
    /// Idle connections kept (the remote's `max_in_flight`).
    pub max_in_flight: usize,
}

impl Default for ClientLimits {
    /// The spec's defaults: 30 s, 30 s, 5 min, 16.
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(30),
            idle_conn_timeout: Duration::from_secs(30),
            conn_max_age: Duration::from_secs(300),
            max_in_flight: 16,
        }
    }
}

/// Where and as whom a remote is reached.
#[derive(Clone)]
pub struct Target {
    /// The remote's base URL (`https://host[:port][/prefix]`).
    pub url: String,
    /// The replicator user on the remote.
    pub username: String,
    /// Its password, opened from the sealed credential.
    pub password: String,
    /// The pinned CA, PEM; `None` trusts Mozilla's roots.
    pub ca_pem: Option<String>,
    /// Timing limits.
    pub limits: ClientLimits,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("ca_pem", &self.ca_pem.as_ref().map(|pem| pem.len()))
            .field("limits", &self.limits)
            .finish()
    }
}

/// A remote whose client cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Not a URL, or not `https`, or with userinfo, query or fragment.
    #[error("invalid remote url: {0}")]
    Url(String),
    /// The pinned CA is not 1 to 16 PEM certificates a root store takes.
    #[error("invalid ca_pem: {0}")]
    Ca(String),
    /// The credential cannot go in a header.
    #[error("invalid credential: {0}")]
    Credential(String),
    /// The HTTP client refused its configuration.
    #[error("http client: {0}")]
    Build(String),
}

/// The request methods the client sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Get,
    Post,
}

/// A request body and whether it is zstd-compressed.
#[derive(Clone, Debug)]
struct Body {
    bytes: Vec<u8>,
    zstd: bool,
}

/// The HTTPS client of one remote on one node. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct RemoteClient {
    base: reqwest::Url,
    authorization: HeaderValue,
    tls: rustls::ClientConfig,
    guard: Arc<AddressGuard>,
    limits: ClientLimits,
    clock: Arc<dyn Clock>,
    /// The pool in use and when it was made (clock ms): replaced once
    /// older than the maximum connection age.
    pool: Mutex<(reqwest::Client, u64)>,
}

impl RemoteClient {
    /// A client for `target`, checking addresses with `guard`.
    ///
    /// # Errors
    /// [`ClientError`] for a URL that is not plain `https`, a bad pinned
    /// CA or a credential that cannot be sent.
    pub fn new(
        target: &Target,
        guard: AddressGuard,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ClientError> {
        let base = parse_base(&target.url)?;
        let credential = format!("{}:{}", target.username, target.password);
        let mut authorization =
            HeaderValue::from_str(&format!("Basic {}", BASE64.encode(credential)))
                .map_err(|error| ClientError::Credential(error.to_string()))?;
        authorization.set_sensitive(true);
        let tls = tls_config(target.ca_pem.as_deref())?;
        let guard = Arc::new(guard);
        let pool = build_pool(&tls, &guard, &target.limits)?;
        let now = clock.now_ms();
        Ok(Self {
            base,
            authorization,
            tls,
            guard,
            limits: target.limits,
            clock,
            pool: Mutex::new((pool, now)),
        })
    }

    /// The client's limits.
    pub fn limits(&self) -> ClientLimits {
        self.limits
    }

    /// `POST /v1/topics/{topic}/produce/batch` with `body` (a batch body,
    /// zstd-compressed when `zstd`).
    ///
    /// # Errors
    /// [`NoAnswer`] when no answer came back in time.
    pub async fn post_batch(
        &self,
        topic: &str,
        body: Vec<u8>,
        zstd: bool,
    ) -> Result<Answer, NoAnswer> {
        let url = self.url(&["v1", "topics", topic, "produce", "batch"]);
        self.send(Method::Post, url, Some(Body { bytes: body, zstd }))
            .await
    }

    /// `GET` of the path made of `segments` (each percent-encoded).
    ///
    /// # Errors
    /// [`NoAnswer`] when no answer came back in time.
    pub async fn get(&self, segments: &[&str]) -> Result<Answer, NoAnswer> {
        let url = self.url(segments);
        self.send(Method::Get, url, None).await
    }

    fn url(&self, segments: &[&str]) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    async fn send(
        &self,
        method: Method,
        url: reqwest::Url,
        body: Option<Body>,
    ) -> Result<Answer, NoAnswer> {
        // A host given as an address resolves to itself without the
        // resolver: the guard checks it here.
        if let Some(address) = literal_address(&url) {
            self.guard
                .check(address)
                .map_err(|refused| NoAnswer::Refused(refused.to_string()))?;
        }
        let pool = self.pool().await?;
        let mut request = match method {
            Method::Get => pool.get(url),
            Method::Post => pool.post(url),
        }
        .header(header::AUTHORIZATION, self.authorization.clone());
        if let Some(body) = body {
            request = request.header(header::CONTENT_TYPE, "application/json");
            if body.zstd {
                request = request.header(header::CONTENT_ENCODING, "zstd");
            }
            request = request.body(body.bytes);
        }
        let deadline = self
            .clock
            .now_ms()
            .saturating_add(millis(self.limits.request_timeout));
        let now_unix_ms = self.clock.unix_ms();
        tokio::select! {
            answer = exchange(request, now_unix_ms) => answer,
            () = self.clock.sleep_until(deadline) => Err(NoAnswer::Timeout),
        }
    }

    /// The pool, replaced first when it has reached the maximum age.
    async fn pool(&self) -> Result<reqwest::Client, NoAnswer> {
        let mut pool = self.pool.lock().await;
        let now = self.clock.now_ms();
        if now.saturating_sub(pool.1) >= millis(self.limits.conn_max_age) {
            let fresh = build_pool(&self.tls, &self.guard, &self.limits)
                .map_err(|error| NoAnswer::Other(error.to_string()))?;
            *pool = (fresh, now);
        }
        Ok(pool.0.clone())
    }
}

/// Sends `request` at `now_unix_ms` and reads the answer (at most
/// [`ANSWER_BODY_MAX`] of its body).
async fn exchange(request: reqwest::RequestBuilder, now_unix_ms: u64) -> Result<Answer, NoAnswer> {
    let mut response = request.send().await.map_err(|error| no_answer(&error))?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| retry_after(text, now_unix_ms));
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|text| text.trim_start().starts_with("application/json"));
    let mut body = Vec::new();
    while body.len() < ANSWER_BODY_MAX {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => break,
            // The status arrived; a body cut short still classifies.
            Err(_) => break,
        }
    }
    body.truncate(ANSWER_BODY_MAX);
    Ok(Answer {
        status,
        retry_after,
        json,
        message: answer_message(&body, json),
    })
}

/// How long a `Retry-After` value asks to wait, at `now_unix_ms`: delay
/// seconds, or an HTTP-date (RFC 9110 §10.2.3). `None` for a wait of 0, a
/// date already past, or a value that is neither.
fn retry_after(value: &str, now_unix_ms: u64) -> Option<Duration> {
    let value = value.trim();
    let wait = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => {
            let at = httpdate::parse_http_date(value).ok()?;
            let at_ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
            let at_ms = u64::try_from(at_ms).unwrap_or(u64::MAX);
            Duration::from_millis(at_ms.checked_sub(now_unix_ms)?)
        }
    };
    (!wait.is_zero()).then_some(wait)
}

/// The `error` text of a JSON error body, else the trimmed body.
fn answer_message(body: &[u8], json: bool) -> String {
    if json
        && let Ok(value) = serde_json::from_slice::<serde_json::Value>(body)
        && let Some(text) = value.get("error").and_then(|error| error.as_str())
    {
        return text.to_owned();
    }
    String::from_utf8_lossy(body).trim().to_owned()
}

/// What kind of failure a `reqwest` error is: the guard's refusal and a
/// TLS failure are found in the error's chain of causes.
fn no_answer(error: &reqwest::Error) -> NoAnswer {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = cause {
        if let Some(refused) = current.downcast_ref::<DestinationRefused>() {
            return NoAnswer::Refused(refused.to_string());
        }
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return NoAnswer::Tls(tls.to_string());
        }
        if let Some(tls) = current
            .downcast_ref::<std::io::Error>()
            .and_then(tls_error_in)
        {
            return NoAnswer::Tls(tls.to_string());
        }
        cause = current.source();
    }
    let detail = error_chain(error);
    if error.is_timeout() {
        NoAnswer::Timeout
    } else if error.is_connect() || error.is_request() || error.is_body() {
        NoAnswer::Connection(detail)
    } else {
        NoAnswer::Other(detail)
    }
}

/// The rustls error an I/O error carries, through any I/O errors wrapped
/// around it (the TLS connector wraps tokio-rustls's I/O error in one more).
fn tls_error_in(io: &std::io::Error) -> Option<&rustls::Error> {
    let inner = io.get_ref()?;
    if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    inner
        .downcast_ref::<std::io::Error>()
        .and_then(tls_error_in)
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(current) = cause {
        text.push_str(": ");
        text.push_str(&current.to_string());
        cause = current.source();
    }
    text
}

/// The URL's host when it is an IP address.
fn literal_address(url: &reqwest::Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    let bare = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

/// Parses a remote's base URL: `https`, a host, no userinfo, query or
/// fragment.
fn parse_base(text: &str) -> Result<reqwest::Url, ClientError> {
    let url = reqwest::Url::parse(text).map_err(|error| ClientError::Url(error.to_string()))?;
    if url.scheme() != "https" {
        return Err(ClientError::Url("only https is allowed".to_owned()));
    }
    if url.host().is_none() {
        return Err(ClientError::Url("no host".to_owned()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ClientError::Url("userinfo is not allowed".to_owned()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(ClientError::Url(
            "query and fragment are not allowed".to_owned(),
        ));
    }
    Ok(url)
}

/// rustls with ring, TLS 1.2 and 1.3, HTTP/1.1, trusting the pinned CA
/// alone when there is one, else Mozilla's roots.
fn tls_config(ca_pem: Option<&str>) -> Result<rustls::ClientConfig, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| ClientError::Ca(error.to_string()))?;
            if !(1..=CA_CERTS_MAX).contains(&certs.len()) {
                return Err(ClientError::Ca(format!(
                    "want 1 to {CA_CERTS_MAX} certificates, got {}",
                    certs.len()
                )));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|error| ClientError::Ca(error.to_string()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| ClientError::Build(error.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A connection pool: preconfigured TLS, the guarded resolver, no proxy,
/// no redirects, HTTP/1.1, the idle timeout.
fn build_pool(
    tls: &rustls::ClientConfig,
    guard: &Arc<AddressGuard>,
    limits: &ClientLimits,
) -> Result<reqwest::Client, ClientError> {
    let mut headers = HeaderMap::new();
    headers.insert("x-narad-client", HeaderValue::from_static(CLIENT_NAME));
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls.clone())
        .dns_resolver(Arc::new(GuardedResolver {
            guard: Arc::clone(guard),
        }))
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .referer(false)
        .https_only(true)
        .http1_only()
        .user_agent(CLIENT_NAME)
        .default_headers(headers)
        .pool_idle_timeout(limits.idle_conn_timeout)
        .pool_max_idle_per_host(limits.max_in_flight)
        .tcp_nodelay(true)
        .build()
        .map_err(|error| ClientError::Build(error_chain(&error)))
}

/// Resolves with the system resolver, then lets the guard see every
/// address before the connector may use any.
#[derive(Debug)]
struct GuardedResolver {
    guard: Arc<AddressGuard>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = Arc::clone(&self.guard);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            guard.check_all(addresses.iter().map(SocketAddr::ip))?;
            let addresses: reqwest::dns::Addrs = Box::new(addresses.into_iter());
            Ok(addresses)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_delay_seconds_or_an_http_date() {
        // Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110's example).
        let date_ms = 784_111_777_000;
        assert_eq!(retry_after(" 7 ", 0), Some(Duration::from_secs(7)));
        assert_eq!(retry_after("0", 0), None);
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:37 GMT", date_ms - 12_500),
            Some(Duration::from_millis(12_500))
        );
        // A date already past, or neither form: no wait asked.
        assert_eq!(retry_after("Sun, 06 Nov 1994 08:49:37 GMT", date_ms), None);
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:37 GMT", date_ms + 1),
            None
        );
        assert_eq!(retry_after("soon", 0), None);
        assert_eq!(retry_after("-5", 0), None);
    }

    #[test]
    fn only_a_plain_https_url_is_a_base() {
        assert!(parse_base("https://narad.example:8443").is_ok());
        assert!(parse_base("https://narad.example/prefix").is_ok());
        for bad in [
            "http://narad.example",
            "https://user:pw@narad.example",
            "https://narad.example/?a=1",
            "https://narad.example/#f",
            "narad.example",
        ] {
            assert!(matches!(parse_base(bad), Err(ClientError::Url(_))), "{bad}");
        }
    }

    #[test]
    fn paths_are_joined_and_segments_escaped() {
        let clock: Arc<dyn Clock> = Arc::new(narad_clock::ManualClock::new(0));
        let target = Target {
            url: "https://narad.example/prefix/".to_owned(),
            username: "u".to_owned(),
            password: "p".to_owned(),
            ca_pem: None,
            limits: ClientLimits::default(),
        };
        let client = RemoteClient::new(&target, AddressGuard::default(), clock).unwrap();
        assert_eq!(
            client.url(&["v1", "topics", "a/b c"]).as_str(),
            "https://narad.example/prefix/v1/topics/a%2Fb%20c"
        );
    }

    #[test]
    fn a_pinned_ca_must_hold_one_to_sixteen_certificates() {
        assert!(matches!(tls_config(Some("")), Err(ClientError::Ca(_))));
        assert!(matches!(
            tls_config(Some(
                "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
            )),
            Err(ClientError::Ca(_))
        ));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["ca".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap()
            .pem();
        assert!(tls_config(Some(&cert)).is_ok());
        assert!(tls_config(Some(&cert.repeat(16))).is_ok());
        assert!(matches!(
            tls_config(Some(&cert.repeat(17))),
            Err(ClientError::Ca(_))
        ));
    }

    #[test]
    fn a_json_error_body_gives_its_error_text() {
        assert_eq!(
            answer_message(br#"{"error":"topic not found"}"#, true),
            "topic not found"
        );
        assert_eq!(
            answer_message(b"404 page not found\n", false),
            "404 page not found"
        );
        assert_eq!(
            answer_message(b"{\"accepted\":3}", true),
            "{\"accepted\":3}"
        );
    }
}
