use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn flags(pairs: &[(Setting, &str)]) -> Layer {
    let mut layer = Layer::new(Source::Flag);
    for (setting, value) in pairs {
        layer.set(*setting, *value);
    }
    layer
}

#[test]
fn a_secured_single_node_on_loopback_needs_only_its_id() {
    let layer = flags(&[(keys::NODE_ID, "1"), (keys::CLUSTER_ADDR, "127.0.0.1:7943")]);
    let config = resolve(&[layer], no_env).expect("valid");
    assert_eq!(config.peers.len(), 1);
    assert_eq!(config.advertise_addr, "127.0.0.1:7943");
    assert_eq!(config.cluster_security, ClusterSecurity::Generated);
    assert!(config.cluster_tls.is_none());
    assert!(config.is_initial_member());
}

#[test]
fn a_single_node_on_every_interface_advertises_loopback() {
    let layer = flags(&[(keys::NODE_ID, "1"), (keys::ALLOW_PLAINTEXT_RAFT, "true")]);
    let config = resolve(&[layer], no_env).expect("valid");
    assert_eq!(config.advertise_addr, "127.0.0.1:7943");
}

#[test]
fn a_missing_node_id_names_the_setting_and_where_to_set_it() {
    let error = resolve(&[], no_env).expect_err("refused");
    assert_eq!(error.setting, "cluster.node_id");
    assert!(error.to_string().contains("NARAD_NODE_ID"), "{error}");
}

#[test]
fn a_bad_value_names_the_setting_and_its_source() {
    let env = Layer::from_env(|name| {
        (name == "NARAD_CLUSTER_RAFT_HEARTBEAT_INTERVAL").then(|| "fast".to_owned())
    });
    let error = resolve(&[flags(&[(keys::NODE_ID, "1")]), env], no_env).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "invalid configuration: cluster.raft_heartbeat_interval (from NARAD_CLUSTER_RAFT_HEARTBEAT_INTERVAL): \"fast\" is not a duration like \"250ms\", \"1s\" or \"2m\""
    );
}

#[test]
fn flags_win_over_environment_and_file() {
    let file =
        Layer::from_json(
            r#"{"cluster": {"node_id": 1, "addr": "127.0.0.1:7943"}, "http": {"addr": "127.0.0.1:9001"}}"#,
        )
            .expect("parses");
    let env =
        Layer::from_env(|name| (name == "NARAD_HTTP_ADDR").then(|| "127.0.0.1:9002".to_owned()));
    let flag = flags(&[(keys::HTTP_ADDR, "127.0.0.1:9003")]);
    let config = resolve(&[file, env, flag], no_env).expect("valid");
    assert_eq!(config.http_addr.to_string(), "127.0.0.1:9003");
}

#[test]
fn an_unknown_file_key_is_refused() {
    let error = Layer::from_json(r#"{"cluster": {"node_idd": 1}}"#).expect_err("refused");
    assert!(
        error
            .to_string()
            .contains("unknown setting \"cluster.node_idd\""),
        "{error}"
    );
}

#[test]
fn peers_need_three_unique_voters() {
    let error = resolve(
        &[flags(&[(keys::NODE_ID, "1"), (keys::PEERS, "1@a:1,2@b:2")])],
        no_env,
    )
    .expect_err("refused");
    assert_eq!(error.setting, "cluster.peers");
    let error = resolve(
        &[flags(&[
            (keys::NODE_ID, "1"),
            (keys::PEERS, "1@a:1,1@b:2,3@c:3"),
        ])],
        no_env,
    )
    .expect_err("refused");
    assert!(error.reason.contains("unique"), "{error}");
}

#[test]
fn a_secured_cluster_needs_the_secret() {
    let layer = flags(&[(keys::NODE_ID, "1"), (keys::PEERS, "1@a:1,2@b:2,3@c:3")]);
    let error = resolve(std::slice::from_ref(&layer), no_env).expect_err("refused");
    assert_eq!(error.setting, "NARAD_CLUSTER_SECRET");
    let secret =
        |name: &str| (name == ENV_CLUSTER_SECRET).then(|| "0123456789abcdef0123".to_owned());
    let plaintext = flags(&[(keys::ALLOW_PLAINTEXT_RAFT, "true")]);
    let config = resolve(&[layer, plaintext], secret).expect("valid");
    assert!(matches!(
        config.cluster_security,
        ClusterSecurity::Secret(_)
    ));
}

#[test]
fn an_insecure_cluster_must_be_allowed_explicitly() {
    let layer = flags(&[
        (keys::NODE_ID, "1"),
        (keys::PEERS, "1@a:1,2@b:2,3@c:3"),
        (keys::SECURITY, "false"),
    ]);
    let error = resolve(std::slice::from_ref(&layer), no_env).expect_err("refused");
    assert_eq!(error.setting, "security.allow_insecure_cluster");
}

#[test]
fn a_joining_node_must_advertise_its_address() {
    let layer = flags(&[
        (keys::NODE_ID, "4"),
        (keys::PEERS, "1@a:1,2@b:2,3@c:3"),
        (keys::SECURITY, "false"),
        (keys::ALLOW_INSECURE, "true"),
    ]);
    let error = resolve(&[layer], no_env).expect_err("refused");
    assert_eq!(error.setting, "cluster.advertise_addr");
}

#[test]
fn an_election_timeout_under_three_heartbeats_is_refused() {
    let layer = flags(&[
        (keys::NODE_ID, "1"),
        (keys::HEARTBEAT, "100ms"),
        (keys::ELECTION, "200ms"),
    ]);
    let error = resolve(&[layer], no_env).expect_err("refused");
    assert_eq!(error.setting, "cluster.raft_election_timeout");
}

fn secret(name: &str) -> Option<String> {
    (name == ENV_CLUSTER_SECRET).then(|| "0123456789abcdef0123".to_owned())
}

#[test]
fn a_secured_multi_node_cluster_without_tls_files_refuses_naming_the_settings() {
    let layer = flags(&[(keys::NODE_ID, "1"), (keys::PEERS, "1@a:1,2@b:2,3@c:3")]);
    let error = resolve(&[layer], secret).expect_err("refused");
    assert_eq!(error.setting, "security.cluster_tls_cert_file");
    let text = error.to_string();
    assert!(text.contains("has cluster peers"), "{text}");
    assert!(text.contains("security.allow_plaintext_raft"), "{text}");
}

#[test]
fn a_secured_single_node_beyond_loopback_without_tls_files_refuses() {
    let layer = flags(&[(keys::NODE_ID, "1"), (keys::CLUSTER_ADDR, "10.0.0.1:7943")]);
    let error = resolve(&[layer], no_env).expect_err("refused");
    assert_eq!(error.setting, "security.cluster_tls_cert_file");
    assert!(error.reason.contains("10.0.0.1:7943"), "{error}");
    assert!(error.reason.contains("not a loopback address"), "{error}");
}

#[test]
fn allow_plaintext_raft_lets_a_secured_cluster_start_without_tls_files() {
    let env = Layer::from_env(|name| (name == "NARAD_ALLOW_PLAINTEXT_RAFT").then(|| "true".into()));
    let layer = flags(&[(keys::NODE_ID, "1"), (keys::PEERS, "1@a:1,2@b:2,3@c:3")]);
    let config = resolve(&[layer, env], secret).expect("valid");
    assert!(config.cluster_tls.is_none());
}

#[test]
fn an_insecure_cluster_needs_no_tls_files() {
    let layer = flags(&[
        (keys::NODE_ID, "1"),
        (keys::PEERS, "1@a:1,2@b:2,3@c:3"),
        (keys::SECURITY, "false"),
        (keys::ALLOW_INSECURE, "true"),
    ]);
    let config = resolve(&[layer], no_env).expect("valid");
    assert_eq!(config.cluster_security, ClusterSecurity::Insecure);
}

#[test]
fn the_tls_files_are_set_all_three_or_none() {
    for given in [
        vec![(keys::CLUSTER_TLS_CERT_FILE, "/x/node.crt")],
        vec![
            (keys::CLUSTER_TLS_CERT_FILE, "/x/node.crt"),
            (keys::CLUSTER_TLS_KEY_FILE, "/x/node.key"),
        ],
        vec![(keys::CLUSTER_TLS_CA_FILE, "/x/ca.crt")],
    ] {
        let missing = [
            keys::CLUSTER_TLS_CERT_FILE,
            keys::CLUSTER_TLS_KEY_FILE,
            keys::CLUSTER_TLS_CA_FILE,
        ]
        .into_iter()
        .find(|setting| given.iter().all(|(set, _)| set != setting))
        .expect("one is missing");
        let mut pairs = vec![(keys::NODE_ID, "1"), (keys::ALLOW_PLAINTEXT_RAFT, "true")];
        pairs.extend(given);
        let error = resolve(&[flags(&pairs)], no_env).expect_err("refused");
        assert_eq!(error.setting, missing.key);
        let text = error.to_string();
        for setting in [
            "security.cluster_tls_cert_file",
            "security.cluster_tls_key_file",
            "security.cluster_tls_ca_file",
        ] {
            assert!(text.contains(setting), "{text}");
        }
    }
}

#[test]
fn an_unreadable_tls_file_is_refused_naming_its_setting_and_source() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let missing = dir.path().join("absent.crt");
    let missing = missing.to_str().expect("a UTF-8 path");
    let env = Layer::from_env(|name| (name == "NARAD_CLUSTER_TLS_CA_FILE").then(|| missing.into()));
    let layer = flags(&[
        (keys::NODE_ID, "1"),
        (keys::CLUSTER_TLS_CERT_FILE, missing),
        (keys::CLUSTER_TLS_KEY_FILE, missing),
    ]);
    let error = resolve(&[layer, env], no_env).expect_err("refused");
    assert_eq!(error.setting, "security.cluster_tls_cert_file");
    assert_eq!(error.from, " (from --cluster-tls-cert-file)");
    assert!(error.reason.contains("absent.crt"), "{error}");
}
