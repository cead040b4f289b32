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
fn a_single_node_needs_only_its_id() {
    let config = resolve(&[flags(&[(keys::NODE_ID, "1")])], no_env).expect("valid");
    assert_eq!(config.peers.len(), 1);
    assert_eq!(config.advertise_addr, "127.0.0.1:7943");
    assert_eq!(config.cluster_security, ClusterSecurity::Generated);
    assert!(config.is_initial_member());
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
        Layer::from_json(r#"{"cluster": {"node_id": 1}, "http": {"addr": "127.0.0.1:9001"}}"#)
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
    let config = resolve(&[layer], secret).expect("valid");
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
