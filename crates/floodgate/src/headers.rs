//! Rate-limit headers and 429 bodies, shared by every front door.
//!
//! - [`rate_limit_headers`] renders a [`Verdict`] as the IETF draft headers (`RateLimit-Policy`,
//!   `RateLimit`), the legacy `X-RateLimit-*` headers, or both (see [`HeaderStyle`]), plus
//!   `Retry-After` on every denial.
//! - [`tag_header`] marks a request that a `tag` rule flagged ([`TAG_HEADER`]).
//! - [`Problem`] is the RFC 9457 `application/problem+json` body of a 429 (and of the 400s and
//!   413s the front doors answer to malformed input).
//!
//! ```
//! use std::time::Duration;
//! use floodgate::headers::{HeaderStyle, Problem, rate_limit_headers};
//! use floodgate::{LimitOutcome, Outcome, Verdict};
//! use floodgate::core::{Decision, Timestamp};
//!
//! let denied = Verdict {
//!     allowed: false,
//!     at: Timestamp::from_secs(1_700_000_000),
//!     limits: [LimitOutcome {
//!         rule: "chat-per-user".into(),
//!         decision: Decision {
//!             allowed: false,
//!             limit: 10,
//!             remaining: 0,
//!             reset_after: Duration::from_millis(30_200),
//!             retry_after: Some(Duration::from_millis(30_200)),
//!         },
//!         outcome: Outcome::Denied,
//!         enforced: true,
//!         window: Duration::from_secs(60),
//!         quota: false,
//!         grant: None,
//!         permit: false,
//!     }]
//!     .into_iter()
//!     .collect(),
//!     store_error: None,
//! };
//!
//! let mut headers = http::HeaderMap::new();
//! rate_limit_headers(&denied, HeaderStyle::Both, &mut headers);
//! assert_eq!(headers["ratelimit-policy"], r#""chat-per-user";q=10;w=60"#);
//! assert_eq!(headers["ratelimit"], r#""chat-per-user";r=0;t=31"#);
//! assert_eq!(headers["x-ratelimit-reset"], "1700000031");
//! assert_eq!(headers["retry-after"], "31");
//!
//! let problem = Problem::from_verdict(&denied).expect("denied");
//! assert_eq!(problem.status, 429);
//! assert_eq!(problem.detail, "Rate limit exceeded; retry in 31 seconds.");
//! ```

use std::borrow::Cow;
use std::fmt::Write as _;
use std::str::FromStr;
use std::time::Duration;

use floodgate_core::{Timestamp, ceil_secs_at_least_one};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};

use crate::{LimitOutcome, Verdict};

/// `RateLimit-Policy` (IETF draft): the enforced limits, most restrictive first.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (IETF draft): what is left of the most restrictive limit.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit` (legacy): the capacity of the most restrictive limit.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining` (legacy): what is left of the most restrictive limit.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset` (legacy): when the most restrictive limit is fully replenished, in Unix
/// seconds.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// `floodgate-tag`: the names of the `tag` rules that flagged the request, comma separated.
pub const TAG_HEADER: HeaderName = HeaderName::from_static("floodgate-tag");

/// The media type of a [`Problem`] body.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";
/// [`Problem::type_uri`] of a request denied by a rate limit.
pub const RATE_LIMITED_TYPE: &str = "https://floodgate.dev/problems/rate-limited";
/// [`Problem::type_uri`] of a request denied by a calendar quota.
pub const QUOTA_EXCEEDED_TYPE: &str = "https://floodgate.dev/problems/quota-exceeded";
/// [`Problem::type_uri`] of a request that no amount of waiting can make pass (its cost exceeds
/// what a limit grants at once).
pub const NEVER_ALLOWED_TYPE: &str = "https://floodgate.dev/problems/never-allowed";

// === impl HeaderStyle ===

/// Which rate-limit headers to send. `Retry-After` is sent on every denial whatever the style.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeaderStyle {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers, structured fields).
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` (Unix seconds).
    Legacy,
    /// Both sets (the default).
    #[default]
    Both,
    /// No rate-limit headers (still `Retry-After` on a denial).
    None,
}

impl HeaderStyle {
    /// Whether the IETF draft headers are sent.
    pub fn ietf(self) -> bool {
        matches!(self, HeaderStyle::Ietf | HeaderStyle::Both)
    }

    /// Whether the legacy `X-RateLimit-*` headers are sent.
    pub fn legacy(self) -> bool {
        matches!(self, HeaderStyle::Legacy | HeaderStyle::Both)
    }

    /// The name as written in configuration: `ietf`, `legacy`, `both` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            HeaderStyle::Ietf => "ietf",
            HeaderStyle::Legacy => "legacy",
            HeaderStyle::Both => "both",
            HeaderStyle::None => "none",
        }
    }
}

/// A header style that is none of `ietf`, `legacy`, `both`, `none`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown header style {value:?}: expected ietf, legacy, both or none")]
pub struct ParseHeaderStyleError {
    /// The value given.
    pub value: String,
}

impl FromStr for HeaderStyle {
    type Err = ParseHeaderStyleError;

    /// Parses `ietf`, `legacy`, `both` or `none` (ASCII case-insensitive).
    ///
    /// ```
    /// use floodgate::headers::HeaderStyle;
    /// assert_eq!("ietf".parse(), Ok(HeaderStyle::Ietf));
    /// assert!("x-ratelimit".parse::<HeaderStyle>().unwrap_err().to_string().contains("x-ratelimit"));
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [HeaderStyle::Ietf, HeaderStyle::Legacy, HeaderStyle::Both, HeaderStyle::None]
            .into_iter()
            .find(|style| style.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| ParseHeaderStyleError { value: s.to_owned() })
    }
}

impl std::fmt::Display for HeaderStyle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === rate-limit headers ===

/// Writes the rate-limit headers of `verdict` into `out`, replacing any already there.
///
/// - IETF draft ([`HeaderStyle::ietf`]): `RateLimit-Policy: "<rule>";q=<limit>;w=<window s>`
///   listing every enforced limit, the most restrictive ([`Verdict::most_restrictive`]) first and
///   the others in rule order; `RateLimit: "<rule>";r=<remaining>;t=<s until reset>` for the most
///   restrictive. `w` is rounded up and at least 1; `t` is rounded up.
/// - Legacy ([`HeaderStyle::legacy`]): `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
///   `X-RateLimit-Reset` of the most restrictive limit, the reset in Unix seconds (`verdict.at` +
///   `reset_after`, rounded up).
/// - `Retry-After` on every denied verdict, whatever the style: [`Verdict::retry_after`] in
///   seconds, rounded up, at least 1.
///
/// Only enforced limits ([`Verdict::enforced`]) are advertised: shadow and tag rules are
/// invisible to clients, and a verdict made by the store-failure policy advertises nothing but
/// `Retry-After`. Rule names are written as structured-field strings: `"` and `\` are escaped and
/// any character outside printable ASCII becomes `?`.
pub fn rate_limit_headers(verdict: &Verdict, style: HeaderStyle, out: &mut HeaderMap) {
    if !verdict.allowed {
        let secs = ceil_secs_at_least_one(verdict.retry_after().unwrap_or_default());
        out.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    let Some(first) = verdict.most_restrictive().filter(|l| is_enforced(verdict, l)) else { return };
    let decision = &first.decision;

    if style.ietf() {
        let mut policy = String::with_capacity(64);
        push_policy_item(&mut policy, first);
        for other in verdict.enforced().filter(|l| !std::ptr::eq(*l, first)) {
            policy.push_str(", ");
            push_policy_item(&mut policy, other);
        }
        let mut current = String::with_capacity(48);
        push_sf_string(&mut current, &first.rule);
        let _ = write!(current, ";r={};t={}", decision.remaining, ceil_secs(decision.reset_after));
        insert_str(out, RATELIMIT_POLICY, &policy);
        insert_str(out, RATELIMIT, &current);
    }
    if style.legacy() {
        out.insert(X_RATELIMIT_LIMIT, HeaderValue::from(decision.limit));
        out.insert(X_RATELIMIT_REMAINING, HeaderValue::from(decision.remaining));
        out.insert(X_RATELIMIT_RESET, HeaderValue::from(reset_unix_secs(verdict.at, decision.reset_after)));
    }
}

/// Writes [`TAG_HEADER`] with the names of the rules that tagged `verdict`, comma separated
/// (`floodgate-tag: scraper-suspect, burst-watch`), replacing any already there; removes it when
/// no rule tagged the request, so a client cannot forge it on the way in. Characters outside
/// printable ASCII, and commas, become `?`.
pub fn tag_header(verdict: &Verdict, out: &mut HeaderMap) {
    let mut value = String::new();
    for tag in verdict.tags() {
        if !value.is_empty() {
            value.push_str(", ");
        }
        value.extend(tag.chars().map(|c| if is_printable_ascii(c) && c != ',' { c } else { '?' }));
    }
    if value.is_empty() {
        out.remove(TAG_HEADER);
    } else {
        insert_str(out, TAG_HEADER, &value);
    }
}

/// Whether `l` is one of `verdict`'s enforced limits (as [`Verdict::enforced`] defines them).
fn is_enforced(verdict: &Verdict, l: &LimitOutcome) -> bool {
    verdict.enforced().any(|e| std::ptr::eq(e, l))
}

/// `"<rule>";q=<limit>;w=<window>`.
fn push_policy_item(out: &mut String, l: &LimitOutcome) {
    push_sf_string(out, &l.rule);
    let _ = write!(out, ";q={};w={}", l.decision.limit, ceil_secs_at_least_one(l.window));
}

/// Appends `s` as an RFC 8941 sf-string: quoted, `"` and `\` escaped, anything outside printable
/// ASCII (which an sf-string cannot hold) replaced by `?`.
fn push_sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable_ascii(c) => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

fn is_printable_ascii(c: char) -> bool {
    (' '..='~').contains(&c)
}

/// Inserts a value built from printable ASCII only; skips it rather than panic if it is not.
fn insert_str(out: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        out.insert(name, value);
    }
}

/// `d` in whole seconds, rounded up.
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `at + after` in Unix seconds, rounded up.
fn reset_unix_secs(at: Timestamp, after: Duration) -> u64 {
    at.saturating_add(after).as_micros().div_ceil(1_000_000)
}

// === impl Problem ===

/// An RFC 9457 problem details body (`application/problem+json`, see [`PROBLEM_CONTENT_TYPE`]).
///
/// For a 429, made by [`Problem::from_verdict`]: a stable `type` ([`RATE_LIMITED_TYPE`], or
/// [`QUOTA_EXCEEDED_TYPE`] when a calendar quota denied), a `title`, a `detail` for humans and the
/// numbers of the denying limit. It never names rules, keys, stores or algorithms.
///
/// ```
/// use floodgate::headers::Problem;
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
        if verdict.allowed {
            return None;
        }
        let retry_after = ceil_secs_at_least_one(verdict.retry_after().unwrap_or_default());
        let denying = verdict.most_restrictive();
        let quota = denying.is_some_and(|l| l.quota);
        let (type_uri, title, what) = if quota {
            (QUOTA_EXCEEDED_TYPE, "Quota Exceeded", "Quota exceeded")
        } else {
            (RATE_LIMITED_TYPE, "Too Many Requests", "Rate limit exceeded")
        };
        let unit = if retry_after == 1 { "second" } else { "seconds" };
        let mut problem = Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            type_uri,
            title,
            format!("{what}; retry in {retry_after} {unit}."),
        );
        problem.retry_after = Some(retry_after);
        if let Some(l) = denying.filter(|l| is_enforced(verdict, l)) {
            problem.limit = Some(l.decision.limit);
            problem.remaining = Some(l.decision.remaining);
            problem.reset = Some(reset_unix_secs(verdict.at, l.decision.reset_after));
        }
        Some(problem)
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

    /// The JSON body.
    pub fn to_json(&self) -> String {
        // Strings and integers always serialize; the fallback only keeps this panic-free.
        serde_json::to_string(self).unwrap_or_else(|_| {
            format!(r#"{{"type":"about:blank","title":"Error","status":{}}}"#, self.status)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use floodgate_core::{Decision, Timestamp};

    use super::*;
    use crate::Outcome;

    const AT: Timestamp = Timestamp::from_secs(1_700_000_000);

    fn limit(rule: &str, outcome: Outcome, limit: u64, remaining: u64, reset_ms: u64) -> LimitOutcome {
        let allowed = !outcome.denies() && outcome != Outcome::ShadowDenied && outcome != Outcome::Tagged;
        LimitOutcome {
            rule: rule.into(),
            decision: Decision {
                allowed,
                limit,
                remaining,
                reset_after: Duration::from_millis(reset_ms),
                retry_after: (!allowed).then_some(Duration::from_millis(reset_ms)),
            },
            outcome,
            enforced: matches!(outcome, Outcome::Allowed | Outcome::Denied),
            window: Duration::from_secs(60),
            quota: false,
            grant: None,
            permit: false,
        }
    }

    fn verdict(limits: impl IntoIterator<Item = LimitOutcome>) -> Verdict {
        let limits: smallvec::SmallVec<[LimitOutcome; 4]> = limits.into_iter().collect();
        let allowed = !limits.iter().any(|l| l.outcome.denies());
        Verdict { allowed, at: AT, limits, store_error: None }
    }

    fn render(v: &Verdict, style: HeaderStyle) -> HeaderMap {
        let mut out = HeaderMap::new();
        rate_limit_headers(v, style, &mut out);
        out
    }

    #[test]
    fn header_style_parses_the_four_names_and_names_a_bad_value() {
        assert_eq!("ietf".parse(), Ok(HeaderStyle::Ietf));
        assert_eq!("legacy".parse(), Ok(HeaderStyle::Legacy));
        assert_eq!("Both".parse(), Ok(HeaderStyle::Both));
        assert_eq!("none".parse(), Ok(HeaderStyle::None));
        assert_eq!(HeaderStyle::default(), HeaderStyle::Both);
        let err = "draft".parse::<HeaderStyle>().unwrap_err();
        assert_eq!(err.value, "draft");
        assert_eq!(err.to_string(), r#"unknown header style "draft": expected ietf, legacy, both or none"#);
        for style in [HeaderStyle::Ietf, HeaderStyle::Legacy, HeaderStyle::Both, HeaderStyle::None] {
            assert_eq!(style.to_string().parse(), Ok(style));
        }
    }

    #[test]
    fn header_style_deserializes_from_config_names() {
        let style: HeaderStyle = serde_json::from_str(r#""legacy""#).unwrap();
        assert_eq!(style, HeaderStyle::Legacy);
    }

    #[test]
    fn denied_verdict_renders_every_header_exactly() {
        let v = verdict([limit("chat-per-user", Outcome::Denied, 10, 0, 30_200)]);
        let h = render(&v, HeaderStyle::Both);
        assert_eq!(h["ratelimit-policy"], r#""chat-per-user";q=10;w=60"#);
        assert_eq!(h["ratelimit"], r#""chat-per-user";r=0;t=31"#);
        assert_eq!(h["x-ratelimit-limit"], "10");
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert_eq!(h["x-ratelimit-reset"], "1700000031");
        assert_eq!(h["retry-after"], "31");
        assert_eq!(h.len(), 6);
    }

    #[test]
    fn allowed_verdict_lists_the_most_restrictive_first_then_rule_order_and_no_retry_after() {
        let v = verdict([
            limit("tenant-hourly", Outcome::Allowed, 1000, 990, 3_600_000),
            limit("global", Outcome::Allowed, 5000, 4000, 1_000),
            limit("chat-per-user", Outcome::Allowed, 10, 3, 42_000),
        ]);
        let h = render(&v, HeaderStyle::Ietf);
        assert_eq!(
            h["ratelimit-policy"],
            r#""chat-per-user";q=10;w=60, "tenant-hourly";q=1000;w=60, "global";q=5000;w=60"#
        );
        assert_eq!(h["ratelimit"], r#""chat-per-user";r=3;t=42"#);
        assert!(h.get("retry-after").is_none());
        assert!(h.get("x-ratelimit-limit").is_none());
    }

    #[test]
    fn denied_verdict_advertises_the_denying_limit_with_the_longest_wait() {
        let v = verdict([
            limit("per-user", Outcome::Denied, 10, 0, 5_000),
            limit("per-tenant", Outcome::Denied, 100, 0, 90_000),
            limit("global", Outcome::Allowed, 5000, 0, 1_000),
        ]);
        let h = render(&v, HeaderStyle::Both);
        assert_eq!(h["ratelimit"], r#""per-tenant";r=0;t=90"#);
        assert!(
            h["ratelimit-policy"].to_str().unwrap().starts_with(r#""per-tenant";q=100;w=60, "per-user""#)
        );
        assert_eq!(h["retry-after"], "90");
        assert_eq!(h["x-ratelimit-limit"], "100");
    }

    #[test]
    fn seconds_round_up_and_window_is_at_least_one() {
        let mut l = limit("r", Outcome::Allowed, 5, 4, 1);
        l.window = Duration::from_millis(1500);
        let v = verdict([l.clone()]);
        let h = render(&v, HeaderStyle::Both);
        assert_eq!(h["ratelimit-policy"], r#""r";q=5;w=2"#);
        assert_eq!(h["ratelimit"], r#""r";r=4;t=1"#);
        assert_eq!(h["x-ratelimit-reset"], "1700000001");

        l.window = Duration::from_micros(10);
        l.decision.reset_after = Duration::ZERO;
        let h = render(&verdict([l]), HeaderStyle::Both);
        assert_eq!(h["ratelimit-policy"], r#""r";q=5;w=1"#);
        assert_eq!(h["ratelimit"], r#""r";r=4;t=0"#);
        assert_eq!(h["x-ratelimit-reset"], "1700000000");
    }

    #[test]
    fn legacy_reset_is_unix_seconds_rounded_up_from_a_fractional_now() {
        let mut v = verdict([limit("r", Outcome::Allowed, 5, 4, 2_000)]);
        v.at = Timestamp::from_micros(1_700_000_000_000_001);
        assert_eq!(render(&v, HeaderStyle::Legacy)["x-ratelimit-reset"], "1700000003");
    }

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one() {
        let mut l = limit("r", Outcome::Denied, 5, 0, 0);
        l.decision.retry_after = Some(Duration::from_micros(1));
        assert_eq!(render(&verdict([l.clone()]), HeaderStyle::None)["retry-after"], "1");
        l.decision.retry_after = Some(Duration::from_micros(2_000_001));
        assert_eq!(render(&verdict([l]), HeaderStyle::None)["retry-after"], "3");
    }

    #[test]
    fn style_selects_the_header_sets() {
        let v = verdict([limit("r", Outcome::Allowed, 5, 4, 1_000)]);
        let names = |style| {
            let mut n: Vec<String> = render(&v, style).keys().map(|k| k.to_string()).collect();
            n.sort();
            n
        };
        assert_eq!(names(HeaderStyle::Ietf), ["ratelimit", "ratelimit-policy"]);
        assert_eq!(
            names(HeaderStyle::Legacy),
            ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"]
        );
        assert_eq!(names(HeaderStyle::Both).len(), 5);
        assert!(names(HeaderStyle::None).is_empty());
    }

    #[test]
    fn retry_after_is_sent_on_denial_even_with_style_none() {
        let v = verdict([limit("r", Outcome::Denied, 5, 0, 12_000)]);
        let h = render(&v, HeaderStyle::None);
        assert_eq!(h.len(), 1);
        assert_eq!(h["retry-after"], "12");
    }

    #[test]
    fn no_enforced_limit_means_no_headers() {
        assert!(render(&Verdict { allowed: true, ..Verdict::default() }, HeaderStyle::Both).is_empty());
        let v = verdict([
            limit("shadow", Outcome::ShadowDenied, 5, 0, 1_000),
            limit("tag", Outcome::Tagged, 5, 0, 1_000),
        ]);
        assert!(v.allowed);
        assert!(render(&v, HeaderStyle::Both).is_empty());
    }

    #[test]
    fn shadow_and_tag_limits_are_not_advertised_next_to_enforced_ones() {
        let v = verdict([
            limit("shadow", Outcome::ShadowDenied, 1, 0, 1_000),
            limit("enforced", Outcome::Allowed, 5, 4, 1_000),
            limit("tag", Outcome::Tagged, 1, 0, 1_000),
        ]);
        let h = render(&v, HeaderStyle::Ietf);
        assert_eq!(h["ratelimit-policy"], r#""enforced";q=5;w=60"#);
    }

    #[test]
    fn store_failure_denial_sends_only_retry_after() {
        let mut l = limit("r", Outcome::ErrorDenied, 5, 0, 0);
        l.decision.retry_after = Some(Duration::from_secs(1));
        let v = Verdict {
            allowed: false,
            at: Timestamp::EPOCH,
            limits: [l].into_iter().collect(),
            store_error: Some("the store did not answer".into()),
        };
        let h = render(&v, HeaderStyle::Both);
        assert_eq!(h.len(), 1);
        assert_eq!(h["retry-after"], "1");
        let problem = Problem::from_verdict(&v).unwrap();
        assert_eq!(problem.retry_after, Some(1));
        assert_eq!((problem.limit, problem.remaining, problem.reset), (None, None, None));
        assert!(!problem.to_json().contains("store"));
    }

    #[test]
    fn rule_names_are_escaped_as_sf_strings() {
        let v = verdict([limit(r#"a"b\c"#, Outcome::Allowed, 5, 4, 1_000)]);
        let h = render(&v, HeaderStyle::Ietf);
        assert_eq!(h["ratelimit"], r#""a\"b\\c";r=4;t=1"#);
    }

    #[test]
    fn non_ascii_and_control_characters_in_rule_names_are_replaced_not_panicked_on() {
        let v = verdict([limit("ünï\r\ncode\u{7f}\0", Outcome::Denied, 5, 0, 1_000)]);
        let h = render(&v, HeaderStyle::Both);
        assert_eq!(h["ratelimit"], r#""?n???code??";r=0;t=1"#);
        assert_eq!(h["ratelimit-policy"], r#""?n???code??";q=5;w=60"#);
    }

    #[test]
    fn existing_headers_are_replaced() {
        let v = verdict([limit("r", Outcome::Allowed, 5, 4, 1_000)]);
        let mut h = HeaderMap::new();
        h.insert(X_RATELIMIT_LIMIT, HeaderValue::from_static("999"));
        rate_limit_headers(&v, HeaderStyle::Legacy, &mut h);
        assert_eq!(h.get_all(X_RATELIMIT_LIMIT).iter().count(), 1);
        assert_eq!(h[X_RATELIMIT_LIMIT], "5");
    }

    #[test]
    fn tag_header_lists_tagging_rules_and_removes_a_forged_one() {
        let v = verdict([
            limit("scraper-suspect", Outcome::Tagged, 5, 0, 1_000),
            limit("enforced", Outcome::Allowed, 5, 4, 1_000),
            limit("burst,watch\u{e9}", Outcome::Tagged, 5, 0, 1_000),
        ]);
        let mut h = HeaderMap::new();
        tag_header(&v, &mut h);
        assert_eq!(h[TAG_HEADER], "scraper-suspect, burst?watch?");

        let untagged = verdict([limit("enforced", Outcome::Allowed, 5, 4, 1_000)]);
        tag_header(&untagged, &mut h);
        assert!(h.get(TAG_HEADER).is_none());
    }

    #[test]
    fn problem_is_none_for_an_allowed_verdict() {
        assert!(Problem::from_verdict(&verdict([limit("r", Outcome::Allowed, 5, 4, 1_000)])).is_none());
    }

    #[test]
    fn rate_limited_problem_has_the_documented_json_shape() {
        let v = verdict([limit("chat-per-user", Outcome::Denied, 10, 0, 30_200)]);
        let problem = Problem::from_verdict(&v).unwrap();
        let json: serde_json::Value = serde_json::from_str(&problem.to_json()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "type": "https://floodgate.dev/problems/rate-limited",
                "title": "Too Many Requests",
                "status": 429,
                "detail": "Rate limit exceeded; retry in 31 seconds.",
                "retry_after": 31,
                "limit": 10,
                "remaining": 0,
                "reset": 1_700_000_031u64,
            })
        );
        assert_eq!(problem.status_code(), StatusCode::TOO_MANY_REQUESTS);
    }

    #[test]
    fn quota_denial_is_a_quota_exceeded_problem() {
        let mut l = limit("monthly-quota", Outcome::Denied, 100, 0, 1_000);
        l.quota = true;
        let problem = Problem::from_verdict(&verdict([l])).unwrap();
        assert_eq!(problem.type_uri, QUOTA_EXCEEDED_TYPE);
        assert_eq!(problem.title, "Quota Exceeded");
        assert_eq!(problem.detail, "Quota exceeded; retry in 1 second.");
    }

    #[test]
    fn problem_body_names_no_rule_key_store_or_algorithm() {
        let v = verdict([limit("secret-rule-sliding_window-user:alice", Outcome::Denied, 10, 0, 5_000)]);
        let body = Problem::from_verdict(&v).unwrap().to_json();
        for leak in ["secret", "sliding", "alice", "user", "memory", "redis"] {
            assert!(!body.contains(leak), "{leak} leaked into {body}");
        }
    }

    #[test]
    fn generic_problem_skips_rate_limit_fields() {
        let p = Problem::new(StatusCode::PAYLOAD_TOO_LARGE, "about:blank", "Payload Too Large", "Too big.");
        assert_eq!(
            p.to_json(),
            r#"{"type":"about:blank","title":"Payload Too Large","status":413,"detail":"Too big."}"#
        );
        let never = Problem::never_allowed();
        assert_eq!(never.status, 400);
        assert_eq!(never.type_uri, NEVER_ALLOWED_TYPE);
    }
}
