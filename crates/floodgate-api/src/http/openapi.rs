//! `GET /openapi.json`: the HTTP API as an OpenAPI 3.1 document, built from the handlers (each
//! carries its `#[utoipa::path]`: method, path, body, statuses) and the wire types of
//! `floodgate-http` (request body, verdict, problems, headers: `floodgate_http::openapi`), so it
//! says what the code does.
//!
//! `docs/openapi.json` is a copy of it: a test fails when the two differ, and
//! `floodgate openapi > docs/openapi.json` (or the test with `FLOODGATE_WRITE_OPENAPI=1`) writes it
//! anew. `scripts/api-fuzz` checks the server against it with schemathesis.

use std::collections::BTreeMap;

use axum::Extension;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use floodgate_http::openapi::{decision_headers, problem_example, problem_of, reference};
use floodgate_http::problem::{
    FORBIDDEN_TYPE, INVALID_TYPE, MALFORMED_TYPE, NEVER_ALLOWED_TYPE, NOT_FOUND_TYPE,
    RESERVATION_SETTLED_TYPE, STORE_UNAVAILABLE_TYPE, TOO_LARGE_TYPE, UNAUTHORIZED_TYPE,
};
use floodgate_http::wire::{CheckRequest, VerdictBody};
use floodgate_http::{PROBLEM_CONTENT_TYPE, Problem};
use http::HeaderValue;
use http::header::CONTENT_TYPE;
use serde_json::{Value, json};
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, RefOr};
use utoipa::{IntoResponses, Modify, OpenApi, PartialSchema};

use super::MAX_BODY;

/// The tag of `/v1/check`, `/v1/peek`, `/v1/report`.
pub(super) const TAG_DECISIONS: &str = "decisions";
/// The tag of `/healthz`, `/readyz`, `/metrics`, `/openapi.json`.
pub(super) const TAG_OPERATIONS: &str = "operations";
/// The tag of `/admin/...`.
pub(super) const TAG_ADMIN: &str = "admin";
/// The media type of a configuration body.
pub(super) const YAML: &str = "application/yaml";

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
        super::admin::get_config,
        super::admin::apply_config,
        super::admin::validate_config,
        super::admin::reload,
        super::admin::rollback,
        super::admin::audit,
        super::admin::inspect_key,
        super::admin::reset_key,
        super::switches::get_switches,
        super::switches::set_switches,
        super::switches::clear_switches,
        super::stats::snapshot,
        super::stats::stream,
        super::dashboard::page,
        super::dashboard::script,
        super::dashboard::style,
    ),
    components(schemas(CheckRequest, VerdictBody<'static>, Problem)),
    modifiers(&AdminToken),
    tags(
        (name = TAG_DECISIONS, description = "May this request pass? Every answer carries the verdict of each rule that applied, and the rate-limit headers."),
        (name = TAG_OPERATIONS, description = "Liveness, readiness, metrics and this document."),
        (name = TAG_ADMIN, description = "The running configuration, its audit log and key state. Loopback peers only when the server has no admin token; with one, every caller sends `Authorization: Bearer <token>`."),
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

/// A configuration body: a YAML mapping, whose fields the server validates itself (with errors
/// naming line, column and field) rather than a schema.
pub(super) struct ConfigDocument;

impl PartialSchema for ConfigDocument {
    fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .description(Some(
                "A native configuration (`store`, `headers`, `rules`, …) or an envoyproxy/ratelimit \
                 file (`domain`, `descriptors`), as docs/configuration.md describes them. Its fields \
                 are validated by the server, which names the line, column and field of what is \
                 wrong (422).",
            ))
            .examples([json!({"rules": [{
                "name": "per-user", "key": ["user"], "algorithm": "sliding_window", "limit": 10, "window": "60s"
            }]})])
            .into()
    }
}

impl utoipa::ToSchema for ConfigDocument {
    fn name() -> std::borrow::Cow<'static, str> {
        "Configuration".into()
    }
}

/// The admin API's bearer token.
struct AdminToken;

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

// === responses ===

type Responses = BTreeMap<String, RefOr<utoipa::openapi::Response>>;

/// A problem response of `status` whose `type` is one of `kinds` (`(type, title, example detail)`).
fn problem_response(
    status: u16,
    description: &str,
    kinds: &[(&'static str, &str, &str)],
) -> RefOr<utoipa::openapi::Response> {
    problem(status, description, kinds).into()
}

fn problem(
    status: u16,
    description: &str,
    kinds: &[(&'static str, &str, &str)],
) -> utoipa::openapi::Response {
    let types: Vec<&'static str> = kinds.iter().map(|(t, ..)| *t).collect();
    let examples = kinds.iter().map(|(type_uri, title, detail)| {
        let name = type_uri.rsplit('/').next().unwrap_or(type_uri);
        (name, ExampleBuilder::new().value(Some(problem_example(status, type_uri, title, detail))).build())
    });
    let content =
        ContentBuilder::new().schema(Some(problem_of(status, &types))).examples_from_iter(examples).build();
    ResponseBuilder::new().description(description).content(PROBLEM_CONTENT_TYPE, content).build()
}

fn verdict_response(denied: bool) -> RefOr<utoipa::openapi::Response> {
    let (description, example) = if denied {
        (
            "Denied: some enforced rule denied; nothing was consumed.",
            json!({"allowed": false, "retry_after_ms": 23997, "limits": [{"name": "chat-per-user", "limit": 10, "remaining": 0, "reset_after_ms": 77997, "retry_after_ms": 23997, "allowed": false, "outcome": "denied"}]}),
        )
    } else {
        (
            "Allowed by every enforced rule that applied (none may have).",
            json!({"allowed": true, "retry_after_ms": null, "limits": [{"name": "chat-per-user", "limit": 10, "remaining": 9, "reset_after_ms": 6000, "retry_after_ms": null, "allowed": true, "outcome": "allowed"}]}),
        )
    };
    let content =
        ContentBuilder::new().schema(Some(reference::<VerdictBody<'_>>())).example(Some(example)).build();
    let mut response = ResponseBuilder::new().description(description).content("application/json", content);
    for header in decision_headers(denied) {
        response = response.header(header.name, header.header);
    }
    response.build().into()
}

fn malformed() -> RefOr<utoipa::openapi::Response> {
    problem_response(
        400,
        "The body is not JSON (or not UTF-8 text, for a configuration), or could not be read.",
        &[(
            MALFORMED_TYPE,
            "Malformed Request",
            "The body is not valid JSON: expected value at line 1 column 1.",
        )],
    )
}

fn too_large(limit: usize) -> RefOr<utoipa::openapi::Response> {
    problem_response(
        413,
        &format!("The body exceeds {limit} bytes."),
        &[(TOO_LARGE_TYPE, "Payload Too Large", &format!("The body exceeds the limit of {limit} bytes."))],
    )
}

/// The 422 of a decision: JSON of the wrong shape or a bad descriptor value, and for a check or
/// peek (`impossible`) a cost that can never be allowed.
fn unprocessable(impossible: bool) -> RefOr<utoipa::openapi::Response> {
    let invalid =
        (INVALID_TYPE, "Invalid Request", "descriptors.\"user\" must be a string, not a number (1).");
    let never = (
        NEVER_ALLOWED_TYPE,
        "Request Can Never Be Allowed",
        "The request can never be allowed: rule \"per-user\": cost 1000 can never be allowed: the limit grants at most 20 at once.",
    );
    let shape = "JSON of the wrong shape (`invalid-request`: the detail names the field and what it got: \
                 not an object, a missing `descriptors`, a value that is not a string, more than 64 \
                 descriptors, a name given twice, an unknown field, a `cost` that is not a whole \
                 number from 1 to 2^64 - 1), or a descriptor value a rule cannot key by \
                 (`invalid-request`, e.g. no IP address for an `ip_prefix` rule)";
    if impossible {
        let description = format!(
            "{shape}, or a cost that an enforced rule that applies can never grant at once \
             (`never-allowed`, naming the rule): it depends on the policy, not on the body's shape."
        );
        problem_response(422, &description, &[invalid, never])
    } else {
        problem_response(422, &format!("{shape}. A report never denies, whatever its cost."), &[invalid])
    }
}

/// The 401 and 403 of a data-plane endpoint when the configuration names `auth` clients.
fn client_refusals(scope: &str) -> [(String, RefOr<utoipa::openapi::Response>); 2] {
    let mut unauthorized = problem(
        401,
        "Only when the configuration has `auth` clients: no `Authorization: Bearer <token>`, or a token no client has.",
        &[(
            UNAUTHORIZED_TYPE,
            "Unauthorized",
            "This server requires `Authorization: Bearer <token>` with a client's token.",
        )],
    );
    unauthorized.headers.insert(
        "WWW-Authenticate".into(),
        HeaderBuilder::new().schema(String::schema()).description(Some("`Bearer`.")).build(),
    );
    let forbidden = problem_response(
        403,
        &format!(
            "Only when the configuration has `auth` clients: the client lacks the `{scope}` scope, or names a \
             descriptor pinned to it with another value."
        ),
        &[(
            FORBIDDEN_TYPE,
            "Forbidden",
            &format!("Client \"shop-bff\" does not have the \"{scope}\" scope this endpoint needs."),
        )],
    );
    [("401".into(), unauthorized.into()), ("403".into(), forbidden)]
}

fn decision_responses(denies: bool) -> Responses {
    let mut responses = BTreeMap::from([
        ("200".into(), verdict_response(false)),
        ("400".into(), malformed()),
        ("413".into(), too_large(MAX_BODY)),
        ("422".into(), unprocessable(denies)),
    ]);
    if denies {
        responses.insert("429".into(), verdict_response(true));
    }
    responses.extend(client_refusals(if denies { "check" } else { "report" }));
    responses
}

/// Answers of `/v1/check` and `/v1/peek`.
pub(super) struct Decided;

impl IntoResponses for Decided {
    fn responses() -> Responses {
        decision_responses(true)
    }
}

/// Answers of `/v1/report` (it never denies).
pub(super) struct Reported;

impl IntoResponses for Reported {
    fn responses() -> Responses {
        decision_responses(false)
    }
}

/// Problems with a body that is not what it should be at all (an admin call's).
pub(super) struct BodyProblems;

impl IntoResponses for BodyProblems {
    fn responses() -> Responses {
        BTreeMap::from([("400".into(), malformed()), ("413".into(), too_large(super::MAX_ADMIN_BODY))])
    }
}

/// Problems with a JSON body of the wrong shape (`/admin/rollback`).
pub(super) struct JsonProblems;

impl IntoResponses for JsonProblems {
    fn responses() -> Responses {
        BTreeMap::from([
            ("400".into(), malformed()),
            ("413".into(), too_large(MAX_BODY)),
            (
                "422".into(),
                problem_response(
                    422,
                    "JSON of the wrong shape.",
                    &[(
                        INVALID_TYPE,
                        "Invalid Request",
                        "Expected {\"version\": n} or no body: unknown field `v`.",
                    )],
                ),
            ),
        ])
    }
}

/// Problems with a `/admin/keys` query.
pub(super) struct KeyProblems;

impl IntoResponses for KeyProblems {
    fn responses() -> Responses {
        BTreeMap::from([
            (
                "404".into(),
                problem_response(
                    404,
                    "No rule of that name in the policy (of `domain`, or the native one).",
                    &[(
                        NOT_FOUND_TYPE,
                        "No Such Rule",
                        "No rule named \"x\" in this policy (Envoy rules: add `domain=`).",
                    )],
                ),
            ),
            (
                "422".into(),
                problem_response(
                    422,
                    "No `rule` parameter, or descriptors that do not make a key of the rule.",
                    &[(
                        INVALID_TYPE,
                        "Invalid Request",
                        "Missing query parameter `rule`: the rule whose key to address.",
                    )],
                ),
            ),
        ])
    }
}

/// Problems of `/v1/reserve`: as a check's, a bad `ttl`, and a store that could not keep it.
pub(super) struct ReserveProblems;

impl IntoResponses for ReserveProblems {
    fn responses() -> Responses {
        let mut responses = BTreeMap::from([
            ("400".into(), malformed()),
            ("413".into(), too_large(MAX_BODY)),
            (
                "422".into(),
                problem_response(
                    422,
                    "As `/v1/check`'s 422 (JSON of the wrong shape, a descriptor value a rule cannot use, a cost \
                     an enforced rule can never grant: `never-allowed`), or a `ttl` that is not a duration above \
                     0 and at most 24h.",
                    &[
                        (INVALID_TYPE, "Invalid Request", "\"ttl\" \"48h\" must be above 0 and at most 24h."),
                        (
                            NEVER_ALLOWED_TYPE,
                            "Request Can Never Be Allowed",
                            "The request can never be allowed: rule \"per-user\": cost 1000 can never be allowed: the limit grants at most 20 at once.",
                        ),
                    ],
                ),
            ),
            (
                "503".into(),
                store_unavailable(
                    "The store could not keep the reservation; nothing is held.",
                    "The reservation could not be kept: the store timed out.",
                ),
            ),
        ]);
        responses.extend(client_refusals("reserve"));
        responses
    }
}

/// Problems of `/v1/commit` and `/v1/release`.
pub(super) struct SettleProblems;

impl IntoResponses for SettleProblems {
    fn responses() -> Responses {
        let mut responses = BTreeMap::from([
            ("400".into(), malformed()),
            ("413".into(), too_large(MAX_BODY)),
            (
                "404".into(),
                problem_response(
                    404,
                    "No such reservation: never made, or forgotten (a record is kept as long after its expiry as \
                     it lasted, at least a minute).",
                    &[(NOT_FOUND_TYPE, "Not Found", "No such reservation: \"7f3a9c0e\".")],
                ),
            ),
            (
                "409".into(),
                problem_response(
                    409,
                    "Settled otherwise before (released, or committed with other costs), or expired unsettled \
                     (it stays charged its estimate).",
                    &[(
                        RESERVATION_SETTLED_TYPE,
                        "Reservation Already Settled",
                        "Reservation \"7f3a9c0e\": it was released.",
                    )],
                ),
            ),
            (
                "422".into(),
                problem_response(
                    422,
                    "JSON of the wrong shape: a missing `reservation`, an unknown field, a cost that is not a \
                     whole number, a name that is no cost dimension.",
                    &[(INVALID_TYPE, "Invalid Request", "missing field `reservation` at line 1 column 2.")],
                ),
            ),
            (
                "503".into(),
                store_unavailable(
                    "The store did not answer.",
                    "The reservation could not be kept: the store timed out.",
                ),
            ),
        ]);
        responses.extend(client_refusals("reserve"));
        responses
    }
}

/// Problems with a `/v1/usage` query.
pub(super) struct UsageProblems;

impl IntoResponses for UsageProblems {
    fn responses() -> Responses {
        BTreeMap::from([
            (
                "404".into(),
                problem_response(
                    404,
                    "No rule of that name in the native policy.",
                    &[(NOT_FOUND_TYPE, "Not Found", "No rule named \"x\".")],
                ),
            ),
            (
                "422".into(),
                problem_response(
                    422,
                    "No `rule` parameter, a parameter given twice, a descriptor the rule's key needs is missing, \
                     the rule does not apply to these descriptors (its limit varies by a descriptor whose value \
                     is not listed), or a descriptor's value is not what the rule needs (a quota's time zone or \
                     anchor from a descriptor that names none, or is missing with no default).",
                    &[(
                        INVALID_TYPE,
                        "Invalid Request",
                        "rule \"per-user\" keys by \"user\", which is not given.",
                    )],
                ),
            ),
            (
                "503".into(),
                store_unavailable(
                    "The store did not answer.",
                    "The usage could not be read: the store timed out.",
                ),
            ),
        ])
    }
}

/// A 503 `store-unavailable` problem: `description` says when, `example` is a detail.
fn store_unavailable(description: &str, example: &str) -> RefOr<utoipa::openapi::Response> {
    problem_response(503, description, &[(STORE_UNAVAILABLE_TYPE, "Store Unavailable", example)])
}

/// The store could not carry out the operation.
pub(super) struct StoreProblem;

impl IntoResponses for StoreProblem {
    fn responses() -> Responses {
        BTreeMap::from([(
            "503".into(),
            store_unavailable(
                "The store could not carry out the operation.",
                "The key could not be reset: the store timed out.",
            ),
        )])
    }
}

/// Refusals of the admin API's access check.
pub(super) struct AdminAccess;

impl IntoResponses for AdminAccess {
    fn responses() -> Responses {
        let mut unauthorized = problem(
            401,
            "The server has an admin token and the request did not send it (`Authorization: Bearer <token>`).",
            &[(
                UNAUTHORIZED_TYPE,
                "Unauthorized",
                "The admin API requires `Authorization: Bearer <token>` with the server's admin token.",
            )],
        );
        unauthorized.headers.insert(
            "WWW-Authenticate".into(),
            HeaderBuilder::new().schema(String::schema()).description(Some("`Bearer`.")).build(),
        );
        BTreeMap::from([
            ("401".into(), unauthorized.into()),
            (
                "403".into(),
                problem_response(
                    403,
                    "The server has no admin token and the peer is not on loopback.",
                    &[(
                        UNAUTHORIZED_TYPE,
                        "Forbidden",
                        "The admin API answers loopback clients only; set an admin token to reach it from elsewhere.",
                    )],
                ),
            ),
        ])
    }
}

/// Problems of `/v1/simulate`: every one a 400 naming the field.
pub(super) struct SimulateProblems;

impl IntoResponses for SimulateProblems {
    fn responses() -> Responses {
        BTreeMap::from([
            (
                "400".into(),
                problem_response(
                    400,
                    "The body is not JSON (`malformed-request`), or not a simulation (`invalid-request`): the detail \
                     names the field — an unknown algorithm or parameter, a parameter as a rule could not have it \
                     (with its line and column), a missing or misordered `requests[i].at_ms`, a \
                     `requests[i].cost` the limit can never grant, more than 10 000 requests or samples.",
                    &[
                        (
                            MALFORMED_TYPE,
                            "Malformed Request",
                            "The body is not valid JSON: expected value at line 1 column 1.",
                        ),
                        (
                            INVALID_TYPE,
                            "Invalid Simulation",
                            "line 1, column 46: rate: invalid rate \"two/s\": expected N/unit with unit one of ms, s, m, h, d (e.g. \"10/s\")",
                        ),
                    ],
                ),
            ),
            ("413".into(), too_large(super::simulate::MAX_SIMULATE_BODY)),
        ])
    }
}
