//! The persisted memory store (`store: {kind: memory, persist: {path, fsync: always}}`) through the
//! real `floodgate` binary: killed with SIGKILL at a random moment under load, restarted on the same
//! directory, it still counts every consumption it acknowledged — checks, reports, reservations and
//! their commits — and no more than what was sent.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// A `floodgate serve` on a port the system chose.
struct Running {
    child: Child,
    http: SocketAddr,
    log: Vec<String>,
}

impl Running {
    fn start(config: &std::path::Path) -> Running {
        let mut child = Command::new(BIN)
            .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--no-watch", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .env_remove("FLOODGATE_ADMIN_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn floodgate");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut log = Vec::new();
        let http = loop {
            let line = lines.next().unwrap_or_else(|| panic!("no address logged: {log:?}")).unwrap();
            let address =
                line.split("http=").nth(1).and_then(|t| t.split_whitespace().next()).map(|a| a.parse());
            log.push(line);
            if let Some(address) = address {
                break address.unwrap();
            }
        };
        // Keep draining stderr so the process never blocks on it.
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        Running { child, http, log }
    }

    fn kill9(&mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request: its status and JSON body, or `None` if no answer came (the server died).
async fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<(u16, Value)> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// Bounds on what the store must count: `low` only grows when an answer says a consumption
/// happened (and shrinks when a refund may have), `high` grows when one is sent.
#[derive(Default)]
struct Ledger {
    low: AtomicI64,
    high: AtomicI64,
}

/// A small deterministic generator per task.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn body(cost: u64) -> String {
    format!(r#"{{"descriptors": {{"tenant": "t"}}, "cost": {cost}}}"#)
}

/// Checks, reports, and reserve-then-commit, until the server stops answering.
async fn load(addr: SocketAddr, ledger: Arc<Ledger>, seed: u64, dead: Arc<AtomicBool>) {
    let mut rng = Lcg(seed);
    while !dead.load(Ordering::Relaxed) {
        let cost = 1 + rng.below(5) as i64;
        match rng.below(3) {
            0 | 1 => {
                let path = if rng.below(2) == 0 { "/v1/check" } else { "/v1/report" };
                ledger.high.fetch_add(cost, Ordering::SeqCst);
                match call(addr, "POST", path, &body(cost as u64)).await {
                    Some((200, _)) => {
                        ledger.low.fetch_add(cost, Ordering::SeqCst);
                    }
                    Some((status, body)) => panic!("{path}: {status} {body}"),
                    None => return,
                }
            }
            _ => {
                let estimate = cost + 5;
                ledger.high.fetch_add(estimate, Ordering::SeqCst);
                let id = match call(addr, "POST", "/v1/reserve", &body(estimate as u64)).await {
                    Some((200, body)) => {
                        ledger.low.fetch_add(estimate, Ordering::SeqCst);
                        body["reservation"].as_str().unwrap().to_owned()
                    }
                    Some((status, body)) => panic!("reserve: {status} {body}"),
                    None => return,
                };
                // The commit gives back what the call did not use: perhaps applied if unanswered.
                let refund = estimate - cost;
                ledger.low.fetch_sub(refund, Ordering::SeqCst);
                let commit = format!(r#"{{"reservation": "{id}", "costs": {{"requests": {cost}}}}}"#);
                match call(addr, "POST", "/v1/commit", &commit).await {
                    Some((200, _)) => {
                        ledger.high.fetch_sub(refund, Ordering::SeqCst);
                    }
                    Some((status, body)) => panic!("commit: {status} {body}"),
                    None => return,
                }
            }
        }
    }
}

async fn used(addr: SocketAddr) -> i64 {
    let (status, body) = call(addr, "GET", "/v1/usage?rule=units&tenant=t", "").await.expect("usage answers");
    assert_eq!(status, 200, "{body}");
    body["used"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_consumption_survives_kill_9() {
    let dir = TempDir::new("durability");
    let state = dir.path().join("state");
    let config = dir.write_atomic(
        "floodgate.yaml",
        &format!(
            "store:
  kind: memory
  persist: {{path: {}, fsync: always}}
rules:
  - name: units
    key: [tenant]
    algorithm: budget
    limit: 1000000000000
    ttl: 24h
",
            state.display()
        ),
    );
    let ledger = Arc::new(Ledger::default());
    let mut server = Running::start(&config);

    // A reservation held across the kills, committed after them: its record is restored.
    let (status, held) = call(server.http, "POST", "/v1/reserve", &body(10)).await.unwrap();
    assert_eq!(status, 200, "{held}");
    let held = held["reservation"].as_str().unwrap().to_owned();
    ledger.low.fetch_add(10, Ordering::SeqCst);
    ledger.high.fetch_add(10, Ordering::SeqCst);

    let seed = std::process::id() as u64;
    for round in 0..4u64 {
        let dead = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                tokio::spawn(load(
                    server.http,
                    Arc::clone(&ledger),
                    seed ^ (round * 31 + i),
                    Arc::clone(&dead),
                ))
            })
            .collect();
        let mut rng = Lcg(seed + round);
        tokio::time::sleep(Duration::from_millis(300 + rng.below(900))).await;
        server.kill9();
        dead.store(true, Ordering::Relaxed);
        for task in tasks {
            task.await.unwrap();
        }
        server = Running::start(&config);
        assert!(server.log.iter().any(|l| l.contains("state loaded")), "{:?}", server.log);
        let used = used(server.http).await;
        let (low, high) = (ledger.low.load(Ordering::SeqCst), ledger.high.load(Ordering::SeqCst));
        assert!(low > 10 * (round as i64 + 1), "the load was acknowledged: {low}");
        assert!(
            (low..=high).contains(&used),
            "round {round}: used {used}, acknowledged {low}, acknowledged + in flight {high}"
        );
    }

    let before = used(server.http).await;
    let commit = format!(r#"{{"reservation": "{held}", "costs": {{"requests": 4}}}}"#);
    let (status, body) = call(server.http, "POST", "/v1/commit", &commit).await.unwrap();
    assert_eq!(status, 200, "the reservation made before the kills is still known: {body}");
    assert_eq!(used(server.http).await, before - 6, "its unused estimate is given back");
}
