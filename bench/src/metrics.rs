//! Reading series out of a node's `/metrics` (Prometheus text format).

/// Every sample of metric `name` in `text`: its labels as written between
/// the braces (empty for a series without labels) and its value. Lines of
/// other metrics, including ones whose names start with `name`, and values
/// that do not parse are skipped.
pub fn series<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = match rest.as_bytes().first()? {
            b' ' => ("", rest),
            b'{' => rest[1..].split_once('}')?,
            _ => return None,
        };
        Some((labels, value.trim().parse::<f64>().ok()?))
    })
}

/// The value of label `key` in `labels` as [`series`] gives them.
pub fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name == key).then(|| value.trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# TYPE narad_acked_ahead_size gauge
narad_acked_ahead_size{topic=\"a\",partition=\"0\"} 17
narad_acked_ahead_size{topic=\"b\",partition=\"3\"} 1024
narad_acked_ahead_size_other{topic=\"a\"} 5
narad_dispatch_restarts_total 2
";

    #[test]
    fn series_picks_one_metric_with_its_labels_and_values() {
        let found: Vec<_> = series(TEXT, "narad_acked_ahead_size").collect();
        assert_eq!(
            found,
            [
                ("topic=\"a\",partition=\"0\"", 17.0),
                ("topic=\"b\",partition=\"3\"", 1024.0)
            ]
        );
        let bare: Vec<_> = series(TEXT, "narad_dispatch_restarts_total").collect();
        assert_eq!(bare, [("", 2.0)]);
    }

    #[test]
    fn label_reads_one_value_without_its_quotes() {
        let labels = "topic=\"b\",partition=\"3\"";
        assert_eq!(label(labels, "topic"), Some("b"));
        assert_eq!(label(labels, "partition"), Some("3"));
        assert_eq!(label(labels, "node"), None);
    }
}
