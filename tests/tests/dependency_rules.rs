//! The real workspace obeys the architecture's dependency rules.

use narad_tests::dependency_rules::{graph_from_metadata, violations};

#[test]
fn workspace_dependencies_follow_the_architecture() {
    let metadata = cargo_metadata::MetadataCommand::new()
        .manifest_path(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
        .no_deps()
        .exec()
        .expect("cargo metadata runs");
    let graph = graph_from_metadata(&metadata);
    assert!(
        graph.contains_key("narad"),
        "the binary crate is part of the workspace"
    );
    let broken = violations(&graph);
    assert!(
        broken.is_empty(),
        "dependency rules broken:\n{}",
        broken.join("\n")
    );
}
