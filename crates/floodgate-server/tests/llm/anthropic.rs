//! Anthropic's Messages API on an `llm: {api: anthropic}` route, against the project's fake
//! upstream speaking Anthropic's wire format: admission by reservation and exact usage, `cap`
//! rewriting `max_tokens`, `deny` with its exact wait, streams metered as they flow, a client gone
//! mid-stream, `cut` and `finish`, dollars with cache reads and writes, `degrade_to`, fallback and
//! cool-off on the provider's 429, `action: delay`, and bad input — each refusal in Anthropic's
//! error format (`{"type": "error", "error": {"type", "message"}}`).

use std::time::Duration;

use fake_openai::{Encoding, FakeOpenAi};
use http::Method;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::{Floodgate, Reply, config, upstream};

pub(crate) const PATH: &str = "/v1/messages";

/// The route's settings: Anthropic's API, its models counted with o200k (so that the tests know
/// the estimate: the fake upstream counts the same way), and `more`.
pub(crate) fn llm(more: &str) -> String {
    format!(r#"{{ api: anthropic, tokenizers: {{ "claude-*": o200k }}{more} }}"#)
}

/// A message to `model` saying `text`, generating at most `max_tokens`.
pub(crate) fn message(model: &str, text: &str, max_tokens: u64) -> Value {
    json!({"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}]})
}

/// The prompt of `body` as the gateway (with o200k) and the fake upstream count it.
pub(crate) fn prompt(body: &Value) -> u64 {
    fake_openai::anthropic_prompt_tokens(body, Encoding::O200k)
}

/// What an Anthropic SDK sends beside the body.
const SDK_HEADERS: [(&str, &str); 2] = [("x-api-key", "sk-ant-test"), ("anthropic-version", "2023-06-01")];

async fn send(gw: &Floodgate, tenant: &str, more: &[(&str, &str)], body: &Value) -> Reply {
    let mut headers = SDK_HEADERS.to_vec();
    headers.extend_from_slice(more);
    gw.post(PATH, tenant, &headers, body).await
}

/// The `type` of each event of a stream.
fn types(reply: &Reply) -> Vec<String> {
    reply
        .events()
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap()["type"].as_str().unwrap().to_owned())
        .collect()
}

/// The text of each `text_delta`.
fn deltas(reply: &Reply) -> Vec<String> {
    reply
        .events()
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter(|v| v["type"] == "content_block_delta")
        .map(|v| v["delta"]["text"].as_str().unwrap().to_owned())
        .collect()
}

/// An Anthropic error body of `kind`.
fn assert_error(reply: &Reply, status: u16, kind: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["type"], "error", "{}", reply.body);
    assert_eq!(body["error"]["type"], kind, "{}", reply.body);
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", reply.body);
}

fn remaining(reply: &Reply) -> u64 {
    reply.header("x-ratelimit-remaining-tokens").unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_message_reserves_its_prompt_and_max_tokens_and_is_charged_its_usage() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, &llm("")));
    let body = message("claude-sonnet-4-5", "Tell me about rivers.", 50);
    let p = prompt(&body);
    let reply = send(&gw, "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = reply.json();
    assert_eq!(answer["type"], "message");
    assert_eq!(answer["usage"]["input_tokens"], p, "the gateway counts the prompt as the upstream does");
    assert_eq!(answer["usage"]["output_tokens"], 16);
    assert_eq!(answer["stop_reason"], "end_turn");
    assert_eq!(remaining(&reply), 10_000 - p - 50, "reserved: the prompt and max_tokens");
    assert_eq!(reply.header("floodgate-allowance"), Some("50"));
    gw.used_becomes("tenant-tokens", "t1", p + 16).await;
    assert_eq!(gw.used("tenant-requests", "t1").await, 1);
    let seen = &fake.seen()[0];
    assert_eq!(seen.body["max_tokens"], 50);
    assert_eq!(seen.headers["x-api-key"], "sk-ant-test", "the provider's headers go through");
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");

    // count_tokens is proxied, not metered: no tokens reserved or charged.
    let count = json!({"model": "claude-sonnet-4-5", "messages": body["messages"]});
    let reply = gw.post("/v1/messages/count_tokens", "t1", &SDK_HEADERS, &count).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json(), json!({"input_tokens": p}));
    assert!(reply.header("floodgate-allowance").is_none());
    assert_eq!(gw.used("tenant-tokens", "t1").await, p + 16);
}

#[tokio::test]
async fn without_a_tokenizer_the_prompt_is_estimated_at_chars_per_token_and_the_usage_corrects_it() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, "{ api: anthropic }"));
    let text = "An estimate: Anthropic publishes no tokenizer.";
    let body = message("claude-sonnet-4-5", text, 40);
    let reply = send(&gw, "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // 3 tokens for the message, one per 3 characters of its text, rounded up.
    let estimate = 3 + (text.chars().count() as u64).div_ceil(3);
    assert_eq!(remaining(&reply), 10_000 - estimate - 40);
    gw.used_becomes("tenant-tokens", "t1", prompt(&body) + 16).await;
}

#[tokio::test]
async fn cap_rewrites_max_tokens_to_what_is_left_then_refuses_with_the_exact_wait() {
    let fake = upstream(1000).await;
    let gw = Floodgate::serve(&config(&fake.url(), 300, &llm(", allowance: { min_completion_tokens: 10 }")));
    let body = message("claude-sonnet-4-5", "Write a long story.", 1000);
    let p = prompt(&body);
    let reply = send(&gw, "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let granted = 300 - p;
    assert_eq!(reply.header("floodgate-allowance").unwrap(), format!("{granted}; capped-from=1000"));
    assert_eq!(fake.seen()[0].body["max_tokens"], granted, "the upstream saw the capped max_tokens");
    assert_eq!(reply.json()["usage"]["output_tokens"], granted);
    assert_eq!(reply.json()["stop_reason"], "max_tokens");
    gw.used_becomes("tenant-tokens", "t1", 300).await;

    let reply = send(&gw, "t1", &[], &body).await;
    assert_error(&reply, 429, "rate_limit_error");
    let ms: u64 = reply.header("retry-after-ms").unwrap().parse().unwrap();
    let secs: u64 = reply.header("retry-after").unwrap().parse().unwrap();
    assert!(ms > 0 && secs == ms.div_ceil(1000), "{ms} ms, {secs} s");
    assert_eq!(fake.seen().len(), 1, "the refused call never reached the upstream");
}

#[tokio::test]
async fn deny_refuses_what_the_budget_cannot_hold_and_a_request_no_budget_holds_is_a_400() {
    let fake = upstream(400).await;
    let gw = Floodgate::serve(&config(&fake.url(), 500, &llm(", allowance: { when_short: deny }")));
    let body = message("claude-sonnet-4-5", "Hi", 400);
    assert_eq!(send(&gw, "t1", &[], &body).await.status, 200);
    let reply = send(&gw, "t1", &[], &body).await;
    assert_error(&reply, 429, "rate_limit_error");
    let ms: u64 = reply.header("retry-after-ms").unwrap().parse().unwrap();
    assert_eq!(reply.header("retry-after").unwrap(), ms.div_ceil(1000).to_string());
    assert_eq!(fake.seen().len(), 1);
    let reply = send(&gw, "t2", &[], &message("claude-sonnet-4-5", "Hi", 600)).await;
    assert_error(&reply, 400, "invalid_request_error");
    assert!(reply.json()["error"]["message"].as_str().unwrap().contains("more than limit"), "{}", reply.body);
}

#[tokio::test]
async fn bad_input_is_an_anthropic_error_never_a_free_pass() {
    let fake = upstream(16).await;
    let priced = llm(r#", prices: { "claude-sonnet-*": { input: 3, output: 15 } }"#);
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, &priced));
    let reply = gw
        .send(
            gw.gateway,
            Method::POST,
            PATH,
            &[("x-tenant-id", "t1"), SDK_HEADERS[0], SDK_HEADERS[1]],
            "{not json".into(),
        )
        .await;
    assert_error(&reply, 400, "invalid_request_error");
    let no_max = json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hi"}]});
    let reply = send(&gw, "t1", &[], &no_max).await;
    assert_error(&reply, 400, "invalid_request_error");
    assert!(reply.json()["error"]["message"].as_str().unwrap().starts_with("max_tokens: Field required"));
    for max_tokens in [json!(-5), json!(0), json!(1.5), json!("10"), json!(1_000_000_000u64)] {
        let mut body = no_max.clone();
        body["max_tokens"] = max_tokens.clone();
        let reply = send(&gw, "t1", &[], &body).await;
        assert_error(&reply, 400, "invalid_request_error");
        assert!(reply.json()["error"]["message"].as_str().unwrap().contains("max_tokens"), "{max_tokens}");
    }
    let reply = send(&gw, "t1", &[], &message("claude-unknown-1", "Hi", 10)).await;
    assert_error(&reply, 400, "invalid_request_error");
    assert!(reply.json()["error"]["message"].as_str().unwrap().contains("has no price"), "{}", reply.body);
    assert!(fake.seen().is_empty(), "nothing reached the upstream");
    assert_eq!(gw.used("tenant-tokens", "t1").await, 0);
}

#[tokio::test]
async fn a_stream_is_counted_as_it_flows_and_charged_its_final_usage() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, &llm("")));
    let mut body = message("claude-sonnet-4-5", "Stream me a sentence.", 64);
    body["stream"] = json!(true);
    let p = prompt(&body);
    let reply = send(&gw, "t1", &[("x-fake-cached", "4")], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.header("content-type").unwrap().starts_with("text/event-stream"));
    let types = types(&reply);
    assert_eq!(types[..3], ["message_start", "content_block_start", "ping"]);
    assert_eq!(types[types.len() - 3..], ["content_block_stop", "message_delta", "message_stop"]);
    let words = deltas(&reply);
    assert_eq!(words.len(), 16);
    assert!(words.windows(2).all(|w| w[0] != w[1]), "the text varies: {words:?}");
    assert!(reply.body.starts_with("event: message_start\ndata: "), "{}", reply.body);
    // The cache read is part of the prompt: input_tokens + cache_read_input_tokens.
    gw.used_becomes("tenant-tokens", "t1", p + 16).await;
}

#[tokio::test]
async fn a_client_gone_mid_stream_is_charged_what_was_generated_and_the_rest_goes_back() {
    let fake = upstream(1000).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, &llm("")));
    let mut body = message("claude-sonnet-4-5", "A long one.", 1000);
    body["stream"] = json!(true);
    let p = prompt(&body);
    let mut headers =
        vec![("content-type", "application/json"), ("x-tenant-id", "t1"), ("x-fake-pause-after", "5")];
    headers.extend_from_slice(&SDK_HEADERS);
    let response = gw.request(gw.gateway, Method::POST, PATH, &headers, body.to_string()).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.into_body();
    let mut seen = String::new();
    while seen.matches("\"text_delta\"").count() < 5 {
        let frame = stream.frame().await.expect("more of the stream").unwrap();
        if let Some(data) = frame.data_ref() {
            seen.push_str(std::str::from_utf8(data).unwrap());
        }
    }
    assert!(fake.wait(Duration::from_secs(10), |f| f.paused() == 1).await);
    assert_eq!(gw.used("tenant-tokens", "t1").await, p + 1000, "the whole allowance is held meanwhile");
    drop(stream);
    fake.resume();
    assert!(fake.wait(Duration::from_secs(10), |f| f.outcomes().len() == 1).await);
    let outcome = &fake.outcomes()[0];
    assert!(!outcome.whole && outcome.sent < 1000, "the upstream was let go: {outcome:?}");
    let mut used = 0;
    for _ in 0..400 {
        used = gw.used("tenant-tokens", "t1").await;
        if used < p + 1000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(used >= p + 5 && used <= p + outcome.sent, "used {used}, prompt {p}, {outcome:?}");
}

#[tokio::test]
async fn cut_ends_a_stream_at_its_allowance_with_an_anthropic_error_event() {
    let fake = upstream(1000).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, &llm(", over_budget_mid_stream: cut")));
    let mut body = message("claude-sonnet-4-5", "Go on.", 20);
    body["stream"] = json!(true);
    let p = prompt(&body);
    let reply = send(&gw, "t1", &[("x-fake-overshoot", "10")], &body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(deltas(&reply).len(), 20, "nothing past the allowance is forwarded");
    let last = reply.body.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: error\ndata: "), "{}", reply.body);
    let error: Value =
        serde_json::from_str(last.lines().nth(1).unwrap().strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "rate_limit_error");
    assert!(!reply.body.contains("message_stop"));
    gw.used_becomes("tenant-tokens", "t1", p + 21).await;
}

#[tokio::test]
async fn finish_lets_a_stream_end_and_charges_what_it_generated_past_its_reservation() {
    let fake = upstream(1000).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, &llm(", over_budget_mid_stream: finish")));
    let mut body = message("claude-sonnet-4-5", "Go on.", 20);
    body["stream"] = json!(true);
    let p = prompt(&body);
    let reply = send(&gw, "t1", &[("x-fake-overshoot", "10")], &body).await;
    assert_eq!(deltas(&reply).len(), 30);
    assert_eq!(types(&reply).last().map(String::as_str), Some("message_stop"));
    gw.used_becomes("tenant-tokens", "t1", p + 30).await;
}

#[tokio::test]
async fn answers_without_usage_and_streams_the_provider_fails_are_charged_the_estimate() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, &llm("")));
    let body = message("claude-sonnet-4-5", "No usage, please.", 100);
    let p = prompt(&body);
    let reply = send(&gw, "t1", &[("x-fake-no-usage", "1")], &body).await;
    assert!(reply.json().get("usage").is_none());
    gw.used_becomes("tenant-tokens", "t1", p + 16).await;
    let mut stream = body.clone();
    stream["stream"] = json!(true);
    let reply = send(&gw, "t1", &[("x-fake-no-usage", "1")], &stream).await;
    assert_eq!(deltas(&reply).len(), 16);
    gw.used_becomes("tenant-tokens", "t1", 2 * (p + 16)).await;
    // Overloaded after 4 deltas: Anthropic's error event passes to the client; the input its
    // message_start reported and the 4 deltas are charged.
    let reply = send(&gw, "t2", &[("x-fake-error-after", "4"), ("x-fake-cached", "2")], &stream).await;
    assert_eq!(deltas(&reply).len(), 4);
    assert!(reply.body.contains("\"overloaded_error\""), "{}", reply.body);
    gw.used_becomes("tenant-tokens", "t2", p + 4).await;
}

/// Per tenant a spend of `micros` µ$ an hour, Anthropic's prices (cache reads and writes), and a
/// plan past its one call a month switched to the smaller model.
fn priced(upstream: &str, micros: u64) -> String {
    format!(
        r#"
headers: [ietf, openai]
descriptors: [model]
rules:
  - name: monthly-calls
    key: [tenant]
    algorithm: quota
    period: month
    limit: {{ by: plan, values: {{ free: 1, pro: 1000 }} }}
    overage:
      free: {{ degrade_to: claude-haiku-4-5 }}
  - name: tenant-spend
    key: [tenant]
    algorithm: fixed_window
    limit: {micros}
    window: 1h
    cost: usd_micros
  - name: tenant-tokens
    key: [tenant]
    algorithm: fixed_window
    limit: 1000000
    window: 1h
    cost: tokens
gateway:
  identity:
    headers: {{ tenant: x-tenant-id, plan: x-plan }}
  routes:
    - name: llm
      match: {{ path: "/v1/{{*rest}}", methods: [POST] }}
      upstream: {upstream}
      llm:
        api: anthropic
        tokenizers: {{ "claude-*": o200k }}
        allowance: {{ min_completion_tokens: 10 }}
        prices:
          claude-sonnet-4-5: {{ input: 3, cached_input: 0.3, cache_write: 3.75, output: 15 }}
          claude-haiku-4-5: {{ input: 1, cached_input: 0.1, cache_write: 1.25, output: 5 }}
"#
    )
}

#[tokio::test]
async fn dollars_price_cache_reads_and_writes_and_a_plan_past_its_limit_degrades_the_model() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&priced(&fake.url(), 1_000_000));
    let body = message("claude-sonnet-4-5", "What does a river cost?", 100);
    let p = prompt(&body);
    let pro = [("x-plan", "pro"), ("x-fake-cached", "2"), ("x-fake-cache-write", "3")];
    let reply = send(&gw, "t1", &pro, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let usage = &reply.json()["usage"];
    assert_eq!(
        (usage["input_tokens"].as_u64(), usage["cache_read_input_tokens"].as_u64()),
        (Some(p - 5), Some(2))
    );
    assert_eq!(usage["cache_creation_input_tokens"], 3);
    let spent = ((p - 5) as f64 * 3.0 + 2.0 * 0.3 + 3.0 * 3.75 + 16.0 * 15.0).ceil() as u64;
    gw.used_becomes("tenant-spend", "t1", spent).await;
    assert_eq!(gw.used("tenant-tokens", "t1").await, p + 16, "cache reads and writes count as prompt");

    // A free tenant's second call of the month goes to the smaller model, priced as it.
    let free = [("x-plan", "free")];
    assert_eq!(send(&gw, "t2", &free, &body).await.status, 200);
    let reply = send(&gw, "t2", &free, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("floodgate-degrade"), Some("claude-haiku-4-5"));
    assert_eq!(fake.seen()[2].body["model"], "claude-haiku-4-5");
    let big = (p as f64 * 3.0 + 16.0 * 15.0).ceil() as u64;
    let small = (p as f64 * 1.0 + 16.0 * 5.0).ceil() as u64;
    gw.used_becomes("tenant-spend", "t2", big + small).await;
}

#[tokio::test]
async fn the_allowance_is_capped_to_what_the_money_left_buys() {
    let fake = upstream(1000).await;
    let gw = Floodgate::serve(&priced(&fake.url(), 1000));
    let body = message("claude-sonnet-4-5", "Spend it all.", 500);
    let p = prompt(&body);
    let reply = send(&gw, "t1", &[("x-plan", "pro")], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let granted = (1000 - p * 3) / 15;
    assert_eq!(reply.header("floodgate-allowance").unwrap(), format!("{granted}; capped-from=500"));
    assert_eq!(fake.seen()[0].body["max_tokens"], granted);
    let reply = send(&gw, "t1", &[("x-plan", "pro")], &body).await;
    assert_error(&reply, 429, "rate_limit_error");
}

#[tokio::test]
async fn a_provider_429_hands_the_call_to_the_next_upstream_and_cools_the_first_off() {
    let (a, b) = (upstream(16).await, upstream(16).await);
    // Anthropic's 429 says its wait in whole seconds (`retry-after: 60`).
    a.answer_with(Some((429, 60_000)));
    let yaml = config("unused", 10_000, &llm(&format!(", upstreams: [ \"{}\", \"{}\" ]", a.url(), b.url())))
        .replace("      upstream: unused\n", "");
    let gw = Floodgate::serve(&yaml);
    let body = message("claude-sonnet-4-5", "Which upstream?", 50);
    let p = prompt(&body);
    for n in 1..=3 {
        let reply = send(&gw, "t1", &[], &body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        // Asked once; then skipped for the minute it asked, without being called.
        assert_eq!((a.seen().len(), b.seen().len()), (1, n));
        gw.used_becomes("tenant-tokens", "t1", n as u64 * (p + 16)).await;
    }
    // The last upstream's 429 is the client's, in Anthropic's format, its reservation given back.
    b.answer_with(Some((429, 2000)));
    let reply = send(&gw, "t2", &[], &body).await;
    assert_error(&reply, 429, "rate_limit_error");
    assert_eq!(reply.header("retry-after"), Some("2"));
    gw.used_becomes("tenant-tokens", "t2", 0).await;
}

#[tokio::test]
async fn a_call_the_budget_denies_under_action_delay_waits_for_room() {
    let fake: FakeOpenAi = upstream(16).await;
    let body = message("claude-sonnet-4-5", "call", 16);
    let one_call = prompt(&body) + 16;
    // One call's tokens in any 2 s (a sliding log), `action: delay`.
    let yaml = format!(
        r#"
headers: [ietf, openai]
rules:
  - name: tenant-tokens
    key: [tenant]
    algorithm: sliding_log
    limit: {one_call}
    window: 2s
    cost: tokens
    action: delay
    max_wait: 30s
gateway:
  identity:
    headers: {{ tenant: x-tenant-id }}
  routes:
    - name: llm
      match: {{ path: "/v1/{{*rest}}", methods: [POST] }}
      upstream: {url}
      llm: {llm}
"#,
        url = fake.url(),
        llm = llm("")
    );
    let gw = Floodgate::serve(&yaml);
    let first = send(&gw, "t1", &[], &body).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-ratelimit-remaining-tokens"), Some("0"));
    let second = send(&gw, "t1", &[], &body).await;
    assert_eq!(second.status, 200, "waited for room rather than a 429: {}", second.body);
    assert_eq!(second.json()["usage"]["output_tokens"], 16);
    assert_eq!(fake.seen().len(), 2);
    assert_eq!(gw.series(r#"floodgate_gateway_delayed_total{result="passed"}"#).await, Some(1.0));
}
