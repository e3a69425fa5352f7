//! Dollar budgets: a price table turns each call's tokens into micro-dollars, a cost dimension of
//! its own, reserved at admission and committed from the usage like tokens; per model through the
//! `model` descriptor; a model without a price refused.

use serde_json::json;

use super::{Floodgate, chat, prompt_of, upstream};

/// Per tenant: a spend of `micros` µ$ an hour, and the spend per tenant and model (a large one);
/// prices for gpt-4o-mini and the gpt-4o family.
fn config(upstream: &str, micros: u64, llm: &str) -> String {
    format!(
        r#"
headers: [ietf, openai]
# The gateway gives an LLM call's model as the descriptor `model`.
descriptors: [model]
rules:
  - name: tenant-spend
    key: [tenant]
    algorithm: fixed_window
    limit: {micros}
    window: 1h
    cost: usd_micros
  - name: tenant-model-spend
    key: [tenant, model]
    algorithm: fixed_window
    limit: 1000000000
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
    headers: {{ tenant: x-tenant-id }}
  routes:
    - name: llm
      match: {{ path: "/v1/{{*rest}}", methods: [POST] }}
      upstream: {upstream}
      llm:
        api: openai
        prices:
          gpt-4o-mini: {{ input: 0.15, cached_input: 0.075, output: 0.60 }}
          "gpt-4o*": {{ input: 2.5, output: 10 }}
        {llm}
"#
    )
}

/// `dollars per million` × `tokens`, in µ$, rounded up (what the gateway charges).
fn micros(tokens: u64, dollars_per_million: f64) -> f64 {
    tokens as f64 * dollars_per_million
}

#[tokio::test]
async fn a_call_is_charged_its_spend_per_tenant_and_per_model() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), 1_000_000, ""));
    let mut body = chat("gpt-4o-mini", "What does a river cost?");
    body["max_tokens"] = json!(100);
    let p = prompt_of("/v1/chat/completions", &body);
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let spent = (micros(p, 0.15) + micros(16, 0.60)).ceil() as u64;
    gw.used_becomes("tenant-spend", "t1", spent).await;
    let per_model = gw
        .send(
            gw.http,
            http::Method::GET,
            "/v1/usage?rule=tenant-model-spend&tenant=t1&model=gpt-4o-mini",
            &[],
            String::new(),
        )
        .await;
    assert_eq!(per_model.json()["used"], spent, "{}", per_model.body);
    assert_eq!(gw.used("tenant-tokens", "t1").await, p + 16);

    // Cached prompt tokens are charged at the cached price.
    let reply = gw.post("/v1/chat/completions", "t2", &[("x-fake-cached", "8")], &body).await;
    assert_eq!(reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
    let cached_spent = (micros(p - 8, 0.15) + micros(8, 0.075) + micros(16, 0.60)).ceil() as u64;
    gw.used_becomes("tenant-spend", "t2", cached_spent).await;
    // The route's spend series adds both calls' spend.
    let page = gw.metrics().await;
    let series = super::series_in(&page, "floodgate_llm_spend_usd_micros_total{route=\"llm\"}")
        .unwrap_or_else(|| panic!("no spend series:\n{page}"));
    assert_eq!(series, (spent + cached_spent) as f64);
}

#[tokio::test]
async fn last_months_spend_per_model_is_read_beside_this_months() {
    // 2026-01-20T12:00:00Z, and midnight UTC on 1 January and 1 February 2026, ms.
    const JANUARY_20: u64 = 1_768_910_400_000;
    const JANUARY: u64 = 1_767_225_600_000;
    const FEBRUARY: u64 = 1_769_904_000_000;
    let fake = upstream(16).await;
    let monthly = config(&fake.url(), 1_000_000, "").replace(
        "algorithm: fixed_window\n    limit: 1000000000\n    window: 1h",
        "algorithm: quota\n    limit: 1000000000\n    period: month",
    );
    assert!(monthly.contains("period: month"), "the spend per model is a monthly quota");
    let gw = Floodgate::serve_with(&monthly, &[], &["--manual-clock", &JANUARY_20.to_string()]);
    let usage = async || {
        let path = "/v1/usage?rule=tenant-model-spend&tenant=t1&model=gpt-4o-mini";
        let reply = gw.send(gw.http, http::Method::GET, path, &[], String::new()).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()
    };
    let mut body = chat("gpt-4o-mini", "What does a river cost?");
    body["max_tokens"] = json!(100);
    let p = prompt_of("/v1/chat/completions", &body);
    let spent = (micros(p, 0.15) + micros(16, 0.60)).ceil() as u64;
    assert_eq!(gw.post("/v1/chat/completions", "t1", &[], &body).await.status, 200);
    gw.used_becomes("tenant-spend", "t1", spent).await;
    assert_eq!(usage().await["previous"]["used"], 0, "nothing spent in December");

    // February: January's spend is last month's, beside February's.
    let moved = gw
        .send(gw.http, http::Method::POST, "/admin/clock", &[], format!(r#"{{"set_ms": {FEBRUARY}}}"#))
        .await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    assert_eq!(gw.post("/v1/chat/completions", "t1", &[], &body).await.status, 200);
    // The hourly spend rule's window is new too: it reads this call's spend once committed.
    gw.used_becomes("tenant-spend", "t1", spent).await;
    let february = usage().await;
    assert_eq!(february["used"], spent, "{february}");
    assert_eq!(
        february["previous"],
        json!({"used": spent, "period_start": JANUARY, "period_end": FEBRUARY}),
        "{february}"
    );
}

#[tokio::test]
async fn a_model_without_a_price_is_refused_when_calls_are_priced() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), 1_000_000, ""));
    let reply = gw.post("/v1/chat/completions", "t1", &[], &chat("llama-3-70b", "Hi")).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "model_not_priced");
    assert_eq!(reply.json()["error"]["param"], "model");
    assert!(fake.seen().is_empty());
    // A prefix prices a family.
    let reply = gw.post("/v1/chat/completions", "t1", &[], &chat("gpt-4o-2024-08-06", "Hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test]
async fn the_allowance_is_capped_to_what_the_money_left_buys() {
    let fake = upstream(1000).await;
    // $0.001: 1000 µ$.
    let gw = Floodgate::serve(&config(&fake.url(), 1000, "allowance: { min_completion_tokens: 10 }"));
    let mut body = chat("gpt-4o", "Spend it all.");
    body["max_tokens"] = json!(500);
    let p = prompt_of("/v1/chat/completions", &body);
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // What 1000 µ$ buy at 10 µ$ a token once the prompt is paid at 2.5.
    let prompt_cost = micros(p, 2.5).ceil() as u64;
    let granted = (1000 - prompt_cost) / 10;
    assert_eq!(reply.header("floodgate-allowance").unwrap(), format!("{granted}; capped-from=500"));
    assert_eq!(fake.seen()[0].body["max_tokens"], granted);
    let spent = (micros(p, 2.5) + micros(granted, 10.0)).ceil() as u64;
    assert!(spent <= 1000);
    gw.used_becomes("tenant-spend", "t1", spent).await;
    // Nothing worth a call is left: refused, the wait named.
    let reply = gw.post("/v1/chat/completions", "t1", &[], &body).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.json()["error"]["type"], "usd_micros");
    assert!(reply.header("retry-after-ms").is_some());
}

#[tokio::test]
async fn a_plan_past_its_limit_switches_the_call_to_its_smaller_model_and_prices_it_so() {
    let fake = upstream(16).await;
    let yaml = format!(
        r#"
rules:
  - name: monthly-calls
    key: [tenant]
    algorithm: quota
    period: month
    limit: {{ by: plan, values: {{ free: 1, pro: 1000 }} }}
    overage:
      free: {{ degrade_to: gpt-4o-mini }}
  - name: tenant-spend
    key: [tenant]
    algorithm: fixed_window
    limit: 1000000
    window: 1h
    cost: usd_micros
gateway:
  identity:
    headers: {{ tenant: x-tenant-id, plan: x-plan }}
  routes:
    - name: llm
      match: {{ path: "/v1/{{*rest}}", methods: [POST] }}
      upstream: {url}
      llm:
        api: openai
        prices:
          gpt-4o-mini: {{ input: 0.15, output: 0.60 }}
          "gpt-4o*": {{ input: 2.5, output: 10 }}
"#,
        url = fake.url()
    );
    let gw = Floodgate::serve(&yaml);
    let mut body = chat("gpt-4o", "Big model, please.");
    body["max_tokens"] = json!(100);
    let p = prompt_of("/v1/chat/completions", &body);
    let free = [("x-plan", "free")];
    let reply = gw.post("/v1/chat/completions", "t1", &free, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.header("floodgate-degrade").is_none());
    assert_eq!(fake.seen()[0].body["model"], "gpt-4o");
    let big = (micros(p, 2.5) + micros(16, 10.0)).ceil() as u64;
    gw.used_becomes("tenant-spend", "t1", big).await;

    // Past the plan's one call: the call goes on, on the smaller model, priced as it.
    let reply = gw.post("/v1/chat/completions", "t1", &free, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("floodgate-degrade"), Some("gpt-4o-mini"));
    assert_eq!(fake.seen()[1].body["model"], "gpt-4o-mini", "the upstream is asked for the smaller model");
    assert_eq!(fake.seen()[1].headers["floodgate-degrade"], "gpt-4o-mini");
    assert_eq!(reply.json()["model"], "gpt-4o-mini");
    let small = (micros(p, 0.15) + micros(16, 0.60)).ceil() as u64;
    gw.used_becomes("tenant-spend", "t1", big + small).await;
}
