//! A server's `/metrics` page (Prometheus text), read the way the runs need: every series of one
//! metric, by its labels.

use std::collections::BTreeMap;

/// Every series of the metric `name` in a Prometheus text page: its labels (`{…}`, or empty)
/// and value.
pub(crate) fn series(text: &str, name: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (labels, value) = match rest.as_bytes().first() {
                Some(b'{') => rest.split_at(rest.find('}')? + 1),
                Some(b' ') => ("", rest),
                _ => return None,
            };
            Some((labels.to_owned(), value.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

/// The sum of every series of the metric `name`, or `None` when the page has none.
pub(crate) fn total(text: &str, name: &str) -> Option<f64> {
    let series = series(text, name);
    (!series.is_empty()).then(|| series.values().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "\
# TYPE floodgate_keys gauge
floodgate_keys{store=\"memory\"} 10001
# TYPE floodgate_overflow_decisions_total counter
floodgate_overflow_decisions_total{rule=\"per_user\",result=\"denied\"} 9512
floodgate_overflow_decisions_total{rule=\"per_user\",result=\"allowed\"} 100
floodgate_keys_other 3
";

    #[test]
    fn series_are_read_by_exact_name_with_their_labels() {
        let keys = series(PAGE, "floodgate_keys");
        assert_eq!(keys.into_iter().collect::<Vec<_>>(), [("{store=\"memory\"}".to_owned(), 10001.0)]);
        let overflow = series(PAGE, "floodgate_overflow_decisions_total");
        assert_eq!(overflow.len(), 2);
        assert_eq!(overflow["{rule=\"per_user\",result=\"denied\"}"], 9512.0);
        assert!(
            series("# nothing here\nfloodgate_decisions_total 4\n", "floodgate_overflow_decisions_total")
                .is_empty()
        );
        assert_eq!(series("floodgate_keys 7 1700000000000\n", "floodgate_keys")[""], 7.0);
    }

    #[test]
    fn a_total_adds_the_series_and_is_none_without_them() {
        assert_eq!(total(PAGE, "floodgate_overflow_decisions_total"), Some(9612.0));
        assert_eq!(total(PAGE, "floodgate_missing"), None);
    }
}
