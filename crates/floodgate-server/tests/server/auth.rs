//! Data-plane auth (`auth:` clients): every 401 and 403 of the HTTP API, gRPC and the admin API,
//! pinned descriptors, the `client` label, and token rotation by reload — on the real server.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use floodgate_app::ServeOptions;
use http::Method;

use crate::support::{Reply, TempDir, TestServer, check_body};

const BFF_TOKEN: &str = "bff-token-7f3a9c0e5b21d4";
const REPORTER_TOKEN: &str = "reporter-token-19a0c3e7";
const OPS_TOKEN: &str = "ops-token-5e8d2b4a6c1f09";
const AGENT_TOKEN: &str = "agent-token-3c9e1a7f0b42d6";

/// Three clients (their tokens in files of `dir`) and two rules: per tenant and per user.
fn config(dir: &TempDir) -> String {
    let bff = dir.write_atomic("bff.token", &format!("{BFF_TOKEN}\n"));
    let reporter = dir.write_atomic("reporter.token", REPORTER_TOKEN);
    let ops = dir.write_atomic("ops.token", OPS_TOKEN);
    let agent = dir.write_atomic("agent.token", AGENT_TOKEN);
    format!(
        "\
auth:
  clients:
    - name: shop-bff
      token_file: {}
      scopes: [check]
      descriptors: {{tenant: shop}}
    - name: reporter
      token_file: {}
      scopes: [report]
    - name: ops
      token_file: {}
      scopes: [admin]
    - name: agent
      token_file: {}
      scopes: [reserve]
      descriptors: {{tenant: shop}}
rules:
  - name: per-tenant
    key: [tenant]
    algorithm: fixed_window
    limit: 5
    window: 1h
",
        bff.display(),
        reporter.display(),
        ops.display(),
        agent.display()
    )
}

async fn start(name: &str) -> (TestServer, TempDir) {
    let dir = TempDir::new(name);
    let path = dir.write_atomic("floodgate.yaml", &config(&dir));
    let loaded = floodgate_config::load(&path).expect("valid configuration");
    let server = TestServer::with_options(loaded, ServeOptions::default().config_path(&path)).await;
    (server, dir)
}

async fn call(server: &TestServer, path: &str, body: &str, token: Option<&str>) -> Reply {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(b) = &bearer {
        headers.push(("authorization", b.as_str()));
    }
    server.request(Method::POST, path, body.to_owned(), &headers).await
}

fn assert_problem(reply: &Reply, status: u16, needle: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(reply.content_type(), "application/problem+json", "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["status"], status, "{body}");
    assert!(body["detail"].as_str().unwrap().contains(needle), "{body}");
    for token in [BFF_TOKEN, REPORTER_TOKEN, OPS_TOKEN, AGENT_TOKEN] {
        assert!(!reply.body.contains(token), "a token in an answer: {}", reply.body);
    }
}

#[tokio::test]
async fn a_call_without_a_token_or_with_an_unknown_one_is_401_on_every_endpoint() {
    let (server, _dir) = start("auth-401").await;
    let body = check_body(&[("tenant", "shop")], 1);
    for path in ["/v1/check", "/v1/peek", "/v1/report"] {
        let missing = call(&server, path, &body, None).await;
        assert_problem(&missing, 401, "Authorization: Bearer");
        assert_eq!(missing.header("www-authenticate"), Some("Bearer"));
        assert_eq!(missing.json()["type"], "https://floodgate.dev/problems/unauthorized");
        let unknown = call(&server, path, &body, Some("not-a-token-of-this-server")).await;
        assert_problem(&unknown, 401, "not one of this server's clients");
        // A token differing in its last character, or a prefix of one, is unknown too.
        let near = format!("{}x", &BFF_TOKEN[..BFF_TOKEN.len() - 1]);
        assert_problem(&call(&server, path, &body, Some(&near)).await, 401, "not one");
        assert_problem(&call(&server, path, &body, Some(&BFF_TOKEN[..10])).await, 401, "not one");
        let basic = server
            .request(Method::POST, path, body.clone(), &[("authorization", &format!("Basic {BFF_TOKEN}"))])
            .await;
        assert_problem(&basic, 401, "Authorization: Bearer");
    }
    // Nothing was consumed: the tenant's 5 are all there (a peek says 4 would remain after it).
    let allowed = call(&server, "/v1/peek", &body, Some(BFF_TOKEN)).await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert_eq!(allowed.json()["limits"][0]["remaining"], 4);
    server.stop().await;
}

#[tokio::test]
async fn a_client_without_the_endpoint_scope_is_403() {
    let (server, _dir) = start("auth-403").await;
    let body = check_body(&[("tenant", "shop")], 1);
    // shop-bff holds check: check and peek, not report.
    assert_eq!(call(&server, "/v1/check", &body, Some(BFF_TOKEN)).await.status, 200);
    assert_eq!(call(&server, "/v1/peek", &body, Some(BFF_TOKEN)).await.status, 200);
    let report = call(&server, "/v1/report", &body, Some(BFF_TOKEN)).await;
    assert_problem(&report, 403, "\"report\" scope");
    assert_eq!(report.json()["type"], "https://floodgate.dev/problems/forbidden");
    // reporter holds report only; ops holds admin only.
    assert_eq!(call(&server, "/v1/report", &body, Some(REPORTER_TOKEN)).await.status, 200);
    for path in ["/v1/check", "/v1/peek"] {
        assert_problem(&call(&server, path, &body, Some(REPORTER_TOKEN)).await, 403, "\"check\" scope");
        assert_problem(&call(&server, path, &body, Some(OPS_TOKEN)).await, 403, "\"check\" scope");
    }
    assert_problem(&call(&server, "/v1/report", &body, Some(OPS_TOKEN)).await, 403, "\"report\" scope");
    server.stop().await;
}

#[tokio::test]
async fn a_client_pinned_to_a_tenant_cannot_spend_another_tenants_quota() {
    let (server, _dir) = start("auth-pinned").await;
    // Another tenant's quota: refused, and nothing consumed from it.
    let other = call(&server, "/v1/check", &check_body(&[("tenant", "acme")], 1), Some(BFF_TOKEN)).await;
    assert_problem(&other, 403, "\"tenant\" = \"shop\"");
    let acme = call(&server, "/v1/report", &check_body(&[("tenant", "acme")], 1), Some(REPORTER_TOKEN)).await;
    assert_eq!(acme.json()["limits"][0]["remaining"], 4, "only the reporter's unit was taken from acme");
    // Without a tenant, the pinned one is charged.
    let none = call(&server, "/v1/check", &check_body(&[("user", "u1")], 1), Some(BFF_TOKEN)).await;
    assert_eq!(none.status, 200, "{}", none.body);
    assert_eq!(none.json()["limits"][0]["name"], "per-tenant");
    assert_eq!(none.json()["limits"][0]["remaining"], 4);
    let shop = call(&server, "/v1/check", &check_body(&[("tenant", "shop")], 1), Some(BFF_TOKEN)).await;
    assert_eq!(shop.json()["limits"][0]["remaining"], 3, "the same counter: tenant shop");
    server.stop().await;
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries.iter().map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() }).collect(),
        ..RateLimitDescriptor::default()
    }
}

async fn should_rate_limit(
    server: &TestServer,
    token: Option<&str>,
    entries: &[(&str, &str)],
) -> Result<i32, tonic::Status> {
    let mut client =
        RateLimitServiceClient::connect(format!("http://{}", server.grpc)).await.expect("gRPC connect");
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "anything".into(),
        descriptors: vec![descriptor(entries)],
        hits_addend: 1,
    });
    if let Some(token) = token {
        request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    client.should_rate_limit(request).await.map(|r| r.into_inner().overall_code)
}

#[tokio::test]
async fn grpc_needs_a_check_token_and_the_pinned_descriptor() {
    let (server, _dir) = start("auth-grpc").await;
    let shop = [("tenant", "shop")];
    let missing = should_rate_limit(&server, None, &shop).await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::Unauthenticated, "{missing:?}");
    let unknown = should_rate_limit(&server, Some("not-a-token-of-this-server"), &shop).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::Unauthenticated, "{unknown:?}");
    let scope = should_rate_limit(&server, Some(REPORTER_TOKEN), &shop).await.unwrap_err();
    assert_eq!(scope.code(), tonic::Code::PermissionDenied, "{scope:?}");
    assert!(scope.message().contains("\"check\" scope"), "{scope:?}");
    let other = should_rate_limit(&server, Some(BFF_TOKEN), &[("tenant", "acme")]).await.unwrap_err();
    assert_eq!(other.code(), tonic::Code::PermissionDenied, "{other:?}");
    let unnamed = should_rate_limit(&server, Some(BFF_TOKEN), &[("user", "u1")]).await.unwrap_err();
    assert_eq!(unnamed.code(), tonic::Code::PermissionDenied, "an Envoy descriptor must name it");
    assert_eq!(should_rate_limit(&server, Some(BFF_TOKEN), &shop).await.unwrap(), 1, "OK");
    // What was refused consumed nothing: shop has 4 of 5 left after the one allowed call (a peek
    // says 3 would remain after one more).
    let peek = call(&server, "/v1/peek", &check_body(&shop, 1), Some(BFF_TOKEN)).await;
    assert_eq!(peek.json()["limits"][0]["remaining"], 3);
    // A limit override states a limit: `check` alone does not allow it.
    let mut rls =
        RateLimitServiceClient::connect(format!("http://{}", server.grpc)).await.expect("gRPC connect");
    let mut overriding = descriptor(&shop);
    overriding.limit = Some(RateLimitOverride { requests_per_unit: 1000, unit: 2 });
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "anything".into(),
        descriptors: vec![overriding],
        hits_addend: 1,
    });
    request.metadata_mut().insert("authorization", format!("Bearer {BFF_TOKEN}").parse().unwrap());
    let refused = rls.should_rate_limit(request).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("\"state_limits\" scope"), "{refused:?}");
    server.stop().await;
}

#[tokio::test]
async fn the_admin_api_takes_an_admin_client_token_and_refuses_the_others() {
    let (server, _dir) = start("auth-admin").await;
    let get = |token: Option<&'static str>| {
        let server = &server;
        async move {
            let bearer = token.map(|t| format!("Bearer {t}"));
            let headers: Vec<(&str, &str)> =
                bearer.as_deref().map(|b| vec![("authorization", b)]).unwrap_or_default();
            server.request(Method::GET, "/admin/config", "", &headers).await
        }
    };
    // An admin client exists: loopback alone no longer admits.
    let anonymous = get(None).await;
    assert_problem(&anonymous, 401, "admin scope");
    assert_problem(&get(Some("not-a-token-of-this-server")).await, 401, "admin scope");
    let bff = get(Some(BFF_TOKEN)).await;
    assert_problem(&bff, 403, "\"admin\" scope");
    let ops = get(Some(OPS_TOKEN)).await;
    assert_eq!(ops.status, 200, "{}", ops.body);
    for token in [BFF_TOKEN, REPORTER_TOKEN, OPS_TOKEN] {
        assert!(!ops.body.contains(token), "the configuration shown names files, not tokens");
    }
    // Health and metrics stay open (probes and scrapers carry no token).
    assert_eq!(server.get("/healthz").await.status, 200);
    assert_eq!(server.get("/metrics").await.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn requests_are_counted_per_client_with_anonymous_for_the_rest() {
    let (server, _dir) = start("auth-metrics").await;
    let body = check_body(&[("tenant", "shop")], 1);
    call(&server, "/v1/check", &body, Some(BFF_TOKEN)).await;
    call(&server, "/v1/check", &body, Some(BFF_TOKEN)).await;
    call(&server, "/v1/report", &body, Some(BFF_TOKEN)).await;
    call(&server, "/v1/check", &body, None).await;
    should_rate_limit(&server, Some(BFF_TOKEN), &[("tenant", "shop")]).await.unwrap();
    let _ = should_rate_limit(&server, None, &[("tenant", "shop")]).await;
    let metrics = server.get("/metrics").await.body;
    for series in [
        r#"floodgate_requests_total{api="check",code="200",client="shop-bff"} 2"#,
        r#"floodgate_requests_total{api="report",code="403",client="shop-bff"} 1"#,
        r#"floodgate_requests_total{api="check",code="401",client="anonymous"} 1"#,
        r#"floodgate_requests_total{api="grpc",code="OK",client="shop-bff"} 1"#,
        r#"floodgate_requests_total{api="grpc",code="UNAUTHENTICATED",client="anonymous"} 1"#,
    ] {
        assert!(metrics.contains(series), "{series} in:\n{metrics}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_token_rotated_in_its_file_is_in_force_after_a_reload_without_a_restart() {
    let (server, dir) = start("auth-rotation").await;
    let body = check_body(&[("tenant", "shop")], 1);
    assert_eq!(call(&server, "/v1/check", &body, Some(BFF_TOKEN)).await.status, 200);

    let rotated = "bff-token-rotated-2b7e1f44";
    dir.write_atomic("bff.token", rotated);
    // The configuration's text is unchanged; the reload applies the new token all the same.
    let reload = server
        .request(Method::POST, "/admin/reload", "", &[("authorization", &format!("Bearer {OPS_TOKEN}"))])
        .await;
    assert_eq!(reload.status, 200, "{}", reload.body);
    assert_eq!(reload.json()["applied"], true, "{}", reload.body);

    assert_problem(&call(&server, "/v1/check", &body, Some(BFF_TOKEN)).await, 401, "not one");
    let fresh = call(&server, "/v1/check", &body, Some(rotated)).await;
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    assert_eq!(fresh.json()["limits"][0]["remaining"], 3, "counters survive the rotation");

    let audit = server
        .request(Method::GET, "/admin/audit", "", &[("authorization", &format!("Bearer {OPS_TOKEN}"))])
        .await;
    let last = audit.json()["records"].as_array().unwrap().last().cloned().unwrap();
    assert_eq!(last["changed"], serde_json::json!(["auth.clients.shop-bff"]), "{last}");
    assert!(!audit.body.contains(rotated) && !audit.body.contains(BFF_TOKEN), "{}", audit.body);

    // A token file that disappears is a rejected reload: the running tokens stay.
    std::fs::remove_file(dir.path().join("bff.token")).unwrap();
    let rejected = server
        .request(Method::POST, "/admin/reload", "", &[("authorization", &format!("Bearer {OPS_TOKEN}"))])
        .await;
    assert_eq!(rejected.status, 422, "{}", rejected.body);
    assert!(rejected.body.contains("cannot read the token file"), "{}", rejected.body);
    assert_eq!(call(&server, "/v1/check", &body, Some(rotated)).await.status, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_rotated_in_its_file_is_in_force_without_a_signal_while_the_configuration_is_watched() {
    let dir = TempDir::new("auth-token-watch");
    let path = dir.write_atomic("floodgate.yaml", &config(&dir));
    let loaded = floodgate_config::load(&path).expect("valid configuration");
    let server =
        TestServer::with_options(loaded, ServeOptions::default().config_path(&path).watch(true)).await;
    let body = check_body(&[("tenant", "shop")], 1);
    assert_eq!(call(&server, "/v1/check", &body, Some(BFF_TOKEN)).await.status, 200);

    let rotated = "bff-token-watched-6c1d0a93";
    // The token file lives beside the configuration here, but it is not a `*.yaml`: only the token
    // poll sees it change.
    dir.write_atomic("bff.token", rotated);
    let mut in_force = false;
    for _ in 0..50 {
        if call(&server, "/v1/check", &body, Some(rotated)).await.status == 200 {
            in_force = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(in_force, "the rotated token is in force within the poll");
    assert_problem(&call(&server, "/v1/check", &body, Some(BFF_TOKEN)).await, 401, "not one");
    let audit = server
        .request(Method::GET, "/admin/audit", "", &[("authorization", &format!("Bearer {OPS_TOKEN}"))])
        .await;
    let last = audit.json()["records"].as_array().unwrap().last().cloned().unwrap();
    assert_eq!(
        (last["source"].as_str(), &last["changed"]),
        (Some("watch"), &serde_json::json!(["auth.clients.shop-bff"])),
        "{last}"
    );
    server.stop().await;
}

#[tokio::test]
async fn reservations_usage_and_the_playground_need_their_scopes_and_pinned_descriptors() {
    let (server, _dir) = start("auth-reserve").await;
    let shop = check_body(&[("tenant", "shop")], 2);
    let acme = check_body(&[("tenant", "acme")], 2);
    // Reserve: the reserve scope, and the client's pinned tenant.
    assert_problem(&call(&server, "/v1/reserve", &shop, None).await, 401, "Authorization: Bearer");
    assert_problem(&call(&server, "/v1/reserve", &shop, Some(BFF_TOKEN)).await, 403, "\"reserve\" scope");
    assert_problem(
        &call(&server, "/v1/reserve", &acme, Some(AGENT_TOKEN)).await,
        403,
        "\"tenant\" = \"shop\"",
    );
    let held = call(&server, "/v1/reserve", &shop, Some(AGENT_TOKEN)).await;
    assert_eq!(held.status, 200, "{}", held.body);
    let id = held.json()["reservation"].as_str().expect("a reservation id").to_owned();
    let settle = serde_json::json!({ "reservation": id }).to_string();
    for path in ["/v1/commit", "/v1/release"] {
        assert_problem(&call(&server, path, &settle, None).await, 401, "Authorization: Bearer");
        assert_problem(&call(&server, path, &settle, Some(BFF_TOKEN)).await, 403, "\"reserve\" scope");
    }
    let released = call(&server, "/v1/release", &settle, Some(AGENT_TOKEN)).await;
    assert_eq!(released.status, 200, "{}", released.body);

    // Usage: the check scope, and only the client's own tenant.
    assert_problem(&usage(&server, "tenant=shop", None).await, 401, "Authorization: Bearer");
    assert_problem(&usage(&server, "tenant=shop", Some(AGENT_TOKEN)).await, 403, "\"check\" scope");
    assert_problem(&usage(&server, "tenant=acme", Some(BFF_TOKEN)).await, 403, "\"tenant\" = \"shop\"");
    let own = usage(&server, "tenant=shop", Some(BFF_TOKEN)).await;
    assert_eq!(own.status, 200, "{}", own.body);
    assert_eq!(own.json()["used"], 0, "the released reservation gave its 2 back: {}", own.body);
    // Without a tenant, the pinned one is read.
    assert_eq!(usage(&server, "", Some(BFF_TOKEN)).await.json()["used"], 0);

    // The playground: the check scope, or the admin API's access (the dashboard calls it).
    let sim = r#"{"algorithm":"fixed_window","limit":1,"window":"1s","requests":[{"at_ms":0},{"at_ms":1}]}"#;
    assert_problem(&call(&server, "/v1/simulate", sim, None).await, 401, "Authorization: Bearer");
    assert_problem(&call(&server, "/v1/simulate", sim, Some(REPORTER_TOKEN)).await, 403, "\"check\" scope");
    for token in [BFF_TOKEN, OPS_TOKEN] {
        let simulated = call(&server, "/v1/simulate", sim, Some(token)).await;
        assert_eq!(simulated.status, 200, "{}", simulated.body);
        assert_eq!(simulated.json()["decisions"][1]["allowed"], false, "{}", simulated.body);
    }
    server.stop().await;
}

async fn usage(server: &TestServer, query: &str, token: Option<&str>) -> Reply {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer.iter().map(|b| ("authorization", b.as_str())).collect();
    server.request(Method::GET, &format!("/v1/usage?rule=per-tenant&{query}"), String::new(), &headers).await
}
#[tokio::test]
async fn every_other_v1_path_is_gated_by_its_scope_before_its_handler() {
    let dir = TempDir::new("auth-v1-paths");
    let reserver = dir.write_atomic("reserver.token", "reserver-token-0a1b2c3d4e");
    let text = config(&dir).replace(
        "    - name: ops\n",
        &format!(
            "    - name: reserver\n      token_file: {}\n      scopes: [reserve]\n    - name: ops\n",
            reserver.display()
        ),
    );
    let path = dir.write_atomic("floodgate.yaml", &text);
    let server = TestServer::start(floodgate_config::load(&path).unwrap()).await;
    for endpoint in ["/v1/reserve", "/v1/commit", "/v1/release"] {
        assert_problem(&call(&server, endpoint, "{}", None).await, 401, "Authorization: Bearer");
        assert_problem(&call(&server, endpoint, "{}", Some(BFF_TOKEN)).await, 403, "\"reserve\" scope");
        // Past the gate: whatever the endpoint answers (this server may not have it: 404).
        let passed = call(&server, endpoint, "{}", Some("reserver-token-0a1b2c3d4e")).await;
        assert!(passed.status != 401 && passed.status != 403, "{endpoint}: {}", passed.body);
    }
    assert_problem(&call(&server, "/v1/anything-else", "{}", None).await, 401, "Authorization: Bearer");
    assert_problem(
        &call(&server, "/v1/anything-else", "{}", Some(REPORTER_TOKEN)).await,
        403,
        "\"check\" scope",
    );
    // Outside /v1 nothing changes.
    assert_eq!(server.get("/healthz").await.status, 200);
    server.stop().await;
}
