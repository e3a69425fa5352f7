//! Admission: the prompt and the completion allowance reserved on the token budget with the
//! request rules; the allowance capped to what is left, or refused with the exact wait; bad input
//! refused in OpenAI's format, never passed free; an upstream's refusal gives everything back.

use serde_json::json;

use super::{Floodgate, chat, config, prompt_of, upstream};

#[tokio::test]
async fn a_call_reserves_its_prompt_and_allowance_and_is_charged_its_usage() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, "{ api: openai }"));
    let mut body = chat("gpt-4o-mini", "Tell me about rivers.");
    body["max_tokens"] = json!(50);
    let prompt = prompt_of("/v1/chat/completions", &body);
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = reply.json();
    assert_eq!(
        answer["usage"]["prompt_tokens"], prompt,
        "the gateway counts the prompt as the upstream does"
    );
    assert_eq!(answer["usage"]["completion_tokens"], 16);
    // Remaining at admission: what the reservation held (prompt + max_tokens), not what it used.
    let remaining: u64 = reply.header("x-ratelimit-remaining-tokens").unwrap().parse().unwrap();
    assert_eq!(remaining, 10_000 - prompt - 50);
    assert_eq!(reply.header("x-ratelimit-remaining-requests"), Some("999"));
    assert_eq!(reply.header("floodgate-allowance"), Some("50"));
    // Once the answer ended: its usage, the rest given back.
    gw.used_becomes("tenant-tokens", "t1", prompt + 16).await;
    assert_eq!(gw.used("tenant-requests", "t1").await, 1);
    assert_eq!(fake.seen()[0].body["max_tokens"], 50);
}

#[tokio::test]
async fn a_request_without_a_bound_reserves_the_default_and_is_bounded_by_it() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(
        &fake.url(),
        10_000,
        "{ api: openai, allowance: { default_max_tokens: 200 } }",
    ));
    let body = chat("gpt-4o", "Hello");
    let prompt = prompt_of("/v1/chat/completions", &body);
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-ratelimit-remaining-tokens").unwrap(), (10_000 - prompt - 200).to_string());
    assert_eq!(fake.seen()[0].body["max_tokens"], 200, "the upstream is told the allowance reserved");
    // A reasoning model is bounded with the field it takes.
    let reply = gw.post("/v1/chat/completions", "t1", &[], &chat("o3-mini", "Hello")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(fake.seen()[1].body["max_completion_tokens"], 200);
    assert!(fake.seen()[1].body.get("max_tokens").is_none());
}

#[tokio::test]
async fn cap_rewrites_the_allowance_to_what_is_left_and_says_so() {
    let fake = upstream(1000).await;
    let llm = "{ api: openai, allowance: { min_completion_tokens: 10, when_short: cap } }";
    let gw = Floodgate::serve(&config(&fake.url(), 300, llm));
    let mut body = chat("gpt-4o-mini", "Write a long story.");
    body["max_tokens"] = json!(1000);
    let prompt = prompt_of("/v1/chat/completions", &body);
    // 1000 can never fit a budget of 300: capped to what the budget grants.
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let granted = 300 - prompt;
    assert_eq!(reply.header("floodgate-allowance").unwrap(), format!("{granted}; capped-from=1000"));
    assert_eq!(fake.seen()[0].body["max_tokens"], granted, "the upstream saw the capped max_tokens");
    assert_eq!(reply.json()["usage"]["completion_tokens"], granted);
    assert_eq!(reply.json()["choices"][0]["finish_reason"], "length");
    gw.used_becomes("tenant-tokens", "t1", 300).await;

    // Nothing left: refused, with the exact wait for the prompt and the least allowance.
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(reply.json()["error"]["type"], "tokens");
    let ms: u64 = reply.header("retry-after-ms").unwrap().parse().unwrap();
    let secs: u64 = reply.header("retry-after").unwrap().parse().unwrap();
    assert!(ms > 0 && secs == ms.div_ceil(1000), "{ms} ms, {secs} s");
    assert_eq!(fake.seen().len(), 1, "the refused call never reached the upstream");
}

#[tokio::test]
async fn cap_takes_what_is_left_after_other_calls() {
    let fake = upstream(200).await;
    let llm = "{ api: openai, allowance: { min_completion_tokens: 10, when_short: cap } }";
    let gw = Floodgate::serve(&config(&fake.url(), 400, llm));
    let mut body = chat("gpt-4o-mini", "Hi");
    body["max_tokens"] = json!(300);
    let prompt = prompt_of("/v1/chat/completions", &body);
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("floodgate-allowance"), Some("300"));
    gw.used_becomes("tenant-tokens", "t1", prompt + 200).await;
    let left = 400 - (prompt + 200);
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("floodgate-allowance").unwrap(), format!("{}; capped-from=300", left - prompt));
    assert_eq!(fake.seen()[1].body["max_tokens"], left - prompt);
}

#[tokio::test]
async fn deny_refuses_a_call_the_budget_cannot_hold_with_its_exact_wait() {
    let fake = upstream(400).await;
    let llm = "{ api: openai, allowance: { when_short: deny } }";
    let gw = Floodgate::serve(&config(&fake.url(), 500, llm));
    let mut body = chat("gpt-4o-mini", "Hi");
    body["max_tokens"] = json!(400);
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert!(reply.header("retry-after-ms").is_some() && reply.header("retry-after").is_some());
    assert_eq!(reply.header("x-ratelimit-limit-tokens"), Some("500"));
    assert_eq!(fake.seen().len(), 1);
    // More than the budget could ever hold: a clear 400, not a wait that never ends.
    body["max_tokens"] = json!(600);
    let reply = gw.post("/v1/chat/completions", "t2", &[], &body).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "budget_exceeded");
    assert_eq!(gw.used("tenant-requests", "t2").await, 0, "nothing counted");
}

#[tokio::test]
async fn bad_input_is_a_clear_error_never_a_free_pass() {
    let fake = upstream(16).await;
    let gw =
        Floodgate::serve(&config(&fake.url(), 10_000, "{ api: openai, allowance: { max_tokens: 4096 } }"));
    for (body, param) in [
        ("this is not json", None),
        ("[1, 2]", None),
        (r#"{"messages": [{"role": "user", "content": "hi"}]}"#, Some("model")),
        (r#"{"model": "gpt-4o", "max_tokens": -5}"#, Some("max_tokens")),
        (r#"{"model": "gpt-4o", "max_tokens": 100000000}"#, Some("max_tokens")),
        (r#"{"model": "gpt-4o", "max_completion_tokens": 0}"#, Some("max_completion_tokens")),
        (r#"{"model": "gpt-4o", "max_tokens": "many"}"#, Some("max_tokens")),
    ] {
        let reply = gw.post_raw("/v1/chat/completions", "t1", body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        let error = &reply.json()["error"];
        assert_eq!(error["type"], "invalid_request_error", "{body}");
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
        assert_eq!(error["param"].as_str(), param, "{body}");
    }
    assert!(fake.seen().is_empty(), "none reached the upstream");
    assert_eq!(gw.used("tenant-requests", "t1").await, 0);
    assert_eq!(gw.used("tenant-tokens", "t1").await, 0);
}

#[tokio::test]
async fn an_upstream_429_passes_through_and_gives_the_reservation_back() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), 10_000, "{ api: openai }"));
    let headers = [("x-fake-status", "429"), ("x-fake-retry-after-ms", "1500")];
    let reply = gw.post("/v1/chat/completions", "t1", &headers, &chat("gpt-4o", "Hi")).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.header("retry-after-ms"), Some("1500"), "the provider's wait, as it said it");
    assert_eq!(reply.json()["error"]["code"], "rate_limit_exceeded");
    gw.used_becomes("tenant-tokens", "t1", 0).await;
    assert_eq!(gw.used("tenant-requests", "t1").await, 0, "a call that generated nothing costs nothing");
}

#[tokio::test]
async fn an_unreachable_upstream_gives_the_reservation_back() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gw = Floodgate::serve(&config(&format!("http://127.0.0.1:{port}"), 10_000, "{ api: openai }"));
    let reply = gw.post("/v1/chat/completions", "t1", &[], &chat("gpt-4o", "Hi")).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    gw.used_becomes("tenant-tokens", "t1", 0).await;
}
