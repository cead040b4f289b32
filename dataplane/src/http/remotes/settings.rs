//! A data node's `remotes.*` settings (spec §8, v3.2) as the API and the
//! shipping side read them. Parsed and validated by `narad data`'s
//! configuration; the defaults here are the spec's.

use ipnet::IpNet;
use narad_remotes::guard::AddressGuard;
use narad_remotes::url::{self as rules, HostPattern, RemoteUrl, RuleError, UrlPolicy};
use serde_json::{Value, json};

use crate::metrics::{self, NodeMetrics};

/// `remotes.max_held_bytes` when not set: 256 MiB.
pub const MAX_HELD_BYTES_DEFAULT: u64 = 256 * 1024 * 1024;

/// The `remotes.*` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemotesConfig {
    /// `remotes.allowed_hosts` and `remotes.allowed_ports`.
    pub url_policy: UrlPolicy,
    /// `remotes.allow_addresses`: CIDRs the outbound address guard lets
    /// through even when they are in a refused range.
    pub allow_addresses: Vec<IpNet>,
    /// `remotes.allow_loopback` (not a key of the original): lets the
    /// address guard through to loopback addresses. For tests and labs
    /// that run two clusters on one host; off by default.
    pub allow_loopback: bool,
    /// `remotes.max_held_bytes`: records waiting for a remote kept in
    /// memory, per node, before they are re-read from the log instead.
    pub max_held_bytes: u64,
    /// `remotes.api_hop_encrypted`: the operator attests that requests
    /// reach this node's API encrypted (TLS in front of it), so a remote's
    /// password may be sent to it.
    pub api_hop_encrypted: bool,
}

impl Default for RemotesConfig {
    fn default() -> Self {
        Self {
            url_policy: UrlPolicy::default(),
            allow_addresses: Vec::new(),
            allow_loopback: false,
            max_held_bytes: MAX_HELD_BYTES_DEFAULT,
            api_hop_encrypted: false,
        }
    }
}

impl RemotesConfig {
    /// Any setting differs from its default (they all need security on).
    pub fn any_set(&self) -> bool {
        *self != Self::default()
    }

    /// The outbound address guard of these settings.
    pub fn guard(&self) -> AddressGuard {
        AddressGuard {
            allow: self.allow_addresses.clone(),
            allow_loopback: self.allow_loopback,
        }
    }

    /// The `allowlist` block of `GET /v1/remotes`.
    pub fn allowlist_json(&self) -> Value {
        let hosts: Vec<String> = self
            .url_policy
            .allowed_hosts
            .iter()
            .map(|pattern| match pattern {
                HostPattern::Exact(host) => host.clone(),
                HostPattern::Suffix(suffix) => format!("*.{suffix}"),
            })
            .collect();
        let addresses: Vec<String> = self.allow_addresses.iter().map(IpNet::to_string).collect();
        json!({
            "configured": self.url_policy.allowlist_configured(),
            "hosts": hosts,
            "ports": self.url_policy.allowed_ports,
            "allow_addresses": addresses,
            "allow_loopback": self.allow_loopback,
        })
    }
}

/// `url` of the remote named `remote` under the node's `policy`
/// (`remotes.allowed_ports`, `remotes.allowed_hosts`) and the URL rules. A
/// refusal by the node's ports or allowlist, at add, change, test, attach
/// check or before shipping, counts in
/// `narad_remote_destination_refused_total{remote,reason}` (`port` or
/// `allowlist`); a malformed URL counts nowhere.
///
/// # Errors
/// [`RuleError`] on field `url`.
pub fn checked_url(
    policy: &UrlPolicy,
    node_metrics: &NodeMetrics,
    remote: &str,
    url: &str,
) -> Result<RemoteUrl, RuleError> {
    let checked = rules::parse_url(url, policy);
    if let Err(RuleError {
        refusal: Some(refusal),
        ..
    }) = &checked
    {
        node_metrics.count(
            metrics::REMOTE_DESTINATION_REFUSED_TOTAL,
            &[
                ("remote", remote.to_owned()),
                ("reason", refusal.as_str().to_owned()),
            ],
            1,
        );
    }
    checked
}
