//! Cost dimensions over HTTP: a requests-per-minute and a tokens-per-minute rule in one call, on
//! the memory store, a real `redis-server` and a real Redis Cluster (floodgate-testkit starts
//! them): each rule takes its own dimension, and a call denied by tokens consumes no request.

use floodgate_testkit::redis::{RedisCluster, RedisServer};
use serde_json::{Value, json};

use crate::support::{Reply, TestServer, eventually, parse};

/// 3 requests and 1000 tokens a minute per tenant.
fn rpm_and_tpm(store: &str) -> String {
    format!(
        "store: {store}
rules:
  - name: rpm
    key: [tenant]
    algorithm: sliding_window
    limit: 3
    window: 60s
  - name: tpm
    key: [tenant]
    algorithm: sliding_window
    limit: 1000
    window: 60s
    cost: tokens
"
    )
}

fn body(costs: Value) -> String {
    json!({"descriptors": {"tenant": "t1"}, "costs": costs}).to_string()
}

fn remaining(reply: &Reply, rule: &str) -> Option<u64> {
    let body = reply.json();
    body["limits"].as_array()?.iter().find(|l| l["name"] == rule).map(|l| l["remaining"].as_u64().unwrap())
}

/// The case every store must answer the same way.
async fn rpm_and_tpm_in_one_call(server: &TestServer) {
    let first = server.post("/v1/check", body(json!({"requests": 1, "tokens": 700}))).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!((remaining(&first, "rpm"), remaining(&first, "tpm")), (Some(2), Some(300)), "{}", first.body);

    // Denied by tokens: 429, and neither the request nor any token is counted.
    let denied = server.post("/v1/check", body(json!({"requests": 1, "tokens": 700}))).await;
    assert_eq!(denied.status, 429, "{}", denied.body);
    let tpm =
        denied.json()["limits"].as_array().unwrap().iter().find(|l| l["name"] == "tpm").cloned().unwrap();
    assert_eq!(tpm["allowed"], false, "{}", denied.body);
    assert!(denied.header("retry-after").is_some());
    let peek = server.post("/v1/peek", body(json!({"requests": 1, "tokens": 1}))).await;
    assert_eq!((remaining(&peek, "rpm"), remaining(&peek, "tpm")), (Some(1), Some(299)), "{}", peek.body);

    // The tokens a response used, reported after the fact: only the token rule counts them.
    let report = server.post("/v1/report", body(json!({"tokens": 200}))).await;
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!((remaining(&report, "rpm"), remaining(&report, "tpm")), (None, Some(100)), "{}", report.body);

    // A plain cost is requests: the token rule does not apply to it.
    let plain =
        server.post("/v1/check", json!({"descriptors": {"tenant": "t1"}, "cost": 1}).to_string()).await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert_eq!((remaining(&plain, "rpm"), remaining(&plain, "tpm")), (Some(1), None), "{}", plain.body);
}

#[tokio::test]
async fn rpm_and_tpm_in_one_call_on_memory() {
    let server = TestServer::start(parse(&rpm_and_tpm("{ kind: memory }"))).await;
    rpm_and_tpm_in_one_call(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpm_and_tpm_in_one_call_on_redis() {
    let redis = tokio::task::spawn_blocking(RedisServer::start).await.unwrap();
    let server = TestServer::start(parse(&rpm_and_tpm(&format!(
        "{{ kind: redis, url: \"{}\", deadline: 1s }}",
        redis.url()
    ))))
    .await;
    rpm_and_tpm_in_one_call(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpm_and_tpm_in_one_call_on_a_redis_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await.unwrap();
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    // The two rules' keys are in different slots: the store's cross-slot path decides them.
    let store = format!("{{ kind: redis_cluster, urls: [{}], deadline: 1s }}", urls.join(", "));
    let server = TestServer::start(parse(&rpm_and_tpm(&store))).await;
    assert!(
        eventually(|| async { server.get("/readyz").await.status == 200 }).await,
        "ready once every master answers PING"
    );
    rpm_and_tpm_in_one_call(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn bad_costs_are_refused_naming_the_field() {
    let server = TestServer::start(parse(&rpm_and_tpm("{ kind: memory }"))).await;
    let both = server
        .post(
            "/v1/check",
            json!({"descriptors": {"tenant": "t1"}, "cost": 1, "costs": {"tokens": 5}}).to_string(),
        )
        .await;
    assert_eq!(both.status, 422, "{}", both.body);
    assert_eq!(both.content_type(), "application/problem+json");
    let detail = both.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("\"cost\" and \"costs\""), "{detail}");
    for (costs, says) in [
        (json!({"Tokens": 5}), "costs.\"Tokens\" is not a cost dimension"),
        (json!({"tokens": -1}), "costs.\"tokens\" must be a whole number"),
        (json!({"tokens": "5"}), "costs.\"tokens\" must be a whole number"),
        (json!([1]), "\"costs\" must be an object"),
        (json!({"tokens": 0}), "at least one dimension a cost of 1 or more"),
        (json!({}), "at least one dimension a cost of 1 or more"),
    ] {
        let reply = server.post("/v1/check", body(costs.clone())).await;
        assert_eq!(reply.status, 422, "{costs}: {}", reply.body);
        let detail = reply.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains(says), "{costs}: {detail:?} does not say {says:?}");
    }
    let never = server.post("/v1/check", body(json!({"tokens": 1001}))).await;
    assert_eq!(never.status, 422, "{}", never.body);
    assert!(never.body.contains("tpm"), "names the rule: {}", never.body);
    // Nothing was counted by any of them.
    let peek = server.post("/v1/peek", body(json!({"requests": 1, "tokens": 1}))).await;
    assert_eq!((remaining(&peek, "rpm"), remaining(&peek, "tpm")), (Some(2), Some(999)), "{}", peek.body);
    server.stop().await;
}

fn reset_after_ms(reply: &Reply, rule: &str) -> Option<u64> {
    let body = reply.json();
    body["limits"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == rule)
        .map(|l| l["reset_after_ms"].as_u64().unwrap())
}

/// Milliseconds of a Go duration of hours, minutes and (fractional) seconds, or of `<n>ms`.
fn go_duration_ms(text: &str) -> u64 {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse().unwrap();
    }
    let (mut total, mut number) = (0u64, String::new());
    for c in text.chars() {
        match c {
            'h' => total += number.parse::<u64>().unwrap() * 3_600_000,
            'm' => total += number.parse::<u64>().unwrap() * 60_000,
            's' => total += (number.parse::<f64>().unwrap() * 1000.0).round() as u64,
            _ => {
                number.push(c);
                continue;
            }
        }
        number.clear();
    }
    total
}

/// `headers: [ietf, openai]`: the OpenAI-style headers of the requests and the tokens rules on a
/// 200 and on a 429, beside the IETF ones.
async fn openai_headers(server: &TestServer) {
    let first = server.post("/v1/check", body(json!({"requests": 1, "tokens": 700}))).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-ratelimit-limit-requests"), Some("3"));
    assert_eq!(first.header("x-ratelimit-remaining-requests"), Some("2"));
    assert_eq!(first.header("x-ratelimit-limit-tokens"), Some("1000"));
    assert_eq!(first.header("x-ratelimit-remaining-tokens"), Some("300"));
    // The resets are the rules' own, as Go durations.
    for (name, rule) in [("x-ratelimit-reset-requests", "rpm"), ("x-ratelimit-reset-tokens", "tpm")] {
        let reset = first.header(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(
            Some(go_duration_ms(reset)),
            reset_after_ms(&first, rule),
            "{name}: {reset}: {}",
            first.body
        );
        assert!(
            reset.contains('m') && reset.ends_with('s'),
            "over a minute, in minutes and seconds: {reset}"
        );
    }
    assert!(first.header("ratelimit").is_some(), "ietf too");
    assert_eq!(first.header("x-ratelimit-limit"), None, "no legacy headers");

    let denied = server.post("/v1/check", body(json!({"requests": 1, "tokens": 700}))).await;
    assert_eq!(denied.status, 429, "{}", denied.body);
    assert_eq!(denied.header("x-ratelimit-remaining-tokens"), Some("300"), "the denying rule, unconsumed");
    assert_eq!(denied.header("x-ratelimit-limit-tokens"), Some("1000"));
    assert_eq!(denied.header("x-ratelimit-remaining-requests"), Some("2"), "no request counted");
    let reset = denied.header("x-ratelimit-reset-tokens").unwrap();
    assert_eq!(Some(go_duration_ms(reset)), reset_after_ms(&denied, "tpm"), "{reset}: {}", denied.body);
    assert!(denied.header("retry-after").is_some());

    // A call of requests only: no token rule applies, so no token headers.
    let plain = server.post("/v1/check", json!({"descriptors": {"tenant": "t1"}}).to_string()).await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert_eq!(plain.header("x-ratelimit-remaining-requests"), Some("1"));
    assert_eq!(plain.header("x-ratelimit-limit-tokens"), None);
}

#[tokio::test]
async fn openai_headers_on_200_and_429_on_memory() {
    let config = format!("headers: [ietf, openai]\n{}", rpm_and_tpm("{ kind: memory }"));
    let server = TestServer::start(parse(&config)).await;
    openai_headers(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_headers_on_200_and_429_on_redis() {
    let redis = tokio::task::spawn_blocking(RedisServer::start).await.unwrap();
    let store = format!("{{ kind: redis, url: \"{}\", deadline: 1s }}", redis.url());
    let server = TestServer::start(parse(&format!("headers: [ietf, openai]\n{}", rpm_and_tpm(&store)))).await;
    openai_headers(&server).await;
    server.stop().await;
}
