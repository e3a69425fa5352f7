//! The real Anthropic SDKs — Python's `anthropic` from PyPI and Node's `@anthropic-ai/sdk` from npm
//! (pinned beside the OpenAI SDKs, installed by `./scripts/llm-sdks`) — each running every
//! scenario of its driver (`sdk-python/drive_anthropic.py`, `sdk-node/drive-anthropic.mjs`)
//! against an `llm: {api: anthropic}` route: a message streamed and not, the raw events, the
//! proxied `count_tokens`, a capped `max_tokens`, a 429 the SDK raises as `RateLimitError` with its
//! wait, a stream cut at its allowance. The budgets then hold exactly what the SDK was told it used.

use serde_json::{Value, json};
use tokio::process::Command;

use super::anthropic::{llm, message, prompt};
use super::sdk::{drive, here, node_package, python};
use super::{Floodgate, config, upstream};

const MODEL: &str = "claude-sonnet-4-5";

async fn check(out: &Value, gw: &Floodgate, prefix: &str) {
    let sdk = out["sdk"].as_str().unwrap();
    let p = |text: &str| prompt(&message(MODEL, text, 50));
    let (p_message, p_stream, p_raw) = (p("Hello from the SDK"), p("Stream from the SDK"), p("Raw events"));
    assert_eq!(out["message"]["usage"], json!({"input_tokens": p_message, "output_tokens": 16}), "{sdk}");
    assert_eq!(out["message"]["stop_reason"], "end_turn", "{sdk}");
    assert_eq!(out["message"]["text"].as_str().unwrap().split_whitespace().count(), 16, "{sdk}");
    assert_eq!(out["stream"]["usage"], json!({"input_tokens": p_stream, "output_tokens": 16}), "{sdk}");
    assert_eq!(out["stream"]["text"].as_str().unwrap().split_whitespace().count(), 16, "{sdk}");
    // The fake upstream sends a `ping` after `content_block_start`, as Anthropic does; the SDKs
    // swallow it.
    let mut events = vec!["message_start", "content_block_start"];
    events.extend(["content_block_delta"; 16]);
    events.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(out["events"], json!(events), "{sdk}");
    assert_eq!(out["count_tokens"], p("Count me"), "{sdk}");
    let main = format!("{prefix}-main");
    gw.used_becomes("tenant-tokens", &main, p_message + p_stream + p_raw + 3 * 16).await;
    assert_eq!(gw.used("tenant-requests", &main).await, 4, "{sdk}: three messages, and count_tokens");

    let p_cap = out["cap"]["input_tokens"].as_u64().unwrap();
    assert_eq!(out["cap"]["allowance"], format!("{}; capped-from=20000", 2000 - p_cap), "{sdk}");
    assert_eq!(out["cap"]["output_tokens"], 16, "{sdk}");
    gw.used_becomes("tenant-tokens", &format!("{prefix}-cap"), p_cap + 16).await;

    assert_eq!(out["limited"]["first_usage"]["output_tokens"], 1980, "{sdk}");
    let second = &out["limited"]["second"];
    assert_eq!(second["status"], 429, "{sdk}: {second}");
    assert_eq!(second["type"], "rate_limit_error", "{sdk}");
    let ms: u64 = second["retry_after_ms"].as_str().unwrap().parse().unwrap();
    let secs: u64 = second["retry_after"].as_str().unwrap().parse().unwrap();
    assert_eq!(secs, ms.div_ceil(1000), "{sdk}");

    assert_eq!(out["cut"]["words"], 20, "{sdk}: the stream stopped at its allowance");
    assert!(
        out["cut"]["raised"].as_str().is_some(),
        "{sdk}: the cut is an error the SDK raises: {}",
        out["cut"]
    );
    assert!(out["cut"]["message"].as_str().unwrap().contains("rate_limit_error"), "{sdk}: {}", out["cut"]);
    gw.used_becomes("tenant-tokens", &format!("{prefix}-cut"), p("Do not stop") + 21).await;
}

fn gateway(upstream: &str) -> Floodgate {
    Floodgate::serve(&config(upstream, 2000, &llm(", over_budget_mid_stream: cut")))
}

#[tokio::test]
async fn the_anthropic_python_sdk_streams_and_is_metered_capped_refused_and_cut() {
    let fake = upstream(16).await;
    let gw = gateway(&fake.url());
    let mut command = Command::new(python());
    command.arg(here().join("sdk-python/drive_anthropic.py"));
    let out = drive(command, &gw, "py").await;
    check(&out, &gw, "py").await;
}

#[tokio::test]
async fn the_anthropic_node_sdk_streams_and_is_metered_capped_refused_and_cut() {
    let fake = upstream(16).await;
    let gw = gateway(&fake.url());
    let dir = node_package();
    assert!(
        dir.join("node_modules/@anthropic-ai/sdk").exists(),
        "the Anthropic Node SDK is missing in {}: run ./scripts/llm-sdks (./scripts/test does)",
        dir.display()
    );
    let mut command = Command::new("node");
    command.arg(dir.join("drive-anthropic.mjs")).current_dir(&dir);
    let out = drive(command, &gw, "node").await;
    check(&out, &gw, "node").await;
}
