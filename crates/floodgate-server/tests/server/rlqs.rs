//! Envoy RLQS conformance: the server driven over real gRPC by simulated Envoy filters built on
//! Envoy's protos (`floodgate_testkit::rlqs`), which report, decide locally from their
//! assignments and fall back when an assignment expires. Every message of the protocol, and the
//! messages that break it. Waits on stream messages, never on the wall clock; the server's own
//! time (idleness, TTLs) is a manual clock moved by `POST /admin/clock`.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Kind;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::envoy::r#type::v3::RateLimitStrategy;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use floodgate_app::ServeOptions;
use floodgate_core::Timestamp;
use floodgate_testkit::redis::{RedisCluster, RedisServer};
use floodgate_testkit::rlqs::{Expired, Filter, Id, Phase, Settings, id, proto};
use floodgate_testkit::wait;
use tonic::Code;

use crate::support::{TempDir, TestServer, parse};

const CONFIG: &str = "\
rlqs:
  reporting_interval: 100ms
  assignment_ttl: 1s
  abandon_after: 2s
  floor: 10%
  domains:
    rlqs-example:
      - name: api
        match: { name: api }
        algorithm: fixed_window
        limit: 100
        window: 1s
      - name: per-second
        match: { name: unit }
        algorithm: sliding_window
        limit: 60
        window: 1s
        strategy: requests_per_time_unit
      - name: open
        match: { name: open }
        blanket: allow_all
      - name: closed
        match: { name: closed }
        blanket: deny_all
";

async fn server() -> TestServer {
    let options = ServeOptions::default().manual_clock(Timestamp::from_millis(1_800_000_000_000));
    TestServer::with_options(parse(CONFIG), options).await
}

async fn filter(server: &TestServer, settings: Settings) -> Filter {
    Filter::connect(format!("http://{}", server.grpc), "rlqs-example", settings).await.expect("stream")
}

/// The next response, within the guard's time (a hang fails the test).
async fn next(f: &mut Filter) -> RateLimitQuotaResponse {
    wait::finished("an RLQS response", f.next())
        .await
        .expect("the stream is open")
        .expect("a response, not an error")
}

/// The rate (requests per second) a strategy lets through; `None` for a blanket rule.
fn rate(s: &RateLimitStrategy) -> Option<f64> {
    match s.strategy.as_ref()? {
        Strategy::TokenBucket(b) => {
            let fill = b.fill_interval.as_ref().unwrap();
            Some(
                f64::from(b.tokens_per_fill.as_ref().unwrap().value)
                    / (fill.seconds as f64 + f64::from(fill.nanos) / 1e9),
            )
        }
        Strategy::RequestsPerTimeUnit(r) => Some(r.requests_per_time_unit as f64),
        Strategy::BlanketRule(_) => None,
    }
}

/// The assignments of a response, by bucket: strategy and TTL.
fn assignments(r: &RateLimitQuotaResponse) -> HashMap<Id, (RateLimitStrategy, Duration)> {
    r.bucket_action
        .iter()
        .filter_map(|a| {
            let id: Id = a.bucket_id.as_ref()?.bucket.clone().into_iter().collect();
            match a.bucket_action.as_ref()? {
                Kind::QuotaAssignmentAction(q) => {
                    let ttl = q.assignment_time_to_live.as_ref().unwrap();
                    Some((
                        id,
                        (q.rate_limit_strategy.unwrap(), Duration::new(ttl.seconds as u64, ttl.nanos as u32)),
                    ))
                }
                Kind::AbandonAction(_) => None,
            }
        })
        .collect()
}

/// Waits for an assignment of `bucket` on `f`, applying every response on the way at `now`.
async fn assignment(f: &mut Filter, bucket: &Id, now: Duration) -> (RateLimitStrategy, Duration) {
    loop {
        let r = next(f).await;
        f.apply(&r, now);
        if let Some(a) = assignments(&r).remove(bucket) {
            return a;
        }
    }
}

fn api() -> Id {
    id(&[("name", "api"), ("env", "prod")])
}

#[tokio::test]
async fn a_subscription_is_answered_and_shares_follow_demand() {
    let server = server().await;
    let mut hot = filter(&server, Settings::default()).await;
    let mut idle = filter(&server, Settings::default()).await;
    let t = Duration::ZERO;

    // The first request is let through (no assignment yet: allow all) and reported at once.
    assert!(hot.request(&api(), t).await);
    let (strategy, ttl) = assignment(&mut hot, &api(), t).await;
    assert_eq!(ttl, Duration::from_secs(1));
    assert_eq!(rate(&strategy), Some(100.0), "alone, the whole limit");
    assert_eq!(hot.phase(&api()), Some(Phase::Active));

    // A second Envoy: each gets half; the first is told at once, unasked.
    assert!(idle.request(&api(), t).await);
    let (strategy, _) = assignment(&mut idle, &api(), t).await;
    assert!((rate(&strategy).unwrap() - 50.0).abs() < 1.0, "{strategy:?}");
    let (strategy, _) = assignment(&mut hot, &api(), t).await;
    assert!((rate(&strategy).unwrap() - 50.0).abs() < 1.0, "{strategy:?}");

    // The hot one asks for about 67 a second (its local bucket denies some): it gets them, the
    // idle one keeps more than its floor, and the two never sum above the limit. (Within the
    // assignments' TTL of 1 s: past it, the filter would abandon its buckets.)
    for i in 0..60u64 {
        hot.request(&api(), Duration::from_millis(i * 15)).await;
    }
    let t = Duration::from_millis(900);
    idle.report(t).await;
    hot.report(t).await;
    let (h, _) = assignment(&mut hot, &api(), t).await;
    let (i, _) = assignment(&mut idle, &api(), t).await;
    let (h, i) = (rate(&h).unwrap(), rate(&i).unwrap());
    assert!(h >= 67.0 && i >= 5.0 && h + i <= 100.0, "hot {h}, idle {i}");

    // The admin view shows the group: both streams, their demand and share, the fleet's sum.
    let view = server.get("/admin/rlqs").await.json();
    let group = &view["groups"][0];
    assert_eq!((group["domain"].as_str(), group["rule"].as_str()), (Some("rlqs-example"), Some("api")));
    assert_eq!(group["limit"], 100.0);
    assert_eq!(group["members"].as_array().unwrap().len(), 2);
    let fleet = group["fleet_assigned"].as_f64().unwrap();
    assert!((fleet - (h + i)).abs() < 1e-6 && fleet <= 100.0, "{view}");

    // And the metrics: streams, buckets, assignments; per rule (set each interval) the limit.
    let metrics = server.get("/metrics").await.body;
    for series in ["floodgate_rlqs_streams 2", "floodgate_rlqs_buckets 2", "floodgate_rlqs_abandoned_total 0"]
    {
        assert!(metrics.lines().any(|l| l == series), "{series} in\n{metrics}");
    }
    assert!(metrics.contains("floodgate_rlqs_assignments_total "), "{metrics}");
    wait::until("the per-rule RLQS gauges", || async {
        let metrics = server.get("/metrics").await.body;
        metrics.lines().any(|l| l == r#"floodgate_rlqs_limit{rule="rlqs-example/api"} 100"#).then_some(())
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn every_strategy_and_blanket_rule_is_assigned_as_configured() {
    let server = server().await;
    let mut f = filter(&server, Settings::default()).await;
    let t = Duration::ZERO;
    let unit = id(&[("name", "unit")]);
    let open = id(&[("name", "open")]);
    let closed = id(&[("name", "closed")]);
    f.request(&unit, t).await;
    let (s, _) = assignment(&mut f, &unit, t).await;
    assert!(
        matches!(s.strategy, Some(Strategy::RequestsPerTimeUnit(ref r)) if r.requests_per_time_unit == 60 && r.time_unit == 1),
        "{s:?}"
    );
    f.request(&open, t).await;
    let (s, _) = assignment(&mut f, &open, t).await;
    assert_eq!(s.strategy, Some(Strategy::BlanketRule(BlanketRule::AllowAll as i32)));
    f.request(&closed, t).await;
    let (s, _) = assignment(&mut f, &closed, t).await;
    assert_eq!(s.strategy, Some(Strategy::BlanketRule(BlanketRule::DenyAll as i32)));
    assert!(!f.request(&closed, t).await, "the local decision follows the assignment");
    assert!(f.request(&open, t).await);
    // The order of an id's keys does not matter: the same bucket.
    let reordered: Id =
        [("env", "prod"), ("name", "api")].iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    assert_eq!(reordered, api());
    // A bucket no rule governs gets no assignment: the filter's no-assignment behaviour stays.
    let other = id(&[("name", "elsewhere")]);
    f.request(&other, t).await;
    f.request(&api(), t).await;
    assignment(&mut f, &api(), t).await;
    assert_eq!(f.phase(&other), Some(Phase::NoAssignment));
    server.stop().await;
}

#[tokio::test]
async fn the_same_strategy_is_renewed_without_resetting_the_local_bucket() {
    let server = server().await;
    let mut f = filter(&server, Settings::default()).await;
    let t = Duration::ZERO;
    f.request(&api(), t).await;
    let (first, _) = assignment(&mut f, &api(), t).await;
    // Spend the local bucket.
    let mut spent = 0;
    while f.request(&api(), t).await {
        spent += 1;
    }
    assert!(spent > 0);
    // The server renews as the TTL (1s) nears its end: 2 intervals before it.
    server.post("/admin/clock", r#"{"advance_ms": 850}"#).await;
    let (renewed, ttl) = assignment(&mut f, &api(), t).await;
    assert_eq!((renewed, ttl), (first, Duration::from_secs(1)));
    assert!(!f.request(&api(), t).await, "an extension keeps the bucket's state");
    server.stop().await;
}

#[tokio::test]
async fn idle_buckets_are_abandoned_and_subscribe_again() {
    let server = server().await;
    let mut f = filter(&server, Settings::default()).await;
    let t = Duration::ZERO;
    f.request(&api(), t).await;
    assignment(&mut f, &api(), t).await;
    server.post("/admin/clock", r#"{"advance_ms": 2000}"#).await;
    loop {
        let r = next(&mut f).await;
        f.apply(&r, t);
        if r.bucket_action.iter().any(|a| matches!(a.bucket_action, Some(Kind::AbandonAction(_)))) {
            break;
        }
    }
    assert_eq!(f.phase(&api()), None, "abandoned: forgotten");
    // A new request subscribes again, and is answered.
    f.request(&api(), t).await;
    let (s, _) = assignment(&mut f, &api(), t).await;
    assert_eq!(rate(&s), Some(100.0));
    server.stop().await;
}

#[tokio::test]
async fn shutdown_expires_every_assignment_and_the_filter_falls_back() {
    let server = server().await;
    let fallback = RateLimitStrategy { strategy: Some(Strategy::BlanketRule(BlanketRule::DenyAll as i32)) };
    let settings = Settings {
        no_assignment: None,
        expired: Some(Expired { fallback: Some(fallback), timeout: Duration::from_secs(60) }),
    };
    let mut f = filter(&server, settings).await;
    let t = Duration::ZERO;
    f.request(&api(), t).await;
    assignment(&mut f, &api(), t).await;
    assert!(f.request(&api(), t).await);
    let stopping = tokio::spawn(server.stop());
    let (_, ttl) = assignment(&mut f, &api(), t).await;
    assert_eq!(ttl, Duration::ZERO, "TTL 0: expire now");
    assert_eq!(f.phase(&api()), Some(Phase::Expired));
    assert!(!f.request(&api(), t).await, "the expired-assignment fallback decides");
    // Then the server ends the stream, and its shutdown completes.
    let end = wait::finished("the end of the stream", f.next()).await;
    assert!(matches!(end, None | Some(Ok(_))), "{end:?}");
    wait::finished("the server's shutdown", stopping).await.unwrap();
}

#[tokio::test]
async fn a_reload_that_removes_a_rule_expires_its_buckets() {
    let server = server().await;
    let mut f = filter(&server, Settings::default()).await;
    let t = Duration::ZERO;
    f.request(&api(), t).await;
    assignment(&mut f, &api(), t).await;
    let without = CONFIG.replace("match: { name: api }", "match: { name: gone }");
    let applied = server.post("/admin/config", without).await;
    assert_eq!(applied.status, 200, "{:?}", applied.json());
    assert!(
        applied.body.contains("rlqs:rlqs-example/api"),
        "the audit diff names the rule: {}",
        applied.body
    );
    let (_, ttl) = assignment(&mut f, &api(), t).await;
    assert_eq!(ttl, Duration::ZERO);
    server.stop().await;
}

fn usage(bucket: &[(&str, &str)], elapsed: Duration, allowed: u64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: bucket.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
        }),
        time_elapsed: Some(proto(elapsed)),
        num_requests_allowed: allowed,
        num_requests_denied: 0,
    }
}

/// Sends `messages` on a new stream and returns the status it is closed with.
async fn refused(server: &TestServer, messages: Vec<RateLimitQuotaUsageReports>) -> tonic::Status {
    let mut f = filter(server, Settings::default()).await;
    for m in messages {
        f.send_raw(m).await;
    }
    loop {
        match wait::finished("the stream's closing status", f.next()).await {
            Some(Ok(_)) => continue,
            Some(Err(status)) => return status,
            None => panic!("the stream ended without an error"),
        }
    }
}

#[tokio::test]
async fn messages_that_break_the_protocol_close_the_stream_naming_what_is_wrong() {
    let server = server().await;
    let second = Duration::from_secs(1);
    let api = [("name", "api")];
    let report = |domain: &str, usages: Vec<BucketQuotaUsage>| RateLimitQuotaUsageReports {
        domain: domain.into(),
        bucket_quota_usages: usages,
    };
    let cases: Vec<(Vec<RateLimitQuotaUsageReports>, Code, &str)> = vec![
        (vec![report("", vec![usage(&api, second, 1)])], Code::InvalidArgument, "domain is empty"),
        (
            vec![report("nowhere", vec![usage(&api, second, 1)])],
            Code::NotFound,
            "no rlqs rules for domain \"nowhere\"",
        ),
        (
            vec![
                report("rlqs-example", vec![usage(&api, second, 1)]),
                report("other", vec![usage(&api, second, 1)]),
            ],
            Code::InvalidArgument,
            "differs from the stream's",
        ),
        (vec![report("rlqs-example", vec![])], Code::InvalidArgument, "bucket_quota_usages is empty"),
        (
            vec![report("rlqs-example", vec![usage(&api, second, 1), usage(&api, second, 2)])],
            Code::InvalidArgument,
            "bucket_quota_usages[1].bucket_id repeats the bucket of bucket_quota_usages[0]",
        ),
        (
            vec![report(
                "rlqs-example",
                vec![BucketQuotaUsage { bucket_id: None, ..usage(&api, second, 1) }],
            )],
            Code::InvalidArgument,
            "bucket_quota_usages[0].bucket_id is missing",
        ),
        (vec![report("rlqs-example", vec![usage(&[], second, 1)])], Code::InvalidArgument, "bucket is empty"),
        (
            vec![report("rlqs-example", vec![usage(&[("name", "")], second, 1)])],
            Code::InvalidArgument,
            "empty value for key \"name\"",
        ),
        (
            vec![report("rlqs-example", vec![usage(&api, Duration::ZERO, 1)])],
            Code::InvalidArgument,
            "bucket_quota_usages[0].time_elapsed is 0s 0ns: it must be more than 0",
        ),
        (
            vec![report(
                "rlqs-example",
                vec![BucketQuotaUsage { time_elapsed: None, ..usage(&api, second, 1) }],
            )],
            Code::InvalidArgument,
            "time_elapsed is missing",
        ),
        (
            vec![report("rlqs-example", vec![usage(&api, Duration::from_secs(7200), 1)])],
            Code::InvalidArgument,
            "more than the 3600s a report may cover",
        ),
        (
            vec![report("rlqs-example", vec![usage(&api, second, u64::MAX)])],
            Code::InvalidArgument,
            "more than 1e9 requests a second",
        ),
    ];
    for (messages, code, says) in cases {
        let status = refused(&server, messages).await;
        assert_eq!(status.code(), code, "{}", status.message());
        assert!(status.message().contains(says), "{:?} should say {says:?}", status.message());
    }
    // The server goes on serving well-behaved streams.
    let mut f = filter(&server, Settings::default()).await;
    f.request(&self::api(), Duration::ZERO).await;
    assignment(&mut f, &self::api(), Duration::ZERO).await;
    server.stop().await;
}

/// A gRPC channel to `server`'s listener.
async fn channel(server: &TestServer) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn streams_need_the_check_scope_when_clients_are_named() {
    let dir = TempDir::new("rlqs-auth");
    let edge = dir.write_atomic("edge.token", "edge-secret-token-0001");
    let reader = dir.write_atomic("reader.token", "reader-secret-token-01");
    let yaml = format!(
        "{CONFIG}auth:\n  clients:\n    - name: edge\n      token_file: {}\n      scopes: [check]\n    - name: reader\n      token_file: {}\n      scopes: [report]\n",
        edge.display(),
        reader.display()
    );
    let server = TestServer::start(parse(&yaml)).await;
    let channel = channel(&server).await;
    let client = || RateLimitQuotaServiceClient::new(channel.clone());
    let none = Filter::open(client(), "rlqs-example", Settings::default(), None).await.unwrap_err();
    assert_eq!(none.code(), Code::Unauthenticated);
    let reader =
        Filter::open(client(), "rlqs-example", Settings::default(), Some("Bearer reader-secret-token-01"))
            .await
            .unwrap_err();
    assert_eq!(reader.code(), Code::PermissionDenied);
    let mut edge =
        Filter::open(client(), "rlqs-example", Settings::default(), Some("Bearer edge-secret-token-0001"))
            .await
            .unwrap();
    edge.request(&api(), Duration::ZERO).await;
    assignment(&mut edge, &api(), Duration::ZERO).await;
    server.stop().await;
}

#[tokio::test]
async fn bucket_ids_must_name_the_descriptors_pinned_to_the_streams_client() {
    let dir = TempDir::new("rlqs-pinned");
    let shop = dir.write_atomic("shop.token", "shop-secret-token-00001");
    let yaml = format!(
        "{CONFIG}auth:\n  clients:\n    - name: shop\n      token_file: {}\n      scopes: [check]\n      descriptors: {{ tenant: shop }}\n",
        shop.display()
    );
    let server = TestServer::start(parse(&yaml)).await;
    let channel = channel(&server).await;
    let open = || async {
        let client = RateLimitQuotaServiceClient::new(channel.clone());
        Filter::open(client, "rlqs-example", Settings::default(), Some("Bearer shop-secret-token-00001"))
            .await
            .unwrap()
    };
    // Its own tenant: served.
    let mut own = open().await;
    let bucket = id(&[("name", "api"), ("tenant", "shop")]);
    own.request(&bucket, Duration::ZERO).await;
    assignment(&mut own, &bucket, Duration::ZERO).await;
    // Another tenant's bucket, or one without the tenant: the stream is closed, naming it.
    for pairs in [&[("name", "api"), ("tenant", "acme")][..], &[("name", "api")][..]] {
        let mut other = open().await;
        other.request(&id(pairs), Duration::ZERO).await;
        let status = loop {
            match other.next().await {
                Some(Ok(_)) => continue,
                Some(Err(status)) => break status,
                None => panic!("the stream ended without a status"),
            }
        };
        assert_eq!(status.code(), Code::PermissionDenied, "{}", status.message());
        assert!(status.message().contains("\"tenant\""), "{}", status.message());
    }
    // The stream of its own tenant goes on: its next assignment (a renewal, 1 s TTL) comes.
    own.report(Duration::from_secs(1)).await;
    assignment(&mut own, &bucket, Duration::from_secs(1)).await;
    server.stop().await;
}

// === across a fleet ===

/// The rule's share for two instances of one fleet on `store` (no manual clock: Redis keeps the
/// time of the fleet's demand).
fn fleet_config(store: &str) -> String {
    let rlqs = &CONFIG[CONFIG.find("rlqs:").unwrap()..];
    format!("store: {store}\n{rlqs}")
}

/// Reads `f`'s responses (applying them at `now`) until the last assignment of `bucket` has a rate
/// that `done` accepts; returns that rate. `DENY_ALL` is a rate of 0: what an instance assigns a
/// stream while the fleet's other instances hold the whole limit.
async fn until_rate(f: &mut Filter, bucket: &Id, now: Duration, done: impl Fn(f64) -> bool) -> f64 {
    loop {
        let (s, _) = assignment(f, bucket, now).await;
        let deny = Some(Strategy::BlanketRule(BlanketRule::DenyAll as i32));
        let r = if s.strategy == deny { 0.0 } else { rate(&s).expect("a rate or DENY_ALL") };
        if done(r) {
            return r;
        }
    }
}

/// Two Floodgate instances on one store, an Envoy on each: the instances exchange their streams'
/// demand through the store and split the one limit over both.
async fn two_instances_share_one_limit(store: String) {
    let config = fleet_config(&store);
    let one = TestServer::start(parse(&config)).await;
    let two = TestServer::start(parse(&config)).await;
    let mut a = filter(&one, Settings::default()).await;
    let mut b = filter(&two, Settings::default()).await;
    let t = Duration::ZERO;
    a.request(&api(), t).await;
    b.request(&api(), t).await;
    // Each instance learns of the other's stream within an interval or so: half each.
    let near_half = |r: f64| (r - 50.0).abs() < 1.0;
    until_rate(&mut a, &api(), t, near_half).await;
    until_rate(&mut b, &api(), t, near_half).await;

    // A is hot (about 67 a second, on instance one); B idle (on instance two). Instance one gives A
    // its demand at once; instance two reads A's demand from the store and shrinks B.
    for i in 0..60u64 {
        a.request(&api(), Duration::from_millis(i * 15)).await;
    }
    let t = Duration::from_millis(900);
    b.report(t).await;
    a.report(t).await;
    let ra = until_rate(&mut a, &api(), t, |r| r >= 67.0).await;
    let rb = until_rate(&mut b, &api(), t, |r| r < 50.0).await;
    assert!(ra + rb <= 100.0 + 1e-9, "the fleet's shares sum to the limit: {ra} + {rb}");
    let view = one.get("/admin/rlqs").await.json();
    assert_eq!(view["groups"][0]["remote_streams"], 1, "{view}");
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_limit_on_redis() {
    let redis = tokio::task::block_in_place(RedisServer::start);
    two_instances_share_one_limit(format!("{{ kind: redis, url: \"{}\" }}", redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_limit_on_a_redis_cluster() {
    let cluster = tokio::task::block_in_place(RedisCluster::start);
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    two_instances_share_one_limit(format!(
        "{{ kind: redis_cluster, urls: [{}], deadline: 1s }}",
        urls.join(", ")
    ))
    .await;
}
