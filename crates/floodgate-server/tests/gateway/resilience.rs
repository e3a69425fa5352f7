//! The second line of defence: each timeout tier, the breaker (opening, one probe, closing), the
//! retry budget (upstream requests stay within 1.2× client requests while the upstream fails), and
//! the route's concurrency cap.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use tokio::net::TcpSocket;

use super::upstreams::{Behaviour, Upstream};
use super::{Gateway, metric};

/// One route `r` taking every path to `url`, with `extra` lines of its settings.
pub(crate) fn route_config(url: &str, extra: &str) -> String {
    format!(
        r#"
rules: []
gateway:
  routes:
    - name: r
      match: {{ path: "/{{*rest}}" }}
      upstream: {url}
{extra}"#
    )
}

/// The budget a 504 names in its detail.
fn budget_named(reply: &super::Reply) -> &'static str {
    assert_eq!(reply.status, 504, "{}", reply.body);
    assert_eq!(reply.json()["type"], "https://floodgate.dev/problems/upstream-timeout");
    let detail = reply.json()["detail"].as_str().unwrap().to_owned();
    ["connect", "first_byte", "total"]
        .into_iter()
        .find(|b| detail.contains(&format!("`{b}`")))
        .unwrap_or_else(|| panic!("no timeout named in {detail:?}"))
}

// Each tier is its own budget: a first byte counted from the attempt's start plus `connect` (2.3 s)
// would let `total` (2 s) fire first and name itself instead.
#[tokio::test]
async fn a_hanging_upstream_gets_504_at_first_byte_on_a_new_connection() {
    let upstream = Upstream::start(Behaviour::Hang).await;
    let gateway = Gateway::start(&route_config(
        &upstream.url(),
        "      timeouts: { connect: 2s, first_byte: 300ms, total: 2s }\n",
    ))
    .await;
    let reply = gateway.get("/slow", &[]).await;
    assert_eq!(budget_named(&reply), "first_byte", "{}", reply.body);
    assert!(reply.json()["detail"].as_str().unwrap().contains("(300ms)"), "{}", reply.body);
    gateway.stop().await;
}

#[tokio::test]
async fn a_hanging_upstream_gets_504_at_first_byte_on_a_pooled_connection() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let gateway = Gateway::start(&route_config(
        &upstream.url(),
        "      timeouts: { connect: 2s, first_byte: 300ms, total: 2s }\n",
    ))
    .await;
    assert_eq!(gateway.get("/warm", &[]).await.status, 200, "the connection is made and pooled");
    upstream.set(Behaviour::Hang);
    let reply = gateway.get("/slow", &[]).await;
    assert_eq!(budget_named(&reply), "first_byte", "{}", reply.body);
    gateway.stop().await;
}

#[tokio::test]
async fn the_total_timeout_names_itself_when_it_comes_before_the_head() {
    let upstream = Upstream::start(Behaviour::Hang).await;
    let gateway = Gateway::start(&route_config(
        &upstream.url(),
        "      timeouts: { connect: 200ms, first_byte: 20s, total: 300ms }\n",
    ))
    .await;
    let reply = gateway.get("/slow", &[]).await;
    assert_eq!(budget_named(&reply), "total", "{}", reply.body);
    gateway.stop().await;
}

#[tokio::test]
async fn an_upstream_that_does_not_accept_gets_504_at_connect() {
    // A listener whose accept queue is full and never drained: the kernel drops new SYNs, so a
    // connection attempt hangs until the gateway's connect timeout.
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..8 {
        let s = TcpSocket::new_v4().unwrap();
        if let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_millis(200), s.connect(addr)).await {
            fillers.push(stream);
        }
    }
    let url = format!("http://{addr}");
    let gateway = Gateway::start(&route_config(
        &url,
        "      timeouts: { connect: 300ms, first_byte: 20s, total: 20s }\n",
    ))
    .await;
    let reply = gateway.get("/x", &[]).await;
    assert_eq!(budget_named(&reply), "connect", "{}", reply.body);
    assert!(reply.json()["detail"].as_str().unwrap().contains("connection"), "{}", reply.body);
    drop((listener, fillers));
    gateway.stop().await;
}

#[tokio::test]
async fn the_total_timeout_cuts_a_body_that_keeps_streaming() {
    let upstream = Upstream::start(Behaviour::StallBody).await;
    let gateway =
        Gateway::start(&route_config(&upstream.url(), "      timeouts: { connect: 100ms, total: 500ms }\n"))
            .await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let response = client.get(format!("http://{}/stream", gateway.addr).parse().unwrap()).await.unwrap();
    assert_eq!(response.status(), 200, "the head came in time");
    // The upstream never finishes the body: only the total timeout ends it.
    let body = http_body_util::BodyExt::collect(response.into_body()).await;
    assert!(body.is_err(), "the body was cut, not completed");
    gateway.stop().await;
}

#[tokio::test]
async fn a_connection_refused_is_502() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let gateway = Gateway::start(&route_config(&format!("http://127.0.0.1:{port}"), "")).await;
    let reply = gateway.get("/x", &[]).await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.json()["type"], "https://floodgate.dev/problems/upstream-unavailable");
    gateway.stop().await;
}

#[tokio::test]
async fn the_breaker_opens_sends_one_probe_and_closes() {
    let upstream = Upstream::start(Behaviour::FailAll).await;
    let extra = "      breaker: { failure_rate: 50%, min_calls: 4, window: 10s, open_for: 600ms }\n";
    let gateway = Gateway::start(&route_config(&upstream.url(), extra)).await;
    for _ in 0..4 {
        assert_eq!(gateway.get("/x", &[]).await.status, 503);
    }
    assert_eq!(upstream.count(), 4);
    // Open: answered at once, the upstream not called.
    let open = gateway.get("/x", &[]).await;
    assert_eq!(open.status, 503);
    assert_eq!(open.json()["type"], "https://floodgate.dev/problems/upstream-unavailable");
    assert!(open.header("retry-after").is_some());
    assert_eq!(upstream.count(), 4);
    let page = gateway.metrics().await;
    assert_eq!(metric(&page, r#"floodgate_gateway_breaker_state{route="r"}"#), Some(1.0));

    // After open_for, the upstream healthy but slow: of five concurrent requests exactly one goes
    // through (the probe); the others are refused while it is in flight.
    tokio::time::sleep(Duration::from_millis(650)).await;
    upstream.set(Behaviour::Answer);
    upstream.set_delay(Duration::from_millis(300));
    let gateway = Arc::new(gateway);
    let tasks: Vec<_> = (0..5)
        .map(|i| {
            let gateway = Arc::clone(&gateway);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(i * 20)).await;
                gateway.get("/x", &[]).await.status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 503, 503, 503, 503], "one probe");
    assert_eq!(upstream.count(), 5);
    // The probe succeeded: closed, everything passes.
    upstream.set_delay(Duration::ZERO);
    for _ in 0..3 {
        assert_eq!(gateway.get("/x", &[]).await.status, 200);
    }
    let page = gateway.metrics().await;
    assert_eq!(metric(&page, r#"floodgate_gateway_breaker_state{route="r"}"#), Some(0.0));
}

#[tokio::test]
async fn an_open_breaker_answers_with_the_route_fallback() {
    let upstream = Upstream::start(Behaviour::FailAll).await;
    let extra = r#"      breaker: { min_calls: 2, open_for: 30s }
      fallback: { status: 200, body: '{"code":"DEGRADED"}', content_type: application/json, retry_after: 30s }
"#;
    let gateway = Gateway::start(&route_config(&upstream.url(), extra)).await;
    for _ in 0..2 {
        assert_eq!(gateway.get("/x", &[]).await.status, 503);
    }
    let reply = gateway.get("/x", &[]).await;
    assert_eq!((reply.status, reply.body.as_str()), (200, r#"{"code":"DEGRADED"}"#));
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.header("retry-after"), Some("30"));
    let page = gateway.metrics().await;
    assert_eq!(metric(&page, r#"floodgate_gateway_degraded_total{route="r",mode="fallback"}"#), Some(1.0));
    gateway.stop().await;
}

/// Clients and requests each, for the budget test.
const CLIENTS: usize = 20;
const EACH: usize = 20;

async fn hammer(gateway: &Arc<Gateway>, method: Method) -> usize {
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let gateway = Arc::clone(gateway);
            let method = method.clone();
            tokio::spawn(async move {
                for _ in 0..EACH {
                    gateway.send(method.clone(), "/x", &[], "").await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    CLIENTS * EACH
}

#[tokio::test]
async fn the_retry_budget_holds_upstream_requests_within_1_2_times_the_client_requests() {
    let upstream = Upstream::start(Behaviour::FlakyRandom).await;
    let extra = "      retries: { attempts: 2, on: [503], budget: 20%, min_concurrent: 0, backoff: 5ms, max_backoff: 20ms }\n";
    let gateway = Arc::new(Gateway::start(&route_config(&upstream.url(), extra)).await);
    let sent = hammer(&gateway, Method::GET).await;
    let reached = upstream.count();
    let page = gateway.metrics().await;
    let retried = metric(&page, r#"floodgate_gateway_retries_total{route="r",outcome="sent"}"#).unwrap();
    assert!(
        reached as f64 <= 1.2 * sent as f64,
        "{reached} upstream requests for {sent} client requests, {retried} retries"
    );
    assert!(reached > sent, "some retries were sent: {reached}");
    let page = gateway.metrics().await;
    let refused =
        metric(&page, r#"floodgate_gateway_retries_total{route="r",outcome="budget_exhausted"}"#).unwrap();
    assert!(refused > 0.0, "the budget refused retries");

    // Without a budget (a floor above any concurrency), the same traffic retries far more: the
    // budget is what held it.
    let upstream = Upstream::start(Behaviour::FlakyRandom).await;
    let extra =
        "      retries: { attempts: 2, on: [503], min_concurrent: 1000, backoff: 5ms, max_backoff: 20ms }\n";
    let gateway = Arc::new(Gateway::start(&route_config(&upstream.url(), extra)).await);
    let sent = hammer(&gateway, Method::GET).await;
    assert!(upstream.count() as f64 > 1.5 * sent as f64, "{} for {sent}", upstream.count());

    // Writes (not idempotent) are never retried.
    let upstream = Upstream::start(Behaviour::FlakyRandom).await;
    let extra = "      retries: { attempts: 2, on: [503], budget: 100% }\n";
    let gateway = Arc::new(Gateway::start(&route_config(&upstream.url(), extra)).await);
    let sent = hammer(&gateway, Method::POST).await;
    assert_eq!(upstream.count(), sent);
}

#[tokio::test]
async fn a_full_route_answers_503() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    upstream.set_delay(Duration::from_millis(400));
    let gateway = Arc::new(Gateway::start(&route_config(&upstream.url(), "      concurrency: 2\n")).await);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let gateway = Arc::clone(&gateway);
            tokio::spawn(async move { gateway.get("/x", &[]).await.status })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 503, 503]);
    // The places came back when the responses ended.
    assert_eq!(gateway.get("/x", &[]).await.status, 200);
}
