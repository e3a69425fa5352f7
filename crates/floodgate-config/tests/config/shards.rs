//! A rule's `shards: N`: read onto the rule; refused with the field named where the limit cannot
//! be split exactly.

use floodgate_config as config;

fn rule(algorithm: &str, shards: &str) -> String {
    format!("rules:\n  - name: global\n    key: []\n{algorithm}\n    shards: {shards}\n")
}

const FIXED: &str = "    algorithm: fixed_window\n    limit: 10000\n    window: 1s";

#[track_caller]
fn refused(text: &str, says: &str) {
    let err = config::parse("shards.yaml", text).expect_err("invalid shards");
    assert_eq!(err.line, Some(7), "{}", err.message);
    assert_eq!(err.field.as_deref(), Some("rules[0].shards"), "{}", err.message);
    assert!(err.message.contains(says), "{:?} does not say {says:?}", err.message);
}

#[test]
fn shards_are_read_onto_the_rule() {
    for algorithm in [
        FIXED,
        "    algorithm: sliding_log\n    limit: 100\n    window: 1m",
        "    algorithm: token_bucket\n    rate: 100/s\n    burst: 100",
    ] {
        let config = config::parse("shards.yaml", &rule(algorithm, "4")).unwrap();
        assert_eq!(config.policy.rules().next().unwrap().shard_count(), Some(4), "{algorithm}");
    }
}

#[test]
fn shards_must_be_a_whole_number_of_at_least_two() {
    refused(&rule(FIXED, "1"), "must be at least 2");
    refused(&rule(FIXED, "many"), "expected a whole number");
    refused(&rule(FIXED, "70000"), "at most 65535");
}

#[test]
fn shards_are_refused_where_the_limit_cannot_be_split_exactly() {
    refused(&rule("    algorithm: concurrency\n    limit: 10\n    lease: 30s", "2"), "concurrency");
    refused(&rule("    algorithm: fixed_window\n    limit: 3\n    window: 1s", "4"), "would get nothing");
    refused(&rule("    algorithm: gcra\n    rate: 2/s\n    burst: 10", "4"), "would get nothing");
}
