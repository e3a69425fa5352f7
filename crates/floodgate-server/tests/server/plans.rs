//! Plans that degrade: `overage: {free: {degrade_to: …}, pro: {degrade_to: …}, enterprise: deny}`
//! over HTTP, on the memory store and a real `redis-server` (floodgate-testkit starts it). Past
//! its plan's limit a request is allowed with `"degrade_to"` and a `floodgate-degrade` header, or
//! refused with 429 when its plan denies.

use floodgate::LimitKind;
use floodgate_testkit::redis::RedisServer;
use serde_json::json;

use crate::support::{Reply, TestServer, parse};

/// Per tenant and month: free 2 calls, pro 3, enterprise 2; free and pro switch models past theirs.
fn plans(store: &str) -> String {
    format!(
        "store: {store}
rules:
  - name: monthly-calls
    key: [tenant]
    algorithm: fixed_window
    window: 30d
    limit: {{by: plan, values: {{free: 2, pro: 3, enterprise: 2}}}}
    overage:
      free: {{degrade_to: gpt-4o-mini}}
      pro: {{degrade_to: gpt-4o}}
      enterprise: deny
"
    )
}

async fn call(server: &TestServer, tenant: &str, plan: &str) -> Reply {
    let body = json!({"descriptors": {"tenant": tenant, "plan": plan}}).to_string();
    server.post("/v1/check", body).await
}

async fn degrade_by_plan(server: &TestServer) {
    for (tenant, plan, within, model) in [
        ("t-free", "free", 2, Some("gpt-4o-mini")),
        ("t-pro", "pro", 3, Some("gpt-4o")),
        ("t-ent", "enterprise", 2, None),
    ] {
        for i in 0..within {
            let reply = call(server, tenant, plan).await;
            assert_eq!(reply.status, 200, "{plan} call {i}: {}", reply.body);
            assert!(reply.json().get("degrade_to").is_none(), "{plan} within its limit: {}", reply.body);
            assert_eq!(reply.header("floodgate-degrade"), None, "{plan} within its limit");
        }
        for _ in 0..2 {
            let over = call(server, tenant, plan).await;
            match model {
                Some(model) => {
                    assert_eq!(over.status, 200, "{plan} over its limit degrades: {}", over.body);
                    let body = over.json();
                    assert_eq!(body["allowed"], true, "{}", over.body);
                    assert_eq!(body["degrade_to"], model, "{}", over.body);
                    assert_eq!(body["limits"][0]["outcome"], "tagged", "{}", over.body);
                    assert_eq!(over.header("floodgate-degrade"), Some(model));
                    assert_eq!(over.header("floodgate-tag"), Some("monthly-calls"));
                }
                None => {
                    assert_eq!(over.status, 429, "{plan} over its limit is refused: {}", over.body);
                    assert!(over.json().get("degrade_to").is_none(), "{}", over.body);
                    assert_eq!(over.header("floodgate-degrade"), None);
                    assert!(over.header("retry-after").is_some());
                }
            }
        }
    }
    // A tenant moving from free to enterprise keeps its usage, and is now refused.
    let moved = call(server, "t-free", "enterprise").await;
    assert_eq!(moved.status, 429, "{}", moved.body);
}

#[tokio::test]
async fn degrade_to_by_plan_on_memory() {
    let server = TestServer::start(parse(&plans("{ kind: memory }"))).await;
    degrade_by_plan(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degrade_to_by_plan_on_redis() {
    let redis = tokio::task::spawn_blocking(RedisServer::start).await.unwrap();
    let server = TestServer::start(parse(&plans(&format!(
        "{{ kind: redis, url: \"{}\", deadline: 1s }}",
        redis.url()
    ))))
    .await;
    degrade_by_plan(&server).await;
    server.stop().await;
}

/// One rule of `algorithm` whose limit varies by plan: free gets 1 (then degrades), enterprise 2
/// (then is refused) — for a bucket, by its rate (1/h and 2/h).
fn every_algorithm_rule(kind: LimitKind) -> String {
    let varying_limit = "    limit: {by: plan, values: {free: 1, enterprise: 2}}\n";
    let shape = match kind {
        LimitKind::FixedWindow | LimitKind::SlidingWindow | LimitKind::SlidingLog => {
            format!("{varying_limit}    window: 1h\n")
        }
        LimitKind::TokenBucket | LimitKind::Gcra => {
            "    rate: {by: plan, values: {free: 1/h, enterprise: 2/h}}\n".to_owned()
        }
        LimitKind::Concurrency => format!("{varying_limit}    lease: 1h\n"),
        LimitKind::Quota => format!("{varying_limit}    period: month\n"),
        LimitKind::Budget => format!("{varying_limit}    ttl: 1h\n"),
    };
    format!(
        "  - name: {name}\n    key: [tenant]\n    algorithm: {name}\n{shape}    overage: {{free: {{degrade_to: small-model}}, enterprise: deny}}\n",
        name = kind.name()
    )
}

async fn by_plan_with_every_algorithm(store: &str) {
    for kind in LimitKind::ALL {
        let config = format!("store: {store}\nrules:\n{}", every_algorithm_rule(kind));
        let server = TestServer::start(parse(&config)).await;
        let name = kind.name();
        let tenant = format!("{name}-{}", std::process::id());
        let free = format!("{tenant}-free");
        let enterprise = format!("{tenant}-ent");

        let first = call(&server, &free, "free").await;
        assert_eq!(first.status, 200, "{name}: {}", first.body);
        assert!(first.json().get("degrade_to").is_none(), "{name}: {}", first.body);
        let over = call(&server, &free, "free").await;
        assert_eq!(over.status, 200, "{name}: free over its limit degrades: {}", over.body);
        assert_eq!(over.json()["degrade_to"], "small-model", "{name}: {}", over.body);
        assert_eq!(over.header("floodgate-degrade"), Some("small-model"), "{name}");

        // GCRA's burst is 1 whatever the rate: enterprise's rate shows in when it may retry.
        let within = if kind == LimitKind::Gcra { 1 } else { 2 };
        for i in 0..within {
            let reply = call(&server, &enterprise, "enterprise").await;
            assert_eq!(reply.status, 200, "{name}: enterprise call {i}: {}", reply.body);
        }
        let refused = call(&server, &enterprise, "enterprise").await;
        assert_eq!(refused.status, 429, "{name}: enterprise over its limit is refused: {}", refused.body);
        assert!(refused.json().get("degrade_to").is_none(), "{name}: {}", refused.body);
        if kind == LimitKind::Gcra {
            let free_retry = over.json()["limits"][0]["retry_after_ms"].as_u64().unwrap();
            let enterprise_retry = refused.json()["retry_after_ms"].as_u64().unwrap();
            assert!(free_retry > 3_500_000, "free: 1/h: {}", over.body);
            assert!((1_700_000..=1_800_000).contains(&enterprise_retry), "enterprise: 2/h: {}", refused.body);
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn by_plan_works_with_every_algorithm_on_memory() {
    by_plan_with_every_algorithm("{ kind: memory }").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_plan_works_with_every_algorithm_on_redis() {
    let redis = tokio::task::spawn_blocking(RedisServer::start).await.unwrap();
    by_plan_with_every_algorithm(&format!("{{ kind: redis, url: \"{}\", deadline: 1s }}", redis.url())).await;
}
