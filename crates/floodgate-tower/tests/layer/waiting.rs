//! Stores that must be awaited (Redis, over the network) and stores that answer at once (memory)
//! behave the same behind the layer: the layer decides in `call` when the store can, and awaits it
//! otherwise.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use floodgate::core::{Grant, ManualClock};
use floodgate::store::{Applied, Mode, Op, Records};
use floodgate::{Engine, Limit, MemoryConfig, MemoryStore, Policy, Rule, Store, StoreError};
use floodgate_core::FixedWindow;
use floodgate_tower::RateLimitLayer;
use http::{HeaderName, Request, StatusCode};

use crate::{START, send};

/// A memory store that only answers through `apply`, after yielding once, as a remote store does.
struct Awaited(MemoryStore<ManualClock>);

impl Store for Awaited {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        self.0.apply(ops, mode, out).await
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        self.0.refund(key, limit, grant).await
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        self.0.reset(key).await
    }
}

/// Keeps no reservation records.
impl Records for Awaited {}

fn app<S: Store>(layer: RateLimitLayer<S>) -> Router {
    Router::new().route("/", get(|| async { "hi" })).layer(layer)
}

#[tokio::test]
async fn a_store_that_must_be_awaited_limits_exactly_as_one_that_answers_at_once() {
    let rule = || {
        Rule::new("per-user", FixedWindow::try_new(2.try_into().unwrap(), Duration::from_secs(60)).unwrap())
            .key(["user"])
    };
    let memory = || MemoryStore::with_config(MemoryConfig::default(), ManualClock::new(START));
    let awaited = Engine::new(Policy::new([rule()]).unwrap(), Awaited(memory()));
    let at_once = Engine::new(Policy::new([rule()]).unwrap(), memory());
    let someone = floodgate::Descriptors::new().with("user", "someone");
    assert!(awaited.check_now(&someone, 1).is_none(), "this store must be awaited");
    assert!(at_once.check_now(&someone, 1).is_some(), "this one answers at once");

    let header = HeaderName::from_static("x-user-id");
    let awaited = app(RateLimitLayer::new(awaited).header(header.clone(), "user"));
    let at_once = app(RateLimitLayer::new(at_once).header(header, "user"));
    let request = || Request::get("/").header("x-user-id", "u1").body(Body::empty()).unwrap();
    for expected in [StatusCode::OK, StatusCode::OK, StatusCode::TOO_MANY_REQUESTS] {
        let (a, b) = (send(&awaited, request()).await, send(&at_once, request()).await);
        assert_eq!((a.status(), b.status()), (expected, expected));
        assert_eq!(a.headers().get("ratelimit"), b.headers().get("ratelimit"));
        assert_eq!(a.headers().get("retry-after"), b.headers().get("retry-after"));
    }
}
