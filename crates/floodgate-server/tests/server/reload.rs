//! Hot reload: an atomic rename in the watched directory, rejected files, counters kept.

use std::time::Duration;

use floodgate_app::ServeOptions;
use floodgate_app::auth::AdminCaller;
use http::Method;
use serde_json::Value;

use crate::support::{TempDir, TestServer, eventually};

fn config(limit: u64) -> String {
    format!(
        "\
rules:
  - name: per-user
    key: [user]
    algorithm: sliding_window
    limit: {limit}
    window: 60s
"
    )
}

async fn watched(dir: &TempDir, text: &str) -> TestServer {
    let path = dir.write_atomic("floodgate.yaml", text);
    let loaded = floodgate_config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut options = ServeOptions::default().config_path(&path).watch(true);
    options.debounce = Duration::from_millis(50);
    let server = TestServer::with_options(loaded, options).await;
    // Let the watcher start before the test changes anything.
    tokio::time::sleep(Duration::from_millis(100)).await;
    server
}

async fn version(server: &TestServer) -> u64 {
    server.get("/admin/config").await.json()["version"].as_u64().unwrap()
}

async fn audit(server: &TestServer) -> Vec<Value> {
    server.request(Method::GET, "/admin/audit", "", &[]).await.json()["records"].as_array().unwrap().clone()
}

fn user_limit(reply: &crate::support::Reply) -> (u64, u64) {
    let body = reply.json();
    let l = &body["limits"][0];
    (l["limit"].as_u64().unwrap(), l["remaining"].as_u64().unwrap())
}

#[tokio::test]
async fn an_atomic_rename_is_seen_and_counters_are_kept() {
    let dir = TempDir::new("reload-rename");
    let server = watched(&dir, &config(5)).await;
    for _ in 0..3 {
        server.check(&[("user", "u1")]).await;
    }
    dir.write_atomic("floodgate.yaml", &config(10));
    assert!(eventually(|| async { version(&server).await == 2 }).await, "reloaded");
    // 3 used of the new 10; this check leaves 6.
    assert_eq!(user_limit(&server.check(&[("user", "u1")]).await), (10, 6));
    let records = audit(&server).await;
    assert_eq!(records[1]["source"], "watch");
    assert_eq!(records[1]["result"], "applied");
    assert_eq!(records[1]["changed"], serde_json::json!(["per-user"]));
    server.stop().await;
}

#[tokio::test]
async fn an_invalid_file_is_rejected_recorded_and_the_running_config_keeps_serving() {
    let dir = TempDir::new("reload-invalid");
    let server = watched(&dir, &config(5)).await;
    dir.write_atomic("floodgate.yaml", "rules:\n  - name: per-user\n    key: [user]\n    algorithm: sliding_window\n    limit: 0\n    window: 60s\n");
    assert!(
        eventually(|| async { audit(&server).await.iter().any(|r| r["result"] == "rejected") }).await,
        "the rejection is audited"
    );
    let records = audit(&server).await;
    let rejected = records.iter().find(|r| r["result"] == "rejected").unwrap();
    assert_eq!(rejected["source"], "watch");
    assert_eq!(rejected["version"], Value::Null);
    assert_eq!(rejected["error"]["line"], 5, "{rejected}");
    assert_eq!(version(&server).await, 1);
    assert_eq!(user_limit(&server.check(&[("user", "u1")]).await), (5, 4), "still serving the old policy");
    let metrics = server.get("/metrics").await.body;
    assert!(metrics.contains(r#"floodgate_config_reloads_total{result="rejected"} 1"#), "{metrics}");

    // Fixing the file applies it.
    dir.write_atomic("floodgate.yaml", &config(7));
    assert!(eventually(|| async { version(&server).await == 2 }).await);
    server.stop().await;
}

#[tokio::test]
async fn unrelated_files_in_the_directory_do_not_reload() {
    let dir = TempDir::new("reload-unrelated");
    let server = watched(&dir, &config(5)).await;
    dir.write_atomic("notes.txt", "hello");
    dir.write_atomic("other.yaml", "not: [valid");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(audit(&server).await.len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_kubernetes_style_symlink_swap_is_seen() {
    let dir = TempDir::new("reload-k8s");
    // /dir/..v1/floodgate.yaml, /dir/..data -> ..v1, /dir/floodgate.yaml -> ..data/floodgate.yaml
    let v1 = dir.path().join("..v1");
    std::fs::create_dir(&v1).unwrap();
    std::fs::write(v1.join("floodgate.yaml"), config(5)).unwrap();
    std::os::unix::fs::symlink("..v1", dir.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/floodgate.yaml", dir.path().join("floodgate.yaml")).unwrap();
    let path = dir.path().join("floodgate.yaml");
    let loaded = floodgate_config::load(&path).unwrap();
    let mut options = ServeOptions::default().config_path(&path).watch(true);
    options.debounce = Duration::from_millis(50);
    let server = TestServer::with_options(loaded, options).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    // As the kubelet updates a ConfigMap volume: the new data in a new directory, a `..data_tmp`
    // link to it renamed over `..data`, then the old directory removed — twice, so that the watch
    // outlives a swap.
    let swap = |from: &str, to: &str, limit: u64| {
        let next = dir.path().join(to);
        std::fs::create_dir(&next).unwrap();
        std::fs::write(next.join("floodgate.yaml"), config(limit)).unwrap();
        std::os::unix::fs::symlink(to, dir.path().join("..data_tmp")).unwrap();
        std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
        std::fs::remove_dir_all(dir.path().join(from)).unwrap();
    };
    swap("..v1", "..v2", 9);
    assert!(eventually(|| async { version(&server).await == 2 }).await, "reloaded");
    assert_eq!(user_limit(&server.check(&[("user", "u1")]).await).0, 9);
    swap("..v2", "..v3", 4);
    assert!(eventually(|| async { version(&server).await == 3 }).await, "reloaded again");
    assert_eq!(user_limit(&server.check(&[("user", "u2")]).await).0, 4);
    server.stop().await;
}

#[tokio::test]
async fn a_directory_configuration_reloads_when_one_of_its_files_changes() {
    let dir = TempDir::new("reload-directory");
    dir.write_atomic("native.yaml", &config(5));
    dir.write_atomic(
        "edge.yaml",
        "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
    );
    let loaded = floodgate_config::load(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let mut options = ServeOptions::default().config_path(dir.path()).watch(true);
    options.debounce = Duration::from_millis(50);
    let server = TestServer::with_options(loaded, options).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    dir.write_atomic(
        "edge.yaml",
        "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 7}\n",
    );
    assert!(eventually(|| async { version(&server).await == 2 }).await, "reloaded");
    let edge = server.post("/v1/check", r#"{"domain": "edge", "descriptors": {"ip": "192.0.2.7"}}"#).await;
    assert_eq!(user_limit(&edge), (7, 6));
    assert_eq!(audit(&server).await[1]["changed"], serde_json::json!(["edge/ip"]));
    server.stop().await;
}

/// The native policy's engine lives as long as the server and follows every applied change: a
/// tower layer built on it before a reload (an app embedding the server, the gateway) decides on
/// the configuration in force after it, with the counters kept, and after a rollback too.
#[tokio::test]
async fn a_tower_layer_on_the_servers_engine_follows_reloads_and_rollbacks() {
    use floodgate_tower::RateLimitLayer;
    use http::{HeaderName, Request, StatusCode};
    use tower::{Layer, ServiceExt};

    let app = floodgate_app::App::new(crate::support::parse(&config(2)), ServeOptions::default()).unwrap();
    let layer = RateLimitLayer::new(std::sync::Arc::clone(app.control().engine()))
        .header(HeaderName::from_static("x-user-id"), "user");
    let service = layer.layer(tower::service_fn(|_: Request<String>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hi")))
    }));
    let call = || async {
        let request = Request::get("/").header("x-user-id", "u1").body(String::new()).unwrap();
        service.clone().oneshot(request).await.unwrap().status()
    };
    assert_eq!(
        [call().await, call().await, call().await],
        [StatusCode::OK, StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]
    );

    let applied = app.control().apply_text(&config(5), AdminCaller::audit_name(None)).await.unwrap();
    assert!(applied.changed);
    assert_eq!(call().await, StatusCode::OK, "the new limit, the old counter: 3 of 5");
    assert_eq!(
        [call().await, call().await, call().await],
        [StatusCode::OK, StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]
    );

    app.control().rollback(None, AdminCaller::audit_name(None)).await.unwrap();
    assert_eq!(call().await, StatusCode::TOO_MANY_REQUESTS, "back to 2 a minute, 5 already used");
}
