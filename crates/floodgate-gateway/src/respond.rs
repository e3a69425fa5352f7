//! What the gateway answers itself: every answer a problem+json body (RFC 9457) with a stable
//! type from `floodgate_http::problem`, and the headers that go with it.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use floodgate::Verdict;
use floodgate_config::gateway::Fallback;
use floodgate_core::ceil_secs_at_least_one;
use floodgate_http::problem::{
    NOT_FOUND_TYPE, OVERLOADED_TYPE, SHED_TYPE, TOO_LARGE_TYPE, UNAUTHORIZED_TYPE, UPSTREAM_TIMEOUT_TYPE,
    UPSTREAM_UNAVAILABLE_TYPE,
};
use floodgate_http::{Answer, HeaderStyle, Problem, limited_answer};
use http::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderValue, StatusCode};

/// A problem+json response.
pub(super) fn problem(problem: &Problem) -> Response {
    problem.to_response().map(Body::from)
}

fn with_retry_after(mut response: Response, retry_after: Duration) -> Response {
    let secs = ceil_secs_at_least_one(retry_after);
    response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    response
}

/// 429: `Retry-After`, the rate-limit headers and the problem of the denying limit (the headers
/// as lines the listener writes into the head: [`floodgate_http::RateLimitLines`]).
pub(super) fn limited(verdict: &Verdict, style: HeaderStyle) -> Answer<Body> {
    limited_answer(verdict, style).map(Body::from)
}

/// 401 for a token that is present but not valid; says why, and what the gateway expects.
pub(super) fn unauthorized(why: &str) -> Response {
    let mut response = problem(&Problem::new(
        StatusCode::UNAUTHORIZED,
        UNAUTHORIZED_TYPE,
        "Unauthorized",
        format!("The bearer token is not valid: {why}."),
    ));
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static(r#"Bearer error="invalid_token""#));
    response
}

/// 503 for a route whose priority is shed.
pub(super) fn shed(retry_after: Duration) -> Response {
    let body = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        SHED_TYPE,
        "Service Unavailable",
        "This route is shed to keep the core routes up; retry later.",
    );
    with_retry_after(problem(&body), retry_after)
}

/// 503 for a route with as many requests in flight as it allows.
pub(super) fn overloaded() -> Response {
    let body = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        OVERLOADED_TYPE,
        "Service Unavailable",
        "This route has as many requests in flight as it allows; retry shortly.",
    );
    with_retry_after(problem(&body), Duration::from_secs(1))
}

/// While a route's breaker is open: its fallback, or a 503 problem with `Retry-After`.
pub(super) fn breaker_open(fallback: Option<&Fallback>, retry_after: Duration) -> Response {
    let Some(fallback) = fallback else {
        let body = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            UPSTREAM_UNAVAILABLE_TYPE,
            "Service Unavailable",
            "The upstream of this route is failing; the gateway stopped calling it for a while.",
        );
        return with_retry_after(problem(&body), retry_after);
    };
    let mut response = Response::new(Body::from(fallback.body.clone()));
    *response.status_mut() = fallback.status;
    if let Ok(value) = HeaderValue::from_str(&fallback.content_type) {
        response.headers_mut().insert(CONTENT_TYPE, value);
    }
    match fallback.retry_after {
        Some(after) => with_retry_after(response, after),
        None => response,
    }
}

/// 504: the upstream did not connect, answer or finish in time.
pub(super) fn timeout(what: &str, budget: &str, after: Duration) -> Response {
    problem(&Problem::new(
        StatusCode::GATEWAY_TIMEOUT,
        UPSTREAM_TIMEOUT_TYPE,
        "Gateway Timeout",
        format!("The upstream did not {what} within the route's `{budget}` timeout ({after:?})."),
    ))
}

/// 502: the upstream could not be reached, or its answer could not be read.
pub(super) fn bad_gateway(what: &str) -> Response {
    problem(&Problem::new(
        StatusCode::BAD_GATEWAY,
        UPSTREAM_UNAVAILABLE_TYPE,
        "Bad Gateway",
        format!("The upstream {what}."),
    ))
}

/// 404 for a path no route takes, 405 for a method its route does not take.
pub(super) fn no_route(method_known: bool) -> Response {
    let (status, title, detail) = if method_known {
        (StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed", "No route takes this method on this path.")
    } else {
        (StatusCode::NOT_FOUND, "Not Found", "No route takes this path.")
    };
    problem(&Problem::new(status, NOT_FOUND_TYPE, title, detail))
}

/// 413 for an accepted write over the size the queue keeps.
pub(super) fn too_large(limit: usize) -> Response {
    let mut body = Problem::too_large(limit);
    body.type_uri = TOO_LARGE_TYPE.into();
    problem(&body)
}

/// 400 for a request the gateway cannot read.
pub(super) fn malformed(detail: impl Into<String>) -> Response {
    problem(&Problem::malformed(detail))
}
