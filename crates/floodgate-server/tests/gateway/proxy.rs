//! Pass-through: server-sent events stream (the first event reaches the client before the upstream
//! finishes), a body the upstream breaks reaches the client up to the break, WebSocket upgrades,
//! hop-by-hop headers, and routes that change on reload.

use floodgate_testkit::wait;
use http::Method;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Gateway;
use super::upstreams::{Behaviour, Upstream, accept_key, read_frame, write_frame};

/// One route taking every path to `url`.
fn one_route(url: &str) -> String {
    super::resilience::route_config(url, "")
}

#[tokio::test]
async fn the_first_server_sent_event_arrives_before_the_upstream_finishes() {
    let upstream = Upstream::start(Behaviour::Sse).await;
    let gateway = Gateway::start(&one_route(&upstream.url())).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let response = client.get(format!("http://{}/events", gateway.addr).parse().unwrap()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    // The upstream holds the rest until told: a gateway that buffered would never pass the first.
    let first = wait::finished("the first event", body.frame()).await;
    let first = first.unwrap().unwrap().into_data().unwrap();
    assert_eq!(&first[..], b"data: first\n\n");
    assert!(!upstream.sse_done.load(std::sync::atomic::Ordering::SeqCst), "the upstream has not finished");
    upstream.finish();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(&rest[..], b"data: last\n\n");
    gateway.stop().await;
}

/// An upstream that answers every request with a 200 head and `piece` as the first chunk of a
/// chunked body, all in one write, then closes the connection: the body breaks.
async fn breaking_upstream(piece: &'static str) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let mut byte = [0u8; 1];
                    if tcp.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{piece}\r\n",
                    piece.len()
                );
                let _ = tcp.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, task)
}

#[tokio::test]
async fn a_body_the_upstream_breaks_reaches_the_client_up_to_the_break() {
    // The head, the first chunk and the break reach the gateway together: the client still gets
    // the status and the chunk before its connection is cut, every time.
    let (url, upstream) = breaking_upstream("data: before the break\n\n").await;
    let gateway = Gateway::start(&one_route(&url)).await;
    for _ in 0..50 {
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<http_body_util::Empty<bytes::Bytes>>();
        let response = client
            .get(format!("http://{}/events", gateway.addr).parse().unwrap())
            .await
            .expect("the head, sent before the break");
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut received = Vec::new();
        let broke = loop {
            match body.frame().await {
                Some(Ok(frame)) => received.extend_from_slice(&frame.into_data().unwrap_or_default()),
                Some(Err(_)) => break true,
                None => break false,
            }
        };
        assert!(broke, "the client sees the body break, not a body that ended whole");
        assert_eq!(String::from_utf8_lossy(&received), "data: before the break\n\n");
    }
    upstream.abort();
    gateway.stop().await;
}

#[tokio::test]
async fn a_websocket_echoes_through_the_gateway() {
    let upstream = Upstream::start(Behaviour::WebSocket).await;
    let gateway = Gateway::start(&one_route(&upstream.url())).await;
    let mut tcp = TcpStream::connect(gateway.addr).await.unwrap();
    let key = "dGhlIHNhbXBsZSBub25jZQ==";
    let handshake = format!(
        "GET /ws HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n"
    );
    tcp.write_all(handshake.as_bytes()).await.unwrap();
    // The 101 head, byte by byte up to the blank line.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        tcp.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(
        head.contains(&format!("sec-websocket-accept: {}", accept_key(key.as_bytes()).to_ascii_lowercase())),
        "{head}"
    );
    for text in ["hello", "through the gateway"] {
        write_frame(&mut tcp, 1, text.as_bytes(), Some([1, 2, 3, 4])).await.unwrap();
        let (opcode, payload) = wait::finished("an echo", read_frame(&mut tcp)).await.expect("an echo");
        assert_eq!((opcode, payload.as_slice()), (1, text.as_bytes()));
    }
    gateway.stop().await;
}

#[tokio::test]
async fn hop_by_hop_headers_are_dropped_both_ways() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let gateway = Gateway::start(&one_route(&upstream.url())).await;
    let reply = gateway
        .get(
            "/h",
            &[("connection", "x-secret, keep-alive"), ("x-secret", "1"), ("te", "trailers"), ("x-kept", "2")],
        )
        .await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.header("connection").is_none_or(|c| !c.contains("keep-alive")),
        "the upstream's own Connection"
    );
    let seen = upstream.seen.lock().last().cloned().unwrap();
    assert!(!seen.headers.contains_key("x-secret") && !seen.headers.contains_key("te"));
    assert_eq!(seen.headers["x-kept"], "2");
    assert!(seen.headers["host"].to_str().unwrap().starts_with("127.0.0.1:"), "the upstream's host");
    gateway.stop().await;
}

#[tokio::test]
async fn routes_and_upstreams_change_on_reload_without_a_restart() {
    let (a, b) = (Upstream::start(Behaviour::Answer).await, Upstream::start(Behaviour::Answer).await);
    let gateway = Gateway::start(&one_route(&a.url())).await;
    assert_eq!(gateway.get("/x", &[]).await.status, 200);
    assert_eq!((a.count(), b.count()), (1, 0));
    let new = format!(
        r#"
rules:
  - name: tiny
    match: {{ route: "GET /only" }}
    algorithm: fixed_window
    limit: 1
    window: 60s
gateway:
  routes:
    - name: only
      match: {{ path: /only, methods: [GET] }}
      upstream: {url}
"#,
        url = b.url()
    );
    let applied = gateway.admin(Method::POST, "/admin/config", &new).await;
    assert_eq!(applied.status, 200, "{}", applied.body);
    assert_eq!(gateway.get("/x", &[]).await.status, 404, "the old route is gone");
    assert_eq!(gateway.get("/only", &[]).await.status, 200);
    assert_eq!(gateway.get("/only", &[]).await.status, 429, "the new rule applies");
    assert_eq!((a.count(), b.count()), (1, 1));
    // A change of the listener is refused: it needs a restart.
    let moved = new.replace("gateway:\n", "gateway:\n  listen: 127.0.0.1:1\n");
    let refused = gateway.admin(Method::POST, "/admin/config", &moved).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    gateway.stop().await;
}
