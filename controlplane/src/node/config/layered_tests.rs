use super::*;

/// Two settings; `list.items` takes a list of strings in the file.
#[derive(Debug, Clone)]
struct Table;

mod keys {
    crate::settings! {
        pub(super),
        NAME = "node.name", "TEST_NODE_NAME", "name";
        ITEMS = "list.items", "TEST_LIST_ITEMS", "items";
    }
}

impl Settings for Table {
    const ALL: &'static [Setting] = keys::ALL;

    fn file_list(setting: &Setting, items: &[Value]) -> Option<String> {
        if *setting != keys::ITEMS {
            return None;
        }
        let texts: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
        texts.map(|texts| texts.join(","))
    }
}

fn text(value: &str) -> Result<String, String> {
    Ok(value.to_owned())
}

fn flag(setting: Setting, value: &str) -> Layer<Table> {
    let mut layer = Layer::new(Source::Flag);
    layer.set(setting, value);
    layer
}

#[test]
fn a_later_layer_wins() {
    let file = Layer::<Table>::from_json(r#"{"node": {"name": "file"}}"#).expect("parses");
    let env = Layer::from_env(|name| (name == "TEST_NODE_NAME").then(|| "env".to_owned()));
    let merged = Merged::of(&[file.clone(), env.clone()]);
    assert_eq!(merged.parse(keys::NAME, None, text), Ok("env".to_owned()));
    let merged = Merged::of(&[file, env, flag(keys::NAME, "flag")]);
    assert_eq!(merged.parse(keys::NAME, None, text), Ok("flag".to_owned()));
}

#[test]
fn an_unset_setting_takes_its_default() {
    let merged = Merged::of::<Table>(&[]);
    assert_eq!(
        merged.parse(keys::NAME, Some("default".to_owned()), text),
        Ok("default".to_owned())
    );
    assert_eq!(merged.origin(keys::NAME), "");
}

#[test]
fn a_required_setting_says_where_to_set_it() {
    let error = Merged::of::<Table>(&[])
        .parse(keys::NAME, None, text)
        .expect_err("required");
    assert_eq!(
        error.to_string(),
        "invalid configuration: node.name: required: set it in the config file, TEST_NODE_NAME or --name"
    );
}

#[test]
fn a_bad_value_names_its_source() {
    let refuse = |value: &str| -> Result<String, String> { Err(format!("{value:?} is bad")) };
    let file = Layer::<Table>::from_json(r#"{"node": {"name": "x"}}"#).expect("parses");
    let env = Layer::<Table>::from_env(|_| Some("y".to_owned()));
    let cases = [
        (file, "node.name (from the config file): \"x\" is bad"),
        (env, "node.name (from TEST_NODE_NAME): \"y\" is bad"),
        (
            flag(keys::NAME, "z"),
            "node.name (from --name): \"z\" is bad",
        ),
    ];
    for (layer, expected) in cases {
        let error = Merged::of(&[layer])
            .parse(keys::NAME, None, refuse)
            .expect_err("refused");
        assert_eq!(
            error.to_string(),
            format!("invalid configuration: {expected}")
        );
    }
}

#[test]
fn an_unknown_file_key_is_refused() {
    let error = Layer::<Table>::from_json(r#"{"node": {"nmae": "x"}}"#).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "invalid configuration: config file: unknown setting \"node.nmae\""
    );
}

#[test]
fn a_file_section_must_be_an_object() {
    let error = Layer::<Table>::from_json(r#"{"node": 1}"#).expect_err("refused");
    assert_eq!(error.reason, "section \"node\" must be an object");
}

#[test]
fn a_list_in_the_file_is_taken_only_where_the_table_says() {
    let layer =
        Layer::<Table>::from_json(r#"{"list": {"items": ["a", "b"]}}"#).expect("a list of strings");
    let merged = Merged::of(&[layer]);
    assert_eq!(merged.parse(keys::ITEMS, None, text), Ok("a,b".to_owned()));
    let error = Layer::<Table>::from_json(r#"{"node": {"name": ["a"]}}"#).expect_err("no list");
    assert_eq!(
        error.to_string(),
        "invalid configuration: node.name (from the config file): unexpected value [\"a\"]"
    );
}

#[test]
fn durations_take_ms_s_and_m_and_never_zero() {
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert!(parse_duration("0s").is_err());
    assert!(parse_duration("5").is_err());
    assert!(parse_duration("1h").is_err());
}

#[test]
fn an_address_of_only_a_port_listens_on_every_interface() {
    assert_eq!(
        parse_addr(":7942"),
        Ok("0.0.0.0:7942".parse().expect("addr"))
    );
    assert_eq!(
        parse_addr("localhost:1"),
        Err("\"localhost:1\" is not an ip:port address".to_owned())
    );
}

/// Settings of the shared parsers' tests, each with a help line.
mod bounded {
    crate::settings! {
        pub(super),
        COUNT = "node.count", "TEST_NODE_COUNT", "count", "1 to 9: node.count";
        LEVEL = "log.level", "TEST_LOG_LEVEL", "log-level", "debug, info, warn or error";
        FORMAT = "log.format", "TEST_LOG_FORMAT", "log-format", "json or text";
        DIR = "storage.data_dir", "TEST_DATA_DIR", "data-dir", "Data directory";
    }
}

#[derive(Debug, Clone)]
struct Bounded;

impl Settings for Bounded {
    const ALL: &'static [Setting] = bounded::ALL;
}

fn count(value: &str) -> Result<u8, String> {
    parse_within(value, 1..=9, "a count")
}

#[test]
fn a_help_line_is_kept_and_may_be_left_out() {
    assert_eq!(bounded::COUNT.help, "1 to 9: node.count");
    assert_eq!(keys::NAME.help, "");
}

#[test]
fn the_flag_wins_over_the_environment_and_the_environment_over_the_file() {
    let file = Layer::<Bounded>::from_json(r#"{"node": {"count": 1}}"#).expect("parses");
    let env = Layer::<Bounded>::from_env(|name| (name == "TEST_NODE_COUNT").then(|| "2".into()));
    let mut flags = Layer::<Bounded>::new(Source::Flag);
    flags.set(bounded::COUNT, "3");
    let merged = Merged::of(&[file.clone(), env.clone(), flags]);
    assert_eq!(merged.parse(bounded::COUNT, None, count), Ok(3));
    assert_eq!(merged.origin(bounded::COUNT), " (from --count)");
    let merged = Merged::of(&[file, env]);
    assert_eq!(merged.parse(bounded::COUNT, None, count), Ok(2));
    assert_eq!(merged.origin(bounded::COUNT), " (from TEST_NODE_COUNT)");
}

#[test]
fn a_number_within_bounds_takes_both_ends() {
    assert_eq!(count("1"), Ok(1));
    assert_eq!(count("9"), Ok(9));
}

#[test]
fn a_number_out_of_bounds_is_refused_naming_the_bounds() {
    assert_eq!(
        count("0"),
        Err("\"0\" is not a count from 1 to 9".to_owned())
    );
    assert_eq!(
        count("10"),
        Err("\"10\" is not a count from 1 to 9".to_owned())
    );
    assert_eq!(
        count("x"),
        Err("\"x\" is not a count from 1 to 9".to_owned())
    );
}

#[test]
fn a_value_out_of_bounds_names_the_setting_and_each_source() {
    let file = Layer::<Bounded>::from_json(r#"{"node": {"count": 10}}"#).expect("parses");
    let env = Layer::<Bounded>::from_env(|name| (name == "TEST_NODE_COUNT").then(|| "0".into()));
    let mut flags = Layer::<Bounded>::new(Source::Flag);
    flags.set(bounded::COUNT, "99");
    let cases = [
        (file, "(from the config file): \"10\""),
        (env, "(from TEST_NODE_COUNT): \"0\""),
        (flags, "(from --count): \"99\""),
    ];
    for (layer, expected) in cases {
        let error = Merged::of(&[layer])
            .parse(bounded::COUNT, Some(1), count)
            .expect_err("out of bounds");
        assert_eq!(
            error.to_string(),
            format!("invalid configuration: node.count {expected} is not a count from 1 to 9")
        );
    }
}

#[test]
fn milliseconds_within_bounds_are_a_duration() {
    assert_eq!(
        parse_millis_within("1000", 1_000, 60_000),
        Ok(Duration::from_secs(1))
    );
    assert_eq!(
        parse_millis_within("999", 1_000, 60_000),
        Err("\"999\" is not a number of milliseconds from 1000 to 60000".to_owned())
    );
}

#[test]
fn zero_milliseconds_turn_a_setting_off_and_others_start_at_the_floor() {
    assert_eq!(parse_off_or_millis_from("0", 60_000), Ok(None));
    assert_eq!(
        parse_off_or_millis_from("60000", 60_000),
        Ok(Some(Duration::from_secs(60)))
    );
    assert_eq!(
        parse_off_or_millis_from("59999", 60_000),
        Err("\"59999\" is not 0 (off) or a number of milliseconds from 60000".to_owned())
    );
}

#[test]
fn a_positive_number_refuses_zero() {
    assert_eq!(parse_positive::<u64>("1", "log entries"), Ok(1));
    assert_eq!(
        parse_positive::<u64>("0", "log entries"),
        Err("\"0\" is not a positive number of log entries".to_owned())
    );
}

#[test]
fn a_number_that_does_not_parse_says_what_it_counts() {
    assert_eq!(parse_number::<u64>("7", "a number of log entries"), Ok(7));
    assert_eq!(
        parse_number::<u64>("-1", "a number of log entries"),
        Err("\"-1\" is not a number of log entries".to_owned())
    );
}

#[test]
fn logging_and_the_data_dir_default_to_the_spec() {
    let merged = Merged::of::<Bounded>(&[]);
    assert_eq!(
        merged.logging(bounded::LEVEL, bounded::FORMAT),
        Ok(("info".to_owned(), "json".to_owned()))
    );
    assert_eq!(merged.data_dir(bounded::DIR), Ok(PathBuf::from("data")));
}

#[test]
fn a_bad_log_level_or_empty_data_dir_names_its_source() {
    let mut flags = Layer::<Bounded>::new(Source::Flag);
    flags.set(bounded::LEVEL, "loud");
    flags.set(bounded::DIR, "");
    let merged = Merged::of(&[flags]);
    assert_eq!(
        merged
            .logging(bounded::LEVEL, bounded::FORMAT)
            .map_err(|e| e.to_string()),
        Err(
            "invalid configuration: log.level (from --log-level): \"loud\" is not one of debug, info, warn, error"
                .to_owned()
        )
    );
    assert_eq!(
        merged.data_dir(bounded::DIR).map_err(|e| e.to_string()),
        Err(
            "invalid configuration: storage.data_dir (from --data-dir): must not be empty"
                .to_owned()
        )
    );
}

mod with_shared {
    crate::settings! {
        pub(super),
        NAME = "node.name", "TEST_NODE_NAME", "name";
        LEVEL = shared::LOG_LEVEL;
    }
}

#[test]
fn a_table_may_name_a_shared_setting_in_its_place() {
    assert_eq!(with_shared::LEVEL, shared::LOG_LEVEL);
    assert_eq!(with_shared::ALL, [with_shared::NAME, shared::LOG_LEVEL]);
}
