//! Floodgate for [tower] and [axum]: a [`RateLimitLayer`] that checks every request against a
//! floodgate [`Engine`](floodgate::Engine) before the service sees it.
//!
//! - **Descriptors** come from [`Extractor`]s: the client IP behind trusted proxies
//!   ([`ClientIp`]), request headers, the route template (axum's `MatchedPath`, never the raw
//!   URL), the method, or a closure.
//! - **Allowed** requests reach the service with a [`RateLimitInfo`] in their extensions; the
//!   response carries the rate-limit headers ([`HeaderStyle`]: IETF draft, legacy, both, none).
//! - **Denied** requests are answered `429 Too Many Requests` with `Retry-After` and an
//!   `application/problem+json` body, without calling the service. Requests that can never pass
//!   (a cost above what a limit grants at once) get a `400` problem.
//! - **Concurrency** permits are held by the response body ([`RateLimitBody`]) and released when
//!   it ends or is dropped.
//!
//! Apply the layer with [`Router::layer`](axum::Router::layer) or
//! [`route_layer`](axum::Router::route_layer) so that the route template is known, and serve with
//! `into_make_service_with_connect_info::<SocketAddr>()` for the client IP.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use std::num::NonZeroU64;
//! use std::time::Duration;
//! use axum::{Router, body::Body, routing::post};
//! use floodgate::{Engine, Policy, Rule};
//! use floodgate_core::SlidingWindow;
//! use floodgate_tower::RateLimitLayer;
//! use http::{HeaderName, Request, StatusCode};
//! use tower::ServiceExt;
//!
//! let per_user = Rule::new("chat-per-user", SlidingWindow::try_new(NonZeroU64::new(2).unwrap(), Duration::from_secs(60))?)
//!     .when("route", "POST /chat")
//!     .key(["user"]);
//! let engine = Engine::in_memory(Policy::new([per_user])?);
//! let app = Router::new()
//!     .route("/chat", post(|| async { "hi" }))
//!     .layer(
//!         RateLimitLayer::new(engine)
//!             .header(HeaderName::from_static("x-user-id"), "user")
//!             .route(),
//!     );
//!
//! let chat = || Request::post("/chat").header("x-user-id", "u1").body(Body::empty()).unwrap();
//! let first = app.clone().oneshot(chat()).await?;
//! assert_eq!(first.status(), StatusCode::OK);
//! assert_eq!(first.headers()["ratelimit-policy"], r#""chat-per-user";q=2;w=60"#);
//! assert!(first.headers()["ratelimit"].to_str()?.starts_with(r#""chat-per-user";r=1;t="#));
//! app.clone().oneshot(chat()).await?;
//! let third = app.clone().oneshot(chat()).await?;
//! assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(third.headers()["content-type"], "application/problem+json");
//! assert!(third.headers().contains_key("retry-after"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! [tower]: https://docs.rs/tower
//! [axum]: https://docs.rs/axum

mod body;
mod error;
mod extract;
mod future;
mod info;
mod layer;
mod permit;
mod service;

pub use body::RateLimitBody;
pub use error::InvalidProxy;
pub use extract::{
    ClientIp, Extractor, ProxyHeader, ip_text, push_ip, push_route, route_descriptor, route_template,
};
pub use floodgate_http::HeaderStyle;
pub use future::ResponseFuture;
pub use info::RateLimitInfo;
pub use layer::{DEFAULT_MAX_WAITING, RateLimitLayer};
pub use permit::Permits;
pub use service::RateLimit;
