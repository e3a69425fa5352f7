//! `POST /v1/check`, `/v1/report`, `/v1/peek`.
//!
//! Body: `{"descriptors": {"user": "u1", "route": "POST /chat"}, "cost": 1, "domain": "envoy"}` —
//! `descriptors` required (an object of strings, at most [`MAX_DESCRIPTORS`]), `cost` optional
//! (an integer ≥ 1, default 1), `domain` optional (an Envoy domain's policy instead of the native
//! one; a domain no Envoy file defines gets the native policy). Any other field is an error. For an
//! Envoy domain, the descriptors are taken as one Envoy descriptor whose entries are the object's
//! members in the order written (`{"remote_address": "10.0.0.1", "path": "/login"}` is the entry
//! list `[remote_address, path]`), exactly as `ShouldRateLimit` would see it.
//!
//! Answer: `200` when allowed, `429` when denied (`/v1/report` never denies), both with the
//! rate-limit headers, and the verdict as JSON. Errors: `400` for a body that is not JSON, `422`
//! for JSON of the wrong shape and for a cost some enforced rule can never grant (naming the rule:
//! callers of this API are services, not end users), `413` over 64 KiB.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::Response;
use floodgate::headers::{NEVER_ALLOWED_TYPE, Problem, rate_limit_headers, tag_header};
use floodgate::{Descriptors, EngineError, Verdict};
use http::StatusCode;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::{MAX_BODY, invalid, json, malformed, problem, read_body};
use crate::app::Shared;
use crate::config::{ENVOY_KEYS, envoy_descriptors};
use crate::metrics::{self, status_label};

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Check,
    Peek,
    Report,
}

impl Op {
    fn api(self) -> &'static str {
        match self {
            Op::Check => "check",
            Op::Peek => "peek",
            Op::Report => "report",
        }
    }
}

pub(super) async fn check(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    handle(&shared, request, Op::Check).await
}

pub(super) async fn peek(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    handle(&shared, request, Op::Peek).await
}

pub(super) async fn report(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    handle(&shared, request, Op::Report).await
}

async fn handle(shared: &Shared, request: Request, op: Op) -> Response {
    let response = decide(shared, request, op).await;
    shared.metrics.request(op.api(), status_label(response.status()));
    response
}

async fn decide(shared: &Shared, request: Request, op: Op) -> Response {
    let body = match read_body(request, MAX_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let CheckBody { descriptors: DescriptorMap(descriptors), cost, domain } = match parse(&body) {
        Ok(body) => body,
        Err(response) => return response,
    };
    if cost == 0 {
        return invalid("cost must be at least 1.");
    }

    let running = shared.control.load();
    let policy = running.domain(domain.as_deref());
    // An Envoy domain's rules match Envoy descriptors: the entries in order, as gRPC sends them.
    let descriptors = match domain.as_deref() {
        Some(d) if running.domains.contains_key(d) && descriptors.get(ENVOY_KEYS).is_none() => {
            envoy_descriptors(descriptors.iter())
        }
        _ => descriptors,
    };
    let started = metrics::started();
    let result = match op {
        Op::Check => policy.engine.check(&descriptors, cost).await,
        Op::Peek => policy.engine.peek(&descriptors, cost).await,
        Op::Report => policy.engine.report(&descriptors, cost).await,
    };
    let verdict = match result {
        Ok(verdict) => verdict,
        Err(error) => {
            policy.metrics.record_duration(started);
            return never_allowed(&error);
        }
    };
    if op != Op::Peek {
        policy.metrics.record(&verdict, started);
    }
    if verdict.store_error.is_some() {
        shared.metrics.store_error();
    }

    let status = if verdict.allowed { StatusCode::OK } else { StatusCode::TOO_MANY_REQUESTS };
    let mut response = json(status, &VerdictBody::from(&verdict));
    rate_limit_headers(&verdict, running.headers, response.headers_mut());
    tag_header(&verdict, response.headers_mut());
    response
}

/// 422 naming the rule that can never grant the cost.
fn never_allowed(error: &EngineError) -> Response {
    problem(Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        NEVER_ALLOWED_TYPE,
        "Request Can Never Be Allowed",
        format!("The request can never be allowed: {error}."),
    ))
}

// === the request body ===

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    descriptors: DescriptorMap,
    #[serde(default = "one")]
    cost: u64,
    #[serde(default)]
    domain: Option<String>,
}

fn one() -> u64 {
    1
}

/// `descriptors`, read straight into [`Descriptors`].
#[derive(Debug)]
struct DescriptorMap(Descriptors);

impl<'de> Deserialize<'de> for DescriptorMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DescriptorMap;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of descriptor names to string values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DescriptorMap, A::Error> {
                let mut descriptors = Descriptors::new();
                while let Some((name, value)) = map.next_entry::<String, String>()? {
                    if descriptors.get(&name).is_some() {
                        return Err(de::Error::custom(format!("descriptor {name:?} appears twice")));
                    }
                    if descriptors.len() == MAX_DESCRIPTORS {
                        return Err(de::Error::custom(format!("at most {MAX_DESCRIPTORS} descriptors")));
                    }
                    descriptors.insert(name, value);
                }
                Ok(DescriptorMap(descriptors))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// Parses a body; on failure, a 400 (not JSON) or 422 (wrong shape) saying exactly what is wrong.
#[allow(clippy::result_large_err)] // a response, built only on the error path
fn parse(body: &[u8]) -> Result<CheckBody, Response> {
    match serde_json::from_slice::<CheckBody>(body) {
        Ok(parsed) => Ok(parsed),
        Err(e) if e.is_syntax() || e.is_eof() || e.is_io() => Err(malformed(if body.is_empty() {
            "The body is empty: expected a JSON object such as {\"descriptors\": {\"user\": \"u1\"}}."
                .to_owned()
        } else {
            format!("The body is not valid JSON: {e}.")
        })),
        Err(e) => {
            let detail = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| explain(&v))
                .unwrap_or_else(|| e.to_string());
            Err(invalid(format!("{detail}.")))
        }
    }
}

/// What is wrong with well-formed JSON that is not a valid request, named precisely.
fn explain(value: &Value) -> Option<String> {
    let Value::Object(fields) = value else {
        return Some(format!("The body must be a JSON object, not {}", kind(value)));
    };
    if let Some(unknown) = fields.keys().find(|k| !["descriptors", "cost", "domain"].contains(&k.as_str())) {
        return Some(format!("Unknown field {unknown:?}: expected \"descriptors\", \"cost\" or \"domain\""));
    }
    match fields.get("descriptors") {
        None => {
            return Some(
                "Missing field \"descriptors\": an object of descriptor names to string values".into(),
            );
        }
        Some(Value::Object(descriptors)) => {
            if descriptors.len() > MAX_DESCRIPTORS {
                return Some(format!(
                    "Too many descriptors ({}): at most {MAX_DESCRIPTORS}",
                    descriptors.len()
                ));
            }
            if let Some((name, v)) = descriptors.iter().find(|(_, v)| !v.is_string()) {
                return Some(format!("descriptors.{name:?} must be a string, not {}", kind(v)));
            }
        }
        Some(other) => {
            return Some(format!(
                "\"descriptors\" must be an object of descriptor names to string values, not {}",
                kind(other)
            ));
        }
    }
    if let Some(cost) = fields.get("cost")
        && cost.as_u64().is_none()
    {
        return Some(format!("\"cost\" must be a whole number of at least 1, not {}", kind(cost)));
    }
    if let Some(domain) = fields.get("domain")
        && !(domain.is_string() || domain.is_null())
    {
        return Some(format!("\"domain\" must be a string, not {}", kind(domain)));
    }
    None
}

/// A JSON value's kind, with the value when short (`a number (5)`).
fn kind(value: &Value) -> String {
    let shown = |what: &str| {
        let text = value.to_string();
        if text.len() <= 40 { format!("{what} ({text})") } else { what.to_owned() }
    };
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(_) => shown("a boolean"),
        Value::Number(_) => shown("a number"),
        Value::String(_) => shown("a string"),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

// === the verdict body ===

/// The JSON verdict.
#[derive(Debug, Serialize)]
struct VerdictBody<'a> {
    allowed: bool,
    retry_after_ms: Option<u64>,
    limits: Vec<LimitBody<'a>>,
}

#[derive(Debug, Serialize)]
struct LimitBody<'a> {
    name: &'a str,
    limit: u64,
    remaining: u64,
    reset_after_ms: u64,
    retry_after_ms: Option<u64>,
    allowed: bool,
    outcome: &'static str,
}

impl<'a> From<&'a Verdict> for VerdictBody<'a> {
    fn from(v: &'a Verdict) -> Self {
        VerdictBody {
            allowed: v.allowed,
            retry_after_ms: if v.allowed { None } else { v.retry_after().map(ceil_ms) },
            limits: v
                .limits
                .iter()
                .map(|l| LimitBody {
                    name: &l.rule,
                    limit: l.decision.limit,
                    remaining: l.decision.remaining,
                    reset_after_ms: ceil_ms(l.decision.reset_after),
                    retry_after_ms: l.decision.retry_after.map(ceil_ms),
                    allowed: l.decision.allowed,
                    outcome: l.outcome.as_str(),
                })
                .collect(),
        }
    }
}

/// Whole milliseconds, rounded up: a client waiting `retry_after_ms` is never early.
pub(crate) fn ceil_ms(d: Duration) -> u64 {
    let ms = d.as_millis() + u128::from(!d.as_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explained(body: &str) -> String {
        explain(&serde_json::from_str(body).unwrap()).unwrap()
    }

    #[test]
    fn explanations_name_the_field_and_what_it_got() {
        assert_eq!(explained("[1]"), "The body must be a JSON object, not an array");
        assert_eq!(
            explained(r#"{"descriptors":{},"x":1}"#),
            r#"Unknown field "x": expected "descriptors", "cost" or "domain""#
        );
        assert!(explained(r#"{"cost":1}"#).starts_with("Missing field \"descriptors\""));
        assert_eq!(
            explained(r#"{"descriptors":{"user":5}}"#),
            r#"descriptors."user" must be a string, not a number (5)"#
        );
        assert_eq!(
            explained(r#"{"descriptors":{"user":"u"},"cost":-1}"#),
            r#""cost" must be a whole number of at least 1, not a number (-1)"#
        );
        assert_eq!(
            explained(r#"{"descriptors":[]}"#),
            r#""descriptors" must be an object of descriptor names to string values, not an array"#
        );
    }

    #[test]
    fn milliseconds_round_up() {
        assert_eq!(ceil_ms(Duration::from_micros(1)), 1);
        assert_eq!(ceil_ms(Duration::from_millis(30_200)), 30_200);
        assert_eq!(ceil_ms(Duration::from_micros(30_200_001)), 30_201);
        assert_eq!(ceil_ms(Duration::ZERO), 0);
    }
}
