//! Envoy RLS v3 over gRPC, with a real tonic client.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use floodgate::Rule;
use floodgate_app::ServeOptions;
use floodgate_core::Timestamp;
use tonic::transport::Channel;

use floodgate_testkit::redis::RedisServer;

use crate::support::{TempDir, TestServer, from_rules, parse, per_minute, with_domains};

async fn client(server: &TestServer) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{}", server.grpc)).await.expect("gRPC connect")
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries.iter().map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() }).collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(domain: &str, descriptors: &[&[(&str, &str)]], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend: hits,
    }
}

async fn ask(client: &mut RateLimitServiceClient<Channel>, request: RateLimitRequest) -> RateLimitResponse {
    client.should_rate_limit(request).await.expect("ShouldRateLimit").into_inner()
}

fn header<'a>(response: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    response.response_headers_to_add.iter().find(|h| h.key == name).map(|h| h.value.as_str())
}

fn code(status: &DescriptorStatus) -> Code {
    Code::try_from(status.code).unwrap()
}

#[tokio::test]
async fn should_rate_limit_answers_ok_then_over_limit_with_statuses_and_headers() {
    let server = TestServer::start(with_domains(
        [],
        [("edge", vec![Rule::new("per-ip", per_minute(3)).key(["remote_address"])])],
    ))
    .await;
    let mut rls = client(&server).await;
    let ip = [("remote_address", "10.1.2.3")];
    for remaining in [2u32, 1, 0] {
        let r = ask(&mut rls, request("edge", &[&ip], 0)).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses.len(), 1);
        let status = &r.statuses[0];
        assert_eq!(code(status), Code::Ok);
        assert_eq!(status.limit_remaining, remaining);
        let limit = status.current_limit.as_ref().expect("current_limit");
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("per-ip", 3, Unit::Minute as i32)
        );
        assert!(status.duration_until_reset.is_some());
        assert_eq!(header(&r, "ratelimit-policy"), Some(r#""per-ip";q=3;w=60"#));
        assert_eq!(header(&r, "x-ratelimit-remaining"), Some(remaining.to_string().as_str()));
        assert!(header(&r, "retry-after").is_none());
    }
    let over = ask(&mut rls, request("edge", &[&ip], 0)).await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    assert_eq!(code(&over.statuses[0]), Code::OverLimit);
    assert_eq!(over.statuses[0].limit_remaining, 0);
    let retry: u64 = header(&over, "retry-after").expect("Retry-After").parse().unwrap();
    assert!(
        (1..=80).contains(&retry),
        "retry-after {retry}: the sliding window frees a slot at most 80 s on"
    );
    assert!(header(&over, "ratelimit").unwrap().starts_with(r#""per-ip";r=0;t="#));

    // Another client is counted apart.
    let other = ask(&mut rls, request("edge", &[&[("remote_address", "10.9.9.9")]], 0)).await;
    assert_eq!(other.overall_code, Code::Ok as i32);
    server.stop().await;
}

#[tokio::test]
async fn hits_addend_is_the_cost_and_a_descriptor_may_override_it() {
    let server =
        TestServer::start(with_domains([], [("d", vec![Rule::new("r", per_minute(10)).key(["k"])])])).await;
    let mut rls = client(&server).await;
    let r = ask(&mut rls, request("d", &[&[("k", "a")]], 4)).await;
    assert_eq!(r.statuses[0].limit_remaining, 6);
    let mut req = request("d", &[&[("k", "a")]], 4);
    req.descriptors[0].hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 5 });
    let r = ask(&mut rls, req).await;
    assert_eq!(r.statuses[0].limit_remaining, 1);
    // More than the limit can ever grant: over limit, not an error.
    let r = ask(&mut rls, request("d", &[&[("k", "b")]], 11)).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert!(header(&r, "retry-after").is_some());
    server.stop().await;
}

#[tokio::test]
async fn a_request_over_limit_on_one_descriptor_consumes_nothing_on_the_others() {
    let server = TestServer::start(with_domains(
        [],
        [(
            "api",
            vec![
                Rule::new("per-user", per_minute(5)).key(["user"]),
                Rule::new("per-path", per_minute(1)).key(["path"]),
            ],
        )],
    ))
    .await;
    let mut rls = client(&server).await;
    let user: &[(&str, &str)] = &[("user", "u1")];
    let path: &[(&str, &str)] = &[("path", "/expensive")];

    let first = ask(&mut rls, request("api", &[user, path], 0)).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    assert_eq!(first.statuses[0].limit_remaining, 4);

    for _ in 0..3 {
        let second = ask(&mut rls, request("api", &[user, path], 0)).await;
        assert_eq!(second.overall_code, Code::OverLimit as i32);
        assert_eq!(code(&second.statuses[0]), Code::Ok, "the user descriptor itself was within its limit");
        assert_eq!(code(&second.statuses[1]), Code::OverLimit);
        assert_eq!(second.statuses[0].limit_remaining, 4, "its grant was refunded");
    }
    // The user's limit lost only the admitted request: 5 - 1 - this one = 3.
    let alone = ask(&mut rls, request("api", &[user], 0)).await;
    assert_eq!(alone.statuses[0].limit_remaining, 3);
    server.stop().await;
}

#[tokio::test]
async fn a_domain_no_envoy_file_defines_gets_the_native_policy() {
    let server = TestServer::start(from_rules([Rule::new("per-user", per_minute(2)).key(["user"])])).await;
    let mut rls = client(&server).await;
    let user: &[(&str, &str)] = &[("user", "u1")];
    assert_eq!(ask(&mut rls, request("anything", &[user], 0)).await.statuses[0].limit_remaining, 1);
    // A descriptor no rule applies to: OK, without a limit.
    let unmatched = ask(&mut rls, request("anything", &[&[("path", "/")]], 0)).await;
    assert_eq!(unmatched.overall_code, Code::Ok as i32);
    assert!(unmatched.statuses[0].current_limit.is_none());
    server.stop().await;
}

#[tokio::test]
async fn an_unknown_domain_of_an_envoy_only_configuration_is_not_limited() {
    let server =
        TestServer::start(with_domains([], [("edge", vec![Rule::new("r", per_minute(1)).key(["k"])])])).await;
    let mut rls = client(&server).await;
    for _ in 0..3 {
        let r = ask(&mut rls, request("other", &[&[("k", "v")]], 0)).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert!(r.response_headers_to_add.is_empty());
    }
    server.stop().await;
}

/// An envoyproxy/ratelimit configuration file, loaded and served over gRPC.
const ENVOY_CONFIG: &str = r#"
domain: edge_proxy
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: remote_address
    value: 10.0.0.1
    rate_limit:
      unlimited: true
  - key: path
    value: /login
    rate_limit:
      unit: second
      requests_per_unit: 1
"#;

#[tokio::test]
async fn an_envoyproxy_ratelimit_config_is_served_over_grpc() {
    let dir = TempDir::new("envoy-import");
    let path = dir.write_atomic("ratelimit.yaml", ENVOY_CONFIG);
    let config = floodgate_config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.domains.contains_key("edge_proxy"));
    // On a stopped clock: the per-second and per-minute windows below never turn over between two
    // requests of one assertion.
    let options = ServeOptions::default().manual_clock(Timestamp::from_millis(1_800_000_000_000));
    let server = TestServer::with_options(config, options).await;
    let mut rls = client(&server).await;

    let ip: &[(&str, &str)] = &[("remote_address", "192.0.2.1")];
    assert_eq!(ask(&mut rls, request("edge_proxy", &[ip], 0)).await.overall_code, Code::Ok as i32);
    let second = ask(&mut rls, request("edge_proxy", &[ip], 0)).await;
    assert_eq!(second.overall_code, Code::Ok as i32);
    let limit = second.statuses[0].current_limit.as_ref().expect("current_limit");
    assert_eq!((limit.requests_per_unit, limit.unit), (2, Unit::Minute as i32));
    assert_eq!(ask(&mut rls, request("edge_proxy", &[ip], 0)).await.overall_code, Code::OverLimit as i32);
    // The admin API and the HTTP API address the same counters (rules named as Envoy's statistics).
    let key = server.get("/admin/keys?domain=edge_proxy&rule=remote_address&remote_address=192.0.2.1").await;
    assert_eq!(key.status, 200, "{}", key.body);
    assert_eq!((key.json()["limit"].as_u64(), key.json()["remaining"].as_u64()), (Some(2), Some(0)));
    let http = server
        .post("/v1/peek", r#"{"domain": "edge_proxy", "descriptors": {"remote_address": "192.0.2.1"}}"#)
        .await;
    assert_eq!(http.status, 429, "{}", http.body);

    let login: &[(&str, &str)] = &[("path", "/login")];
    assert_eq!(ask(&mut rls, request("edge_proxy", &[login], 0)).await.overall_code, Code::Ok as i32);
    let over = ask(&mut rls, request("edge_proxy", &[login], 0)).await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    assert_eq!(over.statuses[0].current_limit.as_ref().unwrap().unit, Unit::Second as i32);
    // An `unlimited` value: never over limit, no limit reported, no headers.
    let trusted: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];
    for _ in 0..4 {
        let r = ask(&mut rls, request("edge_proxy", &[trusted], 0)).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert!(r.statuses[0].current_limit.is_none());
        assert!(r.response_headers_to_add.is_empty(), "{:?}", r.response_headers_to_add);
    }
    let http = server
        .post("/v1/check", r#"{"domain": "edge_proxy", "descriptors": {"remote_address": "10.0.0.1"}}"#)
        .await;
    assert_eq!(http.json(), serde_json::json!({"allowed": true, "retry_after_ms": null, "limits": []}));
    // A value without a rule is not limited.
    let home: &[(&str, &str)] = &[("path", "/home")];
    for _ in 0..3 {
        assert_eq!(ask(&mut rls, request("edge_proxy", &[home], 0)).await.overall_code, Code::Ok as i32);
    }
    server.stop().await;
}

/// How many times Redis ran `command` since its statistics were last reset (`INFO commandstats`).
fn calls(redis: &RedisServer, command: &str) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// One round trip per request, and none to give anything back: a request whose second descriptor
/// is over its limit takes nothing from the first, and Redis sees exactly one script call for it.
/// (The deadline is far beyond any call's time, so that on a loaded machine no answer is a
/// fail-open verdict while its script still runs after the counters are reset. `instances: 1`:
/// no fleet heartbeat, itself a script call, runs beside the requests counted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_limit_on_its_second_descriptor_is_one_store_call_with_no_refund() {
    // Sliding logs, not fixed windows: a window aligned to the clock could end between the
    // admitted request and the denied ones, whatever the machine's load.
    let redis = tokio::task::block_in_place(RedisServer::start);
    let config = parse(&format!(
        "store: {{ kind: redis, url: \"{}\", deadline: 30s, instances: 1 }}
descriptors: [path]
rules:
  - name: per-user
    key: [user]
    algorithm: sliding_log
    limit: 5
    window: 1h
  - name: per-path
    key: [path]
    algorithm: sliding_log
    limit: 1
    window: 1h
",
        redis.url()
    ));
    let server = TestServer::start(config).await;
    let mut rls = client(&server).await;
    let user: &[(&str, &str)] = &[("user", "u1")];
    let path: &[(&str, &str)] = &[("path", "/expensive")];
    assert_eq!(ask(&mut rls, request("api", &[user, path], 0)).await.overall_code, Code::Ok as i32);

    redis.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..3 {
        let denied = ask(&mut rls, request("api", &[user, path], 0)).await;
        assert_eq!(denied.overall_code, Code::OverLimit as i32);
        assert_eq!(code(&denied.statuses[0]), Code::Ok);
        assert_eq!(denied.statuses[0].limit_remaining, 4, "nothing taken from the user's limit");
        assert_eq!(code(&denied.statuses[1]), Code::OverLimit);
    }
    assert_eq!(calls(&redis, "evalsha"), 3, "one script call per request, none to refund");
    assert_eq!(calls(&redis, "eval"), 0);

    // The user's limit was charged once, for the admitted request: a peek of 1 leaves 5 - 1 - 1.
    let peek = server.post("/v1/peek", r#"{"descriptors": {"user": "u1"}}"#).await;
    assert_eq!(peek.json()["limits"][0]["remaining"], 3, "{}", peek.body);
    server.stop().await;
}

/// envoyproxy/ratelimit features served as Envoy sees them: wildcard values (a counter per
/// matching value, or one shared), `replaces`, week units, and `detailed_metric` counted per value.
#[tokio::test]
async fn wildcards_replaces_and_detailed_metrics_of_an_envoy_file_are_served() {
    let dir = TempDir::new("envoy-features");
    let path = dir.write_atomic(
        "ratelimit.yaml",
        "domain: api
descriptors:
  - key: path
    value: /files/*
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /shared/*
    share_threshold: true
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: category
    value: read
    rate_limit: {name: read_limit, unit: minute, requests_per_unit: 1}
  - key: endpoint
    value: /reports
    rate_limit: {replaces: [{name: read_limit}], unit: minute, requests_per_unit: 3}
",
    );
    let server = TestServer::start(floodgate_config::load(&path).unwrap_or_else(|e| panic!("{e}"))).await;
    let mut rls = client(&server).await;
    let ok = |r: &RateLimitResponse| r.overall_code == Code::Ok as i32;

    // Each file has a counter of its own; every /shared/ path shares one, counted by the week.
    let (a, b) = (&[("path", "/files/a.pdf")][..], &[("path", "/files/b.csv")][..]);
    assert!(ok(&ask(&mut rls, request("api", &[a], 0)).await));
    assert!(ok(&ask(&mut rls, request("api", &[b], 0)).await), "another value, another counter");
    assert!(!ok(&ask(&mut rls, request("api", &[a], 0)).await));
    let first = ask(&mut rls, request("api", &[&[("path", "/shared/x")]], 0)).await;
    assert_eq!(first.statuses[0].current_limit.as_ref().map(|l| l.unit), Some(Unit::Week as i32));
    assert!(!ok(&ask(&mut rls, request("api", &[&[("path", "/shared/y")]], 0)).await), "one shared counter");

    // With the /reports endpoint in the same request, the read limit is replaced: 3 a minute.
    let read: &[(&str, &str)] = &[("category", "read")];
    let reports: &[(&str, &str)] = &[("endpoint", "/reports")];
    for _ in 0..3 {
        let r = ask(&mut rls, request("api", &[read, reports], 0)).await;
        assert!(ok(&r), "{r:?}");
        assert!(r.statuses[0].current_limit.is_none(), "the replaced limit is not applied");
    }
    assert!(!ok(&ask(&mut rls, request("api", &[read, reports], 0)).await));
    assert!(ok(&ask(&mut rls, request("api", &[read], 0)).await), "alone, the read limit was never charged");

    let metrics = server.get("/metrics").await.body;
    let detailed = |value: &str, result: &str| {
        let series = format!(
            "floodgate_decisions_detailed_total{{rule=\"api/path_/files/*\",value=\"{value}\",result=\"{result}\"}} "
        );
        metrics.lines().find_map(|l| l.strip_prefix(&series)).map(|v| v.trim().to_owned())
    };
    assert_eq!(detailed("path_/files/a.pdf", "allowed").as_deref(), Some("1"), "{metrics}");
    assert_eq!(detailed("path_/files/a.pdf", "denied").as_deref(), Some("1"));
    assert_eq!(detailed("path_/files/b.csv", "allowed").as_deref(), Some("1"));
    server.stop().await;
}

#[tokio::test]
async fn an_ip_that_is_no_address_under_a_prefix_rule_is_an_invalid_argument_not_an_ok() {
    let rule =
        Rule::new("per-net", per_minute(2)).key(["ip"]).ip_prefix(floodgate::IpPrefix::new(24, 64).unwrap());
    let server = TestServer::start(from_rules([rule])).await;
    let mut rls = client(&server).await;
    let net: &[(&str, &str)] = &[("ip", "2001:db8::1")];
    assert_eq!(ask(&mut rls, request("d", &[net], 0)).await.statuses[0].limit_remaining, 1);
    let other_host: &[(&str, &str)] = &[("ip", "2001:db8::ffff")];
    assert_eq!(ask(&mut rls, request("d", &[other_host], 0)).await.overall_code, Code::Ok as i32);
    assert_eq!(
        ask(&mut rls, request("d", &[other_host], 0)).await.overall_code,
        Code::OverLimit as i32,
        "one /64"
    );
    let bad: &[(&str, &str)] = &[("ip", "garbage")];
    let status = rls.should_rate_limit(request("d", &[bad], 0)).await.expect_err("no verdict for a bad ip");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("\"garbage\""), "{}", status.message());
    server.stop().await;
}

/// An envoyproxy/ratelimit file's domain, bounded by its own `limit_override`.
const OVERRIDDEN: &str = "\
domain: overrides
limit_override: { max_requests_per_unit: 100, max_unit: hour }
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 50 }
";

fn overriding(ip: &str, requests_per_unit: u32, unit: Unit) -> RateLimitRequest {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    let mut d = descriptor(&[("remote_address", ip)]);
    d.limit = Some(RateLimitOverride { requests_per_unit, unit: unit as i32 });
    RateLimitRequest { domain: "overrides".into(), descriptors: vec![d], hits_addend: 0 }
}

#[tokio::test]
async fn envoys_limit_override_is_honoured_within_the_domains_bound_and_reported() {
    let dir = TempDir::new("envoy-override");
    let path = dir.write_atomic("ratelimit.yaml", OVERRIDDEN);
    let server = TestServer::start(floodgate_config::load(&path).unwrap_or_else(|e| panic!("{e}"))).await;
    let mut rls = client(&server).await;
    // Two an hour for this route, whatever the file says for the descriptor.
    for remaining in [1u32, 0] {
        let r = ask(&mut rls, overriding("192.0.2.9", 2, Unit::Hour)).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].limit_remaining, remaining);
        let limit = r.statuses[0].current_limit.as_ref().expect("current_limit");
        assert_eq!((limit.requests_per_unit, limit.unit), (2, Unit::Hour as i32), "the override is reported");
    }
    let over = ask(&mut rls, overriding("192.0.2.9", 2, Unit::Hour)).await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    // Another route's override for the same address counts on its own counter, and so does the
    // file's own limit.
    let other = ask(&mut rls, overriding("192.0.2.9", 10, Unit::Minute)).await;
    assert_eq!((other.overall_code, other.statuses[0].limit_remaining), (Code::Ok as i32, 9));
    let own = ask(&mut rls, request("overrides", &[&[("remote_address", "192.0.2.9")]], 0)).await;
    assert_eq!(own.statuses[0].limit_remaining, 49);
    // Past the domain's bound, an unknown unit, a limit of 0: INVALID_ARGUMENT naming it.
    for (bad, says) in [
        (overriding("192.0.2.9", 101, Unit::Minute), "above the rule's bound 100"),
        (overriding("192.0.2.9", 5, Unit::Day), "above the rule's bound 3600000ms"),
        (overriding("192.0.2.9", 5, Unit::Unknown), "descriptors[0].limit: unit 0 is not a unit"),
        (overriding("192.0.2.9", 0, Unit::Second), "descriptors[0].limit: requests_per_unit is 0"),
    ] {
        let status = rls.should_rate_limit(bad).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains(says), "{says:?} not in {:?}", status.message());
    }
    server.stop().await;
}

#[tokio::test]
async fn a_domain_that_refuses_overrides_says_so() {
    let dir = TempDir::new("envoy-override-refused");
    let text = OVERRIDDEN
        .replace("limit_override: { max_requests_per_unit: 100, max_unit: hour }", "limit_override: refuse");
    let path = dir.write_atomic("ratelimit.yaml", &text);
    let server = TestServer::start(floodgate_config::load(&path).unwrap_or_else(|e| panic!("{e}"))).await;
    let mut rls = client(&server).await;
    let status = rls.should_rate_limit(overriding("192.0.2.10", 5, Unit::Minute)).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("no rule that applies to it takes one"), "{}", status.message());
    server.stop().await;
}
