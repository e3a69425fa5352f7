//! The JSON wire types of the check API (`/v1/check`, `/v1/peek`, `/v1/report`): the request
//! body, read with errors that name the field and what it got, and the verdict as JSON.
//!
//! Request: `{"descriptors": {"user": "u1", "route": "POST /chat"}, "cost": 1, "domain": "envoy"}`
//! — `descriptors` required (an object of strings, at most [`MAX_DESCRIPTORS`]), `cost` optional
//! (an integer from 1 to [`MAX_COST`], default 1) or instead `costs` (dimension → integer, at most
//! [`MAX_COST_DIMENSIONS`], at least one of 1 or more; both → 422), `domain` optional (an Envoy domain's policy
//! instead of the native one; `null` is the same as leaving it out). Any other field is an error.
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

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use floodgate::cost::{REQUESTS, valid_dimension};
use floodgate::{Costs, Descriptors, Hit, Stated, Verdict};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::Problem;

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;

/// The largest cost one request may carry (`2^64 - 1`): a larger number is refused, naming this
/// bound.
pub const MAX_COST: u64 = u64::MAX;

/// The most cost dimensions one request may name in `costs`.
pub const MAX_COST_DIMENSIONS: usize = 16;

/// The fields a check body may have, in the order they are documented.
pub const FIELDS: [&str; 5] = ["descriptors", "cost", "costs", "domain", "stated"];

/// The fields of a check body's `stated`, in the order they are documented.
pub const STATED_FIELDS: [&str; 3] = ["limit", "window_ms", "block_for_ms"];

// === the request body ===

/// A check, peek or report request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRequest {
    /// What the request is.
    pub descriptors: Descriptors,
    /// What it costs in requests (at least 1; 1 when the body leaves it out; with `costs`, their
    /// `requests`, possibly 0).
    pub cost: u64,
    /// What it costs per dimension (`{"requests": 1, "tokens": 1200}`), when the body says so
    /// instead of `cost`: each rule takes the cost of the dimension it counts.
    pub costs: Option<Costs>,
    /// The Envoy domain whose policy decides, if any.
    pub domain: Option<String>,
    /// The limit, window and block duration it states for the rules that take them
    /// (`{"limit": 10, "window_ms": 60000, "block_for_ms": 300000}`, each optional); empty when
    /// the body states none.
    pub stated: Stated,
}

impl CheckRequest {
    /// The hit this request asks the engine to decide.
    pub fn hit<'a>(&'a self, descriptors: &'a Descriptors) -> Hit<'a> {
        let hit = match &self.costs {
            Some(costs) => Hit::with_costs(descriptors, costs),
            None => Hit::new(descriptors, self.cost),
        };
        hit.stating(&self.stated)
    }
}

/// `stated`: an object of whole numbers, the durations in milliseconds (what is wrong with one is
/// explained by [`explain`]).
#[derive(Debug, Default)]
struct StatedBody {
    limit: Option<Cost>,
    window_ms: Option<Cost>,
    block_for_ms: Option<Cost>,
}

impl<'de> Deserialize<'de> for StatedBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StatedBody;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of stated values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StatedBody, A::Error> {
                let mut body = StatedBody::default();
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    let value: Option<Cost> = map.next_value()?;
                    let field = match &*name {
                        "limit" => &mut body.limit,
                        "window_ms" => &mut body.window_ms,
                        "block_for_ms" => &mut body.block_for_ms,
                        other => return Err(de::Error::custom(format!("unknown field stated.{other:?}"))),
                    };
                    if field.is_some() {
                        return Err(de::Error::custom(format!("stated.{name:?} appears twice")));
                    }
                    *field = value;
                }
                Ok(body)
            }
        }
        deserializer.deserialize_map(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    descriptors: DescriptorMap,
    #[serde(default, deserialize_with = "some_cost")]
    cost: Option<u64>,
    #[serde(default)]
    costs: Option<CostMap>,
    #[serde(default)]
    domain: Option<String>,
    #[serde(default)]
    stated: Option<StatedBody>,
}

fn some_cost<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    cost(deserializer).map(Some)
}

/// `costs`: an object of dimension names to whole numbers, read into [`Costs`]. What is wrong
/// with one is explained by [`explain`].
#[derive(Debug)]
struct CostMap(Costs);

impl<'de> Deserialize<'de> for CostMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CostMap;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of cost dimensions to whole numbers")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CostMap, A::Error> {
                let mut costs = Costs::new();
                while let Some(name) = map.next_key::<String>()? {
                    let Cost(value) = map.next_value()?;
                    if !valid_dimension(&name) {
                        return Err(de::Error::custom(format!("costs: {name:?} is not a cost dimension")));
                    }
                    if costs.names(&name) {
                        return Err(de::Error::custom(format!("costs.{name:?} appears twice")));
                    }
                    if costs.len() == MAX_COST_DIMENSIONS {
                        return Err(de::Error::custom(format!("at most {MAX_COST_DIMENSIONS} costs")));
                    }
                    costs.set(name, value);
                }
                Ok(CostMap(costs))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// One value of `costs` (of a check, or of a reservation's commit): a whole number from 0 to
/// [`MAX_COST`], however it is written (`2`, `2.0`, `2e0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost(pub u64);

impl<'de> Deserialize<'de> for Cost {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        cost(deserializer).map(Cost)
    }
}

/// `cost`: a JSON number that is a whole number from 0 to [`MAX_COST`], however it is written
/// (`2`, `2.0`, `2e0`: JSON, and JSON Schema's `integer`, do not tell them apart). 0 is refused
/// after, with its own message.
fn cost<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a whole number from 1 to {MAX_COST}")
        }

        fn visit_u64<E: de::Error>(self, cost: u64) -> Result<u64, E> {
            Ok(cost)
        }

        fn visit_f64<E: de::Error>(self, cost: f64) -> Result<u64, E> {
            whole(cost).ok_or_else(|| E::invalid_value(de::Unexpected::Float(cost), &self))
        }
    }
    deserializer.deserialize_any(V)
}

/// A JSON number that is a whole number from 0 to 2^64 − 1, however it is written (`2`, `2.0`,
/// `2e0`): what JSON Schema's `integer` admits, for the other fields of an API's bodies.
///
/// ```
/// use serde_json::json;
/// use floodgate_http::wire::whole_number;
/// assert_eq!(whole_number(&json!(2.0)), Some(2));
/// assert_eq!((whole_number(&json!(2.5)), whole_number(&json!(-1)), whole_number(&json!("2"))), (None, None, None));
/// ```
pub fn whole_number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| value.as_f64().and_then(whole))
}

/// `n` as a `u64` when it is a whole number in range (2^64 itself, the first float past
/// [`MAX_COST`], is not).
fn whole(n: f64) -> Option<u64> {
    // Truncation cannot happen: `n` is whole and below 2^64.
    (n.fract() == 0.0 && (0.0..TWO_TO_THE_64).contains(&n)).then_some(n as u64)
}

/// 2^64, exactly, as a float.
const TWO_TO_THE_64: f64 = 18_446_744_073_709_551_616.0;

impl CheckRequest {
    /// Reads a body. On failure, the problem to answer: 400 for a body that is not JSON, 422 for
    /// JSON of the wrong shape (a missing or unknown field, a value of the wrong type, a cost of
    /// 0), each saying exactly what is wrong.
    #[allow(clippy::result_large_err)] // a problem is built only on the error path, and sent once
    pub fn parse(body: &[u8]) -> Result<CheckRequest, Problem> {
        match serde_json::from_slice::<Body>(body) {
            Ok(Body { cost: Some(_), costs: Some(_), .. }) => Err(Problem::invalid(
                "\"cost\" and \"costs\" are both given: send one (\"cost\": n is \"costs\": {\"requests\": n}).",
            )),
            Ok(Body { cost: Some(0), .. }) => Err(Problem::invalid("cost must be at least 1.")),
            Ok(Body { costs: Some(CostMap(costs)), .. }) if costs.is_zero() => Err(Problem::invalid(
                "\"costs\" must give at least one dimension a cost of 1 or more, e.g. {\"requests\": 1}.",
            )),
            Ok(Body { stated: Some(StatedBody { limit: Some(Cost(0)), .. }), .. }) => {
                Err(Problem::invalid("stated.limit is 0; it must be at least 1."))
            }
            Ok(Body { stated: Some(StatedBody { window_ms: Some(Cost(0)), .. }), .. }) => {
                Err(Problem::invalid("stated.window_ms is 0; it must be at least 1."))
            }
            Ok(Body { descriptors: DescriptorMap(descriptors), cost, costs, domain, stated }) => {
                let costs = costs.map(|CostMap(c)| c);
                let cost = match &costs {
                    Some(c) => c.get(REQUESTS),
                    None => cost.unwrap_or(1),
                };
                let stated = stated.map_or_else(Stated::default, |s| Stated {
                    limit: s.limit.map(|Cost(n)| n),
                    window: s.window_ms.map(|Cost(ms)| Duration::from_millis(ms)),
                    block_for: s.block_for_ms.map(|Cost(ms)| Duration::from_millis(ms)),
                });
                Ok(CheckRequest { descriptors, cost, costs, domain, stated })
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
                let mut descriptors =
                    Descriptors::with_capacity(map.size_hint().unwrap_or(4).min(MAX_DESCRIPTORS));
                while let Some(Name(name)) = map.next_key::<Name>()? {
                    map.next_value_seed(ValueInto { descriptors: &mut descriptors, name })?;
                }
                Ok(DescriptorMap(descriptors))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// A descriptor's value, read straight into the descriptors (no string of its own): a string,
/// under a name not given before, within [`MAX_DESCRIPTORS`].
struct ValueInto<'a> {
    descriptors: &'a mut Descriptors,
    name: Cow<'static, str>,
}

impl<'de> de::DeserializeSeed<'de> for ValueInto<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for ValueInto<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<(), E> {
        let ValueInto { descriptors, name } = self;
        if descriptors.get(&name).is_some() {
            return Err(E::custom(format!("descriptor {name:?} appears twice")));
        }
        if descriptors.len() == MAX_DESCRIPTORS {
            return Err(E::custom(format!("at most {MAX_DESCRIPTORS} descriptors")));
        }
        descriptors.insert(name, value);
        Ok(())
    }
}

/// A descriptor name: the names every front door knows are not copied.
struct Name(Cow<'static, str>);

/// The names that are not copied ([`Name`]).
const KNOWN_NAMES: [&str; 8] = ["user", "tenant", "ip", "route", "method", "api_key", "plan", "session"];

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Name;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a descriptor name")
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<Name, E> {
                Ok(Name(match KNOWN_NAMES.iter().find(|k| **k == name) {
                    Some(known) => Cow::Borrowed(known),
                    None => Cow::Owned(name.to_owned()),
                }))
            }

            fn visit_string<E: de::Error>(self, name: String) -> Result<Name, E> {
                Ok(Name(match KNOWN_NAMES.iter().find(|k| **k == name) {
                    Some(known) => Cow::Borrowed(known),
                    None => Cow::Owned(name),
                }))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// What is wrong with well-formed JSON that is not a valid request, named precisely.
fn explain(value: &Value) -> Option<String> {
    let Value::Object(fields) = value else {
        return Some(format!("The body must be a JSON object, not {}", kind(value)));
    };
    if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Some(format!(
            "Unknown field {unknown:?}: expected \"descriptors\", \"cost\", \"costs\", \"domain\" or \"stated\""
        ));
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
        && cost.as_u64().or_else(|| cost.as_f64().and_then(whole)).is_none()
    {
        // Without arbitrary precision, a whole number past u64 reads as a float at or above 2^64.
        if cost.as_f64().is_some_and(|f| f >= TWO_TO_THE_64 && f.fract() == 0.0) {
            return Some(format!("\"cost\" must be at most {MAX_COST}"));
        }
        return Some(format!("\"cost\" must be a whole number of at least 1, not {}", kind(cost)));
    }
    match fields.get("costs") {
        None => {}
        Some(Value::Object(costs)) => {
            if costs.len() > MAX_COST_DIMENSIONS {
                return Some(format!("Too many costs ({}): at most {MAX_COST_DIMENSIONS}", costs.len()));
            }
            for (name, cost) in costs {
                if !valid_dimension(name) {
                    return Some(format!(
                        "costs.{name:?} is not a cost dimension: expected requests or a name of lowercase \
                         letters, digits and _ (at most {} characters), such as tokens",
                        floodgate::cost::MAX_DIMENSION_LEN
                    ));
                }
                if cost.as_u64().or_else(|| cost.as_f64().and_then(whole)).is_none() {
                    if cost.as_f64().is_some_and(|f| f >= TWO_TO_THE_64 && f.fract() == 0.0) {
                        return Some(format!("costs.{name:?} must be at most {MAX_COST}"));
                    }
                    return Some(format!(
                        "costs.{name:?} must be a whole number of at least 0, not {}",
                        kind(cost)
                    ));
                }
            }
        }
        Some(other) => {
            return Some(format!(
                "\"costs\" must be an object of cost dimensions to whole numbers, e.g. {{\"requests\": 1, \
                 \"tokens\": 1200}}, not {}",
                kind(other)
            ));
        }
    }
    if let Some(domain) = fields.get("domain")
        && !(domain.is_string() || domain.is_null())
    {
        return Some(format!("\"domain\" must be a string, not {}", kind(domain)));
    }
    match fields.get("stated") {
        None | Some(Value::Null) => {}
        Some(Value::Object(stated)) => {
            if let Some(unknown) = stated.keys().find(|k| !STATED_FIELDS.contains(&k.as_str())) {
                return Some(format!(
                    "Unknown field stated.{unknown:?}: expected \"limit\", \"window_ms\" or \"block_for_ms\""
                ));
            }
            for (name, value) in stated {
                if value.as_u64().or_else(|| value.as_f64().and_then(whole)).is_none() && !value.is_null() {
                    return Some(format!("stated.{name} must be a whole number, not {}", kind(value)));
                }
            }
        }
        Some(other) => {
            return Some(format!(
                "\"stated\" must be an object such as {{\"limit\": 10, \"window_ms\": 60000}}, not {}",
                kind(other)
            ));
        }
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

/// The JSON verdict: `{"allowed", "retry_after_ms", "degrade_to" (only when a plan over its
/// limit degrades, see [`Verdict::degrade_to`]), "limits": [{"name", "limit", "remaining",
/// "reset_after_ms", "retry_after_ms", "allowed", "outcome"}]}`, one entry per rule that applied,
/// milliseconds rounded up ([`ceil_ms`]).
///
/// [`VerdictBody::to_json`] writes it straight into one buffer, with no intermediate values; the
/// `Serialize` implementation writes the same JSON for callers that embed it elsewhere (a test
/// keeps the two byte for byte equal).
#[derive(Debug, Clone, Copy)]
pub struct VerdictBody<'a>(&'a Verdict);

impl<'a> From<&'a Verdict> for VerdictBody<'a> {
    fn from(v: &'a Verdict) -> Self {
        VerdictBody(v)
    }
}

impl VerdictBody<'_> {
    fn retry_after_ms(&self) -> Option<u64> {
        if self.0.allowed { None } else { self.0.retry_after().map(ceil_ms) }
    }

    /// The JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + 176 * self.0.limits.len());
        self.write_json(&mut out);
        out
    }

    /// Appends the JSON to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let mut n = itoa::Buffer::new();
        let mut opt = |out: &mut Vec<u8>, v: Option<u64>| match v {
            Some(v) => out.extend_from_slice(n.format(v).as_bytes()),
            None => out.extend_from_slice(b"null"),
        };
        out.extend_from_slice(if self.0.allowed { b"{\"allowed\":true" } else { b"{\"allowed\":false" });
        out.extend_from_slice(b",\"retry_after_ms\":");
        opt(out, self.retry_after_ms());
        if let Some(model) = self.0.degrade_to() {
            out.extend_from_slice(b",\"degrade_to\":");
            push_json_string(out, model);
        }
        out.extend_from_slice(b",\"limits\":[");
        for (i, l) in self.0.limits.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"name\":");
            push_json_string(out, &l.rule);
            out.extend_from_slice(b",\"limit\":");
            opt(out, Some(l.decision.limit));
            out.extend_from_slice(b",\"remaining\":");
            opt(out, Some(l.decision.remaining));
            out.extend_from_slice(b",\"reset_after_ms\":");
            opt(out, Some(ceil_ms(l.decision.reset_after)));
            out.extend_from_slice(b",\"retry_after_ms\":");
            opt(out, l.decision.retry_after.map(ceil_ms));
            out.extend_from_slice(if l.decision.allowed {
                b",\"allowed\":true"
            } else {
                b",\"allowed\":false"
            });
            out.extend_from_slice(b",\"outcome\":\"");
            out.extend_from_slice(l.outcome.as_str().as_bytes());
            out.extend_from_slice(b"\"}");
        }
        out.extend_from_slice(b"]}");
    }
}

/// Appends `s` as a JSON string, escaped exactly as `serde_json` escapes it.
pub(crate) fn push_json_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let mut rest = s.as_bytes();
    loop {
        let clean = clean_len(rest);
        out.extend_from_slice(&rest[..clean]);
        let Some((&b, after)) = rest[clean..].split_first() else { break };
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            _ => &[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]],
        };
        out.extend_from_slice(escape);
        rest = after;
    }
    out.push(b'"');
}

/// How many bytes `bytes` starts with that a JSON string takes as they are (none of `"`, `\`
/// and the control characters below 0x20): eight at a time, then one by one.
fn clean_len(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    // Whether a byte of `word` is below `n` (n <= 0x80): the borrow of the subtraction reaches
    // the high bit of such a byte, and `!word` leaves out those already at 0x80 or above.
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH != 0;
    let mut n = 0;
    for chunk in bytes.chunks_exact(8) {
        let word = u64::from_le_bytes([
            chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5], chunk[6], chunk[7],
        ]);
        if below(word, 0x20) || below(word ^ (ONES * 0x22), 1) || below(word ^ (ONES * 0x5c), 1) {
            break;
        }
        n += 8;
    }
    n + bytes[n..].iter().take_while(|&&b| b >= 0x20 && b != b'"' && b != b'\\').count()
}

impl Serialize for VerdictBody<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeSeq, SerializeStruct};

        struct Limits<'a>(&'a Verdict);
        struct LimitBody<'a>(&'a floodgate::LimitOutcome);

        impl Serialize for Limits<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut seq = serializer.serialize_seq(Some(self.0.limits.len()))?;
                for l in &self.0.limits {
                    seq.serialize_element(&LimitBody(l))?;
                }
                seq.end()
            }
        }

        impl Serialize for LimitBody<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let l = self.0;
                let mut s = serializer.serialize_struct("LimitBody", 7)?;
                s.serialize_field("name", &*l.rule)?;
                s.serialize_field("limit", &l.decision.limit)?;
                s.serialize_field("remaining", &l.decision.remaining)?;
                s.serialize_field("reset_after_ms", &ceil_ms(l.decision.reset_after))?;
                s.serialize_field("retry_after_ms", &l.decision.retry_after.map(ceil_ms))?;
                s.serialize_field("allowed", &l.decision.allowed)?;
                s.serialize_field("outcome", l.outcome.as_str())?;
                s.end()
            }
        }

        let degrade_to = self.0.degrade_to();
        let mut s = serializer.serialize_struct("VerdictBody", 3 + usize::from(degrade_to.is_some()))?;
        s.serialize_field("allowed", &self.0.allowed)?;
        s.serialize_field("retry_after_ms", &self.retry_after_ms())?;
        if let Some(model) = degrade_to {
            s.serialize_field("degrade_to", model)?;
        }
        s.serialize_field("limits", &Limits(self.0))?;
        s.end()
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
            r#"Unknown field "x": expected "descriptors", "cost", "costs", "domain" or "stated""#
        );
        assert_eq!(
            explained(r#"{"descriptors":{},"stated":{"limit":"5"}}"#),
            r#"stated.limit must be a whole number, not a string ("5")"#
        );
        assert_eq!(
            explained(r#"{"descriptors":{},"stated":{"window":5}}"#),
            r#"Unknown field stated."window": expected "limit", "window_ms" or "block_for_ms""#
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
            explained(r#"{"descriptors":{"user":"u"},"cost":18446744073709551616}"#),
            r#""cost" must be at most 18446744073709551615"#
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

    proptest::proptest! {
        /// The hand-written JSON is the JSON serde writes, byte for byte, whatever the rule names
        /// and numbers.
        #[test]
        fn the_verdict_json_is_what_serde_writes(
            limits in proptest::collection::vec(
                ("\\PC{0,12}|[\\x00-\\x20\"\\\\]{0,4}", proptest::prelude::any::<(bool, u64, u64, u64, Option<u64>)>()),
                0..4,
            ),
            allowed in proptest::prelude::any::<bool>(),
            degrade_to in proptest::option::of("\\PC{0,12}|[\\x00-\\x20\"\\\\]{0,4}"),
        ) {
            use floodgate::{LimitOutcome, Outcome};
            let limits = limits.into_iter().map(|(name, (ok, limit, remaining, reset, retry))| LimitOutcome {
                rule: name.into(),
                index: 0,
                hit: 0,
                decision: floodgate_core::Decision {
                    allowed: ok,
                    limit,
                    remaining,
                    reset_after: Duration::from_micros(reset),
                    retry_after: retry.map(Duration::from_micros),
                },
                outcome: if ok { Outcome::Allowed } else { Outcome::Denied },
                enforced: true,
                window: Duration::from_secs(1),
                dimension: "requests".into(),
                quota: false,
                degrade_to: degrade_to.as_deref().map(std::sync::Arc::from),
                grant: None,
                permit: false,
                shard: None,
                partition: None,
            });
            let verdict = Verdict { allowed, limits: limits.collect(), ..Verdict::default() };
            let body = VerdictBody::from(&verdict);
            proptest::prop_assert_eq!(body.to_json(), serde_json::to_vec(&body).unwrap());
        }
    }

    #[test]
    fn a_whole_cost_is_that_cost_however_it_is_written() {
        for (written, cost) in [("2", 2), ("2.0", 2), ("2e0", 2), ("1e19", 10_000_000_000_000_000_000)] {
            let body = format!(r#"{{"descriptors": {{}}, "cost": {written}}}"#);
            assert_eq!(CheckRequest::parse(body.as_bytes()).unwrap().cost, cost, "{written}");
        }
        let max = format!(r#"{{"descriptors": {{}}, "cost": {MAX_COST}}}"#);
        assert_eq!(CheckRequest::parse(max.as_bytes()).unwrap().cost, MAX_COST);
        for refused in ["2.5", "-1", "-1.0", "18446744073709551616", "1.8446744073709552e19", "0.0"] {
            let body = format!(r#"{{"descriptors": {{}}, "cost": {refused}}}"#);
            assert_eq!(CheckRequest::parse(body.as_bytes()).unwrap_err().status, 422, "{refused}");
        }
        // A whole float is no reason to blame the cost for another field's fault.
        let other = CheckRequest::parse(br#"{"descriptors": {}, "cost": 2.0, "domain": 1}"#).unwrap_err();
        assert!(other.detail.contains("\"domain\" must be a string"), "{}", other.detail);
    }

    #[test]
    fn a_null_domain_is_no_domain() {
        let r = CheckRequest::parse(br#"{"descriptors": {"user": "u1"}, "domain": null}"#).unwrap();
        assert_eq!(r.domain, None);
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
