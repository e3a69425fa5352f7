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

use floodgate_testkit::wait;

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

/// Waits until the server closes `tcp` (end of file or a reset); how long it took. Fails the test
/// when it is still open after the hang guard.
async fn closed(tcp: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    wait::finished("the server's close", async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {} // e.g. a 408 or 431 before the close
            }
        }
    })
    .await
}

/// One HTTP/1.1 request on a raw socket; the status of the answer.
async fn raw_status(tcp: &mut TcpStream, request: &str) -> u16 {
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = wait::finished("an answer", tcp.read(&mut buf)).await.unwrap();
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
    // 200 clients each send a request line, then one header line every 200 ms, never the end, and
    // never stop: only the server can end them. Each says when it has begun, and returns what the
    // server sent it before closing.
    let (begun, mut begins) = tokio::sync::mpsc::unbounded_channel();
    let slow: Vec<_> = (0..SLOW)
        .map(|i| {
            let begun = begun.clone();
            tokio::spawn(async move {
                let mut tcp = TcpStream::connect(addr).await.unwrap();
                tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: floodgate\r\n").await.unwrap();
                let _ = begun.send(());
                let mut said = Vec::new();
                let mut buf = [0u8; 1024];
                let mut drip = tokio::time::interval(Duration::from_millis(200));
                drip.tick().await;
                for n in 0.. {
                    tokio::select! {
                        read = tcp.read(&mut buf) => match read {
                            Ok(0) | Err(_) => break,
                            Ok(k) => said.extend_from_slice(&buf[..k]),
                        },
                        _ = drip.tick() => {
                            // Refused once the server has closed: the read then ends the loop.
                            let _ = tcp.write_all(format!("X-Slow-{i}-{n}: 1\r\n").as_bytes()).await;
                        }
                    }
                }
                String::from_utf8_lossy(&said).into_owned()
            })
        })
        .collect();
    for _ in 0..SLOW {
        wait::finished("a slow client's first line", begins.recv()).await.expect("a slow client began");
    }
    // With every slow client connected, normal clients are answered.
    for i in 0..200 {
        let reply = server.post("/v1/check", check_body(&[("user", &format!("u{i}"))], 1)).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    // Every slow client is closed by the header timeout: closed at all (it never stops sending), and
    // not for its headers' size or number (a 431).
    for task in slow {
        let said = wait::finished("a slow client's close", task).await.unwrap();
        assert!(!said.contains(" 431 "), "closed for its headers' size, not their time: {said}");
    }
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
    closed(&mut extra).await; // the 4th connection
    drop(held.pop());
    // The slot comes back once the server sees the close: until then, a new connection is closed.
    wait::until("a freed slot serving a new connection", || async {
        let mut tcp = TcpStream::connect(server.http).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: f\r\n\r\n").await.ok()?;
        let mut buf = [0u8; 64];
        matches!(tcp.read(&mut buf).await, Ok(n) if n > 0).then_some(())
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    // The header timeout (which also runs between requests) is far away: only idleness closes it.
    let server = start("{idle_timeout: 500ms, header_read_timeout: 1h}").await;
    let mut tcp = TcpStream::connect(server.http).await.unwrap();
    assert_eq!(raw_status(&mut tcp, "GET /healthz HTTP/1.1\r\nHost: f\r\n\r\n").await, 200);
    let took = closed(&mut tcp).await;
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
    // The idle timeout is far away: only the header timeout closes it.
    let server = start("{header_read_timeout: 500ms, idle_timeout: 1h}").await;
    // Half a preface, then nothing.
    let mut tcp = TcpStream::connect(server.grpc).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let took = closed(&mut tcp).await;
    assert!(took >= Duration::from_millis(450), "not before the timeout: {took:?}");
    server.stop().await;
}

#[tokio::test]
async fn an_idle_grpc_connection_is_closed_after_the_idle_timeout() {
    // The header timeout is far away: only idleness closes it.
    let server = start("{idle_timeout: 500ms, header_read_timeout: 1h}").await;
    let connection = h2_connection(server.grpc).await;
    let lasted = wait::finished("the idle connection's close", connection).await.unwrap();
    assert!(lasted >= Duration::from_millis(450), "not before the idle timeout: {lasted:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_grpc_connection_beyond_max_connections_is_closed_at_once() {
    let server = start("{max_connections: 2}").await;
    let held = [h2_connection(server.grpc).await, h2_connection(server.grpc).await];
    let mut extra = TcpStream::connect(server.grpc).await.unwrap();
    let _ = extra.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
    closed(&mut extra).await; // the 3rd connection
    assert!(held.iter().all(|c| !c.is_finished()), "the first two stay open");
    server.stop().await;
}
