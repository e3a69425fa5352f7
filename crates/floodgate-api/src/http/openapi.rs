//! `GET /openapi.json`: the HTTP API as an OpenAPI 3.1 document, built from the handlers (each
//! carries its `#[utoipa::path]`: method, path, body, statuses) and the wire types of
//! `floodgate-http` (request body, verdict, problems, headers: `floodgate_http::openapi`), so it
//! says what the code does.
//!
//! `docs/openapi.json` is a copy of it: a test fails when the two differ, and
//! `floodgate openapi > docs/openapi.json` (or the test with `FLOODGATE_WRITE_OPENAPI=1`) writes it
//! anew. `scripts/api-fuzz` checks the server against it with schemathesis.

use axum::Extension;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use floodgate_http::Problem;
use floodgate_http::openapi::decision_headers;
use floodgate_http::wire::{CheckRequest, VerdictBody};
use http::HeaderValue;
use http::header::CONTENT_TYPE;
use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::responses::{TAG_ADMIN, TAG_DECISIONS, TAG_OPERATIONS};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Floodgate HTTP API",
        description = "Floodgate decides, for every request, whether it may pass. This is its HTTP \
            API: decisions (`/v1/check`, `/v1/peek`, `/v1/report`), health and metrics, and the \
            admin API (configuration, audit log, keys). Errors are RFC 9457 problems \
            (`application/problem+json`) with a stable `type`. Served by every `floodgate serve` \
            at `GET /openapi.json`.",
    ),
    paths(
        super::api::check,
        super::api::peek,
        super::api::report,
        super::reserve::reserve,
        super::reserve::commit,
        super::reserve::release,
        super::usage::usage,
        super::simulate::simulate,
        super::healthz,
        super::readyz,
        super::metrics,
        openapi_json,
        super::admin::config::get_config,
        super::admin::config::apply_config,
        super::admin::config::validate_config,
        super::admin::config::reload,
        super::admin::config::rollback,
        super::admin::config::audit,
        super::admin::keys::inspect_key,
        super::admin::keys::reset_key,
        super::switches::get_switches,
        super::switches::set_switches,
        super::switches::clear_switches,
        super::stats::snapshot,
        super::stats::stream,
        super::rlqs::view,
        super::admin::clock::get_clock,
        super::admin::clock::move_clock,
        super::dashboard::page,
        super::dashboard::script,
        super::dashboard::style,
    ),
    components(schemas(CheckRequest, VerdictBody<'static>, Problem)),
    modifiers(&AdminToken, &ClientToken),
    tags(
        (name = TAG_DECISIONS, description = "May this request pass? Every answer carries the verdict of each rule that applied, and the rate-limit headers. Open to every caller unless the configuration has `auth` clients; with them, every `/v1` call sends a client's token holding the operation's scope (`clientToken`)."),
        (name = TAG_OPERATIONS, description = "Liveness, readiness, metrics and this document."),
        (name = TAG_ADMIN, description = "The running configuration, its audit log and key state. Loopback peers only when the server has no admin token and no `auth` client holds the `admin` scope; with either, every caller sends `Authorization: Bearer <token>` with the admin token or an `admin` client's token."),
    ),
)]
struct Document;

/// The document.
pub fn document() -> utoipa::openapi::OpenApi {
    Document::openapi()
}

/// The document as the server serves it and `docs/openapi.json` holds it: pretty JSON, ending
/// with a newline.
pub fn json() -> String {
    let mut value = serde_json::to_value(document()).unwrap_or(Value::Null);
    mark_required_headers(&mut value);
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

/// `required: true` on the headers every response of their kind carries (`Retry-After` on a
/// 429), which `utoipa`'s header type has no field for.
fn mark_required_headers(document: &mut Value) {
    let required: Vec<&str> =
        decision_headers(true).into_iter().filter(|h| h.required).map(|h| h.name).collect();
    let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) else { return };
    let operations = paths.values_mut().filter_map(Value::as_object_mut).flat_map(|p| p.values_mut());
    for operation in operations {
        let responses = operation.get_mut("responses").and_then(Value::as_object_mut);
        for response in responses.into_iter().flat_map(|r| r.values_mut()) {
            let headers = response.get_mut("headers").and_then(Value::as_object_mut);
            for (name, header) in headers.into_iter().flatten() {
                if required.contains(&name.as_str())
                    && let Some(header) = header.as_object_mut()
                {
                    header.insert("required".into(), Value::Bool(true));
                }
            }
        }
    }
}

/// The served document's bytes, made once per router.
#[derive(Debug, Clone)]
pub(super) struct Served(Bytes);

impl Served {
    pub(super) fn new() -> Served {
        Served(Bytes::from(json()))
    }
}

/// This document: the HTTP API as OpenAPI 3.1.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = TAG_OPERATIONS,
    operation_id = "openapi",
    responses((status = 200, description = "This document.", body = BTreeMap<String, Value>, content_type = "application/json")),
)]
pub(super) async fn openapi_json(Extension(Served(document)): Extension<Served>) -> Response {
    ([(CONTENT_TYPE, HeaderValue::from_static("application/json"))], document).into_response()
}

/// The admin API's bearer token.
struct AdminToken;

/// The data plane's bearer tokens: the configuration's `auth` clients.
struct ClientToken;

impl Modify for ClientToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "clientToken",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The token of a client of the configuration's `auth` section (docs/security.md). \
                         Without `auth` clients configured, the data plane needs no credentials (the empty \
                         requirement). With them, every `/v1` call sends the token of a client holding the \
                         operation's scope — `check` for check, peek, usage and simulate, `report` for \
                         report, `reserve` for reserve, commit and release — or is refused: 401 without a \
                         token or with one no client has, 403 for a client without the scope or one giving a \
                         descriptor pinned to it another value. A client with the `admin` scope uses its \
                         token on the admin API too.",
                    ))
                    .build(),
            ),
        );
    }
}

impl Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "adminToken",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The server's admin token (`--admin-token` or `FLOODGATE_ADMIN_TOKEN`). \
                         Without one configured, the admin API needs no credentials and answers \
                         loopback peers only (the empty requirement); with one, every caller, \
                         loopback or not, must send it.",
                    ))
                    .build(),
            ),
        );
    }
}
