//! A rule's `cost:`: the cost dimension it counts, read onto the rule (`requests` by default), and
//! refused with the field named when it is no dimension.

use floodgate_config as config;

fn rule(algorithm: &str, cost: &str) -> String {
    format!("rules:\n  - name: tpm\n    key: [tenant]\n{algorithm}\n    cost: {cost}\n")
}

const WINDOW: &str = "    algorithm: sliding_window\n    limit: 100000\n    window: 60s";

#[track_caller]
fn refused(text: &str, says: &str) {
    let err = config::parse("cost.yaml", text).expect_err("an invalid cost");
    assert_eq!((err.line, err.column), (Some(7), Some(11)), "{}", err.message);
    assert_eq!(err.field.as_deref(), Some("rules[0].cost"), "{}", err.message);
    assert!(err.message.contains(says), "{:?} does not say {says:?}", err.message);
}

#[test]
fn a_rule_counts_requests_unless_it_names_another_dimension() {
    let plain = config::parse("cost.yaml", "rules:\n  - name: rpm\n    key: [tenant]\n    algorithm: fixed_window\n    limit: 10\n    window: 1m\n").unwrap();
    assert_eq!(plain.policy.rules().next().unwrap().cost_dimension(), "requests");
    for dimension in ["tokens", "input_tokens", "requests", "gpu_ms2"] {
        let config = config::parse("cost.yaml", &rule(WINDOW, dimension)).unwrap();
        assert_eq!(config.policy.rules().next().unwrap().cost_dimension(), dimension);
    }
}

#[test]
fn a_cost_that_is_no_dimension_is_refused_where_it_is_written() {
    refused(&rule(WINDOW, "Tokens"), "invalid cost \"Tokens\"");
    refused(&rule(WINDOW, "\"1tokens\""), "lowercase letters, digits and _");
    refused(&rule(WINDOW, "\"\""), "invalid cost \"\"");
    refused(&rule(WINDOW, &"t".repeat(65)), "at most 64 characters");
    refused(&rule(WINDOW, "[tokens]"), "a cost dimension");
    refused(
        &rule("    algorithm: concurrency\n    limit: 10\n    lease: 30s", "tokens"),
        "not available for the concurrency algorithm",
    );
}

#[test]
fn naming_the_default_keeps_the_rules_identity_and_another_dimension_changes_it() {
    let fingerprint = |text: &str| {
        let config = config::parse("cost.yaml", text).unwrap();
        config.fingerprints["tpm"]
    };
    let plain = fingerprint(&format!("rules:\n  - name: tpm\n    key: [tenant]\n{WINDOW}\n"));
    assert_eq!(plain, fingerprint(&rule(WINDOW, "requests")));
    assert_ne!(plain, fingerprint(&rule(WINDOW, "tokens")));
}

#[test]
fn a_budget_takes_a_limit_and_a_ttl() {
    let text =
        "rules:\n  - name: steps\n    key: [session]\n    algorithm: budget\n    limit: 50\n    ttl: 24h\n";
    let config = config::parse("budget.yaml", text).unwrap();
    let rule = config.policy.rules().next().unwrap();
    assert_eq!(rule.limit().algorithm_name(), "budget");
    assert_eq!(rule.limit().capacity(), 50);
    let missing =
        config::parse("budget.yaml", "rules:\n  - name: steps\n    algorithm: budget\n    limit: 50\n")
            .expect_err("a budget needs a ttl");
    assert!(missing.message.contains("ttl"), "{}", missing.message);
    let zero = config::parse(
        "budget.yaml",
        "rules:\n  - name: steps\n    algorithm: budget\n    limit: 5\n    ttl: 0s\n",
    )
    .expect_err("a ttl of 0");
    assert_eq!(zero.field.as_deref(), Some("rules[0].ttl"), "{}", zero.message);
}
