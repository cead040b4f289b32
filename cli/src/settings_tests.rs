use std::io::Write;

use clap::{Args, CommandFactory, Parser};
use narad_controlplane::node::config::layered::{Merged, parse_within};

use super::*;

/// Two settings, as a node command declares them.
#[derive(Debug, Clone, Copy)]
struct Table;

mod keys {
    narad_controlplane::settings! {
        pub(super),
        NAME = "node.name", "TEST_NODE_NAME", "node-name", "The node's name: node.name";
        COUNT = "node.count", "TEST_NODE_COUNT", "count", "1 to 9: node.count";
    }
}

impl Settings for Table {
    const ALL: &'static [Setting] = keys::ALL;
}

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: SettingArgs<Table>,
}

fn parse(words: &[&str]) -> SettingArgs<Table> {
    let words = std::iter::once("test").chain(words.iter().copied());
    Cli::try_parse_from(words).expect("parses").args
}

fn name(layers: &[Layer<Table>]) -> Result<String, String> {
    Merged::of(layers)
        .parse(keys::NAME, None, |v| Ok(v.to_owned()))
        .map_err(|e| e.to_string())
}

fn env_name(name: &str) -> Option<String> {
    (name == "TEST_NODE_NAME").then(|| "env".to_owned())
}

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn every_setting_has_a_flag_with_its_help_line() {
    let help = Cli::command().render_help().to_string();
    assert!(help.contains("--node-name <NODE_NAME>"), "{help}");
    assert!(help.contains("The node's name: node.name"), "{help}");
    assert!(help.contains("--count <COUNT>"), "{help}");
    assert!(help.contains("--config <CONFIG>"), "{help}");
}

#[test]
fn the_flags_list_in_table_order_after_config() {
    let command = SettingArgs::<Table>::augment_args(clap::Command::new("test"));
    let longs: Vec<_> = command.get_arguments().filter_map(Arg::get_long).collect();
    assert_eq!(longs, ["config", "node-name", "count"]);
}

#[test]
fn a_flag_wins_over_the_environment() {
    let layers = parse(&["--node-name", "flag"])
        .layers(env_name)
        .expect("layers");
    assert_eq!(name(&layers), Ok("flag".to_owned()));
}

#[test]
fn the_environment_wins_over_the_file() {
    let mut file = tempfile::NamedTempFile::new().expect("temporary file");
    file.write_all(br#"{"node": {"name": "file"}}"#)
        .expect("written");
    let path = file.path().to_str().expect("UTF-8 path");
    let args = parse(&["--config", path]);
    assert_eq!(
        name(&args.layers(no_env).expect("layers")),
        Ok("file".into())
    );
    assert_eq!(
        name(&args.layers(env_name).expect("layers")),
        Ok("env".into())
    );
}

#[test]
fn an_unset_flag_adds_nothing() {
    let layers = parse(&[]).layers(no_env).expect("layers");
    assert_eq!(layers.len(), 2, "the environment and the flags, no file");
    assert!(name(&layers).is_err(), "nothing set node.name");
}

#[test]
fn a_bad_flag_is_named_with_its_flag() {
    let layers = parse(&["--count", "12"]).layers(no_env).expect("layers");
    let error = Merged::of(&layers)
        .parse(keys::COUNT, Some(1), |v| parse_within(v, 1..=9, "a count"))
        .expect_err("out of bounds");
    assert_eq!(
        error.to_string(),
        "invalid configuration: node.count (from --count): \"12\" is not a count from 1 to 9"
    );
}

#[test]
fn an_unreadable_config_file_is_named() {
    let args = parse(&["--config", "/nonexistent/narad.json"]);
    let error = args.layers(no_env).expect_err("no such file");
    assert!(
        error.starts_with("invalid configuration: --config /nonexistent/narad.json: "),
        "{error}"
    );
}

#[test]
fn an_invalid_config_file_is_named() {
    let mut file = tempfile::NamedTempFile::new().expect("temporary file");
    file.write_all(br#"{"node": {"nmae": "x"}}"#)
        .expect("written");
    let error = parse(&["--config", file.path().to_str().expect("UTF-8 path")])
        .layers(no_env)
        .expect_err("unknown key");
    assert!(error.contains("unknown setting \"node.nmae\""), "{error}");
    assert!(
        error.ends_with(&format!("({})", file.path().display())),
        "{error}"
    );
}
