//! The server on the Redis stores (`kind: redis`, `kind: redis_cluster`), against real
//! `redis-server` processes from floodgate-testkit: decisions, instances sharing one Redis, Redis
//! going away and coming back, readiness, metrics. Without `redis-server` installed these tests
//! fail with the command to install it; they never skip.

use std::sync::Arc;
use std::time::Duration;

use floodgate_app::App;
use floodgate_testkit::redis::{ClientAuth, RedisCluster, RedisServer};
use floodgate_testkit::tls::TestCerts;
use serde_json::Value;

use crate::support::{Reply, TestServer, eventually, parse};

const CHAT: &[(&str, &str)] = &[("user", "u1"), ("route", "POST /chat")];

/// The twelve-requests rule (10 a minute per user on `POST /chat`) on `store`.
fn chat_config(store: &str) -> String {
    format!(
        "store: {store}
rules:
  - name: chat-per-user
    match: {{ route: \"POST /chat\" }}
    key: [user]
    algorithm: sliding_window
    limit: 10
    window: 60s
"
    )
}

/// A `fail_open` rule for route `open` and a `fail_closed` one for route `closed`.
fn failure_policies_config(url: &str) -> String {
    format!(
        "store: {{ kind: redis, url: \"{url}\", deadline: 250ms }}
rules:
  - name: open
    match: {{ route: open }}
    key: [user]
    algorithm: fixed_window
    limit: 100
    window: 60s
    on_store_error: fail_open
  - name: closed
    match: {{ route: closed }}
    key: [user]
    algorithm: token_bucket
    rate: 10/s
    burst: 100
    on_store_error: fail_closed
"
    )
}

fn outcome(reply: &Reply, rule: &str) -> String {
    let body = reply.json();
    let limit = body["limits"]
        .as_array()
        .unwrap_or_else(|| panic!("limits in {body}"))
        .iter()
        .find(|l| l["name"] == rule)
        .unwrap_or_else(|| panic!("{rule} in {body}"));
    limit["outcome"].as_str().unwrap().to_owned()
}

/// The value of the series `name` (exactly, labels included) on `/metrics`.
async fn metric(server: &TestServer, series: &str) -> Option<f64> {
    let text = server.get("/metrics").await.body;
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map(|value| value.trim().parse().unwrap())
}

async fn twelve_requests(server: &TestServer) {
    let mut codes = Vec::new();
    let mut replies = Vec::new();
    for _ in 0..12 {
        let reply = server.check(CHAT).await;
        codes.push(reply.status);
        replies.push(reply);
    }
    assert_eq!(codes, [200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429], "{:?}", replies[0]);
    assert_eq!(outcome(&replies[0], "chat-per-user"), "allowed");
    assert_eq!(replies[0].json()["limits"][0]["remaining"], 9);
    let denied = &replies[10];
    assert_eq!(outcome(denied, "chat-per-user"), "denied");
    let retry: u64 = denied.header("retry-after").expect("Retry-After on a 429").parse().unwrap();
    assert!((1..=66).contains(&retry), "retry-after {retry}");
    assert_eq!(denied.header("x-ratelimit-remaining"), Some("0"));
}

/// Runs blocking test-kit calls (stopping and restarting `redis-server`) off the async workers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_requests_on_redis_ten_pass_two_are_told_when_to_retry() {
    let redis = blocking(RedisServer::start);
    let config = chat_config(&format!("{{ kind: redis, url: \"{}\", deadline: 1s }}", redis.url()));
    let server = TestServer::start(parse(&config)).await;
    assert_eq!(server.get("/readyz").await.status, 200);
    twelve_requests(&server).await;

    // The counters are in Redis, under the configured prefix (default `floodgate`).
    // Beside them, `floodgate{fleet}` holds the instances' heartbeats (`instances: discover`).
    let keys = redis.cli(&["--scan", "--pattern", "floodgate*"]);
    let counters: Vec<&str> = keys.lines().filter(|k| *k != "floodgate{fleet}").collect();
    assert_eq!(counters.len(), 1, "one key for one user's limit: {keys:?}");
    let beating = (0..40).any(|_| {
        redis.cli(&["ZCARD", "floodgate{fleet}"]) == "1" || {
            std::thread::sleep(Duration::from_millis(50));
            false
        }
    });
    assert!(beating, "this instance's heartbeat is in floodgate{{fleet}}");
    assert_eq!(metric(&server, r#"floodgate_store_errors_total{store="redis"}"#).await, Some(0.0));
    let text = server.get("/metrics").await.body;
    assert!(
        !text.lines().any(|l| l.starts_with("floodgate_keys{")),
        "no floodgate_keys series for Redis (it is not scanned on scrape)"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_sharing_one_redis_admit_exactly_the_limit_in_total() {
    let redis = blocking(RedisServer::start);
    let config = format!(
        "store: {{ kind: redis, url: \"{}\", prefix: shared, deadline: 2s }}
rules:
  - name: per-user
    key: [user]
    algorithm: sliding_window
    limit: 10
    window: 60s
    on_store_error: fail_closed
",
        redis.url()
    );
    let a = Arc::new(TestServer::start(parse(&config)).await);
    let b = Arc::new(TestServer::start(parse(&config)).await);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let server = Arc::clone(if i % 2 == 0 { &a } else { &b });
        tasks.spawn(async move { server.check(&[("user", "shared-user")]).await });
    }
    let mut admitted = 0;
    let mut denied = 0;
    while let Some(reply) = tasks.join_next().await {
        let reply = reply.unwrap();
        match (reply.status, outcome(&reply, "per-user").as_str()) {
            (200, "allowed") => admitted += 1,
            (429, "denied") => denied += 1,
            other => panic!("unexpected answer {other:?}: {}", reply.body),
        }
    }
    assert_eq!((admitted, denied), (10, 30), "exactly the limit, across both instances");
    // Both see the same counter: the next request is denied on either.
    assert_eq!(a.check(&[("user", "shared-user")]).await.status, 429);
    assert_eq!(b.check(&[("user", "shared-user")]).await.status, 429);
    // Another user has a limit of their own.
    assert_eq!(b.check(&[("user", "other")]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_follows_each_rules_on_store_error_and_recovers_without_a_restart() {
    let mut redis = blocking(RedisServer::start);
    let server = TestServer::start(parse(&failure_policies_config(&redis.url()))).await;
    let open = [("user", "u1"), ("route", "open")];
    let closed = [("user", "u1"), ("route", "closed")];
    assert_eq!(outcome(&server.check(&open).await, "open"), "allowed");
    assert_eq!(outcome(&server.check(&closed).await, "closed"), "allowed");
    assert_eq!(server.get("/readyz").await.status, 200);

    blocking(|| redis.stop());

    // fail_open: allowed, marked as decided by the failure policy.
    let reply = server.check(&open).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(outcome(&reply, "open"), "error_allowed");
    // fail_closed: 429 with Retry-After.
    let reply = server.check(&closed).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(outcome(&reply, "closed"), "error_denied");
    assert_eq!(reply.header("retry-after"), Some("1"));
    // Peek and report fail the same way, never with a 500.
    assert_eq!(server.peek(&closed).await.status, 429);
    // Not ready (the probe's answer is cached for up to a second).
    assert!(
        eventually(|| async { server.get("/readyz").await.status == 503 }).await,
        "/readyz turns 503 while Redis is down"
    );
    assert_eq!(server.get("/readyz").await.body, "store unavailable\n");
    let errors = metric(&server, r#"floodgate_store_errors_total{store="redis"}"#).await.unwrap();
    assert!(errors >= 2.0, "store errors counted: {errors}");
    assert!(
        metric(&server, r#"floodgate_decisions_total{rule="closed",result="error_denied"}"#).await.unwrap()
            >= 1.0
    );
    assert!(
        metric(&server, r#"floodgate_decisions_total{rule="open",result="error_allowed"}"#).await.unwrap()
            >= 1.0
    );

    // Redis comes back (empty) on the same port: decisions and readiness recover by themselves.
    blocking(|| redis.restart());
    assert!(
        eventually(|| async {
            let reply = server.check(&closed).await;
            reply.status == 200 && outcome(&reply, "closed") == "allowed"
        })
        .await,
        "decisions come from Redis again"
    );
    assert_eq!(outcome(&server.check(&open).await, "open"), "allowed");
    assert!(
        eventually(|| async { server.get("/readyz").await.status == 200 }).await,
        "/readyz turns 200 again"
    );
    // No more errors once it is back.
    let before = metric(&server, r#"floodgate_store_errors_total{store="redis"}"#).await.unwrap();
    for _ in 0..5 {
        assert_eq!(server.check(&closed).await.status, 200);
    }
    let after = metric(&server, r#"floodgate_store_errors_total{store="redis"}"#).await.unwrap();
    assert_eq!(before, after);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_starts_while_redis_is_down_and_becomes_ready_when_it_answers() {
    let mut redis = blocking(RedisServer::start);
    blocking(|| redis.stop());
    let server = TestServer::start(parse(&failure_policies_config(&redis.url()))).await;
    assert_eq!(server.get("/healthz").await.status, 200);
    assert_eq!(server.get("/readyz").await.status, 503);
    assert_eq!(server.check(&[("user", "u1"), ("route", "closed")]).await.status, 429);
    assert_eq!(server.check(&[("user", "u1"), ("route", "open")]).await.status, 200);

    blocking(|| redis.restart());
    assert!(
        eventually(|| async { server.get("/readyz").await.status == 200 }).await,
        "ready once Redis answers"
    );
    assert!(
        eventually(|| async {
            let reply = server.check(&[("user", "u1"), ("route", "closed")]).await;
            reply.status == 200 && outcome(&reply, "closed") == "allowed"
        })
        .await
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_the_redis_store_section_is_refused_on_reload() {
    let redis = blocking(RedisServer::start);
    let config = chat_config(&format!("{{ kind: redis, url: \"{}\", deadline: 1s }}", redis.url()));
    let server = TestServer::start(parse(&config)).await;
    let changed =
        chat_config(&format!("{{ kind: redis, url: \"{}\", prefix: other, deadline: 1s }}", redis.url()));
    let reply = server.request(http::Method::POST, "/admin/config", changed, &[]).await;
    assert_eq!(reply.status, 409, "{}", reply.body);
    let body: Value = reply.json();
    assert!(body.to_string().contains("restart floodgate"), "{body}");
    // Still serving on the store it started with.
    assert_eq!(server.check(CHAT).await.status, 200);
    let memory = chat_config("{ kind: memory }");
    assert_eq!(server.request(http::Method::POST, "/admin/config", memory, &[]).await.status, 409);
    server.stop().await;
}

#[tokio::test]
async fn an_invalid_redis_store_configuration_stops_the_start() {
    // Valid as configuration, refused by the store: key prefixes must not contain hash-tag braces.
    let config = parse(&chat_config("{ kind: redis, url: \"redis://127.0.0.1:1\", prefix: \"fg{x}\" }"));
    let error = App::new(config, Default::default()).unwrap_err().to_string();
    assert!(error.contains("invalid redis configuration") && error.contains("prefix"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_requests_on_a_tls_redis_that_requires_a_client_certificate() {
    let certs = TestCerts::generate();
    let redis = blocking(|| RedisServer::start_tls(&certs, ClientAuth::Required));
    let config = chat_config(&format!(
        "{{ kind: redis, url: \"{}\", deadline: 1s, tls: {{ ca: \"{}\", cert: \"{}\", key: \"{}\" }} }}",
        redis.url(),
        certs.ca().display(),
        certs.client_cert().display(),
        certs.client_key().display()
    ));
    let server = TestServer::start(parse(&config)).await;
    assert!(
        eventually(|| async { server.get("/readyz").await.status == 200 }).await,
        "ready once Redis answers PING over TLS"
    );
    twelve_requests(&server).await;
    assert_eq!(metric(&server, r#"floodgate_store_errors_total{store="redis"}"#).await, Some(0.0));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_requests_on_a_redis_cluster() {
    let cluster = blocking(RedisCluster::start);
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let config =
        chat_config(&format!("{{ kind: redis_cluster, urls: [{}], deadline: 1s }}", urls.join(", ")));
    let server = TestServer::start(parse(&config)).await;
    assert!(
        eventually(|| async { server.get("/readyz").await.status == 200 }).await,
        "ready once every master answers PING"
    );
    twelve_requests(&server).await;
    assert_eq!(metric(&server, r#"floodgate_store_errors_total{store="redis_cluster"}"#).await, Some(0.0));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn give_backs_across_cluster_slots_are_counted_on_metrics() {
    let cluster = blocking(RedisCluster::start);
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let config = format!(
        "store: {{ kind: redis_cluster, urls: [{}], deadline: 1s }}
rules:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 1
    window: 1h
  - name: per-tenant
    key: [tenant]
    algorithm: fixed_window
    limit: 100
    window: 1h
",
        urls.join(", ")
    );
    let server = TestServer::start(parse(&config)).await;
    assert!(
        eventually(|| async { server.get("/readyz").await.status == 200 }).await,
        "ready once every master answers PING"
    );
    let series = |result: &str| {
        format!(r#"floodgate_store_give_backs_total{{store="redis_cluster",result="{result}"}}"#)
    };
    let request = [("user", "u1"), ("tenant", "t1")];
    assert_eq!(server.check(&request).await.status, 200);
    // The user's limit denies; the tenant's slot, asked at once, took a unit and gives it back.
    assert_eq!(server.check(&request).await.status, 429);
    assert!(
        eventually(|| async { metric(&server, &series("landed")).await == Some(1.0) }).await,
        "the give-back landed"
    );
    // Denied lately, the user's slot is asked first: the tenant's is only read.
    let third = server.check(&request).await;
    assert_eq!(third.status, 429);
    assert_eq!(outcome(&third, "per-tenant"), "allowed", "{:?}", third.json());
    // (`retried` counts first attempts that failed: none on a healthy cluster, unless a busy
    // machine held one past the 1 s deadline; not asserted.)
    assert!(metric(&server, &series("retried")).await.is_some());
    for (result, n) in [("started", 1.0), ("landed", 1.0), ("lost", 0.0)] {
        assert_eq!(metric(&server, &series(result)).await, Some(n), "{result}");
    }
    server.stop().await;
}
