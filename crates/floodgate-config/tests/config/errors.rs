//! Every class of bad input: the error names the file, line, column and field, and quotes the value.

use floodgate_config::{self as config, ConfigError};

use super::fixture;

/// Loads `fixtures/bad/<name>` and checks where the error points and what it says.
#[track_caller]
fn assert_error(name: &str, line: usize, column: usize, field: &str, says: &[&str]) -> ConfigError {
    let path = fixture(&format!("bad/{name}"));
    let err = config::load(&path).expect_err("an invalid configuration");
    assert_eq!(err.file.as_deref(), Some(path.as_path()), "{}", err.message);
    assert_eq!((err.line, err.column), (Some(line), Some(column)), "{}", err.message);
    assert_eq!(err.field.as_deref(), Some(field), "{}", err.message);
    let prefix = format!("{}:{line}:{column}: {field}: ", path.display());
    assert!(err.message.starts_with(&prefix), "{:?} does not start with {prefix:?}", err.message);
    for fragment in says {
        assert!(err.message.contains(fragment), "{:?} does not say {fragment:?}", err.message);
    }
    err
}

#[test]
fn unknown_algorithm_lists_the_valid_ones() {
    assert_error(
        "unknown_algorithm.yaml",
        9,
        16,
        "rules[1].algorithm",
        &[
            "unknown algorithm \"leaky_bucket\"",
            "expected one of fixed_window, sliding_window, sliding_log, token_bucket, gcra, concurrency, quota",
        ],
    );
}

#[test]
fn unparsable_rate_is_quoted() {
    assert_error("bad_rate.yaml", 10, 11, "rules[1].rate", &["invalid rate \"ten/s\"", "\"10/s\""]);
}

#[test]
fn zero_limit() {
    assert_error("zero_limit.yaml", 10, 12, "rules[1].limit", &["invalid limit 0: must be at least 1"]);
}

#[test]
fn duplicate_rule_name_points_at_the_second_and_names_the_first() {
    assert_error(
        "duplicate_name.yaml",
        7,
        11,
        "rules[1].name",
        &["duplicate rule name \"ok\" (first defined at line 2)"],
    );
}

#[test]
fn unknown_descriptor_in_match() {
    assert_error(
        "unknown_descriptor.yaml",
        8,
        35,
        "rules[1].match.usr",
        &["unknown descriptor \"usr\"", "top-level \"descriptors\" list", "did you mean \"user\"?"],
    );
}

#[test]
fn unknown_field() {
    assert_error(
        "unknown_field.yaml",
        11,
        5,
        "rules[1].windw",
        &["unknown field \"windw\" in a rule", "did you mean \"window\"?"],
    );
}

#[test]
fn missing_parameter_for_the_algorithm() {
    assert_error(
        "missing_parameter.yaml",
        7,
        5,
        "rules[1].rate",
        &["algorithm token_bucket requires \"rate\" (e.g. rate: 10/s)"],
    );
}

#[test]
fn parameter_of_another_algorithm() {
    assert_error(
        "foreign_parameter.yaml",
        11,
        5,
        "rules[1].window",
        &["\"window\" does not apply to algorithm token_bucket (its parameters: rate, burst)"],
    );
}

#[test]
fn zero_burst() {
    assert_error("zero_burst.yaml", 11, 12, "rules[1].burst", &["invalid burst 0: must be at least 1"]);
}

#[test]
fn unknown_time_zone() {
    assert_error(
        "unknown_time_zone.yaml",
        12,
        16,
        "rules[1].time_zone",
        &["unknown time zone \"Europe/Atlantis\"", "IANA"],
    );
}

#[test]
fn rollout_above_100_percent() {
    assert_error(
        "rollout_above_100.yaml",
        12,
        14,
        "rules[1].rollout",
        &["invalid rollout \"150%\": above 100%"],
    );
}

#[test]
fn duration_without_unit() {
    assert_error("window_without_unit.yaml", 11, 13, "rules[1].window", &["invalid window 60", "\"60s\""]);
}

#[test]
fn repeated_field() {
    assert_error(
        "repeated_field.yaml",
        12,
        5,
        "rules[1].limit",
        &["\"limit\" is given twice (first at line 10)"],
    );
}

#[test]
fn envoy_unknown_unit() {
    assert_error(
        "envoy_unit.yaml",
        5,
        13,
        "descriptors[0].rate_limit.unit",
        &["unknown unit \"fortnight\": expected second, minute, hour, day, week, month or year"],
    );
}

#[test]
fn envoy_zero_requests_per_unit_is_refused_not_loosened() {
    assert_error(
        "envoy_zero.yaml",
        7,
        26,
        "descriptors[0].rate_limit.requests_per_unit",
        &["requests_per_unit 0", "cannot be imported"],
    );
}

#[test]
fn yaml_syntax_error_is_located() {
    let path = fixture("bad/syntax.yaml");
    let err = config::load(&path).expect_err("broken YAML");
    assert_eq!(err.field, None);
    assert!(err.line.is_some_and(|l| l >= 8), "{}", err.message);
    assert!(err.message.starts_with(&format!("{}:", path.display())), "{}", err.message);
    assert!(err.message.contains("invalid YAML: "), "{}", err.message);
}

#[test]
fn missing_file() {
    let path = fixture("bad/no-such-file.yaml");
    let err = config::load(&path).expect_err("no such file");
    assert_eq!(err.file.as_deref(), Some(path.as_path()));
    assert_eq!((err.line, err.column, err.field.as_deref()), (None, None, None));
    assert!(err.message.contains("cannot read"), "{}", err.message);
}

#[test]
fn parse_names_the_given_source() {
    let err = config::parse("admin", "rules:\n  - name: x\n    algorithm: nope\n").expect_err("invalid");
    assert_eq!(err.message.split(": ").next(), Some("admin:3:16"));
    assert_eq!(err.field.as_deref(), Some("rules[0].algorithm"));
}

#[test]
fn a_missing_tls_file_is_named_with_the_reason() {
    assert_error(
        "tls_missing_file.yaml",
        5,
        9,
        "store.tls.ca",
        &["cannot read tests/config/fixtures/no-such-ca.pem", "No such file"],
    );
}
