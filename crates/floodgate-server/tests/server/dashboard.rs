//! The dashboard's data (`/admin/stats`, its stream) and page (`/dashboard`) on the real server:
//! decisions per rule each second, the flooding key on top, the stream's history and ticks, the
//! admin access rules, assets that fetch nothing from elsewhere.

use std::time::Duration;

use floodgate_app::ServeOptions;
use floodgate_config as config;
use floodgate_testkit::wait;
use http::Method;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::TestServer;

const LOGIN_CONFIG: &str = "rules:
  - name: login-per-ip
    match: { route: \"POST /login\" }
    key: [ip]
    algorithm: fixed_window
    limit: 3
    window: 1h
  - name: api-per-user
    key: [user]
    algorithm: token_bucket
    rate: 100/s
";

fn rule<'a>(stats: &'a Value, name: &str) -> &'a Value {
    stats["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == name)
        .unwrap_or_else(|| panic!("{name}: {stats}"))
}

#[tokio::test]
async fn stats_count_each_rules_decisions_per_second_and_name_the_flooding_key() {
    let server = TestServer::start(config::parse("test.yaml", LOGIN_CONFIG).unwrap()).await;
    // A flood from one address, a few other addresses, users within their limit.
    for i in 0..40 {
        server.check(&[("route", "POST /login"), ("ip", "203.0.113.66")]).await;
        if i % 4 == 0 {
            let ip = format!("198.51.100.{i}");
            for _ in 0..5 {
                server.check(&[("route", "POST /login"), ("ip", ip.as_str())]).await;
            }
        }
        server.check(&[("route", "GET /items"), ("user", "u1")]).await;
    }
    // Peeks are not decisions.
    server.peek(&[("route", "POST /login"), ("ip", "203.0.113.66")]).await;

    // The next tick (within a second or two) counts them, all in one second or spread over two.
    let counted = |stats: &Value| {
        stats["t"].as_u64().unwrap_or(0) > 0
            && rule(stats, "login-per-ip")["outcomes_last_minute"]["allowed"].as_u64() == Some(3 + 10 * 3)
            && !rule(stats, "login-per-ip")["top_offenders"].as_array().unwrap().is_empty()
    };
    let deadline = tokio::time::Instant::now() + wait::HANG_GUARD;
    let mut stats = server.get("/admin/stats").await.json();
    while !counted(&stats) {
        assert!(tokio::time::Instant::now() < deadline, "never counted: {stats}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        stats = server.get("/admin/stats").await.json();
    }
    let login = rule(&stats, "login-per-ip");
    let outcomes = &login["outcomes_last_minute"];
    // 40 from the flood (3 pass), 10 addresses × 5 (3 pass each).
    assert_eq!(outcomes["allowed"], 3 + 30);
    assert_eq!(outcomes["denied"], 37 + 20);
    let ratio = login["denial_ratio_last_minute"].as_f64().unwrap();
    assert!((ratio - 57.0 / 90.0).abs() < 1e-9, "{ratio}");
    let top = &login["top_offenders"][0];
    assert_eq!(top["key"], "ip=203.0.113.66");
    assert_eq!(top["denied"], 37);
    assert_eq!(top["error"], 0);
    assert_eq!(login["top_offenders"][1]["denied"], 2, "the others denied twice each");
    let api = rule(&stats, "api-per-user");
    assert_eq!(api["outcomes_last_minute"]["allowed"], 40);
    assert!(api["top_offenders"].as_array().unwrap().is_empty());
    assert_eq!(stats["config"]["version"], 1);
    assert_eq!(stats["store"]["kind"], "memory");
    assert_eq!(stats["store"]["breaker"], Value::Null);
    assert!(stats["store"]["keys"].as_u64().unwrap() >= 12, "{stats}");
    assert!(stats["store"]["latency_us"]["p99"].as_f64().unwrap() > 0.0, "{stats}");

    // Raw keys never become metric labels.
    let metrics = server.get("/metrics").await.body;
    assert!(!metrics.contains("203.0.113.66"), "a key in /metrics");
    server.stop().await;
}

/// Reads from `stream` until `text` has been received; false when the stream ends first, or when
/// `text` has not come within the hang guard.
async fn read_until(stream: &mut TcpStream, seen: &mut String, text: &str) -> bool {
    let deadline = tokio::time::Instant::now() + wait::HANG_GUARD;
    let mut buffer = [0u8; 16 * 1024];
    while !seen.contains(text) {
        let read = tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await;
        match read {
            Ok(Ok(n)) if n > 0 => seen.push_str(&String::from_utf8_lossy(&buffer[..n])),
            _ => return false,
        }
    }
    true
}

#[tokio::test]
async fn the_stream_sends_its_history_then_a_second_and_a_snapshot_each_second_and_ends_on_shutdown() {
    let server = TestServer::start(config::builtin()).await;
    server.check(&[("user", "u1"), ("route", "POST /chat")]).await;
    let mut stream = TcpStream::connect(server.http).await.unwrap();
    stream.write_all(b"GET /admin/stats/stream HTTP/1.1\r\nhost: localhost\r\n\r\n").await.unwrap();
    let mut seen = String::new();
    assert!(read_until(&mut stream, &mut seen, "event: history\ndata: {\"seconds\":[").await, "{seen}");
    let head = seen.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{seen}");
    assert!(head.contains("content-type: text/event-stream"), "{seen}");
    assert!(read_until(&mut stream, &mut seen, "event: second\ndata: {\"t\":").await, "{seen}");
    assert!(read_until(&mut stream, &mut seen, "event: stats\ndata: {\"t\":").await, "{seen}");
    assert!(seen.contains("\"rule\":\"chat-per-user\""), "{seen}");

    // Graceful shutdown does not wait for the stream: it ends.
    wait::finished("stopping with a stream open", server.stop()).await;
    let mut rest = Vec::new();
    let _ = wait::finished("the stream's end", stream.read_to_end(&mut rest)).await;
}

#[tokio::test]
async fn the_dashboard_follows_the_admin_access_rules_and_fetches_nothing_from_elsewhere() {
    let options = ServeOptions::default().admin_token("s3cret");
    let server = TestServer::with_options(config::builtin(), options).await;
    let auth = [("authorization", "Bearer s3cret")];
    for path in [
        "/dashboard",
        "/dashboard/dashboard.js",
        "/dashboard/dashboard.css",
        "/admin/stats",
        "/admin/stats/stream",
    ] {
        let refused = server.get(path).await;
        assert_eq!(refused.status, 401, "{path}");
    }
    let page = server.request(Method::GET, "/dashboard", "", &auth).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.content_type(), "text/html; charset=utf-8");
    let policy = page.header("content-security-policy").unwrap();
    assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"), "{policy}");
    for id in [
        "panel-traffic",
        "panel-rules",
        "panel-offenders",
        "panel-store",
        "panel-config",
        "panel-keys",
        "panel-playground",
    ] {
        assert!(page.body.contains(&format!("id=\"{id}\"")), "{id}");
    }
    let script = server.request(Method::GET, "/dashboard/dashboard.js", "", &auth).await;
    assert_eq!((script.status, script.content_type()), (200, "text/javascript; charset=utf-8"));
    let style = server.request(Method::GET, "/dashboard/dashboard.css", "", &auth).await;
    assert_eq!((style.status, style.content_type()), (200, "text/css; charset=utf-8"));
    // Every URL the page uses is this server's own.
    for (name, text) in [("page", &page.body), ("script", &script.body), ("style", &style.body)] {
        for scheme in ["http://", "https://", "//cdn", "@import"] {
            assert!(!text.contains(scheme), "{name} refers to {scheme}…");
        }
    }
    for endpoint in [
        "/admin/stats/stream",
        "/admin/stats",
        "/admin/audit",
        "/admin/rollback",
        "/admin/keys?",
        "/v1/simulate",
    ] {
        assert!(script.body.contains(endpoint), "the script does not use {endpoint}");
    }
    let stats = server.request(Method::GET, "/admin/stats", "", &auth).await;
    assert_eq!(stats.status, 200);
    server.stop().await;
}
