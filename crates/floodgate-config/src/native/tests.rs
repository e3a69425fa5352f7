//! The native format, section by section: what is accepted, what each default is, what is refused.

use std::time::Duration;

use floodgate::{Action, Limit, MemoryConfig, OnFull};
use floodgate_core::calendar::Period;
use floodgate_http::HeaderStyle;
use jiff::civil::Weekday;

use super::{DEFAULT_LEASE, Native, compile};
use crate::StoreConfig;
use crate::error::Invalid;
use crate::redis::{RedisCrossSlot, RedisHashTag, RedisStoreConfig, RedisTls};
use crate::yaml::{Item, parse_document};

fn compile_text(text: &str) -> Result<Native, Invalid> {
    let root = parse_document(text).expect("valid YAML");
    compile(Item::root(&root))
}

/// A one-rule configuration with `body` as the rule's fields (indented by the caller).
fn one_rule(body: &str) -> Result<Native, Invalid> {
    compile_text(&format!("rules:\n  - name: r\n{body}"))
}

fn error(text: &str) -> Invalid {
    compile_text(text).expect_err("an invalid configuration")
}

#[test]
fn defaults() {
    let native = compile_text("rules: []\n").unwrap();
    assert_eq!(native.store, StoreConfig::Memory(MemoryConfig::default()));
    assert_eq!(native.headers, HeaderStyle::Both);
    assert!(native.rules.is_empty());
    assert!(compile_text("{}\n").unwrap().rules.is_empty());
}

#[test]
fn store_kinds() {
    let memory =
        compile_text("store: {kind: memory, max_keys: 10, on_full: reject, sweep_interval: 1s}\n").unwrap();
    assert_eq!(
        memory.store,
        StoreConfig::Memory(MemoryConfig {
            max_keys: 10,
            on_full: OnFull::Reject,
            sweep_interval: Duration::from_secs(1),
            ..MemoryConfig::default()
        })
    );
    let spread = compile_text(
        "store: {kind: memory, max_keys: 10, overflow_counters: 4096}
",
    )
    .unwrap();
    let StoreConfig::Memory(spread) = spread.store else { panic!("a memory store") };
    assert_eq!((spread.on_full, spread.overflow_counters), (OnFull::Aggregate, 4096));
    let redis = compile_text("store: {kind: redis, url: 'redis://127.0.0.1:6379'}\n").unwrap();
    // What the file leaves out is left to the Redis store's own defaults (floodgate-app's
    // `redis_config` fills them in, and tests them).
    assert_eq!(redis.store, StoreConfig::Redis(RedisStoreConfig::node("redis://127.0.0.1:6379")));
    let cluster =
        compile_text("store:\n  kind: redis_cluster\n  urls: ['redis://a:1', 'redis://b:2']\n  prefix: fg\n  deadline: 20ms\n")
            .unwrap();
    let mut expected = RedisStoreConfig::cluster(["redis://a:1", "redis://b:2"]);
    expected.prefix = Some("fg".into());
    expected.deadline = Some(Duration::from_millis(20));
    assert_eq!(cluster.store, StoreConfig::Redis(expected));
}

#[test]
fn redis_connection_settings_and_hash_tags_are_settable() {
    let cluster = compile_text(
        "store:\n  kind: redis_cluster\n  urls: ['redis://a:1']\n  connect_timeout: 250ms\n  max_in_flight: 64\n  hash_tag: tenant\n",
    )
    .unwrap();
    let StoreConfig::Redis(c) = &cluster.store else { panic!("a Redis store") };
    assert_eq!(c.connect_timeout, Some(Duration::from_millis(250)));
    assert_eq!(c.max_in_flight, Some(64));
    assert_eq!(c.hash_tag, Some(RedisHashTag::Descriptor("tenant".into())));
    let whole = compile_text("store: {kind: redis_cluster, urls: ['redis://a:1'], hash_tag: key}\n").unwrap();
    let StoreConfig::Redis(c) = &whole.store else { panic!("a Redis store") };
    assert_eq!(c.hash_tag, Some(RedisHashTag::Key));

    let e = error("store: {kind: redis_cluster, urls: ['redis://a:1'], hash_tag: tenat}\n");
    assert_eq!(e.field.as_deref(), Some("store.hash_tag"));
    assert!(e.message.contains("did you mean \"tenant\""), "{}", e.message);
    let e = error("store: {kind: redis, url: 'redis://a:1', hash_tag: tenant}\n");
    assert!(e.message.contains("does not apply to store kind redis"), "{}", e.message);
    let e = error("store: {kind: redis, url: 'redis://a:1', cross_slot: at_once}\n");
    assert!(e.message.contains("does not apply to store kind redis"), "{}", e.message);
    let e = error("store: {kind: redis_cluster, urls: ['redis://a:1'], cross_slot: denied}\n");
    assert_eq!(e.field.as_deref(), Some("store.cross_slot"));
    assert!(e.message.contains("invalid cross_slot \"denied\": expected denied_first"), "{}", e.message);
    let at_once =
        compile_text("store: {kind: redis_cluster, urls: ['redis://a:1'], cross_slot: at_once}\n").unwrap();
    let StoreConfig::Redis(c) = &at_once.store else { panic!("a Redis store") };
    assert_eq!(c.cross_slot, Some(RedisCrossSlot::AtOnce));
    let e = error("store: {kind: redis, url: 'redis://a:1', max_in_flight: 0}\n");
    assert!(e.message.contains("invalid max_in_flight 0"), "{}", e.message);
    let e = error("store: {kind: redis, url: 'redis://a:1', connect_timeout: 0s}\n");
    assert!(e.message.contains("must be longer than 0"), "{}", e.message);
}

#[test]
fn memory_persistence() {
    use floodgate::store::{Fsync, PersistConfig};
    let persisted = |text: &str| match compile_text(text).unwrap().store {
        StoreConfig::Memory(m) => m.persist,
        other => panic!("a memory store, not {other:?}"),
    };
    assert_eq!(persisted("store: {kind: memory}\n"), None);
    assert_eq!(
        persisted("store: {kind: memory, persist: {path: /var/lib/floodgate}}\n"),
        Some(PersistConfig { path: "/var/lib/floodgate".into(), fsync: Fsync::Always })
    );
    assert_eq!(
        persisted("store: {persist: {path: state, fsync: always}}\n"),
        Some(PersistConfig { path: "state".into(), fsync: Fsync::Always })
    );
    assert_eq!(
        persisted("store: {persist: {path: state, fsync: 50ms}}\n"),
        Some(PersistConfig { path: "state".into(), fsync: Fsync::Every(Duration::from_millis(50)) })
    );
    let e = error("store:\n  persist:\n    fsync: always\n");
    assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("store.persist.path")));
    assert!(e.message.contains("persist needs path"), "{}", e.message);
    let e = error("store:\n  persist: {path: x, fsync: sometimes}\n");
    assert_eq!((e.line, e.field.as_deref()), (Some(2), Some("store.persist.fsync")));
    assert!(e.message.contains("expected always, or an interval such as 50ms"), "{}", e.message);
    let e = error("store: {persist: {path: x, fsync: 0s}}\n");
    assert!(e.message.contains("must be longer than 0"), "{}", e.message);
    let e = error("store: {persist: {path: ''}}\n");
    assert!(e.message.contains("path is empty"), "{}", e.message);
    let e = error("store: {persist: {path: x, fsinc: always}}\n");
    assert_eq!(e.field.as_deref(), Some("store.persist.fsinc"));
    let e = error("store: {kind: redis, url: 'redis://a:1', persist: {path: x}}\n");
    assert!(e.message.contains("does not apply to store kind redis"), "{}", e.message);
}

#[test]
fn store_settings_must_fit_the_kind() {
    let e = error("store:\n  kind: memory\n  url: redis://x\n");
    assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("store.url")));
    assert!(e.message.contains("does not apply to store kind memory"), "{}", e.message);
    let e = error("store: {kind: redis}\n");
    assert_eq!(e.field.as_deref(), Some("store.url"));
    let e = error("store: {kind: redis, url: 'http://x'}\n");
    assert!(e.message.contains("invalid Redis URL \"http://x\""), "{}", e.message);
    let e = error("store: {kind: redis_cluster, urls: []}\n");
    assert_eq!(e.field.as_deref(), Some("store.urls"));
    let e = error("store: {kind: mem}\n");
    assert!(e.message.contains("unknown store kind \"mem\""), "{}", e.message);
    let e = error("store: {max_keys: 0}\n");
    assert!(e.message.contains("invalid max_keys 0"), "{}", e.message);
    let e = error("store: {on_full: evict}\n");
    assert!(e.message.contains("unknown on_full \"evict\""), "{}", e.message);
    let e = error("store: {overflow_counters: 0}\n");
    assert_eq!(e.field.as_deref(), Some("store.overflow_counters"));
    let e = error("store: {on_full: reject, overflow_counters: 16}\n");
    assert!(e.message.contains("applies to on_full: aggregate only"), "{}", e.message);
    let e = error("store: {overflow_counters: 100000000}\n");
    assert!(e.message.contains("too large: at most 16777216 per rule"), "{}", e.message);
}

#[test]
fn header_styles() {
    for (text, style) in [
        ("ietf", HeaderStyle::Ietf),
        ("legacy", HeaderStyle::Legacy),
        ("both", HeaderStyle::Both),
        ("none", HeaderStyle::None),
    ] {
        assert_eq!(compile_text(&format!("headers: {text}\n")).unwrap().headers, style);
    }
    let e = error("headers: x-ratelimit\n");
    assert!(e.message.contains("\"x-ratelimit\""), "{}", e.message);
    for (text, style) in [
        ("openai", HeaderStyle::OpenAi),
        ("[ietf, openai]", HeaderStyle::Ietf.with(HeaderStyle::OpenAi)),
        ("[both, openai]", HeaderStyle::Both.with(HeaderStyle::OpenAi)),
        ("[legacy]", HeaderStyle::Legacy),
    ] {
        assert_eq!(compile_text(&format!("headers: {text}\n")).unwrap().headers, style, "{text}");
    }
    for (text, field, says) in [
        ("[ietf, openai, ietf]", "headers[2]", "\"ietf\""),
        ("[none, openai]", "headers[1]", "none alone"),
        ("[ietf, opnai]", "headers[1]", "\"opnai\""),
        ("[ietf, 3]", "headers[1]", "a header style"),
        ("[]", "headers", "empty list"),
    ] {
        let e = error(&format!("headers: {text}\n"));
        assert_eq!(e.field.as_deref(), Some(field), "{text}: {}", e.message);
        assert!(e.message.contains(says), "{text}: {}", e.message);
    }
}

#[test]
fn bucket_defaults() {
    let native = one_rule("    algorithm: token_bucket\n    rate: 600/m\n").unwrap();
    let Limit::TokenBucket(bucket) = native.rules[0].limit() else { panic!("a token bucket") };
    assert_eq!(bucket.burst(), 600, "a token bucket's burst defaults to the rate's count");
    let native = one_rule("    algorithm: gcra\n    rate: 5000/h\n").unwrap();
    let Limit::Gcra(gcra) = native.rules[0].limit() else { panic!("a gcra") };
    assert_eq!(gcra.burst(), 1, "a gcra's burst defaults to 1");
    let e = one_rule("    algorithm: gcra\n    rate: 10\n").unwrap_err();
    assert!(e.message.contains("\"10/s\""), "{}", e.message);
    let e =
        one_rule("    algorithm: token_bucket\n    rate: 1/d\n    burst: 1000000000000000\n").unwrap_err();
    assert_eq!(e.field.as_deref(), Some("rules[0].burst"));
}

#[test]
fn a_whole_number_is_that_number_however_it_is_written() {
    for written in ["5", "5.0", "5e0", "0.5e1"] {
        let native =
            one_rule(&format!("    algorithm: fixed_window\n    limit: {written}\n    window: 1s\n"))
                .unwrap();
        assert_eq!(native.rules[0].limit().capacity(), 5, "{written}");
    }
    for refused in ["5.5", "-5.0", "0.0", "1.8446744073709552e19", "\"5\""] {
        let e = one_rule(&format!("    algorithm: fixed_window\n    limit: {refused}\n    window: 1s\n"))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("rules[0].limit"), "{refused}: {}", e.message);
    }
}

/// A limit alone (the playground) takes a burst every rate takes, whatever its rate.
#[test]
fn a_limit_alone_takes_no_burst_some_rate_would_not() {
    let alone = |burst: u64| {
        crate::parse_limit(&format!("{{algorithm: token_bucket, rate: 1000/s, burst: {burst}}}"), &[])
    };
    assert!(alone(crate::algorithm::MAX_BURST_AT_ANY_RATE).is_ok());
    let e = alone(crate::algorithm::MAX_BURST_AT_ANY_RATE + 1).unwrap_err();
    assert!(e.message.contains("the largest every rate takes"), "{}", e.message);
    let rule = one_rule(&format!(
        "    algorithm: token_bucket\n    rate: 1000/s\n    burst: {}\n",
        crate::algorithm::MAX_BURST_AT_ANY_RATE + 1
    ));
    assert!(rule.is_ok(), "a rule takes what its rate takes");
}

#[test]
fn concurrency_and_quota_defaults() {
    let native = one_rule("    algorithm: concurrency\n    limit: 4\n").unwrap();
    let Limit::Concurrency(c) = native.rules[0].limit() else { panic!("concurrency") };
    assert_eq!(c.lease(), DEFAULT_LEASE);
    let native = one_rule("    algorithm: quota\n    limit: 4\n    period: month\n").unwrap();
    let Limit::Quota(q) = native.rules[0].limit() else { panic!("quota") };
    assert_eq!(q.calendar().period(), Period::Month { anchor_day: 1 });
    assert_eq!(q.calendar().time_zone_name(), "UTC");
    let native = one_rule(
        "    algorithm: quota\n    limit: 4\n    period: week\n    anchor: sun\n    time_zone: Europe/Berlin\n",
    )
    .unwrap();
    let Limit::Quota(q) = native.rules[0].limit() else { panic!("quota") };
    assert_eq!(q.calendar().period(), Period::Week { starts_on: Weekday::Sunday });
    assert_eq!(q.calendar().time_zone_name(), "Europe/Berlin");
}

#[test]
fn quota_anchors_fit_the_period() {
    let e = one_rule("    algorithm: quota\n    limit: 4\n    period: day\n    anchor: 1\n").unwrap_err();
    assert!(e.message.contains("anchor does not apply to period day"), "{}", e.message);
    let e = one_rule("    algorithm: quota\n    limit: 4\n    period: month\n    anchor: 32\n").unwrap_err();
    assert!(e.message.contains("invalid anchor 32"), "{}", e.message);
    let e =
        one_rule("    algorithm: quota\n    limit: 4\n    period: week\n    anchor: someday\n").unwrap_err();
    assert!(e.message.contains("\"someday\""), "{}", e.message);
    let e = one_rule("    algorithm: quota\n    limit: 4\n    period: year\n").unwrap_err();
    assert!(e.message.contains("unknown period \"year\""), "{}", e.message);
}

#[test]
fn descriptors_known_declared_and_headers() {
    let rule = "    key: [tier]\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
    let e = one_rule(rule).unwrap_err();
    assert!(e.message.contains("unknown descriptor \"tier\""), "{}", e.message);
    assert!(compile_text(&format!("descriptors: [tier]\nrules:\n  - name: r\n{rule}")).is_ok());
    let header = "    key: [header.x-api-key]\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
    assert!(one_rule(header).is_ok());
    let e = one_rule(&header.replace("x-api-key", "X-Api-Key")).unwrap_err();
    assert!(e.message.contains("\"header.x-api-key\""), "{}", e.message);
    let e = one_rule(&header.replace("x-api-key", "")).unwrap_err();
    assert!(e.message.contains("invalid header name"), "{}", e.message);
    let e = error("descriptors: [tier, tier]\n");
    assert_eq!(e.field.as_deref(), Some("descriptors[1]"));
    let e = error("descriptors: [global]\n");
    assert!(e.message.contains("reserved"), "{}", e.message);
}

#[test]
fn key_forms() {
    let base = "    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
    for (key, expected) in [
        ("[user, tenant]", vec!["user", "tenant"]),
        ("user", vec!["user"]),
        ("[]", vec![]),
        ("[global]", vec![]),
    ] {
        let native = one_rule(&format!("    key: {key}\n{base}")).unwrap();
        assert_eq!(native.rules[0].key_descriptors(), expected.as_slice(), "key: {key}");
    }
    assert!(one_rule(base).unwrap().rules[0].key_descriptors().is_empty());
    let e = one_rule(&format!("    key: [user, user]\n{base}")).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("rules[0].key[1]"));
    let e = one_rule(&format!("    key: [global, user]\n{base}")).unwrap_err();
    assert!(e.message.contains("cannot be combined"), "{}", e.message);
}

#[test]
fn match_forms() {
    let base = "    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
    for condition in
        ["{route: 'POST /chat'}", "{method: [GET, POST]}", "{user: {present: true}}", "{plan: 1}", "{}"]
    {
        assert!(one_rule(&format!("    match: {condition}\n{base}")).is_ok(), "{condition}");
    }
    for (condition, field, says) in [
        ("{user: {present: false}}", "rules[0].match.user.present", "not supported"),
        ("{user: []}", "rules[0].match.user", "empty list"),
        ("{user: ~}", "rules[0].match.user", "expected a value"),
        ("{user: {exists: true}}", "rules[0].match.user.exists", "unknown field"),
        ("[user]", "rules[0].match", "expected conditions"),
    ] {
        let e = one_rule(&format!("    match: {condition}\n{base}")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some(field), "{condition}");
        assert!(e.message.contains(says), "{condition}: {}", e.message);
    }
}

#[test]
fn limits_by_descriptor() {
    let base = "    key: [tenant]\n    algorithm: quota\n    period: month\n";
    let ok = one_rule(&format!(
        "{base}    limit: {{by: plan, values: {{free: 100, pro: 10000}}, default: 10}}\n    overage: {{free: degrade, pro: deny}}\n"
    ));
    assert!(ok.is_ok(), "{ok:?}");
    for (extra, field, says) in [
        ("    limit: {by: plan, values: {}}\n", "rules[0].limit.values", "empty"),
        ("    limit: {by: plan, values: {free: 0}}\n", "rules[0].limit.values.free", "invalid limit 0"),
        ("    limit: {by: plam, values: {free: 1}}\n", "rules[0].limit.by", "did you mean \"plan\""),
        ("    limit: {values: {free: 1}}\n", "rules[0].limit.by", "missing field"),
        (
            "    limit: {by: plan, values: {free: 1}}\n    overage: {pro: deny}\n",
            "rules[0].overage.pro",
            "no limit",
        ),
        (
            "    limit: {by: plan, values: {free: 1}}\n    overage: {free: explode}\n",
            "rules[0].overage.free",
            "unknown overage",
        ),
        ("    limit: 5\n    overage: {free: deny}\n", "rules[0].overage", "varies by a descriptor"),
        (
            "    limit: {by: plan, values: {free: 1}}\n    overage: {free: {degrade_to: \"\"}}\n",
            "rules[0].overage.free.degrade_to",
            "invalid model",
        ),
        (
            "    limit: {by: plan, values: {free: 1}}\n    overage: {free: {degrade: small}}\n",
            "rules[0].overage.free.degrade",
            "unknown field",
        ),
        (
            "    limit: {by: plan, values: {free: 1}}\n    overage: {free: {}}\n",
            "rules[0].overage.free.degrade_to",
            "missing field",
        ),
        (
            "    limit: {by: plan, values: {free: 1}}\n    overage: {free: [small]}\n",
            "rules[0].overage.free",
            "expected deny, degrade or {degrade_to: <model>}",
        ),
    ] {
        let e = one_rule(&format!("{base}{extra}")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some(field), "{extra}");
        assert!(e.message.contains(says), "{extra}: {}", e.message);
    }
    let degrading = one_rule(&format!(
        "{base}    limit: {{by: plan, values: {{free: 100, pro: 10000, enterprise: 100000}}}}\n    overage: {{free: {{degrade_to: gpt-4o-mini}}, pro: {{degrade_to: gpt-4o-mini}}, enterprise: deny}}\n"
    ));
    assert!(degrading.is_ok(), "{degrading:?}");
}

#[test]
fn bucket_rates_by_descriptor() {
    for algorithm in ["token_bucket", "gcra"] {
        let base = format!("    key: [tenant]\n    algorithm: {algorithm}\n");
        let ok = one_rule(&format!(
            "{base}    rate: {{by: plan, values: {{free: 10/m, pro: 100/s}}, default: 1/m}}\n    overage: {{free: {{degrade_to: small}}, pro: deny}}\n"
        ));
        assert!(ok.is_ok(), "{algorithm}: {ok:?}");
        assert!(
            one_rule(&format!("{base}    rate: {{by: plan, values: {{free: 10/m}}}}\n    burst: 3\n"))
                .is_ok()
        );
        for (extra, field, says) in [
            ("    rate: {by: plan, values: {}}\n", "rules[0].rate.values", "empty"),
            ("    rate: {by: plan, values: {free: 10}}\n", "rules[0].rate.values.free", "unit is missing"),
            ("    rate: {by: plan, values: {free: 1/s}, default: fast}\n", "rules[0].rate.default", "fast"),
            ("    rate: {values: {free: 1/s}}\n", "rules[0].rate.by", "missing field"),
            ("    rate: {by: plan, values: {free: 1/s}, burst: 2}\n", "rules[0].rate.burst", "unknown field"),
            ("    rate: 1/s\n    overage: {free: deny}\n", "rules[0].overage", "varies by a descriptor"),
            (
                "    rate: {by: plan, values: {free: 1/s}}\n    overage: {pro: deny}\n",
                "rules[0].overage.pro",
                "no limit",
            ),
        ] {
            let e = one_rule(&format!("{base}{extra}")).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{algorithm}: {extra}");
            assert!(e.message.contains(says), "{algorithm}: {extra}: {}", e.message);
        }
    }
}

#[test]
fn actions_rollouts_and_store_failures() {
    let base = "    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
    for (action, expected) in [("deny", Action::Deny), ("shadow", Action::Shadow), ("tag", Action::Tag)] {
        let native = one_rule(&format!("{base}    action: {action}\n")).unwrap();
        assert_eq!(native.rules[0].action_kind(), expected);
    }
    let delayed = one_rule(&format!("{base}    action: delay\n    max_wait: 2s\n")).unwrap();
    assert_eq!(delayed.rules[0].action_kind(), Action::Delay { max_wait: std::time::Duration::from_secs(2) });
    let e = one_rule(&format!("{base}    action: delay\n")).unwrap_err();
    assert!(e.message.contains("max_wait"), "{}", e.message);
    let e = one_rule(&format!("{base}    max_wait: 2s\n")).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("rules[0].max_wait"), "{}", e.message);
    for rollout in ["50%", "50", "12.5%", "0%", "100%", "100"] {
        assert!(one_rule(&format!("{base}    rollout: {rollout}\n")).is_ok(), "{rollout}");
    }
    for rollout in ["150%", "-1%", "half", "101", "inf%"] {
        let e = one_rule(&format!("{base}    rollout: {rollout}\n")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("rules[0].rollout"), "{rollout}");
    }
    for policy in ["fail_open", "fail_closed", "local"] {
        assert!(one_rule(&format!("{base}    on_store_error: {policy}\n")).is_ok(), "{policy}");
    }
    let e = one_rule(&format!("{base}    on_store_error: retry\n")).unwrap_err();
    assert!(e.message.contains("unknown on_store_error \"retry\""), "{}", e.message);
}

#[test]
fn rule_names_must_be_text() {
    let base = "    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
    let e = compile_text(&format!("rules:\n  - name: ''\n{base}")).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("rules[0].name"));
    let e = compile_text("rules:\n  - algorithm: fixed_window\n    limit: 1\n    window: 1s\n").unwrap_err();
    assert!(e.message.contains("missing field \"name\""), "{}", e.message);
    // A number is a fine name: it is read as written.
    let native = compile_text(&format!("rules:\n  - name: 007\n{base}")).unwrap();
    assert_eq!(native.rules[0].name(), "007");
}

#[test]
fn fingerprints_change_with_the_definition_only() {
    let a = "rules:\n  - name: r\n    match: {route: a, method: GET}\n    algorithm: fixed_window\n    limit: 1\n    window: 60s\n";
    let reordered = "rules:\n  - name: r\n    window: 1m\n    limit: 1\n    algorithm: fixed_window\n    match: {method: GET, route: a}\n";
    let changed = a.replace("limit: 1", "limit: 2");
    let fp = |t: &str| compile_text(t).unwrap().fingerprints[0].1;
    assert_eq!(fp(a), fp(reordered), "field order and spelling of equal durations do not matter");
    assert_ne!(fp(a), fp(&changed));
}

/// `store:` for `kind` (`redis` or `redis_cluster`) at `url`, with `tls` as the `tls:` block's
/// lines (each indented by the caller).
fn tls_store(kind: &str, url: &str, tls: &str) -> String {
    let target = match kind {
        "redis" => format!("  url: {url}\n"),
        _ => format!("  urls: [{url}]\n"),
    };
    format!("store:\n  kind: {kind}\n{target}  tls:\n{tls}")
}

#[test]
fn tls_files_are_read_into_the_store_settings() {
    let certs = floodgate_testkit::tls::TestCerts::generate();
    let (ca, cert, key) = (certs.ca(), certs.client_cert(), certs.client_key());
    for kind in ["redis", "redis_cluster"] {
        let text = tls_store(
            kind,
            "rediss://127.0.0.1:6380",
            &format!("    ca: {}\n    cert: {}\n    key: {}\n", ca.display(), cert.display(), key.display()),
        );
        let native = compile_text(&text).unwrap();
        let StoreConfig::Redis(redis) = &native.store else { panic!("a Redis store") };
        let tls = redis.tls.as_ref().expect("TLS settings");
        assert_eq!(tls.ca.as_ref().map(|p| p.bytes().to_vec()), Some(std::fs::read(&ca).unwrap()));
        assert_eq!(tls.cert.as_ref().map(|p| p.path().to_owned()), Some(cert.clone()));
        assert_eq!(tls.key.as_ref().map(|p| p.bytes().to_vec()), Some(std::fs::read(&key).unwrap()));
    }
    // Each optional: a CA alone, or nothing (the platform's roots).
    let ca_only =
        compile_text(&tls_store("redis", "rediss://h:1", &format!("    ca: {}\n", ca.display()))).unwrap();
    let StoreConfig::Redis(redis) = &ca_only.store else { panic!("a Redis store") };
    assert!(redis.tls.as_ref().is_some_and(|t| t.ca.is_some() && t.cert.is_none() && t.key.is_none()));
    let empty = compile_text("store: {kind: redis, url: 'rediss://h:1', tls: {}}\n").unwrap();
    let StoreConfig::Redis(redis) = &empty.store else { panic!("a Redis store") };
    assert_eq!(redis.tls, Some(RedisTls::default()));
    // rediss:// without tls: the platform's roots, no TLS settings.
    let plain = compile_text("store: {kind: redis, url: 'rediss://h:1'}\n").unwrap();
    let StoreConfig::Redis(redis) = &plain.store else { panic!("a Redis store") };
    assert_eq!(redis.tls, None);
}

#[test]
fn bad_tls_settings_are_located() {
    let certs = floodgate_testkit::tls::TestCerts::generate();
    let (ca, cert, key) = (certs.ca().display().to_string(), certs.client_cert(), certs.client_key());

    // On a URL without TLS: refused, at `tls`.
    let e = error(&tls_store("redis", "redis://h:1", &format!("    ca: {ca}\n")));
    assert_eq!((e.line, e.field.as_deref()), (Some(4), Some("store.tls")), "{}", e.message);
    assert!(e.message.contains("\"redis://h:1\" is not one: use rediss://"), "{}", e.message);
    let e = error("store: {kind: redis_cluster, urls: ['rediss://a:1', 'redis://b:2'], tls: {}}\n");
    assert_eq!(e.field.as_deref(), Some("store.tls"), "{}", e.message);
    assert!(e.message.contains("\"redis://b:2\""), "{}", e.message);

    // Unknown fields, with a suggestion.
    let e = error(&tls_store("redis", "rediss://h:1", &format!("    ca: {ca}\n    certificate: x.pem\n")));
    assert_eq!((e.line, e.field.as_deref()), (Some(6), Some("store.tls.certificate")), "{}", e.message);
    assert!(e.message.contains("unknown field \"certificate\" in the TLS settings"), "{}", e.message);
    let e = error("store: {kind: redis, url: 'rediss://h:1', tls: yes}\n");
    assert_eq!(e.field.as_deref(), Some("store.tls"), "{}", e.message);
    // `tls` is not a memory store's setting.
    let e = error("store: {kind: memory, tls: {}}\n");
    assert!(e.message.contains("does not apply to store kind memory"), "{}", e.message);

    // A missing file: its path and the reason, at its field.
    let missing = certs.dir().join("nowhere.pem").display().to_string();
    let e =
        error(&tls_store("redis_cluster", "rediss://h:1", &format!("    ca: {ca}\n    cert: {missing}\n")));
    assert_eq!((e.line, e.field.as_deref()), (Some(6), Some("store.tls.cert")), "{}", e.message);
    assert!(e.message.contains(&format!("cannot read {missing}")), "{}", e.message);
    let e = error(&tls_store("redis", "rediss://h:1", "    ca: ''\n"));
    assert_eq!(e.field.as_deref(), Some("store.tls.ca"), "{}", e.message);

    // A certificate without its key, a key without its certificate.
    let e = error(&tls_store("redis", "rediss://h:1", &format!("    cert: {}\n", cert.display())));
    assert_eq!((e.line, e.field.as_deref()), (Some(5), Some("store.tls.cert")), "{}", e.message);
    assert!(e.message.contains("needs its private key: add tls.key"), "{}", e.message);
    let e = error(&tls_store("redis", "rediss://h:1", &format!("    key: {}\n", key.display())));
    assert_eq!(e.field.as_deref(), Some("store.tls.key"), "{}", e.message);
    assert!(e.message.contains("needs its certificate: add tls.cert"), "{}", e.message);

    // Files that do not hold what they should: named, at their field.
    let e = error(&tls_store("redis", "rediss://h:1", &format!("    ca: {}\n", key.display())));
    assert_eq!((e.line, e.field.as_deref()), (Some(5), Some("store.tls.ca")), "{}", e.message);
    assert!(e.message.contains(&format!("the CA bundle {}: no certificate", key.display())), "{}", e.message);
    let swapped = format!("    cert: {}\n    key: {}\n", cert.display(), cert.display());
    let e = error(&tls_store("redis", "rediss://h:1", &swapped));
    assert_eq!((e.line, e.field.as_deref()), (Some(6), Some("store.tls.key")), "{}", e.message);
    assert!(e.message.contains("the client key") && e.message.contains("no private key"), "{}", e.message);
}

#[test]
fn a_client_key_of_another_certificate_is_refused_at_its_field() {
    let certs = floodgate_testkit::tls::TestCerts::generate();
    let (cert, other_key) = (certs.client_cert(), certs.server_key());
    let mismatched = format!("    cert: {}\n    key: {}\n", cert.display(), other_key.display());
    let e = error(&tls_store("redis", "rediss://h:1", &mismatched));
    assert_eq!((e.line, e.field.as_deref()), (Some(6), Some("store.tls.key")), "{}", e.message);
    let says = format!(
        "the client key {}: not the key of the client certificate {}",
        other_key.display(),
        cert.display()
    );
    assert!(e.message.contains(&says), "{}", e.message);
}

#[test]
fn ip_prefixes() {
    let rule = "    algorithm: fixed_window\n    limit: 10\n    window: 1m\n";
    let native = one_rule(&format!("{rule}    key: [ip]\n    ip_prefix: {{v4: 24, v6: 64}}\n")).unwrap();
    let prefix = native.rules[0].ip_grouping().expect("grouped");
    assert_eq!((prefix.v4(), prefix.v6()), (24, 64));
    let native = one_rule(&format!("{rule}    key: [ip]\n    ip_prefix: {{v6: 56}}\n")).unwrap();
    let prefix = native.rules[0].ip_grouping().unwrap();
    assert_eq!((prefix.v4(), prefix.v6()), (32, 56), "a family left out is keyed by the whole address");

    for (fields, message) in [
        ("key: [user]\n    ip_prefix: {v6: 64}", "the rule's key does not name ip"),
        ("key: [ip]\n    ip_prefix: {v6: 129}", "invalid ip_prefix v6 length 129: at most 128"),
        ("key: [ip]\n    ip_prefix: {v4: 0}", "must be at least 1"),
        ("key: [ip]\n    ip_prefix: {}", "ip_prefix needs v4, v6 or both"),
        ("key: [ip]\n    ip_prefix: {v7: 8}", "v7"),
    ] {
        let e = one_rule(&format!("{rule}    {fields}\n")).expect_err(fields);
        assert!(e.message.contains(message), "{fields}: {}", e.message);
        assert!(e.field.as_deref().is_some_and(|f| f.contains("ip_prefix")), "{fields}: {:?}", e.field);
    }
}

#[test]
fn a_template_rule_takes_its_limit_window_and_block_from_the_request() {
    let native = one_rule(
        "    key: [user]
    algorithm: sliding_log
    limit: { from: request, max: 10000 }
    window: { from: request, max: 1d, default: 60s }
    block_for: { from: request, max: 1h }
",
    )
    .unwrap();
    let rule = &native.rules[0];
    let statable = rule.statable_values().expect("statable");
    let limit = statable.limit_bound().unwrap();
    assert_eq!((limit.max.get(), limit.required), (10_000, true));
    let window = statable.window_bound().unwrap();
    assert_eq!((window.max, window.required), (Duration::from_secs(86_400), false));
    assert_eq!(statable.block_for_bound().map(|b| b.max), Some(Duration::from_secs(3600)));
    assert_eq!(rule.block_duration(), None);
    // The rule's own: the default window, and the bound as the placeholder of a required limit.
    assert!(matches!(rule.limit(), Limit::SlidingLog(l) if l.window() == Duration::from_secs(60)));

    let fixed =
        one_rule("    algorithm: fixed_window\n    limit: 5\n    window: 1m\n    block_for: 15m\n").unwrap();
    assert_eq!(fixed.rules[0].block_duration(), Some(Duration::from_secs(900)));
    assert!(fixed.rules[0].statable_values().is_none());
}

#[test]
fn stated_values_need_a_bound_and_a_known_source() {
    let bad = |body: &str, says: &str| {
        let e = one_rule(body).expect_err(body).message;
        assert!(e.contains(says), "{body}: {e}");
    };
    bad("    algorithm: fixed_window\n    limit: { from: request }\n    window: 1m\n", "max");
    bad(
        "    algorithm: fixed_window\n    limit: { from: header, max: 5 }\n    window: 1m\n",
        "unknown source \"header\"",
    );
    bad(
        "    algorithm: fixed_window\n    limit: { from: request, max: 5, default: 9 }\n    window: 1m\n",
        "default 9 is above max 5",
    );
    bad(
        "    algorithm: fixed_window\n    limit: 5\n    window: { from: request, max: 0s }\n",
        "longer than 0",
    );
    bad("    algorithm: concurrency\n    limit: 5\n    block_for: 1m\n", "concurrency");
    bad(
        "    algorithm: fixed_window\n    limit: 5\n    window: 1m\n    block_for: soon\n",
        "invalid block_for",
    );
    bad(
        "    algorithm: fixed_window\n    limit: { from: request, max: 5 }\n    window: 1m\n    shards: 2\n",
        "shards",
    );
}
