//! The IETF headers of the check API for each kind of rule (draft-ietf-httpapi-ratelimit-headers-11):
//! a concurrency rule's quota unit, a tokens rule's vendor unit, and a rule's partition key — the
//! same for one key, different for two, never the key.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

use crate::support::{Reply, TempDir, TestServer, parse};

const SECRET: &str = "H2b8qLr0Xw5nV7cT4yK1mJ9sD3fG6aPz";

/// A concurrency rule, a tokens rule and a requests rule with partition keys, for `headers: ietf`.
fn config(dir: &TempDir) -> floodgate_config::Config {
    let secret = dir.write_atomic("pk-secret", &format!("{SECRET}\n"));
    parse(&format!(
        r#"headers: ietf
partition_keys:
  secret_file: {secret}
rules:
  - name: in-flight
    match: {{ route: "GET /export" }}
    key: [user]
    algorithm: concurrency
    limit: 2
    lease: 30s
  - name: tokens-per-min
    match: {{ route: "POST /chat" }}
    key: [user]
    algorithm: fixed_window
    limit: 1000
    window: 1m
    cost: tokens
  - name: per-user
    match: {{ route: "GET /items" }}
    key: [user]
    algorithm: fixed_window
    limit: 100
    window: 1m
    headers: {{ partition_key: true }}
"#,
        secret = secret.display()
    ))
}

async fn call(server: &TestServer, route: &str, user: &str, costs: serde_json::Value) -> Reply {
    let body = json!({"descriptors": {"route": route, "user": user}, "costs": costs}).to_string();
    let reply = server.post("/v1/check", body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply
}

#[tokio::test]
async fn a_concurrency_rule_says_concurrent_requests_and_a_tokens_rule_its_vendor_unit() {
    let dir = TempDir::new("headers-units");
    let server = TestServer::start(config(&dir)).await;
    let export = call(&server, "GET /export", "u1", json!({"requests": 1})).await;
    assert_eq!(export.header("ratelimit-policy"), Some(r#""in-flight";q=2;qu="concurrent-requests";w=30"#));
    assert_eq!(export.header("ratelimit"), Some(r#""in-flight";r=1;t=30"#), "no qu: the policy says it");
    let chat = call(&server, "POST /chat", "u1", json!({"tokens": 300})).await;
    assert_eq!(
        chat.header("ratelimit-policy"),
        Some(r#""tokens-per-min";q=1000;w=60;floodgate-qu="tokens""#)
    );
    assert!(chat.header("ratelimit").unwrap().starts_with(r#""tokens-per-min";r=700;t="#));
    server.stop().await;
}

/// The partition key of a reply: the bytes of `pk` on its policy item, which its `RateLimit`
/// item repeats.
fn pk(reply: &Reply) -> Vec<u8> {
    let of = |header: &str| {
        let value = reply.header(header).unwrap_or_else(|| panic!("no {header}"));
        let b64 = value.split(";pk=:").nth(1).and_then(|rest| rest.split(':').next());
        b64.unwrap_or_else(|| panic!("no pk in {header}: {value}")).to_owned()
    };
    let policy = of("ratelimit-policy");
    assert_eq!(of("ratelimit"), policy, "the RateLimit item names the same partition");
    STANDARD.decode(&policy).expect("an sf-binary's standard base64")
}

#[tokio::test]
async fn a_partition_key_is_stable_for_one_key_differs_between_keys_and_never_shows_the_key() {
    let dir = TempDir::new("headers-pk");
    let server = TestServer::start(config(&dir)).await;
    let users = ["u1", "alice@example.com", "tenant:42/user:7"];
    let mut seen = Vec::new();
    for user in users {
        let first = call(&server, "GET /items", user, json!({"requests": 1})).await;
        let again = call(&server, "GET /items", user, json!({"requests": 1})).await;
        assert_eq!(pk(&first), pk(&again), "{user}: one key, one partition key");
        assert_eq!(pk(&first).len(), 16);
        for reply in [&first, &again] {
            for (name, value) in reply.headers.iter() {
                let value = value.to_str().unwrap();
                let encoded = STANDARD.encode(user);
                assert!(
                    !value.contains(user) && !value.contains(encoded.trim_end_matches('=')),
                    "{name}: {value}"
                );
            }
            assert!(!pk(reply).windows(user.len()).any(|w| w == user.as_bytes()), "{user}");
        }
        seen.push(pk(&first));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), users.len(), "each key its own partition key");

    // The same secret on another instance names the key alike; the keyed hash is documented.
    let other = TestServer::start(config(&dir)).await;
    let u1 = pk(&call(&other, "GET /items", "u1", json!({"requests": 1})).await);
    let keys = floodgate::PartitionKeys::new(SECRET.as_bytes()).unwrap();
    assert_eq!(u1, keys.of(b"8:per-user4:user2:u1").as_bytes());
    assert_eq!(u1, pk(&call(&server, "GET /items", "u1", json!({"requests": 1})).await));
    other.stop().await;
    server.stop().await;
}
