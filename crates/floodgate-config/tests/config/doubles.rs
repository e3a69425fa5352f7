//! Limits a Redis store cannot decide exactly — its Lua scripts compute in doubles, exact below
//! 2^53 — refused at load when the store is `redis` or `redis_cluster`, at the parameter out of
//! range, naming the rule and the bound; the largest values within it load, and every value loads
//! on the memory store.

use std::path::{Path, PathBuf};

use floodgate_config as config;

const REDIS: &str = "{kind: redis, url: 'redis://127.0.0.1:6379'}";
const CLUSTER: &str = "{kind: redis_cluster, urls: ['redis://127.0.0.1:7000']}";
const MEMORY: &str = "{kind: memory}";

/// 2^52: the first count or length (µs) out of range.
const HEADROOM: u64 = 1 << 52;

/// One rule, `big`, on `store`: `body` (its algorithm and parameters) starts on line 5.
fn on(store: &str, body: &str) -> String {
    format!("store: {store}\nrules:\n  - name: big\n    key: [user]\n{body}\n")
}

#[track_caller]
fn refused(text: &str, line: usize, field: &str, says: &[&str]) {
    let err = config::parse("big.yaml", text).expect_err("a limit out of the Redis store's range");
    assert_eq!((err.line, err.field.as_deref()), (Some(line), Some(field)), "{}", err.message);
    for part in says {
        assert!(err.message.contains(part), "{:?} does not say {part:?}", err.message);
    }
}

#[track_caller]
fn loads(text: &str) {
    if let Err(e) = config::parse("big.yaml", text) {
        panic!("{e}\n{text}");
    }
}

#[test]
fn a_sliding_window_whose_limit_times_window_reaches_2_53_is_refused_on_redis_and_redis_cluster() {
    // An hour is 3.6 × 10^9 µs: 2 501 999 × 3.6 × 10^9 < 2^53 ≤ 2 502 000 × 3.6 × 10^9.
    let window = |limit: u64| format!("    algorithm: sliding_window\n    limit: {limit}\n    window: 1h");
    for (store, kind) in [(REDIS, "redis"), (CLUSTER, "redis_cluster")] {
        refused(
            &on(store, &window(2_502_000)),
            6,
            "rules[0].limit",
            &[
                "rule \"big\": its sliding_window limit is out of range for store kind ",
                &format!("store kind {kind}, whose Lua scripts compute in doubles"),
                "limit × window is 2502000 × 3600000000 µs = 9007200000000000, not below 2^53 (9007199254740992)",
                "a window of 3600000000 µs takes a limit of at most 2501999",
            ],
        );
        loads(&on(store, &window(2_501_999)));
    }
    loads(&on(MEMORY, &window(2_502_000)));
    loads(&format!("rules:\n  - name: big\n    key: [user]\n{}\n", window(2_502_000)));
}

#[test]
fn a_count_of_2_52_or_more_is_refused_for_every_algorithm() {
    // (algorithm with its count, the count's line, its field); sliding_window's window is 1 µs, so
    // that its count alone reaches the bound.
    let algorithms: [(&str, usize, &str); 8] = [
        ("    algorithm: fixed_window\n    limit: {n}\n    window: 1m", 6, "limit"),
        ("    algorithm: sliding_window\n    limit: {n}\n    window: 1us", 6, "limit"),
        ("    algorithm: sliding_log\n    limit: {n}\n    window: 1m", 6, "limit"),
        ("    algorithm: token_bucket\n    rate: 1000/ms\n    burst: {n}", 7, "burst"),
        ("    algorithm: gcra\n    rate: 1000/ms\n    burst: {n}", 7, "burst"),
        ("    algorithm: concurrency\n    limit: {n}", 6, "limit"),
        ("    algorithm: quota\n    limit: {n}\n    period: day", 6, "limit"),
        ("    algorithm: budget\n    limit: {n}\n    ttl: 1h", 6, "limit"),
    ];
    for (body, line, field) in algorithms {
        let with = |n: u64| body.replace("{n}", &n.to_string());
        let algorithm = body.lines().next().unwrap().trim().trim_start_matches("algorithm: ");
        refused(
            &on(REDIS, &with(HEADROOM)),
            line,
            &format!("rules[0].{field}"),
            &[
                &format!("rule \"big\": its {algorithm} limit is out of range for store kind redis"),
                &format!(
                    "{field} 4503599627370496 is not below 2^52 (4503599627370496): at most 4503599627370495"
                ),
            ],
        );
        loads(&on(REDIS, &with(HEADROOM - 1)));
        loads(&on(MEMORY, &with(HEADROOM)));
    }
}

#[test]
fn a_window_lease_or_ttl_of_2_52_us_or_more_is_refused() {
    let algorithms: [(&str, &str); 5] = [
        ("    algorithm: fixed_window\n    limit: 10\n    window: {d}", "window"),
        ("    algorithm: sliding_window\n    limit: 1\n    window: {d}", "window"),
        ("    algorithm: sliding_log\n    limit: 10\n    window: {d}", "window"),
        ("    algorithm: concurrency\n    limit: 10\n    lease: {d}", "lease"),
        ("    algorithm: budget\n    limit: 10\n    ttl: {d}", "ttl"),
    ];
    for (body, field) in algorithms {
        let with = |us: u64| body.replace("{d}", &format!("{us}us"));
        refused(
            &on(CLUSTER, &with(HEADROOM)),
            7,
            &format!("rules[0].{field}"),
            &[
                "rule \"big\"",
                "store kind redis_cluster",
                &format!("{field} 4503599627370496 µs is not below 2^52 µs"),
                "at most 4503599627370495 µs",
            ],
        );
        loads(&on(CLUSTER, &with(HEADROOM - 1)));
        loads(&on(MEMORY, &with(HEADROOM)));
    }
}

#[test]
fn a_bucket_whose_fill_time_reaches_2_52_us_is_refused() {
    // One cell an hour: a burst of 1 250 999 fills in under 2^52 µs, 1 251 000 does not.
    for algorithm in ["token_bucket", "gcra"] {
        let bucket = |burst: u64| format!("    algorithm: {algorithm}\n    rate: 1/h\n    burst: {burst}");
        refused(
            &on(REDIS, &bucket(1_251_000)),
            7,
            "rules[0].burst",
            &[
                &format!("rule \"big\": its {algorithm} limit is out of range for store kind redis"),
                "the fill time, burst × refill interval, is 1251000 × 3600000000 µs = 4503600000000000 µs, not \
                 below 2^52 µs",
                "at this rate the burst is at most 1250999",
            ],
        );
        loads(&on(REDIS, &bucket(1_250_999)));
        loads(&on(MEMORY, &bucket(1_251_000)));
    }
}

#[test]
fn a_value_out_of_range_in_a_limit_that_varies_by_a_descriptor_is_refused_at_its_entry() {
    let body = "    algorithm: sliding_window\n    limit: {by: plan, values: {free: 10, pro: 2502000}, default: 1}\n    window: 1h";
    refused(&on(REDIS, body), 6, "rules[0].limit.values.pro", &["rule \"big\"", "at most 2501999"]);
    let default = "    algorithm: sliding_window\n    limit: {by: plan, values: {free: 10}, default: 2502000}\n    window: 1h";
    refused(&on(REDIS, default), 6, "rules[0].limit.default", &["rule \"big\"", "at most 2501999"]);
}

#[test]
fn a_sharded_limit_whose_shards_are_out_of_range_is_refused_at_shards() {
    // 3 cells an hour and a burst of 2 502 000 fill in 3.0 × 10^15 µs; split in two, one shard
    // gets 1 cell an hour and a burst of 1 251 000: 4.5036 × 10^15 µs, past 2^52.
    let sharded = |shards: u16| {
        format!(
            "store: {REDIS}\nrules:\n  - name: global\n    key: []\n    algorithm: token_bucket\n    rate: 3/h\n    \
             burst: 2502000\n    shards: {shards}\n"
        )
    };
    loads(&sharded(3));
    refused(
        &sharded(2),
        8,
        "rules[0].shards",
        &["rule \"global\": each shard of its token_bucket limit is out of range", "at most 1250999"],
    );
}

#[test]
fn an_envoy_rule_out_of_range_beside_a_native_redis_store_is_refused_in_its_file() {
    let dir = PathBuf::from("conf");
    let native = |store: &str| format!("store: {store}\nrules: []\n");
    let envoy = |n: u64| {
        format!(
            "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {{unit: second, requests_per_unit: {n}}}\n"
        )
    };
    let files =
        |store: &str, n: u64| vec![(dir.join("a.yaml"), native(store)), (dir.join("b.yaml"), envoy(n))];
    let err = config::from_files(&dir, files(REDIS, HEADROOM)).expect_err("out of the Redis store's range");
    assert_eq!(err.file.as_deref(), Some(Path::new("conf/b.yaml")), "{}", err.message);
    assert_eq!(err.line, Some(4), "{}", err.message);
    assert_eq!(err.field.as_deref(), Some("descriptors[0].rate_limit.requests_per_unit"), "{}", err.message);
    assert!(
        err.message.contains("its fixed_window limit is out of range for store kind redis"),
        "{}",
        err.message
    );
    assert!(err.message.contains("limit 4503599627370496 is not below 2^52"), "{}", err.message);
    config::from_files(&dir, files(REDIS, HEADROOM - 1)).expect("within range");
    config::from_files(&dir, files(MEMORY, HEADROOM)).expect("the memory store takes any count");
}
