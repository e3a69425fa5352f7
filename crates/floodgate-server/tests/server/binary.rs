//! The real `floodgate` binary: exit codes, signals, graceful shutdown, SIGHUP reload.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

const GOOD: &str = "\
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
struct Floodgate {
    child: Child,
    http: SocketAddr,
    stderr: mpsc::Receiver<String>,
}

impl Floodgate {
    /// Starts `floodgate serve` on ports chosen by the system, with `args`, and waits until it
    /// logs its addresses.
    fn serve(args: &[&str]) -> Floodgate {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info")
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
            if let Some(rest) = line.split("http=").nth(1) {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
            log.push(line);
        };
        Floodgate { child, http, stderr: rx }
    }

    fn signal(&self, name: &str) {
        let ok =
            Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status().unwrap();
        assert!(ok.success());
    }

    fn wait(&mut self) -> i32 {
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().expect("exited, not killed");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("floodgate did not exit within 15 s");
    }

    fn log(&self) -> Vec<String> {
        self.stderr.try_iter().collect()
    }
}

impl Drop for Floodgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw HTTP/1.1 request; the whole answer.
async fn raw(addr: SocketAddr, method: &str, path: &str, body: &str) -> String {
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

fn run(args: &[&str]) -> std::process::Output {
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
