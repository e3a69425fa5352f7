//! What the HTTP API's operations answer, as the OpenAPI document describes them: the tags, the
//! problem responses of each kind of refusal, and the configuration body's schema. The handlers
//! name these in their `#[utoipa::path]`; the document ([`super::openapi`]) gathers the handlers.

use std::collections::BTreeMap;

use floodgate_http::PROBLEM_CONTENT_TYPE;
use floodgate_http::openapi::{decision_headers, problem_example, problem_of, reference};
use floodgate_http::problem::{
    FORBIDDEN_TYPE, INVALID_TYPE, MALFORMED_TYPE, NEVER_ALLOWED_TYPE, NOT_FOUND_TYPE,
    RESERVATION_SETTLED_TYPE, STORE_UNAVAILABLE_TYPE, TOO_LARGE_TYPE, UNAUTHORIZED_TYPE,
};
use floodgate_http::wire::VerdictBody;
use serde_json::json;
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::{ContentBuilder, RefOr};
use utoipa::{IntoResponses, PartialSchema};

use super::{MAX_ADMIN_BODY, MAX_BODY, MAX_SIMULATE_BODY};

/// The tag of `/v1/check`, `/v1/peek`, `/v1/report`.
pub(super) const TAG_DECISIONS: &str = "decisions";
/// The tag of `/healthz`, `/readyz`, `/metrics`, `/openapi.json`.
pub(super) const TAG_OPERATIONS: &str = "operations";
/// The tag of `/admin/...`.
pub(super) const TAG_ADMIN: &str = "admin";
/// The media type of a configuration body.
pub(super) const YAML: &str = "application/yaml";

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
                 number from 1 to 2^64 - 1, `cost` with `costs`, `costs` all 0: each a rule the \
                 schema states), or a descriptor value a rule cannot key by \
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

/// What a data-plane endpoint checks of its caller when the configuration names `auth` clients,
/// besides the token's scope.
#[derive(Clone, Copy)]
enum Guard {
    /// The body's descriptors are pinned: a pinned one with another value is refused (on an Envoy
    /// `domain`, one left out too).
    Descriptors,
    /// The query's descriptors are pinned (the native policy).
    Query,
    /// Nothing more: a reservation id carries no descriptors.
    Scope,
    /// The playground: the admin API's access admits as well as the scope.
    ScopeOrAdmin,
}

/// The 401 and 403 of a data-plane endpoint when the configuration names `auth` clients: a client
/// token (`clientToken`) holding `scope` is needed.
fn client_refusals(scope: &str, guard: Guard) -> [(String, RefOr<utoipa::openapi::Response>); 2] {
    const ONLY: &str = "Only when the configuration has `auth` clients";
    const PINNED: &str = "Client \"shop-bff\" may only use descriptor \"tenant\" = \"shop\", and must name it on an Envoy domain.";
    let unless_admin = if matches!(guard, Guard::ScopeOrAdmin) {
        ", and the call is not admitted to the admin API either (by the admin token, an `admin` client's token, \
         or a loopback peer when there is neither)"
    } else {
        ""
    };
    // A query has no body; a body is read only once the caller is let in.
    let before = if matches!(guard, Guard::Query) { "" } else { " Answered before the body is read." };
    let mut unauthorized = problem(
        401,
        &format!(
            "{ONLY}: no `Authorization: Bearer <token>`, or a token no client has{unless_admin}.{before}"
        ),
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
    let lacks = format!("{ONLY}: the client lacks the `{scope}` scope{unless_admin}");
    let description = match guard {
        Guard::Descriptors => format!(
            "{lacks} (answered before the body is read); or the request gives a descriptor pinned to the client \
             another value, or on an Envoy `domain` leaves it out (`{PINNED}`)."
        ),
        Guard::Query => format!(
            "{lacks}; or the query gives a descriptor pinned to the client another value (`{PINNED}`)."
        ),
        Guard::Scope | Guard::ScopeOrAdmin => format!("{lacks}.{before}"),
    };
    let forbidden = problem_response(
        403,
        &description,
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
    responses.extend(client_refusals(if denies { "check" } else { "report" }, Guard::Descriptors));
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
        BTreeMap::from([("400".into(), malformed()), ("413".into(), too_large(MAX_ADMIN_BODY))])
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

/// Problems of `/admin/clock`: a server on the process clock, a bad move.
pub(super) struct ClockProblems;

impl IntoResponses for ClockProblems {
    fn responses() -> Responses {
        BTreeMap::from([
            (
                "404".into(),
                problem_response(
                    404,
                    "The server runs on the process clock (started without `--manual-clock`).",
                    &[(
                        NOT_FOUND_TYPE,
                        "Not Found",
                        "This server runs on the process clock: /admin/clock exists only with `floodgate serve --manual-clock`.",
                    )],
                ),
            ),
            (
                "422".into(),
                problem_response(
                    422,
                    "A body that is not one of `advance_ms` and `set_ms`, or a move backwards.",
                    &[(INVALID_TYPE, "Invalid Request", "Give one of advance_ms and set_ms.")],
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
                     0 and at most 24h written as a clock reads (the schema's pattern).",
                    &[
                        (
                            INVALID_TYPE,
                            "Invalid Request",
                            "\"ttl\" \"48h\" must be above 0 and at most 24h: longer than 1d.",
                        ),
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
        responses.extend(client_refusals("reserve", Guard::Descriptors));
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
        responses.extend(client_refusals("reserve", Guard::Scope));
        responses
    }
}

/// Problems with a `/v1/usage` query, and the refusals of `auth`.
pub(super) struct UsageProblems;

impl IntoResponses for UsageProblems {
    fn responses() -> Responses {
        let mut responses = BTreeMap::from([
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
        ]);
        responses.extend(client_refusals("check", Guard::Query));
        responses
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
            "The server has an admin token, or an `auth` client holds the `admin` scope, and the request sent \
             neither the admin token nor an `admin` client's token (`Authorization: Bearer <token>`).",
            &[(
                UNAUTHORIZED_TYPE,
                "Unauthorized",
                "The admin API requires `Authorization: Bearer <token>` with the server's admin token or the token \
                 of a client with the admin scope.",
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
                    "The server has no admin token, no `auth` client holds the `admin` scope, and the peer is not on \
                     loopback (`unauthorized`); or the token is an `auth` client's without the `admin` scope \
                     (`forbidden`).",
                    &[
                        (
                            UNAUTHORIZED_TYPE,
                            "Forbidden",
                            "The admin API answers loopback clients only; set an admin token to reach it from elsewhere.",
                        ),
                        (
                            FORBIDDEN_TYPE,
                            "Forbidden",
                            "Client \"shop-bff\" does not have the \"admin\" scope the admin API needs.",
                        ),
                    ],
                ),
            ),
        ])
    }
}

/// Problems of `/v1/simulate`: a body that is no simulation is a 400 naming the field; and the
/// refusals of `auth`.
pub(super) struct SimulateProblems;

impl IntoResponses for SimulateProblems {
    fn responses() -> Responses {
        let mut responses = BTreeMap::from([
            (
                "400".into(),
                problem_response(
                    400,
                    "The body is not JSON (`malformed-request`), or not a simulation (`invalid-request`): the detail \
                     names the field — an unknown algorithm or parameter, a parameter as a rule could not have it \
                     (with its line and column), a missing `requests[i].at_ms`, a `requests[i].cost` of 0, more \
                     than 10 000 requests: each a rule the schema states.",
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
            ("413".into(), too_large(MAX_SIMULATE_BODY)),
        ]);
        responses.extend(client_refusals("check", Guard::ScopeOrAdmin));
        responses
    }
}
