//! The `floodgate` binary's library: the standalone rate-limit service.
//!
//! One [`App`] holds the running configuration (hot-reloadable, versioned, audited) over one store,
//! and serves it through front doors that all go down one decision path (descriptors → engine →
//! observers → render; `decide.rs`):
//! - the **HTTP API** (axum): `POST /v1/check`, `/v1/report`, `/v1/peek`, `/v1/simulate` (the
//!   playground: [`playground`]), `GET /healthz`,
//!   `/readyz`, `/metrics`, `/openapi.json` (the API as OpenAPI 3.1: [`http::openapi`]), and the
//!   admin API under `/admin/` ([`http`]);
//! - **Envoy RLS v3** gRPC (tonic): `ShouldRateLimit` ([`grpc`]).
//!
//! [`Server`] runs an app on listeners the caller bound (tests bind port 0), with graceful
//! shutdown; the `floodgate` binary adds the command line ([`cli`]), signals and file watching
//! ([`reload`]). Configuration parsing is `floodgate-config`'s, the HTTP vocabulary (headers,
//! problems, wire types) `floodgate-http`'s.
//!
//! Inside, arrows point inward: [`app`] builds the front doors ([`http`], [`grpc`]) over the shared
//! state (`state.rs`: [`control`], the decision path, [`metrics`]); front doors never import
//! [`app`], and the state knows nothing of front doors (a test keeps the module graph acyclic).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use floodgate_server::{App, ServeOptions};
//! use tower::ServiceExt;
//!
//! let app = App::new(floodgate_config::builtin(), ServeOptions::default())?;
//! let check = http::Request::post("/v1/check")
//!     .body(axum::body::Body::from(r#"{"descriptors": {"user": "u1", "route": "POST /chat"}}"#))?;
//! let response = app.router().oneshot(check).await?;
//! assert_eq!(response.status(), 200);
//! assert!(response.headers().contains_key("ratelimit-policy"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

pub mod admin_state;
pub mod app;
pub mod audit;
mod auth;
pub mod cli;
pub mod control;
mod decide;
pub mod gateway;
pub mod grpc;
pub mod http;
mod listener;
pub mod live;
pub mod metrics;
pub mod playground;
pub mod reload;
mod state;
pub mod survival;
pub mod switches;
pub mod tls;

pub use app::{App, Server};
pub use control::{Control, StartError};
pub use state::ServeOptions;

/// Completes on `SIGTERM` or `SIGINT` (Ctrl-C): the binary's shutdown trigger.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        // Without signal handlers there is nothing to wait for but the process's end.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}
