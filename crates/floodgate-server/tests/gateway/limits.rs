//! The gateway's limits: the seeds' chat check, the client IP behind trusted proxies (spoofed
//! `X-Forwarded-For` does not escape a per-IP limit), the 429's shape and the headers on allowed
//! answers, routes as templates, and `action: delay` (waiting clients first come first served,
//! a higher tier from its header, or a saturated tenant's higher plan, first).

use std::time::Duration;

use floodgate_testkit::wait;
use http::Method;

use super::upstreams::{Behaviour, Upstream};
use super::{Gateway, metric};

fn chat_config(upstream: &Upstream) -> String {
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
    headers: {{ user: x-user-id }}
  routes:
    - name: chat
      match: {{ path: /chat, methods: [POST] }}
      upstream: {url}
"#,
        url = upstream.url()
    )
}

#[tokio::test]
async fn twelve_chats_of_one_user_give_ten_200s_then_two_429s_with_retry_after() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let gateway = Gateway::start(&chat_config(&upstream)).await;
    let mut statuses = Vec::new();
    for _ in 0..12 {
        let reply = gateway.send(Method::POST, "/chat", &[("x-user-id", "u1")], "hello").await;
        if reply.status == 429 {
            let retry: u64 = reply.header("retry-after").expect("Retry-After on a 429").parse().unwrap();
            // At most the rest of the current window plus the part of the next after which the
            // previous count, weighted down, lets one more through: 60 s + 60 s / 10.
            assert!((1..=66).contains(&retry), "{retry}");
            assert_eq!(reply.header("content-type"), Some("application/problem+json"));
            assert_eq!(reply.json()["type"], "https://floodgate.dev/problems/rate-limited");
            assert!(reply.header("ratelimit-policy").is_some());
        } else {
            // Allowed answers carry the rate-limit headers too, and the upstream's body.
            assert_eq!(reply.header("ratelimit-policy"), Some(r#""chat-per-user";q=10;w=60"#));
            assert_eq!(reply.json()["path"], "/chat");
        }
        statuses.push(reply.status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429]);
    assert_eq!(upstream.count(), 10, "denied requests never reach the upstream");
    // Another user has a pool of their own.
    assert_eq!(gateway.send(Method::POST, "/chat", &[("x-user-id", "u2")], "").await.status, 200);
    let page = gateway.metrics().await;
    assert_eq!(metric(&page, r#"floodgate_gateway_requests_total{route="chat",status="429"}"#), Some(2.0));
    assert_eq!(metric(&page, r#"floodgate_gateway_requests_total{route="chat",status="200"}"#), Some(11.0));
    assert_eq!(
        metric(&page, r#"floodgate_decisions_total{rule="chat-per-user",result="denied"}"#),
        Some(2.0)
    );
    assert!(
        page.contains(r#"floodgate_gateway_upstream_duration_seconds_bucket{route="chat",le="#),
        "{page}"
    );
    gateway.stop().await;
}

#[tokio::test]
async fn the_route_descriptor_is_the_template_not_the_path() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let yaml = format!(
        r#"
rules:
  - name: per-order-route
    match: {{ route: "GET /api/orders/{{id}}" }}
    algorithm: fixed_window
    limit: 3
    window: 60s
gateway:
  routes:
    - name: orders
      match: {{ path: "/api/orders/{{id}}", methods: [GET] }}
      upstream: {url}
"#,
        url = upstream.url()
    );
    let gateway = Gateway::start(&yaml).await;
    // Three different orders share the route's one key.
    for id in 1..=3 {
        assert_eq!(gateway.get(&format!("/api/orders/{id}?x=1"), &[]).await.status, 200);
    }
    assert_eq!(gateway.get("/api/orders/4", &[]).await.status, 429);
    assert_eq!(upstream.seen.lock()[0].path, "/api/orders/1?x=1", "path and query reach the upstream");
    // No route: 404 problem; a method the route does not take: 405.
    let missing = gateway.get("/nowhere", &[]).await;
    assert_eq!((missing.status, missing.header("content-type")), (404, Some("application/problem+json")));
    assert_eq!(gateway.send(Method::DELETE, "/api/orders/1", &[], "").await.status, 405);
    gateway.stop().await;
}

#[tokio::test]
async fn a_get_route_takes_head_under_its_own_method_and_a_405_names_the_methods() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let yaml = format!(
        r#"
rules:
  - name: head-orders
    match: {{ route: "HEAD /api/orders/{{id}}" }}
    algorithm: fixed_window
    limit: 1
    window: 60s
gateway:
  routes:
    - name: orders
      match: {{ path: "/api/orders/{{id}}", methods: [GET] }}
      upstream: {url}
    - name: order-writes
      match: {{ path: "/api/orders/{{id}}", methods: [PUT] }}
      upstream: {url}
"#,
        url = upstream.url()
    );
    let gateway = Gateway::start(&yaml).await;
    // HEAD goes to the GET route; its route descriptor names HEAD (the rule counts HEADs only).
    assert_eq!(gateway.send(Method::HEAD, "/api/orders/1", &[], "").await.status, 200);
    assert_eq!(gateway.send(Method::HEAD, "/api/orders/2", &[], "").await.status, 429);
    assert_eq!(gateway.get("/api/orders/3", &[]).await.status, 200);
    assert_eq!(gateway.send(Method::PUT, "/api/orders/3", &[], "{}").await.status, 200);
    let refused = gateway.send(Method::DELETE, "/api/orders/3", &[], "").await;
    assert_eq!(refused.status, 405);
    assert_eq!(refused.header("allow"), Some("GET,HEAD,PUT"));
    gateway.stop().await;
}

#[tokio::test]
async fn a_per_ip_limit_holds_against_spoofed_forwarded_for() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let yaml = |trusted: &str| {
        format!(
            r#"
rules:
  - name: per-ip
    key: [ip]
    algorithm: fixed_window
    limit: 3
    window: 60s
gateway:
  trusted_proxies: {trusted}
  routes:
    - name: all
      match: {{ path: "/{{*rest}}" }}
      upstream: {url}
"#,
            url = upstream.url()
        )
    };
    // The test client is the trusted proxy (127.0.0.1): the right-most address it did not append
    // is the client, whatever the client wrote to its left.
    let gateway = Gateway::start(&yaml("[127.0.0.1/32]")).await;
    let mut statuses = Vec::new();
    for i in 0..5 {
        let xff = format!("6.6.6.{i}, 203.0.113.7");
        statuses.push(gateway.get("/x", &[("x-forwarded-for", &xff)]).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429], "203.0.113.7 is limited whatever it spoofs");
    assert_eq!(gateway.get("/x", &[("x-forwarded-for", "203.0.113.8")]).await.status, 200, "another client");
    // The upstream sees the chain with the gateway's peer appended.
    let seen = upstream.seen.lock().last().cloned().unwrap();
    assert_eq!(seen.headers["x-forwarded-for"], "203.0.113.8, 127.0.0.1");
    assert_eq!(seen.headers["forwarded"], "for=127.0.0.1;proto=http");
    assert_eq!(seen.headers["x-forwarded-proto"], "http");
    gateway.stop().await;

    // Trusting nobody: the header is ignored entirely; the peer is the client.
    let gateway = Gateway::start(&yaml("[]")).await;
    let mut statuses = Vec::new();
    for i in 0..4 {
        statuses.push(gateway.get("/x", &[("x-forwarded-for", &format!("198.51.100.{i}"))]).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    gateway.stop().await;
}

#[tokio::test]
async fn a_delay_rule_makes_the_request_wait_for_capacity() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let yaml = format!(
        r#"
rules:
  - name: smooth
    algorithm: sliding_log
    limit: 1
    window: 2s
    action: delay
    max_wait: 5s
gateway:
  routes:
    - name: all
      match: {{ path: "/{{*rest}}" }}
      upstream: {url}
"#,
        url = upstream.url()
    );
    let gateway = Gateway::start(&yaml).await;
    assert_eq!(gateway.get("/a", &[]).await.status, 200);
    // A sliding log has no boundary for the second request to land past: unless two seconds
    // passed between the two, it waits for the first to leave the window.
    assert_eq!(gateway.get("/b", &[]).await.status, 200, "waited for room rather than a 429");
    // Delayed, then passed: it waited (and not until `max_wait`, which ends in a 429).
    let page = gateway.metrics().await;
    assert_eq!(metric(&page, r#"floodgate_gateway_delayed_total{result="passed"}"#), Some(1.0));
    assert_eq!(metric(&page, "floodgate_gateway_waiting"), Some(0.0));
    gateway.stop().await;
}

/// One request a second on every path, `action: delay`; requests' tiers from `x-priority`.
fn queued_config(upstream: &Upstream) -> String {
    format!(
        r#"
rules:
  - name: one-a-second
    algorithm: sliding_log
    limit: 1
    window: 1s
    action: delay
    max_wait: 20s
gateway:
  delay_queue: {{ weights: [8, 4, 2, 1], aging: 1m }}
  routes:
    - name: all
      match: {{ path: "/{{*rest}}" }}
      upstream: {url}
      tier: {{ from: header, name: x-priority, default: 3 }}
"#,
        url = upstream.url()
    )
}

/// Sends `GET /{id}` with `header: value` for each `(id, value)` of `requests` in order, each sent
/// once the one before waits (the gateway's waiting gauge counts it), after a `GET /first` that
/// takes the window; their statuses. Every request also says it is of tenant `t1`.
async fn queue_up(gateway: &std::sync::Arc<Gateway>, header: &str, requests: &[(&str, &str)]) -> Vec<u16> {
    assert_eq!(gateway.get("/first", &[("x-tenant-id", "t1")]).await.status, 200);
    let mut clients = Vec::new();
    for (n, (id, value)) in requests.iter().enumerate() {
        let (client, path) = (std::sync::Arc::clone(gateway), format!("/{id}"));
        let (header, value) = (header.to_owned(), value.to_string());
        clients.push(tokio::spawn(async move {
            client.get(&path, &[(&header, &value), ("x-tenant-id", "t1")]).await.status
        }));
        let waiting = (n + 1) as f64;
        wait::until("the request waiting", || async {
            (metric(&gateway.metrics().await, "floodgate_gateway_waiting") == Some(waiting)).then_some(())
        })
        .await;
    }
    let mut statuses = Vec::new();
    for client in clients {
        statuses.push(client.await.unwrap());
    }
    statuses
}

fn seen_paths(upstream: &Upstream) -> Vec<String> {
    upstream.seen.lock().iter().map(|s| s.path.clone()).collect()
}

#[tokio::test]
async fn waiting_clients_of_a_delay_rule_pass_first_come_first_served() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let gateway = std::sync::Arc::new(Gateway::start(&queued_config(&upstream)).await);
    let statuses = queue_up(&gateway, "x-priority", &[("a", "3"), ("b", "3"), ("c", "3")]).await;
    assert_eq!(statuses, [200, 200, 200]);
    assert_eq!(seen_paths(&upstream), ["/first", "/a", "/b", "/c"]);
    let page = gateway.metrics().await;
    assert_eq!(metric(&page, r#"floodgate_gateway_delayed_total{result="passed"}"#), Some(3.0));
    assert_eq!(metric(&page, "floodgate_gateway_waiting"), Some(0.0));
}

#[tokio::test]
async fn a_higher_tier_from_the_header_goes_first_and_a_tier_out_of_range_is_refused() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let gateway = std::sync::Arc::new(Gateway::start(&queued_config(&upstream)).await);
    // `head` is deciding (waiting for the window) when the others come; then tier 0 before tier 3.
    let statuses = queue_up(&gateway, "x-priority", &[("head", "3"), ("low", "3"), ("high", "0")]).await;
    assert_eq!(statuses, [200, 200, 200]);
    assert_eq!(seen_paths(&upstream), ["/first", "/head", "/high", "/low"]);
    for bad in ["4", "urgent", "-1"] {
        let reply = gateway.get("/bad", &[("x-priority", bad)]).await;
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(reply.header("content-type"), Some("application/problem+json"));
        let detail = reply.json()["detail"].as_str().unwrap_or_default().to_owned();
        assert!(detail.contains("x-priority") && detail.contains("0 (the highest) to 3"), "{detail}");
    }
}

#[tokio::test]
async fn a_saturated_tenants_requests_of_a_higher_plan_go_first() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let yaml = format!(
        r#"
rules:
  - name: one-a-second-per-tenant
    key: [tenant]
    algorithm: sliding_log
    limit: 1
    window: 1s
    action: delay
    max_wait: 20s
gateway:
  identity:
    headers: {{ tenant: x-tenant-id, plan: x-plan }}
  routes:
    - name: all
      match: {{ path: "/{{*rest}}" }}
      upstream: {url}
      tier: {{ from: plan, plans: {{ enterprise: 0, free: 3 }} }}
"#,
        url = upstream.url()
    );
    let gateway = std::sync::Arc::new(Gateway::start(&yaml).await);
    // A plan not listed gets the default (the lowest tier), as `free` does.
    let requests = [("head", "free"), ("free", "free"), ("other", "trial"), ("enterprise", "enterprise")];
    let statuses = queue_up(&gateway, "x-plan", &requests).await;
    assert_eq!(statuses, [200, 200, 200, 200]);
    assert_eq!(seen_paths(&upstream), ["/first", "/head", "/enterprise", "/free", "/other"]);
}

#[tokio::test]
async fn a_degrading_plan_tells_the_upstream_and_the_client_which_model_to_use() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let config = format!(
        r#"
rules:
  - name: monthly-calls
    key: [user]
    algorithm: fixed_window
    window: 30d
    limit: {{ by: plan, values: {{ free: 1, enterprise: 1 }} }}
    overage: {{ free: {{ degrade_to: gpt-4o-mini }}, enterprise: deny }}
gateway:
  identity:
    headers: {{ user: x-user-id, plan: x-plan }}
  routes:
    - name: chat
      match: {{ path: /chat, methods: [POST] }}
      upstream: {url}
"#,
        url = upstream.url()
    );
    let gateway = Gateway::start(&config).await;
    let free = [("x-user-id", "u1"), ("x-plan", "free"), ("floodgate-degrade", "forged")];
    let within = gateway.send(Method::POST, "/chat", &free, "").await;
    assert_eq!(within.status, 200);
    assert_eq!(within.header("floodgate-degrade"), None);
    let over = gateway.send(Method::POST, "/chat", &free, "").await;
    assert_eq!(over.status, 200, "free past its limit degrades");
    assert_eq!(over.header("floodgate-degrade"), Some("gpt-4o-mini"));
    {
        let seen = upstream.seen.lock();
        let models: Vec<Option<&str>> =
            seen.iter().map(|s| s.headers.get("floodgate-degrade").map(|v| v.to_str().unwrap())).collect();
        assert_eq!(models, [None, Some("gpt-4o-mini")], "the forged header never reaches the upstream");
    }

    let enterprise = [("x-user-id", "u2"), ("x-plan", "enterprise")];
    assert_eq!(gateway.send(Method::POST, "/chat", &enterprise, "").await.status, 200);
    let refused = gateway.send(Method::POST, "/chat", &enterprise, "").await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("floodgate-degrade"), None);
    assert_eq!(upstream.count(), 3);
    gateway.stop().await;
}

/// Waits until the server closes `tcp` (end of file or a reset); how long it took. Fails the test
/// when it is still open after the hang guard.
async fn closed(tcp: &mut tokio::net::TcpStream) -> Duration {
    use tokio::io::AsyncReadExt;
    let started = tokio::time::Instant::now();
    let mut buf = [0u8; 4096];
    wait::finished("the server's close", async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
}

/// Sends a request on `tcp` and reads the head of its answer, leaving the connection open.
async fn answered(tcp: &mut tokio::net::TcpStream, request: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = wait::finished("an answer", tcp.read(&mut buf)).await.unwrap();
        assert!(n > 0, "closed before answering: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn the_gateway_listener_closes_slowloris_and_extra_connections_under_its_own_limits() {
    use tokio::io::AsyncWriteExt;
    let upstream = Upstream::start(Behaviour::Answer).await;
    // The idle timeout is far away: only the header timeout closes a slow client.
    let limits = "http: { header_read_timeout: 500ms, idle_timeout: 1h, max_connections: 2 }";
    let config = chat_config(&upstream).replace("gateway:\n", &format!("gateway:\n  {limits}\n"));
    let gateway = Gateway::start(&config).await;
    // A request line and one header, never the end of the headers.
    let mut slow = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    slow.write_all(b"POST /chat HTTP/1.1\r\nHost: g\r\n").await.unwrap();
    let took = closed(&mut slow).await;
    assert!(took >= Duration::from_millis(450), "not before the timeout: {took:?}");

    // Two connections answered, and kept open: the server holds both slots.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut tcp = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
        answered(&mut tcp, b"GET /healthz HTTP/1.1\r\nHost: g\r\n\r\n").await;
        held.push(tcp);
    }
    let mut extra = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let _ = extra.write_all(b"POST /chat HTTP/1.1\r\nHost: g\r\n\r\n").await;
    closed(&mut extra).await; // the 3rd connection
    drop(held);
    // The top-level `http:` limits are the HTTP API's, not the gateway's: the admin listener still
    // takes more connections.
    let mut admin = Vec::new();
    for _ in 0..3 {
        admin.push(tokio::net::TcpStream::connect(gateway.admin).await.unwrap());
    }
    let reply = gateway.admin(Method::GET, "/healthz", "").await;
    assert_eq!(reply.status, 200);
    gateway.stop().await;
}

#[tokio::test]
async fn a_quota_in_the_zone_a_header_names_refuses_a_zone_that_is_none() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let config = format!(
        r#"
rules:
  - name: daily-calls
    key: [header.x-tenant]
    algorithm: quota
    period: day
    limit: 1
    time_zone: {{ by: header.x-tz }}
gateway:
  routes:
    - name: chat
      match: {{ path: /chat, methods: [POST] }}
      upstream: {url}
"#,
        url = upstream.url()
    );
    let gateway = Gateway::start(&config).await;
    let tokyo = [("x-tenant", "t1"), ("x-tz", "Asia/Tokyo")];
    let first = gateway.send(Method::POST, "/chat", &tokyo, "").await;
    assert_eq!(first.status, 200, "the header is read: {}", first.body);
    // Tokyo keeps no daylight saving time: every day is 24 hours.
    assert_eq!(first.header("ratelimit-policy"), Some(r#""daily-calls";q=1;w=86400"#));
    assert_eq!(gateway.send(Method::POST, "/chat", &tokyo, "").await.status, 429);

    for (headers, says) in [
        (vec![("x-tenant", "t2"), ("x-tz", "Mars/Olympus")], "header.x-tz descriptor is \"Mars/Olympus\""),
        (vec![("x-tenant", "t2")], "no header.x-tz descriptor"),
    ] {
        let refused = gateway.send(Method::POST, "/chat", &headers, "").await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(refused.header("content-type"), Some("application/problem+json"));
        let detail = refused.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains(says), "{detail:?} should say {says:?}");
    }
    assert_eq!(upstream.count(), 1, "refused requests never reach the upstream");
    gateway.stop().await;
}

/// An upstream that answers every request with its own rate-limit headers beside one of its own.
async fn upstream_with_its_own_rate_limit_headers() -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut read = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    // Each request head (the gateway sends bodiless GETs here) gets one answer.
                    while let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
                        read.drain(..end + 4);
                        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\
                            ratelimit-policy: \"upstream\";q=1;w=1\r\nx-ratelimit-remaining: 999\r\n\
                            retry-after: 7\r\nx-own: kept\r\n\r\nok";
                        if tcp.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read.extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    (url, task)
}

#[tokio::test]
async fn the_rate_limit_headers_replace_the_upstreams_own_over_http1_and_http2() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let (url, upstream) = upstream_with_its_own_rate_limit_headers().await;
    let gateway = Gateway::start(&format!(
        r#"
rules:
  - name: per-ip
    key: [ip]
    algorithm: fixed_window
    limit: 2
    window: 60s
gateway:
  routes:
    - name: app
      match: {{ path: "/{{*rest}}" }}
      upstream: {url}
"#
    ))
    .await;
    let http1 = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let http2 = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    // The first answer is written by the listener's own HTTP/1.1, the second by hyper (HTTP/2),
    // the third (refused) by hyper too.
    let mut answers = Vec::new();
    for (client, remaining) in [(&http1, "1"), (&http2, "0"), (&http2, "0")] {
        let request = http::Request::get(format!("http://{}/a", gateway.addr)).body(Full::default()).unwrap();
        let response = client.request(request).await.expect("an answer");
        let (head, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        let all = |name: &str| -> Vec<String> {
            head.headers.get_all(name).iter().map(|v| v.to_str().unwrap().to_owned()).collect()
        };
        if head.status == 200 {
            assert_eq!(all("ratelimit-policy"), [r#""per-ip";q=2;w=60"#], "{:?}", head.version);
            assert_eq!(all("x-ratelimit-remaining"), [remaining], "{:?}", head.version);
            // An allowed answer has no Retry-After of Floodgate's: the upstream's own stays.
            assert_eq!(all("retry-after"), ["7"], "{:?}", head.version);
            assert_eq!(all("x-own"), ["kept"], "{:?}", head.version);
            assert_eq!(body, "ok");
        } else {
            assert_eq!(all("x-ratelimit-remaining"), ["0"], "{:?}", head.version);
            let retry: u64 = all("retry-after")[0].parse().unwrap();
            assert!((1..=60).contains(&retry), "{retry}");
            assert_eq!(all("retry-after").len(), 1);
        }
        answers.push((head.version, head.status.as_u16()));
    }
    assert_eq!(
        answers,
        [(http::Version::HTTP_11, 200), (http::Version::HTTP_2, 200), (http::Version::HTTP_2, 429)]
    );
    gateway.stop().await;
    upstream.abort();
}
