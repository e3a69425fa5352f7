//! `action: delay`: a request a delay rule denies waits for capacity (the exact `retry_after`) up
//! to the rule's `max_wait`, then passes — or, past `max_wait` or with too many already waiting, is
//! denied. Time is tokio's paused clock, which the store reads too: no real sleeps.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use floodgate::core::{Clock, Timestamp};
use floodgate::{Action, Engine, MemoryConfig, MemoryStore, Policy, Rule};
use floodgate_core::FixedWindow;
use floodgate_tower::RateLimitLayer;
use http::{Request, StatusCode};

use crate::{START, send};

/// The store's clock follows tokio's (paused in these tests, advanced by the waits themselves).
#[derive(Debug, Clone)]
struct TokioClock {
    started: tokio::time::Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        START.saturating_add(self.started.elapsed())
    }
}

fn app(max_wait: Duration, max_waiting: usize) -> (Router, RateLimitLayer<MemoryStore<TokioClock>>) {
    let rule = Rule::new(
        "smooth",
        FixedWindow::try_new(NonZeroU64::new(1).unwrap(), Duration::from_secs(1)).unwrap(),
    )
    .action(Action::Delay { max_wait });
    let store = MemoryStore::with_config(
        MemoryConfig::default(),
        TokioClock { started: tokio::time::Instant::now() },
    );
    let layer =
        RateLimitLayer::new(Engine::new(Policy::new([rule]).unwrap(), store)).max_waiting(max_waiting);
    (Router::new().route("/", get(|| async { "hi" })).layer(layer.clone()), layer)
}

fn get_root() -> Request<Body> {
    Request::get("/").body(Body::empty()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_delayed_request_waits_for_the_window_and_passes() {
    let (app, layer) = app(Duration::from_secs(2), 8);
    assert_eq!(send(&app, get_root()).await.status(), StatusCode::OK);
    let started = tokio::time::Instant::now();
    let second = send(&app, get_root()).await;
    assert_eq!(second.status(), StatusCode::OK, "waited for the next window instead of a 429");
    assert_eq!(started.elapsed(), Duration::from_secs(1), "exactly the retry_after");
    assert_eq!((layer.waiting().waited(), layer.waiting().waiting()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn past_max_wait_it_is_denied_at_once() {
    let (app, _) = app(Duration::from_millis(500), 8);
    assert_eq!(send(&app, get_root()).await.status(), StatusCode::OK);
    let started = tokio::time::Instant::now();
    let second = send(&app, get_root()).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(second.headers().contains_key("retry-after"));
    assert_eq!(started.elapsed(), Duration::ZERO, "a wait longer than max_wait is not begun");
}

#[tokio::test(start_paused = true)]
async fn waiting_requests_are_bounded() {
    let (app, layer) = app(Duration::from_secs(10), 2);
    assert_eq!(send(&app, get_root()).await.status(), StatusCode::OK);
    // Five requests at once: two wait (and pass, one window apart), the other three are denied.
    let app = Arc::new(app);
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let app = Arc::clone(&app);
            tokio::spawn(async move { send(&*app, get_root()).await.status() })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    let passed = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(passed, 2, "{statuses:?}");
    assert_eq!(layer.waiting().refused(), 3);
}
