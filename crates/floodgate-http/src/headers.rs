//! Rate-limit headers, shared by every front door.
//!
//! - [`rate_limit_headers`] renders a [`Verdict`] as the IETF draft headers (`RateLimit-Policy`,
//!   `RateLimit`), the legacy `X-RateLimit-*` headers, or both (see [`HeaderStyle`]), plus
//!   `Retry-After` on every denial.
//! - [`tag_header`] marks a request that a `tag` rule flagged ([`TAG_HEADER`]).
//!
//! ```
//! use std::time::Duration;
//! use floodgate_http::{HeaderStyle, Problem, rate_limit_headers};
//! use floodgate::{LimitOutcome, Outcome, Verdict};
//! use floodgate::core::{Decision, Timestamp};
//!
//! let denied = Verdict {
//!     allowed: false,
//!     at: Timestamp::from_secs(1_700_000_000),
//!     limits: [LimitOutcome {
//!         rule: "chat-per-user".into(),
//!         index: 0,
//!         hit: 0,
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
//!         dimension: "requests".into(),
//!         quota: false,
//!         degrade_to: None,
//!         grant: None,
//!         permit: false,
//!         shard: None,
//!         partition: None,
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

use std::str::FromStr;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::BytesMut;
use floodgate::{LimitOutcome, Verdict};
use floodgate_core::{Timestamp, ceil_secs_at_least_one};
use http::{HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

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
/// `x-ratelimit-limit-requests` (OpenAI style): the capacity of the tightest enforced rule
/// counting `requests`.
pub const X_RATELIMIT_LIMIT_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-limit-requests");
/// `x-ratelimit-remaining-requests` (OpenAI style): what is left of it.
pub const X_RATELIMIT_REMAINING_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining-requests");
/// `x-ratelimit-reset-requests` (OpenAI style): the time until it is fully replenished, as a Go
/// duration (`1.5s`, `6m0s`).
pub const X_RATELIMIT_RESET_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-reset-requests");
/// `x-ratelimit-limit-tokens` (OpenAI style): the capacity of the tightest enforced rule counting
/// `tokens`.
pub const X_RATELIMIT_LIMIT_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-limit-tokens");
/// `x-ratelimit-remaining-tokens` (OpenAI style): what is left of it.
pub const X_RATELIMIT_REMAINING_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-tokens");
/// `x-ratelimit-reset-tokens` (OpenAI style): the time until it is fully replenished, as a Go
/// duration.
pub const X_RATELIMIT_RESET_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-reset-tokens");
/// `floodgate-tag`: the names of the `tag` rules that flagged the request, comma separated.
pub const TAG_HEADER: HeaderName = HeaderName::from_static("floodgate-tag");
/// `floodgate-degrade`: the model to switch to, when a plan over its limit degrades rather than
/// refuses (`overage: {free: {degrade_to: gpt-4o-mini}}`).
pub const DEGRADE_HEADER: HeaderName = HeaderName::from_static("floodgate-degrade");
/// `floodgate-reservation`: on an allowed check that took concurrency permits, the id that
/// `/v1/release` frees them with.
pub const RESERVATION_HEADER: HeaderName = HeaderName::from_static("floodgate-reservation");

// === impl HeaderStyle ===

/// Which rate-limit headers to send: any of the IETF draft, the legacy and the OpenAI-style sets.
/// `Retry-After` is sent on every denial whatever the style.
///
/// Written in configuration as one name (`ietf`, `legacy`, `both`, `openai`, `none`) or a list
/// of them (`[ietf, openai]`), which sends every set named.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeaderStyle(u8);

const IETF_BIT: u8 = 1;
const LEGACY_BIT: u8 = 2;
const OPENAI_BIT: u8 = 4;

/// The names of the styles, by their bits (the index): what [`HeaderStyle::as_str`] writes.
const STYLE_NAMES: [&str; 8] =
    ["none", "ietf", "legacy", "both", "openai", "ietf, openai", "legacy, openai", "both, openai"];

#[allow(non_upper_case_globals)]
impl HeaderStyle {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers, structured fields).
    pub const Ietf: HeaderStyle = HeaderStyle(IETF_BIT);
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` (Unix seconds).
    pub const Legacy: HeaderStyle = HeaderStyle(LEGACY_BIT);
    /// Both the IETF and the legacy sets (the default).
    pub const Both: HeaderStyle = HeaderStyle(IETF_BIT | LEGACY_BIT);
    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` as OpenAI's API sends them (see
    /// [`rate_limit_headers`]).
    pub const OpenAi: HeaderStyle = HeaderStyle(OPENAI_BIT);
    /// No rate-limit headers (still `Retry-After` on a denial).
    pub const None: HeaderStyle = HeaderStyle(0);

    /// Every set of `self` and of `other`.
    pub const fn with(self, other: HeaderStyle) -> HeaderStyle {
        HeaderStyle(self.0 | other.0)
    }

    /// Whether the IETF draft headers are sent.
    pub fn ietf(self) -> bool {
        self.0 & IETF_BIT != 0
    }

    /// Whether the legacy `X-RateLimit-*` headers are sent.
    pub fn legacy(self) -> bool {
        self.0 & LEGACY_BIT != 0
    }

    /// Whether the OpenAI-style `x-ratelimit-*-requests` and `-tokens` headers are sent.
    pub fn openai(self) -> bool {
        self.0 & OPENAI_BIT != 0
    }

    /// The name as written in configuration: `ietf`, `legacy`, `both`, `openai` or `none`, or
    /// the names of a combination joined by `, ` (`ietf, openai`).
    pub fn as_str(self) -> &'static str {
        STYLE_NAMES[usize::from(self.0 & 7)]
    }

    /// Every style, as [`HeaderStyle::as_str`] names them.
    pub fn all() -> impl Iterator<Item = HeaderStyle> {
        (0..8).map(HeaderStyle)
    }

    /// One name (`ietf`, `legacy`, `both`, `openai`, `none`; ASCII case-insensitive).
    fn one(name: &str) -> Option<HeaderStyle> {
        [HeaderStyle::Ietf, HeaderStyle::Legacy, HeaderStyle::Both, HeaderStyle::OpenAi, HeaderStyle::None]
            .into_iter()
            .find(|style| style.as_str().eq_ignore_ascii_case(name))
    }

    /// The style of a list of names (`[ietf, openai]`): every set named. `none` may not be listed
    /// with others, nor a name twice.
    pub fn from_names<'a>(
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<HeaderStyle, ParseHeaderStyleError> {
        let mut style = HeaderStyle::None;
        let mut count = 0;
        for name in names {
            let one = HeaderStyle::one(name.trim())
                .ok_or_else(|| ParseHeaderStyleError { value: name.trim().to_owned() })?;
            // `none` beside another name (either order), or a set named twice.
            let with_none = count > 0 && (one == HeaderStyle::None || style == HeaderStyle::None);
            if with_none || one.0 & style.0 != 0 {
                return Err(ParseHeaderStyleError { value: name.trim().to_owned() });
            }
            style = style.with(one);
            count += 1;
        }
        if count == 0 {
            return Err(ParseHeaderStyleError { value: String::new() });
        }
        Ok(style)
    }
}

impl Default for HeaderStyle {
    /// [`HeaderStyle::Both`].
    fn default() -> Self {
        HeaderStyle::Both
    }
}

impl std::fmt::Debug for HeaderStyle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeaderStyle({})", self.as_str())
    }
}

impl Serialize for HeaderStyle {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for HeaderStyle {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A header style that is none of `ietf`, `legacy`, `both`, `openai`, `none`, or a list that
/// repeats a set or names `none` with another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid header style {value:?}: expected ietf, legacy, both, openai or none, or a list of them \
     such as [ietf, openai] (each set once, none alone)"
)]
pub struct ParseHeaderStyleError {
    /// The value given.
    pub value: String,
}

impl FromStr for HeaderStyle {
    type Err = ParseHeaderStyleError;

    /// Parses `ietf`, `legacy`, `both`, `openai` or `none` (ASCII case-insensitive), or several
    /// separated by commas (`ietf, openai`), as [`HeaderStyle::as_str`] writes them.
    ///
    /// ```
    /// use floodgate_http::HeaderStyle;
    /// assert_eq!("ietf".parse(), Ok(HeaderStyle::Ietf));
    /// assert_eq!("ietf, openai".parse(), Ok(HeaderStyle::Ietf.with(HeaderStyle::OpenAi)));
    /// assert!("x-ratelimit".parse::<HeaderStyle>().unwrap_err().to_string().contains("x-ratelimit"));
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HeaderStyle::from_names(s.split(','))
            .map_err(|e| if e.value.is_empty() { ParseHeaderStyleError { value: s.to_owned() } } else { e })
    }
}

impl std::fmt::Display for HeaderStyle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === rate-limit headers ===

/// The most headers [`rate_limit_headers`] writes: `Retry-After`, the two IETF ones, the three
/// legacy ones and six OpenAI ones.
pub(crate) const MAX_RATE_LIMIT_HEADERS: usize = 12;

/// Writes the rate-limit headers of `verdict` into `out`, replacing any already there.
///
/// - IETF draft ([`HeaderStyle::ietf`]; draft-ietf-httpapi-ratelimit-headers-11):
///   `RateLimit-Policy: "<rule>";q=<limit>;w=<window s>` listing every enforced limit, the most
///   restrictive ([`Verdict::most_restrictive`]) first and the others in rule order;
///   `RateLimit: "<rule>";r=<remaining>;t=<s until reset>` for the most restrictive. `w` is
///   rounded up and at least 1; `t` is rounded up. A policy item says its quota unit when it is
///   not the draft's default, `requests`: `qu="concurrent-requests"` for a concurrency limit
///   ([`LimitOutcome::permit`]), and for a rule counting another cost dimension
///   ([`LimitOutcome::dimension`], e.g. `tokens`), which the draft's unit registry does not name,
///   the vendor parameter [`VENDOR_QUOTA_UNIT`] (`floodgate-qu="tokens"`). A limit with a
///   partition key ([`LimitOutcome::partition`]) carries it as `pk=:<base64>:` on its policy item
///   and, when it is the most restrictive, on the `RateLimit` item.
/// - Legacy ([`HeaderStyle::legacy`]): `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
///   `X-RateLimit-Reset` of the most restrictive limit, the reset in Unix seconds (`verdict.at` +
///   `reset_after`, rounded up).
/// - OpenAI style ([`HeaderStyle::openai`]): for each of the dimensions `requests` and `tokens`
///   ([`LimitOutcome::dimension`]), the tightest enforced rule counting it — when denied, the
///   denying one with the longest wait, else the one with the least remaining — as
///   `x-ratelimit-limit-<dimension>`, `x-ratelimit-remaining-<dimension>` and
///   `x-ratelimit-reset-<dimension>`, the reset as a Go duration ([`push_go_duration`]: `6m0s`,
///   `1.5s`, `12ms`). A dimension no enforced rule counts gets none of its three.
/// - `Retry-After` on every denied verdict, whatever the style: [`Verdict::retry_after`] in
///   seconds, rounded up, at least 1.
///
/// Only enforced limits ([`Verdict::enforced`]) are advertised: shadow and tag rules are
/// invisible to clients, and a verdict made by the store-failure policy advertises nothing but
/// `Retry-After`. Rule names are written as structured-field strings: `"` and `\` are escaped and
/// any character outside printable ASCII becomes `?`.
pub fn rate_limit_headers(verdict: &Verdict, style: HeaderStyle, out: &mut HeaderMap) {
    RateLimitLines::render(verdict, style).apply(out);
}

/// The names [`RateLimitLines`] may write, in the order it writes them.
pub(crate) static LINE_NAMES: [HeaderName; MAX_RATE_LIMIT_HEADERS] = [
    http::header::RETRY_AFTER,
    RATELIMIT_POLICY,
    RATELIMIT,
    X_RATELIMIT_LIMIT,
    X_RATELIMIT_REMAINING,
    X_RATELIMIT_RESET,
    X_RATELIMIT_LIMIT_REQUESTS,
    X_RATELIMIT_REMAINING_REQUESTS,
    X_RATELIMIT_RESET_REQUESTS,
    X_RATELIMIT_LIMIT_TOKENS,
    X_RATELIMIT_REMAINING_TOKENS,
    X_RATELIMIT_RESET_TOKENS,
];
/// What starts each line of [`LINE_NAMES`]: the name and `: `.
pub(crate) const LINE_STARTS: [&[u8]; MAX_RATE_LIMIT_HEADERS] = [
    b"retry-after: ",
    b"ratelimit-policy: ",
    b"ratelimit: ",
    b"x-ratelimit-limit: ",
    b"x-ratelimit-remaining: ",
    b"x-ratelimit-reset: ",
    b"x-ratelimit-limit-requests: ",
    b"x-ratelimit-remaining-requests: ",
    b"x-ratelimit-reset-requests: ",
    b"x-ratelimit-limit-tokens: ",
    b"x-ratelimit-remaining-tokens: ",
    b"x-ratelimit-reset-tokens: ",
];
const RETRY_AFTER_LINE: usize = 0;
const POLICY_LINE: usize = 1;
const RATELIMIT_LINE: usize = 2;
const LEGACY_LINES: usize = 3;
const OPENAI_REQUESTS_LINES: usize = 6;
const OPENAI_TOKENS_LINES: usize = 9;

/// The rate-limit headers of one verdict ([`rate_limit_headers`] says which), rendered once as
/// HTTP/1.1 header lines, `name: value\r\n` each, in one buffer.
///
/// [`RateLimitLines::apply`] puts them in a header map. A server that writes its HTTP/1.1 response
/// heads itself can instead copy [`RateLimitLines::as_bytes`] into the head as they are, skipping
/// the response's own headers they replace ([`RateLimitLines::replaces`]): no header map's
/// hashing, and no second check of values built from printable ASCII only. The gateway attaches
/// them to its responses as an extension that `floodgate serve`'s listeners write so, or apply
/// before hyper writes the response.
///
/// ```
/// use floodgate_http::{HeaderStyle, RateLimitLines};
/// // A refusal that names no limit (the store-failure policy's): `Retry-After` only.
/// let refused = floodgate::Verdict {
///     allowed: false,
///     at: floodgate::core::Timestamp::from_secs(1_700_000_000),
///     limits: Default::default(),
///     store_error: None,
/// };
/// let lines = RateLimitLines::render(&refused, HeaderStyle::Both);
/// assert_eq!(lines.as_bytes(), b"retry-after: 1\r\n");
/// assert!(lines.replaces(&http::header::RETRY_AFTER));
/// assert!(!lines.replaces(&floodgate_http::headers::RATELIMIT));
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("120"));
/// lines.apply(&mut headers);
/// assert_eq!(headers["retry-after"], "1");
/// ```
#[derive(Clone, Debug)]
pub struct RateLimitLines {
    /// Kept as written (not frozen: a frozen buffer whose length is not its capacity takes a
    /// second allocation to be shared, which only [`RateLimitLines::apply`] needs).
    lines: BytesMut,
    /// The headers written, a bit each by their index in [`LINE_NAMES`] (the lines are in that
    /// order).
    names: u16,
}

impl RateLimitLines {
    /// Renders the rate-limit headers of `verdict` in `style`.
    pub fn render(verdict: &Verdict, style: HeaderStyle) -> RateLimitLines {
        // Every line is written into one buffer: one allocation for all the headers of a response.
        let mut buf = BytesMut::with_capacity(160 + 96 * verdict.limits.len());
        let mut names = 0u16;
        let mut push = |buf: &mut BytesMut, name: usize, write: &dyn Fn(&mut BytesMut)| {
            buf.extend_from_slice(LINE_STARTS[name]);
            write(buf);
            buf.extend_from_slice(b"\r\n");
            names |= 1 << name;
        };
        if !verdict.allowed {
            let secs = ceil_secs_at_least_one(verdict.retry_after().unwrap_or_default());
            push(&mut buf, RETRY_AFTER_LINE, &|b| push_u64(b, secs));
        }
        if let Some(first) = verdict.most_restrictive().filter(|l| is_enforced(verdict, l)) {
            let decision = &first.decision;
            if style.ietf() {
                push(&mut buf, POLICY_LINE, &|b| {
                    push_policy_item(b, first);
                    for other in verdict.enforced().filter(|l| !std::ptr::eq(*l, first)) {
                        b.extend_from_slice(b", ");
                        push_policy_item(b, other);
                    }
                });
                push(&mut buf, RATELIMIT_LINE, &|b| {
                    push_sf_string(b, &first.rule);
                    b.extend_from_slice(b";r=");
                    push_u64(b, decision.remaining);
                    b.extend_from_slice(b";t=");
                    push_u64(b, ceil_secs(decision.reset_after));
                    push_partition_key(b, first);
                });
            }
            if style.legacy() {
                push(&mut buf, LEGACY_LINES, &|b| push_u64(b, decision.limit));
                push(&mut buf, LEGACY_LINES + 1, &|b| push_u64(b, decision.remaining));
                push(&mut buf, LEGACY_LINES + 2, &|b| {
                    push_u64(b, reset_unix_secs(verdict.at, decision.reset_after))
                });
            }
        }
        if style.openai() {
            for (dimension, first) in
                [(floodgate::cost::REQUESTS, OPENAI_REQUESTS_LINES), ("tokens", OPENAI_TOKENS_LINES)]
            {
                if let Some(tightest) = tightest_of(verdict, dimension) {
                    let decision = &tightest.decision;
                    push(&mut buf, first, &|b| push_u64(b, decision.limit));
                    push(&mut buf, first + 1, &|b| push_u64(b, decision.remaining));
                    push(&mut buf, first + 2, &|b| push_go_duration(b, decision.reset_after));
                }
            }
        }
        RateLimitLines { lines: buf, names }
    }

    /// The header lines, `name: value\r\n` each (nothing when the verdict advertises nothing).
    pub fn as_bytes(&self) -> &[u8] {
        &self.lines
    }

    /// Whether these lines hold a header named `name`: a response's own header of that name is
    /// replaced by them.
    pub fn replaces(&self, name: &HeaderName) -> bool {
        // Every name they may hold starts with `r` or `x`: most names are ruled out by that alone.
        if !matches!(name.as_str().as_bytes().first(), Some(b'r' | b'x')) {
            return false;
        }
        self.names().any(|i| LINE_NAMES[i] == *name)
    }

    /// The indices in [`LINE_NAMES`] of the headers held, in order.
    fn names(&self) -> impl Iterator<Item = usize> + use<> {
        let names = self.names;
        (0..MAX_RATE_LIMIT_HEADERS).filter(move |i| names & (1 << i) != 0)
    }

    /// Puts the headers in `out`, replacing any already there of the same names.
    pub fn apply(self, out: &mut HeaderMap) {
        out.reserve(self.names.count_ones() as usize);
        let names = self.names();
        // The values share the lines' buffer.
        let lines = self.lines.freeze();
        let mut at = 0;
        for i in names {
            let start = at + LINE_STARTS[i].len();
            let Some(end) = lines[start..].windows(2).position(|w| w == b"\r\n").map(|n| start + n) else {
                return;
            };
            at = end + 2;
            // Built from printable ASCII only; a value that is not is skipped rather than
            // panicked on.
            if let Ok(value) = HeaderValue::from_maybe_shared(lines.slice(start..end)) {
                out.insert(LINE_NAMES[i].clone(), value);
            }
        }
    }
}

/// A response as a front door's service gives it to the server, with its rate-limit headers
/// rendered as [`RateLimitLines`] beside it rather than in its header map: a server that writes the
/// head itself copies the lines into it as they are, dropping the response's own headers of those
/// names; any other server gets [`Answer::into_response`], the lines in the map. Carried beside the
/// response, not in its extensions, which would allocate a map for their one entry on every answer.
#[derive(Debug)]
pub struct Answer<B> {
    /// The response, its body and every header but the lines'.
    pub response: http::Response<B>,
    /// `None`: the response has no rate-limit headers, or has them in its map already.
    pub lines: Option<RateLimitLines>,
}

impl<B> Answer<B> {
    /// `response` with `lines`.
    pub fn with_lines(response: http::Response<B>, lines: RateLimitLines) -> Self {
        Answer { response, lines: Some(lines) }
    }

    /// The response with the lines in its header map, replacing any of the same names.
    pub fn into_response(self) -> http::Response<B> {
        let Answer { mut response, lines } = self;
        if let Some(lines) = lines {
            lines.apply(response.headers_mut());
        }
        response
    }

    /// The same answer with its body mapped by `f`.
    pub fn map<C>(self, f: impl FnOnce(B) -> C) -> Answer<C> {
        Answer { response: self.response.map(f), lines: self.lines }
    }
}

impl<B> From<http::Response<B>> for Answer<B> {
    /// A response with no lines beside it (its headers, if any, in its map).
    fn from(response: http::Response<B>) -> Self {
        Answer { response, lines: None }
    }
}

/// The tightest enforced limit counting `dimension`: when the verdict is denied and one of them
/// denies, the denying one with the longest wait; otherwise the one with the least remaining
/// (then the longest reset).
fn tightest_of<'v>(verdict: &'v Verdict, dimension: &str) -> Option<&'v LimitOutcome> {
    let of = || verdict.enforced().filter(move |l| &*l.dimension == dimension);
    if !verdict.allowed
        && let Some(denying) = of()
            .filter(|l| l.outcome.denies())
            .max_by_key(|l| (l.decision.retry_after.unwrap_or_default(), l.decision.reset_after))
    {
        return Some(denying);
    }
    of().min_by_key(|l| (l.decision.remaining, std::cmp::Reverse(l.decision.reset_after)))
}

/// Appends `d` as Go's `time.Duration` writes it (the format of OpenAI's `x-ratelimit-reset-*`
/// headers), after rounding `d` up to whole milliseconds so that a client is never early:
/// `0s`; under a second `12ms`; from a second on `1.5s`, `6m0s`, `1h2m3.004s` — hours when
/// there are any, minutes when there are hours or minutes, then seconds with the fraction's
/// trailing zeros (and a bare `.`) left out.
///
/// ```
/// use std::time::Duration;
/// let go = |d| {
///     let mut b = bytes::BytesMut::new();
///     floodgate_http::headers::push_go_duration(&mut b, d);
///     String::from_utf8(b.to_vec()).unwrap()
/// };
/// assert_eq!(go(Duration::from_secs(360)), "6m0s");
/// assert_eq!(go(Duration::from_millis(1_500)), "1.5s");
/// assert_eq!(go(Duration::from_millis(12)), "12ms");
/// assert_eq!(go(Duration::from_secs(3_723)), "1h2m3s");
/// ```
pub fn push_go_duration(out: &mut BytesMut, d: Duration) {
    let ms = crate::ceil_ms(d);
    if ms == 0 {
        out.extend_from_slice(b"0s");
        return;
    }
    if ms < 1_000 {
        push_u64(out, ms);
        out.extend_from_slice(b"ms");
        return;
    }
    let (secs, frac) = (ms / 1_000, ms % 1_000);
    let (hours, minutes, seconds) = (secs / 3_600, secs / 60 % 60, secs % 60);
    if hours > 0 {
        push_u64(out, hours);
        out.extend_from_slice(b"h");
    }
    if secs >= 60 {
        push_u64(out, minutes);
        out.extend_from_slice(b"m");
    }
    push_u64(out, seconds);
    if frac > 0 {
        let digits = [b'0' + (frac / 100) as u8, b'0' + (frac / 10 % 10) as u8, b'0' + (frac % 10) as u8];
        let len = if digits[2] != b'0' {
            3
        } else if digits[1] != b'0' {
            2
        } else {
            1
        };
        out.extend_from_slice(b".");
        out.extend_from_slice(&digits[..len]);
    }
    out.extend_from_slice(b"s");
}

fn push_u64(out: &mut BytesMut, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Writes [`TAG_HEADER`] with the names of the rules that tagged `verdict`, comma separated
/// (`floodgate-tag: scraper-suspect, burst-watch`), replacing any already there; removes it when
/// no rule tagged the request, so a client cannot forge it on the way in. Characters outside
/// printable ASCII, and commas, become `?`.
///
/// Also writes [`DEGRADE_HEADER`] ([`degrade_header`]).
pub fn tag_header(verdict: &Verdict, out: &mut HeaderMap) {
    degrade_header(verdict, out);
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

/// Writes [`DEGRADE_HEADER`] with [`Verdict::degrade_to`] (the model a plan over its limit
/// switches to), replacing any already there; removes it when there is none, so that a client
/// cannot forge it on the way in. Characters outside printable ASCII become `?`.
pub fn degrade_header(verdict: &Verdict, out: &mut HeaderMap) {
    match verdict.degrade_to() {
        Some(model) => {
            let model: String = model.chars().map(|c| if is_printable_ascii(c) { c } else { '?' }).collect();
            insert_str(out, DEGRADE_HEADER, &model);
        }
        None => remove_named(out, &DEGRADE_HEADER),
    }
}

/// Removes the headers named `name` (one not among the standard names) from `out`. A lookup by such
/// a name hashes all of it; a message's few headers are compared instead (a standard name differs
/// by its tag alone), and the map is looked up only when it has the header, or too many to compare.
fn remove_named(out: &mut HeaderMap, name: &HeaderName) {
    /// Up to this many headers, comparing each costs less than hashing the name.
    const COMPARED: usize = 16;
    if out.keys_len() > COMPARED || out.keys().any(|present| present == name) {
        out.remove(name);
    }
}

/// Whether `l` is one of `verdict`'s enforced limits (as [`Verdict::enforced`] defines them).
pub(crate) fn is_enforced(verdict: &Verdict, l: &LimitOutcome) -> bool {
    verdict.enforced().any(|e| std::ptr::eq(e, l))
}

/// `"<rule>";q=<limit>[;qu="concurrent-requests"];w=<window>[;pk=:<base64>:][;floodgate-qu="<dimension>"]`,
/// the parameters in the order of the draft's own examples, the vendor one last.
fn push_policy_item(out: &mut BytesMut, l: &LimitOutcome) {
    let unit = QuotaUnit::of(l);
    push_sf_string(out, &l.rule);
    out.extend_from_slice(b";q=");
    push_u64(out, l.decision.limit);
    if let QuotaUnit::Registered(name) = unit {
        out.extend_from_slice(b";qu=");
        push_sf_string(out, name);
    }
    out.extend_from_slice(b";w=");
    push_u64(out, ceil_secs_at_least_one(l.window));
    push_partition_key(out, l);
    if let QuotaUnit::Vendor(dimension) = unit {
        out.extend_from_slice(b";");
        out.extend_from_slice(VENDOR_QUOTA_UNIT.as_bytes());
        out.extend_from_slice(b"=");
        push_sf_string(out, dimension);
    }
}

/// `;pk=:<base64>:` (an sf-binary: standard base64 with padding, between colons), when the limit
/// carries a partition key.
fn push_partition_key(out: &mut BytesMut, l: &LimitOutcome) {
    let Some(pk) = l.partition else { return };
    // 16 bytes are 24 base64 characters, padding included.
    let mut text = [0u8; 24];
    let len = STANDARD.encode_slice(pk.as_bytes(), &mut text).unwrap_or_default();
    out.extend_from_slice(b";pk=:");
    out.extend_from_slice(&text[..len]);
    out.extend_from_slice(b":");
}

/// The parameter that names a quota unit the draft's registry does not (a cost dimension such as
/// `tokens`): `floodgate-qu="tokens"`. The draft lets `qu` take only the registry's units and asks
/// service-specific parameters to carry a vendor prefix.
pub const VENDOR_QUOTA_UNIT: &str = "floodgate-qu";

/// What a limit's quota counts, as `RateLimit-Policy` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuotaUnit<'a> {
    /// `requests`, the draft's default: no parameter.
    Requests,
    /// A unit of the draft's registry, in `qu` (`concurrent-requests`).
    Registered(&'static str),
    /// A cost dimension the registry does not name, in [`VENDOR_QUOTA_UNIT`].
    Vendor(&'a str),
}

impl<'a> QuotaUnit<'a> {
    fn of(l: &'a LimitOutcome) -> Self {
        if l.permit {
            QuotaUnit::Registered("concurrent-requests")
        } else if &*l.dimension == floodgate::cost::REQUESTS {
            QuotaUnit::Requests
        } else {
            QuotaUnit::Vendor(&l.dimension)
        }
    }
}

/// Appends `s` as an RFC 8941 sf-string: quoted, `"` and `\` escaped, anything outside printable
/// ASCII (which an sf-string cannot hold) replaced by `?`.
fn push_sf_string(out: &mut BytesMut, s: &str) {
    out.extend_from_slice(b"\"");
    // A name of printable ASCII with nothing to escape (nearly every rule's) is copied whole.
    if s.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\') {
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(b"\"");
        return;
    }
    for c in s.chars() {
        match c {
            '"' | '\\' => out.extend_from_slice(&[b'\\', c as u8]),
            c if is_printable_ascii(c) => out.extend_from_slice(&[c as u8]),
            _ => out.extend_from_slice(b"?"),
        }
    }
    out.extend_from_slice(b"\"");
}

pub(crate) fn is_printable_ascii(c: char) -> bool {
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
pub(crate) fn reset_unix_secs(at: Timestamp, after: Duration) -> u64 {
    at.saturating_add(after).as_micros().div_ceil(1_000_000)
}
