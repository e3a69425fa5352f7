//! The real `floodgate` binary with a gateway: the seeds' twelve `curl`s (ten 200s, two 429s with
//! `Retry-After`), HS256 tokens verified with a secret from the environment, and accepted writes
//! surviving `kill -9`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use http::Method;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

use super::identity::now;
use super::send;
use super::upstreams::{Behaviour, Upstream};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");
const SECRET: &str = "a-test-secret-of-at-least-thirty-two-bytes";

/// `floodgate serve` with a gateway on a port the system chose; killed on drop.
struct Floodgate {
    child: Child,
    gateway: SocketAddr,
}

impl Floodgate {
    fn serve(config: &Path) -> Floodgate {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--gateway", "127.0.0.1:0", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .env("JWT_SECRET", SECRET)
            .env_remove("FLOODGATE_ADMIN_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn floodgate");
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            // Read to the end, also once the address is found: a closed pipe would fail the
            // server's logging.
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut log = Vec::new();
        let gateway = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no gateway address: {log:?}"));
            if let Some(rest) = line.split("gateway=").nth(1) {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
            log.push(line);
        };
        Floodgate { child, gateway }
    }

    /// `kill -9`: no shutdown, no flush, nothing.
    fn kill_9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Floodgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("floodgate-gw-bin-{}", fastrand::u64(..)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `curl -s -D - -o /dev/null -X POST -H 'x-user-id: u1' http://ADDR/chat`: the status and headers.
fn curl_chat(addr: SocketAddr, extra: &[&str]) -> (u16, String) {
    let output = Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", "-X", "POST", "-H", "x-user-id: u1"])
        .args(extra)
        .arg(format!("http://{addr}/chat"))
        .output()
        .expect("curl");
    let head = String::from_utf8_lossy(&output.stdout).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head)
}

#[tokio::test]
async fn the_seed_check_twelve_curls_give_ten_200s_then_two_429s_with_retry_after() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let dir = temp_dir();
    let config = dir.join("floodgate.yaml");
    std::fs::write(
        &config,
        format!(
            r#"
rules:
  - name: chat-per-user
    match: {{ route: "POST /chat" }}
    key: [user]
    algorithm: sliding_window
    limit: 10
    window: 60s
gateway:
  identity:
    jwt: {{ hs256_secret_env: JWT_SECRET, audience: api }}
    headers: {{ user: x-user-id }}
  routes:
    - name: chat
      match: {{ path: /chat, methods: [POST] }}
      upstream: {url}
"#,
            url = upstream.url()
        ),
    )
    .unwrap();
    let floodgate = Floodgate::serve(&config);
    let addr = floodgate.gateway;
    let results =
        tokio::task::spawn_blocking(move || (0..12).map(|_| curl_chat(addr, &[])).collect::<Vec<_>>())
            .await
            .unwrap();
    let statuses: Vec<u16> = results.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429]);
    for (_, head) in &results[10..] {
        assert!(head.contains("\r\nretry-after: "), "{head}");
        assert!(head.contains("content-type: application/problem+json"), "{head}");
    }

    // A verified HS256 token's `sub` is the user: u1's header no longer speaks for the caller.
    let claims = json!({"sub": "verified-user", "aud": "api", "exp": now() + 600});
    let token =
        jsonwebtoken::encode(&Header::default(), &claims, &EncodingKey::from_secret(SECRET.as_bytes()))
            .unwrap();
    let bearer = format!("authorization: Bearer {token}");
    let (status, _) = tokio::task::spawn_blocking(move || curl_chat(addr, &["-H", &bearer])).await.unwrap();
    assert_eq!(status, 200, "u1's pool is spent, but the token says verified-user");
    let wrong = jsonwebtoken::encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(b"another-secret-of-thirty-two-bytes!!"),
    )
    .unwrap();
    let bearer = format!("authorization: Bearer {wrong}");
    let (status, _) = tokio::task::spawn_blocking(move || curl_chat(addr, &["-H", &bearer])).await.unwrap();
    assert_eq!(status, 401);
    drop(floodgate);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn accepted_writes_survive_kill_9_and_are_replayed_after_the_restart() {
    // The upstream's address, with nothing listening yet: every replay fails meanwhile.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = temp_dir();
    let config = dir.join("floodgate.yaml");
    std::fs::write(
        &config,
        format!(
            r#"
rules: []
gateway:
  state_dir: "{state}"
  switches: {{ write: accept_async }}
  routes:
    - name: orders
      match: {{ path: /orders, methods: [POST] }}
      upstream: http://127.0.0.1:{port}
      degrade: {{ write: accept_async }}
"#,
            state = dir.join("state").display()
        ),
    )
    .unwrap();
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let floodgate = Floodgate::serve(&config);
    let mut ids = Vec::new();
    for i in 0..5 {
        let body = format!(r#"{{"order":{i}}}"#);
        let reply = send(&client, floodgate.gateway, Method::POST, "/orders", &[], &body).await;
        assert_eq!(reply.status, 202, "{}", reply.body);
        ids.push(reply.json()["id"].as_str().unwrap().to_owned());
    }
    floodgate.kill_9();

    // The upstream comes up; the gateway restarts and replays what it accepted.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let upstream = Upstream::on(listener, Behaviour::Answer).await;
    let floodgate = Floodgate::serve(&config);
    for id in &ids {
        let mut state = String::new();
        for _ in 0..200 {
            let reply =
                send(&client, floodgate.gateway, Method::GET, &format!("/_floodgate/accepted/{id}"), &[], "")
                    .await;
            state = reply.json()["state"].as_str().unwrap_or_default().to_owned();
            if state == "delivered" {
                assert_eq!(reply.json()["status"], 200);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(state, "delivered", "{id}");
    }
    let mut bodies: Vec<String> =
        upstream.seen.lock().iter().map(|s| String::from_utf8_lossy(&s.body).into_owned()).collect();
    bodies.sort();
    assert_eq!(
        bodies,
        (0..5).map(|i| format!(r#"{{"order":{i}}}"#)).collect::<Vec<_>>(),
        "each exactly once"
    );
    drop(floodgate);
    let _ = std::fs::remove_dir_all(dir);
}
