//! Floodgate's API front doors, over the service core (`floodgate-app`):
//! - the **HTTP API** (axum): `POST /v1/check`, `/v1/report`, `/v1/peek`, `/v1/reserve`,
//!   `/v1/commit`, `/v1/release`, `GET /v1/usage`, `POST /v1/simulate` (the playground:
//!   [`playground`]), `GET /healthz`, `/readyz`, `/metrics`, `/openapi.json` (the API as OpenAPI
//!   3.1: [`http::openapi`]), the admin API under `/admin/` and the dashboard ([`http`]);
//! - **Envoy RLS v3** gRPC (tonic): `ShouldRateLimit` ([`grpc`]);
//! - **Envoy RLQS v3** gRPC on the same listener: `StreamRateLimitQuotas`, global limits shared
//!   among Envoys by demand, with no call per request ([`rlqs`]).
//!
//! Each door turns its request into descriptors, decides them down the app's one decision path
//! ([`floodgate_app::decide`]), and renders the verdict its own way; `floodgate-http` holds what
//! every door says (headers, problems, wire types). This crate never depends on the gateway, nor
//! the gateway on it.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use floodgate_app::{App, ServeOptions};
//! use tower::ServiceExt;
//!
//! let app = App::new(floodgate_config::builtin(), ServeOptions::default())?;
//! let check = http::Request::post("/v1/check")
//!     .body(axum::body::Body::from(r#"{"descriptors": {"user": "u1", "route": "POST /chat"}}"#))?;
//! let response = floodgate_api::router(&app).oneshot(check).await?;
//! assert_eq!(response.status(), 200);
//! assert!(response.headers().contains_key("ratelimit-policy"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

pub mod grpc;
pub mod http;
pub mod playground;
pub mod rlqs;

use floodgate_app::App;

pub use crate::grpc::serve as serve_grpc;
pub use crate::http::serve as serve_http;

/// The HTTP API (check, report, peek, reserve, usage, simulate, health, metrics, OpenAPI, admin,
/// dashboard) as an axum router. Serve it with
/// `into_make_service_with_connect_info::<SocketAddr>()`: the admin API reads the peer address.
pub fn router(app: &App) -> axum::Router {
    crate::http::router(app.clone())
}

/// The Envoy RLS v3 gRPC service.
pub fn grpc_service(app: &App) -> grpc::RateLimitServer {
    crate::grpc::service(app.clone())
}

/// The Envoy RLQS v3 gRPC service.
pub fn quota_service(app: &App) -> rlqs::RateLimitQuotaServer {
    crate::rlqs::service(app.clone())
}
