//! The real `openai` SDKs — Python's from PyPI (`sdk-python/requirements.txt`, hash-pinned, in a
//! venv under `target/llm-sdk/venv`) and Node's from npm (`sdk-node/package-lock.json`, `npm ci`)
//! — each running every scenario of its `drive` script against the gateway: chat completions
//! streamed and not, the usage chunk hidden or asked for, the responses API, embeddings, a capped
//! allowance, a 429 with its wait, a stream cut at its allowance. The budgets then hold exactly
//! what the SDK was told it used. `./scripts/test` installs both first; a missing one fails here,
//! naming how to install it.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use serde_json::{Value, json};

use super::{Floodgate, chat, config, prompt_of, upstream};

pub(super) fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/llm")
}

/// The venv's Python: `FLOODGATE_LLM_PYTHON`, else `<workspace>/target/llm-sdk/venv/bin/python`.
pub(super) fn python() -> PathBuf {
    let path = std::env::var_os("FLOODGATE_LLM_PYTHON").map(PathBuf::from).unwrap_or_else(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
        target.join("llm-sdk/venv/bin/python")
    });
    assert!(
        path.exists(),
        "the OpenAI Python SDK's venv is missing at {}: run ./scripts/llm-sdks (./scripts/test does)",
        path.display()
    );
    path
}

pub(super) fn node_package() -> PathBuf {
    let dir = here().join("sdk-node");
    assert!(
        dir.join("node_modules/openai").exists(),
        "the OpenAI Node SDK is missing in {}: run ./scripts/llm-sdks (./scripts/test does)",
        dir.display()
    );
    dir
}

/// Runs the driver `command` against `gw` for tenants `prefix-*` (the upstream answers meanwhile,
/// on this test's runtime); its JSON output.
pub(super) async fn drive(mut command: Command, gw: &Floodgate, prefix: &str) -> Value {
    let output = command
        .env("FLOODGATE_LLM_BASE_URL", format!("http://{}/v1", gw.gateway))
        .env("FLOODGATE_LLM_TENANT", prefix)
        .kill_on_drop(true)
        .output()
        .await
        .expect("the SDK's driver runs");
    assert!(
        output.status.success(),
        "the driver failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&output.stdout)))
}

/// What every driver must have seen, and what the budgets must hold after it.
async fn check(out: &Value, gw: &Floodgate, prefix: &str) {
    let sdk = out["sdk"].as_str().unwrap();
    let bounded = |text: &str| {
        let mut body = chat("gpt-4o-mini", text);
        body["max_tokens"] = json!(50);
        prompt_of("/v1/chat/completions", &body)
    };
    let (p_chat, p_stream, p_usage) =
        (bounded("Hello from the SDK"), bounded("Stream from the SDK"), bounded("Stream with usage"));
    let p_responses =
        prompt_of("/v1/responses", &json!({"model": "gpt-4.1", "input": "Respond from the SDK"}));
    let p_embeddings = prompt_of(
        "/v1/embeddings",
        &json!({"model": "text-embedding-3-small", "input": ["a river", "of stone"]}),
    );

    assert_eq!(out["chat"]["usage"], json!({"prompt_tokens": p_chat, "completion_tokens": 16}), "{sdk}");
    assert_eq!(out["chat"]["finish_reason"], "stop", "{sdk}");
    assert_eq!(out["stream"]["text"].as_str().unwrap().split_whitespace().count(), 16, "{sdk}");
    assert_eq!(out["stream"]["usage_chunks"], 0, "{sdk}: the usage chunk it did not ask for is hidden");
    assert_eq!(out["stream"]["chunks_without_choices"], 0, "{sdk}");
    assert_eq!(
        out["stream_usage"]["usage"],
        json!({"prompt_tokens": p_usage, "completion_tokens": 16}),
        "{sdk}"
    );
    assert_eq!(out["stream_usage"]["choices_in_last"], 0, "{sdk}");
    assert_eq!(out["responses"]["usage"], json!({"input_tokens": p_responses, "output_tokens": 16}), "{sdk}");
    assert_eq!(
        out["embeddings"],
        json!({"vectors": 2, "dimensions": 8, "prompt_tokens": p_embeddings}),
        "{sdk}"
    );
    let main = format!("{prefix}-main");
    let spent = (p_chat + 16) + (p_stream + 16) + (p_usage + 16) + (p_responses + 16) + p_embeddings;
    gw.used_becomes("tenant-tokens", &main, spent).await;
    assert_eq!(gw.used("tenant-requests", &main).await, 5, "{sdk}");

    let p_cap = out["cap"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(out["cap"]["allowance"], format!("{}; capped-from=100000", 2000 - p_cap), "{sdk}");
    assert_eq!(out["cap"]["completion_tokens"], 16, "{sdk}");
    gw.used_becomes("tenant-tokens", &format!("{prefix}-cap"), p_cap + 16).await;

    assert_eq!(out["limited"]["first_usage"]["completion_tokens"], 1980, "{sdk}");
    let second = &out["limited"]["second"];
    assert_eq!(second["status"], 429, "{sdk}: {second}");
    assert_eq!(second["code"], "rate_limit_exceeded", "{sdk}");
    let ms: u64 = second["retry_after_ms"].as_str().unwrap().parse().unwrap();
    let secs: u64 = second["retry_after"].as_str().unwrap().parse().unwrap();
    assert_eq!(secs, ms.div_ceil(1000), "{sdk}");

    assert_eq!(out["cut"]["words"], 20, "{sdk}: the stream stopped at its allowance");
    assert!(
        out["cut"]["raised"].as_str().is_some(),
        "{sdk}: the cut is an error the SDK raises: {}",
        out["cut"]
    );
    let p_cut = bounded("Do not stop");
    gw.used_becomes("tenant-tokens", &format!("{prefix}-cut"), p_cut + 21).await;
}

fn gateway(upstream: &str) -> Floodgate {
    Floodgate::serve(&config(upstream, 2000, "{ api: openai, over_budget_mid_stream: cut }"))
}

#[tokio::test]
async fn the_python_sdk_streams_and_is_metered_capped_refused_and_cut() {
    let fake = upstream(16).await;
    let gw = gateway(&fake.url());
    let mut command = Command::new(python());
    command.arg(here().join("sdk-python/drive.py"));
    let out = drive(command, &gw, "py").await;
    check(&out, &gw, "py").await;
}

#[tokio::test]
async fn the_node_sdk_streams_and_is_metered_capped_refused_and_cut() {
    let fake = upstream(16).await;
    let gw = gateway(&fake.url());
    let dir = node_package();
    let mut command = Command::new("node");
    command.arg(dir.join("drive.mjs")).current_dir(&dir);
    let out = drive(command, &gw, "node").await;
    check(&out, &gw, "node").await;
}
