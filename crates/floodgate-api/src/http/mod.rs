//! The HTTP front door: the check API (`/v1/check`, `/v1/report`, `/v1/peek`), the playground
//! (`/v1/simulate`), health and
//! metrics, the admin API under `/admin/`, and all of it as an OpenAPI document
//! (`/openapi.json`, [`openapi`]).
//!
//! Every error is an `application/problem+json` body ([`Problem`]) saying what is wrong; no input
//! makes a handler panic or answer 500.

mod admin;
mod api;
mod dashboard;
pub mod openapi;
mod reserve;
mod responses;
mod rlqs;
mod serve;
mod simulate;
mod stats;
mod switches;
mod usage;

pub use serve::serve;

pub use admin::admitted;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use floodgate_http::Problem;
use floodgate_http::problem::NOT_FOUND_TYPE;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Serialize;

use floodgate_app::metrics::StoreStatus;
use floodgate_app::{App, Ready};

/// The largest body `/v1/check`, `/v1/report` and `/v1/peek` accept: 64 KiB.
pub const MAX_BODY: usize = 64 * 1024;
/// The largest configuration body the admin API accepts: 4 MiB.
pub const MAX_ADMIN_BODY: usize = 4 * 1024 * 1024;
/// The largest body `/v1/simulate` accepts: 1 MiB (10 000 requests fit).
pub const MAX_SIMULATE_BODY: usize = 1024 * 1024;

pub(crate) fn router(app: App) -> Router {
    let api = Router::new()
        .route("/v1/check", post(api::check))
        .route("/v1/report", post(api::report))
        .route("/v1/peek", post(api::peek))
        .route("/v1/reserve", post(reserve::reserve))
        .route("/v1/commit", post(reserve::commit))
        .route("/v1/release", post(reserve::release))
        .route("/v1/usage", get(usage::usage))
        .route("/v1/simulate", post(simulate::simulate))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi::openapi_json).layer(Extension(openapi::Served::new())));
    api.merge(admin::router(app.clone()))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(app.clone(), v1_auth))
        .with_state(app)
}

/// With `auth:` clients, every `/v1` endpoint needs a client's token with its scope: the
/// endpoints below authorize in their handler (check, peek, report, usage, simulate by `check` or
/// `report`, reserve, commit and release by `reserve`); any other `/v1` path is gated here by
/// `check` before it reaches a handler (or the 404), so an endpoint added later is never open.
async fn v1_auth(
    State(app): State<App>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use floodgate_config::auth::Scope;
    let scope = match request.uri().path() {
        // These authorize in their handler: pinned descriptors, the client label, the playground's
        // admin access.
        "/v1/check" | "/v1/peek" | "/v1/report" | "/v1/reserve" | "/v1/commit" | "/v1/release"
        | "/v1/usage" | "/v1/simulate" => None,
        p if p.starts_with("/v1/") => Some(Scope::Check),
        _ => None,
    };
    if let Some(scope) = scope {
        let running = app.control().load();
        let authorization = request.headers().get(http::header::AUTHORIZATION).map(HeaderValue::as_bytes);
        if let Err(refusal) = running.authorize(authorization, scope) {
            return api::refused(&refusal);
        }
    }
    next.run(request).await
}

/// Whether the process runs: `ok`.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = responses::TAG_OPERATIONS,
    operation_id = "healthz",
    responses((status = 200, description = "The process runs.", body = String, content_type = "text/plain", example = "ok\n")),
)]
async fn healthz() -> &'static str {
    "ok\n"
}

/// Whether the server can decide: its store answers, or every rule decides on a local share.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = responses::TAG_OPERATIONS,
    operation_id = "readyz",
    responses(
        (status = 200, description = "Ready: the store answers (`ready`), or it does not but every rule decides on its local share.", body = String, content_type = "text/plain", example = "ready\n"),
        (status = 503, description = "Not ready: the store does not answer (and some rule fails open or closed), or the server is shutting down.", body = String, content_type = "text/plain", example = "store unavailable\n"),
    ),
)]
async fn readyz(State(app): State<App>) -> Response {
    if app.draining() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match app.ready().await {
        Ready::Store => "ready\n".into_response(),
        Ready::Local => "ready (store unavailable: every rule decides on its local share)\n".into_response(),
        Ready::No => (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response(),
    }
}

/// The server's metrics, in the Prometheus text format (0.0.4).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = responses::TAG_OPERATIONS,
    operation_id = "metrics",
    responses((status = 200, description = "Prometheus text exposition.", body = String, content_type = "text/plain", example = "floodgate_config_version 1\n")),
)]
async fn metrics(State(app): State<App>) -> Response {
    let store = app.control().store();
    let status = StoreStatus {
        memory: store.memory_stats(),
        overflow: store.overflow(),
        breaker: store.breaker(),
        fallback: store.fallback().map(|f| f.stats()),
        prefetch: store.prefetch().map(|p| p.stats()),
        give_backs: store.redis().filter(|r| r.is_cluster()).map(|r| r.give_backs()),
    };
    let text = app.metrics().render(status);
    ([(CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"))], text)
        .into_response()
}

async fn not_found() -> Response {
    problem(Problem::new(StatusCode::NOT_FOUND, NOT_FOUND_TYPE, "Not Found", "No such endpoint."))
}

async fn method_not_allowed() -> Response {
    problem(Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        NOT_FOUND_TYPE,
        "Method Not Allowed",
        "This endpoint does not accept this method.",
    ))
}

/// A problem+json response.
pub(crate) fn problem(problem: Problem) -> Response {
    problem.to_response().map(Body::from)
}

/// A 400 for a body that is not what it should be at all.
pub(crate) fn malformed(detail: impl Into<String>) -> Response {
    problem(Problem::malformed(detail))
}

/// A 422 for JSON of the wrong shape.
pub(crate) fn invalid(detail: impl Into<String>) -> Response {
    problem(Problem::invalid(detail))
}

/// A JSON response of bytes already serialized.
pub(crate) fn json_bytes(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    // Room for the content type and the rate-limit headers, without growing.
    *response.headers_mut() = http::HeaderMap::with_capacity(8);
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON response.
pub(crate) fn json(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => json_bytes(status, body),
        Err(e) => problem(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "about:blank",
            "Internal Server Error",
            format!("could not render the response: {e}"),
        )),
    }
}

/// Reads a whole body of at most `limit` bytes: 413 beyond, 400 when it cannot be read.
pub(crate) async fn read_body<B>(request: http::Request<B>, limit: usize) -> Result<Bytes, Response>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let too_large = || problem(Problem::too_large(limit));
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    match Limited::new(request.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(e) => Err(malformed(format!("The body could not be read: {e}"))),
    }
}
