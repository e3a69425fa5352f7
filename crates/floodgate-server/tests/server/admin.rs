//! The admin API: configuration (get, validate, apply, reload, rollback), audit, keys (and their
//! resets' audit records), access.

use floodgate::Rule;
use floodgate_app::{App, ServeOptions};
use floodgate_server::Server;
use http::Method;
use serde_json::{Value, json};

use crate::support::{TempDir, TestServer, from_rules, parse, per_minute};

const V1: &str = "\
rules:
  - name: per-user
    key: [user]
    algorithm: sliding_window
    limit: 5
    window: 60s
";

const V2: &str = "\
rules:
  - name: per-user
    key: [user]
    algorithm: sliding_window
    limit: 8
    window: 60s
  - name: per-tenant
    key: [tenant]
    algorithm: fixed_window
    limit: 100
    window: 1h
";

/// `rate: ten/s` on line 6, column 11.
const INVALID: &str = "\
rules:
  - name: api-burst
    key: [api_key]
    algorithm: token_bucket
    burst: 20
    rate: ten/s
";

async fn admin(server: &TestServer, method: Method, path: &str, body: &str) -> (u16, Value) {
    let reply = server.request(method, path, body.to_owned(), &[]).await;
    let json = reply.json();
    (reply.status, json)
}

fn remaining(reply: &crate::support::Reply, rule: &str) -> u64 {
    let body = reply.json();
    body["limits"].as_array().unwrap().iter().find(|l| l["name"] == rule).unwrap()["remaining"]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn get_config_shows_the_running_text_version_and_hash() {
    let server = TestServer::start(parse(V1)).await;
    let (status, config) = admin(&server, Method::GET, "/admin/config", "").await;
    assert_eq!(status, 200);
    assert_eq!(config["version"], 1);
    assert_eq!(config["text"], V1);
    assert_eq!(config["rules"], 1);
    assert_eq!(config["hash"].as_str().unwrap().len(), 16);
    server.stop().await;
}

#[tokio::test]
async fn validate_reports_errors_with_line_column_and_field_and_applies_nothing() {
    let server = TestServer::start(parse(V1)).await;
    let (status, bad) = admin(&server, Method::POST, "/admin/config/validate", INVALID).await;
    assert_eq!(status, 422);
    assert_eq!(bad["valid"], false);
    assert_eq!(bad["error"]["line"], 6, "{bad}");
    assert!(bad["error"]["column"].as_u64().is_some(), "{bad}");
    assert!(bad["error"]["field"].as_str().unwrap().contains("rate"), "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("ten/s"), "{bad}");

    let (status, good) = admin(&server, Method::POST, "/admin/config/validate", V2).await;
    assert_eq!(status, 200, "{good}");
    assert_eq!(good["valid"], true);
    assert_eq!(good["added"], serde_json::json!(["per-tenant"]));
    assert_eq!(good["changed"], serde_json::json!(["per-user"]));
    assert_eq!(
        admin(&server, Method::GET, "/admin/config", "").await.1["version"],
        1,
        "validating applies nothing"
    );
    server.stop().await;
}

#[tokio::test]
async fn apply_audit_and_rollback() {
    let server = TestServer::start(parse(V1)).await;
    let u1 = [("user", "u1")];
    for _ in 0..3 {
        assert_eq!(server.check(&u1).await.status, 200);
    }

    let (status, applied) = admin(&server, Method::POST, "/admin/config", V2).await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!((applied["applied"].clone(), applied["version"].clone()), (Value::Bool(true), Value::from(2)));
    // Counters survive: 3 of the new 8 used, a check of 1 leaves 4.
    assert_eq!(remaining(&server.check(&u1).await, "per-user"), 4);

    let (status, rejected) = admin(&server, Method::POST, "/admin/config", INVALID).await;
    assert_eq!(status, 422);
    assert_eq!(rejected["applied"], false);
    assert_eq!(rejected["error"]["line"], 6);
    assert_eq!(server.check(&u1).await.status, 200, "the running configuration stays");

    // Applying the same text again changes nothing.
    let (_, same) = admin(&server, Method::POST, "/admin/config", V2).await;
    assert_eq!((same["applied"].clone(), same["version"].clone()), (Value::Bool(false), Value::from(2)));

    let (status, back) = admin(&server, Method::POST, "/admin/rollback", "").await;
    assert_eq!(status, 200, "{back}");
    assert_eq!(back["version"], 3);
    assert_eq!(back["removed"], serde_json::json!(["per-tenant"]));
    // 5 used of the restored 5.
    assert_eq!(server.check(&u1).await.status, 429);

    let (status, forward) = admin(&server, Method::POST, "/admin/rollback", r#"{"version": 2}"#).await;
    assert_eq!(status, 200, "{forward}");
    assert_eq!(forward["version"], 4);
    let (status, missing) = admin(&server, Method::POST, "/admin/rollback", r#"{"version": 99}"#).await;
    assert_eq!(status, 404, "{missing}");

    let (_, audit) = admin(&server, Method::GET, "/admin/audit", "").await;
    let records = audit["records"].as_array().unwrap();
    let summary: Vec<(Value, Value, Value)> =
        records.iter().map(|r| (r["version"].clone(), r["source"].clone(), r["result"].clone())).collect();
    assert_eq!(
        summary,
        [
            (1.into(), "startup".into(), "applied".into()),
            (2.into(), "admin".into(), "applied".into()),
            (Value::Null, "admin".into(), "rejected".into()),
            (3.into(), "rollback".into(), "applied".into()),
            (4.into(), "rollback".into(), "applied".into()),
        ]
    );
    assert_eq!(records[1]["added"], serde_json::json!(["per-tenant"]));
    assert_eq!(records[1]["changed"], serde_json::json!(["per-user"]));
    assert!(records[2]["error"]["message"].as_str().unwrap().contains("ten/s"));
    assert_eq!(records[3]["restored"], 1);
    assert!(records.iter().all(|r| r["time"].as_str().unwrap().ends_with('Z')));
    assert_eq!(records[1]["hash"].as_str().unwrap().len(), 16);
    // No token configured: the admin API's changes are a loopback peer's; the start is no one's.
    let by: Vec<&Value> = records.iter().map(|r| &r["by"]).collect();
    assert_eq!(
        by,
        [&Value::Null, &json!("loopback"), &json!("loopback"), &json!("loopback"), &json!("loopback")]
    );
    server.stop().await;
}

#[tokio::test]
async fn configuration_changes_through_the_admin_api_are_audited_with_who_asked() {
    let dir = TempDir::new("admin-by");
    let path = dir.write_atomic("floodgate.yaml", V1);
    let config = floodgate_config::load(&path).unwrap();
    let options = ServeOptions::default().admin_token("s3cret").config_path(&path);
    let server = TestServer::with_options(config, options).await;
    let token = [("authorization", "Bearer s3cret")];
    let post = |path: &'static str, body: &str| server.request(Method::POST, path, body.to_owned(), &token);
    assert_eq!(post("/admin/config", V2).await.status, 200);
    assert_eq!(post("/admin/config", INVALID).await.status, 422);
    assert_eq!(post("/admin/rollback", "").await.status, 200);
    dir.write_atomic("floodgate.yaml", V2);
    assert_eq!(post("/admin/reload", "").await.status, 200);
    dir.write_atomic("floodgate.yaml", INVALID);
    assert_eq!(post("/admin/reload", "").await.status, 422);

    let audit = server.request(Method::GET, "/admin/audit", "", &token).await.json();
    let records: Vec<(Value, Value, Value)> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["source"].clone(), r["result"].clone(), r["by"].clone()))
        .collect();
    let record = |source: &str, result: &str, by: Value| (json!(source), json!(result), by);
    assert_eq!(
        records,
        [
            record("startup", "applied", Value::Null),
            record("admin", "applied", json!("admin_token")),
            record("admin", "rejected", json!("admin_token")),
            record("rollback", "applied", json!("admin_token")),
            record("file", "applied", json!("admin_token")),
            record("file", "rejected", json!("admin_token")),
        ],
        "{audit}"
    );
    server.stop().await;
}

#[tokio::test]
async fn reload_without_a_file_is_a_409() {
    let server = TestServer::start(parse(V1)).await;
    let (status, body) = admin(&server, Method::POST, "/admin/reload", "").await;
    assert_eq!(status, 409);
    assert!(body["error"]["message"].as_str().unwrap().contains("--config"));
    server.stop().await;
}

#[tokio::test]
async fn reload_from_the_file_through_the_admin_api() {
    let dir = TempDir::new("admin-reload");
    let path = dir.write_atomic("floodgate.yaml", V1);
    let config = floodgate_config::load(&path).unwrap();
    let server = TestServer::with_options(config, ServeOptions::default().config_path(&path)).await;
    dir.write_atomic("floodgate.yaml", V2);
    let (status, body) = admin(&server, Method::POST, "/admin/reload", "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["version"], 2);
    let (_, audit) = admin(&server, Method::GET, "/admin/audit", "").await;
    assert_eq!(audit["records"][1]["source"], "file");
    assert_eq!(audit["records"][1]["path"], path.display().to_string());
    server.stop().await;
}

#[tokio::test]
async fn keys_can_be_inspected_and_reset() {
    let server = TestServer::start(from_rules([Rule::new("chat", per_minute(10))
        .when("route", "POST /chat")
        .key(["user"])]))
    .await;
    let chat = [("user", "u1"), ("route", "POST /chat")];
    for _ in 0..4 {
        server.check(&chat).await;
    }
    let path = "/admin/keys?rule=chat&user=u1&route=POST%20%2Fchat";
    let (status, key) = admin(&server, Method::GET, path, "").await;
    assert_eq!(status, 200, "{key}");
    assert_eq!(
        (key["limit"].clone(), key["remaining"].clone(), key["allowed"].clone()),
        (10.into(), 6.into(), true.into())
    );
    let (_, again) = admin(&server, Method::GET, path, "").await;
    assert_eq!(again["remaining"], 6, "inspecting consumes nothing");

    let (status, reset) = admin(&server, Method::DELETE, "/admin/keys?rule=chat&user=u1", "").await;
    assert_eq!(status, 200);
    assert_eq!(reset["reset"], true);
    assert_eq!(admin(&server, Method::GET, path, "").await.1["remaining"], 10);
    assert_eq!(admin(&server, Method::DELETE, "/admin/keys?rule=chat&user=u1", "").await.1["reset"], false);

    assert_eq!(admin(&server, Method::GET, "/admin/keys?rule=nope&user=u1", "").await.0, 404);
    assert_eq!(admin(&server, Method::GET, "/admin/keys?user=u1", "").await.0, 422);
    let (status, not_applicable) = admin(&server, Method::GET, "/admin/keys?rule=chat&user=u1", "").await;
    assert_eq!(status, 422, "{not_applicable}");
    assert_eq!(admin(&server, Method::DELETE, "/admin/keys?rule=chat", "").await.0, 422);
    server.stop().await;
}

#[tokio::test]
async fn a_key_of_a_rule_counting_another_dimension_is_inspected_in_it() {
    let server = TestServer::start(from_rules([
        Rule::new("calls", per_minute(10)).key(["tenant"]),
        Rule::new("spend", per_minute(50_000_000)).key(["tenant"]).cost("usd_micros"),
    ]))
    .await;
    let body = r#"{"descriptors": {"tenant": "acme"}, "costs": {"requests": 1, "usd_micros": 12340000}}"#;
    assert_eq!(server.post("/v1/check", body).await.status, 200);
    let (status, spend) = admin(&server, Method::GET, "/admin/keys?rule=spend&tenant=acme", "").await;
    assert_eq!(status, 200, "{spend}");
    assert_eq!(spend["dimension"], "usd_micros");
    assert_eq!((spend["limit"].clone(), spend["used"].clone()), (50_000_000.into(), 12_340_000.into()));
    assert_eq!(spend["remaining"], 50_000_000 - 12_340_000);
    let (_, calls) = admin(&server, Method::GET, "/admin/keys?rule=calls&tenant=acme", "").await;
    assert_eq!((calls["dimension"].clone(), calls["used"].clone()), ("requests".into(), 1.into()));
    server.stop().await;
}

#[tokio::test]
async fn key_resets_are_audited_with_the_key_who_asked_and_what_became_of_it() {
    let config = from_rules([Rule::new("chat", per_minute(10)).key(["user"])]);
    let server = TestServer::with_options(config, ServeOptions::default().admin_token("s3cret")).await;
    let token = [("authorization", "Bearer s3cret")];
    assert_eq!(server.check(&[("user", "u1")]).await.status, 200);
    for had_state in [true, false] {
        let reset = server.request(Method::DELETE, "/admin/keys?rule=chat&user=u1", "", &token).await;
        assert_eq!((reset.status, reset.json()["reset"].clone()), (200, Value::Bool(had_state)));
    }
    // Refused before the store is asked: nothing was reset, nothing is recorded.
    assert_eq!(server.request(Method::DELETE, "/admin/keys?rule=nope&user=u1", "", &token).await.status, 404);
    assert_eq!(server.request(Method::DELETE, "/admin/keys?rule=chat", "", &token).await.status, 422);

    let audit = server.request(Method::GET, "/admin/audit", "", &token).await.json();
    let records = audit["records"].as_array().unwrap();
    assert_eq!(records.len(), 3, "the start, and the two resets: {audit}");
    for (record, had_state) in records[1..].iter().zip([true, false]) {
        assert_eq!(record["source"], "key_reset", "{record}");
        assert_eq!(record["result"], "applied", "{record}");
        assert_eq!(record["by"], "admin_token", "{record}");
        assert_eq!(
            record["key"],
            json!({"rule": "chat", "domain": null, "descriptors": {"user": "u1"}, "reset": had_state})
        );
        assert_eq!((record["version"].clone(), record["error"].clone()), (json!(1), Value::Null));
        assert!(record["time"].as_str().unwrap().ends_with('Z'), "{record}");
    }
    assert_eq!(records[0]["by"], Value::Null, "a configuration at start has no caller");
    server.stop().await;
}

#[tokio::test]
async fn a_key_reset_the_store_fails_is_audited_as_rejected_with_its_error() {
    // Nothing listens on port 1: every call to this store fails.
    let server = TestServer::start(parse(
        "store: { kind: redis, url: \"redis://127.0.0.1:1\", deadline: 200ms }\n\
         rules:\n  - {name: chat, algorithm: fixed_window, limit: 5, window: 1m, key: [user]}\n",
    ))
    .await;
    let (status, body) = admin(&server, Method::DELETE, "/admin/keys?rule=chat&user=u1", "").await;
    assert_eq!(status, 503, "{body}");
    let (_, audit) = admin(&server, Method::GET, "/admin/audit", "").await;
    let record = audit["records"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(record["source"], "key_reset", "{record}");
    assert_eq!(record["result"], "rejected", "{record}");
    assert_eq!(record["by"], "loopback", "no token: a loopback peer");
    assert_eq!(record["key"]["reset"], Value::Null, "{record}");
    assert!(!record["error"]["message"].as_str().unwrap().is_empty(), "{record}");
    server.stop().await;
}

#[tokio::test]
async fn with_a_token_the_admin_api_requires_it_even_from_loopback() {
    let config = from_rules([Rule::new("r", per_minute(1)).key(["user"])]);
    let server = TestServer::with_options(config, ServeOptions::default().admin_token("s3cret")).await;
    let none = server.request(Method::GET, "/admin/config", "", &[]).await;
    assert_eq!(none.status, 401);
    assert_eq!(none.header("www-authenticate"), Some("Bearer"));
    assert_eq!(none.content_type(), "application/problem+json");
    let wrong = server.request(Method::GET, "/admin/config", "", &[("authorization", "Bearer nope")]).await;
    assert_eq!(wrong.status, 401);
    let right = server.request(Method::GET, "/admin/audit", "", &[("authorization", "Bearer s3cret")]).await;
    assert_eq!(right.status, 200);
    // The check API needs no token.
    assert_eq!(server.check(&[("user", "u1")]).await.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn a_non_loopback_listener_needs_an_admin_token() {
    let config = || from_rules([Rule::new("r", per_minute(1)).key(["user"])]);
    let any = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let refused = Server::new(App::new(config(), ServeOptions::default()).unwrap(), any, None).unwrap_err();
    assert!(refused.to_string().contains("--admin-token"), "{refused}");

    let any = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let with_token = App::new(config(), ServeOptions::default().admin_token("t")).unwrap();
    assert!(Server::new(with_token, any, None).is_ok());

    // Without a token, a non-loopback peer is refused (the rule the middleware applies).
    let peer = Some("192.0.2.10:4000".parse().unwrap());
    assert!(!floodgate_api::http::admitted(None, peer, None));
}
