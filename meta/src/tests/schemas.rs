//! Schema versions (spec §1.3, alter `schema`).

use super::*;

fn with_topic() -> Store {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    store
}

fn add(store: &mut Store, document: &str) -> Result<Outcome, MetastoreError> {
    store.apply(Command::AddSchemaVersion(add_schema("orders", document)))
}

#[test]
fn a_schema_given_at_create_is_version_1() {
    let mut store = Store::new();
    let command = CreateTopic {
        schema: Some("true".into()),
        ..create("orders")
    };
    store.ok(Command::CreateTopic(command));
    let versions = &store.topic("orders").schemas;
    assert_eq!(
        versions,
        &vec![SchemaVersion {
            version: 1,
            document: "true".into()
        }]
    );
}

#[test]
fn versions_are_numbered_consecutively_from_1() {
    let mut store = with_topic();
    assert_eq!(store.topic("orders").schema_version(), 0);
    add(&mut store, "true").unwrap();
    add(&mut store, "{}").unwrap();
    let numbers: Vec<u32> = store
        .topic("orders")
        .schemas
        .iter()
        .map(|s| s.version)
        .collect();
    assert_eq!(numbers, vec![1, 2]);
}

#[test]
fn an_identical_schema_is_a_no_op() {
    let mut store = with_topic();
    add(&mut store, "true").unwrap();
    let versions = store.meta.versions();
    assert_eq!(add(&mut store, "true"), Ok(Outcome::Unchanged));
    assert_eq!(store.topic("orders").schema_version(), 1);
    assert_eq!(store.meta.versions(), versions);
}

#[test]
fn a_base_version_that_is_not_current_is_a_schema_version_conflict() {
    let mut store = with_topic();
    add(&mut store, "true").unwrap();
    let command = AddSchemaVersion {
        base_version: Some(0),
        ..add_schema("orders", "{}")
    };
    let error = store.apply(Command::AddSchemaVersion(command)).unwrap_err();
    assert!(error.to_string().starts_with("schema version conflict"));
    assert_eq!(error.status(), 409);
}

#[test]
fn a_base_version_that_is_current_applies() {
    let mut store = with_topic();
    add(&mut store, "true").unwrap();
    let command = AddSchemaVersion {
        base_version: Some(1),
        ..add_schema("orders", "{}")
    };
    store.ok(Command::AddSchemaVersion(command));
}

#[test]
fn an_empty_document_is_refused() {
    let mut store = with_topic();
    assert_eq!(add(&mut store, " "), Err(MetastoreError::SchemaEmpty));
}

#[test]
fn a_document_over_256_kib_is_refused() {
    let mut store = with_topic();
    let document = format!("\"{}\"", "x".repeat(256 * 1024));
    let error = add(&mut store, &document).unwrap_err();
    assert!(matches!(error, MetastoreError::SchemaTooLarge { .. }));
    assert_eq!(error.status(), 400);
}

#[test]
fn a_topic_keeps_at_most_1000_versions() {
    let mut store = with_topic();
    for n in 0..1_000 {
        add(&mut store, &n.to_string()).unwrap();
    }
    let error = add(&mut store, "1000").unwrap_err();
    assert_eq!(
        (error.status(), error),
        (409, MetastoreError::SchemaVersionsFull)
    );
}

#[test]
fn a_topic_history_is_limited_to_4_mib() {
    let mut store = with_topic();
    let big = |n: usize| format!("{n:0>8}{}", " ".repeat(256 * 1024 - 8));
    for n in 0..16 {
        add(&mut store, &big(n)).unwrap();
    }
    let error = add(&mut store, "1").unwrap_err();
    assert_eq!(
        (error.status(), error),
        (409, MetastoreError::SchemaTopicBudget)
    );
}

#[test]
fn a_child_schema_is_managed_by_its_parent() {
    let mut store = Store::new();
    store.ok(create_cmd("parent"));
    store.ok(Command::CreateTopic(CreateTopic {
        parent: Some(link("parent")),
        ..create("child")
    }));
    let error = store
        .apply(Command::AddSchemaVersion(add_schema("child", "true")))
        .unwrap_err();
    assert_eq!(
        (error.status(), error),
        (409, MetastoreError::SchemaManaged)
    );
}

#[test]
fn a_parent_schema_version_reaches_every_child() {
    let mut store = Store::new();
    store.ok(create_cmd("parent"));
    store.ok(Command::CreateTopic(CreateTopic {
        parent: Some(link("parent")),
        ..create("child")
    }));
    store.ok(Command::AddSchemaVersion(add_schema("parent", "true")));
    assert_eq!(store.topic("child").schema_version(), 1);
}

#[test]
fn a_schema_change_by_a_stale_reader_is_topic_changed() {
    let mut store = with_topic();
    let command = AddSchemaVersion {
        expected_id: Some(IncarnationId::from_bits(5)),
        ..add_schema("orders", "true")
    };
    let refused = store.apply(Command::AddSchemaVersion(command));
    assert_eq!(refused, Err(MetastoreError::TopicChanged));
}

#[test]
fn the_cluster_schema_budget_is_256_mib_inclusive() {
    // Filling 256 MiB through apply would cost that much memory in a unit
    // test, so the budget arithmetic `apply` uses is checked directly.
    use super::super::limits::SCHEMA_CLUSTER_BYTES_MAX;
    use super::super::rules::within_budget;
    assert_eq!(SCHEMA_CLUSTER_BYTES_MAX, 256 * 1024 * 1024);
    assert!(within_budget(
        SCHEMA_CLUSTER_BYTES_MAX - 10,
        10,
        SCHEMA_CLUSTER_BYTES_MAX
    ));
    assert!(!within_budget(
        SCHEMA_CLUSTER_BYTES_MAX - 10,
        11,
        SCHEMA_CLUSTER_BYTES_MAX
    ));
    assert!(!within_budget(u64::MAX, 1, SCHEMA_CLUSTER_BYTES_MAX));
    let error = MetastoreError::SchemaClusterBudget;
    assert_eq!(error.status(), 409);
    assert!(error.to_string().starts_with("schema byte budget exceeded"));
}
