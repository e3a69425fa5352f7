//! Allowed, denied, never allowed; headers; shadow and tag rules.

use std::num::NonZeroU64;
use std::time::Duration;

use axum::body::Body;
use axum::routing::post as post_route;
use axum::{Extension, Router};
use floodgate::{Action, Rule};
use floodgate_core::{FixedWindow, SlidingWindow};
use floodgate_http::HeaderStyle;
use floodgate_tower::{RateLimitInfo, RateLimitLayer};
use http::{HeaderMap, HeaderName, StatusCode};

use crate::{START, TestStore, body_json, body_string, engine, post, send};

const USER: HeaderName = HeaderName::from_static("x-user-id");

fn per_user(limit: u64) -> Rule {
    Rule::new(
        "per-user",
        FixedWindow::try_new(NonZeroU64::new(limit).unwrap(), Duration::from_secs(60)).unwrap(),
    )
    .key(["user"])
}

fn chat_app(layer: RateLimitLayer<TestStore>) -> Router {
    Router::new().route("/chat", post_route(|| async { "hello" })).layer(layer)
}

fn chat(user: &str) -> http::Request<Body> {
    post("/chat").header(USER, user).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn ten_allowed_then_429_with_retry_after_and_problem_body() {
    let (engine, clock) = engine([per_user(10)]);
    let app = chat_app(RateLimitLayer::new(engine).header(USER, "user"));
    for i in 0..10 {
        let response = send(&app, chat("u1")).await;
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
        assert_eq!(body_string(response).await, "hello");
    }
    clock.advance(Duration::from_secs(29));
    let denied = send(&app, chat("u1")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "31");
    assert_eq!(denied.headers()["content-type"], "application/problem+json");
    assert_eq!(denied.headers()["ratelimit"], r#""per-user";r=0;t=31"#);
    assert_eq!(denied.headers()["x-ratelimit-reset"], (START.as_secs() + 60).to_string());
    assert_eq!(
        body_json(denied).await,
        serde_json::json!({
            "type": "https://floodgate.dev/problems/rate-limited",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "Rate limit exceeded; retry in 31 seconds.",
            "retry_after": 31,
            "limit": 10,
            "remaining": 0,
            "reset": START.as_secs() + 60,
        })
    );
    // Another user is not affected, and u1 passes again once the window has turned.
    assert_eq!(send(&app, chat("u2")).await.status(), StatusCode::OK);
    clock.advance(Duration::from_secs(31));
    assert_eq!(send(&app, chat("u1")).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn allowed_responses_carry_the_rate_limit_headers() {
    let (engine, clock) = engine([per_user(10)]);
    let app = chat_app(RateLimitLayer::new(engine).header(USER, "user"));
    clock.advance(Duration::from_millis(10_500));
    let response = send(&app, chat("u1")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let h = response.headers();
    assert_eq!(h["ratelimit-policy"], r#""per-user";q=10;w=60"#);
    assert_eq!(h["ratelimit"], r#""per-user";r=9;t=50"#);
    assert_eq!(h["x-ratelimit-limit"], "10");
    assert_eq!(h["x-ratelimit-remaining"], "9");
    assert_eq!(h["x-ratelimit-reset"], (START.as_secs() + 60).to_string());
    assert!(!h.contains_key("retry-after"));
}

#[tokio::test]
async fn header_style_none_sends_only_retry_after_on_a_429() {
    let (engine, _clock) = engine([per_user(1)]);
    let app = chat_app(RateLimitLayer::new(engine).header(USER, "user").headers(HeaderStyle::None));
    let allowed = send(&app, chat("u1")).await;
    assert!(rate_limit_header_names(allowed.headers()).is_empty());
    let denied = send(&app, chat("u1")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(rate_limit_header_names(denied.headers()), ["retry-after"]);
}

#[tokio::test]
async fn header_style_ietf_sends_no_legacy_headers() {
    let (engine, _clock) = engine([per_user(1)]);
    let app = chat_app(RateLimitLayer::new(engine).header(USER, "user").headers(HeaderStyle::Ietf));
    let allowed = send(&app, chat("u1")).await;
    assert_eq!(rate_limit_header_names(allowed.headers()), ["ratelimit", "ratelimit-policy"]);
}

fn rate_limit_header_names(h: &HeaderMap) -> Vec<String> {
    let mut names: Vec<String> =
        h.keys().map(|k| k.to_string()).filter(|k| k.contains("ratelimit") || k == "retry-after").collect();
    names.sort();
    names
}

#[tokio::test]
async fn requests_without_the_key_descriptor_are_not_limited_by_the_rule() {
    let (engine, _clock) = engine([per_user(1)]);
    let app = chat_app(RateLimitLayer::new(engine).header(USER, "user"));
    for _ in 0..3 {
        let response = send(&app, post("/chat").body(Body::empty()).unwrap()).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(!response.headers().contains_key("ratelimit"));
    }
}

#[tokio::test]
async fn a_cost_that_can_never_pass_is_a_400_problem_and_the_service_is_not_called() {
    let (engine, _clock) = engine([per_user(10)]);
    let called = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = called.clone();
    let app = Router::new()
        .route(
            "/chat",
            post_route(move || async move {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
                "hello"
            }),
        )
        .layer(RateLimitLayer::new(engine).header(USER, "user").cost(|parts| {
            parts.headers.get("x-cost").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(1)
        }));
    for cost in ["11", "0"] {
        let request = post("/chat").header(USER, "u1").header("x-cost", cost).body(Body::empty()).unwrap();
        let response = send(&app, request).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "cost {cost}");
        assert_eq!(response.headers()["content-type"], "application/problem+json");
        assert!(!response.headers().contains_key("retry-after"));
        let json = body_json(response).await;
        assert_eq!(json["type"], "https://floodgate.dev/problems/never-allowed");
        assert_eq!(json["status"], 400);
        assert!(!json.to_string().contains("per-user"), "no rule names: {json}");
    }
    assert!(!called.load(std::sync::atomic::Ordering::SeqCst));
    // A cost of 10 fits.
    let request = post("/chat").header(USER, "u1").header("x-cost", "10").body(Body::empty()).unwrap();
    assert_eq!(send(&app, request).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn shadow_rule_never_denies() {
    let shadow = per_user(1).action(Action::Shadow);
    let (engine, _clock) = engine([shadow]);
    let app = chat_app(RateLimitLayer::new(engine).header(USER, "user"));
    for i in 0..5 {
        let response = send(&app, chat("u1")).await;
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
        assert!(!response.headers().contains_key("retry-after"));
        // Once it would deny, it is no longer advertised as a limit.
        if i > 0 {
            assert!(rate_limit_header_names(response.headers()).is_empty());
        }
    }
}

#[tokio::test]
async fn tag_rule_marks_request_and_response_and_the_handler_sees_the_verdict() {
    let tag = Rule::new(
        "burst-watch",
        SlidingWindow::try_new(NonZeroU64::new(2).unwrap(), Duration::from_secs(60)).unwrap(),
    )
    .key(["user"])
    .action(Action::Tag);
    let (engine, _clock) = engine([tag]);
    let handler = |Extension(info): Extension<RateLimitInfo>, headers: HeaderMap| async move {
        let header = headers.get("floodgate-tag").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        let tags: Vec<&str> = info.tags().collect();
        format!("{}|{}|{}", tags.join(","), header, info.descriptors().get("user").unwrap_or("-"))
    };
    let app = Router::new()
        .route("/chat", post_route(handler))
        .layer(RateLimitLayer::new(engine).header(USER, "user"));

    // Not tagged yet: a forged tag header from the client is removed before the handler.
    let forged = post("/chat").header(USER, "u1").header("floodgate-tag", "vip").body(Body::empty()).unwrap();
    let response = send(&app, forged).await;
    assert!(!response.headers().contains_key("floodgate-tag"));
    assert_eq!(body_string(response).await, "||u1");
    send(&app, chat("u1")).await;

    let tagged = send(&app, chat("u1")).await;
    assert_eq!(tagged.status(), StatusCode::OK);
    assert_eq!(tagged.headers()["floodgate-tag"], "burst-watch");
    assert_eq!(body_string(tagged).await, "burst-watch|burst-watch|u1");
}

#[tokio::test]
async fn errors_of_the_inner_service_pass_through() {
    let (engine, _clock) = engine([per_user(10)]);
    let layer = RateLimitLayer::new(engine).header(USER, "user");
    let service = tower::ServiceBuilder::new().layer(layer).service(tower::service_fn(
        |_: http::Request<Body>| async { Err::<http::Response<Body>, _>("boom") },
    ));
    let result = tower::ServiceExt::oneshot(service, chat("u1")).await;
    assert_eq!(result.err(), Some("boom"));
}

#[tokio::test]
async fn a_degrading_plan_tells_the_handler_and_the_client_which_model_to_use() {
    const PLAN: HeaderName = HeaderName::from_static("x-plan");
    let monthly =
        |n: u64| FixedWindow::try_new(NonZeroU64::new(n).unwrap(), Duration::from_secs(60)).unwrap();
    let plans = Rule::new("monthly-calls", monthly(1)).key(["user"]).vary_by(
        floodgate::ByDescriptor::new("plan").degrading("free", monthly(1), "gpt-4o-mini").variant(
            "enterprise",
            monthly(1),
            Some(Action::Deny),
        ),
    );
    let (engine, _clock) = engine([plans]);
    let handler = |Extension(info): Extension<RateLimitInfo>, headers: HeaderMap| async move {
        let header = headers.get("floodgate-degrade").map(|v| v.to_str().unwrap().to_owned());
        format!("{}|{}", info.degrade_to().unwrap_or("-"), header.unwrap_or_else(|| "-".to_owned()))
    };
    let app = Router::new()
        .route("/chat", post_route(handler))
        .layer(RateLimitLayer::new(engine).header(USER, "user").header(PLAN, "plan"));
    let call = |user: &str, plan: &str| {
        post("/chat").header(USER, user).header(PLAN, plan).body(Body::empty()).unwrap()
    };

    let within = send(&app, call("u1", "free")).await;
    assert!(!within.headers().contains_key("floodgate-degrade"));
    assert_eq!(body_string(within).await, "-|-");
    let over = send(&app, call("u1", "free")).await;
    assert_eq!(over.status(), StatusCode::OK);
    assert_eq!(over.headers()["floodgate-degrade"], "gpt-4o-mini");
    assert_eq!(body_string(over).await, "gpt-4o-mini|gpt-4o-mini");

    send(&app, call("u2", "enterprise")).await;
    let refused = send(&app, call("u2", "enterprise")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(!refused.headers().contains_key("floodgate-degrade"));
}

#[tokio::test]
async fn a_calendar_quota_refuses_with_a_quota_exceeded_problem() {
    let calendar = floodgate_core::Calendar::try_new(floodgate_core::calendar::Period::Day, "UTC").unwrap();
    let daily = Rule::new("daily-calls", floodgate_core::Quota::new(NonZeroU64::new(1).unwrap(), calendar))
        .key(["user"]);
    let (engine, _clock) = engine([daily, per_user(10)]);
    let app = chat_app(RateLimitLayer::new(engine).header(USER, "user"));
    assert_eq!(send(&app, chat("u1")).await.status(), StatusCode::OK);
    let refused = send(&app, chat("u1")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let body = body_json(refused).await;
    assert_eq!(body["type"], "https://floodgate.dev/problems/quota-exceeded", "{body}");

    // A rate limit's denial stays rate-limited.
    let (rate_engine, _clock) = crate::engine([per_user(1)]);
    let app = chat_app(RateLimitLayer::new(rate_engine).header(USER, "user"));
    send(&app, chat("u1")).await;
    let limited = body_json(send(&app, chat("u1")).await).await;
    assert_eq!(limited["type"], "https://floodgate.dev/problems/rate-limited", "{limited}");
}
