//! The client against the real server, started in this process on port 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use floodgate_app::{App, ServeOptions};
use floodgate_client::{Client, Error, FailMode, FailureReason, Request, RetryPolicy, retry};
use floodgate_server::Server;
use floodgate_testkit::wait;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const CONFIG: &str = "
store: { kind: memory }
headers: both
rules:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 3
    window: 1h
  - name: tokens
    key: [tenant]
    algorithm: fixed_window
    limit: 100
    window: 1h
  - name: per-second
    key: [caller]
    algorithm: fixed_window
    limit: 1
    window: 1s
";

mod breaker;
mod budget;
#[cfg(feature = "grpc")]
mod grpc;
mod reservations;
mod tls;

struct Running {
    addr: SocketAddr,
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    grpc: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    async fn start(yaml: &str) -> Running {
        Running::start_at(yaml, "127.0.0.1:0".parse().unwrap()).await
    }

    /// A server listening at `addr` (port 0: any free port), e.g. where a stopped one listened.
    async fn start_at(yaml: &str, addr: SocketAddr) -> Running {
        let yaml = yaml.replace("key: [caller]", "key: [api_key]");
        let config = floodgate_config::parse("test.yaml", &yaml).expect("config");
        let app = App::new(config, ServeOptions::default()).expect("app");
        let http = TcpListener::bind(addr).await.unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Server::new(app, http, Some(grpc)).expect("server");
        let (addr, grpc) = (server.http_addr(), server.grpc_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        Running { addr, grpc, stop: Some(tx), task: Some(task) }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }
}

fn client(url: &str) -> Client {
    Client::builder(url).deadline(Duration::from_secs(1)).build().unwrap()
}

fn user(id: &str) -> Request {
    Request::new().descriptor("user", id)
}

/// A service that accepts connections and never answers, so that only a call's deadline ends it:
/// its address, how many connections it accepted, and the task holding them (abort it to close).
async fn silent() -> (SocketAddr, Arc<AtomicU32>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicU32::new(0));
    let seen = accepted.clone();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (addr, accepted, holder)
}

/// Reads one HTTP/1.1 message (head, and a `content-length` body) from `stream`; `None` at EOF.
async fn read_message(stream: &mut tokio::net::TcpStream, buffer: &mut Vec<u8>) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            if buffer.len() >= end + 4 + length {
                return Some(buffer.drain(..end + 4 + length).collect());
            }
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap();
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// A port on which nothing listens.
async fn refusing_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

#[tokio::test]
async fn check_allows_up_to_the_limit_then_denies_with_retry_after_and_headers() {
    let mut server = Running::start(CONFIG).await;
    let floodgate = client(&server.url());
    for remaining in [2, 1, 0] {
        let d = floodgate.check(&user("alice")).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.status, 200);
        assert_eq!(d.limits[0].name, "per-user");
        assert_eq!(d.limits[0].remaining, remaining);
        assert_eq!(d.headers["x-ratelimit-remaining"], remaining.to_string().as_str());
        assert!(d.headers["ratelimit-policy"].to_str().unwrap().contains("\"per-user\";q=3;w=3600"));
        assert!(d.failure.is_none());
    }
    let denied = floodgate.check(&user("alice")).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.status, 429);
    let secs = denied.retry_after_secs().unwrap();
    assert!((1..=3600).contains(&secs));
    assert_eq!(denied.headers["retry-after"], secs.to_string().as_str());
    assert_eq!(floodgate.stats().calls, 4);
    server.stop().await;
}

#[tokio::test]
async fn peek_consumes_nothing_and_report_never_denies() {
    let mut server = Running::start(CONFIG).await;
    let floodgate = client(&server.url());
    let a = floodgate.peek(&user("bob")).await.unwrap();
    let b = floodgate.peek(&user("bob")).await.unwrap();
    assert_eq!(a.limits[0].remaining, b.limits[0].remaining);
    let tenant = || Request::new().descriptor("tenant", "t1");
    floodgate.check(&tenant().cost(40)).await.unwrap();
    assert!(floodgate.report(&tenant().cost(90)).await.unwrap().allowed);
    assert!(!floodgate.peek(&tenant()).await.unwrap().allowed, "130 of 100 used");
    server.stop().await;
}

#[tokio::test]
async fn a_request_refused_as_malformed_is_an_error_whatever_the_fail_mode() {
    let mut server = Running::start(CONFIG).await;
    let floodgate = client(&server.url());
    let error = floodgate.check(&Request::new().descriptor("tenant", "t").cost(1000)).await.unwrap_err();
    match error {
        Error::Problem { status, type_uri, .. } => {
            assert_eq!(status, 422);
            assert_eq!(type_uri, "https://floodgate.dev/problems/never-allowed");
        }
        other => panic!("expected a problem, got {other:?}"),
    }
    assert!(matches!(floodgate.check(&user("u").cost(0)).await, Err(Error::InvalidRequest(_))));
    server.stop().await;
}

#[tokio::test]
async fn the_builder_refuses_a_bad_url_or_deadline_naming_the_field() {
    assert!(matches!(
        Client::builder("nope").build(),
        Err(Error::Config { field: "url", reason }) if reason.contains("must be http://host:port")
    ));
    assert!(matches!(Client::builder("ftp://x:1").build(), Err(Error::Config { field: "url", .. })));
    assert!(matches!(
        Client::builder("http://127.0.0.1:1").deadline(Duration::ZERO).build(),
        Err(Error::Config { field: "deadline", .. })
    ));
}

#[tokio::test]
async fn fails_open_or_closed_with_the_server_stopped_within_the_deadline() {
    let mut server = Running::start(CONFIG).await;
    let url = server.url();
    // A deadline far longer than a refused connection takes, even on two busy cores: the failure's
    // reason says whether the refusal or the deadline ended the call.
    let open = Client::builder(&url).deadline(Duration::from_secs(5)).build().unwrap();
    let closed =
        Client::builder(&url).deadline(Duration::from_secs(5)).fail_mode(FailMode::Closed).build().unwrap();
    assert_eq!(open.check(&user("f")).await.unwrap().status, 200);
    assert_eq!(closed.check(&user("f")).await.unwrap().status, 200);
    server.stop().await;

    let d = wait::finished("a check of the stopped server", open.check(&user("f"))).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.failure, Some((FailureReason::Unreachable, FailMode::Open)), "refused, before the deadline");
    assert_eq!(open.stats().failed_open, 1);

    let d = wait::finished("a check of the stopped server", closed.check(&user("f"))).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(
        d.failure,
        Some((FailureReason::Unreachable, FailMode::Closed)),
        "refused, before the deadline"
    );
    assert_eq!(d.retry_after_secs(), Some(1));
    assert_eq!(d.headers["retry-after"], "1");
    assert_eq!(closed.stats().failed_closed, 1);
    assert_eq!(closed.stats().unreachable, 1);
    assert_eq!(closed.stats().deadline, 0);
}

#[tokio::test]
async fn decides_at_the_deadline_when_the_service_never_answers() {
    let (addr, accepted, holder) = silent().await;
    let floodgate = Client::builder(format!("http://{addr}"))
        .deadline(Duration::from_millis(100))
        .fail_mode(FailMode::Closed)
        .build()
        .unwrap();
    // Nothing answers: only the deadline ends the call, and not before it (a timer never fires
    // early).
    let started = Instant::now();
    let d = wait::finished("a check of a silent service", floodgate.check(&user("s"))).await.unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(100), "not before the deadline: {took:?}");
    assert_eq!(d.failure, Some((FailureReason::Deadline, FailMode::Closed)));
    assert_eq!(floodgate.stats().deadline, 1);
    let open = wait::finished(
        "a check of a silent service",
        floodgate.check(&user("s").fail_mode(FailMode::Open).deadline(Duration::from_millis(30))),
    )
    .await
    .unwrap();
    assert!(open.allowed);
    assert_eq!(open.failure, Some((FailureReason::Deadline, FailMode::Open)));
    assert!(accepted.load(Ordering::SeqCst) >= 1);

    // A deadline miss has an unknown outcome: never retried, unless the call is idempotent.
    let usage = user("s");
    let calls = AtomicU32::new(0);
    let policy = RetryPolicy { base: Duration::from_millis(1), ..RetryPolicy::default() };
    let result = retry(policy, |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        floodgate.report(&usage)
    })
    .await;
    assert!(matches!(
        result,
        Err(Error::Unavailable { reason: FailureReason::Deadline, not_sent: false, .. })
    ));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let calls = AtomicU32::new(0);
    let _ = retry(RetryPolicy { idempotent: true, ..policy }, |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        floodgate.report(&usage)
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    holder.abort();
}

#[tokio::test]
async fn retries_a_refused_connection_at_most_attempts_times() {
    let floodgate = client(&refusing_url().await);
    let calls = AtomicU32::new(0);
    let policy = RetryPolicy { base: Duration::from_millis(1), ..RetryPolicy::default() };
    let usage = user("r");
    let result = retry(policy, |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        floodgate.report(&usage)
    })
    .await;
    assert!(matches!(
        result,
        Err(Error::Unavailable { reason: FailureReason::Unreachable, not_sent: true, .. })
    ));
    assert_eq!(calls.load(Ordering::SeqCst), 3, "the first call and two retries");
    assert_eq!(floodgate.stats().unreachable, 3);
    assert_eq!(floodgate.stats().failed_open, 0, "report has no fail mode");
}

#[tokio::test]
async fn retry_waits_out_a_real_429_for_its_retry_after() {
    let mut server = Running::start(CONFIG).await;
    let floodgate = client(&server.url());
    let caller = || Request::new().descriptor("api_key", "k1");
    floodgate.check(&caller()).await.unwrap();
    let started = Instant::now();
    let waited = std::sync::Mutex::new(Duration::ZERO);
    let calls = AtomicU32::new(0);
    let (shared, waited_ref) = (&floodgate, &waited);
    let decision = retry(RetryPolicy { base: Duration::from_millis(1), ..RetryPolicy::default() }, |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            let d = shared.check(&caller()).await?;
            if !d.allowed {
                *waited_ref.lock().unwrap() = d.retry_after.unwrap();
            }
            d.into_result()
        }
    })
    .await
    .unwrap();
    let waited_for = *waited.lock().unwrap();
    assert!(decision.allowed);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(started.elapsed() >= waited_for, "waited the server's retry_after ({waited_for:?})");
    // Another error is not retried, and a Retry-After above the policy's maximum is not waited for.
    let calls = AtomicU32::new(0);
    let too_long =
        retry(RetryPolicy { max_retry_after: Duration::from_millis(10), ..RetryPolicy::default() }, |_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(Error::RateLimited { retry_after: Duration::from_secs(5) }) }
        })
        .await;
    assert!(too_long.is_err());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    server.stop().await;
}
