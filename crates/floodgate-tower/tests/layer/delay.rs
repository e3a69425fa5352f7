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
use floodgate::delay::{DelayQueues, Fairness};
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

/// An app whose handler records the `x-id` of each request it serves, in order, under a delay rule
/// of one request a second; `x-priority` gives the tier.
fn recording_app() -> (Router, Arc<std::sync::Mutex<Vec<String>>>) {
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (_, layer) = app(Duration::from_secs(10), 8);
    let clock = TokioClock { started: tokio::time::Instant::now() };
    let layer = layer
        .delay_queues(DelayQueues::new(Fairness::default(), clock))
        .tier(|parts| parts.headers.get("x-priority")?.to_str().ok()?.parse().ok());
    let record = Arc::clone(&served);
    let router = Router::new()
        .route(
            "/",
            get(move |headers: http::HeaderMap| {
                let record = Arc::clone(&record);
                async move {
                    let id = headers.get("x-id").and_then(|v| v.to_str().ok()).unwrap_or("?");
                    record.lock().unwrap().push(id.to_owned());
                    "hi"
                }
            }),
        )
        .layer(layer);
    (router, served)
}

/// Sends requests `(id, tier)` one after another, each waiting before the next arrives; the
/// statuses in the order sent.
async fn send_in_order(app: Router, requests: &[(&str, &str)]) -> Vec<StatusCode> {
    let app = Arc::new(app);
    let mut tasks = Vec::new();
    for (id, tier) in requests {
        let app = Arc::clone(&app);
        let request = Request::get("/").header("x-id", *id).header("x-priority", *tier).body(Body::empty());
        tasks.push(tokio::spawn(async move { send(&*app, request.unwrap()).await.status() }));
        // Let it decide (and queue) before the next one comes.
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    statuses
}

#[tokio::test(start_paused = true)]
async fn waiters_pass_first_come_first_served() {
    let (app, served) = recording_app();
    let statuses = send_in_order(app, &[("first", "3"), ("a", "3"), ("b", "3"), ("c", "3")]).await;
    assert!(statuses.iter().all(|s| *s == StatusCode::OK), "{statuses:?}");
    assert_eq!(*served.lock().unwrap(), ["first", "a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn a_higher_tier_waiter_goes_before_lower_ones_that_came_first() {
    let (app, served) = recording_app();
    let statuses = send_in_order(app, &[("first", "3"), ("head", "3"), ("low", "3"), ("high", "0")]).await;
    assert!(statuses.iter().all(|s| *s == StatusCode::OK), "{statuses:?}");
    // `head` was already deciding when the others queued; then the tier-0 one, then tier 3.
    assert_eq!(*served.lock().unwrap(), ["first", "head", "high", "low"]);
}
