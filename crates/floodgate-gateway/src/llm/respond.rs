//! What an LLM route answers itself, in its dialect's error format (OpenAI's `{"error": {"message",
//! "type", "param", "code"}}`, Anthropic's `{"type": "error", "error": {"type", "message"}}`:
//! [`Dialect::error`]) so that the SDKs read it as they read the provider's: 400s for what cannot
//! be read, 429s with `Retry-After`, `retry-after-ms` (which the OpenAI and Anthropic SDKs honour)
//! and the rate-limit headers, and the event that ends a stream cut at its budget.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use floodgate::Verdict;
use floodgate_http::{HeaderStyle, rate_limit_headers};
use http::header::CONTENT_TYPE;
use http::{HeaderName, HeaderValue, StatusCode};
use serde_json::{Value, json};

use super::dialect::{Dialect, Fault};
use super::endpoint::Endpoint;

/// OpenAI's header of an exact wait, in milliseconds.
pub(crate) const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");

/// An answer the route gives instead of calling the upstream.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) body: Value,
}

impl Refusal {
    pub(crate) fn into_response(self) -> Response {
        let mut response = Response::new(Body::from(self.body.to_string()));
        *response.status_mut() = self.status;
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// 400: a request that cannot be read, naming the field at fault.
pub(crate) fn invalid(dialect: Dialect, message: impl Into<String>, param: Option<&str>) -> Refusal {
    let body = dialect.error(&message.into(), Fault::Invalid { param, code: None });
    Refusal { status: StatusCode::BAD_REQUEST, body }
}

/// 400: a model the route has no price for, when it prices every call.
pub(crate) fn unpriced(dialect: Dialect, message: String) -> Refusal {
    let fault = Fault::Invalid { param: Some("model"), code: Some("model_not_priced") };
    Refusal { status: StatusCode::BAD_REQUEST, body: dialect.error(&message, fault) }
}

/// 400: a request whose estimate no budget can ever grant at once.
pub(crate) fn never_affordable(
    dialect: Dialect,
    needed: u64,
    rule: &str,
    capacity: u64,
    dimension: &str,
) -> Refusal {
    let message = format!(
        "This request needs {needed} {dimension} (its prompt and completion allowance), more than limit {rule:?} \
         grants at once ({capacity}): shorten the prompt or lower max_tokens."
    );
    let fault = Fault::Invalid { param: None, code: Some("budget_exceeded") };
    Refusal { status: StatusCode::BAD_REQUEST, body: dialect.error(&message, fault) }
}

/// 413: a body larger than the route reads.
pub(crate) fn too_large(dialect: Dialect, limit: usize) -> Refusal {
    let message = format!("The request body is larger than this gateway reads ({limit} bytes).");
    Refusal { status: StatusCode::PAYLOAD_TOO_LARGE, body: dialect.error(&message, Fault::TooLarge) }
}

/// 503: the limits could not be decided (the store failed and the rules fail closed).
pub(crate) fn unavailable(dialect: Dialect, why: &str) -> Response {
    let message = format!("The rate limiter is unavailable: {why}.");
    Refusal { status: StatusCode::SERVICE_UNAVAILABLE, body: dialect.error(&message, Fault::Unavailable) }
        .into_response()
}

/// 429 for `verdict`, denied: which limit, and when to retry — `Retry-After` in seconds (rounded
/// up) and `retry-after-ms` exact — beside the rate-limit headers of `style`. `wait` replaces the
/// verdict's own wait when given (the wait for a smaller request, under `cap`).
pub(crate) fn limited(
    dialect: Dialect,
    verdict: &Verdict,
    style: HeaderStyle,
    wait: Option<Duration>,
    dimension: &str,
) -> Response {
    let wait = wait.or_else(|| verdict.retry_after()).unwrap_or(Duration::from_secs(1));
    let denying = verdict.limits.iter().filter(|l| l.outcome.denies()).max_by_key(|l| l.decision.retry_after);
    let (kind, message) = match denying {
        Some(l) => {
            let what = match &*l.dimension {
                d if d == dimension => "tokens",
                floodgate::cost::REQUESTS => "requests",
                other => other,
            };
            (
                what,
                format!(
                    "Rate limit reached for {} on limit {:?}: {} of {} left. Please try again in {}.",
                    l.dimension,
                    l.rule,
                    l.decision.remaining,
                    l.decision.limit,
                    go_duration(wait)
                ),
            )
        }
        None => ("requests", "Rate limit reached.".to_owned()),
    };
    let body = dialect.error(&message, Fault::Limited { dimension: kind });
    let mut response = Refusal { status: StatusCode::TOO_MANY_REQUESTS, body }.into_response();
    let headers = response.headers_mut();
    rate_limit_headers(verdict, style, headers);
    let secs = floodgate_core::ceil_secs_at_least_one(wait);
    headers.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
    headers.insert(RETRY_AFTER_MS, HeaderValue::from(floodgate_http::ceil_ms(wait).max(1)));
    response
}

/// `wait` as OpenAI writes it (`1m30s`, `12ms`).
fn go_duration(wait: Duration) -> String {
    let mut out = bytes::BytesMut::new();
    floodgate_http::headers::push_go_duration(&mut out, wait);
    String::from_utf8_lossy(&out).into_owned()
}

/// The server-sent event that ends a stream cut at its budget, in the endpoint's format: chat
/// completions and completions end with `data: {"error": {…}}` (what the SDKs raise), the
/// responses API with an `error` event, Anthropic's messages with `event: error` and a
/// `rate_limit_error` (which the Anthropic SDKs raise).
pub(crate) fn cut_event(
    endpoint: Endpoint,
    generated: u64,
    dimension: &str,
    sequence: Option<u64>,
) -> String {
    let message = format!(
        "The stream was stopped at its budget: {generated} tokens generated, and no {dimension} left to \
         generate more."
    );
    match endpoint {
        Endpoint::Responses => {
            let event = json!({"type": "error", "code": "rate_limit_exceeded", "message": message, "param": null,
                "sequence_number": sequence.unwrap_or(0)});
            format!("event: error\ndata: {event}\n\n")
        }
        Endpoint::Messages => {
            let event = Dialect::Anthropic.error(&message, Fault::Limited { dimension });
            format!("event: error\ndata: {event}\n\n")
        }
        Endpoint::Chat | Endpoint::Completions | Endpoint::Embeddings => {
            let event = Dialect::OpenAi.error(&message, Fault::Limited { dimension: "tokens" });
            format!("data: {event}\n\n")
        }
    }
}
