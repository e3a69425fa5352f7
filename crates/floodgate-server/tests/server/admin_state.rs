//! The admin state directory with the real binary: what the admin API changed — configurations,
//! rollback history, the audit log, the gateway's switches — is on disk when the call is answered,
//! and a server killed with `kill -9` starts again with it.

use std::net::SocketAddr;

use serde_json::Value;

use crate::binary::{Floodgate, GOOD, raw, run};
use crate::support::TempDir;

/// The JSON body of a raw answer, with its status.
async fn call(http: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let answer = raw(http, method, path, body).await;
    let status = answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// How many of `n` checks for user `u` are allowed.
async fn allowed(http: SocketAddr, user: &str, n: usize) -> usize {
    let mut allowed = 0;
    for _ in 0..n {
        let body = format!(r#"{{"descriptors": {{"user": "{user}"}}}}"#);
        if call(http, "POST", "/v1/check", &body).await.0 == 200 {
            allowed += 1;
        }
    }
    allowed
}

fn audit_summary(audit: &Value) -> Vec<(String, Option<u64>, Option<u64>)> {
    audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["source"].as_str().unwrap().to_owned(), r["version"].as_u64(), r["restored"].as_u64()))
        .collect()
}

fn s(source: &str, version: u64, restored: Option<u64>) -> (String, Option<u64>, Option<u64>) {
    (source.to_owned(), Some(version), restored)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_applied_configuration_its_history_and_audit_survive_kill_9() {
    let dir = TempDir::new("state-kill");
    let config = dir.write_atomic("floodgate.yaml", GOOD);
    let state = dir.path().join("state");
    let args = ["--config", config.to_str().unwrap(), "--state-dir", state.to_str().unwrap()];
    let mut floodgate = Floodgate::serve(&args);
    let http = floodgate.http;
    let (status, applied) = call(http, "POST", "/admin/config", &GOOD.replace("limit: 3", "limit: 5")).await;
    assert_eq!((status, applied["version"].as_u64()), (200, Some(2)), "{applied}");
    // Killed the moment the change is answered: no clean shutdown writes anything.
    floodgate.child.kill().unwrap();
    floodgate.child.wait().unwrap();

    let floodgate = Floodgate::serve(&args);
    let http = floodgate.http;
    let (_, running) = call(http, "GET", "/admin/config", "").await;
    assert_eq!(running["version"].as_u64(), Some(2), "the admin change is back in force: {running}");
    assert!(running["text"].as_str().unwrap().contains("limit: 5"), "{running}");
    assert_eq!(allowed(http, "u1", 7).await, 5);
    let (_, audit) = call(http, "GET", "/admin/audit", "").await;
    assert_eq!(
        audit_summary(&audit),
        [s("startup", 1, None), s("admin", 2, None), s("startup", 2, Some(2))],
        "the log continues, and says the restart resumed version 2: {audit}"
    );

    // Version 1, kept on disk, is a rollback target after the restart.
    let (status, rolled) = call(http, "POST", "/admin/rollback", r#"{"version": 1}"#).await;
    assert_eq!((status, rolled["version"].as_u64()), (200, Some(3)), "{rolled}");
    assert_eq!(allowed(http, "u2", 5).await, 3);
    let (_, running) = call(http, "GET", "/admin/config", "").await;
    assert_eq!(running["text"].as_str(), Some(GOOD));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_changed_while_the_server_was_down_wins_over_the_admin_change() {
    let dir = TempDir::new("state-file-wins");
    let config = dir.write_atomic("floodgate.yaml", GOOD);
    let state = dir.path().join("state");
    let args = ["--config", config.to_str().unwrap(), "--state-dir", state.to_str().unwrap(), "--no-watch"];
    let mut floodgate = Floodgate::serve(&args);
    let (status, _) =
        call(floodgate.http, "POST", "/admin/config", &GOOD.replace("limit: 3", "limit: 5")).await;
    assert_eq!(status, 200);
    floodgate.child.kill().unwrap();
    floodgate.child.wait().unwrap();

    dir.write_atomic("floodgate.yaml", &GOOD.replace("limit: 3", "limit: 7"));
    let floodgate = Floodgate::serve(&args);
    let http = floodgate.http;
    let (_, running) = call(http, "GET", "/admin/config", "").await;
    assert_eq!(running["version"].as_u64(), Some(3), "the file as it is now, as a new version: {running}");
    assert_eq!(allowed(http, "u1", 9).await, 7);
    let (_, audit) = call(http, "GET", "/admin/audit", "").await;
    assert_eq!(audit_summary(&audit), [s("startup", 1, None), s("admin", 2, None), s("startup", 3, None)]);
    // The admin change is still kept, and can be put back.
    let (status, rolled) = call(http, "POST", "/admin/rollback", r#"{"version": 2}"#).await;
    assert_eq!((status, rolled["version"].as_u64()), (200, Some(4)), "{rolled}");
    assert_eq!(allowed(http, "u2", 6).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_admin_switches_survive_kill_9() {
    let dir = TempDir::new("state-switches");
    let text = format!(
        "{GOOD}gateway:\n  routes:\n    - name: chat\n      match: {{ path: /chat, methods: [POST] }}\n      upstream: http://127.0.0.1:9\n      priority: low\n"
    );
    let config = dir.write_atomic("floodgate.yaml", &text);
    let state = dir.path().join("state");
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--gateway",
        "127.0.0.1:0",
    ];
    let mut floodgate = Floodgate::serve(&args);
    let (status, set) = call(floodgate.http, "PUT", "/admin/gateway/switches", r#"{"shed": "low"}"#).await;
    assert_eq!((status, set["shed"].as_str()), (200, Some("low")), "{set}");
    floodgate.child.kill().unwrap();
    floodgate.child.wait().unwrap();

    let floodgate = Floodgate::serve(&args);
    let (_, switches) = call(floodgate.http, "GET", "/admin/gateway/switches", "").await;
    assert_eq!(switches["shed"].as_str(), Some("low"), "{switches}");
    assert_eq!(switches["overridden"].as_bool(), Some(true), "{switches}");
    let (status, _) = call(floodgate.http, "DELETE", "/admin/gateway/switches", "").await;
    assert_eq!(status, 200);
    assert!(!state.join("switches.json").exists(), "cleared switches leave no file");
}

#[test]
fn a_second_server_on_the_same_state_dir_exits_64_naming_the_holder() {
    let dir = TempDir::new("state-locked");
    let state = dir.path().join("state");
    let first = Floodgate::serve(&["--state-dir", state.to_str().unwrap()]);
    let out = run(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("in use by another floodgate process") && err.contains(&first.child.id().to_string()),
        "{err}"
    );
}

#[test]
fn state_dir_given_twice_differently_exits_64() {
    let dir = TempDir::new("state-twice");
    let config = dir.write_atomic(
        "floodgate.yaml",
        &format!("{GOOD}admin:\n  state_dir: {}\n", dir.path().join("a").display()),
    );
    let b = dir.path().join("b");
    let out = run(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
        "--state-dir",
        b.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--state-dir") && err.contains("admin.state_dir") && err.contains("differ"),
        "{err}"
    );
}
