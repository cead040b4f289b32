//! The data node's `remotes.*` settings and the secrets remote credentials
//! are sealed under (spec §8, v3.2). Every remotes setting needs security
//! on; `NARAD_CLUSTER_SECRET_PREVIOUS` only opens credentials sealed under
//! the secret before, so it is read only with security on and must differ
//! from the current secret.

use ipnet::IpNet;
use narad_controlplane::node::config::layered::{Merged, parse_bool, parse_number};
use narad_dataplane::credentials::RemoteSecrets;
use narad_dataplane::http::remotes::RemotesConfig;
use narad_protocol::auth::CLUSTER_SECRET_BYTES_MIN;
use narad_remotes::url::UrlPolicy;
use zeroize::Zeroizing;

use super::config::{ConfigError, ENV_CLUSTER_SECRET, keys};

/// The old cluster secret, environment only like the current one.
pub(crate) const ENV_CLUSTER_SECRET_PREVIOUS: &str = "NARAD_CLUSTER_SECRET_PREVIOUS";

/// `remotes.*` from `merged`, over the spec's defaults.
///
/// # Errors
/// A setting that does not parse, and any of them set with security off.
pub(crate) fn resolve(merged: &Merged, security: bool) -> Result<RemotesConfig, ConfigError> {
    let defaults = RemotesConfig::default();
    let hosts = merged.parse(keys::REMOTES_ALLOWED_HOSTS, Some(Vec::new()), list)?;
    let ports = merged.parse(
        keys::REMOTES_ALLOWED_PORTS,
        Some(defaults.url_policy.allowed_ports.clone()),
        parse_ports,
    )?;
    let url_policy = UrlPolicy::new(&hosts, &ports).map_err(|error| {
        let setting = if error.field == "remotes.allowed_ports" {
            keys::REMOTES_ALLOWED_PORTS
        } else {
            keys::REMOTES_ALLOWED_HOSTS
        };
        merged.error(setting, error.reason)
    })?;
    let allow_addresses =
        merged.parse(keys::REMOTES_ALLOW_ADDRESSES, Some(Vec::new()), parse_cidrs)?;
    let allow_loopback = merged.parse(keys::REMOTES_ALLOW_LOOPBACK, Some(false), parse_bool)?;
    let max_held_bytes = merged.parse(
        keys::REMOTES_MAX_HELD_BYTES,
        Some(defaults.max_held_bytes),
        |v| parse_number(v, "a number of bytes"),
    )?;
    let api_hop_encrypted =
        merged.parse(keys::REMOTES_API_HOP_ENCRYPTED, Some(false), parse_bool)?;
    let config = RemotesConfig {
        url_policy,
        allow_addresses,
        allow_loopback,
        max_held_bytes,
        api_hop_encrypted,
    };
    if !security && config.any_set() {
        let setting = first_set(merged).unwrap_or(keys::REMOTES_ALLOWED_HOSTS);
        return Err(merged.error(
            setting,
            "remotes settings need security.enabled=true: remotes exist only with security on",
        ));
    }
    Ok(config)
}

/// The first remotes setting given, for the error's name.
fn first_set(merged: &Merged) -> Option<narad_controlplane::node::config::layered::Setting> {
    [
        keys::REMOTES_ALLOWED_HOSTS,
        keys::REMOTES_ALLOWED_PORTS,
        keys::REMOTES_ALLOW_ADDRESSES,
        keys::REMOTES_ALLOW_LOOPBACK,
        keys::REMOTES_MAX_HELD_BYTES,
        keys::REMOTES_API_HOP_ENCRYPTED,
    ]
    .into_iter()
    .find(|setting| !merged.origin(*setting).is_empty())
}

/// The secrets from the environment: the current one with security on,
/// and the previous one, which must be as long as any cluster secret and
/// differ from the current.
///
/// # Errors
/// A previous secret with security off, too short, or equal to the
/// current.
pub(crate) fn secrets(
    env: &impl Fn(&str) -> Option<String>,
    security: bool,
) -> Result<RemoteSecrets, ConfigError> {
    let read = |name: &str| {
        env(name)
            .filter(|secret| !secret.is_empty())
            .map(|secret| Zeroizing::new(secret.into_bytes()))
    };
    let current = read(ENV_CLUSTER_SECRET);
    let previous = read(ENV_CLUSTER_SECRET_PREVIOUS);
    let refuse = |reason: &str| {
        Err(ConfigError::new(
            ENV_CLUSTER_SECRET_PREVIOUS,
            String::new(),
            reason,
        ))
    };
    match (&current, &previous) {
        (_, None) => {}
        _ if !security => {
            return refuse("needs security.enabled=true (it opens remote credentials only)");
        }
        (None, Some(_)) => {
            return refuse(
                "needs NARAD_CLUSTER_SECRET: the previous secret only opens, it never seals",
            );
        }
        (Some(current), Some(previous)) if current == previous => {
            return refuse("equals NARAD_CLUSTER_SECRET; unset it, or give the old secret");
        }
        (_, Some(previous)) if previous.len() < CLUSTER_SECRET_BYTES_MIN => {
            return refuse(&format!(
                "has {} bytes; a cluster secret has at least {CLUSTER_SECRET_BYTES_MIN}",
                previous.len()
            ));
        }
        _ => {}
    }
    Ok(RemoteSecrets {
        current: current.filter(|_| security),
        previous,
    })
}

/// `a,b,c`: trimmed, empty parts dropped.
fn list(value: &str) -> Result<Vec<String>, String> {
    Ok(value
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(str::to_owned)
        .collect())
}

/// Ports 1–65535, comma-separated, at least one.
fn parse_ports(value: &str) -> Result<Vec<u16>, String> {
    let ports = list(value)?
        .iter()
        .map(|port| match port.parse::<u16>() {
            Ok(port) if port > 0 => Ok(port),
            _ => Err(format!("{port:?} is not a port (1-65535)")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ports.is_empty() {
        return Err("names no port".into());
    }
    Ok(ports)
}

/// CIDRs (`10.0.0.0/8`, `fd00::/8`); a bare address is its own /32 or /128.
fn parse_cidrs(value: &str) -> Result<Vec<IpNet>, String> {
    list(value)?
        .iter()
        .map(|cidr| {
            cidr.parse::<IpNet>()
                .or_else(|_| cidr.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{cidr:?} is not a CIDR such as 10.0.0.0/8"))
        })
        .collect()
}

#[cfg(test)]
#[path = "remotes_config_tests.rs"]
mod tests;
