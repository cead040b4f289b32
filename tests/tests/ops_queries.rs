//! Every series the Grafana dashboards (`ops/grafana/*.json`) and the alert
//! rules (`ops/prometheus/narad-alerts.yml`) query is one `/metrics`
//! serves: listed as served in `ops/metrics.tsv` (which
//! `tests/metrics_list.rs` checks against a live `narad dev`). A series
//! listed as not served may appear only in a panel whose description holds
//! `[not built: <feature>]`, or a rule annotated `not_built: <feature>`,
//! naming the feature the list gives for it. A series served only under a
//! condition `narad dev` does not meet (`served-when`) may be queried
//! unmarked: where the condition holds, it is there.

use std::collections::BTreeMap;

use narad_tests::metrics_list::{Listed, Status, load_list, promql_series, repo_root};

/// One query and where it sits.
struct Query {
    place: String,
    expr: String,
    /// The feature its panel or rule says is not built.
    not_built: Option<String>,
}

fn check(queries: &[Query], list: &BTreeMap<String, Listed>) -> Vec<String> {
    let mut problems = Vec::new();
    for query in queries {
        let names = promql_series(&query.expr, list);
        if names.is_empty() {
            problems.push(format!(
                "{}: reads no Narad series: {}",
                query.place, query.expr
            ));
        }
        for name in names {
            match list.get(&name).map(|listed| &listed.status) {
                Some(Status::Served | Status::ServedWhen { .. }) => {}
                Some(Status::NotServed { feature }) => {
                    if query.not_built.as_deref() != Some(feature.as_str()) {
                        problems.push(format!(
                            "{}: {name} is not served yet (feature {feature}) but the query is not marked not built: {feature}",
                            query.place
                        ));
                    }
                }
                None => problems.push(format!("{}: {name} is not in ops/metrics.tsv", query.place)),
            }
        }
    }
    problems
}

/// `[not built: <feature>]` in a panel description.
fn panel_marker(description: &str) -> Option<String> {
    let start = description.find("[not built: ")? + "[not built: ".len();
    let end = description[start..].find(']')? + start;
    Some(description[start..end].trim().to_owned())
}

fn dashboard_queries(file: &str) -> Vec<Query> {
    let path = repo_root().join("ops").join("grafana").join(file);
    let text = std::fs::read_to_string(&path).expect("dashboard readable");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let mut queries = Vec::new();
    let mut panels: Vec<&serde_json::Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(panel) = panels.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            panels.extend(nested);
        }
        let title = panel["title"].as_str().unwrap_or("?");
        let not_built = panel["description"].as_str().and_then(panel_marker);
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                queries.push(Query {
                    place: format!("{file} panel {title:?}"),
                    expr: expr.to_owned(),
                    not_built: not_built.clone(),
                });
            }
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(expr) = variable["query"]["query"].as_str() {
            queries.push(Query {
                place: format!("{file} variable {}", variable["name"]),
                expr: expr.to_owned(),
                not_built: None,
            });
        }
    }
    assert!(!queries.is_empty(), "{file} has queries");
    queries
}

/// The rules file's `expr:` lines with their rule's `not_built:`
/// annotation; every expression is one line (the file keeps to that, and
/// this test fails on a rule whose expression it cannot find).
fn rule_queries() -> Vec<Query> {
    let path = repo_root()
        .join("ops")
        .join("prometheus")
        .join("narad-alerts.yml");
    let text = std::fs::read_to_string(&path).expect("rules readable");
    let mut queries: Vec<Query> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("- alert:") {
            queries.push(Query {
                place: format!("alert {}", name.trim()),
                expr: String::new(),
                not_built: None,
            });
        } else if let Some(expr) = line.strip_prefix("expr:") {
            let rule = queries.last_mut().expect("expr inside a rule");
            assert!(
                rule.expr.is_empty() && !expr.trim().is_empty() && expr.trim() != "|",
                "{}: one single-line expr",
                rule.place
            );
            rule.expr = expr.trim().to_owned();
        } else if let Some(feature) = line.strip_prefix("not_built:") {
            let rule = queries.last_mut().expect("annotation inside a rule");
            rule.not_built = Some(feature.trim().trim_matches('"').to_owned());
        }
    }
    assert!(!queries.is_empty(), "the rules file has rules");
    queries
}

#[test]
fn dashboards_query_only_served_series_or_mark_the_feature_not_built() {
    let list = load_list();
    let mut problems = Vec::new();
    for file in ["narad-node.json", "narad-cluster.json"] {
        problems.extend(check(&dashboard_queries(file), &list));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn alert_rules_query_only_served_series_or_mark_the_feature_not_built() {
    let list = load_list();
    let queries = rule_queries();
    let problems = check(&queries, &list);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The alerts of spec §9 are all there.
    for series in [
        "narad_fanout_child_dropped_messages",
        "narad_consumer_corrupt_skipped_total",
        "narad_consumer_dropped_messages",
        "narad_fanout_due_lag_seconds",
        "narad_data_dir_available_bytes",
        "narad_ingress_wal_failed",
        "narad_quarantined_copies",
        "narad_moves_blocked",
        "narad_raft_tls_cert_not_after_seconds",
    ] {
        assert!(
            queries
                .iter()
                .any(|query| promql_series(&query.expr, &list).contains(series)),
            "no alert on {series}"
        );
    }
}

#[test]
fn an_unmarked_query_of_a_series_not_served_is_refused() {
    let list = load_list();
    let unmarked = Query {
        place: "example".into(),
        expr: "narad_orphan_topic_dirs > 0".into(),
        not_built: None,
    };
    let wrongly_marked = Query {
        not_built: Some("remote-children".into()),
        ..unmarked_clone(&unmarked)
    };
    let unknown = Query {
        expr: "narad_no_such_series".into(),
        ..unmarked_clone(&unmarked)
    };
    assert_eq!(check(&[unmarked, wrongly_marked, unknown], &list).len(), 3);
}

fn unmarked_clone(query: &Query) -> Query {
    Query {
        place: query.place.clone(),
        expr: query.expr.clone(),
        not_built: None,
    }
}
