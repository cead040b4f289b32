//! The rules a remote's definition must meet (spec §1.10): its name, URL,
//! username, password, pinned CA certificates and `limits`.
//!
//! Pure: no I/O, no clock, no DNS. The URL rules here are what can be
//! decided from the text and the node's settings (`remotes.allowed_hosts`,
//! `remotes.allowed_ports`); where the host's addresses lead is the
//! outbound client's address guard's business, after DNS. Every refusal is
//! a [`RuleError`] naming the field, which the API answers with `400`.

use ring::digest::{SHA512, digest};
use rustls::pki_types::pem::{self, PemObject, SectionKind};

/// The longest remote URL, in bytes.
pub const URL_BYTES_MAX: usize = 2048;
/// The longest remote name, in bytes (`^[a-z][a-z0-9-]{0,62}$`).
pub const NAME_BYTES_MAX: usize = 63;
/// The shortest remote password, in bytes.
pub const PASSWORD_BYTES_MIN: usize = 24;
/// The longest remote password, in bytes (bcrypt's limit on the target).
pub const PASSWORD_BYTES_MAX: usize = 72;
/// The longest remote username, in bytes.
pub const USERNAME_BYTES_MAX: usize = 255;
/// The most certificates `ca_pem` may hold.
pub const CA_CERTIFICATES_MAX: usize = 16;
/// The largest `ca_pem`, in bytes.
pub const CA_PEM_BYTES_MAX: usize = 64 * 1024;
/// The port of an `https` URL that names none.
pub const HTTPS_PORT: u16 = 443;
/// `remotes.allowed_ports` when not set.
pub const ALLOWED_PORTS_DEFAULT: [u16; 1] = [HTTPS_PORT];

const _: () = assert!(PASSWORD_BYTES_MAX <= crate::seal::PASSWORD_BYTES_MAX);

/// A definition broke a rule: which field, and why (the text of a `400`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct RuleError {
    /// The field at fault (`url`, `limits.max_in_flight`, …).
    pub field: &'static str,
    /// Why, in words for the operator.
    pub reason: String,
    /// The node's destination settings refused the URL (not its form).
    pub refusal: Option<DestinationRefusal>,
}

/// Which of the node's destination settings refused a well-formed URL:
/// the `reason` of `narad_remote_destination_refused_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestinationRefusal {
    /// Its port is not in `remotes.allowed_ports`.
    Port,
    /// Its host is not in `remotes.allowed_hosts`.
    Allowlist,
}

impl DestinationRefusal {
    /// The metric's `reason`: `port` or `allowlist`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Port => "port",
            Self::Allowlist => "allowlist",
        }
    }
}

fn refuse<T>(field: &'static str, reason: impl Into<String>) -> Result<T, RuleError> {
    Err(RuleError {
        field,
        reason: reason.into(),
        refusal: None,
    })
}

/// A [`RuleError`] on `url` that the node's `refusal` setting made.
fn refuse_destination<T>(refusal: DestinationRefusal, reason: String) -> Result<T, RuleError> {
    Err(RuleError {
        field: "url",
        reason,
        refusal: Some(refusal),
    })
}

/// One entry of `remotes.allowed_hosts`: an exact host, or `*.suffix`
/// matching any host below the suffix (not the suffix itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this host.
    Exact(String),
    /// Any host ending in `.` and this suffix.
    Suffix(String),
}

impl HostPattern {
    /// Parses one setting entry, lower-cased.
    ///
    /// # Errors
    /// [`RuleError`] for an empty entry, a wildcard anywhere but a leading
    /// `*.`, or characters a host name cannot have.
    pub fn parse(entry: &str) -> Result<Self, RuleError> {
        const FIELD: &str = "remotes.allowed_hosts";
        let entry = entry.trim().to_ascii_lowercase();
        let (pattern, host) = match entry.strip_prefix("*.") {
            Some(suffix) => (Self::Suffix(suffix.to_owned()), suffix),
            None => (Self::Exact(entry.clone()), entry.as_str()),
        };
        if host.is_empty() || !is_host_name(host) && !is_ip_literal(host) {
            return refuse(FIELD, format!("{entry:?} is not a host name or `*.suffix`"));
        }
        Ok(pattern)
    }

    /// `host` (lower-case) matches.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            Self::Exact(exact) => host == exact,
            Self::Suffix(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|below| below.len() > 1 && below.ends_with('.')),
        }
    }
}

/// What the node's settings say about remote URLs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlPolicy {
    /// `remotes.allowed_hosts`; empty allows every host.
    pub allowed_hosts: Vec<HostPattern>,
    /// `remotes.allowed_ports`; never empty.
    pub allowed_ports: Vec<u16>,
}

impl Default for UrlPolicy {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            allowed_ports: ALLOWED_PORTS_DEFAULT.to_vec(),
        }
    }
}

impl UrlPolicy {
    /// The policy of the settings' lists.
    ///
    /// # Errors
    /// [`RuleError`] for a bad host entry, an empty port list or port 0.
    pub fn new(allowed_hosts: &[String], allowed_ports: &[u16]) -> Result<Self, RuleError> {
        let allowed_hosts = allowed_hosts
            .iter()
            .map(|entry| HostPattern::parse(entry))
            .collect::<Result<_, _>>()?;
        if allowed_ports.is_empty() {
            return refuse("remotes.allowed_ports", "must name at least one port");
        }
        if allowed_ports.contains(&0) {
            return refuse("remotes.allowed_ports", "ports are 1-65535");
        }
        Ok(Self {
            allowed_hosts,
            allowed_ports: allowed_ports.to_vec(),
        })
    }

    /// `remotes.allowed_hosts` is set.
    pub fn allowlist_configured(&self) -> bool {
        !self.allowed_hosts.is_empty()
    }
}

/// A remote URL that met the rules, in its normal form: `https://`, the
/// host lower-case, the port only when not 443, the path without a
/// trailing `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteUrl {
    /// The normal form, as stored.
    pub text: String,
    /// Host name or IP literal (IPv6 in brackets), lower-case.
    pub host: String,
    /// The port, 443 when the URL names none.
    pub port: u16,
    /// A path prefix the target's API lives under; empty for none.
    pub path: String,
}

/// Checks a remote URL against the rules and `policy`.
///
/// # Errors
/// [`RuleError`] on field `url`: over [`URL_BYTES_MAX`], not `https` (plain
/// `http` says so), userinfo, query or fragment, a host that is not a name
/// or IP literal, a port not in `remotes.allowed_ports`, a host not in
/// `remotes.allowed_hosts` when set.
pub fn parse_url(text: &str, policy: &UrlPolicy) -> Result<RemoteUrl, RuleError> {
    const FIELD: &str = "url";
    if text.len() > URL_BYTES_MAX {
        return refuse(FIELD, format!("longer than {URL_BYTES_MAX} bytes"));
    }
    if text.contains('#') {
        return refuse(FIELD, "must not have a fragment");
    }
    let Ok(uri) = text.parse::<http::Uri>() else {
        return refuse(FIELD, format!("{text:?} is not a URL"));
    };
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") => {
            return refuse(
                FIELD,
                "must use https: a remote's password never crosses plain http",
            );
        }
        _ => return refuse(FIELD, "must be an https:// URL"),
    }
    let Some(authority) = uri.authority() else {
        return refuse(FIELD, "must name a host");
    };
    if authority.as_str().contains('@') {
        return refuse(FIELD, "must not carry userinfo; give username and password");
    }
    if uri.query().is_some() {
        return refuse(FIELD, "must not have a query");
    }
    let host = authority.host().to_ascii_lowercase();
    if !is_host_name(&host) && !is_ip_literal(&host) {
        return refuse(FIELD, format!("{host:?} is not a host name or IP address"));
    }
    let port = match authority.port() {
        Some(port) => port.as_u16(),
        None if authority.as_str().ends_with(':') => {
            return refuse(FIELD, "has an empty port");
        }
        None => HTTPS_PORT,
    };
    if !policy.allowed_ports.contains(&port) {
        return refuse_destination(
            DestinationRefusal::Port,
            format!(
                "port {port} is not in remotes.allowed_ports {:?}",
                policy.allowed_ports
            ),
        );
    }
    if policy.allowlist_configured() && !policy.allowed_hosts.iter().any(|p| p.matches(&host)) {
        return refuse_destination(
            DestinationRefusal::Allowlist,
            format!("host {host} is not in remotes.allowed_hosts"),
        );
    }
    let path = uri.path().trim_end_matches('/').to_owned();
    let text = match port {
        HTTPS_PORT => format!("https://{host}{path}"),
        _ => format!("https://{host}:{port}{path}"),
    };
    Ok(RemoteUrl {
        text,
        host,
        port,
        path,
    })
}

/// A DNS name: dot-separated labels of letters, digits and inner hyphens,
/// each 1–63 bytes, 253 bytes at most, no trailing dot.
fn is_host_name(host: &str) -> bool {
    host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        })
}

/// An IPv4 address, or an IPv6 address in brackets.
fn is_ip_literal(host: &str) -> bool {
    match host
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
    {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => host.parse::<std::net::Ipv4Addr>().is_ok(),
    }
}

/// Checks a remote's name: `^[a-z][a-z0-9-]{0,62}$`.
///
/// # Errors
/// [`RuleError`] on field `name`.
pub fn check_name(name: &str) -> Result<(), RuleError> {
    let mut bytes = name.bytes();
    let starts_with_letter = bytes.next().is_some_and(|byte| byte.is_ascii_lowercase());
    let rest_allowed =
        bytes.all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-');
    if !starts_with_letter || !rest_allowed || name.len() > NAME_BYTES_MAX {
        return refuse(
            "name",
            format!("{name:?} must match ^[a-z][a-z0-9-]{{0,62}}$"),
        );
    }
    Ok(())
}

/// Checks the username the target knows the replicator by: 1–255 bytes,
/// printable, no `:` (HTTP Basic cannot carry one).
///
/// # Errors
/// [`RuleError`] on field `username`.
pub fn check_username(username: &str) -> Result<(), RuleError> {
    if username.is_empty() || username.len() > USERNAME_BYTES_MAX {
        return refuse("username", format!("must be 1-{USERNAME_BYTES_MAX} bytes"));
    }
    if username.contains(':') || username.chars().any(char::is_control) {
        return refuse("username", "must not contain ':' or control characters");
    }
    Ok(())
}

/// Checks a remote's password: 24–72 bytes.
///
/// # Errors
/// [`RuleError`] on field `password` (the text never repeats it).
pub fn check_password(password: &[u8]) -> Result<(), RuleError> {
    if !(PASSWORD_BYTES_MIN..=PASSWORD_BYTES_MAX).contains(&password.len()) {
        return refuse(
            "password",
            format!(
                "must be {PASSWORD_BYTES_MIN}-{PASSWORD_BYTES_MAX} bytes, got {}",
                password.len()
            ),
        );
    }
    Ok(())
}

/// Pinned CA certificates that met the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaPem {
    /// The certificates in DER, in the order given.
    pub certificates: Vec<Vec<u8>>,
    /// SHA-512 of the PEM text as given, in hex (`ca_pem_sha512`).
    pub sha512: String,
}

/// Checks `ca_pem`: at most 64 KiB of PEM holding 1–16 `CERTIFICATE`
/// sections and nothing else (a private key pasted by mistake is refused,
/// not ignored).
///
/// # Errors
/// [`RuleError`] on field `ca_pem`.
pub fn parse_ca_pem(text: &str) -> Result<CaPem, RuleError> {
    const FIELD: &str = "ca_pem";
    if text.len() > CA_PEM_BYTES_MAX {
        return refuse(FIELD, format!("larger than {CA_PEM_BYTES_MAX} bytes"));
    }
    let mut certificates = Vec::new();
    for section in <(SectionKind, Vec<u8>) as PemObject>::pem_slice_iter(text.as_bytes()) {
        match section {
            Ok((SectionKind::Certificate, der)) => certificates.push(der),
            Ok((kind, _)) => {
                return refuse(
                    FIELD,
                    format!("holds a {kind:?} section; only certificates belong here"),
                );
            }
            Err(pem::Error::NoItemsFound) => break,
            Err(error) => return refuse(FIELD, format!("is not valid PEM: {error}")),
        }
        if certificates.len() > CA_CERTIFICATES_MAX {
            return refuse(
                FIELD,
                format!("holds more than {CA_CERTIFICATES_MAX} certificates"),
            );
        }
    }
    if certificates.is_empty() {
        return refuse(FIELD, "holds no PEM certificate");
    }
    Ok(CaPem {
        certificates,
        sha512: sha512_hex(text.as_bytes()),
    })
}

fn sha512_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    digest(&SHA512, bytes)
        .as_ref()
        .iter()
        .fold(String::new(), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

/// The allowed range of each of a remote's `limits`, inclusive (their
/// defaults are the metastore's `RemoteLimits::default`). The spec gives
/// the ranges of `max_in_flight` and `request_timeout_ms`; the other three
/// are ours: wide enough for any sane use, narrow enough that a typo in
/// units (seconds for milliseconds) is refused.
pub mod limit_ranges {
    use std::ops::RangeInclusive;

    /// `max_in_flight`: 1–256.
    pub const MAX_IN_FLIGHT: RangeInclusive<u64> = 1..=256;
    /// `request_timeout_ms`: 5 s–2 min.
    pub const REQUEST_TIMEOUT_MS: RangeInclusive<u64> = 5_000..=120_000;
    /// `idle_conn_timeout_ms`: 1 s–10 min.
    pub const IDLE_CONN_TIMEOUT_MS: RangeInclusive<u64> = 1_000..=600_000;
    /// `conn_max_age_ms`: 10 s–1 h.
    pub const CONN_MAX_AGE_MS: RangeInclusive<u64> = 10_000..=3_600_000;
    /// `check_interval_ms`: 5 s–1 h.
    pub const CHECK_INTERVAL_MS: RangeInclusive<u64> = 5_000..=3_600_000;
}

/// Checks one limit against its range.
///
/// # Errors
/// [`RuleError`] on `field` when `value` is outside `range`.
pub fn check_limit(
    field: &'static str,
    value: u64,
    range: &std::ops::RangeInclusive<u64>,
) -> Result<(), RuleError> {
    if range.contains(&value) {
        return Ok(());
    }
    refuse(
        field,
        format!("{value} is outside {}-{}", range.start(), range.end()),
    )
}

/// Checks a compression name: `none` or `zstd`; answers whether it is
/// `zstd`.
///
/// # Errors
/// [`RuleError`] on `limits.compression` for any other name.
pub fn parse_compression(name: &str) -> Result<bool, RuleError> {
    match name {
        "none" => Ok(false),
        "zstd" => Ok(true),
        _ => refuse(
            "limits.compression",
            format!("{name:?} is not none or zstd"),
        ),
    }
}

#[cfg(test)]
#[path = "url_tests.rs"]
mod tests;
