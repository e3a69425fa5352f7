//! Surviving the store, through the server on real `redis-server` processes: `on_store_error:
//! local` deciding on this instance's share, the breaker opening and closing, what local shares
//! admitted charged to Redis on recovery, readiness while every rule decides locally, and the
//! share following the fleet's heartbeats.

use std::time::{Duration, Instant};

use floodgate_testkit::process::Signal;
use floodgate_testkit::redis::RedisServer;

use crate::support::{TestServer, eventually, parse};

/// A `local` rule (10 a minute per user, route `core`) and a `fail_closed` one (route `abuse`), on
/// `redis` with a breaker that opens after 3 failures in a row and probes after 300 ms.
fn config(url: &str, instances: &str) -> String {
    format!(
        "store:
  kind: redis
  url: \"{url}\"
  deadline: 250ms
  instances: {instances}
  local_factor: 2
  breaker: {{ consecutive_failures: 3, open_for: 300ms }}
rules:
  - name: core
    match: {{ route: core }}
    key: [user]
    algorithm: fixed_window
    limit: 10
    window: 1h
    on_store_error: local
  - name: abuse
    match: {{ route: abuse }}
    key: [user]
    algorithm: fixed_window
    limit: 10
    window: 1h
    on_store_error: fail_closed
"
    )
}

const CORE: &[(&str, &str)] = &[("user", "u1"), ("route", "core")];
const ABUSE: &[(&str, &str)] = &[("user", "u1"), ("route", "abuse")];

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

async fn metric(server: &TestServer, series: &str) -> Option<f64> {
    let text = server.get("/metrics").await.body;
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map(|value| value.trim().parse().expect("a number"))
}

fn first(reply: &crate::support::Reply) -> (String, u64) {
    let body = reply.json();
    let limit = &body["limits"][0];
    (
        limit["outcome"].as_str().expect("an outcome").to_owned(),
        limit["remaining"].as_u64().expect("remaining"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_rule_decides_on_its_share_while_redis_is_down_and_its_admissions_are_charged_on_recovery() {
    let mut redis = blocking(RedisServer::start);
    // Four instances configured: the share is ceil(10 × 2 / 4) = 5.
    let server = TestServer::start(parse(&config(&redis.url(), "4"))).await;
    assert_eq!(first(&server.check(CORE).await).0, "allowed");
    assert_eq!(metric(&server, r#"floodgate_fallback_instances{store="redis"}"#).await, Some(4.0));
    assert_eq!(metric(&server, r#"floodgate_store_breaker_state{store="redis"}"#).await, Some(0.0));
    assert_eq!(metric(&server, r#"floodgate_fallback_active{rule="core"}"#).await, Some(0.0));

    blocking(|| redis.stop());
    let mut outcomes = Vec::new();
    for _ in 0..7 {
        let reply = server.check(CORE).await;
        let (outcome, _) = first(&reply);
        outcomes.push((reply.status, outcome));
    }
    let allowed = |o: &str| (200, o.to_owned());
    assert_eq!(
        outcomes,
        [
            allowed("local_allowed"),
            allowed("local_allowed"),
            allowed("local_allowed"),
            allowed("local_allowed"),
            allowed("local_allowed"),
            (429, "local_denied".to_owned()),
            (429, "local_denied".to_owned()),
        ],
        "the share is 5, then the local limiter denies"
    );
    let denied = server.check(CORE).await;
    let retry: u64 =
        denied.header("retry-after").expect("a local denial says when to retry").parse().unwrap();
    assert!((1..=3600).contains(&retry), "retry-after {retry}");
    // The fail_closed rule denies, whatever the breaker's state.
    let reply = server.check(ABUSE).await;
    assert_eq!((reply.status, first(&reply).0.as_str()), (429, "error_denied"));
    // Three failures in a row opened the breaker; the local rule is flagged while degraded.
    assert_eq!(metric(&server, r#"floodgate_store_breaker_state{store="redis"}"#).await, Some(1.0));
    assert_eq!(metric(&server, r#"floodgate_fallback_active{rule="core"}"#).await, Some(1.0));
    assert_eq!(
        metric(&server, r#"floodgate_fallback_active{rule="abuse"}"#).await,
        Some(0.0),
        "not a local rule"
    );
    assert!(
        metric(&server, r#"floodgate_decisions_total{rule="core",result="local_allowed"}"#).await
            >= Some(5.0)
    );
    // Not all rules can decide locally: not ready.
    assert!(eventually(|| async { server.get("/readyz").await.status == 503 }).await);

    // Redis comes back, empty. The breaker's probe closes it, the rule is back on the store, and
    // the 5 units the share admitted are charged to the store's counter, in the same window (a
    // peek answers what a check would: 10 − 5 − 1 remaining).
    blocking(|| redis.restart());
    assert!(
        eventually(|| async {
            let reply = server.peek(CORE).await;
            reply.status == 200 && first(&reply) == ("allowed".to_owned(), 4)
        })
        .await,
        "back on Redis, with the local admissions charged: {}",
        server.peek(CORE).await.body
    );
    assert_eq!(
        metric(&server, r#"floodgate_fallback_units_total{store="redis",outcome="charged"}"#).await,
        Some(5.0)
    );
    assert_eq!(metric(&server, r#"floodgate_store_breaker_state{store="redis"}"#).await, Some(0.0));
    assert_eq!(metric(&server, r#"floodgate_fallback_active{rule="core"}"#).await, Some(0.0));
    // The store decides again: 5 more, then the limit.
    let mut codes = Vec::new();
    for _ in 0..6 {
        codes.push(server.check(CORE).await.status);
    }
    assert_eq!(codes, [200, 200, 200, 200, 200, 429], "the limit holds over the outage and after it");
    assert_eq!(first(&server.check(CORE).await).0, "denied", "decided by the store");
    server.stop().await;
}

/// How many scripts Redis has run (`EVAL`, `EVALSHA` and their read-only forms): each decision
/// that reaches Redis runs one.
fn scripts_run(redis: &RedisServer) -> u64 {
    redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter(|line| line.starts_with("cmdstat_eval"))
        .filter_map(|line| line.split_once("calls=")?.1.split(',').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // Times the calls before the breaker opens: not before the deadline.
async fn an_open_breaker_decides_without_calling_the_store() {
    let mut redis = blocking(RedisServer::start);
    let text = config(&redis.url(), "1").replace("open_for: 300ms", "open_for: 1h");
    let server = TestServer::start(parse(&text)).await;
    assert_eq!(first(&server.check(CORE).await).0, "allowed", "decided by Redis");

    // Frozen, Redis black-holes the store: the connection stays open and nothing answers, so each
    // call waits its whole deadline until the breaker opens.
    blocking(|| redis.signal(Signal::Stop)).expect("SIGSTOP");
    let mut waited = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let reply = server.check(CORE).await;
        waited.push(started.elapsed());
        assert_eq!(first(&reply).0, "local_allowed", "{}", reply.body);
    }
    assert!(
        waited.iter().all(|w| *w >= Duration::from_millis(200)),
        "before it opened, each call waited for the deadline: {waited:?}"
    );
    assert_eq!(metric(&server, r#"floodgate_store_breaker_state{store="redis"}"#).await, Some(1.0));

    // Redis answers again (it runs the calls it held first), but the breaker stays open for an
    // hour: a decision that called the store now would be Redis's (`allowed`), and run a script.
    blocking(|| redis.signal(Signal::Cont)).expect("SIGCONT");
    let before = blocking(|| scripts_run(&redis));
    for _ in 0..10 {
        let reply = server.check(CORE).await;
        assert_eq!(first(&reply).0, "local_allowed", "decided without the store: {}", reply.body);
    }
    assert_eq!(blocking(|| scripts_run(&redis)), before, "no decision reached Redis");
    assert_eq!(metric(&server, r#"floodgate_store_breaker_state{store="redis"}"#).await, Some(1.0));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_rule_local_the_server_stays_ready_while_redis_is_down() {
    let mut redis = blocking(RedisServer::start);
    let text = config(&redis.url(), "1").replace("on_store_error: fail_closed", "on_store_error: local");
    let server = TestServer::start(parse(&text)).await;
    assert_eq!(server.get("/readyz").await.status, 200);
    blocking(|| redis.stop());
    for _ in 0..3 {
        server.check(CORE).await;
    }
    assert!(
        eventually(|| async {
            let reply = server.get("/readyz").await;
            reply.status == 200 && reply.body.contains("local share")
        })
        .await,
        "ready, and saying why: {}",
        server.get("/readyz").await.body
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn discovered_instances_set_the_share_and_one_that_stops_is_no_longer_counted() {
    let mut redis = blocking(RedisServer::start);
    let text = config(&redis.url(), "discover");
    let a = TestServer::start(parse(&text)).await;
    let b = TestServer::start(parse(&text)).await;
    let instances = r#"floodgate_fallback_instances{store="redis"}"#;
    for server in [&a, &b] {
        assert!(
            eventually(|| async { metric(server, instances).await == Some(2.0) }).await,
            "both count two instances"
        );
    }
    // b stops cleanly: it leaves the fleet, and a's next heartbeat counts one.
    b.stop().await;
    assert!(eventually(|| async { metric(&a, instances).await == Some(1.0) }).await, "a counts itself alone");
    let c = TestServer::start(parse(&text)).await;
    assert!(eventually(|| async { metric(&a, instances).await == Some(2.0) }).await);

    // Redis goes away with two live instances: each decides on ceil(10 × 2 / 2) = 10 locally.
    blocking(|| redis.stop());
    for server in [&a, &c] {
        let mut allowed = 0;
        for _ in 0..12 {
            if server.check(&[("user", "fleet"), ("route", "core")]).await.status == 200 {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 10, "the share of one of two instances");
        assert_eq!(
            metric(server, instances).await,
            Some(2.0),
            "the last count stands while the store is down"
        );
    }
    a.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_rules_say_on_metrics_how_many_checks_their_leases_decided() {
    let redis = blocking(RedisServer::start);
    let config = format!(
        "store: {{ kind: redis, url: \"{}\", deadline: 1s, instances: 1 }}
rules:
  - name: hot
    key: []
    algorithm: fixed_window
    limit: 1000
    window: 1h
    prefetch: {{ batch: 10, ttl: 1h }}
",
        redis.url()
    );
    let server = TestServer::start(parse(&config)).await;
    for _ in 0..10 {
        assert_eq!(server.check(&[("user", "u1")]).await.status, 200);
    }
    // One batch of 10 from the store, then nine checks decided from it.
    let store = r#"floodgate_prefetch_decisions_total{store="redis",source="store"}"#;
    let lease = r#"floodgate_prefetch_decisions_total{store="redis",source="lease"}"#;
    assert_eq!((metric(&server, store).await, metric(&server, lease).await), (Some(1.0), Some(9.0)));
    let returned = r#"floodgate_prefetch_units_total{store="redis",outcome="returned"}"#;
    assert_eq!(metric(&server, returned).await, Some(0.0), "nothing returned while the lease lasts");
    server.stop().await;
}
