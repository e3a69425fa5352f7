//! Exact across instances: gateways sharing one `redis-server` admit a tenant's calls against one
//! budget, so that what the upstream generated for the tenant never passes it.

use std::sync::Arc;

use floodgate_testkit::redis::RedisServer;
use serde_json::{Value, json};

use super::{Floodgate, chat, config_on, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_on_one_redis_share_a_tenants_budget_exactly() {
    let redis = tokio::task::block_in_place(RedisServer::start);
    let fake = upstream(100).await;
    let store = format!("store: {{ kind: redis, url: \"{}\", deadline: 1s }}", redis.url());
    let llm = "{ api: openai, allowance: { min_completion_tokens: 16, when_short: cap } }";
    let yaml = config_on(&store, &fake.url(), 1000, llm);
    let gateways = Arc::new([Floodgate::serve(&yaml), Floodgate::serve(&yaml)]);
    let mut calls = Vec::new();
    for i in 0..16 {
        let gateways = Arc::clone(&gateways);
        calls.push(tokio::spawn(async move {
            let mut body = chat("gpt-4o-mini", &format!("Call number {i}"));
            body["max_tokens"] = json!(100);
            body["stream"] = json!(i % 2 == 0);
            let reply = gateways[i % 2].post("/v1/chat/completions", "t1", &[], &body).await;
            (reply.status, reply.header("floodgate-allowance").map(str::to_owned))
        }));
    }
    let mut admitted = 0;
    let mut refused = 0;
    for call in calls {
        match call.await.unwrap() {
            (200, Some(_)) => admitted += 1,
            (429, None) => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(admitted + refused, 16);
    assert!(refused > 0, "a budget of 1000 cannot hold 16 calls of 100 tokens and their prompts");
    // Every call ended (and was committed): what the tenant was charged is what the upstream
    // generated for it, on both gateways alike, and never more than its budget.
    assert!(fake.wait(std::time::Duration::from_secs(20), |f| f.outcomes().len() == admitted).await);
    let generated: u64 = fake.outcomes().iter().map(|o| o.prompt_tokens + o.sent).sum();
    gateways[0].used_becomes("tenant-tokens", "t1", generated).await;
    assert_eq!(gateways[1].used("tenant-tokens", "t1").await, generated);
    assert!(generated <= 1000, "{generated} tokens for a budget of 1000");
    assert_eq!(gateways[1].used("tenant-requests", "t1").await, admitted as u64);
    let bounded: Vec<Value> = fake.seen().iter().map(|s| s.body["max_tokens"].clone()).collect();
    assert!(bounded.iter().all(|m| m.as_u64().is_some_and(|m| (16..=100).contains(&m))), "{bounded:?}");
}
