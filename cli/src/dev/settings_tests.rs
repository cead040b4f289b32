use clap::FromArgMatches;

use super::*;
use crate::dev::DevArgs;

fn matches(words: &[&str]) -> ArgMatches {
    let words = std::iter::once("dev").chain(words.iter().copied());
    let command = <DevArgs as clap::Args>::augment_args(Command::new("dev"));
    command.try_get_matches_from(words).expect("parses")
}

fn resolve_words(words: &[&str]) -> Result<DevConfig, ConfigError> {
    resolve(&layers(&matches(words)))
}

#[test]
fn unset_settings_take_the_defaults_of_narad_dev() {
    let config = resolve(&[]).expect("valid");
    assert_eq!(config.log_format, "text");
    assert!(!config.access_log);
    assert!(config.ingress_wal_prealloc);
    assert!(!config.partition_log_prealloc);
    assert!(!config.ingress_wal_inline_flush);
    assert_eq!(config.front_threads, front::default_count());
    assert_eq!(
        config.retention_check_interval,
        RETENTION_CHECK_INTERVAL_DEFAULT
    );
    assert_eq!(config.wal_dir, None);
    assert_eq!(
        config.tail_cache_bytes,
        narad_plog::TAIL_CACHE_BYTES_DEFAULT
    );
}

#[test]
fn the_tail_cache_variable_sizes_the_partition_logs_cache_with_narad_datas_bounds() {
    let mut env = Layer::new(Source::Env);
    env.set(keys::TAIL_CACHE_BYTES, "0");
    assert_eq!(resolve(&[env]).expect("valid").tail_cache_bytes, 0);
    let config = resolve_words(&["--tail-cache-bytes", "65536"]).expect("valid");
    assert_eq!(config.tail_cache_bytes, 65_536);
    let error = resolve_words(&["--tail-cache-bytes", "2147483648"]).expect_err("too large");
    assert!(
        error
            .to_string()
            .contains("storage.tail_cache_bytes (from --tail-cache-bytes)"),
        "{error}"
    );
}

#[test]
fn the_wal_dir_flag_sets_the_root_of_the_ingress_wal() {
    let config = resolve_words(&["--wal-dir", "/nvme/narad"]).expect("valid");
    assert_eq!(config.wal_dir, Some(PathBuf::from("/nvme/narad")));
}

#[test]
fn an_empty_wal_dir_variable_is_refused_naming_the_variable() {
    let mut env = Layer::new(Source::Env);
    env.set(keys::WAL_DIR, "");
    let error = resolve(&[env]).expect_err("empty");
    assert_eq!(
        error.to_string(),
        "invalid configuration: storage.wal_dir (from NARAD_STORAGE_WAL_DIR): must not be empty"
    );
}

#[test]
fn a_default_clap_shows_is_not_taken_as_a_flag() {
    let layers = layers(&matches(&[]));
    let merged = Merged::of(&layers);
    assert_eq!(merged.origin(keys::RETENTION_CHECK_INTERVAL), "");
    assert_eq!(merged.origin(keys::LOG_FORMAT), "");
}

#[test]
fn flags_set_the_shared_settings() {
    let config = resolve_words(&[
        "--access-log",
        "--ingress-wal-prealloc",
        "false",
        "--http-front-threads",
        "2",
        "--retention-check-interval-ms",
        "5000",
        "--log-format",
        "json",
    ])
    .expect("valid");
    assert!(config.access_log);
    assert!(!config.ingress_wal_prealloc);
    assert_eq!(config.front_threads, 2);
    assert_eq!(config.retention_check_interval, Duration::from_secs(5));
    assert_eq!(config.log_format, "json");
}

#[test]
fn a_flag_out_of_bounds_is_refused_as_narad_data_refuses_it() {
    let error = resolve_words(&["--retention-check-interval-ms", "5"]).expect_err("too short");
    assert_eq!(
        error.to_string(),
        "invalid configuration: storage.retention_check_interval_ms \
         (from --retention-check-interval-ms): \"5\" is not a number of milliseconds \
         from 1000 to 3600000"
    );
    let error = resolve_words(&["--http-front-threads", "257"]).expect_err("too many");
    assert_eq!(
        error.to_string(),
        "invalid configuration: http.front_threads (from --http-front-threads): \
         \"257\" is not a thread count from 0 to 256"
    );
}

#[test]
fn a_variable_out_of_bounds_names_the_variable() {
    let mut env = Layer::new(Source::Env);
    env.set(keys::FRONT_THREADS, "many");
    let error = resolve(&[env]).expect_err("not a number");
    assert_eq!(
        error.to_string(),
        "invalid configuration: http.front_threads (from NARAD_HTTP_FRONT_THREADS): \
         \"many\" is not a thread count from 0 to 256"
    );
}

#[test]
fn a_flag_wins_over_the_variable() {
    let mut env = Layer::new(Source::Env);
    env.set(keys::FRONT_THREADS, "3");
    let mut flags = Layer::new(Source::Flag);
    flags.set(keys::FRONT_THREADS, "4");
    assert_eq!(resolve(&[env, flags]).expect("valid").front_threads, 4);
}

#[test]
fn the_own_flags_of_narad_dev_parse_beside_the_shared_ones() {
    let args = DevArgs::from_arg_matches(&matches(&["--port", "1", "--secure", "--access-log"]))
        .expect("parses");
    assert_eq!(args.flags.port, 1);
    assert!(args.flags.secure);
    assert!(resolve(&args.layers).expect("valid").access_log);
}
