//! Replay decisions equal the memory store's own decisions on a manual clock for the same
//! request sequence: every algorithm, every non-waiting action (`deny`, `shadow`, `tag`,
//! `rollout`), several rules at once (all-or-nothing), from JSON lines at microsecond times and
//! from combined lines at whole seconds.

use floodgate::{Descriptors, Engine, MemoryConfig, MemoryStore};
use floodgate_core::{ManualClock, Timestamp};
use floodgate_replay::{self as replay, Options};
use proptest::prelude::*;

use super::{T0, combined, temp};

const ALGORITHMS: [&str; 7] = [
    "algorithm: fixed_window\n    limit: {n}\n    window: {w}s",
    "algorithm: sliding_window\n    limit: {n}\n    window: {w}s",
    "algorithm: sliding_log\n    limit: {n}\n    window: {w}s",
    "algorithm: token_bucket\n    rate: {n}/s\n    burst: {n}",
    "algorithm: gcra\n    rate: 1/s\n    burst: {n}",
    "algorithm: concurrency\n    limit: {n}\n    lease: {w}s",
    "algorithm: quota\n    period: day\n    limit: {n}",
];

const ACTIONS: [&str; 4] = ["", "    action: shadow\n", "    action: tag\n", "    rollout: 50%\n"];

#[derive(Debug, Clone)]
struct Request {
    /// Milliseconds after the previous request.
    gap_ms: u64,
    user: u8,
    ip: u8,
    order: u8,
    post: bool,
}

fn request() -> impl Strategy<Value = Request> {
    (prop_oneof![Just(0u64), 0u64..400, 0u64..3000], 0u8..4, 0u8..3, 0u8..5, any::<bool>())
        .prop_map(|(gap_ms, user, ip, order, post)| Request { gap_ms, user, ip, order, post })
}

fn policy(a: usize, n: u64, w: u64, action: usize, b: usize, m: u64) -> String {
    let first = ALGORITHMS[a].replace("{n}", &n.to_string()).replace("{w}", &w.to_string());
    let second = ALGORITHMS[b].replace("{n}", &m.to_string()).replace("{w}", &(w + 1).to_string());
    format!(
        "rules:\n  - name: per-user\n    key: [user]\n    {first}\n{}  - name: orders-per-ip\n    match: {{ route: \"POST /api/orders/{{id}}\" }}\n    key: [ip]\n    {second}\n  - name: everyone\n    key: [global]\n    algorithm: sliding_window\n    limit: 40\n    window: 3s\n",
        ACTIONS[action]
    )
}

/// The memory store's decisions on a manual clock, asked directly.
fn reference(yaml: &str, requests: &[Request], whole_seconds: bool) -> Vec<bool> {
    let config = floodgate_config::parse("reference.yaml", yaml).expect("policy");
    let clock = ManualClock::new(Timestamp::from_micros(0));
    let engine = Engine::new(config.policy, MemoryStore::with_config(MemoryConfig::default(), clock.clone()));
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let mut t_ms = T0 as u64 * 1000;
    requests
        .iter()
        .map(|r| {
            t_ms += r.gap_ms;
            let at_us = if whole_seconds { t_ms / 1000 * 1_000_000 } else { t_ms * 1000 };
            clock.set(Timestamp::from_micros(at_us));
            let method = if r.post { "POST" } else { "GET" };
            let d = Descriptors::new()
                .with("user", format!("u{}", r.user))
                .with("ip", format!("192.0.2.{}", r.ip + 1))
                .with("route", format!("{method} /api/orders/{{id}}"))
                .with("method", method);
            runtime.block_on(async {
                let v = engine.check(&d, 1).await.expect("decided");
                if v.allowed && v.holds_permits() {
                    engine.release(&d, &v).await.expect("released");
                }
                v.allowed
            })
        })
        .collect()
}

fn replayed(yaml: &str, requests: &[Request], whole_seconds: bool) -> Vec<bool> {
    let log = temp(if whole_seconds { "diff.log" } else { "diff.jsonl" });
    let mut text = String::new();
    let mut t_ms = T0 * 1000;
    for r in requests {
        t_ms += r.gap_ms as i64;
        let method = if r.post { "POST" } else { "GET" };
        let request = format!("{method} /api/orders/{}", r.order);
        let (user, ip) = (format!("u{}", r.user), format!("192.0.2.{}", r.ip + 1));
        if whole_seconds {
            text.push_str(&combined(&ip, &user, t_ms.div_euclid(1000), &request, None));
        } else {
            let (method, path) = request.split_once(' ').expect("request");
            text.push_str(&format!(
                "{{\"time\": {}.{:03}, \"remote_addr\": \"{ip}\", \"method\": \"{method}\", \"path\": \"{path}\", \"status\": 200, \"uid\": \"{user}\"}}\n",
                t_ms / 1000,
                t_ms % 1000
            ));
        }
    }
    std::fs::write(&log, text).expect("log");
    let mut options = Options::new(vec![log.clone()]);
    options.routes = vec!["/api/orders/{id}".into()];
    options.record_decisions = true;
    if whole_seconds {
        options.maps = vec![floodgate_replay::mapping::FieldMap {
            descriptor: "user".into(),
            field: "remote_user".into(),
        }];
    } else {
        options.json_fields.extra.insert("user".into(), "uid".into());
    }
    let config = floodgate_config::parse("replayed.yaml", yaml).expect("policy");
    let (report, outcome) = replay::replay_with(&options, config, None).expect("replay");
    let _ = std::fs::remove_file(&log);
    let replay::ReplayReport::One(report) = report else { panic!("one policy") };
    assert_eq!(report.requests, requests.len() as u64);
    assert_eq!(report.denied, outcome.decisions.iter().filter(|a| !**a).count() as u64);
    outcome.decisions
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn replay_decides_as_the_memory_store_on_a_manual_clock(
        a in 0usize..7, n in 1u64..6, w in 1u64..4, action in 0usize..4,
        b in 0usize..7, m in 1u64..4,
        whole_seconds in any::<bool>(),
        requests in proptest::collection::vec(request(), 1..150),
    ) {
        let yaml = policy(a, n, w, action, b, m);
        let expected = reference(&yaml, &requests, whole_seconds);
        let got = replayed(&yaml, &requests, whole_seconds);
        prop_assert_eq!(got, expected, "policy:\n{}", yaml);
    }
}

#[test]
fn the_differential_test_sees_denials() {
    // The generated traffic is not all allowed: a burst of one user past a limit of 2.
    let requests: Vec<Request> =
        (0..6).map(|_| Request { gap_ms: 10, user: 0, ip: 0, order: 1, post: false }).collect();
    let yaml = policy(0, 2, 10, 0, 0, 5);
    let expected = reference(&yaml, &requests, false);
    assert_eq!(expected, [true, true, false, false, false, false]);
    assert_eq!(replayed(&yaml, &requests, false), expected);
}
