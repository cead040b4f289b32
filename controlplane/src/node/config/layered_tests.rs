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
