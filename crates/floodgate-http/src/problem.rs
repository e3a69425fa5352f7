//! RFC 9457 problem details (`application/problem+json`): the body of every error a front door
//! answers, and of a 429 rendered by the tower layer or the gateway — each rendered as a response
//! here, once ([`Problem::to_response`], [`limited_response`]).
//!
//! Every problem has a stable `type` URI under `https://floodgate.dev/problems/` (the constants
//! below), so that clients can branch on it; `title` names the kind, `detail` says what happened
//! this time. A 429 carries the numbers of the denying limit too, and never names rules, keys,
//! stores or algorithms.

use std::borrow::Cow;

use bytes::Bytes;
use floodgate::Verdict;
use floodgate_core::ceil_secs_at_least_one;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, StatusCode};
use serde::Serialize;

use crate::headers::{
    Answer, HeaderStyle, MAX_RATE_LIMIT_HEADERS, RateLimitLines, is_enforced, reset_unix_secs,
};
use crate::wire::push_json_string;

/// The media type of a [`Problem`] body.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";
/// [`Problem::type_uri`] of a request denied by a rate limit.
pub const RATE_LIMITED_TYPE: &str = "https://floodgate.dev/problems/rate-limited";
/// [`Problem::type_uri`] of a request denied by a calendar quota.
pub const QUOTA_EXCEEDED_TYPE: &str = "https://floodgate.dev/problems/quota-exceeded";
/// [`Problem::type_uri`] of a request that no amount of waiting can make pass (its cost exceeds
/// what a limit grants at once).
pub const NEVER_ALLOWED_TYPE: &str = "https://floodgate.dev/problems/never-allowed";

/// [`Problem::type_uri`] of a body that is not JSON, or could not be read (400).
pub const MALFORMED_TYPE: &str = "https://floodgate.dev/problems/malformed-request";
/// [`Problem::type_uri`] of well-formed JSON of the wrong shape (422).
pub const INVALID_TYPE: &str = "https://floodgate.dev/problems/invalid-request";
/// [`Problem::type_uri`] of a body over the size limit (413).
pub const TOO_LARGE_TYPE: &str = "https://floodgate.dev/problems/body-too-large";
/// [`Problem::type_uri`] of an unknown path or method (404, 405), or an unknown rule.
pub const NOT_FOUND_TYPE: &str = "https://floodgate.dev/problems/not-found";
/// A reservation already committed or released otherwise, or expired unsettled (409).
pub const RESERVATION_SETTLED_TYPE: &str = "https://floodgate.dev/problems/reservation-settled";
/// [`Problem::type_uri`] of a request refused for lack of credentials (401, 403).
pub const UNAUTHORIZED_TYPE: &str = "https://floodgate.dev/problems/unauthorized";
/// [`Problem::type_uri`] of a request whose credentials are valid but do not allow it (403: a
/// scope the client lacks, a descriptor pinned to another value).
pub const FORBIDDEN_TYPE: &str = "https://floodgate.dev/problems/forbidden";
/// [`Problem::type_uri`] of an operation the store could not carry out (503).
pub const STORE_UNAVAILABLE_TYPE: &str = "https://floodgate.dev/problems/store-unavailable";
/// [`Problem::type_uri`] of an admin change that was not made because the admin state directory
/// could not be written (500).
pub const STATE_NOT_WRITTEN_TYPE: &str = "https://floodgate.dev/problems/state-not-written";
/// [`Problem::type_uri`] of a gateway request refused because its route's priority is shed (503).
pub const SHED_TYPE: &str = "https://floodgate.dev/problems/shed";
/// [`Problem::type_uri`] of a gateway request refused because its route has as many requests in
/// flight as it allows (503).
pub const OVERLOADED_TYPE: &str = "https://floodgate.dev/problems/overloaded";
/// [`Problem::type_uri`] of a gateway request whose upstream is unavailable: its circuit breaker is
/// open (503), or it could not be reached or answered badly (502).
pub const UPSTREAM_UNAVAILABLE_TYPE: &str = "https://floodgate.dev/problems/upstream-unavailable";
/// [`Problem::type_uri`] of a gateway request whose upstream did not connect, answer or finish in
/// time (504).
pub const UPSTREAM_TIMEOUT_TYPE: &str = "https://floodgate.dev/problems/upstream-timeout";

/// An RFC 9457 problem details body (`application/problem+json`, see [`PROBLEM_CONTENT_TYPE`]).
///
/// For a 429, made by [`Problem::from_verdict`]: a stable `type` ([`RATE_LIMITED_TYPE`], or
/// [`QUOTA_EXCEEDED_TYPE`] when a calendar quota denied), a `title`, a `detail` for humans and the
/// numbers of the denying limit. It never names rules, keys, stores or algorithms.
///
/// ```
/// use floodgate_http::Problem;
/// use http::StatusCode;
///
/// let problem = Problem::new(
///     StatusCode::BAD_REQUEST,
///     "https://floodgate.dev/problems/malformed-request",
///     "Bad Request",
///     "The body is not valid JSON.",
/// );
/// assert_eq!(
///     problem.to_json(),
///     r#"{"type":"https://floodgate.dev/problems/malformed-request","title":"Bad Request","status":400,"detail":"The body is not valid JSON."}"#,
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// A URI naming the kind of problem; stable, so clients can branch on it.
    #[serde(rename = "type")]
    pub type_uri: Cow<'static, str>,
    /// A short summary of the kind of problem (the same for every occurrence of a type).
    pub title: Cow<'static, str>,
    /// The HTTP status code.
    pub status: u16,
    /// What happened this time, for humans.
    pub detail: String,
    /// Seconds until the same request may pass (the `Retry-After` value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// The capacity of the denying limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// What is left of the denying limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
    /// When the denying limit is fully replenished, in Unix seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset: Option<u64>,
}

impl Problem {
    /// A problem of `status` with no rate-limit fields, e.g. for a 400 or a 413.
    pub fn new(
        status: StatusCode,
        type_uri: impl Into<Cow<'static, str>>,
        title: impl Into<Cow<'static, str>>,
        detail: impl Into<String>,
    ) -> Self {
        Problem {
            type_uri: type_uri.into(),
            title: title.into(),
            status: status.as_u16(),
            detail: detail.into(),
            retry_after: None,
            limit: None,
            remaining: None,
            reset: None,
        }
    }

    /// The 429 body for a denied `verdict`; `None` when it is allowed.
    ///
    /// The numbers are those of the denying limit that makes the client wait longest
    /// ([`Verdict::most_restrictive`]); `retry_after` is [`Verdict::retry_after`] in seconds,
    /// rounded up, at least 1. A verdict denied because the store failed (the rule fails closed)
    /// has no meaningful numbers: only `retry_after` is set then.
    pub fn from_verdict(verdict: &Verdict) -> Option<Problem> {
        let denial = Denial::of(verdict)?;
        let (type_uri, title, _) = kind(denial.quota);
        let mut detail = String::with_capacity(48);
        for part in denial.detail(&mut itoa::Buffer::new()) {
            detail.push_str(part);
        }
        let mut problem = Problem::new(StatusCode::TOO_MANY_REQUESTS, type_uri, title, detail);
        [problem.retry_after, problem.limit, problem.remaining, problem.reset] = denial.numbers();
        Some(problem)
    }

    /// A 400 for a body that is not what it should be at all (not JSON, unreadable).
    pub fn malformed(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, MALFORMED_TYPE, "Malformed Request", detail)
    }

    /// A 422 for JSON of the wrong shape.
    pub fn invalid(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::UNPROCESSABLE_ENTITY, INVALID_TYPE, "Invalid Request", detail)
    }

    /// A 503 for a store that failed: `detail` says what could not be done and why.
    pub fn store_unavailable(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::SERVICE_UNAVAILABLE, STORE_UNAVAILABLE_TYPE, "Store Unavailable", detail)
    }

    /// A 413 for a body over `limit` bytes.
    pub fn too_large(limit: usize) -> Problem {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            TOO_LARGE_TYPE,
            "Payload Too Large",
            format!("The body exceeds the limit of {limit} bytes."),
        )
    }

    /// The 400 body for a request that can never be allowed (an `EngineError`: its cost is zero or
    /// above what a limit grants at once). Names no rule.
    pub fn never_allowed() -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            NEVER_ALLOWED_TYPE,
            "Request Can Never Be Allowed",
            "The request can never be allowed: its cost is zero or exceeds what a rate limit grants at once.",
        )
    }

    /// The status as a [`StatusCode`] (500 if `status` is not a valid code).
    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The JSON body; the `Serialize` implementation writes the same JSON for callers that embed
    /// it elsewhere (a test keeps the two byte for byte equal).
    pub fn to_json(&self) -> String {
        // Only ASCII and whole `str`s were written; the fallback only keeps this panic-free.
        String::from_utf8(self.json()).unwrap_or_else(|_| {
            format!(r#"{{"type":"about:blank","title":"Error","status":{}}}"#, self.status)
        })
    }

    /// The JSON body's bytes, written straight into one buffer.
    fn json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.detail.len());
        push_head(&mut out, &self.type_uri, &self.title, self.status);
        push_json_string(&mut out, &self.detail);
        push_numbers(&mut out, [self.retry_after, self.limit, self.remaining, self.reset]);
        out
    }

    /// The problem as a response: its status, `Content-Type: application/problem+json` and its
    /// JSON body. Map the body into the front door's own type (`.map(Body::from)`).
    pub fn to_response(&self) -> http::Response<Bytes> {
        // Room for the content type and the rate-limit headers of a 429, so that the map is made
        // once rather than grown.
        problem_response(self.status_code(), self.json(), 1 + MAX_RATE_LIMIT_HEADERS)
    }
}

/// The 429 of a denied `verdict`, as every front door answers it: the denying limit's problem
/// ([`Problem::from_verdict`]), `Retry-After` and the rate-limit headers in `style`.
pub fn limited_response(verdict: &Verdict, style: HeaderStyle) -> http::Response<Bytes> {
    // Room for the rate-limit headers too, so that the map is made once rather than grown.
    let mut response = limited_problem(verdict, 1 + MAX_RATE_LIMIT_HEADERS);
    RateLimitLines::render(verdict, style).apply(response.headers_mut());
    response
}

/// [`limited_response`] with its `Retry-After` and rate-limit headers rendered as
/// [`RateLimitLines`] beside it ([`Answer`]), for a server that writes them into the head itself.
pub fn limited_answer(verdict: &Verdict, style: HeaderStyle) -> Answer<Bytes> {
    // The map holds the content type alone: the lines are written beside it.
    Answer::with_lines(limited_problem(verdict, 1), RateLimitLines::render(verdict, style))
}

/// The 429 of `verdict` without its rate-limit headers, its header map made with room for
/// `headers`.
fn limited_problem(verdict: &Verdict, headers: usize) -> http::Response<Bytes> {
    let json = match Denial::of(verdict) {
        Some(denial) => denial.json(),
        None => Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            RATE_LIMITED_TYPE,
            "Too Many Requests",
            "Rate limit exceeded.",
        )
        .json(),
    };
    problem_response(StatusCode::TOO_MANY_REQUESTS, json, headers)
}

/// A problem's response: `status`, `Content-Type: application/problem+json` in a header map with
/// room for `headers`, and `json` as its body (one allocation: a `Vec` with room to spare would
/// take a second to be shared as `Bytes`).
// Inlined: as a call, returning the response by value cost a refusal about 50 more instructions.
#[inline(always)]
fn problem_response(status: StatusCode, json: Vec<u8>, headers: usize) -> http::Response<Bytes> {
    let mut response = http::Response::new(Bytes::from(json.into_boxed_slice()));
    *response.status_mut() = status;
    *response.headers_mut() = http::HeaderMap::with_capacity(headers);
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
    response
}

/// What the 429 of a denied verdict says: [`Problem::from_verdict`]'s fields, before they are
/// written as a [`Problem`] or, by a front door answering it, straight as its JSON.
#[derive(Debug, Clone, Copy)]
struct Denial {
    /// A calendar quota denied (rather than a rate limit).
    quota: bool,
    /// Seconds until the same request may pass, at least 1.
    retry_after: u64,
    /// The denying limit's capacity, remaining and reset (Unix seconds), when it is enforced.
    numbers: Option<(u64, u64, u64)>,
}

impl Denial {
    /// `None` when `verdict` is allowed.
    fn of(verdict: &Verdict) -> Option<Denial> {
        if verdict.allowed {
            return None;
        }
        let denying = verdict.most_restrictive();
        Some(Denial {
            quota: denying.is_some_and(|l| l.quota),
            retry_after: ceil_secs_at_least_one(verdict.retry_after().unwrap_or_default()),
            numbers: denying.filter(|l| is_enforced(verdict, l)).map(|l| {
                (l.decision.limit, l.decision.remaining, reset_unix_secs(verdict.at, l.decision.reset_after))
            }),
        })
    }

    /// The detail, in parts: `<what>; retry in <n> second(s).` (ASCII that JSON takes as it is).
    fn detail<'n>(&self, n: &'n mut itoa::Buffer) -> [&'n str; 4] {
        let unit = if self.retry_after == 1 { " second." } else { " seconds." };
        [kind(self.quota).2, "; retry in ", n.format(self.retry_after), unit]
    }

    /// The problem's `retry_after`, `limit`, `remaining` and `reset`.
    fn numbers(&self) -> [Option<u64>; 4] {
        let (limit, remaining, reset) = match self.numbers {
            Some((limit, remaining, reset)) => (Some(limit), Some(remaining), Some(reset)),
            None => (None, None, None),
        };
        [Some(self.retry_after), limit, remaining, reset]
    }

    /// The JSON of [`Problem::from_verdict`]'s problem, the same bytes as its
    /// [`Problem::to_json`], written without making the problem: the start up to the detail,
    /// which escapes nothing, is written once per kind.
    fn json(&self) -> Vec<u8> {
        static HEADS: std::sync::LazyLock<[Vec<u8>; 2]> = std::sync::LazyLock::new(|| {
            [false, true].map(|quota| {
                let (type_uri, title, _) = kind(quota);
                let mut head = Vec::new();
                push_head(&mut head, type_uri, title, StatusCode::TOO_MANY_REQUESTS.as_u16());
                head
            })
        });
        let head = &HEADS[usize::from(self.quota)];
        // Room for the detail and the numbers with their names, as they usually are.
        let mut out = Vec::with_capacity(head.len() + if self.numbers.is_some() { 160 } else { 96 });
        out.extend_from_slice(head);
        out.push(b'"');
        for part in self.detail(&mut itoa::Buffer::new()) {
            out.extend_from_slice(part.as_bytes());
        }
        out.push(b'"');
        push_numbers(&mut out, self.numbers());
        out
    }
}

/// A 429's type, title, and what its detail says happened: for a calendar quota (`quota`) or a
/// rate limit.
fn kind(quota: bool) -> (&'static str, &'static str, &'static str) {
    if quota {
        (QUOTA_EXCEEDED_TYPE, "Quota Exceeded", "Quota exceeded")
    } else {
        (RATE_LIMITED_TYPE, "Too Many Requests", "Rate limit exceeded")
    }
}

/// A problem's JSON up to its detail: `{"type":…,"title":…,"status":…,"detail":`.
fn push_head(out: &mut Vec<u8>, type_uri: &str, title: &str, status: u16) {
    out.extend_from_slice(b"{\"type\":");
    push_json_string(out, type_uri);
    out.extend_from_slice(b",\"title\":");
    push_json_string(out, title);
    out.extend_from_slice(b",\"status\":");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.extend_from_slice(b",\"detail\":");
}

/// A problem's JSON after its detail: `retry_after`, `limit`, `remaining` and `reset`, each when
/// it has a value, and the closing brace.
fn push_numbers(out: &mut Vec<u8>, [retry_after, limit, remaining, reset]: [Option<u64>; 4]) {
    let mut n = itoa::Buffer::new();
    for (name, value) in [
        (&b",\"retry_after\":"[..], retry_after),
        (b",\"limit\":", limit),
        (b",\"remaining\":", remaining),
        (b",\"reset\":", reset),
    ] {
        if let Some(value) = value {
            out.extend_from_slice(name);
            out.extend_from_slice(n.format(value).as_bytes());
        }
    }
    out.push(b'}');
}
