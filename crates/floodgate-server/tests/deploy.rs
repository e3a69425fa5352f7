//! The deployment artefacts in `deploy/`: the Prometheus alerting rules, their `promtool` unit
//! tests, and the Grafana dashboard.
//!
//! - `promtool check rules` and `promtool test rules` pass on `deploy/prometheus/`;
//! - every alert has a `for`, a `severity` and `summary` / `description` / `runbook` annotations, and
//!   is unit-tested both firing (labels and annotations asserted) and silent;
//! - the rules, their test series and the dashboard only use the metric names the server emits
//!   (DESIGN.md §4), so a misspelt name cannot pass by being misspelt the same way in the tests;
//! - the dashboard is valid JSON of the expected shape and each of its queries parses as PromQL;
//! - the RLQS example (`examples/rlqs/floodgate.yaml`) and its Envoy configuration
//!   (`deploy/envoy/rlqs.yaml`) agree on domain, bucket id, reporting interval and port.
//!
//! `promtool` comes with the Debian package `prometheus`. These tests fail without it (they never
//! skip), saying how to install it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The series the server emits (DESIGN.md §4, §9); the histograms as their three exposed series.
const METRICS: [&str; 30] = [
    "floodgate_decisions_total",
    "floodgate_decision_duration_seconds_bucket",
    "floodgate_decision_duration_seconds_sum",
    "floodgate_decision_duration_seconds_count",
    "floodgate_store_errors_total",
    "floodgate_fallback_active",
    "floodgate_store_breaker_state",
    "floodgate_fallback_instances",
    "floodgate_fallback_units_total",
    "floodgate_prefetch_decisions_total",
    "floodgate_prefetch_units_total",
    "floodgate_keys",
    "floodgate_keys_fill_ratio",
    "floodgate_overflow_counters",
    "floodgate_overflow_decisions_total",
    "floodgate_config_version",
    "floodgate_config_reloads_total",
    "floodgate_reservations_total",
    "floodgate_reservation_units_total",
    "floodgate_gateway_requests_total",
    "floodgate_gateway_upstream_duration_seconds_bucket",
    "floodgate_gateway_upstream_duration_seconds_sum",
    "floodgate_gateway_upstream_duration_seconds_count",
    "floodgate_gateway_breaker_state",
    "floodgate_gateway_retries_total",
    "floodgate_gateway_shed_total",
    "floodgate_gateway_degraded_total",
    "floodgate_gateway_delayed_total",
    "floodgate_gateway_waiting",
    "floodgate_gateway_accepted_pending",
];

const ALERTS: &str = "deploy/prometheus/alerts.yml";
const ALERTS_TEST: &str = "deploy/prometheus/alerts_test.yml";
const DASHBOARD: &str = "deploy/grafana/floodgate.json";

const INSTALL_HINT: &str =
    "install it with `apt-get install -y prometheus` (the Debian package ships promtool)";

// === helpers ===

fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn yaml(relative: &str) -> Value {
    serde_saphyr::from_str(&read(relative)).unwrap_or_else(|e| panic!("{relative} is not valid YAML: {e}"))
}

/// Runs `promtool` with `args` from the workspace root; panics with its output unless it succeeds.
fn promtool(args: &[&str]) -> String {
    let output = match Command::new("promtool").args(args).current_dir(root()).output() {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!("`promtool` is not on PATH: {INSTALL_HINT}, then rerun the tests")
        }
        Err(e) => panic!("could not run `promtool`: {e}; {INSTALL_HINT}"),
    };
    let text = format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "`promtool {}` failed ({}):\n{text}", args.join(" "), output.status);
    text
}

fn str_of<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value.get(field).and_then(Value::as_str)
}

fn array<'a>(value: &'a Value, field: &str) -> &'a [Value] {
    value.get(field).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// The rules of every group of `alerts.yml`.
fn rules(alerts: &Value) -> Vec<&Value> {
    array(alerts, "groups").iter().flat_map(|group| array(group, "rules")).collect()
}

/// The metric names a PromQL expression selects: identifiers outside strings, label matchers,
/// ranges and label lists that are neither functions, aggregations nor keywords.
fn metric_names(expr: &str) -> Vec<String> {
    const AGGREGATIONS: [&str; 12] = [
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
    ];
    const KEYWORDS: [&str; 13] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "offset",
        "bool",
        "atan2",
        "inf",
    ];
    const WITH_LABEL_LIST: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let skip_to = |mut i: usize, close: char| {
        while i < chars.len() && chars[i] != close {
            i += if chars[i] == '\\' { 2 } else { 1 };
        }
        i + 1
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_to(i + 1, c),
            '{' => i = skip_to(i + 1, '}'),
            '[' => i = skip_to(i + 1, ']'),
            '#' => i = skip_to(i + 1, '\n'),
            // Numbers and durations (`0.99`, `5m`, `23h30m`), and Grafana variables (`$job`).
            c if c.is_ascii_digit() || c == '.' || c == '$' => {
                i += 1;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.')
                {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let call = chars.get(next) == Some(&'(');
                let lower = word.to_ascii_lowercase();
                if WITH_LABEL_LIST.contains(&lower.as_str()) && call {
                    i = skip_to(next + 1, ')');
                } else if !call
                    && !AGGREGATIONS.contains(&lower.as_str())
                    && !KEYWORDS.contains(&lower.as_str())
                {
                    names.push(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Checks that `expr` selects at least one series and only `METRICS` or the `recorded` names.
fn check_metrics(context: &str, expr: &str, recorded: &BTreeSet<String>, problems: &mut Vec<String>) {
    let names = metric_names(expr);
    if names.is_empty() {
        problems.push(format!("{context}: selects no metric: {expr}"));
    }
    for name in names {
        if !METRICS.contains(&name.as_str()) && !recorded.contains(&name) {
            problems.push(format!("{context}: unknown metric `{name}` in: {expr}"));
        }
    }
}

fn assert_no_problems(what: &str, problems: &[String]) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

// === Prometheus rules ===

#[test]
fn alert_rules_pass_promtool_check() {
    let out = promtool(&["check", "rules", ALERTS]);
    assert!(out.contains("SUCCESS"), "promtool check rules did not report success:\n{out}");
}

#[test]
fn alert_rules_pass_their_promtool_unit_tests() {
    let out = promtool(&["test", "rules", ALERTS_TEST]);
    assert!(out.contains("SUCCESS"), "promtool test rules did not report success:\n{out}");
}

#[test]
fn every_alert_has_for_severity_and_runbook_annotations() {
    let alerts = yaml(ALERTS);
    let mut problems = Vec::new();
    let mut count = 0;
    for rule in rules(&alerts) {
        let Some(name) = str_of(rule, "alert") else { continue };
        count += 1;
        if str_of(rule, "for").is_none() {
            problems.push(format!("{name}: no `for:`"));
        }
        match rule.get("labels").and_then(|l| str_of(l, "severity")) {
            Some("critical" | "warning" | "info") => {}
            other => problems.push(format!("{name}: severity {other:?} is not critical, warning or info")),
        }
        for annotation in ["summary", "description", "runbook"] {
            let text = rule.get("annotations").and_then(|a| str_of(a, annotation)).unwrap_or("");
            if text.trim().len() < 20 {
                problems.push(format!("{name}: annotation `{annotation}` missing or too short: {text:?}"));
            }
        }
    }
    assert!(count >= 8, "expected at least 8 alerts in {ALERTS}, found {count}");
    assert_no_problems("alerts without what an on-call engineer needs", &problems);
}

#[test]
fn every_alert_is_unit_tested_firing_and_silent() {
    let alerts = yaml(ALERTS);
    let tests = yaml(ALERTS_TEST);
    let names: BTreeSet<&str> = rules(&alerts).into_iter().filter_map(|r| str_of(r, "alert")).collect();
    // alert name -> (cases where it fires, cases where it must stay silent)
    let mut cases: BTreeMap<&str, (usize, usize)> = names.iter().map(|n| (*n, (0, 0))).collect();
    let mut problems = Vec::new();
    for test in array(&tests, "tests") {
        for case in array(test, "alert_rule_test") {
            let name = str_of(case, "alertname").unwrap_or("");
            let Some(entry) = cases.get_mut(name) else {
                problems.push(format!("test of unknown alert {name:?}"));
                continue;
            };
            let expected = array(case, "exp_alerts");
            if expected.is_empty() {
                entry.1 += 1;
            } else {
                entry.0 += 1;
            }
            for alert in expected {
                let labels = alert.get("exp_labels");
                if labels.and_then(|l| str_of(l, "severity")).is_none() {
                    problems.push(format!("{name}: a firing case does not assert the severity label"));
                }
                for annotation in ["summary", "description", "runbook"] {
                    if alert.get("exp_annotations").and_then(|a| str_of(a, annotation)).is_none() {
                        problems.push(format!(
                            "{name}: a firing case does not assert the `{annotation}` annotation"
                        ));
                    }
                }
            }
        }
    }
    for (name, (firing, silent)) in &cases {
        if *firing == 0 {
            problems.push(format!("{name}: no case where it fires"));
        }
        if *silent == 0 {
            problems.push(format!("{name}: no case where it must stay silent"));
        }
    }
    assert_no_problems("alerts not covered by alerts_test.yml", &problems);
}

#[test]
fn alert_rules_and_their_tests_use_only_the_documented_metrics() {
    let alerts = yaml(ALERTS);
    let recorded: BTreeSet<String> =
        rules(&alerts).into_iter().filter_map(|r| str_of(r, "record")).map(str::to_owned).collect();
    let mut problems = Vec::new();
    for rule in rules(&alerts) {
        let name = str_of(rule, "alert").or_else(|| str_of(rule, "record")).unwrap_or("?");
        let expr = str_of(rule, "expr").unwrap_or("");
        check_metrics(name, expr, &recorded, &mut problems);
    }
    // The synthetic input series must be the server's own names, or the tests prove nothing.
    let tests = yaml(ALERTS_TEST);
    let no_recorded = BTreeSet::new();
    for test in array(&tests, "tests") {
        for series in array(test, "input_series") {
            let selector = str_of(series, "series").unwrap_or("");
            let name = selector.split('{').next().unwrap_or("").trim();
            check_metrics(&format!("input series {selector}"), name, &no_recorded, &mut problems);
        }
    }
    assert_no_problems("names the server does not emit", &problems);
}

#[test]
fn the_metric_name_scanner_skips_functions_labels_and_keywords() {
    let expr = r#"histogram_quantile(0.99, sum by (job, le) (rate(floodgate_decision_duration_seconds_bucket{job=~"$job"}[$__rate_interval])))
        > 0.005 and on (job) sum without (instance) (job_rule:floodgate_decisions:rate5m offset 23h30m) or vector(0)"#;
    assert_eq!(
        metric_names(expr),
        ["floodgate_decision_duration_seconds_bucket", "job_rule:floodgate_decisions:rate5m"]
    );
    assert_eq!(metric_names("floodgate_decison_total"), ["floodgate_decison_total"]);
}

// === Grafana dashboard ===

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"))
}

/// Every panel, including those nested in collapsed rows.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in array(dashboard, "panels") {
        out.push(panel);
        out.extend(array(panel, "panels"));
    }
    out
}

/// `(panel title, expr)` of every query: panel targets and annotation queries.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in panels(dashboard) {
        let title = str_of(panel, "title").unwrap_or("?");
        for target in array(panel, "targets") {
            out.push((format!("panel {title:?}"), str_of(target, "expr").unwrap_or("").to_owned()));
        }
    }
    for annotation in dashboard.get("annotations").map(|a| array(a, "list")).unwrap_or(&[]) {
        if let Some(expr) = str_of(annotation, "expr") {
            let name = str_of(annotation, "name").unwrap_or("?");
            out.push((format!("annotation {name:?}"), expr.to_owned()));
        }
    }
    out
}

fn uses_ds_prometheus(datasource: Option<&Value>) -> bool {
    datasource.and_then(|d| str_of(d, "uid")) == Some("${DS_PROMETHEUS}")
}

#[test]
fn grafana_dashboard_is_valid_json_with_the_expected_structure() {
    let dashboard = dashboard();
    let mut problems = Vec::new();
    if dashboard.get("schemaVersion").and_then(Value::as_u64).is_none_or(|v| v < 36) {
        problems.push("schemaVersion missing or older than 36".to_owned());
    }
    for field in ["uid", "title"] {
        if str_of(&dashboard, field).is_none_or(str::is_empty) {
            problems.push(format!("no `{field}`"));
        }
    }

    let variables = dashboard.get("templating").map(|t| array(t, "list")).unwrap_or(&[]);
    let variable = |name: &str| variables.iter().find(|v| str_of(v, "name") == Some(name));
    match variable("DS_PROMETHEUS") {
        Some(v) if str_of(v, "type") == Some("datasource") && str_of(v, "query") == Some("prometheus") => {}
        _ => problems.push("no `DS_PROMETHEUS` data source variable of type prometheus".to_owned()),
    }
    match variable("rule") {
        Some(v)
            if str_of(v, "definition").is_some_and(|d| {
                d.starts_with("label_values(floodgate_decisions_total") && d.ends_with(", rule)")
            }) => {}
        _ => {
            problems.push("no `rule` variable from label_values(floodgate_decisions_total…, rule)".to_owned())
        }
    }
    for v in variables.iter().filter(|v| str_of(v, "type") == Some("query")) {
        if !uses_ds_prometheus(v.get("datasource")) {
            problems.push(format!("variable {:?} does not query ${{DS_PROMETHEUS}}", str_of(v, "name")));
        }
    }

    let mut ids = BTreeSet::new();
    let mut graphs = 0;
    for panel in panels(&dashboard) {
        let title = str_of(panel, "title").unwrap_or("?");
        if !panel.get("id").and_then(Value::as_u64).is_some_and(|id| ids.insert(id)) {
            problems.push(format!("panel {title:?}: missing or duplicate id"));
        }
        let grid = panel.get("gridPos");
        let (x, w) = (
            grid.and_then(|g| g.get("x")).and_then(Value::as_u64).unwrap_or(99),
            grid.and_then(|g| g.get("w")).and_then(Value::as_u64).unwrap_or(99),
        );
        if x + w > 24 {
            problems.push(format!("panel {title:?}: gridPos outside the 24 columns"));
        }
        if str_of(panel, "type") == Some("row") {
            continue;
        }
        graphs += 1;
        if !uses_ds_prometheus(panel.get("datasource")) {
            problems.push(format!("panel {title:?}: data source is not ${{DS_PROMETHEUS}}"));
        }
        let targets = array(panel, "targets");
        if targets.is_empty() {
            problems.push(format!("panel {title:?}: no query"));
        }
        for target in targets {
            if !uses_ds_prometheus(target.get("datasource"))
                || str_of(target, "expr").is_none_or(str::is_empty)
            {
                problems.push(format!("panel {title:?}: a target without expr or ${{DS_PROMETHEUS}}"));
            }
        }
    }
    if graphs < 10 {
        problems.push(format!("only {graphs} panels"));
    }
    assert_no_problems(&format!("{DASHBOARD} is malformed"), &problems);
}

#[test]
fn grafana_dashboard_queries_use_only_and_cover_the_documented_metrics() {
    let dashboard = dashboard();
    let mut problems = Vec::new();
    let none = BTreeSet::new();
    let mut queries = queries(&dashboard);
    let variables = dashboard.get("templating").map(|t| array(t, "list")).unwrap_or(&[]);
    for v in variables.iter().filter(|v| str_of(v, "type") == Some("query")) {
        // `label_values(<selector>, <label>)`: check the selector.
        let definition = str_of(v, "definition").unwrap_or("");
        let selector = definition
            .strip_prefix("label_values(")
            .and_then(|rest| rest.rsplit_once(','))
            .map_or(definition, |(selector, _)| selector);
        queries.push((format!("variable {:?}", str_of(v, "name").unwrap_or("?")), selector.to_owned()));
    }
    let mut used = BTreeSet::new();
    for (context, expr) in &queries {
        check_metrics(context, expr, &none, &mut problems);
        used.extend(metric_names(expr));
    }
    for metric in METRICS {
        if !used.contains(metric) {
            problems.push(format!("no panel shows `{metric}`"));
        }
    }
    assert_no_problems(&format!("{DASHBOARD} queries"), &problems);
}

/// The query with Grafana's variables replaced by values Prometheus accepts.
fn without_grafana_variables(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let len = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
        out.push_str(match &after[..len] {
            "__rate_interval" | "__interval" => "5m",
            "__range" => "1h",
            _ => ".*", // `$job`, `$instance`, `$rule` in `=~` matchers
        });
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

#[test]
fn grafana_dashboard_queries_parse_as_promql() {
    let mut file = String::from(
        "# Generated by tests/deploy.rs from the Grafana dashboard's queries.\ngroups:\n  - name: dashboard\n    rules:\n",
    );
    for (i, (_, expr)) in queries(&dashboard()).iter().enumerate() {
        let expr = serde_json::to_string(&without_grafana_variables(expr)).expect("a string serializes");
        file.push_str(&format!("      - record: dashboard:query_{i}\n        expr: {expr}\n"));
    }
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("floodgate-dashboard-queries.yml");
    std::fs::write(&path, &file).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    let path = path.to_string_lossy().into_owned();
    promtool(&["check", "rules", &path]);
}

/// `examples/rlqs/floodgate.yaml` and `deploy/envoy/rlqs.yaml` agree: the Envoy filter is
/// `rate_limit_quota` on the example's domain, reporting every second to a cluster on Floodgate's
/// gRPC port over HTTP/2, and builds a bucket id with `name: api`, which the example's one rule
/// (100 requests a second, fleet-wide) governs whatever the id's other keys.
#[test]
fn the_rlqs_example_and_its_envoy_configuration_agree() {
    let config = floodgate_config::load(&root().join("examples/rlqs/floodgate.yaml"))
        .unwrap_or_else(|e| panic!("examples/rlqs/floodgate.yaml: {e}"));
    let rlqs = config.rlqs.expect("an rlqs section");
    assert_eq!(rlqs.reporting_interval, std::time::Duration::from_secs(1));
    let rules = &rlqs.domains["rlqs-example"];
    assert_eq!(rules.len(), 1);
    let api = &rules[0];
    assert!(api.matches(|k| match k {
        "name" => Some("api"),
        "method" => Some("GET"),
        _ => None,
    }));
    assert!(!api.matches(|k| (k == "name").then_some("web")));
    match &api.grant {
        floodgate_config::rlqs::Grant::Share { limit, .. } => {
            assert_eq!(limit.capacity(), 100);
            assert_eq!(
                limit.policy_window(floodgate_core::Timestamp::from_secs(0)),
                std::time::Duration::from_secs(1)
            );
        }
        other => panic!("a shared limit, not {other:?}"),
    }

    let envoy = yaml("deploy/envoy/rlqs.yaml");
    let listener = &envoy["static_resources"]["listeners"][0];
    let hcm = &listener["filter_chains"][0]["filters"][0]["typed_config"];
    let filters = hcm["http_filters"].as_array().expect("http_filters");
    let quota =
        filters.iter().find(|f| f["name"] == "envoy.filters.http.rate_limit_quota").expect("the RLQS filter");
    let filter = &quota["typed_config"];
    assert_eq!(
        filter["@type"],
        "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig"
    );
    assert_eq!(filter["domain"], "rlqs-example");
    assert_eq!(filters.last().unwrap()["name"], "envoy.filters.http.router", "the router comes last");
    let cluster_name =
        filter["rlqs_server"]["envoy_grpc"]["cluster_name"].as_str().expect("rlqs_server cluster");
    let clusters = envoy["static_resources"]["clusters"].as_array().unwrap();
    let cluster = clusters.iter().find(|c| c["name"] == cluster_name).expect("the RLQS cluster");
    let http2 = &cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    assert!(http2["explicit_http_config"]["http2_protocol_options"].is_object(), "gRPC needs HTTP/2");
    let endpoint = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
    assert_eq!(endpoint["port_value"], 8081, "Floodgate's gRPC port");
    for matcher in filter["bucket_matchers"]["matcher_list"]["matchers"].as_array().expect("matchers") {
        let settings = &matcher["on_match"]["action"]["typed_config"];
        assert_eq!(
            settings["@type"],
            "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings"
        );
        assert_eq!(settings["reporting_interval"], "1s");
        assert_eq!(settings["bucket_id_builder"]["bucket_id_builder"]["name"]["string_value"], "api");
        let expired = &settings["expired_assignment_behavior"];
        assert!(expired["reuse_last_assignment"].is_object() || expired["fallback_rate_limit"].is_object());
    }
}
