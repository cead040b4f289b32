//! The repository's list of metric series (`ops/metrics.tsv`), a parser of
//! the Prometheus text format down to (name, label keys), and a tokenizer
//! that finds the series a PromQL expression reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Suffixes of a histogram's series.
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// Whether a listed series is served now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// `/metrics` serves it.
    Served,
    /// Not served yet, waiting for the named feature.
    NotServed {
        /// What it waits for (the list's feature column).
        feature: String,
    },
    /// Served only by a node configured for the named condition, which
    /// `narad dev` never is (the list's feature column): a test that runs
    /// nodes so configured checks it.
    ServedWhen {
        /// The condition (`cluster-tls`: nodes with cluster TLS files).
        condition: String,
    },
}

/// One row of the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// `counter`, `gauge` or `histogram`.
    pub kind: String,
    /// Its label keys.
    pub labels: BTreeSet<String>,
    /// Served or not.
    pub status: Status,
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `ops/metrics.tsv`, by series name.
///
/// # Panics
/// If the file is missing or a row is malformed or repeated.
pub fn load_list() -> BTreeMap<String, Listed> {
    let path = repo_root().join("ops").join("metrics.tsv");
    let text = std::fs::read_to_string(&path).expect("ops/metrics.tsv is readable");
    parse_list(&text)
}

/// Parses the list's text (see [`load_list`]).
///
/// # Panics
/// On a malformed or repeated row.
pub fn parse_list(text: &str) -> BTreeMap<String, Listed> {
    let mut list = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(
            fields.len(),
            6,
            "line {}: six tab-separated fields",
            number + 1
        );
        let [name, kind, labels, status, feature, _note] = fields[..] else {
            unreachable!("six fields")
        };
        assert!(
            ["counter", "gauge", "histogram"].contains(&kind),
            "line {}: type {kind}",
            number + 1
        );
        let labels = if labels == "-" {
            BTreeSet::new()
        } else {
            labels.split(',').map(str::to_owned).collect()
        };
        let status = match (status, feature) {
            ("served", "-") => Status::Served,
            ("not-served", feature) if feature != "-" && !feature.is_empty() => Status::NotServed {
                feature: feature.to_owned(),
            },
            ("served-when", condition) if condition != "-" && !condition.is_empty() => {
                Status::ServedWhen {
                    condition: condition.to_owned(),
                }
            }
            _ => panic!(
                "line {}: status {status} with feature {feature}: served takes '-', not-served and served-when name a feature",
                number + 1
            ),
        };
        let listed = Listed {
            kind: kind.to_owned(),
            labels,
            status,
        };
        assert!(
            list.insert(name.to_owned(), listed).is_none(),
            "line {}: {name} listed twice",
            number + 1
        );
    }
    list
}

/// One family of an exposition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Family {
    /// Its `# TYPE` (`untyped` when none is given).
    pub kind: String,
    /// Every set of label keys its samples carry.
    pub label_sets: BTreeSet<BTreeSet<String>>,
}

/// The families of a Prometheus text exposition: each name (a histogram or
/// summary by its base name) with its type and every set of label keys its
/// samples carry (`le` of a bucket and `quantile` left out).
pub fn exposed_families(text: &str) -> BTreeMap<String, Family> {
    let types: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name, kind.trim()))
        .collect();
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let sample = &line[..name_end];
        let mut keys = if line[name_end..].starts_with('{') {
            label_keys(&line[name_end + 1..])
        } else {
            BTreeSet::new()
        };
        let base = HISTOGRAM_SUFFIXES
            .iter()
            .find_map(|suffix| {
                sample
                    .strip_suffix(suffix)
                    .filter(|base| matches!(types.get(base), Some(&"histogram") | Some(&"summary")))
            })
            .unwrap_or(sample);
        keys.remove("le");
        keys.remove("quantile");
        let family = families.entry(base.to_owned()).or_default();
        family.kind = types.get(base).unwrap_or(&"untyped").to_string();
        family.label_sets.insert(keys);
    }
    families
}

/// The keys of `a="x",b="y"}...`, values skipped with their escapes.
fn label_keys(rest: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut chars = rest.chars().peekable();
    loop {
        let key: String = chars
            .by_ref()
            .take_while(|c| *c != '=' && *c != '}')
            .collect();
        let key = key.trim().trim_start_matches(',').trim();
        if key.is_empty() {
            return keys;
        }
        keys.insert(key.to_owned());
        // The quoted value.
        if chars.next() != Some('"') {
            return keys;
        }
        let mut escaped = false;
        for c in chars.by_ref() {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => break,
                _ => {}
            }
        }
        match chars.peek() {
            Some(',') => {
                chars.next();
            }
            _ => return keys,
        }
    }
}

/// The metric names a PromQL expression reads: identifiers starting with
/// `narad_` or `process_` outside string literals, a histogram's
/// `_bucket`/`_sum`/`_count` series mapped to its base name when `list`
/// holds that base as a histogram.
pub fn promql_series(expr: &str, list: &BTreeMap<String, Listed>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c == '"' || c == '\'' || c == '`' {
            let mut escaped = false;
            for (_, inner) in chars.by_ref() {
                match (escaped, inner) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, quote) if quote == c => break,
                    _ => {}
                }
            }
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some(&(at, next)) = chars.peek() {
            if next.is_ascii_alphanumeric() || next == '_' || next == ':' {
                end = at + next.len_utf8();
                chars.next();
            } else {
                break;
            }
        }
        let ident = &expr[start..end];
        // A `$variable` of Grafana is not a series.
        let after_dollar = expr[..start].ends_with('$');
        if after_dollar || !(ident.starts_with("narad_") || ident.starts_with("process_")) {
            continue;
        }
        let base = HISTOGRAM_SUFFIXES
            .iter()
            .find_map(|suffix| {
                ident
                    .strip_suffix(suffix)
                    .filter(|base| list.get(*base).is_some_and(|l| l.kind == "histogram"))
            })
            .unwrap_or(ident);
        names.insert(base.to_owned());
    }
    names
}

/// Every series the list marks `served-when` `condition` is in the
/// Prometheus `text`, with its listed type and label keys; `what` names
/// the scrape in a failure.
///
/// # Panics
/// When one is missing or differs, or the list has none for `condition`.
pub fn assert_served_when(text: &str, condition: &str, what: &str) {
    let scraped = exposed_families(text);
    let listed: Vec<_> = load_list()
        .into_iter()
        .filter(|(_, listed)| {
            listed.status
                == Status::ServedWhen {
                    condition: condition.into(),
                }
        })
        .collect();
    assert!(!listed.is_empty(), "the list has {condition} series");
    for (name, listed) in listed {
        let family = scraped
            .get(&name)
            .unwrap_or_else(|| panic!("{what}: {name} is not on /metrics\n{text}"));
        assert_eq!(family.kind, listed.kind, "{what}: {name}");
        assert_eq!(
            family.label_sets,
            BTreeSet::from([listed.labels.clone()]),
            "{what}: {name}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_take_histograms_by_base_name_and_keys_without_le() {
        let text = "# TYPE narad_x_seconds histogram\n\
                    narad_x_seconds_bucket{topic=\"a,b\",le=\"0.1\"} 1\n\
                    narad_x_seconds_sum{topic=\"a\\\"\"} 1\n\
                    narad_x_seconds_count{topic=\"a\"} 1\n\
                    narad_y_count 3\n\
                    process_open_fds 7\n";
        let families = exposed_families(text);
        let topic: BTreeSet<String> = ["topic".to_owned()].into();
        assert_eq!(families["narad_x_seconds"].label_sets, [topic].into());
        assert_eq!(families["narad_x_seconds"].kind, "histogram");
        assert!(families.contains_key("narad_y_count"));
        assert_eq!(
            families["process_open_fds"].label_sets,
            [BTreeSet::new()].into()
        );
    }

    #[test]
    fn promql_names_skip_strings_labels_and_functions() {
        let list = parse_list(
            "narad_h_seconds\thistogram\t-\tserved\t-\tn\nnarad_c_total\tcounter\ttopic\tserved\t-\tn\n",
        );
        let names = promql_series(
            "histogram_quantile(0.99, sum by (le) (rate(narad_h_seconds_bucket{topic=~\"narad_not_a_series\"}[$__rate_interval]))) / on(topic) narad_c_total + $narad_var",
            &list,
        );
        let expected: BTreeSet<String> =
            ["narad_h_seconds".to_owned(), "narad_c_total".to_owned()].into();
        assert_eq!(names, expected);
    }
}
