//! Metering: what each answer really generated, read from its usage or counted as its chunks flow,
//! committed when it ends; streams past their allowance cut or finished; a client gone mid-stream
//! charged what was generated; the budgets' headers counting calls in flight.

use std::time::Duration;

use http::Method;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::{Floodgate, chat, config, prompt_of, upstream};

fn content_chunks(events: &[String]) -> usize {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter(|v| {
            v.pointer("/choices/0/delta/content").and_then(Value::as_str).is_some_and(|c| !c.is_empty())
        })
        .count()
}

#[tokio::test]
async fn a_stream_is_charged_when_it_ends_and_the_usage_chunk_it_did_not_ask_for_never_shows() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, "{ api: openai }"));
    let mut body = chat("gpt-4o-mini", "Stream me a sentence.");
    body["stream"] = json!(true);
    body["max_tokens"] = json!(64);
    let prompt = prompt_of("/v1/chat/completions", &body);
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.header("content-type").unwrap().starts_with("text/event-stream"));
    let events = reply.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(content_chunks(&events), 16);
    assert!(!reply.body.contains("\"usage\""), "the usage chunk and nulls are hidden: {}", reply.body);
    assert_eq!(
        fake.seen()[0].body["stream_options"]["include_usage"],
        true,
        "usage was asked of the upstream"
    );
    gw.used_becomes("tenant-tokens", "t1", prompt + 16).await;

    // A client that asked for it gets it, as the upstream sent it.
    body["stream_options"] = json!({"include_usage": true});
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    let usage: Vec<Value> = reply
        .events()
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter(|v| v["usage"].is_object())
        .collect();
    assert_eq!(usage.len(), 1, "{}", reply.body);
    assert_eq!(usage[0]["usage"]["completion_tokens"], 16);
    assert_eq!(usage[0]["choices"], json!([]));
    gw.used_becomes("tenant-tokens", "t1", 2 * (prompt + 16)).await;
}

#[tokio::test]
async fn responses_completions_and_embeddings_are_each_metered_their_way() {
    let fake = upstream(12).await;
    let gw = Floodgate::serve(&config(&fake.url(), 100_000, "{ api: openai }"));
    let mut expected = 0;

    let responses =
        json!({"model": "gpt-4.1", "input": "Say something.", "stream": true, "max_output_tokens": 40});
    let reply = gw.post("/v1/responses", "t1", &[], &responses).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.contains("event: response.completed"), "{}", reply.body);
    expected += prompt_of("/v1/responses", &responses) + 12;
    gw.used_becomes("tenant-tokens", "t1", expected).await;

    let responses = json!({"model": "gpt-4.1", "input": "Say something else."});
    let reply = gw.post("/v1/responses", "t1", &[], &responses).await;
    assert_eq!(reply.json()["usage"]["output_tokens"], 12);
    assert_eq!(fake.seen()[1].body["max_output_tokens"], 1024, "bounded at the default allowance");
    expected += prompt_of("/v1/responses", &responses) + 12;
    gw.used_becomes("tenant-tokens", "t1", expected).await;

    let completion = json!({"model": "gpt-3.5-turbo-instruct", "prompt": "Once upon a time", "stream": true});
    let reply = gw.post("/v1/completions", "t1", &[], &completion).await;
    assert_eq!(reply.events().last().map(String::as_str), Some("[DONE]"));
    expected += prompt_of("/v1/completions", &completion) + 12;
    gw.used_becomes("tenant-tokens", "t1", expected).await;

    let embeddings = json!({"model": "text-embedding-3-small", "input": ["a river of stone", "light"]});
    let reply = gw.post("/v1/embeddings", "t1", &[], &embeddings).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.header("floodgate-allowance").is_none(), "an embedding generates nothing");
    expected += prompt_of("/v1/embeddings", &embeddings);
    gw.used_becomes("tenant-tokens", "t1", expected).await;
    assert_eq!(gw.used("tenant-requests", "t1").await, 4);
}

#[tokio::test]
async fn an_answer_without_usage_is_charged_the_documented_estimate() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, "{ api: openai }"));
    let body = chat("gpt-4o", "No usage, please.");
    let prompt = prompt_of("/v1/chat/completions", &body);
    let reply = gw.post("/v1/chat/completions", "t1", &[("x-fake-no-usage", "1")], &body).await;
    assert!(reply.json().get("usage").is_none());
    // The prompt as counted at admission, and the answer's text as counted (one token a word).
    gw.used_becomes("tenant-tokens", "t1", prompt + 16).await;
    let mut stream = body.clone();
    stream["stream"] = json!(true);
    let reply = gw.post("/v1/chat/completions", "t1", &[("x-fake-no-usage", "1")], &stream).await;
    assert_eq!(content_chunks(&reply.events()), 16);
    gw.used_becomes("tenant-tokens", "t1", 2 * (prompt + 16)).await;
}

#[tokio::test]
async fn a_client_gone_mid_stream_is_charged_what_was_generated_and_the_rest_goes_back() {
    let fake = upstream(1000).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, "{ api: openai }"));
    let mut body = chat("gpt-4o-mini", "A long one.");
    body["stream"] = json!(true);
    body["max_tokens"] = json!(1000);
    let prompt = prompt_of("/v1/chat/completions", &body);
    let headers = [("content-type", "application/json"), ("x-tenant-id", "t1"), ("x-fake-pause-after", "5")];
    let response =
        gw.request(gw.gateway, Method::POST, "/v1/chat/completions", &headers, body.to_string()).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.into_body();
    let mut seen = String::new();
    while seen.matches("\"content\":\" ").count() < 5 {
        let frame = stream.frame().await.expect("more of the stream").unwrap();
        if let Some(data) = frame.data_ref() {
            seen.push_str(std::str::from_utf8(data).unwrap());
        }
    }
    assert!(fake.wait(Duration::from_secs(10), |f| f.paused() == 1).await);
    assert_eq!(gw.used("tenant-tokens", "t1").await, prompt + 1000, "the whole allowance is held meanwhile");
    drop(stream);
    fake.resume();
    assert!(fake.wait(Duration::from_secs(10), |f| f.outcomes().len() == 1).await);
    let outcome = &fake.outcomes()[0];
    assert!(!outcome.whole && outcome.sent < 1000, "the upstream was let go: {outcome:?}");
    // What was generated is charged — what the client read, and what was on its way when it left;
    // the rest of the allowance went back.
    let mut used = 0;
    for _ in 0..400 {
        used = gw.used("tenant-tokens", "t1").await;
        if used < prompt + 1000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(used >= prompt + 5 && used <= prompt + outcome.sent, "used {used}, prompt {prompt}, {outcome:?}");
}

#[tokio::test]
async fn cut_stops_a_stream_at_its_allowance_with_an_error_event() {
    let fake = upstream(1000).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, "{ api: openai, over_budget_mid_stream: cut }"));
    let mut body = chat("gpt-4o-mini", "Go on.");
    body["stream"] = json!(true);
    body["max_tokens"] = json!(20);
    let prompt = prompt_of("/v1/chat/completions", &body);
    // An upstream that ignores max_tokens and generates 10 more.
    let reply = gw.post("/v1/chat/completions", "t1", &[("x-fake-overshoot", "10")], &body).await;
    assert_eq!(reply.status, 200);
    let events = reply.events();
    assert_eq!(content_chunks(&events), 20, "nothing past the allowance is forwarded");
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "rate_limit_exceeded", "{}", reply.body);
    assert!(!reply.body.contains("[DONE]"));
    // The chunk that crossed was generated: charged.
    gw.used_becomes("tenant-tokens", "t1", prompt + 21).await;
}

#[tokio::test]
async fn finish_lets_a_stream_end_and_charges_what_it_generated_past_its_reservation() {
    let fake = upstream(1000).await;
    let gw =
        Floodgate::serve(&config(&fake.url(), 10_000, "{ api: openai, over_budget_mid_stream: finish }"));
    let mut body = chat("gpt-4o-mini", "Go on.");
    body["stream"] = json!(true);
    body["max_tokens"] = json!(20);
    let prompt = prompt_of("/v1/chat/completions", &body);
    let reply = gw.post("/v1/chat/completions", "t1", &[("x-fake-overshoot", "10")], &body).await;
    assert_eq!(content_chunks(&reply.events()), 30);
    assert_eq!(reply.events().last().map(String::as_str), Some("[DONE]"));
    gw.used_becomes("tenant-tokens", "t1", prompt + 30).await;
}

#[tokio::test]
async fn remaining_tokens_go_down_when_a_stream_is_admitted_not_when_it_ends() {
    let fake = upstream(10).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, "{ api: openai }"));
    let mut first = chat("gpt-4o-mini", "First.");
    first["stream"] = json!(true);
    first["max_tokens"] = json!(100);
    let p1 = prompt_of("/v1/chat/completions", &first);
    let headers = [("content-type", "application/json"), ("x-tenant-id", "t1"), ("x-fake-pause-after", "2")];
    let response =
        gw.request(gw.gateway, Method::POST, "/v1/chat/completions", &headers, first.to_string()).await;
    let remaining =
        |h: &http::HeaderMap| -> u64 { h["x-ratelimit-remaining-tokens"].to_str().unwrap().parse().unwrap() };
    assert_eq!(remaining(response.headers()), 10_000 - p1 - 100);
    assert!(fake.wait(Duration::from_secs(10), |f| f.paused() == 1).await);

    // While the first streams, a second call sees what the first holds.
    let mut second = chat("gpt-4o-mini", "Second.");
    second["max_tokens"] = json!(50);
    let p2 = prompt_of("/v1/chat/completions", &second);
    let reply = gw.post("/v1/chat/completions", "t1", &[], &second).await;
    assert_eq!(remaining(&reply.headers), 10_000 - p1 - 100 - p2 - 50);

    fake.resume();
    let rest = response.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&rest).contains("[DONE]"));
    gw.used_becomes("tenant-tokens", "t1", p1 + 10 + p2 + 10).await;
}

#[tokio::test]
async fn a_stream_the_upstream_breaks_is_charged_what_it_generated() {
    let fake = upstream(100).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, "{ api: openai }"));
    let mut body = chat("gpt-4o-mini", "Break halfway.");
    body["stream"] = json!(true);
    body["max_tokens"] = json!(100);
    let prompt = prompt_of("/v1/chat/completions", &body);
    let headers = [("content-type", "application/json"), ("x-tenant-id", "t1"), ("x-fake-fail-after", "7")];
    let response =
        gw.request(gw.gateway, Method::POST, "/v1/chat/completions", &headers, body.to_string()).await;
    assert_eq!(response.status(), 200);
    let read = response.into_body().collect().await;
    assert!(read.is_err(), "the client sees the stream break, as the upstream broke it");
    // No usage came: the prompt as counted, and the 7 tokens that flowed.
    gw.used_becomes("tenant-tokens", "t1", prompt + 7).await;
}
