//! `/metrics`: the documented series and labels, valid for `promtool check metrics`.

use std::io::Write;
use std::process::{Command, Stdio};

use floodgate::{Action, Rule};

use crate::support::{TestServer, from_rules, per_minute, with_domains};

async fn scrape_after_traffic() -> String {
    let server = TestServer::start(with_domains(
        [
            Rule::new("per-user", per_minute(1)).key(["user"]),
            Rule::new("shadowed", per_minute(1)).key(["user"]).action(Action::Shadow),
        ],
        [("edge", vec![Rule::new("per-ip", per_minute(1)).key(["ip"])])],
    ))
    .await;
    server.check(&[("user", "u1")]).await;
    server.check(&[("user", "u1")]).await;
    server.post("/v1/check", r#"{"descriptors": {"user": 1}}"#).await;
    let text = server.get("/metrics").await;
    assert_eq!(text.status, 200);
    assert!(text.content_type().starts_with("text/plain"));
    server.stop().await;
    text.body
}

#[tokio::test]
async fn the_documented_series_are_exposed_with_bounded_labels() {
    let text = scrape_after_traffic().await;
    for line in [
        r#"floodgate_decisions_total{rule="per-user",result="allowed"} 1"#,
        r#"floodgate_decisions_total{rule="per-user",result="denied"} 1"#,
        r#"floodgate_decisions_total{rule="shadowed",result="shadow_denied"} 1"#,
        r#"floodgate_decisions_total{rule="per-user",result="error_denied"} 0"#,
        r#"floodgate_decisions_total{rule="edge/per-ip",result="allowed"} 0"#,
        r#"floodgate_fallback_active{rule="per-user"} 0"#,
        r#"floodgate_store_errors_total{store="memory"} 0"#,
        r#"floodgate_keys{store="memory"} 2"#,
        "floodgate_config_version 1",
        r#"floodgate_config_reloads_total{result="applied"} 0"#,
        r#"floodgate_config_reloads_total{result="rejected"} 0"#,
        r#"floodgate_requests_total{api="check",code="200",client="anonymous"} 1"#,
        r#"floodgate_requests_total{api="check",code="429",client="anonymous"} 1"#,
        r#"floodgate_requests_total{api="check",code="422",client="anonymous"} 1"#,
        "# TYPE floodgate_decision_duration_seconds histogram",
        r#"floodgate_decision_duration_seconds_bucket{le="0.00001"}"#,
        r#"floodgate_decision_duration_seconds_bucket{le="1"}"#,
        "floodgate_decision_duration_seconds_count 2",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(!text.contains("u1"), "a key leaked into a label:\n{text}");
}

#[tokio::test]
async fn promtool_accepts_the_exposition() {
    promtool_check_metrics(&scrape_after_traffic().await);
}

/// Fails unless `promtool check metrics` accepts `text`.
pub(crate) fn promtool_check_metrics(text: &str) {
    let promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = promtool.unwrap_or_else(|e| {
        panic!("promtool is needed for this test ({e}): install it with `apt-get install -y prometheus` (./scripts/test does)")
    });
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- exposition ---\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn apps_in_one_process_keep_their_series_apart() {
    let a = TestServer::start(from_rules([Rule::new("only-in-a", per_minute(1)).key(["user"])])).await;
    let b = TestServer::start(from_rules([Rule::new("only-in-b", per_minute(1)).key(["user"])])).await;
    a.check(&[("user", "u1")]).await;
    let text = b.get("/metrics").await.body;
    assert!(text.contains("only-in-b") && !text.contains("only-in-a"), "{text}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_full_memory_store_reports_its_fill_ratio_and_each_rules_overflow_decisions() {
    let server = TestServer::start(crate::support::parse(
        "store: {kind: memory, max_keys: 2, overflow_counters: 16}\n\
         rules:\n  - {name: per-user, algorithm: fixed_window, limit: 5, window: 1m, key: [user]}\n",
    ))
    .await;
    for user in ["a", "b", "c", "d", "e"] {
        assert_eq!(server.check(&[("user", user)]).await.status, 200, "{user}");
    }
    let text = server.get("/metrics").await.body;
    for line in [
        r#"floodgate_keys{store="memory"} 2"#,
        r#"floodgate_keys_fill_ratio{store="memory"} 1"#,
        r#"floodgate_overflow_decisions_total{rule="per-user"} 3"#,
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    let counters =
        text.lines().find(|l| l.starts_with("floodgate_overflow_counters{")).expect("the counters' gauge");
    let held: f64 = counters.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((1.0..=3.0).contains(&held), "{counters}");
    assert!(!text.contains("\"c\"") && !text.contains("user=\"c\""), "a key leaked into a label");
    server.stop().await;
}
