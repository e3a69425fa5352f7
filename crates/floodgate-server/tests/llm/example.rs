//! examples/llm_gateway as its README runs it: its `floodgate.yaml`, the upstream from
//! `LLM_UPSTREAM`, tenants from `x-tenant-id`, 10 000 tokens an hour capped, 60 requests a minute,
//! a dollar budget.

use serde_json::json;

use super::{Floodgate, chat, prompt_of, upstream};

fn example() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/llm_gateway/floodgate.yaml");
    std::fs::read_to_string(path).unwrap()
}

#[tokio::test]
async fn the_example_meters_caps_and_refuses_as_its_readme_says() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve_env(&example(), &[("LLM_UPSTREAM", &fake.url())]);
    let mut body = chat("gpt-4o-mini", "Hello!");
    body["max_tokens"] = json!(300);
    let p = prompt_of("/v1/chat/completions", &body);
    let reply = gw.post("/v1/chat/completions", "acme", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-ratelimit-remaining-tokens").unwrap(), (10_000 - p - 300).to_string());
    assert_eq!(reply.header("x-ratelimit-remaining-requests"), Some("59"));
    gw.used_becomes("tenant-tokens-per-hour", "acme", p + 16).await;
    let spent = (p as f64 * 0.15 + 16.0 * 0.60 - 1e-9).ceil() as u64;
    assert_eq!(gw.used("tenant-spend-per-day", "acme").await, spent);

    // More than the hour has left: capped to it, and said so.
    body["max_tokens"] = json!(20_000);
    let reply = gw.post("/v1/chat/completions", "acme", &[("x-fake-tokens", "20000")], &body).await;
    let granted = 10_000 - (p + 16) - p;
    assert_eq!(reply.header("floodgate-allowance").unwrap(), format!("{granted}; capped-from=20000"));
    gw.used_becomes("tenant-tokens-per-hour", "acme", 10_000).await;
    // Then refused, in OpenAI's format, with the exact wait.
    let reply = gw.post("/v1/chat/completions", "acme", &[], &body).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.json()["error"]["code"], "rate_limit_exceeded");
    assert!(reply.header("retry-after-ms").is_some());
    // Another tenant is untouched.
    let reply = gw.post("/v1/chat/completions", "globex", &[], &chat("gpt-4o-mini", "Hi")).await;
    assert_eq!(reply.status, 200);
}
