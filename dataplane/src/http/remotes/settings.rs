//! A data node's `remotes.*` settings (spec §8, v3.2) as the API and the
//! shipping side read them. Parsed and validated by `narad data`'s
//! configuration; the defaults here are the spec's.

use ipnet::IpNet;
use narad_remotes::guard::AddressGuard;
use narad_remotes::url::{HostPattern, UrlPolicy};
use serde_json::{Value, json};

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
