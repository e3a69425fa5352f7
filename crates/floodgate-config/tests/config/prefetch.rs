//! A rule's `prefetch: { batch, ttl }`: read onto the rule; refused with the field named on bad
//! values and on the algorithms where batch leases could not be exact.

use std::time::Duration;

use floodgate_config as config;

/// A one-rule configuration: `algorithm` with its parameters, then `prefetch` as given.
fn rule(algorithm: &str, prefetch: &str) -> String {
    format!("rules:\n  - name: hot\n    key: []\n{algorithm}\n    prefetch: {prefetch}\n")
}

const FIXED: &str = "    algorithm: fixed_window\n    limit: 100\n    window: 1s";

#[track_caller]
fn refused(text: &str, line: usize, field: &str, says: &str) {
    let err = config::parse("prefetch.yaml", text).expect_err("an invalid prefetch");
    assert_eq!(err.line, Some(line), "{}", err.message);
    assert_eq!(err.field.as_deref(), Some(field), "{}", err.message);
    assert!(err.message.contains(says), "{:?} does not say {says:?}", err.message);
}

#[test]
fn prefetch_is_read_onto_the_rule() {
    for algorithm in [
        FIXED,
        "    algorithm: sliding_window\n    limit: 100\n    window: 1m",
        "    algorithm: token_bucket\n    rate: 100/s\n    burst: 100",
        "    algorithm: quota\n    limit: 10000\n    period: day",
    ] {
        let config = config::parse("prefetch.yaml", &rule(algorithm, "{ batch: 20, ttl: 1s }")).unwrap();
        let rule = config.policy.rules().next().unwrap();
        let batch = rule.prefetch_batch().expect("the rule prefetches");
        assert_eq!((batch.size(), batch.ttl()), (20, Duration::from_secs(1)), "{algorithm}");
    }
    let plain = config::parse(
        "plain.yaml",
        "rules:\n  - name: r\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n",
    );
    assert_eq!(plain.unwrap().policy.rules().next().unwrap().prefetch_batch(), None);
}

#[test]
fn prefetch_changes_the_rule_fingerprint() {
    let a = config::parse("a.yaml", &rule(FIXED, "{ batch: 20, ttl: 1s }")).unwrap();
    let b = config::parse("b.yaml", &rule(FIXED, "{ batch: 10, ttl: 1s }")).unwrap();
    assert_ne!(a.fingerprints, b.fingerprints);
}

#[test]
fn prefetch_batch_below_two_is_refused() {
    refused(&rule(FIXED, "{ batch: 1, ttl: 1s }"), 7, "rules[0].prefetch.batch", "must be at least 2");
    refused(
        &rule(FIXED, "{ batch: many, ttl: 1s }"),
        7,
        "rules[0].prefetch.batch",
        "expected a whole number",
    );
}

#[test]
fn prefetch_ttl_must_be_a_positive_duration() {
    refused(&rule(FIXED, "{ batch: 20, ttl: 0s }"), 7, "rules[0].prefetch.ttl", "must be longer than 0");
    refused(&rule(FIXED, "{ batch: 20, ttl: soon }"), 7, "rules[0].prefetch.ttl", "invalid prefetch ttl");
}

#[test]
fn prefetch_needs_batch_and_ttl_and_nothing_else() {
    refused(&rule(FIXED, "{ ttl: 1s }"), 7, "rules[0].prefetch.batch", "prefetch needs batch");
    refused(&rule(FIXED, "{ batch: 20 }"), 7, "rules[0].prefetch.ttl", "prefetch needs ttl");
    refused(
        &rule(FIXED, "{ batch: 20, ttl: 1s, size: 3 }"),
        7,
        "rules[0].prefetch.size",
        "unknown field \"size\"",
    );
    refused(&rule(FIXED, "20"), 7, "rules[0].prefetch", "prefetch");
}

#[test]
fn prefetch_is_refused_where_it_could_not_be_exact() {
    let concurrency = "    algorithm: concurrency\n    limit: 10\n    lease: 30s";
    refused(
        &rule(concurrency, "{ batch: 5, ttl: 1s }"),
        7,
        "rules[0].prefetch",
        "not available for the concurrency",
    );
    let log = "    algorithm: sliding_log\n    limit: 10\n    window: 1m";
    refused(&rule(log, "{ batch: 5, ttl: 1s }"), 7, "rules[0].prefetch", "not available for the sliding_log");
    let budget = "    algorithm: budget\n    limit: 50\n    ttl: 24h";
    refused(
        &rule(budget, "{ batch: 5, ttl: 1s }"),
        7,
        "rules[0].prefetch",
        "a budget's ttl runs from its first use",
    );
}

#[test]
fn prefetch_is_refused_for_gcra_whose_cells_would_pass_after_the_bucket_refilled() {
    let gcra = "    algorithm: gcra\n    rate: 100/s\n    burst: 10";
    let text = rule(gcra, "{ batch: 5, ttl: 1s }");
    refused(&text, 7, "rules[0].prefetch", "prefetch is not available for the gcra algorithm");
    let err = config::parse("prefetch.yaml", &text).expect_err("gcra with prefetch");
    assert!(err.message.contains("burst + rate × time"), "{}", err.message);
    assert!(
        err.message.ends_with("it is for fixed_window, sliding_window, token_bucket and quota"),
        "{}",
        err.message
    );
}
