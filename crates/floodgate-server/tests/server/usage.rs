//! `GET /v1/usage`: a rule's counter for a key — limit, used, remaining, the period — read from the
//! store without consuming, on memory and on a real `redis-server`.

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
    let pro = server.get("/v1/usage?rule=monthly&tenant=t1&plan=pro").await.json();
    assert_eq!(
        (pro["limit"].as_u64(), pro["used"].as_u64()),
        (Some(10000), Some(3)),
        "the plan's limit: {pro}"
    );

    let bucket = server.get("/v1/usage?rule=per-user&user=u1").await.json();
    assert_eq!((bucket["used"].as_u64(), bucket["remaining"].as_u64()), (Some(3), Some(7)), "{bucket}");
    assert!(bucket["period_start"].is_null() && bucket["period_end"].is_null());

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
