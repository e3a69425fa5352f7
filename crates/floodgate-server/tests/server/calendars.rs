//! Quota calendars per tenant through the server: one rule whose `time_zone` and `anchor` come from
//! descriptors, checked over HTTP and gRPC, its periods read back by `/v1/usage` per tenant (on
//! memory and on a real `redis-server`), and bad values refused naming the descriptor and value.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use jiff::ToSpan;
use jiff::civil::{DateTime, Time};
use jiff::tz::TimeZone;
use serde_json::{Value, json};

use crate::support::{TestServer, parse};

fn config(store: &str) -> String {
    format!(
        "store: {store}
descriptors: [tz, billing_day]
rules:
  - name: monthly
    key: [tenant]
    algorithm: quota
    limit: 3
    period: month
    time_zone: {{ by: tz, default: UTC }}
    anchor: {{ by: billing_day, default: 1 }}
"
    )
}

/// The instant `ms` (milliseconds since the epoch) on the clocks of `zone`.
fn local(ms: &Value, zone: &str) -> (jiff::Timestamp, DateTime) {
    let ts = jiff::Timestamp::from_millisecond(ms.as_i64().expect("a number")).expect("an instant");
    (ts, TimeZone::get(zone).expect("a zone").to_datetime(ts))
}

/// Whether `at` is local midnight on the anchor day `anchor` (or the month's last day, when shorter).
fn is_anchor_midnight(at: DateTime, anchor: i8) -> bool {
    at.time() == Time::midnight() && at.day() == anchor.min(at.date().days_in_month())
}

/// The usage of the tenant in `query` is one, in a month from local midnight on the anchor day in
/// `zone` to the next, holding now.
async fn one_used_in_a_month_from(server: &TestServer, query: &str, zone: &str, anchor: i8) {
    let reply = server.get(&format!("/v1/usage?rule=monthly&{query}")).await;
    assert_eq!(reply.status, 200, "{query}: {}", reply.body);
    let body = reply.json();
    assert_eq!((body["used"].as_u64(), body["remaining"].as_u64()), (Some(1), Some(2)), "{body}");
    let ((start_ts, start), (end_ts, end)) =
        (local(&body["period_start"], zone), local(&body["period_end"], zone));
    assert!(
        is_anchor_midnight(start, anchor) && is_anchor_midnight(end, anchor),
        "{query}: {start} to {end}"
    );
    let next = start.date().first_of_month().checked_add(1.month()).unwrap();
    assert_eq!(
        (end.year(), end.month()),
        (next.year(), next.month()),
        "{query}: one month, {start} to {end}"
    );
    let now = jiff::Timestamp::now();
    assert!(start_ts <= now && now < end_ts, "{query}: the current period");
}

async fn each_tenant_counts_in_its_own_calendar(server: &TestServer) {
    let tenants = [
        (
            json!({"tenant": "tokyo", "tz": "Asia/Tokyo", "billing_day": "15"}),
            "tenant=tokyo&tz=Asia/Tokyo&billing_day=15",
            "Asia/Tokyo",
            15,
        ),
        (
            json!({"tenant": "la", "tz": "America/Los_Angeles"}),
            "tenant=la&tz=America/Los_Angeles",
            "America/Los_Angeles",
            1,
        ),
        (json!({"tenant": "utc", "billing_day": "31"}), "tenant=utc&billing_day=31", "UTC", 31),
    ];
    for (descriptors, query, zone, anchor) in tenants {
        let reply = server.post("/v1/check", json!({"descriptors": descriptors}).to_string()).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        one_used_in_a_month_from(server, query, zone, anchor).await;
    }
}

#[tokio::test]
async fn each_tenant_counts_in_its_own_calendar_on_memory() {
    let server = TestServer::start(parse(&config("{ kind: memory }"))).await;
    each_tenant_counts_in_its_own_calendar(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_counts_in_its_own_calendar_on_redis() {
    let redis = tokio::task::spawn_blocking(floodgate_testkit::redis::RedisServer::start).await.unwrap();
    let store = format!("{{ kind: redis, url: \"{}\", deadline: 1s }}", redis.url());
    let server = TestServer::start(parse(&config(&store))).await;
    each_tenant_counts_in_its_own_calendar(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn a_value_that_is_no_zone_or_anchor_is_a_problem_naming_the_descriptor_and_the_value() {
    let server = TestServer::start(parse(&config("{ kind: memory }"))).await;
    let cases = [
        (json!({"tenant": "a", "tz": "Mars/Olympus"}), "\"tz\" is \"Mars/Olympus\""),
        (json!({"tenant": "a", "billing_day": "0"}), "\"billing_day\" is \"0\""),
        (json!({"tenant": "a", "billing_day": "monday"}), "a day of the month"),
    ];
    for (descriptors, says) in cases {
        for path in ["/v1/check", "/v1/peek", "/v1/reserve"] {
            let reply = server.post(path, json!({"descriptors": descriptors}).to_string()).await;
            assert_eq!(reply.status, 422, "{path} {descriptors}: {}", reply.body);
            assert_eq!(reply.content_type(), "application/problem+json");
            let body = reply.json();
            assert!(body["type"].as_str().unwrap().ends_with("invalid-request"), "{body}");
            let detail = body["detail"].as_str().unwrap();
            assert!(
                detail.contains(says) && detail.contains("\"monthly\""),
                "{path}: {detail:?} should say {says:?}"
            );
        }
    }
    let reply = server.get("/v1/usage?rule=monthly&tenant=a&tz=Mars/Olympus").await;
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert!(reply.json()["detail"].as_str().unwrap().contains("\"Mars/Olympus\""), "{}", reply.body);
    let untouched = server.get("/v1/usage?rule=monthly&tenant=a").await.json();
    assert_eq!(untouched["used"].as_u64(), Some(0), "nothing was counted: {untouched}");

    let mut rls = RateLimitServiceClient::connect(format!("http://{}", server.grpc)).await.unwrap();
    let request = |tz: &str| RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: [("tenant", "g"), ("tz", tz)]
                .iter()
                .map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() })
                .collect(),
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let ok = rls.should_rate_limit(request("Europe/Berlin")).await.unwrap().into_inner();
    assert_eq!(ok.overall_code, Code::Ok as i32);
    let status = rls.should_rate_limit(request("Mars/Olympus")).await.expect_err("no verdict for a bad zone");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("\"Mars/Olympus\""), "{}", status.message());
    server.stop().await;
}
