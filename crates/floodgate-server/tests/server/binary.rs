//! The real `floodgate` binary: exit codes, signals, graceful shutdown, SIGHUP reload.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::TempDir;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

pub(crate) const GOOD: &str = "\
rules:
  - name: per-user
    key: [user]
    algorithm: sliding_window
    limit: 3
    window: 60s
";

/// `limit: 0` on line 5.
const BAD: &str = "\
rules:
  - name: per-user
    key: [user]
    algorithm: sliding_window
    limit: 0
    window: 60s
";

/// A running `floodgate serve`, killed on drop.
pub(crate) struct Floodgate {
    pub(crate) child: Child,
    pub(crate) http: SocketAddr,
    stderr: mpsc::Receiver<String>,
    /// The lines logged up to the address, not yet returned by [`Floodgate::log`].
    early: std::sync::Mutex<Vec<String>>,
}

impl Floodgate {
    /// Starts `floodgate serve` on ports chosen by the system, with `args`, and waits until it
    /// logs its addresses.
    pub(crate) fn serve(args: &[&str]) -> Floodgate {
        Floodgate::serve_with(&[], args)
    }

    /// [`Floodgate::serve`] with options before the subcommand (`--log-format json`).
    fn serve_with(global: &[&str], args: &[&str]) -> Floodgate {
        Floodgate::serve_env(global, args, &[])
    }

    /// [`Floodgate::serve_with`] with environment variables set (after `RUST_LOG=info`).
    fn serve_env(global: &[&str], args: &[&str], env: &[(&str, &str)]) -> Floodgate {
        let mut child = Command::new(BIN)
            .args(global)
            .arg("serve")
            .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .env_remove("FLOODGATE_ADMIN_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn floodgate");
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut log = Vec::new();
        let http = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no address logged: {log:?}"));
            let address = match (line.split("http=").nth(1), line.split(r#""http":""#).nth(1)) {
                (Some(text), _) => text.split_whitespace().next(),
                (None, Some(json)) => json.split('"').next(),
                (None, None) => None,
            };
            let address = address.map(|a| a.parse().unwrap());
            log.push(line);
            if let Some(address) = address {
                break address;
            }
        };
        Floodgate { child, http, stderr: rx, early: std::sync::Mutex::new(log) }
    }

    fn signal(&self, name: &str) {
        let ok =
            Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status().unwrap();
        assert!(ok.success());
    }

    pub(crate) fn wait(&mut self) -> i32 {
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().expect("exited, not killed");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("floodgate did not exit within 15 s");
    }

    /// The lines logged since the last call (the first call: from the start).
    pub(crate) fn log(&self) -> Vec<String> {
        let mut lines = std::mem::take(&mut *self.early.lock().unwrap());
        lines.extend(self.stderr.try_iter());
        lines
    }
}

impl Drop for Floodgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw HTTP/1.1 request; the whole answer.
pub(crate) async fn raw(addr: SocketAddr, method: &str, path: &str, body: &str) -> String {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    answer
}

pub(crate) fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).env_remove("FLOODGATE_ADMIN_TOKEN").output().expect("run floodgate")
}

#[test]
fn check_config_exits_0_for_a_valid_file_and_64_with_the_error_for_an_invalid_one() {
    let dir = TempDir::new("check-config");
    let good = dir.write_atomic("good.yaml", GOOD);
    let out = run(&["check-config", good.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let bad = dir.write_atomic("bad.yaml", BAD);
    let out = run(&["check-config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml:5:"), "file and line: {err}");
    assert!(err.contains("limit"), "field: {err}");

    let out = run(&["check-config", dir.path().join("missing.yaml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn a_bad_config_exits_64_before_binding_anything() {
    let dir = TempDir::new("bad-config");
    let bad = dir.write_atomic("bad.yaml", BAD);
    // The HTTP address is taken: had the server bound first, it would fail on that instead.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run(&["serve", "--config", bad.to_str().unwrap(), "--http", &addr, "--grpc", &addr]);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid configuration") && err.contains("bad.yaml:5:"), "{err}");
    assert!(!err.contains("cannot listen"), "{err}");
}

#[test]
fn a_non_loopback_listener_without_an_admin_token_exits_64() {
    let out = run(&["serve", "--http", "0.0.0.0:0", "--grpc", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--admin-token"));
}

#[test]
fn an_address_in_use_exits_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run(&["serve", "--http", &addr, "--grpc", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_request_in_flight_and_exits_0() {
    let mut floodgate = Floodgate::serve(&[]);
    let http = floodgate.http;
    // The built-in example answers at once.
    let warm =
        raw(http, "POST", "/v1/check", r#"{"descriptors": {"user": "u1", "route": "POST /chat"}}"#).await;
    assert!(warm.starts_with("HTTP/1.1 200"), "{warm}");

    // A request in flight: headers and half the body sent.
    let body = r#"{"descriptors": {"user": "u2", "route": "POST /chat"}}"#;
    let (first, second) = body.split_at(20);
    let mut tcp = tokio::net::TcpStream::connect(http).await.unwrap();
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{first}",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    floodgate.signal("TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(floodgate.child.try_wait().unwrap().is_none(), "still finishing the request in flight");
    // No new connections.
    assert!(
        tokio::net::TcpStream::connect(http).await.is_err(),
        "no new connection is accepted after SIGTERM"
    );

    tcp.write_all(second.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""allowed":true"#), "{answer}");

    assert_eq!(floodgate.wait(), 0, "{:?}", floodgate.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file() {
    let dir = TempDir::new("sighup");
    let path = dir.write_atomic("floodgate.yaml", GOOD);
    let mut floodgate = Floodgate::serve(&["--config", path.to_str().unwrap(), "--no-watch"]);
    let http = floodgate.http;
    let check = r#"{"descriptors": {"user": "u1"}}"#;
    assert!(raw(http, "POST", "/v1/check", check).await.contains(r#""limit":3"#));

    dir.write_atomic("floodgate.yaml", &GOOD.replace("limit: 3", "limit: 30"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(raw(http, "POST", "/v1/check", check).await.contains(r#""limit":3,"#), "not watched: --no-watch");

    floodgate.signal("HUP");
    let mut reloaded = false;
    for _ in 0..100 {
        if raw(http, "POST", "/v1/check", check).await.contains(r#""limit":30"#) {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reloaded, "{:?}", floodgate.log());
    let audit = raw(http, "GET", "/admin/audit", "").await;
    assert!(audit.contains(r#""source":"sighup""#), "{audit}");

    floodgate.signal("INT");
    assert_eq!(floodgate.wait(), 0);
}

#[test]
fn version_prints_the_package_version_and_the_commit_it_was_built_from() {
    let out = run(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    let printed = String::from_utf8_lossy(&out.stdout);
    // The commit build.rs embeds: FLOODGATE_GIT_COMMIT when the build was given one, else git's
    // HEAD of this source tree, else "unknown" (a build from an export without .git).
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let commit = option_env!("FLOODGATE_GIT_COMMIT")
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().to_owned())
        .or(head)
        .unwrap_or_else(|| "unknown".to_owned());
    assert_eq!(printed.trim(), format!("floodgate {} (commit {commit})", env!("CARGO_PKG_VERSION")));
    assert_eq!(run(&["-V"]).stdout, out.stdout);
}

/// The JSON objects of `lines`; panics on a line that is not one.
fn json_lines(lines: &[String]) -> Vec<serde_json::Value> {
    lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}")))
        .collect()
}

fn events<'a>(lines: &'a [serde_json::Value], event: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["event"] == event).collect()
}

/// Waits until the log has a line of `event` beyond `seen` of them, collecting into `log`.
fn wait_for_event(floodgate: &Floodgate, log: &mut Vec<String>, event: &str, seen: usize) {
    for _ in 0..100 {
        log.extend(floodgate.log());
        if events(&json_lines(log), event).len() > seen {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no new {event} line: {log:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_say_each_config_change_once_and_the_sampled_decisions() {
    let dir = TempDir::new("json-logs");
    let path = dir.write_atomic("floodgate.yaml", GOOD);
    let path = path.to_str().unwrap();
    let mut floodgate = Floodgate::serve_with(
        &["--log-format", "json"],
        &["--config", path, "--no-watch", "--decision-log-sample", "1"],
    );
    let http = floodgate.http;
    let mut log = Vec::new();

    // Every decision is sampled: one line each, with its rules, outcomes and descriptors.
    for _ in 0..4 {
        raw(http, "POST", "/v1/check", r#"{"descriptors": {"user": "u \"1\""}}"#).await;
    }
    wait_for_event(&floodgate, &mut log, "decision", 3);
    let lines = json_lines(&log);
    let decisions = events(&lines, "decision");
    assert_eq!(decisions.len(), 4, "{decisions:#?}");
    assert_eq!(decisions[0]["api"], "check");
    assert_eq!(decisions[0]["allowed"], true);
    assert_eq!(decisions[0]["limits"], "per-user:allowed");
    assert_eq!(decisions[0]["descriptors"], r#"user="u \"1\"""#);
    assert!(decisions[0]["took_us"].is_u64(), "{:?}", decisions[0]);
    assert_eq!(decisions[3]["allowed"], false);
    assert_eq!(decisions[3]["limits"], "per-user:denied");
    assert_eq!(decisions[3]["level"], "INFO");

    // A change through SIGHUP: one line, with what changed.
    dir.write_atomic("floodgate.yaml", &GOOD.replace("limit: 3", "limit: 30"));
    floodgate.signal("HUP");
    wait_for_event(&floodgate, &mut log, "config_applied", 1);
    // An invalid file: one line saying why; the running configuration stays.
    dir.write_atomic("floodgate.yaml", BAD);
    floodgate.signal("HUP");
    wait_for_event(&floodgate, &mut log, "config_rejected", 0);

    floodgate.signal("TERM");
    assert_eq!(floodgate.wait(), 0);
    log.extend(floodgate.log());
    let lines = json_lines(&log);
    let applied = events(&lines, "config_applied");
    assert_eq!(applied.len(), 2, "the startup configuration and one change: {applied:#?}");
    assert_eq!((&applied[0]["version"], &applied[0]["source"]), (&1.into(), &"startup".into()));
    assert_eq!((&applied[1]["version"], &applied[1]["source"]), (&2.into(), &"sighup".into()));
    assert_eq!(applied[1]["changed"], r#"["per-user"]"#);
    let rejected = events(&lines, "config_rejected");
    assert_eq!(rejected.len(), 1, "{rejected:#?}");
    assert_eq!((&rejected[0]["source"], &rejected[0]["level"]), (&"sighup".into(), &"WARN".into()));
    assert!(rejected[0]["error"].as_str().unwrap().contains("floodgate.yaml:5:"), "{:?}", rejected[0]);
    let serving = events(&lines, "serving");
    assert_eq!(serving.len(), 1);
    assert_eq!(serving[0]["version"], env!("CARGO_PKG_VERSION"));
    assert!(serving[0]["commit"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_not_logged_unless_sampled() {
    let mut floodgate = Floodgate::serve_with(&["--log-format", "json"], &[]);
    for _ in 0..20 {
        raw(floodgate.http, "POST", "/v1/check", r#"{"descriptors": {"user": "u1", "route": "POST /chat"}}"#)
            .await;
    }
    floodgate.signal("TERM");
    assert_eq!(floodgate.wait(), 0);
    let log = floodgate.log();
    let lines = json_lines(&log);
    assert!(events(&lines, "decision").is_empty(), "{log:#?}");
    assert_eq!(events(&lines, "config_applied").len(), 1, "{log:#?}");
}

#[tokio::test]
async fn a_client_token_from_the_environment_is_required_and_never_logged() {
    const TOKEN: &str = "binary-test-token-5f1c9e2a7d";
    let config = format!(
        "auth:\n  clients:\n    - name: bff\n      token_env: FLOODGATE_BINARY_TEST_TOKEN\n      scopes: [check]\n{GOOD}"
    );
    let dir = TempDir::new("auth-binary");
    let path = dir.write_atomic("floodgate.yaml", &config);

    // Without the variable: exit 64 naming it and its line, before anything is bound.
    let unset = Command::new(BIN)
        .args(["check-config", path.to_str().unwrap()])
        .env_remove("FLOODGATE_BINARY_TEST_TOKEN")
        .output()
        .unwrap();
    assert_eq!(unset.status.code(), Some(64));
    let error = String::from_utf8_lossy(&unset.stderr);
    assert!(
        error.contains(":4:") && error.contains("FLOODGATE_BINARY_TEST_TOKEN") && error.contains("not set"),
        "{error}"
    );

    let mut floodgate = Floodgate::serve_env(
        &["--log-format", "json"],
        &["--config", path.to_str().unwrap(), "--decision-log-sample", "1"],
        &[("FLOODGATE_BINARY_TEST_TOKEN", TOKEN), ("RUST_LOG", "debug")],
    );
    let http = floodgate.http;
    let check = r#"{"descriptors": {"user": "u1"}}"#;
    assert!(raw(http, "POST", "/v1/check", check).await.starts_with("HTTP/1.1 401"));
    let mut tcp = tokio::net::TcpStream::connect(http).await.unwrap();
    let request = format!(
        "POST /v1/check HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{check}",
        check.len()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    floodgate.signal("HUP");
    tokio::time::sleep(Duration::from_millis(500)).await;
    floodgate.signal("INT");
    assert_eq!(floodgate.wait(), 0);
    let log = floodgate.log();
    assert!(log.iter().any(|l| l.contains("\"event\":\"decision\"")), "decisions were logged: {log:?}");
    assert!(!log.iter().any(|l| l.contains(TOKEN)), "the token in the log: {log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_workers_setting_serves_counts_exactly_and_shuts_down_gracefully() {
    let dir = TempDir::new("workers");
    let path = dir.write_atomic("floodgate.yaml", GOOD);
    let path = path.to_str().unwrap();
    let cores = std::thread::available_parallelism().unwrap().get();
    for (flag, workers) in [(Some("0"), 0), (Some("1"), 1), (Some("3"), 3), (None, cores)] {
        let mut args = vec!["--config", path, "--no-watch"];
        if let Some(flag) = flag {
            args.extend(["--workers", flag]);
        }
        let mut floodgate = Floodgate::serve_with(&["--log-format", "json"], &args);
        // Six connections at once, spread over the workers: the one user's limit of 3 admits 3.
        let answers = futures_util::future::join_all(
            (0..6).map(|_| raw(floodgate.http, "POST", "/v1/check", r#"{"descriptors": {"user": "w"}}"#)),
        )
        .await;
        let allowed = answers.iter().filter(|a| a.starts_with("HTTP/1.1 200")).count();
        let denied = answers.iter().filter(|a| a.starts_with("HTTP/1.1 429")).count();
        assert_eq!((allowed, denied), (3, 3), "--workers {flag:?}: {answers:#?}");
        floodgate.signal("TERM");
        assert_eq!(floodgate.wait(), 0, "--workers {flag:?}");
        let log = floodgate.log();
        let lines = json_lines(&log);
        let serving = events(&lines, "serving");
        assert_eq!(serving.len(), 1, "{log:#?}");
        assert_eq!(serving[0]["workers"], workers, "--workers {flag:?}: {:?}", serving[0]);
    }
}
