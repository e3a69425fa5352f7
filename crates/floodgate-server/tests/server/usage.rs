//! `GET /v1/usage`: a rule's counter for a key — limit, used, remaining, the period, and a quota's
//! previous period — read from the store without consuming, on memory and on a real
//! `redis-server`; the previous period across month ends on a manual clock.

use floodgate_app::ServeOptions;
use floodgate_core::Timestamp;
use serde_json::json;

use crate::support::{TestServer, parse};

fn config(store: &str) -> String {
    format!(
        "store: {store}
rules:
  - name: tokens-per-hour
    key: [tenant]
    algorithm: fixed_window
    limit: 1000
    window: 1h
    cost: tokens
  - name: monthly
    key: [tenant]
    algorithm: quota
    period: month
    limit: {{ by: plan, values: {{ free: 100, pro: 10000 }} }}
  - name: per-user
    key: [user]
    algorithm: token_bucket
    rate: 10/m
    burst: 10
"
    )
}

async fn usage_reads_the_counters_without_consuming(server: &TestServer) {
    let spend = json!({"descriptors": {"tenant": "t1", "plan": "free", "user": "u1"}, "costs": {"requests": 3, "tokens": 250}});
    assert_eq!(server.post("/v1/check", spend.to_string()).await.status, 200);

    for _ in 0..2 {
        let reply = server.get("/v1/usage?rule=tokens-per-hour&tenant=t1").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let body = reply.json();
        assert_eq!(body["rule"], "tokens-per-hour");
        assert_eq!(
            (body["limit"].as_u64(), body["used"].as_u64(), body["remaining"].as_u64()),
            (Some(1000), Some(250), Some(750)),
            "{body}"
        );
        let (start, end) = (body["period_start"].as_u64().unwrap(), body["period_end"].as_u64().unwrap());
        assert_eq!(end - start, 3_600_000, "{body}");
        assert_eq!(start % 3_600_000, 0, "an hour's window starts on the hour");
        assert!(body["reset_after_ms"].as_u64().unwrap() <= 3_600_000);
    }

    let monthly = server.get("/v1/usage?rule=monthly&tenant=t1&plan=free").await.json();
    assert_eq!(
        (monthly["limit"].as_u64(), monthly["used"].as_u64(), monthly["remaining"].as_u64()),
        (Some(100), Some(3), Some(97)),
        "{monthly}"
    );
    let span = monthly["period_end"].as_u64().unwrap() - monthly["period_start"].as_u64().unwrap();
    assert!((28 * 86_400_000..=31 * 86_400_000).contains(&span), "a calendar month: {monthly}");
    let previous = &monthly["previous"];
    assert_eq!(previous["used"], 0, "nothing counted last month: {monthly}");
    assert_eq!(previous["period_end"], monthly["period_start"], "last month ends where this one starts");
    let span = previous["period_end"].as_u64().unwrap() - previous["period_start"].as_u64().unwrap();
    assert!((28 * 86_400_000..=31 * 86_400_000).contains(&span), "last calendar month: {monthly}");
    let pro = server.get("/v1/usage?rule=monthly&tenant=t1&plan=pro").await.json();
    assert_eq!(
        (pro["limit"].as_u64(), pro["used"].as_u64()),
        (Some(10000), Some(3)),
        "the plan's limit: {pro}"
    );

    let bucket = server.get("/v1/usage?rule=per-user&user=u1").await.json();
    assert_eq!((bucket["used"].as_u64(), bucket["remaining"].as_u64()), (Some(3), Some(7)), "{bucket}");
    assert!(bucket["period_start"].is_null() && bucket["period_end"].is_null());
    assert!(bucket["previous"].is_null(), "a bucket keeps no past: {bucket}");

    let untouched = server.get("/v1/usage?rule=tokens-per-hour&tenant=t2").await.json();
    assert_eq!((untouched["used"].as_u64(), untouched["remaining"].as_u64()), (Some(0), Some(1000)));
}

#[tokio::test]
async fn usage_on_memory() {
    let server = TestServer::start(parse(&config("{ kind: memory }"))).await;
    usage_reads_the_counters_without_consuming(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_on_redis() {
    let redis = tokio::task::spawn_blocking(floodgate_testkit::redis::RedisServer::start).await.unwrap();
    let store = format!("{{ kind: redis, url: \"{}\", deadline: 1s }}", redis.url());
    let server = TestServer::start(parse(&config(&store))).await;
    usage_reads_the_counters_without_consuming(&server).await;
    server.stop().await;
}

/// 2026-01-20T12:00:00Z.
const JANUARY_20: u64 = 1_768_910_400_000;
/// Midnight UTC on 1 February 2026, 1 March 2026 and 1 April 2026, ms.
const FEBRUARY: u64 = 1_769_904_000_000;
const MARCH: u64 = 1_772_323_200_000;
const APRIL: u64 = 1_775_001_600_000;

#[tokio::test]
async fn usage_and_the_key_inspector_read_last_months_spend() {
    let config = "store: { kind: memory }
descriptors: [model]
rules:
  - name: spend
    key: [tenant, model]
    algorithm: quota
    period: month
    limit: 50000000
    cost: usd_micros
";
    let options = ServeOptions::default().manual_clock(Timestamp::from_millis(JANUARY_20));
    let server = TestServer::with_options(parse(config), options).await;
    let spend = |usd_micros: u64| {
        json!({"descriptors": {"tenant": "t1", "model": "gpt-4o-mini"}, "costs": {"usd_micros": usd_micros}})
            .to_string()
    };
    let usage = async || server.get("/v1/usage?rule=spend&tenant=t1&model=gpt-4o-mini").await.json();
    let inspected = async || {
        let reply = server.get("/admin/keys?rule=spend&tenant=t1&model=gpt-4o-mini").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()
    };
    for cost in [12_000_000, 340_000] {
        assert_eq!(server.post("/v1/check", spend(cost)).await.status, 200);
    }
    let january = usage().await;
    assert_eq!(january["used"], 12_340_000, "{january}");
    assert_eq!(january["previous"]["used"], 0, "{january}");

    // February, before the tenant spends: January's spend, with January's bounds.
    server.post("/admin/clock", format!(r#"{{"set_ms": {FEBRUARY}}}"#)).await;
    let february = usage().await;
    assert_eq!((february["used"].as_u64(), february["period_start"].as_u64()), (Some(0), Some(FEBRUARY)));
    assert_eq!(
        february["previous"],
        json!({"used": 12_340_000, "period_start": 1_767_225_600_000u64, "period_end": FEBRUARY}),
        "{february}"
    );
    assert_eq!(inspected().await["previous"]["used"], 12_340_000);
    // Spent in February: January's stays the previous period's.
    assert_eq!(server.post("/v1/check", spend(1_500_000)).await.status, 200);
    let february = usage().await;
    assert_eq!(
        (february["used"].as_u64(), february["previous"]["used"].as_u64()),
        (Some(1_500_000), Some(12_340_000))
    );
    let key = inspected().await;
    assert_eq!(
        (key["used"].as_u64(), key["previous"]["used"].as_u64()),
        (Some(1_500_000), Some(12_340_000)),
        "{key}"
    );
    assert_eq!(key["dimension"], "usd_micros");

    // March: February's 28 days. April, after a March without spend: nothing is kept.
    server.post("/admin/clock", format!(r#"{{"set_ms": {MARCH}}}"#)).await;
    let march = usage().await;
    assert_eq!(
        march["previous"],
        json!({"used": 1_500_000, "period_start": FEBRUARY, "period_end": MARCH}),
        "{march}"
    );
    server.post("/admin/clock", format!(r#"{{"set_ms": {APRIL}}}"#)).await;
    assert_eq!(usage().await["previous"]["used"], 0);
    assert_eq!(inspected().await["previous"]["used"], 0);
    server.stop().await;
}

#[tokio::test]
async fn bad_usage_queries_are_named() {
    let server = TestServer::start(parse(&config("{ kind: memory }"))).await;
    let unknown = server.get("/v1/usage?rule=nope&tenant=t1").await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(unknown.content_type(), "application/problem+json");
    for (query, says) in [
        ("tenant=t1", "Missing query parameter \"rule\""),
        ("rule=tokens-per-hour", "keys by \"tenant\""),
        ("rule=tokens-per-hour&tenant=a&tenant=b", "given twice"),
        ("rule=a&rule=b", "given twice"),
    ] {
        let reply = server.get(&format!("/v1/usage?{query}")).await;
        assert_eq!(reply.status, 422, "{query}: {}", reply.body);
        let detail = reply.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains(says), "{query}: {detail:?} does not say {says:?}");
    }
    server.stop().await;
}
