//! The HTTP listener's limits (`http:`): slowloris clients closed after the header timeout while
//! normal clients are answered, max connections, idle connections, header size, and h2c.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::support::{TestServer, check_body, parse};

const RULES: &str = "\
rules:
  - name: per-user
    key: [user]
    algorithm: token_bucket
    rate: 100000/s
    burst: 100000
";

async fn start(http: &str) -> TestServer {
    TestServer::start(parse(&format!("http: {http}\n{RULES}"))).await
}

/// Waits until the server closes `tcp` (end of file or a reset), at most `within`; how long it took.
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(started + within, tcp.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {} // e.g. a 408 or 431 before the close
        }
    }
}

/// One HTTP/1.1 request on a raw socket; the status of the answer.
async fn raw_status(tcp: &mut TcpStream, request: &str) -> u16 {
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .expect("answered")
            .unwrap();
        assert!(n > 0, "closed before answering: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("a status line: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_are_closed_after_the_header_timeout_while_normal_clients_are_answered() {
    const SLOW: usize = 200;
    let server = start("{header_read_timeout: 1s}").await;
    let addr = server.http;
    let started = Instant::now();
    // 200 clients each send a request line, then one header line every 200 ms, never the end.
    let slow: Vec<_> = (0..SLOW)
        .map(|i| {
            tokio::spawn(async move {
                let mut tcp = TcpStream::connect(addr).await.unwrap();
                tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: floodgate\r\n").await.unwrap();
                let drip = async {
                    for n in 0.. {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        if tcp.write_all(format!("X-Slow-{i}-{n}: 1\r\n").as_bytes()).await.is_err() {
                            return;
                        }
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(4), drip).await;
                closed_within(&mut tcp, Duration::from_secs(1)).await.map(|_| started.elapsed())
            })
        })
        .collect();
    // Meanwhile, normal clients are answered.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut slowest = Duration::ZERO;
    for i in 0..200 {
        let asked = Instant::now();
        let reply = server.post("/v1/check", check_body(&[("user", &format!("u{i}"))], 1)).await;
        slowest = slowest.max(asked.elapsed());
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    assert!(
        slowest < Duration::from_millis(500),
        "a normal request took {slowest:?} beside {SLOW} slow clients"
    );
    let mut closed = 0;
    for task in slow {
        let at = task.await.unwrap();
        // Closed by the header timeout (1 s after connecting), not kept for the drip's 4 s.
        assert!(at.is_some_and(|t| t < Duration::from_millis(3500)), "a slow socket still open: {at:?}");
        closed += 1;
    }
    assert_eq!(closed, SLOW);
    server.stop().await;
}

#[tokio::test]
async fn a_connection_beyond_max_connections_is_closed_at_once_and_a_freed_slot_is_reused() {
    let server = start("{max_connections: 3}").await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut tcp = TcpStream::connect(server.http).await.unwrap();
        assert_eq!(raw_status(&mut tcp, "GET /healthz HTTP/1.1\r\nHost: f\r\n\r\n").await, 200);
        held.push(tcp);
    }
    let mut extra = TcpStream::connect(server.http).await.unwrap();
    let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\nHost: f\r\n\r\n").await;
    assert!(
        closed_within(&mut extra, Duration::from_secs(2)).await.is_some(),
        "the 4th connection is closed"
    );
    drop(held.pop());
    // The slot comes back once the server sees the close.
    let mut served = false;
    for _ in 0..50 {
        let mut tcp = TcpStream::connect(server.http).await.unwrap();
        if tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: f\r\n\r\n").await.is_ok() {
            let mut buf = [0u8; 64];
            if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(1), tcp.read(&mut buf)).await
                && n > 0
            {
                served = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "a freed slot serves a new connection");
    server.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let server = start("{idle_timeout: 500ms}").await;
    let mut tcp = TcpStream::connect(server.http).await.unwrap();
    assert_eq!(raw_status(&mut tcp, "GET /healthz HTTP/1.1\r\nHost: f\r\n\r\n").await, 200);
    let took = closed_within(&mut tcp, Duration::from_secs(3)).await.expect("closed when idle");
    assert!(took >= Duration::from_millis(450), "not before the idle timeout: {took:?}");
    server.stop().await;
}

#[tokio::test]
async fn headers_over_max_header_bytes_are_431() {
    let server = start("{max_header_bytes: 8192}").await;
    let mut tcp = TcpStream::connect(server.http).await.unwrap();
    let big = "a".repeat(10_000);
    let status =
        raw_status(&mut tcp, &format!("GET /healthz HTTP/1.1\r\nHost: f\r\nX-Big: {big}\r\n\r\n")).await;
    assert_eq!(status, 431);
    let mut tcp = TcpStream::connect(server.http).await.unwrap();
    let fits = "a".repeat(4_000);
    let ok =
        raw_status(&mut tcp, &format!("GET /healthz HTTP/1.1\r\nHost: f\r\nX-Fits: {fits}\r\n\r\n")).await;
    assert_eq!(ok, 200);
    server.stop().await;
}

#[tokio::test]
async fn the_check_api_speaks_h2c() {
    let server = start("{}").await;
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    let request = http::Request::post(format!("http://{}/v1/check", server.http))
        .body(Full::new(Bytes::from(check_body(&[("user", "u1")], 1))))
        .unwrap();
    let response = client.request(request).await.expect("an HTTP/2 answer");
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("ratelimit-policy"));
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("\"allowed\":true"));
    server.stop().await;
}

/// An HTTP/2 connection to `addr` (preface and settings exchanged); completes when it ends.
async fn h2_connection(addr: std::net::SocketAddr) -> tokio::task::JoinHandle<Duration> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) = hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(
        TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("an HTTP/2 handshake");
    let started = Instant::now();
    tokio::spawn(async move {
        let _sender = sender;
        let _ = connection.await;
        started.elapsed()
    })
}

#[tokio::test]
async fn a_grpc_connection_without_the_http2_preface_is_closed_after_the_header_timeout() {
    let server = start("{header_read_timeout: 500ms}").await;
    // Half a preface, then nothing.
    let mut tcp = TcpStream::connect(server.grpc).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let took = closed_within(&mut tcp, Duration::from_secs(3)).await.expect("closed without a preface");
    assert!(took >= Duration::from_millis(450), "not before the timeout: {took:?}");
    server.stop().await;
}

#[tokio::test]
async fn an_idle_grpc_connection_is_closed_after_the_idle_timeout() {
    let server = start("{idle_timeout: 500ms, header_read_timeout: 5s}").await;
    let connection = h2_connection(server.grpc).await;
    let lasted =
        tokio::time::timeout(Duration::from_secs(3), connection).await.expect("closed when idle").unwrap();
    assert!(lasted >= Duration::from_millis(450), "not before the idle timeout: {lasted:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_grpc_connection_beyond_max_connections_is_closed_at_once() {
    let server = start("{max_connections: 2}").await;
    let held = [h2_connection(server.grpc).await, h2_connection(server.grpc).await];
    let mut extra = TcpStream::connect(server.grpc).await.unwrap();
    let _ = extra.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
    assert!(
        closed_within(&mut extra, Duration::from_secs(2)).await.is_some(),
        "the 3rd connection is closed"
    );
    assert!(held.iter().all(|c| !c.is_finished()), "the first two stay open");
    server.stop().await;
}
