//! The LLM series on `/metrics`: calls by admission, tokens reserved and committed, and how each
//! answer ended.

use http::Method;
use serde_json::json;

use super::{Floodgate, chat, config, prompt_of, series_in, upstream};

/// The value of `series` (its full name with labels) on the metrics page.
fn value(page: &str, series: &str) -> f64 {
    series_in(page, series).unwrap_or_else(|| panic!("no {series} on the page:\n{page}"))
}

#[tokio::test]
async fn calls_tokens_and_endings_are_counted_per_route() {
    // Each completion generates 100 tokens (within its allowance); the tenant has 250.
    let fake = upstream(100).await;
    let llm = "{ api: openai, allowance: { min_completion_tokens: 100 }, over_budget_mid_stream: cut }";
    let gw = Floodgate::serve(&config(&fake.url(), 250, llm));
    let mut body = chat("gpt-4o-mini", "Hello.");
    body["max_tokens"] = json!(100);
    let prompt = prompt_of("/v1/chat/completions", &body);

    // Admitted whole: charged its usage.
    assert_eq!(gw.post("/v1/chat/completions", "t1", &[], &body).await.status, 200);
    gw.used_becomes("tenant-tokens", "t1", prompt + 100).await;
    // Asks 150 with less than that left but at least 100: capped, then whole.
    body["max_tokens"] = json!(150);
    let capped = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(capped.status, 200, "{}", capped.body);
    assert!(capped.header("floodgate-allowance").unwrap().contains("capped-from=150"));
    gw.used_becomes("tenant-tokens", "t1", 2 * (prompt + 100)).await;
    // Less than 100 left: refused.
    assert_eq!(gw.post("/v1/chat/completions", "t1", &[], &body).await.status, 429);
    // Not JSON: invalid, before any budget.
    assert_eq!(gw.post_raw("/v1/chat/completions", "t1", "{not json").await.status, 400);
    // The upstream fails the call: its reservation is released, nothing charged.
    body["max_tokens"] = json!(100);
    let t2 = gw.post("/v1/chat/completions", "t2", &[("x-fake-status", "500")], &body).await;
    assert_eq!(t2.status, 500, "{}", t2.body);

    // A stream the gateway cuts at its allowance, and one the upstream breaks: neither with usage.
    body["stream"] = json!(true);
    let cut = gw.post("/v1/chat/completions", "t3", &[("x-fake-overshoot", "10")], &body).await;
    assert!(cut.body.contains("rate_limit_exceeded"), "{}", cut.body);
    gw.used_becomes("tenant-tokens", "t3", prompt + 101).await;
    let broken = gw
        .request(
            gw.gateway,
            Method::POST,
            "/v1/chat/completions",
            &[("content-type", "application/json"), ("x-tenant-id", "t4"), ("x-fake-fail-after", "7")],
            body.to_string(),
        )
        .await;
    assert!(http_body_util::BodyExt::collect(broken.into_body()).await.is_err());
    gw.used_becomes("tenant-tokens", "t4", prompt + 7).await;

    let page = gw.metrics().await;
    let calls = |outcome: &str| {
        value(&page, &format!("floodgate_llm_calls_total{{route=\"llm\",outcome=\"{outcome}\"}}"))
    };
    assert_eq!(
        (calls("admitted"), calls("capped"), calls("refused"), calls("invalid")),
        (4.0, 1.0, 1.0, 1.0)
    );
    let tokens =
        |kind: &str| value(&page, &format!("floodgate_llm_tokens_total{{route=\"llm\",kind=\"{kind}\"}}"));
    assert_eq!(
        tokens("completion"),
        200.0 + 101.0 + 7.0,
        "two answers' usage, what the cut and the break counted"
    );
    assert_eq!(tokens("prompt"), 4.0 * prompt as f64);
    let ended =
        |end: &str| value(&page, &format!("floodgate_llm_answers_total{{route=\"llm\",end=\"{end}\"}}"));
    assert_eq!((ended("whole"), ended("cut"), ended("broken"), ended("released")), (2.0, 1.0, 1.0, 1.0));
    assert_eq!(
        value(&page, "floodgate_llm_estimated_total{route=\"llm\"}"),
        2.0,
        "the cut and the broken stream"
    );
}
