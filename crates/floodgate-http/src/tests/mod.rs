//! The headers and problem bodies of verdicts, exactly.

mod ietf;

use std::sync::Arc;
use std::time::Duration;

use floodgate::{LimitOutcome, Outcome, StoreError, Verdict};
use floodgate_core::{Decision, Timestamp};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::headers::{X_RATELIMIT_LIMIT, rate_limit_headers, tag_header};
use crate::problem::{NEVER_ALLOWED_TYPE, QUOTA_EXCEEDED_TYPE};
use crate::{DEGRADE_HEADER, HeaderStyle, Problem, TAG_HEADER};

const AT: Timestamp = Timestamp::from_secs(1_700_000_000);

fn limit(rule: &str, outcome: Outcome, limit: u64, remaining: u64, reset_ms: u64) -> LimitOutcome {
    let allowed = !outcome.denies() && outcome != Outcome::ShadowDenied && outcome != Outcome::Tagged;
    LimitOutcome {
        rule: rule.into(),
        index: 0,
        hit: 0,
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
        dimension: "requests".into(),
        quota: false,
        degrade_to: None,
        grant: None,
        permit: false,
        shard: None,
        partition: None,
    }
}

fn verdict(limits: impl IntoIterator<Item = LimitOutcome>) -> Verdict {
    let limits: floodgate::Limits = limits.into_iter().collect();
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
    assert_eq!(
        err.to_string(),
        r#"invalid header style "draft": expected ietf, legacy, both, openai or none, or a list of them such as [ietf, openai] (each set once, none alone)"#
    );
    assert_eq!("openai".parse(), Ok(HeaderStyle::OpenAi));
    assert_eq!("ietf,openai".parse(), Ok(HeaderStyle::Ietf.with(HeaderStyle::OpenAi)));
    assert_eq!(HeaderStyle::from_names(["both", "openai"]), Ok(HeaderStyle::Both.with(HeaderStyle::OpenAi)));
    for (bad, named) in [
        ("ietf, ietf", "ietf"),
        ("both, legacy", "legacy"),
        ("none, openai", "openai"),
        ("openai, none", "none"),
    ] {
        assert_eq!(bad.parse::<HeaderStyle>().unwrap_err().value, named, "{bad}");
    }
    for style in HeaderStyle::all() {
        assert_eq!(style.to_string().parse(), Ok(style));
    }
    let sets = |s: HeaderStyle| (s.ietf(), s.legacy(), s.openai());
    assert_eq!(sets(HeaderStyle::Both), (true, true, false));
    assert_eq!(sets(HeaderStyle::OpenAi), (false, false, true));
    assert_eq!(sets(HeaderStyle::Ietf.with(HeaderStyle::OpenAi)), (true, false, true));
    assert_eq!(sets(HeaderStyle::None), (false, false, false));
}

fn go(d: Duration) -> String {
    let mut b = bytes::BytesMut::new();
    crate::headers::push_go_duration(&mut b, d);
    String::from_utf8(b.to_vec()).unwrap()
}

/// Go's `time.Duration.String()` of the duration rounded up to milliseconds, at every unit
/// boundary.
#[test]
fn resets_are_go_durations_at_every_unit_boundary() {
    let ms = Duration::from_millis;
    for (d, expected) in [
        (Duration::ZERO, "0s"),
        (Duration::from_nanos(1), "1ms"),
        (Duration::from_micros(1_001), "2ms"),
        (ms(1), "1ms"),
        (ms(12), "12ms"),
        (ms(999), "999ms"),
        (Duration::from_micros(999_001), "1s"),
        (ms(1_000), "1s"),
        (ms(1_001), "1.001s"),
        (ms(1_010), "1.01s"),
        (ms(1_500), "1.5s"),
        (ms(10_000), "10s"),
        (ms(59_999), "59.999s"),
        (ms(60_000), "1m0s"),
        (ms(60_001), "1m0.001s"),
        (ms(61_500), "1m1.5s"),
        (ms(360_000), "6m0s"),
        (ms(3_599_999), "59m59.999s"),
        (ms(3_600_000), "1h0m0s"),
        (ms(3_600_500), "1h0m0.5s"),
        (ms(3_660_000), "1h1m0s"),
        (ms(3_723_000), "1h2m3s"),
        (ms(86_400_000), "24h0m0s"),
        (ms(360_000_000), "100h0m0s"),
    ] {
        assert_eq!(go(d), expected, "{d:?}");
    }
}

fn of(mut l: LimitOutcome, dimension: &str) -> LimitOutcome {
    l.dimension = dimension.into();
    l
}

fn openai_headers(h: &HeaderMap) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = h
        .iter()
        .filter(|(n, _)| n.as_str().ends_with("-requests") || n.as_str().ends_with("-tokens"))
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned()))
        .collect();
    v.sort();
    v
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> =
        expected.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
    v.sort();
    v
}

#[test]
fn openai_headers_take_the_tightest_rule_of_each_dimension() {
    let v = verdict([
        of(limit("rpm", Outcome::Allowed, 60, 59, 1_000), "requests"),
        of(limit("rpd", Outcome::Allowed, 1_000, 10, 86_400_000), "requests"),
        of(limit("tpm", Outcome::Allowed, 150_000, 149_000, 360_000), "tokens"),
        of(limit("shadow-tpm", Outcome::ShadowDenied, 10, 0, 1_000), "tokens"),
        of(limit("images", Outcome::Allowed, 5, 0, 1_000), "images"),
    ]);
    let h = render(&v, HeaderStyle::OpenAi);
    assert_eq!(
        openai_headers(&h),
        pairs(&[
            ("x-ratelimit-limit-requests", "1000"),
            ("x-ratelimit-remaining-requests", "10"),
            ("x-ratelimit-reset-requests", "24h0m0s"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-tokens", "149000"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ])
    );
    assert!(h.get("ratelimit").is_none() && h.get("x-ratelimit-limit").is_none(), "openai alone");
    let both = render(&v, HeaderStyle::Ietf.with(HeaderStyle::OpenAi));
    assert!(both.get("ratelimit").is_some() && both.get("x-ratelimit-limit-tokens").is_some());
    assert!(render(&v, HeaderStyle::Both).get("x-ratelimit-limit-tokens").is_none(), "not asked for");

    // Only requests rules: no token headers at all.
    let only_requests = verdict([of(limit("rpm", Outcome::Allowed, 60, 59, 1_000), "requests")]);
    assert_eq!(openai_headers(&render(&only_requests, HeaderStyle::OpenAi)).len(), 3);
}

#[test]
fn openai_headers_on_a_denial_show_the_denying_rule() {
    let v = verdict([
        of(limit("rpm", Outcome::Allowed, 60, 3, 1_000), "requests"),
        of(limit("tpm", Outcome::Denied, 150_000, 0, 1_500), "tokens"),
        of(limit("tpd", Outcome::Allowed, 1_000_000, 10, 3_723_000), "tokens"),
    ]);
    let h = render(&v, HeaderStyle::OpenAi);
    assert_eq!(h["retry-after"], "2");
    assert_eq!(
        openai_headers(&h),
        pairs(&[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "3"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "1.5s"),
        ])
    );
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
    assert!(h["ratelimit-policy"].to_str().unwrap().starts_with(r#""per-tenant";q=100;w=60, "per-user""#));
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
        store_error: Some(Arc::new(StoreError::Timeout(Duration::from_millis(5)))),
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
fn a_degrading_plan_names_its_model_in_the_header_and_the_body() {
    let mut over = limit("monthly-calls", Outcome::Tagged, 100, 0, 1_000);
    over.degrade_to = Some(Arc::from("gpt-4o-mini"));
    let v = verdict([limit("per-minute", Outcome::Allowed, 10, 9, 1_000), over]);
    assert_eq!(v.degrade_to(), Some("gpt-4o-mini"));
    let mut h = HeaderMap::new();
    tag_header(&v, &mut h);
    assert_eq!(h[DEGRADE_HEADER], "gpt-4o-mini");
    assert_eq!(h[TAG_HEADER], "monthly-calls");
    let body: serde_json::Value =
        serde_json::from_slice(&crate::wire::VerdictBody::from(&v).to_json()).unwrap();
    assert_eq!(body["degrade_to"], "gpt-4o-mini");

    // A denied request degrades to nothing, and a forged header is removed.
    let mut denied = v.clone();
    denied.allowed = false;
    h.insert(DEGRADE_HEADER, HeaderValue::from_static("forged"));
    tag_header(&denied, &mut h);
    assert!(h.get(DEGRADE_HEADER).is_none());
    let body: serde_json::Value =
        serde_json::from_slice(&crate::wire::VerdictBody::from(&denied).to_json()).unwrap();
    assert!(body.get("degrade_to").is_none(), "{body}");
}

#[test]
fn a_forged_degrade_header_is_removed_among_any_number_of_headers() {
    let allowed = verdict([limit("per-minute", Outcome::Allowed, 10, 9, 1_000)]);
    for others in [0, 1, 15, 16, 17, 40] {
        for forged_at in [0, others / 2, others] {
            let mut h = HeaderMap::new();
            for i in 0..others {
                if i == forged_at {
                    h.append(DEGRADE_HEADER, HeaderValue::from_static("forged"));
                    h.append(DEGRADE_HEADER, HeaderValue::from_static("twice"));
                }
                let name = HeaderName::try_from(format!("x-other-{i}")).unwrap();
                h.insert(name, HeaderValue::from(i));
            }
            if forged_at == others {
                h.append(DEGRADE_HEADER, HeaderValue::from_static("forged"));
            }
            crate::degrade_header(&allowed, &mut h);
            assert!(h.get(DEGRADE_HEADER).is_none(), "{others} headers, forged at {forged_at}");
            assert_eq!(h.len(), others, "{others} headers, forged at {forged_at}: the others kept");
        }
    }
    // A map without it is left as it is.
    let mut h = HeaderMap::new();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    crate::degrade_header(&allowed, &mut h);
    assert_eq!(h.len(), 1);
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

proptest::proptest! {
    /// The hand-written problem JSON is the JSON serde writes, byte for byte, whatever the strings
    /// (escapes included) and numbers.
    #[test]
    fn the_problem_json_is_what_serde_writes(
        strings in proptest::array::uniform3("\\PC{0,16}|[\\x00-\\x20\"\\\\/]{0,4}"),
        status in 100u16..600,
        numbers in proptest::prelude::any::<[Option<u64>; 4]>(),
    ) {
        let [type_uri, title, detail] = strings;
        let [retry_after, limit, remaining, reset] = numbers;
        let problem = Problem { type_uri: type_uri.into(), title: title.into(), status, detail, retry_after, limit, remaining, reset };
        proptest::prop_assert_eq!(problem.to_json(), serde_json::to_string(&problem).unwrap());
    }
}

proptest::proptest! {
    /// A front door's 429 body, written straight from the verdict, is its problem's JSON byte for
    /// byte: either kind, any wait (one second or more), and with or without the denying limit's
    /// numbers (a limit that only tags or shadows is not enforced).
    #[test]
    fn a_429s_body_is_the_json_of_its_problem(
        quota: bool,
        enforced: bool,
        capacity in 0u64..u64::MAX / 2,
        remaining in 0u64..1_000,
        reset_ms in 0u64..10_000_000_000,
    ) {
        let mut denying = limit("r", Outcome::Denied, capacity, remaining, reset_ms);
        denying.quota = quota;
        denying.enforced = enforced;
        let v = verdict([limit("other", Outcome::Allowed, 5, 4, 100), denying]);
        let answer = crate::problem::limited_answer(&v, HeaderStyle::Both);
        let problem = Problem::from_verdict(&v).unwrap();
        proptest::prop_assert_eq!(answer.response.status(), StatusCode::TOO_MANY_REQUESTS);
        proptest::prop_assert_eq!(&answer.response.headers()[http::header::CONTENT_TYPE], "application/problem+json");
        proptest::prop_assert_eq!(std::str::from_utf8(answer.response.body()).unwrap(), problem.to_json());
    }
}

#[test]
fn a_character_to_escape_is_escaped_at_every_place_in_a_long_string() {
    for special in ['"', '\\', '\n', '\u{1}', '\u{1f}', '\u{7f}', 'é', ' ', '!', '#', '[', ']'] {
        for at in 0..20 {
            let detail: String = (0..20).map(|i| if i == at { special } else { 'a' }).collect();
            let problem = Problem::malformed(detail);
            assert_eq!(problem.to_json(), serde_json::to_string(&problem).unwrap(), "{special:?} at {at}");
        }
    }
}

proptest::proptest! {
    /// Whatever the rules are called (control characters, CR and LF included) and whatever the
    /// style, the rendered lines are `name: value\r\n` lines of visible ASCII, one per header, the
    /// same headers [`rate_limit_headers`] puts in a map; and they replace exactly those names.
    #[test]
    fn the_rendered_lines_are_the_headers_a_map_gets(
        names in proptest::collection::vec("\\PC{1,8}|[\\x00-\\x20\\r\\n\"\\\\]{1,4}", 1..4),
        denied in proptest::prelude::any::<bool>(),
        style in 0u8..8,
        tokens in proptest::prelude::any::<bool>(),
    ) {
        let style = ["none", "ietf", "legacy", "both", "openai", "ietf,openai", "legacy,openai", "both,openai"]
            [usize::from(style)]
            .parse::<HeaderStyle>()
            .unwrap();
        let limits = names.iter().enumerate().map(|(i, name)| {
            let outcome = if denied && i == 0 { Outcome::Denied } else { Outcome::Allowed };
            let l = limit(name, outcome, 10 + i as u64, 3, 1_500 * (i as u64 + 1));
            if tokens && i == 1 { LimitOutcome { dimension: "tokens".into(), ..l } } else { l }
        });
        let v = verdict(limits);
        let lines = crate::RateLimitLines::render(&v, style);
        let text = std::str::from_utf8(lines.as_bytes()).expect("ASCII");
        proptest::prop_assert!(text.is_empty() || text.ends_with("\r\n"));
        let parsed: Vec<(String, String)> = text
            .split_terminator("\r\n")
            .map(|line| {
                let (name, value) = line.split_once(": ").expect("name: value");
                (name.to_owned(), value.to_owned())
            })
            .collect();
        let map = render(&v, style);
        let from_map: Vec<(String, String)> =
            map.iter().map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned())).collect();
        proptest::prop_assert_eq!(&parsed, &from_map);
        for (_, value) in &parsed {
            proptest::prop_assert!(value.bytes().all(|b| (b' '..=b'~').contains(&b)), "{:?}", value);
        }
        for name in [http::header::RETRY_AFTER, X_RATELIMIT_LIMIT, crate::headers::RATELIMIT, http::header::DATE] {
            proptest::prop_assert_eq!(lines.replaces(&name), map.contains_key(&name));
        }
    }
}

#[test]
fn each_line_starts_with_its_name() {
    for (name, start) in crate::headers::LINE_NAMES.iter().zip(crate::headers::LINE_STARTS) {
        assert_eq!(start, format!("{}: ", name.as_str()).as_bytes());
    }
}

#[test]
fn an_answer_puts_its_lines_in_the_map_replacing_the_responses_own_of_those_names() {
    let denied = verdict([limit("per-minute", Outcome::Denied, 10, 0, 30_000)]);
    let mut response = http::Response::new(());
    response.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from_static("999"));
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    let lines = crate::RateLimitLines::render(&denied, HeaderStyle::Both);
    let mut expected = HeaderMap::new();
    rate_limit_headers(&denied, HeaderStyle::Both, &mut expected);

    let answered = crate::Answer::with_lines(response, lines).map(|()| "body").into_response();
    assert_eq!(*answered.body(), "body");
    assert_eq!(answered.headers()[http::header::RETRY_AFTER], "30", "the upstream's own replaced");
    assert_eq!(answered.headers()[http::header::CONTENT_TYPE], "text/plain");
    for (name, value) in &expected {
        assert_eq!(answered.headers().get_all(name).iter().collect::<Vec<_>>(), [value], "{name}");
    }
    assert_eq!(answered.headers().len(), expected.len() + 1);

    // A response with no lines beside it is given on as it is.
    let plain: crate::Answer<()> = http::Response::new(()).into();
    assert!(plain.lines.is_none());
    assert!(plain.into_response().headers().is_empty());
}
