//! `GET /dashboard`: one page, its script and style embedded in the binary (no CDN, nothing fetched
//! but this server's own API), under the admin API's access rules. What it shows and which
//! endpoints it reads: docs/dashboard.md.

use axum::response::Response;
use http::HeaderValue;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};

use super::responses::{AdminAccess, TAG_ADMIN};

const PAGE: &str = include_str!("../../assets/dashboard/index.html");
const SCRIPT: &str = include_str!("../../assets/dashboard/dashboard.js");
const STYLE: &str = include_str!("../../assets/dashboard/dashboard.css");

/// Only this server: the page loads its own script and style and talks to its own API.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                      connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset_response(body: &'static str, content_type: &'static str) -> Response {
    let mut response = Response::new(axum::body::Body::from(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("content-security-policy", HeaderValue::from_static(POLICY));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

/// The dashboard: live decisions and denials per rule, top offenders, store health, the
/// configuration's versions and audit log with rollback, a key inspector, and the algorithm
/// playground.
#[utoipa::path(
    get,
    path = "/dashboard",
    tag = TAG_ADMIN,
    operation_id = "dashboard",
    security((), ("adminToken" = [])),
    responses((status = 200, description = "The page (its script and style under `/dashboard/`).", body = String, content_type = "text/html"), AdminAccess),
)]
pub(super) async fn page() -> Response {
    asset_response(PAGE, "text/html; charset=utf-8")
}

/// The page's script.
#[utoipa::path(
    get,
    path = "/dashboard/dashboard.js",
    tag = TAG_ADMIN,
    operation_id = "dashboardScript",
    security((), ("adminToken" = [])),
    responses((status = 200, description = "The dashboard's script.", body = String, content_type = "text/javascript"), AdminAccess),
)]
pub(super) async fn script() -> Response {
    asset_response(SCRIPT, "text/javascript; charset=utf-8")
}

/// The page's style.
#[utoipa::path(
    get,
    path = "/dashboard/dashboard.css",
    tag = TAG_ADMIN,
    operation_id = "dashboardStyle",
    security((), ("adminToken" = [])),
    responses((status = 200, description = "The dashboard's style sheet.", body = String, content_type = "text/css"), AdminAccess),
)]
pub(super) async fn style() -> Response {
    asset_response(STYLE, "text/css; charset=utf-8")
}
