//! The dependency rules of the architecture (§2), as a check over the
//! workspace's dependency graph.
//!
//! - `narad-clock` (the one clock, monotonic and wall) depends on no
//!   workspace crate;
//! - `narad-disk` depends on no workspace crate;
//! - `narad-wal` and `narad-plog` depend on `narad-disk` and
//!   `narad-clock` only;
//! - `narad-protocol` depends on no workspace crate;
//! - `narad-meta` (the metastore both planes share) depends on
//!   `narad-protocol` only;
//! - `narad-controlplane` depends on `narad-protocol`, `narad-meta` and
//!   `narad-clock` only;
//! - `narad-remotes` (sealing, the outbound client, shipping to another
//!   cluster) depends on `narad-clock` only;
//! - `narad-dataplane` depends on `narad-protocol`, `narad-meta`,
//!   `narad-wal`, `narad-plog`, `narad-disk`, `narad-remotes` and
//!   `narad-clock` only;
//! - no crate but `narad` (the binary) links both planes, directly or
//!   through other crates.
//!
//! Every kind of dependency counts (normal, build and dev), so a test-only
//! shortcut through the other plane is refused too.

use std::collections::{BTreeMap, BTreeSet};

/// Crate names, as in each member's `Cargo.toml`.
pub const CLOCK: &str = "narad-clock";
pub const DISK: &str = "narad-disk";
pub const WAL: &str = "narad-wal";
pub const PLOG: &str = "narad-plog";
pub const PROTOCOL: &str = "narad-protocol";
pub const META: &str = "narad-meta";
pub const CONTROLPLANE: &str = "narad-controlplane";
pub const DATAPLANE: &str = "narad-dataplane";
pub const REMOTES: &str = "narad-remotes";
/// The one crate allowed to link both planes.
pub const BINARY: &str = "narad";

/// Workspace crates each restricted crate may depend on directly.
pub fn allowed_direct_dependencies() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    BTreeMap::from([
        (CLOCK, BTreeSet::new()),
        (DISK, BTreeSet::new()),
        (PROTOCOL, BTreeSet::new()),
        (META, BTreeSet::from([PROTOCOL])),
        (WAL, BTreeSet::from([DISK, CLOCK])),
        (PLOG, BTreeSet::from([DISK, CLOCK])),
        (CONTROLPLANE, BTreeSet::from([PROTOCOL, META, CLOCK])),
        (REMOTES, BTreeSet::from([CLOCK])),
        (
            DATAPLANE,
            BTreeSet::from([PROTOCOL, META, WAL, PLOG, DISK, REMOTES, CLOCK]),
        ),
    ])
}

/// The workspace's internal dependency graph: each member and the workspace
/// members it depends on directly.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every broken rule, described in a sentence; empty when the graph is clean.
pub fn violations(graph: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for (krate, allowed) in allowed_direct_dependencies() {
        let Some(dependencies) = graph.get(krate) else {
            found.push(format!("{krate} is missing from the workspace"));
            continue;
        };
        for dependency in dependencies {
            if !allowed.contains(dependency.as_str()) {
                found.push(format!("{krate} must not depend on {dependency}"));
            }
        }
    }
    for krate in graph.keys() {
        if krate == BINARY {
            continue;
        }
        let reach = reachable(graph, krate);
        if reach.contains(CONTROLPLANE) && reach.contains(DATAPLANE) {
            found.push(format!("{krate} links both planes; only {BINARY} may"));
        }
    }
    found
}

/// The crates `start` depends on, directly or not, including itself.
fn reachable(graph: &Graph, start: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![start.to_string()];
    while let Some(krate) = stack.pop() {
        if seen.insert(krate.clone())
            && let Some(next) = graph.get(&krate)
        {
            stack.extend(next.iter().cloned());
        }
    }
    seen
}

/// Builds the graph from `cargo metadata` output.
pub fn graph_from_metadata(metadata: &cargo_metadata::Metadata) -> Graph {
    let members: BTreeSet<String> = metadata
        .workspace_packages()
        .iter()
        .map(|package| package.name.to_string())
        .collect();
    metadata
        .workspace_packages()
        .iter()
        .map(|package| {
            let internal = package
                .dependencies
                .iter()
                .map(|dependency| dependency.name.clone())
                .filter(|name| members.contains(name))
                .collect();
            (package.name.to_string(), internal)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean_graph() -> Graph {
        let edges: &[(&str, &[&str])] = &[
            (CLOCK, &[]),
            (DISK, &[]),
            (PROTOCOL, &[]),
            (META, &[PROTOCOL]),
            (WAL, &[DISK, CLOCK]),
            (PLOG, &[DISK, CLOCK]),
            (CONTROLPLANE, &[PROTOCOL, META, CLOCK]),
            (REMOTES, &[CLOCK]),
            (
                DATAPLANE,
                &[PROTOCOL, META, WAL, PLOG, DISK, REMOTES, CLOCK],
            ),
            (BINARY, &[CONTROLPLANE, DATAPLANE, CLOCK]),
            ("narad-bench", &[DISK, WAL, CLOCK]),
        ];
        edges
            .iter()
            .map(|(krate, deps)| {
                (
                    krate.to_string(),
                    deps.iter().map(|dep| dep.to_string()).collect(),
                )
            })
            .collect()
    }

    fn add_edge(graph: &mut Graph, from: &str, to: &str) {
        graph
            .entry(from.to_string())
            .or_default()
            .insert(to.to_string());
    }

    #[test]
    fn the_architecture_graph_is_clean() {
        assert_eq!(violations(&clean_graph()), Vec::<String>::new());
    }

    #[test]
    fn dataplane_depending_on_controlplane_is_refused() {
        let mut graph = clean_graph();
        add_edge(&mut graph, DATAPLANE, CONTROLPLANE);
        let found = violations(&graph);
        assert!(found.contains(&"narad-dataplane must not depend on narad-controlplane".into()));
        assert!(found.contains(&"narad-dataplane links both planes; only narad may".into()));
    }

    #[test]
    fn disk_depending_on_any_workspace_crate_is_refused() {
        let mut graph = clean_graph();
        add_edge(&mut graph, DISK, PROTOCOL);
        assert_eq!(
            violations(&graph),
            vec!["narad-disk must not depend on narad-protocol"]
        );
    }

    #[test]
    fn the_clock_depending_on_any_workspace_crate_is_refused() {
        let mut graph = clean_graph();
        add_edge(&mut graph, CLOCK, DISK);
        assert_eq!(
            violations(&graph),
            vec!["narad-clock must not depend on narad-disk"]
        );
    }

    #[test]
    fn the_metastore_depending_on_a_plane_is_refused() {
        let mut graph = clean_graph();
        add_edge(&mut graph, META, DATAPLANE);
        // Through the shared model, the control plane would link both.
        assert_eq!(
            violations(&graph),
            vec![
                format!("{META} must not depend on {DATAPLANE}"),
                format!("{CONTROLPLANE} links both planes; only {BINARY} may"),
            ]
        );
    }

    #[test]
    fn a_crate_linking_both_planes_through_others_is_refused() {
        let mut graph = clean_graph();
        add_edge(&mut graph, "narad-bench", CONTROLPLANE);
        add_edge(&mut graph, "narad-bench", DATAPLANE);
        assert_eq!(
            violations(&graph),
            vec!["narad-bench links both planes; only narad may"]
        );
    }

    #[test]
    fn a_missing_restricted_crate_is_reported() {
        let mut graph = clean_graph();
        graph.remove(WAL);
        assert_eq!(
            violations(&graph),
            vec!["narad-wal is missing from the workspace"]
        );
    }
}
