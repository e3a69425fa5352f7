//! Caller-stated limits and the penalty box through the HTTP API of the real server: one template
//! rule serving limits the callers state, a counter per stated (limit, window), the bounds and
//! every malformed statement refused with a 422 naming the field, the `state_limits` scope, and a
//! block's exact `Retry-After`.

use floodgate_app::ServeOptions;
use http::Method;

use crate::support::{Reply, TempDir, TestServer, parse};

const TEMPLATE: &str = "\
rules:
  - name: throttle
    match: { route: throttled }
    key: [user]
    algorithm: sliding_log
    limit: { from: request, max: 100 }
    window: { from: request, max: 1h }
    block_for: { from: request, max: 1h }
  - name: plain
    match: { route: plain }
    key: [user]
    algorithm: fixed_window
    limit: 5
    window: 1m
";

async fn check(server: &TestServer, body: &str) -> Reply {
    server.request(Method::POST, "/v1/check", body.to_owned(), &[("content-type", "application/json")]).await
}

fn stating(route: &str, user: &str, stated: &str) -> String {
    format!(r#"{{"descriptors": {{"route": "{route}", "user": "{user}"}}, "stated": {stated}}}"#)
}

fn assert_invalid(reply: &Reply, needle: &str) {
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert_eq!(reply.content_type(), "application/problem+json");
    let detail = reply.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains(needle), "{needle:?} not in {detail:?}");
}

#[tokio::test]
async fn one_template_rule_serves_the_limits_callers_state_each_on_its_own_counter() {
    let server = TestServer::start(parse(TEMPLATE)).await;
    let two_a_minute = stating("throttled", "u1", r#"{"limit": 2, "window_ms": 60000}"#);
    for _ in 0..2 {
        assert_eq!(check(&server, &two_a_minute).await.status, 200);
    }
    let third = check(&server, &two_a_minute).await;
    assert_eq!(third.status, 429, "{}", third.body);
    assert_eq!(third.json()["limits"][0]["limit"], 2, "the stated limit is the one reported");
    // Another route stating another limit for the same user counts on a counter of its own.
    let five_a_minute = stating("throttled", "u1", r#"{"limit": 5, "window_ms": 60000}"#);
    let other = check(&server, &five_a_minute).await;
    assert_eq!(other.status, 200, "{}", other.body);
    assert_eq!(other.json()["limits"][0]["remaining"], 4);
    assert_eq!(other.header("ratelimit-policy"), Some("\"throttle\";q=5;w=60"));
    server.stop().await;
}

#[tokio::test]
async fn a_stated_block_refuses_for_exactly_that_long() {
    let server = TestServer::start(parse(TEMPLATE)).await;
    let body = stating("throttled", "u2", r#"{"limit": 1, "window_ms": 1000, "block_for_ms": 600000}"#);
    assert_eq!(check(&server, &body).await.status, 200);
    let denied = check(&server, &body).await;
    assert_eq!(denied.status, 429, "{}", denied.body);
    assert_eq!(denied.json()["retry_after_ms"], 600_000, "the block, not the 1 s window");
    assert_eq!(denied.header("retry-after"), Some("600"));
    // Still blocked after the window has long passed on any clock this test runs on: the next
    // answer names the block's end, never the window's.
    let again = check(&server, &body).await;
    assert_eq!(again.status, 429);
    let left = again.json()["retry_after_ms"].as_u64().unwrap();
    assert!(left <= 600_000 && left > 1_000, "{left}");
    server.stop().await;
}

#[tokio::test]
async fn bad_statements_are_422_naming_the_field_and_the_bound() {
    let server = TestServer::start(parse(TEMPLATE)).await;
    let bad = |stated: &str| stating("throttled", "u3", stated);
    assert_invalid(
        &check(&server, &bad(r#"{"limit": 101}"#)).await,
        "the stated limit 101 is above the rule's bound 100",
    );
    assert_invalid(&check(&server, &bad(r#"{"limit": 0}"#)).await, "stated.limit is 0");
    assert_invalid(&check(&server, &bad(r#"{"window_ms": 0}"#)).await, "stated.window_ms is 0");
    assert_invalid(
        &check(&server, &bad(r#"{"limit": 5, "window_ms": 7200000}"#)).await,
        "the stated window 7200000ms is above the rule's bound 3600000ms",
    );
    assert_invalid(&check(&server, &bad(r#"{"limit": "ten"}"#)).await, "stated.limit must be a whole number");
    assert_invalid(&check(&server, &bad(r#"{"limit": 1.5}"#)).await, "stated.limit must be a whole number");
    assert_invalid(&check(&server, &bad(r#"{"limits": 5}"#)).await, "Unknown field stated.\"limits\"");
    assert_invalid(&check(&server, &bad(r#"[5]"#)).await, "\"stated\" must be an object");
    // The template requires a limit and a window: a request stating none is refused, not given a
    // default.
    assert_invalid(&check(&server, &bad(r#"{"window_ms": 1000}"#)).await, "takes its limit from the request");
    assert_invalid(&check(&server, &bad(r#"{"limit": 1}"#)).await, "takes its window from the request");
    // A rule that takes nothing from requests: stating a limit to it is refused.
    let plain = stating("plain", "u3", r#"{"limit": 50, "window_ms": 1000}"#);
    assert_invalid(&check(&server, &plain).await, "no rule that applies to it takes one");
    // Nothing was counted by any of them.
    let fine = check(&server, &bad(r#"{"limit": 1, "window_ms": 1000}"#)).await;
    assert_eq!((fine.status, fine.json()["limits"][0]["remaining"].as_u64()), (200, Some(0)));
    // A reservation does not take stated values.
    let reserve = server
        .request(Method::POST, "/v1/reserve", bad(r#"{"limit": 1}"#), &[("content-type", "application/json")])
        .await;
    assert_invalid(&reserve, "a reservation does not take stated values");
    server.stop().await;
}

#[tokio::test]
async fn stating_a_limit_needs_the_state_limits_scope() {
    const CHECKER: &str = "checker-token-4c1e7a9d02b5f3";
    const STATER: &str = "stater-token-8b2f6d0e3a9c71";
    let dir = TempDir::new("stated-scope");
    let checker = dir.write_atomic("checker.token", CHECKER);
    let stater = dir.write_atomic("stater.token", STATER);
    let config = format!(
        "auth:\n  clients:\n    - name: checker\n      token_file: {}\n      scopes: [check]\n    - name: stater\n      \
         token_file: {}\n      scopes: [check, state_limits]\n{TEMPLATE}",
        checker.display(),
        stater.display()
    );
    let path = dir.write_atomic("floodgate.yaml", &config);
    let loaded = floodgate_config::load(&path).expect("valid configuration");
    let server = TestServer::with_options(loaded, ServeOptions::default().config_path(&path)).await;
    let body = stating("throttled", "u4", r#"{"limit": 3, "window_ms": 60000}"#);
    let call = |token: &'static str| {
        let auth = format!("Bearer {token}");
        let body = body.clone();
        let server = &server;
        async move {
            server
                .request(
                    Method::POST,
                    "/v1/check",
                    body,
                    &[("content-type", "application/json"), ("authorization", &auth)],
                )
                .await
        }
    };
    let refused = call(CHECKER).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.json()["detail"].as_str().unwrap().contains("\"state_limits\" scope"),
        "{}",
        refused.body
    );
    let allowed = call(STATER).await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert_eq!(allowed.json()["limits"][0]["remaining"], 2, "the refused call counted nothing");
    server.stop().await;
}
