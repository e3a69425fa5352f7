//! `GET /openapi.json` and `docs/openapi.json`: the served document is the committed one, lists
//! every route the server has, is the same through the listener and the router; and the
//! behaviours schemathesis (`scripts/api-fuzz`) found where the server and the document disagreed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use floodgate::Rule;
use floodgate_app::{App, ServeOptions};
use http::Method;
use serde_json::Value;
use tower::ServiceExt;

use crate::support::{TestServer, from_rules, parse, per_minute};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Set to rewrite `docs/openapi.json` from the server rather than compare.
const WRITE: &str = "FLOODGATE_WRITE_OPENAPI";

async fn server() -> TestServer {
    TestServer::start(from_rules([Rule::new("per-user", per_minute(10)).key(["user"])])).await
}

#[tokio::test]
async fn the_served_document_is_the_committed_one() {
    let s = server().await;
    let served = s.get("/openapi.json").await;
    assert_eq!(served.status, 200);
    assert_eq!(served.content_type(), "application/json");
    let committed = workspace().join("docs/openapi.json");
    if std::env::var_os(WRITE).is_some() {
        std::fs::write(&committed, &served.body).unwrap();
    }
    let text = std::fs::read_to_string(&committed).unwrap_or_default();
    assert!(
        text == served.body,
        "docs/openapi.json is not the document the server serves: regenerate it with \
         `cargo run -p floodgate-server -- openapi > docs/openapi.json` (or run this test with \
         {WRITE}=1), and commit it"
    );
    assert_eq!(served.body, floodgate_api::http::openapi::json(), "`floodgate openapi` prints it");
    s.stop().await;
}

#[tokio::test]
async fn the_listener_and_the_router_serve_the_same_document() {
    let s = server().await;
    let served = s.get("/openapi.json").await;
    let app = App::new(from_rules([]), ServeOptions::default()).unwrap();
    let request = http::Request::get("/openapi.json").body(axum::body::Body::empty()).unwrap();
    let response = floodgate_api::router(&app).oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    assert_eq!(served.body.as_bytes(), &body[..]);
    s.stop().await;
}

/// The listener sends the check API straight to its handler and the rest through the router;
/// `App::router()` (for embedding) routes everything. Both answer alike.
#[tokio::test]
async fn the_listener_and_the_router_answer_alike() {
    let rules = || from_rules([Rule::new("per-user", per_minute(2)).key(["user"])]);
    let s = TestServer::start(rules()).await;
    let app = App::new(rules(), ServeOptions::default()).unwrap();
    let many: serde_json::Map<String, Value> = (0..65).map(|i| (format!("d{i}"), "v".into())).collect();
    let many = serde_json::json!({ "descriptors": many }).to_string();
    let cases: Vec<(Method, &str, String)> = vec![
        (Method::POST, "/v1/check", r#"{"descriptors": {"user": "a"}}"#.into()),
        (Method::POST, "/v1/check", r#"{"descriptors": {"user": "a"}}"#.into()),
        (Method::POST, "/v1/check", r#"{"descriptors": {"user": "a"}}"#.into()),
        (Method::POST, "/v1/peek", r#"{"descriptors": {"user": "a"}, "cost": 3.0}"#.into()),
        (Method::POST, "/v1/report", r#"{"descriptors": {"user": "a"}, "domain": null}"#.into()),
        (Method::POST, "/v1/check", "not json".into()),
        (Method::POST, "/v1/check", many),
        (Method::POST, "/v1/check", r#"{"descriptors": {}, "cost": 18446744073709551616}"#.into()),
        (Method::GET, "/v1/check", String::new()),
        (Method::PUT, "/healthz", String::new()),
        (Method::GET, "/nowhere", String::new()),
    ];
    for (method, path, body) in cases {
        let listener = s.request(method.clone(), path, body.clone(), &[]).await;
        let request = http::Request::builder()
            .method(method.clone())
            .uri(path)
            .body(axum::body::Body::from(body))
            .unwrap();
        let routed = floodgate_api::router(&app).oneshot(request).await.unwrap();
        let status = routed.status().as_u16();
        let headers = routed.headers().clone();
        let body = http_body_util::BodyExt::collect(routed.into_body()).await.unwrap().to_bytes();
        let what = format!("{method} {path}");
        assert_eq!(listener.status, status, "{what}");
        for name in ["content-type", "allow", "x-ratelimit-limit", "x-ratelimit-remaining"] {
            assert_eq!(
                listener.header(name),
                headers.get(name).map(|v| v.to_str().unwrap()),
                "{what}: {name}"
            );
        }
        // Seconds rounded up, a few microseconds apart: present on both, not always equal.
        for name in ["retry-after", "ratelimit", "ratelimit-policy"] {
            assert_eq!(listener.header(name).is_some(), headers.contains_key(name), "{what}: {name}");
        }
        let routed_body = String::from_utf8_lossy(&body);
        if status == 429 || status == 200 && path.starts_with("/v1/") {
            // The same decision, a few microseconds apart: compare all but the times.
            let strip = |v: &str| {
                let mut v: Value = serde_json::from_str(v).unwrap();
                for l in v["limits"].as_array_mut().unwrap() {
                    l.as_object_mut().unwrap().retain(|k, _| !k.ends_with("_ms"));
                }
                v.as_object_mut().unwrap().remove("retry_after_ms");
                v
            };
            assert_eq!(strip(&listener.body), strip(&routed_body), "{what}");
        } else {
            assert_eq!(listener.body, routed_body, "{what}");
        }
    }
    s.stop().await;
}

/// The `.rs` files under `dir`, its folders' included.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `(method, path)` of every `.route(...)` in the API crate's `src/http/`, read from the sources.
fn routes() -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../floodgate-api/src/http"), &mut files);
    assert!(files.len() >= 10, "the API's sources were found: {files:?}");
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for (start, _) in text.match_indices(".route(\"") {
            let rest = &text[start + ".route(\"".len()..];
            let path = &rest[..rest.find('"').unwrap()];
            // The route's methods: `get(`, `post(`, `.delete(` … up to the end of its line.
            let line = &rest[..rest.find('\n').unwrap_or(rest.len())];
            for method in ["get", "post", "put", "delete", "patch"] {
                let called = line.match_indices(&format!("{method}(")).any(|(i, _)| {
                    i == 0
                        || !line.as_bytes()[i - 1].is_ascii_alphanumeric() && line.as_bytes()[i - 1] != b'_'
                });
                if called {
                    routes.insert((method.to_owned(), path.to_owned()));
                }
            }
        }
    }
    routes
}

#[tokio::test]
async fn the_document_has_every_route_and_no_other() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let documented: BTreeSet<(String, String)> = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| ops.as_object().unwrap().keys().map(move |m| (m.clone(), path.clone())))
        .collect();
    let routes = routes();
    assert!(routes.len() >= 14, "{routes:?}");
    assert_eq!(documented, routes);

    // And each answers (no 404 or 405 for what the document lists).
    let s = server().await;
    for (method, path) in &documented {
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        if path == "/admin/stats/stream" {
            // An event stream does not end: its status line is enough.
            assert_eq!(status_line(s.http, path).await, "HTTP/1.1 200 OK", "{path}");
            continue;
        }
        let reply = s.request(method.clone(), path, "{}", &[]).await;
        if path == "/admin/clock" {
            // On the process clock it answers its own documented 404, not the router's.
            assert!(reply.body.contains("--manual-clock"), "{method} {path}: {}", reply.body);
            continue;
        }
        assert!(![404, 405].contains(&reply.status), "{method} {path}: {}", reply.status);
    }
    s.stop().await;
}

#[tokio::test]
async fn the_document_states_the_bounds_of_a_check() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let body = &document["components"]["schemas"]["CheckRequest"];
    assert_eq!(body["properties"]["descriptors"]["maxProperties"], floodgate_http::wire::MAX_DESCRIPTORS);
    assert_eq!(body["properties"]["descriptors"]["additionalProperties"]["type"], "string");
    assert_eq!(body["properties"]["cost"]["minimum"], 1);
    assert_eq!(body["properties"]["cost"]["maximum"], floodgate_http::wire::MAX_COST);
    assert_eq!(body["properties"]["domain"]["type"], serde_json::json!(["string", "null"]));
    assert_eq!(body["additionalProperties"], false);
    let denied = &document["paths"]["/v1/check"]["post"]["responses"]["429"];
    assert_eq!(denied["headers"]["Retry-After"]["required"], true);
    for header in [
        "RateLimit",
        "RateLimit-Policy",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
        "floodgate-tag",
    ] {
        assert!(denied["headers"][header].is_object(), "{header}");
    }
    assert_eq!(document["components"]["securitySchemes"]["adminToken"]["scheme"], "bearer");
}

/// Every `/v1` operation authorizes its caller when the configuration has `auth` clients
/// (`tests/server/auth.rs`): the document says a client token may be sent — optional, since
/// without `auth` none is needed — and lists the 401 and 403 it may answer.
#[tokio::test]
async fn every_data_plane_operation_takes_an_optional_client_token_and_states_its_refusals() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let scheme = &document["components"]["securitySchemes"]["clientToken"];
    assert_eq!((&scheme["type"], &scheme["scheme"]), (&"http".into(), &"bearer".into()), "{scheme}");
    let mut operations = 0;
    for (path, ops) in document["paths"].as_object().unwrap() {
        if !path.starts_with("/v1/") {
            continue;
        }
        for (method, op) in ops.as_object().unwrap() {
            operations += 1;
            let what = format!("{method} {path}");
            let security = op["security"].as_array().unwrap_or_else(|| panic!("{what}: no security"));
            assert_eq!(security[0], serde_json::json!({}), "{what}: no token needed without auth");
            assert!(security.contains(&serde_json::json!({"clientToken": []})), "{what}: {security:?}");
            let responses = &op["responses"];
            assert_eq!(
                responses["401"]["content"]["application/problem+json"]["schema"]["allOf"][1]["properties"]["type"]
                    ["enum"],
                serde_json::json!(["https://floodgate.dev/problems/unauthorized"]),
                "{what}"
            );
            assert!(responses["401"]["headers"]["WWW-Authenticate"].is_object(), "{what}");
            assert_eq!(
                responses["403"]["content"]["application/problem+json"]["schema"]["allOf"][1]["properties"]["type"]
                    ["enum"],
                serde_json::json!(["https://floodgate.dev/problems/forbidden"]),
                "{what}"
            );
        }
    }
    assert_eq!(operations, 8, "check, peek, report, reserve, commit, release, usage, simulate");
    // The playground also admits the admin API's callers (the dashboard calls it).
    let simulate = &document["paths"]["/v1/simulate"]["post"]["security"];
    assert!(simulate.as_array().unwrap().contains(&serde_json::json!({"adminToken": []})), "{simulate}");
}

// === behaviours schemathesis found ===

#[tokio::test]
async fn a_whole_cost_written_with_a_fraction_or_an_exponent_is_that_cost() {
    let s = server().await;
    for (i, cost) in ["3.0", "3e0", "0.3e1"].iter().enumerate() {
        let body = format!(r#"{{"descriptors": {{"user": "u{i}"}}, "cost": {cost}}}"#);
        let reply = s.post("/v1/check", body).await;
        assert_eq!(reply.status, 200, "{cost}: {}", reply.body);
        assert_eq!(reply.json()["limits"][0]["remaining"], 7, "{cost}");
    }
    let half = s.post("/v1/check", r#"{"descriptors": {"user": "u"}, "cost": 2.5}"#).await;
    assert_eq!(half.status, 422);
    s.stop().await;
}

#[tokio::test]
async fn a_cost_above_the_maximum_is_refused_naming_the_maximum() {
    let s = server().await;
    let max = floodgate_http::wire::MAX_COST;
    let reported =
        s.post("/v1/report", format!(r#"{{"descriptors": {{"user": "u"}}, "cost": {max}}}"#)).await;
    assert_eq!(reported.status, 200, "{}", reported.body);
    let over = s.post("/v1/report", r#"{"descriptors": {"user": "u"}, "cost": 18446744073709551616}"#).await;
    assert_eq!(over.status, 422);
    assert_eq!(over.json()["detail"], format!("\"cost\" must be at most {max}."));
    s.stop().await;
}

#[tokio::test]
async fn usage_problems_are_documented_and_answered_as_problem_json() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let responses = &document["paths"]["/v1/usage"]["get"]["responses"];
    for status in ["404", "422", "503"] {
        assert!(
            responses[status]["content"]["application/problem+json"].is_object(),
            "{status}: {}",
            responses[status]
        );
        assert!(responses[status]["content"]["application/json"].is_null(), "{status}");
    }
    let s = server().await;
    for (query, status) in [("rule=nope", 404), ("rule=per-user", 422)] {
        let reply = s.get(&format!("/v1/usage?{query}")).await;
        assert_eq!(reply.status, status, "{query}: {}", reply.body);
        assert_eq!(reply.content_type(), "application/problem+json", "{query}");
    }
    s.stop().await;
}

/// The usage query's descriptors were an open object: a list value (a name repeated) or a
/// descriptor named `rule` (a second `rule`) passed the schema and were refused. The schema now
/// says one string per name, and no name `rule`.
#[tokio::test]
async fn usage_descriptors_are_one_string_per_name_and_none_is_named_rule() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let descriptors = &document["paths"]["/v1/usage"]["get"]["parameters"][1];
    assert_eq!(descriptors["name"], "descriptors");
    assert_eq!(descriptors["schema"]["additionalProperties"]["type"], "string", "{descriptors}");
    assert_eq!(descriptors["schema"]["propertyNames"]["not"]["const"], "rule", "{descriptors}");
    let s = server().await;
    for query in ["rule=per-user&user=a&user=b", "rule=per-user&user=a&rule=per-user"] {
        let reply = s.get(&format!("/v1/usage?{query}")).await;
        assert_eq!(reply.status, 422, "{query}: {}", reply.body);
    }
    assert_eq!(s.get("/v1/usage?rule=per-user&user=u1").await.status, 200, "the document's example");
    s.stop().await;
}

#[tokio::test]
async fn empty_costs_are_refused_by_the_schema_and_by_the_server() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let costs = &document["components"]["schemas"]["CheckRequest"]["properties"]["costs"];
    assert_eq!(costs["minProperties"], 1, "{costs}");
    let s = server().await;
    for costs in ["{}", r#"{"requests": 0}"#] {
        let reply =
            s.post("/v1/check", format!(r#"{{"descriptors": {{"user": "u"}}, "costs": {costs}}}"#)).await;
        assert_eq!(reply.status, 422, "{costs}: {}", reply.body);
        assert!(
            reply.json()["detail"].as_str().unwrap().contains("at least one dimension"),
            "{}",
            reply.body
        );
    }
    s.stop().await;
}

/// Plain schemathesis built a body from the document's own examples and defaults — `cost` and
/// `costs` together — which the server refuses: the schema now says so with `not`.
#[tokio::test]
async fn cost_and_costs_together_are_refused_by_the_schema_and_by_the_server() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let body = &document["components"]["schemas"]["CheckRequest"];
    assert_eq!(body["not"]["required"], serde_json::json!(["cost", "costs"]), "{body}");
    let s = server().await;
    let both =
        s.post("/v1/check", r#"{"descriptors": {"user": "u"}, "cost": 1, "costs": {"requests": 1}}"#).await;
    assert_eq!(both.status, 422, "{}", both.body);
    let null = s.post("/v1/check", r#"{"descriptors": {"user": "u"}, "cost": 1, "costs": null}"#).await;
    assert_eq!(null.status, 200, "a null `costs` is no `costs`: {}", null.body);
    s.stop().await;
}

#[tokio::test]
async fn a_whole_commit_cost_written_with_a_fraction_is_that_cost() {
    let s = server().await;
    for (i, cost) in ["1.0", "1e0"].iter().enumerate() {
        let reserved =
            s.post("/v1/reserve", format!(r#"{{"descriptors": {{"user": "c{i}"}}, "cost": 2}}"#)).await;
        assert_eq!(reserved.status, 200, "{}", reserved.body);
        let id = reserved.json()["reservation"].as_str().unwrap().to_owned();
        let body = format!(r#"{{"reservation": "{id}", "costs": {{"requests": {cost}}}}}"#);
        let committed = s.post("/v1/commit", body).await;
        assert_eq!(committed.status, 200, "{cost}: {}", committed.body);
        assert_eq!(committed.json()["charged"]["requests"], 1, "{cost}: {}", committed.body);
    }
    let half = s.post("/v1/commit", r#"{"reservation": "x", "costs": {"requests": 2.5}}"#).await;
    assert_eq!(half.status, 422, "{}", half.body);
    s.stop().await;
}

#[tokio::test]
async fn reservation_problems_are_documented_and_answered_as_problem_json() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let paths = &document["paths"];
    for (path, statuses) in [
        ("/v1/reserve", &["400", "413", "422", "503"][..]),
        ("/v1/commit", &["400", "404", "409", "413", "422", "503"][..]),
        ("/v1/release", &["400", "404", "409", "413", "422", "503"][..]),
    ] {
        for status in statuses {
            let response = &paths[path]["post"]["responses"][status];
            assert!(
                response["content"]["application/problem+json"].is_object(),
                "{path} {status}: {response}"
            );
        }
    }
    let ttl = &document["components"]["schemas"]["ReserveRequest"]["properties"]["ttl"];
    assert!(ttl["pattern"].is_string(), "{ttl}");
    let s = server().await;
    let unknown = s.post("/v1/commit", r#"{"reservation": "nope"}"#).await;
    assert_eq!(
        (unknown.status, unknown.content_type()),
        (404, "application/problem+json"),
        "{}",
        unknown.body
    );
    let reserved = s.post("/v1/reserve", r#"{"descriptors": {"user": "r"}, "ttl": "1m"}"#).await;
    let id = reserved.json()["reservation"].as_str().unwrap().to_owned();
    let release = format!(r#"{{"reservation": "{id}"}}"#);
    assert_eq!(s.post("/v1/release", release.clone()).await.status, 200);
    let settled = s.post("/v1/commit", release).await;
    assert_eq!(
        (settled.status, settled.content_type()),
        (409, "application/problem+json"),
        "{}",
        settled.body
    );
    let long = s.post("/v1/reserve", r#"{"descriptors": {"user": "r"}, "ttl": "48h"}"#).await;
    assert_eq!(long.status, 422, "{}", long.body);
    assert!(long.json()["detail"].as_str().unwrap().starts_with("\"ttl\""), "{}", long.body);
    s.stop().await;
}

/// Plain schemathesis drew `ttl`s from the old pattern (the duration grammar) that the server
/// refused — `"   "`, `0s`, `48h` — and sent `"ttl": null`, which the server took as the default
/// though the schema said a string. The pattern is now exactly what the server reads.
#[tokio::test]
async fn a_ttl_is_what_its_pattern_says_and_null_is_the_default() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let ttl = &document["components"]["schemas"]["ReserveRequest"]["properties"]["ttl"];
    assert_eq!(ttl["type"], serde_json::json!(["string", "null"]), "{ttl}");
    let pattern = ttl["pattern"].as_str().unwrap();
    assert_eq!(pattern, floodgate_config::duration::clock_pattern(std::time::Duration::from_secs(86_400)));
    let s = server().await;
    for (i, (ttl, status)) in [
        ("null", 200),
        ("\"90m\"", 200),
        ("\"1h30m\"", 200),
        ("\"24h\"", 200),
        ("\"1h90m\"", 422),
        ("\"0s\"", 422),
        ("\"   \"", 422),
        ("\"24h1s\"", 422),
    ]
    .into_iter()
    .enumerate()
    {
        let reply =
            s.post("/v1/reserve", format!(r#"{{"descriptors": {{"user": "t{i}"}}, "ttl": {ttl}}}"#)).await;
        assert_eq!(reply.status, status, "{ttl}: {}", reply.body);
    }
    s.stop().await;
}

#[tokio::test]
async fn a_null_domain_is_the_native_policy() {
    let s = server().await;
    let reply = s.post("/v1/check", r#"{"descriptors": {"user": "u1"}, "domain": null}"#).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["limits"][0]["name"], "per-user");
    s.stop().await;
}

#[tokio::test]
async fn a_null_rollback_body_is_the_version_before_the_current() {
    let s = TestServer::start(parse(
        "rules:\n  - {name: a, key: [user], algorithm: fixed_window, limit: 5, window: 1m}\n",
    ))
    .await;
    let v2 = "rules:\n  - {name: b, key: [user], algorithm: fixed_window, limit: 5, window: 1m}\n";
    assert_eq!(s.request(Method::POST, "/admin/config", v2, &[]).await.status, 200);
    let back = s.request(Method::POST, "/admin/rollback", "null", &[]).await;
    assert_eq!(back.status, 200, "{}", back.body);
    assert_eq!(
        (back.json()["version"].clone(), back.json()["added"].clone()),
        (3.into(), serde_json::json!(["a"]))
    );
    s.stop().await;
}

#[tokio::test]
async fn a_whole_rollback_version_written_with_a_fraction_is_that_version() {
    let s = TestServer::start(parse(
        "rules:\n  - {name: a, key: [user], algorithm: fixed_window, limit: 5, window: 1m}\n",
    ))
    .await;
    let v2 = "rules:\n  - {name: b, key: [user], algorithm: fixed_window, limit: 5, window: 1m}\n";
    assert_eq!(s.request(Method::POST, "/admin/config", v2, &[]).await.status, 200);
    let back = s.request(Method::POST, "/admin/rollback", r#"{"version": 1.0}"#, &[]).await;
    assert_eq!(back.status, 200, "{}", back.body);
    assert_eq!(back.json()["added"], serde_json::json!(["a"]));
    let half = s.request(Method::POST, "/admin/rollback", r#"{"version": 1.5}"#, &[]).await;
    assert_eq!(half.status, 422, "{}", half.body);
    s.stop().await;
}

#[tokio::test]
async fn the_apply_answer_names_each_field_once() {
    let s = server().await;
    let v2 = "rules:\n  - {name: b, key: [user], algorithm: fixed_window, limit: 5, window: 1m}\n";
    let applied = s.request(Method::POST, "/admin/config", v2, &[]).await;
    assert_eq!(applied.status, 200);
    assert_eq!(applied.body.matches("\"changed\"").count(), 1, "{}", applied.body);
    let body = applied.json();
    assert_eq!(body["applied"], true);
    assert_eq!(
        (body["added"].clone(), body["removed"].clone()),
        (serde_json::json!(["b"]), serde_json::json!(["per-user"]))
    );
    assert_eq!(body["changed"], serde_json::json!([]));
    s.stop().await;
}

/// The stats stream was documented as one `StatsHistory`, which schemathesis read as every event's
/// schema (the first event is `{"event": "history", "data": "<json>"}`): the schema is one event's
/// now, each name with the JSON its `data` holds.
#[tokio::test]
async fn the_stats_stream_documents_each_event_with_its_data() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let events = &document["components"]["schemas"]["StatsEvent"]["oneOf"];
    let named: Vec<(Value, Value)> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["properties"]["event"]["enum"][0].clone(),
                e["properties"]["data"]["contentSchema"]["$ref"].clone(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [
            ("history".into(), "#/components/schemas/StatsHistory".into()),
            ("second".into(), "#/components/schemas/Second".into()),
            ("stats".into(), "#/components/schemas/Snapshot".into()),
        ]
    );
    let s = server().await;
    let first = first_event(s.http, "/admin/stats/stream").await;
    let data = first.strip_prefix("event: history\ndata: ").unwrap_or_else(|| panic!("{first}"));
    let history: Value = serde_json::from_str(data.trim_end()).unwrap();
    assert!(history["seconds"].is_array(), "{history}");
    s.stop().await;
}

/// The first server-sent event of `GET path`, up to its blank line.
async fn first_event(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n").as_bytes()).await.unwrap();
    let mut reader = tokio::io::BufReader::new(stream);
    let mut line = String::new();
    // The head, then the chunked body's first chunk size.
    loop {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
    }
    let mut event = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
        if line.starts_with("event:") || !event.is_empty() {
            event.push_str(&line);
        }
        if event.ends_with("\n\n") {
            return event;
        }
    }
}

/// The status line of `GET path`, without reading the body.
async fn status_line(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n").as_bytes()).await.unwrap();
    let mut line = String::new();
    tokio::io::BufReader::new(stream).read_line(&mut line).await.unwrap();
    line.trim_end().to_owned()
}

/// `#/components/schemas/<name>` of `document`, or `schema` itself when it is no reference.
fn resolved<'d>(document: &'d Value, schema: &'d Value) -> &'d Value {
    match schema["$ref"].as_str() {
        Some(pointer) => document.pointer(pointer.trim_start_matches('#')).unwrap_or(&Value::Null),
        None => schema,
    }
}

/// Plain schemathesis sent `"anchor": null` (and other algorithms' parameters) to
/// `token_bucket`, which the document allowed and the server refused: the body is now one schema
/// per algorithm, each naming exactly the parameters it takes.
#[test]
fn the_simulation_body_is_one_schema_per_algorithm_naming_exactly_its_parameters() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let simulate = &document["components"]["schemas"]["Simulate"];
    assert_eq!(simulate["discriminator"]["propertyName"], "algorithm", "{simulate}");
    let variants = simulate["oneOf"].as_array().unwrap();
    assert_eq!(variants.len(), floodgate_config::algorithm::ALGORITHMS.len());
    for (algorithm, variant) in floodgate_config::algorithm::ALGORITHMS.iter().zip(variants) {
        let variant = resolved(&document, variant);
        // A quota's is one schema per period: its anchor differs.
        let bodies: Vec<&Value> = match variant["oneOf"].as_array() {
            Some(periods) => periods.iter().collect(),
            None => vec![variant],
        };
        for body in bodies {
            let name = algorithm.name();
            assert_eq!(body["properties"]["algorithm"]["enum"], serde_json::json!([name]));
            assert_eq!(body["additionalProperties"], false, "{name}");
            let documented: BTreeSet<&str> =
                body["properties"].as_object().unwrap().keys().map(String::as_str).collect();
            let mut takes: BTreeSet<&str> = algorithm.parameter_names().collect();
            if body["properties"]["period"]["enum"] == serde_json::json!(["day"]) {
                takes.remove("anchor");
            }
            takes.extend(["algorithm", "requests", "sample_ms", "until_ms"]);
            // A penalty box, for every algorithm that counts (not concurrency's permits).
            if algorithm.kind != floodgate::LimitKind::Concurrency {
                takes.insert("block_for");
            }
            assert_eq!(documented, takes, "{name}: its parameters and the simulation's own, no other");
            let required: BTreeSet<&str> =
                body["required"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
            let mut needs: BTreeSet<&str> =
                algorithm.parameters.iter().filter(|p| p.required()).map(|p| p.name).collect();
            needs.extend(["algorithm", "requests"]);
            assert_eq!(required, needs, "{name}");
        }
    }
}

/// The request bodies' examples of the document (each operation's, its schema's, and for a
/// `oneOf` each alternative's), for the operations whose answer depends on nothing but the body
/// and the policy.
fn request_examples(document: &Value) -> Vec<(String, Value)> {
    let mut examples = Vec::new();
    for path in ["/v1/check", "/v1/peek", "/v1/report", "/v1/reserve", "/v1/simulate"] {
        let body = &document["paths"][path]["post"]["requestBody"]["content"]["application/json"];
        let mut schemas = vec![resolved(document, &body["schema"])];
        while let Some(schema) = schemas.pop() {
            for example in schema["examples"].as_array().into_iter().flatten() {
                examples.push((path.to_owned(), example.clone()));
            }
            for alternative in schema["oneOf"].as_array().into_iter().flatten() {
                schemas.push(resolved(document, alternative));
            }
        }
        examples.extend(body["example"].as_object().map(|e| (path.to_owned(), Value::Object(e.clone()))));
    }
    examples
}

/// Every example of a request in the document is one the server accepts, under the policy
/// `scripts/api-fuzz` fuzzes (`scripts/api/native.yaml`); schemathesis sends them first.
#[tokio::test]
async fn every_request_example_in_the_document_is_accepted() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let policy = std::fs::read_to_string(workspace().join("scripts/api/native.yaml")).unwrap();
    let s = TestServer::start(parse(&policy)).await;
    let examples = request_examples(&document);
    assert!(examples.len() >= 15, "{examples:?}");
    for (path, example) in examples {
        let reply = s.post(&path, example.to_string()).await;
        assert!(matches!(reply.status, 200 | 429), "{path} {example}: {} {}", reply.status, reply.body);
    }
    for (path, query) in [("/v1/usage", "rule=per-user&user=u1"), ("/admin/keys", "rule=per-user&user=u1")] {
        let reply = s.get(&format!("{path}?{query}")).await;
        assert_eq!(reply.status, 200, "{path}?{query}: {}", reply.body);
    }
    s.stop().await;
}

/// Plain schemathesis drew whole numbers written as `18820.0` for `integer` parameters, and
/// `at_ms` near 2^64 (an overflow in the budget's arithmetic): a whole number is that number
/// however it is written, and simulated time ends at `MAX_AT_MS`, as the schema says.
#[tokio::test]
async fn a_simulation_takes_whole_numbers_however_written_and_ends_at_the_latest_instant() {
    let document: Value = serde_json::from_str(&floodgate_api::http::openapi::json()).unwrap();
    let at_ms = &document["components"]["schemas"]["SimulatedRequest"]["properties"]["at_ms"];
    assert_eq!(at_ms["maximum"], floodgate_api::playground::MAX_AT_MS, "{at_ms}");
    let s = server().await;
    let body = r#"{"algorithm": "fixed_window", "limit": 2.0, "window": "1s", "requests": [{"at_ms": 0.0, "cost": 1e0}], "sample_ms": 5e2, "until_ms": 1000.0}"#;
    let reply = s.post("/v1/simulate", body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["limit"], 2);
    let max = floodgate_api::playground::MAX_AT_MS;
    for at_ms in [max, max + 1] {
        let body = format!(
            r#"{{"algorithm": "budget", "limit": 1, "ttl": "1d", "requests": [{{"at_ms": {at_ms}}}]}}"#
        );
        let reply = s.post("/v1/simulate", body).await;
        assert_eq!(reply.status, if at_ms == max { 200 } else { 400 }, "{at_ms}: {}", reply.body);
    }
    s.stop().await;
}
