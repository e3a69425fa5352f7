//! The client IP behind trusted proxies, and the spoofing attempts it must withstand.

use std::num::NonZeroU64;
use std::time::Duration;

use axum::body::Body;
use axum::routing::post as post_route;
use axum::{Extension, Router};
use floodgate::Rule;
use floodgate_core::FixedWindow;
use floodgate_tower::{ClientIp, ProxyHeader, RateLimitInfo, RateLimitLayer};
use http::StatusCode;

use crate::{body_string, engine, from_peer, post, send};

fn per_ip() -> Rule {
    Rule::new("per-ip", FixedWindow::try_new(NonZeroU64::new(1).unwrap(), Duration::from_secs(60)).unwrap())
        .key(["ip"])
}

async fn ip_of(Extension(info): Extension<RateLimitInfo>) -> String {
    info.descriptors().get("ip").unwrap_or("-").to_owned()
}

fn app(client_ip: ClientIp) -> Router {
    let (engine, _clock) = engine([per_ip()]);
    Router::new().route("/", post_route(ip_of)).layer(RateLimitLayer::new(engine).client_ip(client_ip))
}

fn trusted() -> ClientIp {
    ClientIp::new().try_trust(["10.0.0.0/8", "fd00::/8"]).unwrap()
}

/// The `ip` descriptor the handler saw for a request from `peer` with `headers`.
async fn client_of(app: &Router, peer: &str, headers: &[(&str, &str)]) -> String {
    let mut request = post("/");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = send(app, from_peer(request.body(Body::empty()).unwrap(), peer)).await;
    assert_eq!(response.status(), StatusCode::OK);
    body_string(response).await
}

#[tokio::test]
async fn untrusted_peer_is_the_client_whatever_x_forwarded_for_says() {
    let app = app(trusted());
    let ip = client_of(&app, "198.51.100.7:5000", &[("x-forwarded-for", "203.0.113.1")]).await;
    assert_eq!(ip, "198.51.100.7");
}

#[tokio::test]
async fn without_trusted_proxies_headers_are_ignored_even_from_private_peers() {
    let app = app(ClientIp::new());
    let ip = client_of(&app, "10.0.0.1:5000", &[("x-forwarded-for", "203.0.113.1")]).await;
    assert_eq!(ip, "10.0.0.1");
}

#[tokio::test]
async fn trusted_proxy_chain_yields_the_client() {
    let app = app(trusted());
    // client → proxy1 (10.1.1.1) → proxy2 (10.0.0.1, the TCP peer)
    let ip = client_of(&app, "10.0.0.1:5000", &[("x-forwarded-for", "203.0.113.1, 10.1.1.1")]).await;
    assert_eq!(ip, "203.0.113.1");
}

#[tokio::test]
async fn prepended_fake_entries_do_not_change_the_client_or_its_limit() {
    let app = app(trusted());
    let ip =
        client_of(&app, "10.0.0.1:5000", &[("x-forwarded-for", "1.1.1.1, 10.9.9.9, 203.0.113.1, 10.1.1.1")])
            .await;
    assert_eq!(ip, "203.0.113.1");
    // Already used its one request: rotating the fake left-most value does not help.
    let request =
        post("/").header("x-forwarded-for", "2.2.2.2, 203.0.113.1, 10.1.1.1").body(Body::empty()).unwrap();
    let response = send(&app, from_peer(request, "10.0.0.2:5000")).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn forwarded_header_with_quoted_ipv6() {
    let app = app(trusted().header(ProxyHeader::Forwarded));
    let forwarded = r#"for=6.6.6.6, for="[2001:db8::1]:4711";proto=https, for=10.1.1.1"#;
    let ip = client_of(&app, "10.0.0.1:5000", &[("forwarded", forwarded)]).await;
    assert_eq!(ip, "2001:db8::1");
}

#[tokio::test]
async fn ipv6_peer_and_chain() {
    let app = app(trusted());
    let ip = client_of(&app, "[fd00::1]:443", &[("x-forwarded-for", "2001:db8::7, fd00::2")]).await;
    assert_eq!(ip, "2001:db8::7");
    let ip = client_of(&app, "[2001:db8::9]:443", &[("x-forwarded-for", "2001:db8::7")]).await;
    assert_eq!(ip, "2001:db8::9");
}

#[tokio::test]
async fn malformed_entry_falls_back_to_the_last_trusted_hop() {
    let app = app(trusted());
    let ip =
        client_of(&app, "10.0.0.1:5000", &[("x-forwarded-for", "203.0.113.1, not-an-ip, 10.1.1.1")]).await;
    assert_eq!(ip, "10.1.1.1");
}

#[tokio::test]
async fn without_connect_info_there_is_no_ip_descriptor() {
    let app = app(trusted());
    let request = post("/").header("x-forwarded-for", "203.0.113.1").body(Body::empty()).unwrap();
    let response = send(&app, request).await;
    assert_eq!(body_string(response).await, "-");
}
