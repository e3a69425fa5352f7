//! `/v1/reserve`, `/v1/commit`, `/v1/release` over HTTP: each endpoint, idempotent retries, 404
//! and 409 as problem+json, bad bodies, and a reservation made on one server committed on another
//! that shares a real `redis-server` with it.

use serde_json::{Value, json};

use crate::support::{Reply, TestServer, parse};

/// 10 requests and 1000 tokens an hour per tenant, 2 calls in flight.
fn config(store: &str) -> String {
    format!(
        "store: {store}
rules:
  - name: rph
    key: [tenant]
    algorithm: fixed_window
    limit: 10
    window: 1h
  - name: tph
    key: [tenant]
    algorithm: fixed_window
    limit: 1000
    window: 1h
    cost: tokens
  - name: in-flight
    key: [tenant]
    algorithm: concurrency
    limit: 2
    lease: 10m
"
    )
}

fn reserve_body(tokens: u64, ttl: Option<&str>) -> String {
    let mut body = json!({"descriptors": {"tenant": "t1"}, "costs": {"requests": 1, "tokens": tokens}});
    if let Some(ttl) = ttl {
        body["ttl"] = json!(ttl);
    }
    body.to_string()
}

/// (requests, tokens, permits) left, from a peek of one of each.
async fn left(server: &TestServer) -> (u64, u64, u64) {
    let peek = server
        .post(
            "/v1/peek",
            json!({"descriptors": {"tenant": "t1"}, "costs": {"requests": 1, "tokens": 1}}).to_string(),
        )
        .await;
    let body = peek.json();
    let r = |name: &str| {
        let l = body["limits"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap();
        if l["allowed"] == true { l["remaining"].as_u64().unwrap() + 1 } else { 0 }
    };
    (r("rph"), r("tph"), r("in-flight"))
}

fn problem_type(reply: &Reply) -> String {
    assert_eq!(reply.content_type(), "application/problem+json", "{}", reply.body);
    reply.json()["type"].as_str().unwrap().to_owned()
}

async fn reserve(server: &TestServer, tokens: u64) -> Value {
    let reply = server.post("/v1/reserve", reserve_body(tokens, None)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

#[tokio::test]
async fn reserve_then_commit_refunds_the_over_reservation_once() {
    let server = TestServer::start(parse(&config("{ kind: memory }"))).await;
    let reserved = reserve(&server, 600).await;
    assert_eq!(reserved["allowed"], true);
    let id = reserved["reservation"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32);
    assert!(reserved["expires_at_ms"].as_u64().unwrap() > 1_700_000_000_000);
    assert_eq!(reserved["limits"].as_array().unwrap().len(), 3, "{reserved}");
    assert_eq!(left(&server).await, (9, 400, 1));

    let commit = json!({"reservation": id, "costs": {"tokens": 412}}).to_string();
    let first = server.post("/v1/commit", commit.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        first.json(),
        json!({"reservation": id, "state": "committed", "reserved": {"requests": 1, "tokens": 600},
               "charged": {"requests": 1, "tokens": 412}, "refunded": {"tokens": 188}, "excess": {}})
    );
    assert_eq!(left(&server).await, (9, 588, 2));
    let again = server.post("/v1/commit", commit).await;
    assert_eq!((again.status, again.body.clone()), (200, first.body.clone()), "the same answer");
    assert_eq!(left(&server).await, (9, 588, 2), "charged once");

    let other =
        server.post("/v1/commit", json!({"reservation": id, "costs": {"tokens": 1}}).to_string()).await;
    assert_eq!(other.status, 409, "{}", other.body);
    assert!(problem_type(&other).ends_with("/reservation-settled"));
    let release = server.post("/v1/release", json!({"reservation": id}).to_string()).await;
    assert_eq!(release.status, 409, "{}", release.body);
    server.stop().await;
}

#[tokio::test]
async fn release_gives_everything_back_and_a_denied_reserve_holds_nothing() {
    let server = TestServer::start(parse(&config("{ kind: memory }"))).await;
    let id = reserve(&server, 600).await["reservation"].as_str().unwrap().to_owned();
    let denied = server.post("/v1/reserve", reserve_body(600, Some("30s"))).await;
    assert_eq!(denied.status, 429, "{}", denied.body);
    assert!(denied.json().get("reservation").is_none());
    assert!(denied.header("retry-after").is_some());
    let release = json!({"reservation": id}).to_string();
    let first = server.post("/v1/release", release.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.json()["refunded"], json!({"requests": 1, "tokens": 600}));
    assert_eq!(left(&server).await, (10, 1000, 2));
    let again = server.post("/v1/release", release).await;
    assert_eq!((again.status, again.body), (200, first.body));
    assert_eq!(left(&server).await, (10, 1000, 2), "given back once");
    server.stop().await;
}

#[tokio::test]
async fn unknown_ids_are_404_and_bad_bodies_are_named() {
    let server = TestServer::start(parse(&config("{ kind: memory }"))).await;
    for path in ["/v1/commit", "/v1/release"] {
        let unknown =
            server.post(path, json!({"reservation": "0123456789abcdef0123456789abcdef"}).to_string()).await;
        assert_eq!(unknown.status, 404, "{path}: {}", unknown.body);
        assert!(problem_type(&unknown).ends_with("/not-found"));
        let missing = server.post(path, json!({}).to_string()).await;
        assert_eq!(missing.status, 422, "{path}: {}", missing.body);
        assert!(missing.json()["detail"].as_str().unwrap().contains("reservation"), "{}", missing.body);
        assert_eq!(server.post(path, "{").await.status, 400);
    }
    let extra = server.post("/v1/release", json!({"reservation": "x", "costs": {}}).to_string()).await;
    assert_eq!(extra.status, 422, "a release takes no costs: {}", extra.body);
    let bad_dimension =
        server.post("/v1/commit", json!({"reservation": "x", "costs": {"Tokens": 1}}).to_string()).await;
    assert_eq!(bad_dimension.status, 422, "{}", bad_dimension.body);
    for (ttl, says) in [
        (json!("soon"), "is not a duration"),
        (json!("48h"), "at most 24h"),
        (json!(5), "must be a duration"),
    ] {
        let mut body = json!({"descriptors": {"tenant": "t1"}});
        body["ttl"] = ttl.clone();
        let reply = server.post("/v1/reserve", body.to_string()).await;
        assert_eq!(reply.status, 422, "{ttl}: {}", reply.body);
        assert!(reply.json()["detail"].as_str().unwrap().contains(says), "{ttl}: {}", reply.body);
    }
    let both = server
        .post(
            "/v1/reserve",
            json!({"descriptors": {"tenant": "t1"}, "cost": 1, "costs": {"tokens": 1}}).to_string(),
        )
        .await;
    assert_eq!(both.status, 422, "{}", both.body);
    assert_eq!(left(&server).await, (10, 1000, 2), "nothing was held by any of them");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_made_on_one_server_is_committed_on_another_sharing_redis() {
    let redis = tokio::task::spawn_blocking(floodgate_testkit::redis::RedisServer::start).await.unwrap();
    let store = format!("{{ kind: redis, url: \"{}\", deadline: 1s }}", redis.url());
    let a = TestServer::start(parse(&config(&store))).await;
    let b = TestServer::start(parse(&config(&store))).await;
    let id = reserve(&a, 700).await["reservation"].as_str().unwrap().to_owned();
    assert_eq!(left(&b).await, (9, 300, 1), "b sees what a holds");
    let commit = json!({"reservation": id, "costs": {"tokens": 900}}).to_string();
    let on_b = b.post("/v1/commit", commit.clone()).await;
    assert_eq!(on_b.status, 200, "{}", on_b.body);
    assert_eq!(on_b.json()["excess"], json!({"tokens": 200}));
    assert_eq!(left(&a).await, (9, 100, 2));
    let retried_on_a = a.post("/v1/commit", commit).await;
    assert_eq!((retried_on_a.status, retried_on_a.body), (200, on_b.body), "the same answer on a");
    assert_eq!(left(&a).await, (9, 100, 2), "charged once");
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_check_that_takes_a_permit_returns_an_id_that_release_frees() {
    let server = TestServer::start(parse(&config("{ kind: memory }"))).await;
    let check = json!({"descriptors": {"tenant": "t1"}, "cost": 1}).to_string();
    let first = server.post("/v1/check", check.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let id = first.header("floodgate-reservation").expect("an id for the permit").to_owned();
    assert_eq!(id.len(), 32);
    assert_eq!(left(&server).await, (9, 1000, 1));

    let release = json!({"reservation": id}).to_string();
    let released = server.post("/v1/release", release.clone()).await;
    assert_eq!(released.status, 200, "{}", released.body);
    assert_eq!(released.json()["refunded"], json!({}), "the request stays counted");
    assert_eq!(left(&server).await, (9, 1000, 2), "the permit is free");
    let again = server.post("/v1/release", release).await;
    assert_eq!((again.status, again.body), (200, released.body));
    assert_eq!(left(&server).await, (9, 1000, 2), "freed once");
    let commit = server.post("/v1/commit", json!({"reservation": id}).to_string()).await;
    assert_eq!(commit.status, 409, "{}", commit.body);

    // A check of rules that hold no permits gets no id; nor does a peek.
    let tokens_only = json!({"descriptors": {"tenant": "t1"}, "costs": {"tokens": 5}}).to_string();
    assert!(server.post("/v1/check", tokens_only).await.header("floodgate-reservation").is_none());
    assert!(server.post("/v1/peek", check).await.header("floodgate-reservation").is_none());
    server.stop().await;
}
