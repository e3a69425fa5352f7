//! `/v1/reserve`, `/v1/commit`, `/v1/release` over HTTP: each endpoint, idempotent retries, 404
//! and 409 as problem+json, bad bodies, a reservation made on one server committed on another
//! that shares a real `redis-server` with it, and the reservation metrics each of them counts.

use floodgate_core::{Clock, SystemClock};

use serde_json::{Value, json};

use crate::metrics::promtool_check_metrics;
use crate::support::{Reply, TestServer, eventually, parse};

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

/// The value of `name{rule="<rule>",result="<result>"}` in the exposition `text`, if it has it.
fn metric(text: &str, name: &str, rule: &str, result: &str) -> Option<u64> {
    let prefix = format!("{name}{{rule=\"{rule}\",result=\"{result}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(|v| v.parse().unwrap())
}

/// Per rule and result, `(reservations, units)`.
fn counted(text: &str, rule: &str, result: &str) -> (Option<u64>, Option<u64>) {
    (
        metric(text, "floodgate_reservations_total", rule, result),
        metric(text, "floodgate_reservation_units_total", rule, result),
    )
}

async fn settle(server: &TestServer, path: &str, id: &str, tokens: Option<u64>) -> u16 {
    let mut body = json!({"reservation": id});
    if let Some(tokens) = tokens {
        body["costs"] = json!({"tokens": tokens});
    }
    server.post(path, body.to_string()).await.status
}

#[tokio::test]
async fn reservations_are_counted_per_rule_and_result_in_the_rules_units() {
    let server = TestServer::start(parse(&config("{ kind: memory, sweep_interval: 50ms }"))).await;
    // Granted then committed (a retry of the commit is answered again, not counted again).
    let a = reserve(&server, 600).await["reservation"].as_str().unwrap().to_owned();
    assert_eq!(settle(&server, "/v1/commit", &a, Some(412)).await, 200);
    assert_eq!(settle(&server, "/v1/commit", &a, Some(412)).await, 200);
    // Granted then released.
    let b = reserve(&server, 300).await["reservation"].as_str().unwrap().to_owned();
    assert_eq!(settle(&server, "/v1/release", &b, None).await, 200);
    // Refused by tph alone: 412 + 700 is over 1000.
    assert_eq!(server.post("/v1/reserve", reserve_body(700, None)).await.status, 429);
    // Granted, then expired unsettled: the sweeper finds it; a commit after that is late.
    let d = server.post("/v1/reserve", reserve_body(100, Some("100ms"))).await;
    assert_eq!(d.status, 200, "{}", d.body);
    let d = d.json()["reservation"].as_str().unwrap().to_owned();
    let expired = eventually(|| async {
        let text = server.get("/metrics").await.body;
        metric(&text, "floodgate_reservations_total", "tph", "expired") == Some(1)
    })
    .await;
    assert!(expired, "the sweeper did not report the expired reservation");
    assert_eq!(settle(&server, "/v1/commit", &d, Some(50)).await, 409);
    // A check's permit is not a reservation: releasing it is not counted.
    let check =
        server.post("/v1/check", json!({"descriptors": {"tenant": "t1"}, "cost": 1}).to_string()).await;
    let permit = check.header("floodgate-reservation").expect("a permit's id").to_owned();
    assert_eq!(settle(&server, "/v1/release", &permit, None).await, 200);

    let text = server.get("/metrics").await.body;
    let n = |count: u64, units: u64| (Some(count), Some(units));
    for (result, rph, tph, in_flight) in [
        ("granted", n(3, 3), n(3, 1000), n(3, 3)),
        ("refused", n(0, 0), n(1, 700), n(0, 0)),
        // What stays charged; a commit frees its permit.
        ("committed", n(1, 1), n(1, 412), n(1, 0)),
        // What was given back.
        ("released", n(1, 1), n(1, 300), n(1, 1)),
        // What stays charged: the estimate.
        ("expired", n(1, 1), n(1, 100), n(1, 1)),
        ("late", n(1, 1), n(1, 100), n(1, 1)),
    ] {
        assert_eq!(counted(&text, "rph", result), rph, "rph {result}:\n{text}");
        assert_eq!(counted(&text, "tph", result), tph, "tph {result}:\n{text}");
        assert_eq!(counted(&text, "in-flight", result), in_flight, "in-flight {result}:\n{text}");
    }
    assert!(!text.contains("t1"), "a key leaked into a label:\n{text}");
    promtool_check_metrics(&text);
    server.stop().await;
}

#[tokio::test]
async fn a_rule_has_no_reservation_series_before_its_first_reservation() {
    let server = TestServer::start(parse(&config("{ kind: memory }"))).await;
    assert_eq!(server.check(&[("tenant", "t1")]).await.status, 200);
    let text = server.get("/metrics").await.body;
    assert!(!text.contains("floodgate_reservations_total{"), "{text}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_late_settlements_are_counted_and_expiries_have_no_series() {
    let redis = tokio::task::spawn_blocking(floodgate_testkit::redis::RedisServer::start).await.unwrap();
    let store = format!("{{ kind: redis, url: \"{}\", deadline: 1s }}", redis.url());
    let server = TestServer::start(parse(&config(&store))).await;
    let reserved = server.post("/v1/reserve", reserve_body(100, Some("100ms"))).await;
    assert_eq!(reserved.status, 200, "{}", reserved.body);
    let (id, expires_at_ms) = {
        let body = reserved.json();
        (body["reservation"].as_str().unwrap().to_owned(), body["expires_at_ms"].as_u64().unwrap())
    };
    // The record expires on Redis's clock, this host's: wait until it has passed.
    let clock = SystemClock::new();
    let passed = eventually(|| async { clock.now().as_micros() / 1000 > expires_at_ms + 50 }).await;
    assert!(passed);
    assert_eq!(settle(&server, "/v1/release", &id, None).await, 409);

    let text = server.get("/metrics").await.body;
    assert_eq!(counted(&text, "tph", "granted"), (Some(1), Some(100)), "{text}");
    assert_eq!(counted(&text, "tph", "late"), (Some(1), Some(100)), "{text}");
    assert_eq!(counted(&text, "tph", "expired"), (None, None), "Redis does not report expiries:\n{text}");
    server.stop().await;
}

/// A reservation made under an Envoy domain is settled on that domain's policy — its rules and
/// keys — though `/v1/commit` and `/v1/release` take no domain, and though the native policy has a
/// rule of the same name.
#[tokio::test]
async fn a_reservation_made_under_a_domain_is_settled_on_that_domains_rules() {
    use floodgate::Rule;
    let tokens = || {
        Rule::new(
            "tph",
            floodgate_core::FixedWindow::try_new(
                1000.try_into().unwrap(),
                std::time::Duration::from_secs(3600),
            )
            .unwrap(),
        )
        .key(["tenant"])
        .cost("tokens")
    };
    let config = crate::support::with_domains([tokens()], [("edge", vec![tokens()])]);
    let server = TestServer::start(config).await;
    let body = |domain: Option<&str>, tokens: u64| {
        let mut body = json!({"descriptors": {"tenant": "t1"}, "costs": {"tokens": tokens}});
        if let Some(d) = domain {
            body["domain"] = json!(d);
        }
        body.to_string()
    };
    let tokens_left = |reply: &Reply| reply.json()["limits"][0]["remaining"].as_u64().unwrap() + 1;

    let reserved = server.post("/v1/reserve", body(Some("edge"), 600)).await;
    assert_eq!(reserved.status, 200, "{}", reserved.body);
    let id = reserved.json()["reservation"].as_str().unwrap().to_owned();
    let commit =
        server.post("/v1/commit", json!({"reservation": id, "costs": {"tokens": 100}}).to_string()).await;
    assert_eq!(commit.status, 200, "{}", commit.body);
    assert_eq!(commit.json()["refunded"]["tokens"], 500, "{}", commit.body);

    let edge = server.post("/v1/peek", body(Some("edge"), 1)).await;
    assert_eq!(tokens_left(&edge), 900, "the domain's counter holds what was committed: {}", edge.body);
    let native = server.post("/v1/peek", body(None, 1)).await;
    assert_eq!(tokens_left(&native), 1000, "the native rule of the same name is untouched: {}", native.body);
    // Retried, the same answer, given back once.
    let again =
        server.post("/v1/commit", json!({"reservation": id, "costs": {"tokens": 100}}).to_string()).await;
    assert_eq!((again.status, again.json()["refunded"]["tokens"].as_u64()), (200, Some(500)));
    assert_eq!(tokens_left(&server.post("/v1/peek", body(Some("edge"), 1)).await), 900);
    server.stop().await;
}
