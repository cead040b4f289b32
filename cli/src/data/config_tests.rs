use narad_controlplane::node::config::layered::Source;

use super::*;

const SECRET: &str = "a-cluster-secret-of-enough-bytes";

fn env_with_secret(name: &str) -> Option<String> {
    (name == ENV_CLUSTER_SECRET).then(|| SECRET.to_owned())
}

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

/// The two settings without a default, and the allowance a secured node
/// needs to start without cluster TLS files.
fn required() -> Layer {
    flags(&[
        (keys::NODE_ID, "1"),
        (keys::CONTROL_NODES, "127.0.0.1:7943"),
        (keys::ALLOW_PLAINTEXT_RAFT, "true"),
    ])
}

fn error(layers: &[Layer], env: impl Fn(&str) -> Option<String>) -> ConfigError {
    resolve(layers, env).expect_err("refused")
}

#[test]
fn defaults_fill_every_setting_but_the_node_id_and_the_control_nodes() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert_eq!(config.node_id, 1);
    assert_eq!(config.control_nodes, vec!["127.0.0.1:7943".to_owned()]);
    assert_eq!(config.http_addr, "0.0.0.0:7942".parse().expect("addr"));
    assert_eq!(config.shutdown_grace, defaults::SHUTDOWN_GRACE);
    assert_eq!(config.data_dir, PathBuf::from("data"));
    assert!(config.api.security);
    assert!(
        config.ingress_wal_prealloc,
        "on by default (the spec's default is off; docs/operations.md says why)"
    );
    assert_eq!(config.api.bcrypt_cost, BCRYPT_COST_DEFAULT);
    assert!(matches!(
        config.cluster_security,
        ClusterSecurity::Secret(_)
    ));
}

#[test]
fn a_missing_node_id_is_named_with_where_to_set_it() {
    let layer = flags(&[(keys::CONTROL_NODES, "127.0.0.1:7943")]);
    let error = error(&[layer], env_with_secret);
    assert_eq!(error.setting, "cluster.node_id");
    assert!(error.reason.contains("NARAD_NODE_ID"), "{}", error.reason);
}

#[test]
fn missing_control_nodes_are_named() {
    let layer = flags(&[(keys::NODE_ID, "1")]);
    assert_eq!(
        error(&[layer], env_with_secret).setting,
        "cluster.control_nodes"
    );
}

#[test]
fn a_flag_wins_over_the_environment_which_wins_over_the_file() {
    let file = Layer::from_json(
        r#"{"cluster": {"node_id": 1, "control_nodes": ["127.0.0.1:7943"]},
            "security": {"allow_plaintext_raft": true},
            "storage": {"data_dir": "/file"}, "http": {"addr": "127.0.0.1:1000"}}"#,
    )
    .expect("file");
    let env = Layer::from_env(|name| match name {
        "NARAD_DATA_DIR" => Some("/env".into()),
        "NARAD_HTTP_ADDR" => Some("127.0.0.1:2000".into()),
        _ => None,
    });
    let flag = flags(&[(keys::DATA_DIR, "/flag")]);
    let config = resolve(&[file, env, flag], env_with_secret).expect("valid");
    assert_eq!(config.data_dir, PathBuf::from("/flag"));
    assert_eq!(config.http_addr, "127.0.0.1:2000".parse().expect("addr"));
    assert_eq!(config.node_id, 1);
}

#[test]
fn the_wal_dir_is_unset_unless_given() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert_eq!(
        config.wal_dir, None,
        "the WAL stays under the data directory"
    );
}

#[test]
fn the_wal_dir_is_read_from_the_file_the_environment_and_a_flag() {
    let file = Layer::from_json(
        r#"{"cluster": {"node_id": 1, "control_nodes": ["127.0.0.1:7943"]},
            "security": {"allow_plaintext_raft": true},
            "storage": {"data_dir": "/data", "wal_dir": "/nvme/file"}}"#,
    )
    .expect("file");
    let config = resolve(std::slice::from_ref(&file), env_with_secret).expect("valid");
    assert_eq!(config.wal_dir, Some(PathBuf::from("/nvme/file")));
    assert_eq!(config.data_dir, PathBuf::from("/data"));
    let env =
        Layer::from_env(|name| (name == "NARAD_STORAGE_WAL_DIR").then(|| "/nvme/env".to_owned()));
    let config = resolve(&[file.clone(), env.clone()], env_with_secret).expect("valid");
    assert_eq!(config.wal_dir, Some(PathBuf::from("/nvme/env")));
    let flag = flags(&[(keys::WAL_DIR, "/nvme/flag")]);
    let config = resolve(&[file, env, flag], env_with_secret).expect("valid");
    assert_eq!(config.wal_dir, Some(PathBuf::from("/nvme/flag")));
}

#[test]
fn an_empty_wal_dir_is_refused_naming_the_setting_and_its_source() {
    let env = Layer::from_env(|name| (name == "NARAD_STORAGE_WAL_DIR").then(String::new));
    let error = error(&[required(), env], env_with_secret);
    assert_eq!(
        error.to_string(),
        "invalid configuration: storage.wal_dir (from NARAD_STORAGE_WAL_DIR): must not be empty"
    );
}

#[test]
fn an_unknown_key_in_the_file_is_refused_by_name() {
    let error = Layer::from_json(r#"{"cluster": {"node_id": 1, "control_node": "a:1"}}"#)
        .expect_err("refused");
    assert!(
        error
            .reason
            .contains("unknown setting \"cluster.control_node\""),
        "{}",
        error.reason
    );
}

#[test]
fn an_unknown_section_in_the_file_is_refused_by_name() {
    let error = Layer::from_json(r#"{"clusterr": {"node_id": 1}}"#).expect_err("refused");
    assert!(error.reason.contains("clusterr"), "{}", error.reason);
}

#[test]
fn a_bad_value_names_the_setting_and_its_variable() {
    let env = Layer::from_env(|name| (name == "NARAD_HTTP_SHUTDOWN_GRACE").then(|| "soon".into()));
    let error = error(&[required(), env], env_with_secret);
    assert_eq!(error.setting, "http.shutdown_grace");
    assert_eq!(error.from, " (from NARAD_HTTP_SHUTDOWN_GRACE)");
}

#[test]
fn a_node_id_that_is_not_a_positive_integer_is_refused() {
    let layer = flags(&[(keys::NODE_ID, "data-1")]);
    let error = error(&[required(), layer], env_with_secret);
    assert_eq!(error.setting, "cluster.node_id");
    assert_eq!(error.from, " (from --node-id)");
}

#[test]
fn security_on_without_a_secret_names_the_secret() {
    assert_eq!(error(&[required()], no_env).setting, ENV_CLUSTER_SECRET);
}

#[test]
fn a_short_secret_is_refused_by_name() {
    let short = |name: &str| (name == ENV_CLUSTER_SECRET).then(|| "short".to_owned());
    assert_eq!(error(&[required()], short).setting, ENV_CLUSTER_SECRET);
}

#[test]
fn security_off_without_a_secret_needs_the_explicit_allowance() {
    let off = flags(&[(keys::SECURITY, "false")]);
    let refused = error(&[required(), off.clone()], no_env);
    assert_eq!(refused.setting, "security.allow_insecure_cluster");
    let allowed = flags(&[(keys::ALLOW_INSECURE, "true")]);
    let config = resolve(&[required(), off, allowed], no_env).expect("valid");
    assert!(matches!(config.cluster_security, ClusterSecurity::Insecure));
    assert!(!config.api.security);
}

#[test]
fn the_rpc_socket_defaults_to_the_api_port_over_udp() {
    let layer = flags(&[(keys::HTTP_ADDR, "127.0.0.1:9000")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.rpc_addr, "127.0.0.1:9000".parse().expect("addr"));
    assert_eq!(config.advertised_rpc(), "127.0.0.1:9000");
}

#[test]
fn the_advertised_host_defaults_to_the_host_name_when_listening_everywhere() {
    let env = |name: &str| match name {
        ENV_HOSTNAME => Some("data-0.narad".to_owned()),
        _ => env_with_secret(name),
    };
    let config = resolve(&[required()], env).expect("valid");
    assert_eq!(config.advertised_http(), "data-0.narad:7942");
}

#[test]
fn duplicate_control_nodes_are_refused() {
    let layer = flags(&[(keys::CONTROL_NODES, "127.0.0.1:7943, 127.0.0.1:7943")]);
    let error = error(&[required(), layer], env_with_secret);
    assert_eq!(error.setting, "cluster.control_nodes");
}

#[test]
fn a_control_node_without_a_port_is_refused() {
    let layer = flags(&[(keys::CONTROL_NODES, "control-1")]);
    let error = error(&[required(), layer], env_with_secret);
    assert!(error.reason.contains("not host:port"), "{}", error.reason);
}

#[test]
fn a_bcrypt_cost_outside_bcrypts_bounds_is_refused() {
    let layer = flags(&[(keys::BCRYPT_COST, "3")]);
    let error = error(&[required(), layer], env_with_secret);
    assert_eq!(error.setting, "security.bcrypt_cost");
}

#[test]
fn the_error_text_names_the_setting_and_its_source() {
    let layer = flags(&[(keys::LOG_LEVEL, "loud")]);
    let text = error(&[required(), layer], env_with_secret).to_string();
    assert!(
        text.starts_with("invalid configuration: log.level (from --log-level): "),
        "{text}"
    );
}

#[test]
fn a_shutdown_grace_shorter_than_the_consume_wait_is_refused() {
    let layer = flags(&[
        (keys::MAX_CONSUME_WAIT, "20s"),
        (keys::SHUTDOWN_GRACE, "15s"),
    ]);
    let error = error(&[required(), layer], env_with_secret);
    assert_eq!(error.setting, "http.shutdown_grace");
}

#[test]
fn a_consume_wait_of_zero_is_accepted() {
    let layer = flags(&[(keys::MAX_CONSUME_WAIT, "0")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.api.max_consume_wait, Duration::ZERO);
}

#[test]
fn a_consumer_offset_commit_interval_outside_its_bounds_is_refused() {
    let layer = flags(&[(keys::OFFSET_COMMIT_INTERVAL, "5")]);
    let error = error(&[required(), layer], env_with_secret);
    assert_eq!(error.setting, "storage.consumer_offset_commit_interval_ms");
}

#[test]
fn ingress_wal_prealloc_is_read_from_the_file() {
    let file = Layer::from_json(
        r#"{"cluster": {"node_id": 1, "control_nodes": ["127.0.0.1:7943"]},
            "security": {"allow_plaintext_raft": true},
            "storage": {"ingress_wal_prealloc": false}}"#,
    )
    .expect("file");
    let config = resolve(&[file], env_with_secret).expect("valid");
    assert!(!config.ingress_wal_prealloc);
}

#[test]
fn partition_log_prealloc_defaults_off_and_is_read_from_the_file() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert!(!config.partition_log_prealloc);
    let file = Layer::from_json(
        r#"{"cluster": {"node_id": 1, "control_nodes": ["127.0.0.1:7943"]},
            "security": {"allow_plaintext_raft": true},
            "storage": {"partition_log_prealloc": true}}"#,
    )
    .expect("file");
    let config = resolve(&[file], env_with_secret).expect("valid");
    assert!(config.partition_log_prealloc);
    let layer = flags(&[(keys::LOG_PREALLOC, "maybe")]);
    let error = error(&[required(), layer], env_with_secret);
    assert_eq!(error.setting, "storage.partition_log_prealloc");
}

#[test]
fn ingress_wal_inline_flush_defaults_off_and_is_read_from_the_file() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert!(!config.ingress_wal_inline_flush);
    let file = Layer::from_json(
        r#"{"cluster": {"node_id": 1, "control_nodes": ["127.0.0.1:7943"]},
            "security": {"allow_plaintext_raft": true},
            "storage": {"ingress_wal_inline_flush": true}}"#,
    )
    .expect("file");
    let config = resolve(&[file], env_with_secret).expect("valid");
    assert!(config.ingress_wal_inline_flush);
    let layer = flags(&[(keys::WAL_INLINE_FLUSH, "often")]);
    let error = error(&[required(), layer], env_with_secret);
    assert_eq!(error.setting, "storage.ingress_wal_inline_flush");
}

#[test]
fn http_front_threads_default_to_one_per_core_and_take_zero_to_256() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert_eq!(config.front_threads, crate::data::front::default_count());
    assert!(config.front_threads >= 1);
    let file = Layer::from_json(
        r#"{"cluster": {"node_id": 1, "control_nodes": ["127.0.0.1:7943"]},
            "security": {"allow_plaintext_raft": true},
            "http": {"front_threads": 0}}"#,
    )
    .expect("file");
    let config = resolve(&[file], env_with_secret).expect("valid");
    assert_eq!(config.front_threads, 0);
    let layer = flags(&[(keys::FRONT_THREADS, "256")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.front_threads, 256);
    for bad in ["257", "-1", "many"] {
        let layer = flags(&[(keys::FRONT_THREADS, bad)]);
        let error = error(&[required(), layer], env_with_secret);
        assert_eq!(error.setting, "http.front_threads", "{bad}");
    }
}

#[test]
fn an_ingress_wal_prealloc_that_is_not_a_boolean_is_refused() {
    let layer = flags(&[(keys::WAL_PREALLOC, "sometimes")]);
    let error = error(&[required(), layer], env_with_secret);
    assert_eq!(error.setting, "storage.ingress_wal_prealloc");
}

#[test]
fn fanout_slab_settings_default_to_the_spec_and_refuse_zero() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert_eq!(config.fanout.slab_records_max, 4_096);
    assert_eq!(config.fanout.slab_bytes_max, 4 << 20);
    assert_eq!(config.fanout.linger_ms, 25);
    let env = Layer::from_env(|name| match name {
        "NARAD_FANOUT_MAX_BATCH_RECORDS" => Some("512".into()),
        "NARAD_FANOUT_LINGER_MS" => Some("0".into()),
        _ => None,
    });
    let config = resolve(&[required(), env], env_with_secret).expect("valid");
    assert_eq!(config.fanout.slab_records_max, 512);
    assert_eq!(config.fanout.linger_ms, 0);
    let zero = flags(&[(keys::FANOUT_BATCH_BYTES, "0")]);
    let refused = error(&[required(), zero], env_with_secret);
    assert_eq!(refused.setting, "fanout.max_batch_bytes");
    assert!(refused.reason.contains("positive"), "{}", refused.reason);
}

#[test]
fn logs_are_json_without_an_access_log_by_default_and_both_can_be_set() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert_eq!(config.log_format, "json", "the spec's default for a server");
    assert!(!config.api.access_log);
    let mut layers = vec![required()];
    let mut env = Layer::new(Source::Env);
    env.set(keys::ACCESS_LOG, "true");
    layers.push(env);
    layers.push(flags(&[(keys::LOG_FORMAT, "text")]));
    let config = resolve(&layers, env_with_secret).expect("valid");
    assert_eq!(config.log_format, "text");
    assert!(config.api.access_log);
}

#[test]
fn an_unknown_log_format_is_refused_by_name() {
    let layers = [required(), flags(&[(keys::LOG_FORMAT, "xml")])];
    let error = error(&layers, env_with_secret);
    assert_eq!(error.setting, "log.format");
    assert!(error.reason.contains("json, text"), "{}", error.reason);
}

#[test]
fn the_retention_check_interval_defaults_to_a_minute_within_its_bounds() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert_eq!(config.retention_check_interval, Duration::from_secs(60));
    let layer = flags(&[(keys::RETENTION_CHECK_INTERVAL, "5000")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.retention_check_interval, Duration::from_secs(5));
    for refused in ["999", "3600001", "soon"] {
        let layer = flags(&[(keys::RETENTION_CHECK_INTERVAL, refused)]);
        let error = error(&[required(), layer], env_with_secret);
        assert_eq!(error.setting, "storage.retention_check_interval_ms");
    }
}

#[test]
fn the_cold_retention_walk_is_five_minutes_off_at_zero_and_at_least_a_minute() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert_eq!(config.cold_retention_walk, Some(Duration::from_secs(300)));
    let layer = flags(&[(keys::COLD_RETENTION_WALK, "0")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.cold_retention_walk, None);
    let layer = flags(&[(keys::COLD_RETENTION_WALK, "60000")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.cold_retention_walk, Some(Duration::from_secs(60)));
    let layer = flags(&[(keys::COLD_RETENTION_WALK, "59999")]);
    let error = error(&[required(), layer], env_with_secret);
    assert_eq!(error.setting, "storage.cold_retention_walk_ms");
}

#[test]
fn idle_log_eviction_is_thirty_minutes_off_at_zero_and_at_least_a_minute() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert_eq!(config.idle_log_eviction, Some(Duration::from_secs(1800)));
    let layer = flags(&[(keys::IDLE_LOG_EVICTION, "0")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.idle_log_eviction, None);
    let layer = flags(&[(keys::IDLE_LOG_EVICTION, "60000")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.idle_log_eviction, Some(Duration::from_secs(60)));
    for refused in ["59999", "-1", "soon"] {
        let layer = flags(&[(keys::IDLE_LOG_EVICTION, refused)]);
        let error = error(&[required(), layer], env_with_secret);
        assert_eq!(error.setting, "storage.idle_log_eviction_ms", "{refused}");
    }
}

#[test]
fn tail_cache_bytes_is_256_kib_zero_keeps_none_and_at_most_a_gibibyte() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert_eq!(config.tail_cache_bytes, 256 << 10);
    let layer = flags(&[(keys::TAIL_CACHE_BYTES, "0")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.tail_cache_bytes, 0);
    let layer = flags(&[(keys::TAIL_CACHE_BYTES, "1073741824")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.tail_cache_bytes, 1 << 30);
    for refused in ["1073741825", "-1", "1MiB"] {
        let layer = flags(&[(keys::TAIL_CACHE_BYTES, refused)]);
        let error = error(&[required(), layer], env_with_secret);
        assert_eq!(error.setting, "storage.tail_cache_bytes", "{refused}");
    }
}

#[test]
fn idle_shard_release_is_ten_minutes_off_at_zero_and_at_least_a_minute() {
    let config = resolve(&[required()], env_with_secret).expect("valid");
    assert_eq!(config.idle_shard_release, Some(Duration::from_secs(600)));
    let layer = flags(&[(keys::IDLE_SHARD_RELEASE, "0")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.idle_shard_release, None);
    let layer = flags(&[(keys::IDLE_SHARD_RELEASE, "60000")]);
    let config = resolve(&[required(), layer], env_with_secret).expect("valid");
    assert_eq!(config.idle_shard_release, Some(Duration::from_secs(60)));
    for refused in ["59999", "-1", "soon"] {
        let layer = flags(&[(keys::IDLE_SHARD_RELEASE, refused)]);
        let error = error(&[required(), layer], env_with_secret);
        assert_eq!(error.setting, "consume.idle_shard_release_ms", "{refused}");
    }
}

#[test]
fn idle_shard_release_is_read_from_a_consume_section_of_the_file() {
    let file = Layer::from_json(r#"{"consume": {"idle_shard_release_ms": 120000}}"#)
        .expect("a known section");
    let config = resolve(&[required(), file], env_with_secret).expect("valid");
    assert_eq!(config.idle_shard_release, Some(Duration::from_secs(120)));
    let env = |name: &str| match name {
        "NARAD_CONSUME_IDLE_SHARD_RELEASE_MS" => Some("0".to_owned()),
        _ => env_with_secret(name),
    };
    let layers = [required(), Layer::from_env(env)];
    let config = resolve(&layers, env_with_secret).expect("valid");
    assert_eq!(config.idle_shard_release, None);
}

#[test]
fn a_secured_data_node_without_tls_files_refuses_naming_the_settings() {
    let layer = flags(&[
        (keys::NODE_ID, "1"),
        (keys::CONTROL_NODES, "127.0.0.1:7943"),
    ]);
    let error = error(&[layer], env_with_secret);
    assert_eq!(error.setting, "security.cluster_tls_cert_file");
    assert!(
        error.reason.contains("security.allow_plaintext_raft"),
        "{}",
        error.reason
    );
}

#[test]
fn an_insecure_data_node_needs_no_tls_files() {
    let layer = flags(&[
        (keys::NODE_ID, "1"),
        (keys::CONTROL_NODES, "127.0.0.1:7943"),
        (keys::SECURITY, "false"),
        (keys::ALLOW_INSECURE, "true"),
    ]);
    let config = resolve(&[layer], no_env).expect("valid");
    assert!(config.cluster_tls.is_none());
}

#[test]
fn a_partial_set_of_tls_files_is_refused_naming_the_missing_one() {
    let layer = flags(&[(keys::CLUSTER_TLS_CERT_FILE, "/etc/narad/node.crt")]);
    let error = error(&[required(), layer], env_with_secret);
    assert_eq!(error.setting, "security.cluster_tls_key_file");
}
