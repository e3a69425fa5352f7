//! OpenAPI 3.1 schemas of this crate's vocabulary (feature `openapi`): the check API's request
//! body ([`CheckRequest`]), the verdict ([`VerdictBody`]), problem bodies ([`Problem`]) and the
//! rate-limit headers.
//!
//! Each is built from what the parser and the renderers themselves use — [`FIELDS`],
//! [`MAX_DESCRIPTORS`], [`MAX_COST`], the problem `type` URIs, the header names, every
//! [`Outcome`] — so that a front door's document says what this crate does. A server puts them
//! in its document with `utoipa` (`request_body = CheckRequest`, `body = Problem`, …) and adds
//! the headers with [`decision_headers`].
//!
//! ```
//! use floodgate_http::Problem;
//! use floodgate_http::wire::CheckRequest;
//! use utoipa::PartialSchema;
//!
//! let schema = serde_json::to_value(CheckRequest::schema())?;
//! assert_eq!(schema["properties"]["descriptors"]["maxProperties"], 64);
//! assert_eq!(schema["properties"]["cost"]["maximum"], u64::MAX);
//! assert_eq!(schema["properties"]["domain"]["type"], serde_json::json!(["string", "null"]));
//! assert_eq!(schema["additionalProperties"], false);
//! let problem = serde_json::to_value(Problem::schema())?;
//! assert_eq!(problem["required"], serde_json::json!(["type", "title", "status", "detail"]));
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::borrow::Cow;

use floodgate::Outcome;
use http::HeaderName;
use serde_json::{Value, json};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::header::{Header, HeaderBuilder};
use utoipa::openapi::schema::{
    AdditionalProperties, AllOfBuilder, ArrayBuilder, ObjectBuilder, Schema, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::headers::{
    DEGRADE_HEADER, RATELIMIT, RATELIMIT_POLICY, RESERVATION_HEADER, TAG_HEADER, VENDOR_QUOTA_UNIT,
    X_RATELIMIT_LIMIT, X_RATELIMIT_LIMIT_REQUESTS, X_RATELIMIT_LIMIT_TOKENS, X_RATELIMIT_REMAINING,
    X_RATELIMIT_REMAINING_REQUESTS, X_RATELIMIT_REMAINING_TOKENS, X_RATELIMIT_RESET,
    X_RATELIMIT_RESET_REQUESTS, X_RATELIMIT_RESET_TOKENS,
};
use crate::problem::{
    FORBIDDEN_TYPE, INVALID_TYPE, MALFORMED_TYPE, NEVER_ALLOWED_TYPE, NOT_FOUND_TYPE, QUOTA_EXCEEDED_TYPE,
    RATE_LIMITED_TYPE, RESERVATION_SETTLED_TYPE, STORE_UNAVAILABLE_TYPE, TOO_LARGE_TYPE, UNAUTHORIZED_TYPE,
};
use crate::wire::{
    CheckRequest, FIELDS, MAX_COST, MAX_COST_DIMENSIONS, MAX_DESCRIPTORS, STATED_FIELDS, VerdictBody,
};
use crate::{PROBLEM_CONTENT_TYPE, Problem};

/// Every `outcome` a limit of a verdict can have, as [`Outcome::as_str`] names it.
pub const OUTCOMES: [Outcome; 8] = Outcome::ALL;

/// Every problem `type` URI a front door answers with.
pub const PROBLEM_TYPES: [&str; 11] = [
    MALFORMED_TYPE,
    INVALID_TYPE,
    NEVER_ALLOWED_TYPE,
    TOO_LARGE_TYPE,
    NOT_FOUND_TYPE,
    UNAUTHORIZED_TYPE,
    FORBIDDEN_TYPE,
    STORE_UNAVAILABLE_TYPE,
    RATE_LIMITED_TYPE,
    QUOTA_EXCEEDED_TYPE,
    RESERVATION_SETTLED_TYPE,
];

fn integer(minimum: u64) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(minimum))
}

fn nullable(types: Type) -> SchemaType {
    SchemaType::from_iter([types, Type::Null])
}

/// A stated value of a check body: a whole number from `minimum`, or `null` (not stated).
fn stated_whole(minimum: u64, what: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(nullable(Type::Integer))
        .minimum(Some(minimum))
        .maximum(Some(MAX_COST))
        .description(Some(what.to_owned()))
}

fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

fn boolean() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Boolean)
}

/// `object` with JSON Schema keywords `utoipa`'s builders have no field for (`not`, `const`,
/// `dependentSchemas`), each `(keyword, value)`. They are written through the map a schema's
/// extensions serialize from, flattened into the schema, so they appear as the keywords
/// themselves; `keywords` replaces any extensions `object` had.
pub fn with_keywords<'k>(
    object: ObjectBuilder,
    keywords: impl IntoIterator<Item = (&'k str, Value)>,
) -> ObjectBuilder {
    object.extensions(Some(keywords.into_iter().collect::<Extensions>()))
}

/// A reference to the component schema `T`.
pub fn reference<T: ToSchema>() -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(T::name()))
}

impl PartialSchema for crate::HeaderStyle {
    fn schema() -> RefOr<Schema> {
        string()
            .enum_values(Some(crate::HeaderStyle::all().map(crate::HeaderStyle::as_str)))
            .description(Some(
                "Which rate-limit headers are sent: `ietf`, `legacy`, `both`, `openai` or `none`, or \
                 several sets joined by `, ` (`ietf, openai`).",
            ))
            .into()
    }
}

impl ToSchema for crate::HeaderStyle {
    fn name() -> Cow<'static, str> {
        "HeaderStyle".into()
    }
}

// === the request body ===

impl PartialSchema for CheckRequest {
    fn schema() -> RefOr<Schema> {
        let [descriptors, cost, costs, domain, stated] = FIELDS;
        let [stated_limit, window_ms, block_for_ms] = STATED_FIELDS;
        // `cost` with `costs` (not `null`) is refused: one or the other.
        let both = json!({"required": [cost, costs], "properties": {costs: {"type": "object"}}});
        with_keywords(ObjectBuilder::new(), [("not", both)])
            .description(Some(
                "What a request is (its descriptors), what it costs, and which policy decides it. \
                 `cost` and `costs` are one or the other (the schema's `not`). Any other field is \
                 refused (422).",
            ))
            .property(
                descriptors,
                ObjectBuilder::new()
                    .description(Some(format!(
                        "Descriptor name → string value (`user`, `tenant`, `ip`, `route`, `method`, \
                         `api_key`, `plan`, `session`, `header.<name>`, or any name a rule keys \
                         by), at most {MAX_DESCRIPTORS}, each name once. With `domain` naming an \
                         Envoy domain, the members in the order written are that Envoy \
                         descriptor's entries."
                    )))
                    .additional_properties(Some(string()))
                    .max_properties(Some(MAX_DESCRIPTORS))
                    .examples([json!({"user": "u1", "route": "POST /chat"})]),
            )
            .required(descriptors)
            .property(
                cost,
                integer(1).maximum(Some(MAX_COST)).default(Some(json!(1))).description(Some(format!(
                    "What the request costs in `requests`, a whole number from 1 to {MAX_COST} \
                         (default 1). A cost some enforced rule can never grant at once is refused \
                         (422 `never-allowed`). Not with `costs` (the schema's `not`; 422)."
                ))),
            )
            .property(
                costs,
                with_keywords(
                    ObjectBuilder::new(),
                    // Not every cost 0: what `CheckRequest::parse` refuses as costing nothing.
                    [("not", json!({"type": "object", "additionalProperties": {"maximum": 0}}))],
                )
                .description(Some(format!(
                    "What the request costs per dimension, instead of `cost`: dimension name \
                         (`requests`, or a name such as `tokens` that rules count with `cost:`) → \
                         whole number from 0 to {MAX_COST}, at most {MAX_COST_DIMENSIONS} names, at \
                         least one cost of 1 or more (the schema's `not`: every cost 0 is refused, \
                         422). Each rule takes the cost of its own dimension; a rule whose dimension \
                         is left out (or 0) does not apply to this request. Not with `cost` (422). \
                         `null` is the same as leaving it out."
                )))
                .schema_type(nullable(Type::Object))
                .additional_properties(Some(integer(0).maximum(Some(MAX_COST))))
                .min_properties(Some(1))
                .max_properties(Some(MAX_COST_DIMENSIONS))
                .property_names(Some(string().pattern(Some("^[a-z][a-z0-9_]{0,63}$"))))
                .examples([json!({"requests": 1, "tokens": 1200})]),
            )
            .property(
                domain,
                ObjectBuilder::new().schema_type(nullable(Type::String)).description(Some(
                    "The Envoy domain (an envoyproxy/ratelimit file) whose policy decides, instead \
                     of the native rules; a domain no file defines gets the native rules. `null` \
                     is the same as leaving it out.",
                )),
            )
            .property(
                stated,
                ObjectBuilder::new()
                    .schema_type(nullable(Type::Object))
                    .description(Some(
                        "Caller-stated values, for the rules that take them from the request \
                         (`limit: {from: request, max: N}`, `window: {from: request, max: D}`, \
                         `block_for: {from: request, max: D}`; see docs/configuration.md): the \
                         limit, the window and the block duration (0: no block) in milliseconds, \
                         each optional. A value above a rule's bound, or one no rule applying to \
                         the request takes, is refused (422 naming the rule, the field and the \
                         bound); with `auth` clients, stating values needs the `state_limits` \
                         scope. A stated (limit, window) other than the rule's own counts on a \
                         counter of its own. `null` is the same as leaving it out.",
                    ))
                    .property(stated_limit, stated_whole(1, "The limit; `null`: not stated."))
                    .property(window_ms, stated_whole(1, "The window, in ms; `null`: not stated."))
                    .property(
                        block_for_ms,
                        stated_whole(0, "How long a denial blocks, in ms (0: no block); `null`: not stated."),
                    )
                    .additional_properties(Some(AdditionalProperties::FreeForm(false)))
                    .examples([json!({"limit": 10, "window_ms": 60000, "block_for_ms": 300000})]),
            )
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .examples([
                json!({"descriptors": {"user": "u1", "route": "POST /chat"}}),
                json!({"descriptors": {"tenant": "t1"}, "cost": 5}),
                json!({"descriptors": {"tenant": "t1"}, "costs": {"requests": 1, "tokens": 1200}}),
            ])
            .into()
    }
}

impl ToSchema for CheckRequest {
    fn name() -> Cow<'static, str> {
        "CheckRequest".into()
    }
}

// === the verdict ===

/// One limit of a [`VerdictBody`]: what one rule decided.
#[derive(Debug)]
pub struct LimitBody;

impl PartialSchema for LimitBody {
    fn schema() -> RefOr<Schema> {
        let ms = |what: &str| integer(0).description(Some(what.to_owned()));
        ObjectBuilder::new()
            .description(Some("What one rule that applied decided."))
            .property("name", string().description(Some("The rule's name.")))
            .property("limit", ms("The rule's capacity."))
            .property("remaining", ms("What is left after this request (a denied request consumes nothing)."))
            .property("reset_after_ms", ms("Milliseconds until the limit is fully replenished, rounded up."))
            .property(
                "retry_after_ms",
                ObjectBuilder::new().schema_type(nullable(Type::Integer)).minimum(Some(0)).description(Some(
                    "When the rule denied: milliseconds until the same request would pass, rounded \
                     up (exact: it passes then and not a millisecond earlier); otherwise `null`.",
                )),
            )
            .property("allowed", boolean().description(Some("Whether this rule allowed the request.")))
            .property(
                "outcome",
                string().enum_values(Some(OUTCOMES.map(Outcome::as_str))).description(Some(
                    "What the rule did: `allowed`, `denied`; `shadow_denied` / `tagged` (a \
                         shadow or tag rule that would have denied: the request passes); \
                         `error_allowed` / `error_denied` (the store failed, the rule fails open \
                         or closed); `local_allowed` / `local_denied` (the store failed, decided \
                         on this instance's share).",
                )),
            )
            .required("name")
            .required("limit")
            .required("remaining")
            .required("reset_after_ms")
            .required("retry_after_ms")
            .required("allowed")
            .required("outcome")
            .into()
    }
}

impl ToSchema for LimitBody {
    fn name() -> Cow<'static, str> {
        "Limit".into()
    }
}

impl PartialSchema for VerdictBody<'_> {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some(
                "The verdict: allowed only if every enforced rule allowed. One entry per rule that \
                 applied (shadow and tag rules included).",
            ))
            .property("allowed", boolean())
            .property(
                "retry_after_ms",
                ObjectBuilder::new().schema_type(nullable(Type::Integer)).minimum(Some(0)).description(Some(
                    "When denied: milliseconds until the same request would pass (the longest \
                     wait of the denying rules), rounded up; `null` when allowed.",
                )),
            )
            .property(
                "degrade_to",
                ObjectBuilder::new().schema_type(Type::String).description(Some(
                    "Only on an allowed verdict whose plan is over its limit and degrades \
                     (`overage: {free: {degrade_to: <model>}}`): the model to switch to; also sent \
                     as the `floodgate-degrade` header.",
                )),
            )
            .property("limits", ArrayBuilder::new().items(reference::<LimitBody>()))
            .required("allowed")
            .required("retry_after_ms")
            .required("limits")
            .examples([json!({
                "allowed": false,
                "retry_after_ms": 23997,
                "limits": [{
                    "name": "chat-per-user", "limit": 10, "remaining": 0, "reset_after_ms": 77997,
                    "retry_after_ms": 23997, "allowed": false, "outcome": "denied"
                }]
            })])
            .into()
    }
}

impl ToSchema for VerdictBody<'_> {
    fn name() -> Cow<'static, str> {
        "Verdict".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((LimitBody::name().into_owned(), LimitBody::schema()));
    }
}

// === problems ===

impl PartialSchema for Problem {
    fn schema() -> RefOr<Schema> {
        let optional = |what: &str| integer(0).description(Some(what.to_owned()));
        ObjectBuilder::new()
            .description(Some(format!(
                "An RFC 9457 problem (`{PROBLEM_CONTENT_TYPE}`): a stable `type` to branch on, a \
                 `title` naming the kind, a `detail` saying what happened this time. The rate-limit \
                 fields appear only on a 429 problem, and never name rules, keys, stores or \
                 algorithms."
            )))
            .property(
                "type",
                string()
                    .format(Some(SchemaFormat::Custom("uri".to_owned())))
                    .enum_values(Some(PROBLEM_TYPES))
                    .description(Some("A URI naming the kind of problem.")),
            )
            .property("title", string().description(Some("A short summary of the kind of problem.")))
            .property("status", integer(100).maximum(Some(599u64)).description(Some("The HTTP status code.")))
            .property("detail", string().description(Some("What happened this time, for humans.")))
            .property("retry_after", optional("Seconds until the same request may pass (429)."))
            .property("limit", optional("The capacity of the denying limit (429)."))
            .property("remaining", optional("What is left of the denying limit (429)."))
            .property("reset", optional("When the denying limit is fully replenished, Unix seconds (429)."))
            .required("type")
            .required("title")
            .required("status")
            .required("detail")
            .into()
    }
}

impl ToSchema for Problem {
    fn name() -> Cow<'static, str> {
        "Problem".into()
    }
}

/// A [`Problem`] whose `type` is one of `types`, and whose `status` is `status`.
pub fn problem_of(status: u16, types: &[&'static str]) -> Schema {
    AllOfBuilder::new()
        .item(reference::<Problem>())
        .item(
            ObjectBuilder::new()
                .property("type", string().enum_values(Some(types.iter().copied())))
                .property("status", integer(0).enum_values(Some([status]))),
        )
        .into()
}

/// An example problem body of `status` and `type_uri`.
pub fn problem_example(status: u16, type_uri: &str, title: &str, detail: &str) -> Value {
    json!({"type": type_uri, "title": title, "status": status, "detail": detail})
}

// === headers ===

/// A response header: its name as sent, and whether it is always there.
#[derive(Clone)]
pub struct DocumentedHeader {
    /// The name, in the case the documents show it (`RateLimit-Policy`).
    pub name: &'static str,
    /// Whether every response of its kind carries it.
    pub required: bool,
    /// Its schema and description.
    pub header: Header,
}

impl std::fmt::Debug for DocumentedHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocumentedHeader")
            .field("name", &self.name)
            .field("required", &self.required)
            .finish()
    }
}

/// `shown` is `name` as the documents spell it (a test keeps the two the same name).
fn documented(
    name: HeaderName,
    shown: &'static str,
    required: bool,
    schema: ObjectBuilder,
    what: &str,
) -> DocumentedHeader {
    debug_assert!(name.as_str().eq_ignore_ascii_case(shown), "{name} is not {shown}");
    DocumentedHeader {
        name: shown,
        required,
        header: HeaderBuilder::new().schema(schema).description(Some(what)).build(),
    }
}

/// An RFC 8941 sf-string as the headers write a rule name: quoted, `"` and `\` escaped.
const SF_STRING: &str = r#""(?:[^"\\]|\\.)*""#;

/// A partition key parameter: 16 bytes as an sf-binary.
const PARTITION_KEY: &str = ";pk=:[A-Za-z0-9+/]{22}==:";

/// One item of `RateLimit-Policy`, with every parameter the renderer may add.
fn policy_item() -> String {
    format!(
        r#"{SF_STRING};q=[0-9]+(;qu="concurrent-requests")?;w=[0-9]+({PARTITION_KEY})?(;{VENDOR_QUOTA_UNIT}="[a-z][a-z0-9_]*")?"#
    )
}

/// A Go duration as the OpenAI-style headers write it: `0s`, `<n>ms`, or hours, minutes and
/// seconds with up to three decimals.
const GO_DURATION: &str =
    r"^(0s|[1-9][0-9]{0,2}ms|([1-9][0-9]*h[0-9]{1,2}m|[1-9][0-9]?m)?[0-9]{1,2}(\.[0-9]{0,2}[1-9])?s)$";

/// The headers of a decision (`/v1/check`, `/v1/peek`, `/v1/report`), `denied` for a 429: the
/// rate-limit headers of the configured style (present when an enforced limit applied),
/// `Retry-After` on every denial, `floodgate-tag` when a tag rule flagged the request.
pub fn decision_headers(denied: bool) -> Vec<DocumentedHeader> {
    let mut headers = vec![
        documented(
            RATELIMIT_POLICY,
            "RateLimit-Policy",
            false,
            string().pattern(Some(format!("^{item}(, {item})*$", item = policy_item()))),
            "IETF draft (draft-ietf-httpapi-ratelimit-headers-11; `headers: ietf` or `both`): every enforced \
             limit as `\"<rule>\";q=<limit>;w=<window seconds>`, the most restrictive first. A concurrency \
             rule adds `qu=\"concurrent-requests\"` after `q`; a rule counting a cost dimension other than \
             requests adds `floodgate-qu=\"<dimension>\"` (e.g. `\"tokens\"`) last; a rule with \
             `headers: {partition_key: true}` adds `pk=:<base64>:` after `w`, a keyed hash of its key. \
             Present when an enforced rule applied.",
        ),
        documented(
            RATELIMIT,
            "RateLimit",
            false,
            string().pattern(Some(format!("^{SF_STRING};r=[0-9]+;t=[0-9]+({PARTITION_KEY})?$"))),
            "IETF draft: the most restrictive limit as `\"<rule>\";r=<remaining>;t=<seconds until fully \
             replenished>`, with `pk=:<base64>:` when its rule advertises a partition key. Present when an \
             enforced rule applied.",
        ),
        documented(
            X_RATELIMIT_LIMIT,
            "X-RateLimit-Limit",
            false,
            integer(0),
            "Legacy (`headers: legacy` or `both`): the capacity of the most restrictive limit.",
        ),
        documented(
            X_RATELIMIT_REMAINING,
            "X-RateLimit-Remaining",
            false,
            integer(0),
            "Legacy: what is left of the most restrictive limit.",
        ),
        documented(
            X_RATELIMIT_RESET,
            "X-RateLimit-Reset",
            false,
            integer(0),
            "Legacy: when the most restrictive limit is fully replenished, in Unix seconds.",
        ),
        documented(
            X_RATELIMIT_LIMIT_REQUESTS,
            "x-ratelimit-limit-requests",
            false,
            integer(0),
            "OpenAI style (`headers: openai`, alone or in a list): the capacity of the tightest enforced \
             rule counting `requests`. The same three headers with `-tokens` describe the rules counting \
             `tokens`.",
        ),
        documented(
            X_RATELIMIT_REMAINING_REQUESTS,
            "x-ratelimit-remaining-requests",
            false,
            integer(0),
            "OpenAI style: what is left of that rule.",
        ),
        documented(
            X_RATELIMIT_RESET_REQUESTS,
            "x-ratelimit-reset-requests",
            false,
            string().pattern(Some(GO_DURATION)),
            "OpenAI style: the time until that rule is fully replenished, as a Go duration rounded up to \
             milliseconds (`12ms`, `1.5s`, `6m0s`, `1h2m3s`).",
        ),
        documented(
            X_RATELIMIT_LIMIT_TOKENS,
            "x-ratelimit-limit-tokens",
            false,
            integer(0),
            "OpenAI style: the capacity of the tightest enforced rule counting `tokens`.",
        ),
        documented(
            X_RATELIMIT_REMAINING_TOKENS,
            "x-ratelimit-remaining-tokens",
            false,
            integer(0),
            "OpenAI style: what is left of that rule.",
        ),
        documented(
            X_RATELIMIT_RESET_TOKENS,
            "x-ratelimit-reset-tokens",
            false,
            string().pattern(Some(GO_DURATION)),
            "OpenAI style: the time until that rule is fully replenished, as a Go duration.",
        ),
        documented(
            TAG_HEADER,
            "floodgate-tag",
            false,
            string(),
            "The names of the `tag` rules that flagged the request, comma separated.",
        ),
    ];
    if !denied {
        headers.push(documented(
            DEGRADE_HEADER,
            "floodgate-degrade",
            false,
            string(),
            "The model to switch to: the request's plan is over its limit and degrades rather than \
             refuses (`overage: {<plan>: {degrade_to: <model>}}`); as `degrade_to` in the body.",
        ));
        headers.push(documented(
            RESERVATION_HEADER,
            "floodgate-reservation",
            false,
            string().pattern(Some("^[0-9a-f]{32}$")),
            "On an allowed `/v1/check` that took concurrency permits: the id that `/v1/release` frees \
             them with (they end with their `lease` otherwise).",
        ));
    }
    if denied {
        headers.insert(
            0,
            documented(
                http::header::RETRY_AFTER,
                "Retry-After",
                true,
                integer(1),
                "Seconds until the same request would pass, rounded up, at least 1. On every denial.",
            ),
        );
    }
    headers
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use floodgate::{LimitOutcome, Verdict};
    use floodgate_core::Decision;

    use super::*;

    fn keys(value: &Value) -> Vec<String> {
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    }

    fn properties<T: PartialSchema>() -> Value {
        serde_json::to_value(T::schema()).unwrap()["properties"].clone()
    }

    fn denied() -> Verdict {
        let limit = LimitOutcome {
            rule: "per-user".into(),
            index: 0,
            hit: 0,
            decision: Decision {
                allowed: false,
                limit: 10,
                remaining: 0,
                reset_after: Duration::from_secs(30),
                retry_after: Some(Duration::from_secs(3)),
            },
            outcome: Outcome::Denied,
            enforced: true,
            window: Duration::from_secs(60),
            dimension: "requests".into(),
            quota: false,
            degrade_to: None,
            grant: None,
            permit: false,
            shard: None,
            partition: None,
        };
        Verdict { allowed: false, limits: [limit].into_iter().collect(), ..Verdict::default() }
    }

    /// Every field the renderer writes is in the schema, and nothing else.
    #[test]
    fn the_verdict_schema_names_every_field_written() {
        // An allowed verdict whose plan degrades writes every field (`degrade_to` only then).
        let mut degraded = denied();
        degraded.allowed = true;
        degraded.limits[0].outcome = Outcome::Tagged;
        degraded.limits[0].degrade_to = Some("gpt-4o-mini".into());
        let written: Value = serde_json::from_slice(&VerdictBody::from(&degraded).to_json()).unwrap();
        assert_eq!(keys(&written), keys(&properties::<VerdictBody<'_>>()));
        assert_eq!(keys(&written["limits"][0]), keys(&properties::<LimitBody>()));
        // A denied one: every field but `degrade_to`.
        let denied: Value = serde_json::from_slice(&VerdictBody::from(&denied()).to_json()).unwrap();
        let mut expected = keys(&properties::<VerdictBody<'_>>());
        expected.retain(|k| k != "degrade_to");
        assert_eq!(keys(&denied), expected);
    }

    /// The patterns documented for `RateLimit-Policy` and `RateLimit` take what the renderer
    /// writes for every kind of rule, side by side: requests, a concurrency limit, a tokens rule,
    /// a partition key.
    #[test]
    fn the_documented_header_patterns_take_every_kind_of_rule() {
        let pattern = |name: &str| {
            let header = decision_headers(false).into_iter().find(|h| h.name == name).unwrap();
            let schema = serde_json::to_value(&header.header).unwrap();
            regex::Regex::new(schema["schema"]["pattern"].as_str().unwrap()).unwrap()
        };
        let mut verdict = denied();
        let mut concurrency = verdict.limits[0].clone();
        (concurrency.rule, concurrency.permit) = ("in-flight".into(), true);
        concurrency.partition = Some(floodgate::PartitionKey::from_bytes([0xfb; 16]));
        let mut tokens = verdict.limits[0].clone();
        (tokens.rule, tokens.dimension) = ("tokens-per-min".into(), "input_tokens".into());
        verdict.limits.extend([concurrency, tokens]);
        for first in 0..verdict.limits.len() {
            // Each kind of rule the most restrictive in turn, so `RateLimit` shows each.
            let mut v = verdict.clone();
            for (i, l) in v.limits.iter_mut().enumerate() {
                l.decision.retry_after = Some(Duration::from_secs(if i == first { 9 } else { 1 }));
            }
            let mut out = http::HeaderMap::new();
            crate::rate_limit_headers(&v, crate::HeaderStyle::Ietf, &mut out);
            for (name, shown) in [("ratelimit-policy", "RateLimit-Policy"), ("ratelimit", "RateLimit")] {
                let value = out[name].to_str().unwrap();
                assert!(pattern(shown).is_match(value), "{shown}: {value}");
            }
        }
    }

    #[test]
    fn the_problem_schema_names_every_field_of_a_429() {
        let problem = serde_json::to_value(Problem::from_verdict(&denied()).unwrap()).unwrap();
        assert_eq!(keys(&problem), keys(&properties::<Problem>()));
    }

    #[test]
    fn the_request_schema_names_the_parsers_fields() {
        let mut fields = FIELDS.map(str::to_owned).to_vec();
        fields.sort();
        assert_eq!(keys(&properties::<CheckRequest>()), fields);
    }

    /// The two rules between fields that the schema states with `not`, as the parser applies
    /// them: `cost` with `costs` (unless `costs` is `null`), and `costs` whose every cost is 0.
    #[test]
    fn the_request_schema_states_the_parsers_exclusions() {
        let schema = serde_json::to_value(CheckRequest::schema()).unwrap();
        assert_eq!(
            schema["not"],
            json!({"required": ["cost", "costs"], "properties": {"costs": {"type": "object"}}})
        );
        assert_eq!(
            schema["properties"]["costs"]["not"],
            json!({"type": "object", "additionalProperties": {"maximum": 0}})
        );
        let parse = |body: &str| CheckRequest::parse(body.as_bytes()).map_err(|p| p.status);
        assert_eq!(parse(r#"{"descriptors": {}, "cost": 1, "costs": {"tokens": 5}}"#).err(), Some(422));
        assert!(parse(r#"{"descriptors": {}, "cost": 1, "costs": null}"#).is_ok());
        assert_eq!(parse(r#"{"descriptors": {}, "costs": {"requests": 0, "tokens": 0}}"#).err(), Some(422));
        assert!(parse(r#"{"descriptors": {}, "costs": {"requests": 0, "tokens": 1}}"#).is_ok());
    }

    /// Every example of the request body is one the parser takes.
    #[test]
    fn the_request_examples_parse() {
        let schema = serde_json::to_value(CheckRequest::schema()).unwrap();
        let examples = schema["examples"].as_array().unwrap();
        assert!(!examples.is_empty());
        for example in examples {
            assert!(CheckRequest::parse(example.to_string().as_bytes()).is_ok(), "{example}");
        }
    }

    #[test]
    fn every_outcome_is_listed_once() {
        // A new outcome fails to compile here until it is added to `Outcome::ALL`.
        for outcome in OUTCOMES {
            match outcome {
                Outcome::Allowed
                | Outcome::Denied
                | Outcome::ShadowDenied
                | Outcome::Tagged
                | Outcome::ErrorAllowed
                | Outcome::ErrorDenied
                | Outcome::LocalAllowed
                | Outcome::LocalDenied => {}
            }
        }
        let names: std::collections::BTreeSet<_> = OUTCOMES.map(Outcome::as_str).into_iter().collect();
        assert_eq!(names.len(), OUTCOMES.len());
    }

    #[test]
    fn only_a_denial_always_carries_retry_after() {
        let denied = decision_headers(true);
        assert_eq!(denied[0].name, "Retry-After");
        assert!(denied[0].required && denied[1..].iter().all(|h| !h.required));
        assert!(decision_headers(false).iter().all(|h| !h.required && h.name != "Retry-After"));
    }
}
