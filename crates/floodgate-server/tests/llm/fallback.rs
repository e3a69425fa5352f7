//! Fallback across upstreams: a call that its first upstream refuses (429, 5xx), cannot take
//! (no room in its quota rule, breaker open) or never answers goes to the next, its reservation
//! carried over and charged once; a provider's 429 spends its quota rule so the next calls skip it,
//! and cools the upstream off for the wait it asked.

use serde_json::json;

use super::{Floodgate, chat, prompt_of, upstream};

/// A tenant budget of 10 000 tokens; the first upstream's quota, `provisioned`, `quota` tokens an
/// hour; two upstreams in order.
fn config(first: &str, second: &str, quota: u64) -> String {
    format!(
        r#"
rules:
  - name: tenant-tokens
    key: [tenant]
    algorithm: fixed_window
    limit: 10000
    window: 1h
    cost: tokens
  - name: provisioned
    key: [global]
    algorithm: fixed_window
    limit: {quota}
    window: 1h
    cost: tokens
gateway:
  identity:
    headers: {{ tenant: x-tenant-id }}
  routes:
    - name: llm
      match: {{ path: "/v1/{{*rest}}", methods: [POST] }}
      timeouts: {{ connect: 1s }}
      llm:
        api: openai
        upstreams:
          - {{ url: "{first}", quota_rule: provisioned }}
          - {{ url: "{second}" }}
"#
    )
}

fn call() -> serde_json::Value {
    let mut body = chat("gpt-4o-mini", "Which upstream?");
    body["max_tokens"] = json!(50);
    body
}

#[tokio::test]
async fn the_first_upstream_serves_while_its_quota_has_room_and_is_charged_with_the_tenant() {
    let (a, b) = (upstream(16).await, upstream(16).await);
    let gw = Floodgate::serve(&config(&a.url(), &b.url(), 1000));
    let p = prompt_of("/v1/chat/completions", &call());
    let reply = gw.post("/v1/chat/completions", "t1", &[], &call()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!((a.seen().len(), b.seen().len()), (1, 0));
    gw.used_becomes("tenant-tokens", "t1", p + 16).await;
    let provisioned =
        gw.send(gw.http, http::Method::GET, "/v1/usage?rule=provisioned", &[], String::new()).await;
    assert_eq!(provisioned.json()["used"], p + 16, "{}", provisioned.body);
}

#[tokio::test]
async fn a_provider_429_hands_the_call_over_and_spends_its_quota_so_the_next_calls_skip_it() {
    let (a, b) = (upstream(16).await, upstream(16).await);
    a.answer_with(Some((429, 20_000)));
    let gw = Floodgate::serve(&config(&a.url(), &b.url(), 1000));
    let p = prompt_of("/v1/chat/completions", &call());
    let reply = gw.post("/v1/chat/completions", "t1", &[], &call()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!((a.seen().len(), b.seen().len()), (1, 1));
    assert_eq!(b.seen()[0].body, a.seen()[0].body, "the same call, as admitted, to the next upstream");
    // Charged once: what the upstream that answered generated.
    gw.used_becomes("tenant-tokens", "t1", p + 16).await;
    assert!(gw.used("provisioned", "").await >= 1000, "the provider's 429 spent what its quota had left");
    // The next call skips the first upstream without asking it.
    let reply = gw.post("/v1/chat/completions", "t1", &[], &call()).await;
    assert_eq!(reply.status, 200);
    assert_eq!((a.seen().len(), b.seen().len()), (1, 2));
    gw.used_becomes("tenant-tokens", "t1", 2 * (p + 16)).await;
}

#[tokio::test]
async fn a_provider_429_cools_its_upstream_off_for_the_wait_it_asked_without_a_quota_rule() {
    let (a, b) = (upstream(16).await, upstream(16).await);
    a.answer_with(Some((429, 60_000)));
    // The first upstream has no quota rule: its 429's `retry-after-ms` is all the feedback.
    let first = format!("{{ url: \"{}\", quota_rule: provisioned }}", a.url());
    let yaml = config(&a.url(), &b.url(), 1000).replace(&first, &format!("{{ url: \"{}\" }}", a.url()));
    assert!(!yaml.contains("quota_rule"), "{yaml}");
    let gw = Floodgate::serve(&yaml);
    for n in 1..=3 {
        let reply = gw.post("/v1/chat/completions", "t1", &[], &call()).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        // Asked once; then skipped for the minute it asked, without being called.
        assert_eq!((a.seen().len(), b.seen().len()), (1, n));
    }
}

#[tokio::test]
async fn a_failing_or_unreachable_first_upstream_hands_the_call_over_and_keeps_its_quota() {
    let (a, b) = (upstream(16).await, upstream(16).await);
    a.answer_with(Some((503, 0)));
    let gw = Floodgate::serve(&config(&a.url(), &b.url(), 1000));
    let p = prompt_of("/v1/chat/completions", &call());
    let reply = gw.post("/v1/chat/completions", "t1", &[], &call()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!((a.seen().len(), b.seen().len()), (1, 1));
    gw.used_becomes("tenant-tokens", "t1", p + 16).await;
    let provisioned =
        gw.send(gw.http, http::Method::GET, "/v1/usage?rule=provisioned", &[], String::new()).await;
    assert_eq!(provisioned.json()["used"], 0, "a 5xx gives the quota back: {}", provisioned.body);

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gw = Floodgate::serve(&config(&format!("http://127.0.0.1:{port}"), &b.url(), 1000));
    let reply = gw.post("/v1/chat/completions", "t1", &[], &call()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(b.seen().len(), 2);
}

#[tokio::test]
async fn a_quota_without_room_skips_its_upstream_and_the_last_answer_is_the_clients() {
    let (a, b) = (upstream(16).await, upstream(16).await);
    // The first upstream's quota cannot hold a call of 50 tokens and its prompt.
    let gw = Floodgate::serve(&config(&a.url(), &b.url(), 40));
    let reply = gw.post("/v1/chat/completions", "t1", &[], &call()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!((a.seen().len(), b.seen().len()), (0, 1));

    // Every upstream refusing: the last one's answer is the client's, the reservation released.
    b.answer_with(Some((429, 1500)));
    let reply = gw.post("/v1/chat/completions", "t2", &[], &call()).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.header("retry-after-ms"), Some("1500"));
    gw.used_becomes("tenant-tokens", "t2", 0).await;
}

#[tokio::test]
async fn an_upstream_whose_breaker_opened_is_skipped() {
    let (a, b) = (upstream(16).await, upstream(16).await);
    a.answer_with(Some((503, 0)));
    let yaml = config(&a.url(), &b.url(), 100_000).replace(
        "      timeouts: { connect: 1s }\n",
        "      timeouts: { connect: 1s }\n      breaker: { failure_rate: 50%, min_calls: 2, window: 30s, open_for: 30s }\n",
    );
    let gw = Floodgate::serve(&yaml);
    for _ in 0..2 {
        assert_eq!(gw.post("/v1/chat/completions", "t1", &[], &call()).await.status, 200);
    }
    assert_eq!((a.seen().len(), b.seen().len()), (2, 2));
    // Two failures of two: the first upstream's breaker is open, and it is no longer asked.
    assert_eq!(gw.post("/v1/chat/completions", "t1", &[], &call()).await.status, 200);
    assert_eq!((a.seen().len(), b.seen().len()), (2, 3));
}
