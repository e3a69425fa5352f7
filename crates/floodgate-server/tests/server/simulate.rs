//! `POST /v1/simulate`: the playground's decisions are the engine's, decision for decision, and
//! bad input is a 400 naming the field.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Descriptors, Engine, Limit, MemoryConfig, MemoryStore, Policy, Rule};
use floodgate_api::playground::{self, Request};
use floodgate_config as config;
use floodgate_core::{
    Concurrency, FixedWindow, Gcra, ManualClock, Rate, SlidingLog, SlidingWindow, Timestamp, TokenBucket,
};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{TestServer, parse};

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

/// Every windowed algorithm, with small counts and windows from 1 ms to 10 s.
fn limits() -> impl Strategy<Value = Limit> {
    let count = 1u64..12;
    let window = (1u64..10_000).prop_map(Duration::from_millis);
    let rate = (1u64..10, prop_oneof![Just(1u64), Just(250), Just(1_000), Just(7_000)])
        .prop_map(|(n, ms)| Rate::try_new(nz(n), Duration::from_millis(ms)).unwrap());
    prop_oneof![
        (count.clone(), window.clone()).prop_map(|(n, w)| FixedWindow::try_new(nz(n), w).unwrap().into()),
        (count.clone(), window.clone()).prop_map(|(n, w)| SlidingWindow::try_new(nz(n), w).unwrap().into()),
        (count.clone(), window.clone()).prop_map(|(n, w)| SlidingLog::try_new(nz(n), w).unwrap().into()),
        (rate.clone(), count.clone()).prop_map(|(r, b)| TokenBucket::try_new(r, nz(b)).unwrap().into()),
        (rate, count.clone()).prop_map(|(r, b)| Gcra::try_new(r, nz(b)).unwrap().into()),
        (count, window).prop_map(|(n, l)| Concurrency::try_new(nz(n), l).unwrap().into()),
    ]
}

/// Up to 60 requests, bursts (gap 0) and pauses mixed, costs up to 3 (capped at the capacity).
fn requests() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((prop_oneof![Just(0u64), 0u64..50, 0u64..5_000], 1u64..4), 0..60)
}

/// The memory store's decisions for `requests` of one rule keyed globally, on a manual clock set to
/// each request's instant.
fn by_the_engine(
    limit: &Limit,
    block_for: Option<Duration>,
    requests: &[Request],
) -> Vec<floodgate_core::Decision> {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let clock = ManualClock::new(Timestamp::EPOCH);
    let store = MemoryStore::with_config(MemoryConfig::default(), clock.clone());
    let mut rule = Rule::new("sim", limit.clone());
    if let Some(d) = block_for {
        rule = rule.block_for(d);
    }
    let engine = Engine::new(Policy::new([rule]).unwrap(), store);
    let descriptors = Descriptors::new();
    requests
        .iter()
        .map(|r| {
            clock.set(playground::instant(r.at_ms));
            let verdict = runtime.block_on(engine.check(&descriptors, r.cost)).unwrap();
            assert_eq!(verdict.limits.len(), 1);
            verdict.limits[0].decision
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The playground runs the algorithms as the engine does on the memory store: same allowed,
    /// remaining, retry_after and reset_after, decision for decision.
    #[test]
    fn the_playground_decides_as_the_memory_store_does(limit in limits(), gaps in requests()) {
        let mut at_ms = 0;
        let requests: Vec<Request> = gaps
            .iter()
            .map(|(gap, cost)| {
                at_ms += gap;
                Request { at_ms, cost: (*cost).min(limit.capacity()) }
            })
            .collect();
        let simulated = playground::simulate(&limit, &requests, None).unwrap();
        let engine = by_the_engine(&limit, None, &requests);
        prop_assert_eq!(simulated.decisions, engine);
    }

    /// With a penalty box (longer or shorter than the window), too: the same refusals for the
    /// same time, and the same fresh start after.
    #[test]
    fn the_playground_boxes_as_the_memory_store_does(
        limit in limits().prop_filter("a box is for counts", |l| !l.holds_permits()),
        block_ms in prop_oneof![1u64..50, 50u64..20_000],
        gaps in requests(),
    ) {
        let mut at_ms = 0;
        let requests: Vec<Request> = gaps
            .iter()
            .map(|(gap, cost)| {
                at_ms += gap;
                Request { at_ms, cost: (*cost).min(limit.capacity()) }
            })
            .collect();
        let block_for = Some(Duration::from_millis(block_ms));
        let simulated = playground::simulate_boxed(&limit, block_for, &requests, None).unwrap();
        let engine = by_the_engine(&limit, block_for, &requests);
        prop_assert_eq!(simulated.decisions, engine);
    }
}

#[tokio::test]
async fn a_simulated_penalty_box_refuses_until_it_ends() {
    let server = TestServer::start(parse("rules: []\n")).await;
    let body = r#"{"algorithm": "fixed_window", "limit": 2, "window": "1m", "block_for": "15m",
        "requests": [{"at_ms": 0}, {"at_ms": 0}, {"at_ms": 0}, {"at_ms": 100000}, {"at_ms": 900000}]}"#;
    let reply = server.post("/v1/simulate", body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let allowed: Vec<bool> = reply.json()["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["allowed"].as_bool().unwrap())
        .collect();
    assert_eq!(allowed, [true, true, false, false, true]);
    assert_eq!(reply.json()["decisions"][3]["retry_after_ms"], 800_000);
    for (bad, says) in [
        (r#""block_for": "soon""#, "is not a duration"),
        (r#""block_for": "0s""#, "must be longer than 0"),
        (r#""block_for": 5"#, "must be a duration"),
    ] {
        let body =
            format!(r#"{{"algorithm": "fixed_window", "limit": 2, "window": "1m", {bad}, "requests": []}}"#);
        let reply = server.post("/v1/simulate", body).await;
        assert_eq!(reply.status, 400, "{}", reply.body);
        assert!(reply.json()["detail"].as_str().unwrap().contains(says), "{}", reply.body);
    }
    let permits = r#"{"algorithm": "concurrency", "limit": 2, "block_for": "1m", "requests": []}"#;
    assert_eq!(server.post("/v1/simulate", permits).await.status, 400);
    server.stop().await;
}

#[tokio::test]
async fn the_seeds_burst_of_ten_passes_eight_through_the_bucket_and_five_through_the_window() {
    let server = TestServer::start(config::builtin()).await;
    let burst: Vec<Value> = (0..10).map(|_| json!({"at_ms": 0})).collect();
    let bucket = server
        .post(
            "/v1/simulate",
            json!({"algorithm": "token_bucket", "rate": "2/s", "burst": 8, "requests": burst}).to_string(),
        )
        .await;
    assert_eq!(bucket.status, 200, "{}", bucket.body);
    let body = bucket.json();
    assert_eq!((body["algorithm"].as_str(), body["limit"].as_u64()), (Some("token_bucket"), Some(8)));
    let decisions = body["decisions"].as_array().unwrap();
    assert_eq!(decisions.iter().filter(|d| d["allowed"] == true).count(), 8);
    assert_eq!(decisions[7]["remaining"], 0);
    // One token every 500 ms: the ninth and tenth wait for the first.
    assert_eq!(
        decisions[8],
        json!({"at_ms": 0, "allowed": false, "remaining": 0, "retry_after_ms": 500, "reset_after_ms": 4000})
    );
    assert!(body.get("levels").is_none());

    let window = server
        .post(
            "/v1/simulate",
            json!({"algorithm": "sliding_window", "limit": 5, "window": "5s", "requests": burst, "sample_ms": 1000, "until_ms": 10000})
                .to_string(),
        )
        .await;
    assert_eq!(window.status, 200, "{}", window.body);
    let body = window.json();
    let decisions = body["decisions"].as_array().unwrap();
    assert_eq!(decisions.iter().filter(|d| d["allowed"] == true).count(), 5);
    // The next window starts at 5 s, weighing the five at 1 - (t - 5 s) / 5 s: room for one at 6 s.
    assert_eq!(decisions[5]["retry_after_ms"], 6000);
    let levels: Vec<(u64, u64)> = body["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["at_ms"].as_u64().unwrap(), l["remaining"].as_u64().unwrap()))
        .collect();
    // The previous window's five weigh less and less through the next 5 s.
    assert_eq!(
        levels,
        [
            (0, 0),
            (1000, 0),
            (2000, 0),
            (3000, 0),
            (4000, 0),
            (5000, 0),
            (6000, 1),
            (7000, 2),
            (8000, 3),
            (9000, 4),
            (10000, 5)
        ]
    );
    server.stop().await;
}

#[tokio::test]
async fn simulating_consumes_nothing_and_is_deterministic() {
    let server = TestServer::start(config::builtin()).await;
    let body = json!({"algorithm": "fixed_window", "limit": 2, "window": "1s", "requests": [{"at_ms": 0}, {"at_ms": 1}, {"at_ms": 2}]}).to_string();
    let first = server.post("/v1/simulate", body.clone()).await;
    let second = server.post("/v1/simulate", body).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, second.body);
    let metrics = server.get("/metrics").await.body;
    assert!(
        !metrics.lines().any(|l| l.starts_with("floodgate_decisions_total") && !l.ends_with(" 0")),
        "a simulation is no decision: {metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_null_cost_is_the_default_cost_as_the_document_allows() {
    let server = TestServer::start(config::builtin()).await;
    let body = |cost: Value| {
        json!({"algorithm": "fixed_window", "limit": 2, "window": "1s", "requests": [{"at_ms": 0, "cost": cost}, {"at_ms": 1}, {"at_ms": 2}]})
            .to_string()
    };
    let null = server.post("/v1/simulate", body(Value::Null)).await;
    let one = server.post("/v1/simulate", body(json!(1))).await;
    assert_eq!(null.status, 200, "{}", null.body);
    assert_eq!(null.body, one.body);
    server.stop().await;
}

/// What no schema can state between fields — a cost above the limit, requests out of time order,
/// a sampling too dense for `until_ms` — was a 400 that plain schemathesis reported as a
/// schema-valid request refused. Each is a simulation now.
#[tokio::test]
async fn what_relates_two_fields_is_simulated_not_refused() {
    let server = TestServer::start(config::builtin()).await;
    let window = |requests: Value, more: Value| {
        let mut body =
            json!({"algorithm": "sliding_window", "limit": 5, "window": "5s", "requests": requests});
        body.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
        body.to_string()
    };
    // A cost above the limit: refused, with no time to retry at; nothing taken.
    let reply = server
        .post("/v1/simulate", window(json!([{"at_ms": 0, "cost": 6}, {"at_ms": 1, "cost": 5}]), json!({})))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let decisions = reply.json()["decisions"].clone();
    assert_eq!(
        decisions[0],
        json!({"at_ms": 0, "allowed": false, "remaining": 5, "retry_after_ms": null, "reset_after_ms": 0})
    );
    assert_eq!(decisions[1]["allowed"], true, "{decisions}");
    // Out of time order: simulated in time order, answered in the order given.
    let reply = server.post("/v1/simulate", window(json!([{"at_ms": 9}, {"at_ms": 3}]), json!({}))).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let times: Vec<u64> =
        reply.json()["decisions"].as_array().unwrap().iter().map(|d| d["at_ms"].as_u64().unwrap()).collect();
    assert_eq!(times, [9, 3]);
    assert_eq!(reply.json()["decisions"][0]["remaining"], 3, "the one at 3 ms came first");
    // 100 001 samples asked: every 11 ms instead, 9 091 of them.
    let reply =
        server.post("/v1/simulate", window(json!([]), json!({"sample_ms": 1, "until_ms": 100_000}))).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let levels = reply.json()["levels"].as_array().unwrap().clone();
    assert_eq!((levels.len(), levels[1]["at_ms"].clone()), (9_091, json!(11)));
    server.stop().await;
}

#[tokio::test]
async fn bad_simulations_are_400s_naming_the_field() {
    let server = TestServer::start(config::builtin()).await;
    let cases: Vec<(Value, &str)> = vec![
        (json!({"rate": "2/s", "requests": []}), "algorithm"),
        (json!({"algorithm": "leaky_bucket", "requests": []}), "unknown algorithm \"leaky_bucket\""),
        (
            json!({"algorithm": "token_bucket", "rate": "two/s", "requests": []}),
            "rate: invalid rate \"two/s\"",
        ),
        (json!({"algorithm": "token_bucket", "requests": []}), "requires \"rate\""),
        (
            json!({"algorithm": "sliding_window", "limit": 5, "window": "5s", "rate": "1/s", "requests": []}),
            "\"rate\" does not apply",
        ),
        (json!({"algorithm": "sliding_window", "limit": 0, "window": "5s", "requests": []}), "limit"),
        (
            json!({"algorithm": "sliding_window", "limit": 5, "window": "5s", "color": "red", "requests": []}),
            "unknown field \"color\"",
        ),
        (json!({"algorithm": "sliding_window", "limit": 5, "window": "5s"}), "requests: missing"),
        (
            json!({"algorithm": "sliding_window", "limit": 5, "window": "5s", "requests": [{"cost": 1}]}),
            "requests[0].at_ms: missing",
        ),
        (
            json!({"algorithm": "sliding_window", "limit": 5, "window": "5s", "requests": [{"at_ms": -1}]}),
            "requests[0].at_ms",
        ),
        (
            json!({"algorithm": "sliding_window", "limit": 5, "window": "5s", "requests": [{"at_ms": 0, "cost": 0}]}),
            "requests[0].cost",
        ),
        (
            json!({"algorithm": "sliding_window", "limit": 5, "window": "5s", "requests": [{"at_ms": 0, "when": 1}]}),
            "requests[0].when: unknown field",
        ),
        (
            json!({"algorithm": "sliding_window", "limit": 5, "window": "5s", "requests": [], "sample_ms": 0}),
            "sample_ms: must be at least 1",
        ),
        (
            json!({"algorithm": "sliding_window", "limit": 5, "window": "5s", "requests": [], "until_ms": 10}),
            "until_ms: applies with sample_ms only",
        ),
        (
            json!({"algorithm": "sliding_window", "limit": {"by": "plan", "values": {"free": 5}}, "window": "5s", "requests": []}),
            "limit: a limit that varies by a descriptor",
        ),
        (
            json!({"algorithm": "quota", "limit": 5, "period": "day", "time_zone": {"by": "tz"}, "requests": []}),
            "time_zone: a time zone or anchor that comes from a descriptor needs descriptors",
        ),
        (
            json!({"algorithm": "quota", "limit": 5, "period": "month", "anchor": {"by": "billing_day"}, "requests": []}),
            "anchor: a time zone or anchor that comes from a descriptor needs descriptors",
        ),
        (json!([1, 2]), "must be a JSON object"),
    ];
    for (body, expected) in cases {
        let reply = server.post("/v1/simulate", body.to_string()).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert_eq!(reply.content_type(), "application/problem+json");
        let detail = reply.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains(expected), "{body}: {detail:?} should say {expected:?}");
    }

    // The configuration's own errors are located in the body, line and column.
    let text = "{\"algorithm\": \"token_bucket\",\n \"rate\": \"2/fortnight\",\n \"requests\": []}";
    let reply = server.post("/v1/simulate", text).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.json()["detail"].as_str().unwrap().starts_with("line 2, column 10: rate: "),
        "{}",
        reply.body
    );

    let reply = server.post("/v1/simulate", "{not json").await;
    assert_eq!(
        (reply.status, reply.json()["type"].as_str()),
        (400, Some("https://floodgate.dev/problems/malformed-request"))
    );

    let many: Vec<Value> = (0..playground::MAX_REQUESTS + 1).map(|_| json!({"at_ms": 0})).collect();
    let reply = server
        .post("/v1/simulate", json!({"algorithm": "gcra", "rate": "1/s", "requests": many}).to_string())
        .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.json()["detail"].as_str().unwrap().contains("at most 10000"), "{}", reply.body);
    server.stop().await;
}
