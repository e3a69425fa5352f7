//! The route descriptor comes from axum's `MatchedPath`, never the raw URL.

use std::num::NonZeroU64;
use std::time::Duration;

use axum::body::Body;
use axum::routing::{get, post as post_route};
use axum::{Extension, Router};
use floodgate::Rule;
use floodgate_core::FixedWindow;
use floodgate_tower::{RateLimitInfo, RateLimitLayer};
use http::{Request, StatusCode};

use crate::{TestStore, body_string, engine, post, send};

fn once_per_minute(route: &str) -> Rule {
    Rule::new("orders", FixedWindow::try_new(NonZeroU64::new(1).unwrap(), Duration::from_secs(60)).unwrap())
        .when("route", route)
}

async fn route_of(Extension(info): Extension<RateLimitInfo>) -> String {
    info.descriptors().get("route").unwrap_or("-").to_owned()
}

fn app(layer: RateLimitLayer<TestStore>) -> Router {
    Router::new()
        .route("/order/{id}", post_route(route_of).get(route_of))
        .route("/health", get(route_of))
        .layer(layer)
}

#[tokio::test]
async fn two_ids_share_the_route_template_key() {
    let (engine, _clock) = engine([once_per_minute("POST /order/{id}")]);
    let app = app(RateLimitLayer::new(engine).route());
    let first = send(&app, post("/order/1").body(Body::empty()).unwrap()).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(body_string(first).await, "POST /order/{id}");
    let second = send(&app, post("/order/2").body(Body::empty()).unwrap()).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn the_method_is_part_of_the_route() {
    let (engine, _clock) = engine([once_per_minute("POST /order/{id}")]);
    let app = app(RateLimitLayer::new(engine).route());
    for _ in 0..3 {
        let response = send(&app, Request::get("/order/1").body(Body::empty()).unwrap()).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(body_string(response).await, "GET /order/{id}");
    }
}

#[tokio::test]
async fn without_a_matched_path_there_is_no_route_descriptor() {
    // A global rule that applies only when some route is known.
    let rule = Rule::new(
        "any-route",
        FixedWindow::try_new(NonZeroU64::new(1).unwrap(), Duration::from_secs(60)).unwrap(),
    )
    .when_condition("route", floodgate::Condition::Present);
    let (engine, _clock) = engine([rule]);
    let layer = RateLimitLayer::new(engine).route();

    // Unmatched paths (the fallback) have no template: never limited by the rule.
    let routed = app(layer.clone());
    for _ in 0..3 {
        let response = send(&routed, post("/nowhere/42").body(Body::empty()).unwrap()).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }

    // A layer wrapped around the whole router runs before routing: no template either.
    let outside = tower::ServiceBuilder::new()
        .layer(layer)
        .service(Router::new().route("/order/{id}", post_route(|| async { "ok" })));
    for _ in 0..3 {
        let response =
            tower::ServiceExt::oneshot(outside.clone(), post("/order/1").body(Body::empty()).unwrap())
                .await
                .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
}
