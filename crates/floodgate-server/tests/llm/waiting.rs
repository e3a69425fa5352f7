//! `action: delay` on an LLM route's token budget: a call the budget denies waits for room rather
//! than a 429, in turn with the tenant's other waiting calls by priority tier, and reserves when its
//! turn comes.

use std::sync::Arc;

use floodgate_testkit::wait;
use serde_json::{Value, json};

use super::{Floodgate, chat, prompt_of, upstream};

const PATH: &str = "/v1/chat/completions";

/// Per tenant, `tokens` tokens in any 2 s (a sliding log: a call waits for the last one's tokens to
/// leave the window), `action: delay`; a call's tier from `x-priority`.
fn config(upstream: &str, tokens: u64) -> String {
    format!(
        r#"
headers: [ietf, openai]
rules:
  - name: tenant-tokens
    key: [tenant]
    algorithm: sliding_log
    limit: {tokens}
    window: 2s
    cost: tokens
    action: delay
    max_wait: 30s
gateway:
  identity:
    headers: {{ tenant: x-tenant-id }}
  delay_queue: {{ weights: [8, 4, 2, 1], aging: 1m }}
  routes:
    - name: llm
      match: {{ path: "/v1/{{*rest}}", methods: [POST] }}
      upstream: {upstream}
      tier: {{ from: header, name: x-priority, default: 3 }}
      llm: {{ api: openai }}
"#
    )
}

/// Call `n`: 16 completion tokens asked, the 16 the upstream generates (so the whole reservation is
/// charged and nothing comes back early).
fn call(n: u32) -> Value {
    let mut body = chat("gpt-4o-mini", &format!("call {n}"));
    body["max_tokens"] = json!(16);
    body
}

/// A budget that holds exactly one call.
fn one_call() -> u64 {
    let prompt = prompt_of(PATH, &call(1));
    for n in 2..=9 {
        assert_eq!(prompt_of(PATH, &call(n)), prompt, "every call counts the same");
    }
    prompt + 16
}

/// Which calls the upstream saw, by their number, in the order it saw them.
fn seen(fake: &fake_openai::FakeOpenAi) -> Vec<String> {
    fake.seen()
        .iter()
        .map(|s| {
            s.body["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .trim_start_matches("call ")
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_call_the_token_budget_denies_waits_for_room_and_reserves_when_it_comes() {
    let fake = upstream(16).await;
    let gw = Floodgate::serve(&config(&fake.url(), one_call()));
    let first = gw.post(PATH, "t1", &[], &call(1)).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-ratelimit-remaining-tokens"), Some("0"));
    // The budget is spent for the next 2 s: the second call waits for it, then takes all of it.
    let second = gw.post(PATH, "t1", &[], &call(2)).await;
    assert_eq!(second.status, 200, "waited for room rather than a 429: {}", second.body);
    assert_eq!(second.header("x-ratelimit-remaining-tokens"), Some("0"));
    assert_eq!(second.json()["usage"]["completion_tokens"], 16);
    assert_eq!(seen(&fake), ["1", "2"]);
    assert_eq!(gw.series(r#"floodgate_gateway_delayed_total{result="passed"}"#).await, Some(1.0));
    assert_eq!(gw.series("floodgate_gateway_waiting").await, Some(0.0));
    // Another tenant never waited behind t1.
    assert_eq!(gw.post(PATH, "t2", &[], &call(3)).await.status, 200);
}

#[tokio::test]
async fn waiting_calls_reserve_first_come_first_served_a_higher_tier_first() {
    let fake = upstream(16).await;
    let gw = Arc::new(Floodgate::serve(&config(&fake.url(), one_call())));
    assert_eq!(gw.post(PATH, "t1", &[], &call(1)).await.status, 200);
    // Each call sent once the one before waits: 2 (the head, deciding when room comes), 3 and 4 of
    // the lowest tier, then 5 of the highest.
    let mut calls = Vec::new();
    for (n, tier) in [(2, "3"), (3, "3"), (4, "3"), (5, "0")] {
        let gw2 = Arc::clone(&gw);
        calls.push(tokio::spawn(async move {
            gw2.post(PATH, "t1", &[("x-priority", tier)], &call(n)).await.status
        }));
        let waiting = f64::from(n - 1);
        wait::until("the call waiting", || async {
            (gw.series("floodgate_gateway_waiting").await == Some(waiting)).then_some(())
        })
        .await;
    }
    let mut statuses = Vec::new();
    for call in calls {
        statuses.push(call.await.unwrap());
    }
    assert_eq!(statuses, [200, 200, 200, 200]);
    assert_eq!(seen(&fake), ["1", "2", "5", "3", "4"], "the head, then tier 0, then tier 3 in arrival order");
    assert_eq!(gw.series(r#"floodgate_gateway_delayed_total{result="passed"}"#).await, Some(4.0));
}

#[tokio::test]
async fn a_call_that_cannot_get_room_within_max_wait_is_refused_with_the_wait() {
    let fake = upstream(16).await;
    // One call a minute: the next call's room is past its 30 s `max_wait`.
    let yaml = config(&fake.url(), one_call()).replace("window: 2s", "window: 1m");
    let gw = Floodgate::serve(&yaml);
    assert_eq!(gw.post(PATH, "t1", &[], &call(1)).await.status, 200);
    let refused = gw.post(PATH, "t1", &[], &call(2)).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "rate_limit_exceeded");
    let secs: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((59..=60).contains(&secs), "the wait until the first call's tokens leave the window: {secs}");
    assert_eq!(seen(&fake), ["1"]);
}
