//! `/v1/check`, `/v1/peek`, `/v1/report`: verdicts, status codes, headers, all-or-nothing.

use floodgate::{Action, Rule};
use floodgate_config as config;
use floodgate_http::HeaderStyle;
use serde_json::json;

use crate::support::{TestServer, check_body, from_rules, per_minute, with_domains};

const CHAT: &[(&str, &str)] = &[("user", "u1"), ("route", "POST /chat")];

#[tokio::test]
async fn twelve_requests_against_the_builtin_policy_ten_pass_two_are_told_when_to_retry() {
    let server = TestServer::start(config::builtin()).await;
    let mut codes = Vec::new();
    let mut replies = Vec::new();
    for _ in 0..12 {
        let reply = server.check(CHAT).await;
        codes.push(reply.status);
        replies.push(reply);
    }
    assert_eq!(codes, [200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429]);

    let first = replies[0].json();
    assert_eq!(first["allowed"], true);
    assert_eq!(first["retry_after_ms"], serde_json::Value::Null);
    let limit = first["limits"].as_array().unwrap().iter().find(|l| l["name"] == "chat-per-user").unwrap();
    assert_eq!(limit["limit"], 10);
    assert_eq!(limit["remaining"], 9);
    assert_eq!(limit["allowed"], true);
    assert_eq!(limit["outcome"], "allowed");
    assert!(replies[0].header("ratelimit-policy").unwrap().contains(r#""chat-per-user";q=10;w=60"#));
    assert!(replies[0].header("retry-after").is_none());

    let denied = &replies[10];
    let retry: u64 = denied.header("retry-after").expect("Retry-After on a 429").parse().unwrap();
    assert!(
        (1..=66).contains(&retry),
        "retry-after {retry}: the sliding window frees a slot at most 66 s on"
    );
    assert_eq!(denied.content_type(), "application/json");
    let body = denied.json();
    assert_eq!(body["allowed"], false);
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert_eq!(retry, retry_ms.div_ceil(1000).max(1), "Retry-After is retry_after_ms in seconds, rounded up");
    assert!(denied.header("ratelimit").unwrap().starts_with(r#""chat-per-user";r=0;t="#));
    assert_eq!(denied.header("x-ratelimit-limit"), Some("10"));
    assert_eq!(denied.header("x-ratelimit-remaining"), Some("0"));
    server.stop().await;
}

fn two_rules() -> Vec<Rule> {
    vec![
        Rule::new("per-user", per_minute(2)).key(["user"]),
        Rule::new("per-tenant", per_minute(5)).key(["tenant"]),
    ]
}

fn limit<'a>(body: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    body["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {body}"))
}

#[tokio::test]
async fn a_denied_request_consumes_nothing_from_any_rule() {
    let server = TestServer::start(from_rules(two_rules())).await;
    let u1 = [("user", "u1"), ("tenant", "t1")];
    assert_eq!(server.check(&u1).await.status, 200);
    assert_eq!(server.check(&u1).await.status, 200);
    for _ in 0..3 {
        let denied = server.check(&u1).await;
        assert_eq!(denied.status, 429);
        let body = denied.json();
        assert_eq!(limit(&body, "per-user")["outcome"], "denied");
        assert_eq!(limit(&body, "per-tenant")["outcome"], "allowed");
    }
    // The three denials took nothing from the tenant: 5 - 2 used, and a peek of 1 leaves 2.
    let peek = server.peek(&[("user", "u2"), ("tenant", "t1")]).await;
    assert_eq!(peek.status, 200);
    assert_eq!(limit(&peek.json(), "per-tenant")["remaining"], 2);
    assert_eq!(server.check(&[("user", "u2"), ("tenant", "t1")]).await.status, 200);
    assert_eq!(limit(&server.peek(&[("tenant", "t1")]).await.json(), "per-tenant")["remaining"], 1);
    server.stop().await;
}

#[tokio::test]
async fn peek_answers_what_check_would_and_consumes_nothing() {
    let server = TestServer::start(from_rules(two_rules())).await;
    let u1 = [("user", "u1"), ("tenant", "t1")];
    for _ in 0..5 {
        let peek = server.peek(&u1).await;
        assert_eq!(peek.status, 200);
        assert_eq!(limit(&peek.json(), "per-user")["remaining"], 1);
    }
    server.check(&u1).await;
    server.check(&u1).await;
    let peek = server.peek(&u1).await;
    assert_eq!(peek.status, 429, "a check would be denied now");
    assert!(peek.header("retry-after").is_some());
    server.stop().await;
}

#[tokio::test]
async fn report_consumes_after_the_fact_and_never_denies() {
    let server = TestServer::start(from_rules(two_rules())).await;
    let u1 = [("user", "u1"), ("tenant", "t1")];
    let report = server.post("/v1/report", check_body(&u1, 7)).await;
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!(report.json()["allowed"], true);
    let again = server.post("/v1/report", check_body(&u1, 1)).await;
    assert_eq!(again.status, 200);
    assert_eq!(server.check(&u1).await.status, 429);
    server.stop().await;
}

#[tokio::test]
async fn a_request_no_rule_applies_to_is_allowed_without_headers() {
    let server = TestServer::start(from_rules(two_rules())).await;
    let reply = server.check(&[("ip", "10.0.0.1")]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), json!({"allowed": true, "retry_after_ms": null, "limits": []}));
    assert!(reply.header("ratelimit-policy").is_none() && reply.header("x-ratelimit-limit").is_none());
    server.stop().await;
}

#[tokio::test]
async fn the_configured_header_style_is_used() {
    let mut config = from_rules(two_rules());
    config.headers = HeaderStyle::Legacy;
    let server = TestServer::start(config).await;
    let reply = server.check(&[("user", "u1")]).await;
    assert_eq!(reply.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("1"));
    assert!(reply.header("ratelimit-policy").is_none());
    server.stop().await;
}

#[tokio::test]
async fn a_cost_a_rule_can_never_grant_is_a_422_naming_the_rule() {
    let server = TestServer::start(from_rules(two_rules())).await;
    let reply = server.post("/v1/check", check_body(&[("user", "u1")], 3)).await;
    assert_eq!(reply.status, 422);
    assert_eq!(reply.content_type(), "application/problem+json");
    let problem = reply.json();
    assert_eq!(problem["type"], floodgate_http::problem::NEVER_ALLOWED_TYPE);
    assert!(problem["detail"].as_str().unwrap().contains("per-user"), "{problem}");
    server.stop().await;
}

#[tokio::test]
async fn domain_selects_an_envoy_policy_and_an_unknown_one_gets_the_native_policy() {
    let config = with_domains(
        [Rule::new("native", per_minute(100)).key(["user"])],
        [("edge", vec![Rule::new("edge-per-user", per_minute(1)).key(["user"])])],
    );
    let server = TestServer::start(config).await;
    let body = |domain: &str| json!({"descriptors": {"user": "u1"}, "domain": domain}).to_string();
    let edge = server.post("/v1/check", body("edge")).await;
    assert_eq!(edge.status, 200);
    assert_eq!(edge.json()["limits"][0]["name"], "edge-per-user");
    assert_eq!(server.post("/v1/check", body("edge")).await.status, 429);
    let other = server.post("/v1/check", body("no-such-domain")).await;
    assert_eq!(other.json()["limits"][0]["name"], "native");
    assert_eq!(server.check(&[("user", "u1")]).await.json()["limits"][0]["remaining"], 98);
    server.stop().await;
}

#[tokio::test]
async fn shadow_and_tag_rules_report_but_never_deny() {
    let server = TestServer::start(from_rules([
        Rule::new("shadowed", per_minute(1)).key(["user"]).action(Action::Shadow),
        Rule::new("suspect", per_minute(1)).key(["user"]).action(Action::Tag),
    ]))
    .await;
    server.check(&[("user", "u1")]).await;
    let reply = server.check(&[("user", "u1")]).await;
    assert_eq!(reply.status, 200);
    let body = reply.json();
    assert_eq!(limit(&body, "shadowed")["outcome"], "shadow_denied");
    assert_eq!(limit(&body, "suspect")["outcome"], "tagged");
    assert_eq!(reply.header("floodgate-tag"), Some("suspect"));
    server.stop().await;
}

#[tokio::test]
async fn health_and_readiness() {
    let server = TestServer::start(from_rules(two_rules())).await;
    let health = server.get("/healthz").await;
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    assert_eq!(server.get("/readyz").await.status, 200);
    server.stop().await;
}
