use narad_controlplane::node::config::layered::Source;

use super::super::config::{Layer, resolve};
use super::*;

const SECRET: &str = "a-cluster-secret-of-enough-bytes";
const OLD_SECRET: &str = "the-old-cluster-secret-of-enough-bytes";

fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        pairs
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    }
}

fn layer(pairs: &[(narad_controlplane::node::config::layered::Setting, &str)]) -> Layer {
    let mut layer = Layer::new(Source::Flag);
    for (setting, value) in [
        (keys::NODE_ID, "1"),
        (keys::CONTROL_NODES, "127.0.0.1:7943"),
        (keys::ALLOW_PLAINTEXT_RAFT, "true"),
    ]
    .iter()
    .chain(pairs)
    {
        layer.set(*setting, *value);
    }
    layer
}

#[test]
fn remotes_settings_default_to_the_spec() {
    let config = resolve(&[layer(&[])], env(&[(ENV_CLUSTER_SECRET, SECRET)])).expect("valid");
    assert_eq!(config.api.remotes, RemotesConfig::default());
    assert_eq!(config.api.remotes.url_policy.allowed_ports, vec![443]);
    assert_eq!(config.api.remotes.max_held_bytes, 268_435_456);
    assert!(!config.api.remotes.allow_loopback);
    assert!(!config.api.remotes.api_hop_encrypted);
    assert!(config.remote_secrets.current.is_some());
    assert!(config.remote_secrets.previous.is_none());
}

#[test]
fn remotes_settings_parse_from_flags() {
    let flags = layer(&[
        (
            keys::REMOTES_ALLOWED_HOSTS,
            "dr.example.com, *.backup.example.net",
        ),
        (keys::REMOTES_ALLOWED_PORTS, "443,8443"),
        (keys::REMOTES_ALLOW_ADDRESSES, "10.0.0.0/8,fd00::1"),
        (keys::REMOTES_ALLOW_LOOPBACK, "true"),
        (keys::REMOTES_MAX_HELD_BYTES, "1048576"),
        (keys::REMOTES_API_HOP_ENCRYPTED, "true"),
    ]);
    let config = resolve(&[flags], env(&[(ENV_CLUSTER_SECRET, SECRET)])).expect("valid");
    let remotes = &config.api.remotes;
    assert_eq!(remotes.url_policy.allowed_hosts.len(), 2);
    assert_eq!(remotes.url_policy.allowed_ports, vec![443, 8443]);
    let addresses: Vec<String> = remotes
        .allow_addresses
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(addresses, ["10.0.0.0/8", "fd00::1/128"]);
    assert!(remotes.allow_loopback && remotes.api_hop_encrypted);
    assert_eq!(remotes.max_held_bytes, 1_048_576);
}

#[test]
fn remotes_lists_parse_from_the_config_file() {
    let file = Layer::from_json(
        r#"{"cluster": {"node_id": 1, "control_nodes": ["127.0.0.1:7943"]},
            "security": {"allow_plaintext_raft": true},
            "remotes": {"allowed_hosts": ["dr.example.com"], "allowed_ports": [443, 9443],
                        "allow_addresses": ["192.168.0.0/16"]}}"#,
    )
    .expect("file");
    let config = resolve(&[file], env(&[(ENV_CLUSTER_SECRET, SECRET)])).expect("valid");
    assert_eq!(config.api.remotes.url_policy.allowed_ports, vec![443, 9443]);
    assert_eq!(config.api.remotes.allow_addresses.len(), 1);
    assert!(config.api.remotes.url_policy.allowlist_configured());
}

#[test]
fn bad_remotes_settings_are_named() {
    let secret = [(ENV_CLUSTER_SECRET, SECRET)];
    for (setting, value) in [
        (keys::REMOTES_ALLOWED_PORTS, "0"),
        (keys::REMOTES_ALLOWED_PORTS, "443,x"),
        (keys::REMOTES_ALLOWED_PORTS, ","),
        (keys::REMOTES_ALLOWED_HOSTS, "a.*.example.com"),
        (keys::REMOTES_ALLOW_ADDRESSES, "10.0.0.0/33"),
        (keys::REMOTES_ALLOW_LOOPBACK, "yes"),
        (keys::REMOTES_MAX_HELD_BYTES, "-1"),
    ] {
        let error = resolve(&[layer(&[(setting, value)])], env(&secret)).expect_err(value);
        assert_eq!(error.setting, setting.key, "{value}");
    }
}

#[test]
fn remotes_settings_need_security() {
    let flags = layer(&[
        (keys::SECURITY, "false"),
        (keys::ALLOW_INSECURE, "true"),
        (keys::REMOTES_API_HOP_ENCRYPTED, "true"),
    ]);
    let error = resolve(&[flags], env(&[])).expect_err("refused");
    assert_eq!(error.setting, "remotes.api_hop_encrypted");
    assert!(error.reason.contains("security"), "{}", error.reason);
}

#[test]
fn the_previous_secret_is_read_and_checked() {
    let both = [
        (ENV_CLUSTER_SECRET, SECRET),
        (ENV_CLUSTER_SECRET_PREVIOUS, OLD_SECRET),
    ];
    let config = resolve(&[layer(&[])], env(&both)).expect("valid");
    assert_eq!(
        config.remote_secrets.previous.as_deref().map(Vec::as_slice),
        Some(OLD_SECRET.as_bytes())
    );
    let same = [
        (ENV_CLUSTER_SECRET, SECRET),
        (ENV_CLUSTER_SECRET_PREVIOUS, SECRET),
    ];
    let short = [
        (ENV_CLUSTER_SECRET, SECRET),
        (ENV_CLUSTER_SECRET_PREVIOUS, "short"),
    ];
    for (pairs, words) in [(&same[..], "equals"), (&short[..], "bytes")] {
        let error = resolve(&[layer(&[])], env(pairs)).expect_err(words);
        assert_eq!(error.setting, ENV_CLUSTER_SECRET_PREVIOUS);
        assert!(error.reason.contains(words), "{}", error.reason);
    }
    let insecure = layer(&[(keys::SECURITY, "false"), (keys::ALLOW_INSECURE, "true")]);
    let error = resolve(
        &[insecure],
        env(&[(ENV_CLUSTER_SECRET_PREVIOUS, OLD_SECRET)]),
    )
    .expect_err("security off");
    assert_eq!(error.setting, ENV_CLUSTER_SECRET_PREVIOUS);
}
