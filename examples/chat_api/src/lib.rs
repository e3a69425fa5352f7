//! A chat API rate-limited with Floodgate: `POST /chat` answers `200 {"reply": "..."}`, at most
//! **10 requests a minute per user** and **1000 an hour per tenant** (both `sliding_window`).
//!
//! The user and tenant come from the `x-user-id` and `x-tenant-id` headers (in production, set by
//! an authenticating gateway, never trusted from the internet). A rule applies only when every
//! descriptor of its key is present:
//! - without `x-user-id`, the per-user rule does not apply; the request counts against its tenant
//!   only;
//! - without `x-tenant-id`, only the per-user rule applies;
//! - without either, the request is not limited.
//!
//! A denied request gets `429` with `Retry-After`, the rate-limit headers and an
//! `application/problem+json` body; the handler is not called.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use axum::body::Body;
//! use http::{Request, StatusCode};
//! use tower::ServiceExt;
//!
//! let app = chat_api::app(chat_api::engine());
//! let request = || {
//!     Request::post("/chat")
//!         .header("x-user-id", "u1")
//!         .header("x-tenant-id", "t1")
//!         .body(Body::from(r#"{"message": "hi"}"#))
//!         .unwrap()
//! };
//! for _ in 0..10 {
//!     assert_eq!(app.clone().oneshot(request()).await?.status(), StatusCode::OK);
//! }
//! let denied = app.clone().oneshot(request()).await?;
//! assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert!(denied.headers().contains_key("retry-after"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use axum::{Json, Router};
use floodgate::{Engine, Policy, Rule};
use floodgate_core::SlidingWindow;
use floodgate_tower::RateLimitLayer;
use http::HeaderName;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The header naming the user.
pub const USER_HEADER: HeaderName = HeaderName::from_static("x-user-id");
/// The header naming the tenant.
pub const TENANT_HEADER: HeaderName = HeaderName::from_static("x-tenant-id");

/// The rules: `chat-per-user` (10 a minute) and `chat-per-tenant` (1000 an hour) on `POST /chat`.
pub fn policy() -> Policy {
    let per_user = SlidingWindow::try_new(nonzero(10), Duration::from_secs(60)).expect("non-zero window");
    let per_tenant =
        SlidingWindow::try_new(nonzero(1000), Duration::from_secs(3600)).expect("non-zero window");
    Policy::new([
        Rule::new("chat-per-user", per_user).when("route", "POST /chat").key(["user"]),
        Rule::new("chat-per-tenant", per_tenant).when("route", "POST /chat").key(["tenant"]),
    ])
    .expect("distinct rule names")
}

fn nonzero(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("non-zero limit")
}

/// An in-memory engine with [`policy`].
pub fn engine() -> Arc<Engine> {
    Arc::new(Engine::in_memory(policy()))
}

/// The application: `POST /chat` behind the rate-limit layer.
pub fn app(engine: Arc<Engine>) -> Router {
    let limits =
        RateLimitLayer::new(engine).header(USER_HEADER, "user").header(TENANT_HEADER, "tenant").route();
    Router::new().route("/chat", post(chat)).layer(limits)
}

/// Serves `app` on `listener` until the process ends (with the peer address available to
/// `ClientIp` extractors).
pub async fn serve(listener: TcpListener, app: Router) -> std::io::Result<()> {
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
}

/// Answers `{"reply": "..."}`, echoing `{"message": "..."}` when the body has one.
async fn chat(body: Bytes) -> Json<Value> {
    let message = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(str::to_owned));
    let reply = match message {
        Some(message) => format!("You said: {message}"),
        None => "Hello! Send {\"message\": \"...\"} to chat.".to_owned(),
    };
    Json(json!({ "reply": reply }))
}
