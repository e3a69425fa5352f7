//! The real server on a real socket: ten chats a minute per user, then 429s.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Starts the server on an ephemeral port.
async fn start() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(chat_api::serve(listener, chat_api::app(chat_api::engine())));
    addr
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 `POST /chat` over a fresh connection.
async fn chat(addr: SocketAddr, headers: &[(&str, &str)]) -> Reply {
    let body = r#"{"message": "hello"}"#;
    let mut request = format!(
        "POST /chat HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);

    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();

    let (head, body) = raw.split_once("\r\n\r\n").expect("a complete response");
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Reply { status, headers, body: body.to_owned() }
}

#[tokio::test]
async fn ten_chats_pass_then_two_are_429_with_retry_after() {
    let addr = start().await;
    let u1 = [("x-user-id", "u1"), ("x-tenant-id", "t1")];
    for i in 0..10 {
        let reply = chat(addr, &u1).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.body);
        let json: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(json["reply"], "You said: hello");
        assert!(reply.header("ratelimit-policy").unwrap().starts_with(r#""chat-per-user";q=10;w=60"#));
    }
    for i in 10..12 {
        let reply = chat(addr, &u1).await;
        assert_eq!(reply.status, 429, "request {i}");
        let retry_after: u64 = reply.header("retry-after").expect("Retry-After").parse().unwrap();
        // The weighted sliding window may ask for up to one window past the current one.
        assert!((1..=120).contains(&retry_after), "{retry_after}");
        assert_eq!(reply.header("content-type"), Some("application/problem+json"));
        let problem: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(problem["type"], "https://floodgate.dev/problems/rate-limited");
        assert_eq!(problem["retry_after"], retry_after);
    }
    // Another user of the same tenant still chats.
    let reply = chat(addr, &[("x-user-id", "u2"), ("x-tenant-id", "t1")]).await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn without_a_user_id_only_the_tenant_limit_applies() {
    let addr = start().await;
    for i in 0..12 {
        let reply = chat(addr, &[("x-tenant-id", "t2")]).await;
        assert_eq!(reply.status, 200, "request {i}");
        assert!(reply.header("ratelimit-policy").unwrap().starts_with(r#""chat-per-tenant";q=1000;w=3600"#));
    }
}
