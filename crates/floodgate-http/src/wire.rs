//! The JSON wire types of the check API (`/v1/check`, `/v1/peek`, `/v1/report`): the request
//! body, read with errors that name the field and what it got, and the verdict as JSON.
//!
//! Request: `{"descriptors": {"user": "u1", "route": "POST /chat"}, "cost": 1, "domain": "envoy"}`
//! — `descriptors` required (an object of strings, at most [`MAX_DESCRIPTORS`]), `cost` optional
//! (an integer ≥ 1, default 1), `domain` optional (an Envoy domain's policy instead of the native
//! one). Any other field is an error.
//!
//! ```
//! use floodgate_http::wire::{CheckRequest, VerdictBody};
//!
//! let request = CheckRequest::parse(br#"{"descriptors": {"user": "u1"}, "cost": 2}"#)?;
//! assert_eq!(request.descriptors.get("user"), Some("u1"));
//! assert_eq!((request.cost, request.domain), (2, None));
//!
//! let problem = CheckRequest::parse(br#"{"descriptors": {"user": 1}}"#).unwrap_err();
//! assert_eq!(problem.status, 422);
//! assert_eq!(problem.detail, r#"descriptors."user" must be a string, not a number (1)."#);
//!
//! let allowed = floodgate::Verdict { allowed: true, ..Default::default() };
//! assert_eq!(VerdictBody::from(&allowed).to_json(), br#"{"allowed":true,"retry_after_ms":null,"limits":[]}"#);
//! # Ok::<(), floodgate_http::Problem>(())
//! ```

use std::fmt;
use std::time::Duration;

use floodgate::{Descriptors, Verdict};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::Problem;

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;

/// The fields a check body may have.
const FIELDS: [&str; 3] = ["descriptors", "cost", "domain"];

// === the request body ===

/// A check, peek or report request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRequest {
    /// What the request is.
    pub descriptors: Descriptors,
    /// What it costs (at least 1; 1 when the body leaves it out).
    pub cost: u64,
    /// The Envoy domain whose policy decides, if any.
    pub domain: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    descriptors: DescriptorMap,
    #[serde(default = "one")]
    cost: u64,
    #[serde(default)]
    domain: Option<String>,
}

fn one() -> u64 {
    1
}

impl CheckRequest {
    /// Reads a body. On failure, the problem to answer: 400 for a body that is not JSON, 422 for
    /// JSON of the wrong shape (a missing or unknown field, a value of the wrong type, a cost of
    /// 0), each saying exactly what is wrong.
    #[allow(clippy::result_large_err)] // a problem is built only on the error path, and sent once
    pub fn parse(body: &[u8]) -> Result<CheckRequest, Problem> {
        match serde_json::from_slice::<Body>(body) {
            Ok(Body { cost: 0, .. }) => Err(Problem::invalid("cost must be at least 1.")),
            Ok(Body { descriptors: DescriptorMap(descriptors), cost, domain }) => {
                Ok(CheckRequest { descriptors, cost, domain })
            }
            Err(e) if e.is_syntax() || e.is_eof() || e.is_io() => {
                Err(Problem::malformed(if body.is_empty() {
                    "The body is empty: expected a JSON object such as {\"descriptors\": {\"user\": \"u1\"}}."
                        .to_owned()
                } else {
                    format!("The body is not valid JSON: {e}.")
                }))
            }
            Err(e) => {
                let detail = serde_json::from_slice::<Value>(body)
                    .ok()
                    .and_then(|v| explain(&v))
                    .unwrap_or_else(|| e.to_string());
                Err(Problem::invalid(format!("{detail}.")))
            }
        }
    }
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

/// What is wrong with well-formed JSON that is not a valid request, named precisely.
fn explain(value: &Value) -> Option<String> {
    let Value::Object(fields) = value else {
        return Some(format!("The body must be a JSON object, not {}", kind(value)));
    };
    if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
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

/// The JSON verdict: `{"allowed", "retry_after_ms", "limits": [{"name", "limit", "remaining",
/// "reset_after_ms", "retry_after_ms", "allowed", "outcome"}]}`, one entry per rule that applied,
/// milliseconds rounded up ([`ceil_ms`]).
#[derive(Debug, Serialize)]
pub struct VerdictBody<'a> {
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

impl VerdictBody<'_> {
    /// The JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Strings, integers and booleans always serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Whole milliseconds, rounded up: a client waiting `retry_after_ms` is never early.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(floodgate_http::ceil_ms(Duration::from_micros(30_200_001)), 30_201);
/// ```
pub fn ceil_ms(d: Duration) -> u64 {
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

    #[test]
    fn bodies_parse_with_defaults_and_refuse_zero_costs_and_repeats() {
        let r = CheckRequest::parse(br#"{"descriptors": {"a": "1", "b": "2"}}"#).unwrap();
        assert_eq!((r.cost, r.descriptors.len()), (1, 2));
        assert_eq!(CheckRequest::parse(br#"{"descriptors": {}, "cost": 0}"#).unwrap_err().status, 422);
        let repeated = CheckRequest::parse(br#"{"descriptors": {"a": "1", "a": "2"}}"#).unwrap_err();
        assert!(repeated.detail.contains("appears twice"), "{}", repeated.detail);
        assert_eq!(CheckRequest::parse(b"").unwrap_err().status, 400);
        assert_eq!(CheckRequest::parse(b"{").unwrap_err().status, 400);
    }
}
