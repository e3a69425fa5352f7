//! `POST /v1/check`, `/v1/report`, `/v1/peek`.
//!
//! Body: the check API's wire type ([`CheckRequest`]: `descriptors`, `cost` or `costs`, `domain`). For an
//! Envoy domain, the descriptors are taken as one Envoy descriptor whose entries are the object's
//! members in the order written (`{"remote_address": "10.0.0.1", "path": "/login"}` is the entry
//! list `[remote_address, path]`), exactly as `ShouldRateLimit` would see it; a domain no Envoy file
//! defines gets the native policy.
//!
//! Answer: `200` when allowed, `429` when denied (`/v1/report` never denies), both with the
//! rate-limit headers, and the verdict as JSON ([`VerdictBody`]). Errors: `400` for a body that is
//! not JSON, `422` for JSON of the wrong shape and for a cost some enforced rule can never grant
//! (naming the rule: callers of this API are services, not end users), `413` over 64 KiB.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use floodgate::reservation::Kind;
use floodgate::{Descriptors, EngineError};
use floodgate_http::envoy::{ENVOY_KEYS, envoy_descriptors};
use floodgate_http::headers::RESERVATION_HEADER;
use floodgate_http::problem::{FORBIDDEN_TYPE, NEVER_ALLOWED_TYPE, UNAUTHORIZED_TYPE};
use floodgate_http::wire::{CheckRequest, VerdictBody};
use floodgate_http::{Answer, Problem, RateLimitLines, tag_header};
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderValue, StatusCode};

use super::responses::{Decided, Reported, TAG_DECISIONS};
use super::{MAX_BODY, json_bytes, problem, read_body};
use floodgate_app::App;
use floodgate_app::auth::{Client, Refusal, scope_of};
use floodgate_app::control::Running;
use floodgate_app::metrics::Api;
use floodgate_config::auth::Scope;

/// Decides a request: allowed only if every enforced rule that applies allows, and then its cost
/// is consumed from each; a denied request consumes nothing.
#[utoipa::path(
    post,
    path = "/v1/check",
    tag = TAG_DECISIONS,
    operation_id = "check",
    security((), ("clientToken" = [])),
    request_body(content = CheckRequest, description = "The request to decide. Read as JSON whatever the `content-type`; at most 64 KiB."),
    responses(Decided),
)]
pub(super) async fn check(State(app): State<App>, request: Request) -> Response {
    handle(&app, request, Api::Check).await.into_response()
}

/// What `check` would answer, consuming nothing: which limits this request would hit.
#[utoipa::path(
    post,
    path = "/v1/peek",
    tag = TAG_DECISIONS,
    operation_id = "peek",
    security((), ("clientToken" = [])),
    request_body(content = CheckRequest, description = "The request to look at. Read as JSON whatever the `content-type`; at most 64 KiB."),
    responses(Decided),
)]
pub(super) async fn peek(State(app): State<App>, request: Request) -> Response {
    handle(&app, request, Api::Peek).await.into_response()
}

/// Consumes a cost after the fact (e.g. LLM tokens known once a response is done); never denies,
/// also past the limit.
#[utoipa::path(
    post,
    path = "/v1/report",
    tag = TAG_DECISIONS,
    operation_id = "report",
    security((), ("clientToken" = [])),
    request_body(content = CheckRequest, description = "What was spent. Read as JSON whatever the `content-type`; at most 64 KiB."),
    responses(Reported),
)]
pub(super) async fn report(State(app): State<App>, request: Request) -> Response {
    handle(&app, request, Api::Report).await.into_response()
}

/// One check, peek or report: from the HTTP listener directly, or through the router (which puts
/// the answer's rate-limit headers in its map: [`Answer::into_response`]). With `auth:` clients
/// configured, the caller's bearer token must be one with the endpoint's scope (401 / 403
/// otherwise, before the body is read).
pub(super) async fn handle<B>(app: &App, request: http::Request<B>, api: Api) -> Answer<Body>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let running = app.control().load();
    let authorization = request.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes);
    let (client, answer) = match running.authorize(authorization, scope_of(api)) {
        Ok(client) => (client, decide(app, &running, request, api, client).await),
        Err(refusal) => (refusal.client(), refused(&refusal).into()),
    };
    app.metrics().http_request(client.map(|c| &*c.requests), api, answer.response.status());
    answer
}

/// With `auth:` clients configured, the caller's client when its bearer token holds `scope`, or
/// the 401/403 to answer; `Ok(None)` when no client is configured (anyone may call).
#[allow(clippy::result_large_err)] // a refusal is built only on the error path, and answered at once
pub(super) fn authorized<'r>(
    running: &'r Running,
    headers: &http::HeaderMap,
    scope: Scope,
) -> Result<Option<&'r Client>, Response> {
    let authorization = headers.get(AUTHORIZATION).map(HeaderValue::as_bytes);
    running.authorize(authorization, scope).map_err(|refusal| refused(&refusal))
}

/// Applies `client`'s pinned descriptors to a request's for `domain` (see [`Client::pin`]), or
/// the 403 to answer.
#[allow(clippy::result_large_err)] // a refusal is built only on the error path, and answered at once
pub(super) fn pin(
    running: &Running,
    client: Option<&Client>,
    domain: Option<&str>,
    descriptors: &mut Descriptors,
) -> Result<(), Response> {
    let Some(client) = client else { return Ok(()) };
    let native = !domain.is_some_and(|d| running.domains.contains_key(d));
    client.pin(descriptors, native).map_err(|refusal| refused(&refusal))
}

/// The 401 or 403 problem of a refused request.
pub(crate) fn refused(refusal: &Refusal<'_>) -> Response {
    if refusal.unauthenticated() {
        let mut response = problem(Problem::new(
            StatusCode::UNAUTHORIZED,
            UNAUTHORIZED_TYPE,
            "Unauthorized",
            refusal.detail(),
        ));
        response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        response
    } else {
        problem(Problem::new(StatusCode::FORBIDDEN, FORBIDDEN_TYPE, "Forbidden", refusal.detail()))
    }
}

async fn decide<B>(
    app: &App,
    running: &Running,
    request: http::Request<B>,
    api: Api,
    client: Option<&Client>,
) -> Answer<Body>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let body = match read_body(request, MAX_BODY).await {
        Ok(body) => body,
        Err(response) => return response.into(),
    };
    let mut request = match CheckRequest::parse(&body) {
        Ok(request) => request,
        Err(p) => return problem(p).into(),
    };
    // Stating a limit takes a scope of its own: a client that may check may not by that alone
    // raise its own limit.
    if let Some(client) = client
        && !request.stated.is_empty()
        && !client.holds(Scope::StateLimits)
    {
        return refused(&Refusal::Scope(client, Scope::StateLimits)).into();
    }

    let domain = request.domain.take();
    let mut descriptors = std::mem::take(&mut request.descriptors);
    if let Err(refusal) = pin(running, client, domain.as_deref(), &mut descriptors) {
        return refusal.into();
    }
    let descriptors = as_domain_sees_them(running, domain.as_deref(), descriptors);
    let policy = running.domain(domain.as_deref());
    let hits = [request.hit(&descriptors)];
    // Decided in place where the store answers at once; awaited where it cannot.
    let decided = match app.decisions().decide_now(policy, api, &hits) {
        Some(decided) => decided,
        None => app.decisions().decide(policy, api, &hits).await,
    };
    let verdict = match decided {
        Ok(verdict) => verdict,
        Err(error) => return never_allowed(&error).into(),
    };

    let status = if verdict.allowed { StatusCode::OK } else { StatusCode::TOO_MANY_REQUESTS };
    let mut response = json_bytes(status, VerdictBody::from(&verdict).to_json());
    // The answer is new: there is nothing of these to remove when no rule tagged or degraded it.
    if verdict.tags().next().is_some() || verdict.degrade_to().is_some() {
        tag_header(&verdict, response.headers_mut());
    }
    // A check that took concurrency permits: an id `/v1/release` frees them with, kept as long as
    // the longest of their leases. Without one (the store could not keep it), they end with it.
    // (Not for stated values: the record names the rule's own counters.)
    if api == Api::Check && verdict.allowed && verdict.holds_permits() && request.stated.is_empty() {
        let lease = verdict.limits.iter().filter(|l| l.permit && l.grant.is_some()).map(|l| l.window).max();
        let store = app.control().store();
        let hit = request.hit(&descriptors);
        let ttl = lease.unwrap_or_default().max(std::time::Duration::from_secs(1));
        // Boxed: this future is several kilobytes, and only a check that took permits awaits it;
        // inline, every check's future would be that much larger to move into place.
        let recorded = Box::pin(policy.policy.record_reservation(store, hit, &verdict, ttl, Kind::Permits));
        if let Ok(r) = recorded.await
            && let Ok(value) = http::HeaderValue::from_str(&r.id)
        {
            response.headers_mut().insert(RESERVATION_HEADER, value);
        }
    }
    Answer::with_lines(response, RateLimitLines::render(&verdict, running.headers))
}

/// The descriptors as `domain`'s rules match them: an Envoy domain's rules match Envoy
/// descriptors — the entries in order, as gRPC sends them — unless the caller already gave them so.
pub(crate) fn as_domain_sees_them(
    running: &Running,
    domain: Option<&str>,
    descriptors: Descriptors,
) -> Descriptors {
    match domain {
        Some(d) if running.domains.contains_key(d) && descriptors.get(ENVOY_KEYS).is_none() => {
            envoy_descriptors(descriptors.iter())
        }
        _ => descriptors,
    }
}

/// 422 naming the rule that can never grant the cost, that cannot key by a descriptor's value, or
/// whose bound a stated value breaks.
pub(super) fn never_allowed(error: &EngineError) -> Response {
    problem(match error {
        EngineError::Cost { .. } => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            NEVER_ALLOWED_TYPE,
            "Request Can Never Be Allowed",
            format!("The request can never be allowed: {error}."),
        ),
        EngineError::Descriptor { .. } | EngineError::MissingDescriptor { .. } => {
            Problem::invalid(format!("Invalid descriptor: {error}."))
        }
        EngineError::Stated { .. } | EngineError::Unclaimed { .. } => {
            Problem::invalid(format!("Invalid stated value: {error}."))
        }
    })
}
