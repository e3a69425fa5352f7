use std::num::NonZeroU64;

use floodgate::Descriptors;
use floodgate_core::FixedWindow;

use super::*;

fn rule(name: &str, key: &[&str]) -> Rule {
    let window = FixedWindow::try_new(NonZeroU64::MIN, Duration::from_secs(60)).unwrap();
    Rule::new(name, window).key(key.iter().copied())
}

fn config() -> ConfigView {
    ConfigView { version: 3, hash: "abc".into() }
}

fn store() -> StoreView {
    StoreView { kind: "memory", ..StoreView::default() }
}

#[test]
fn a_tick_turns_what_each_rule_decided_into_one_second_per_rule() {
    let live = Live::new();
    let (per_user, global) = (rule("per-user", &["user"]), rule("global", &[]));
    let names = ["per-user", "global"];
    let u1 = Descriptors::new().with("user", "u1");
    let hit = Hit::new(&u1, 1);
    for _ in 0..7 {
        live.record(None, &per_user, Outcome::Allowed, Some(&hit));
    }
    for _ in 0..3 {
        live.record(None, &per_user, Outcome::Denied, Some(&hit));
    }
    live.record(None, &global, Outcome::ErrorDenied, Some(&hit));
    live.record_decision(Duration::from_micros(40), false);
    live.record_decision(Duration::from_micros(40), true);

    let rules = || names.iter().map(|n| (None, *n));
    let second = live.tick(100, rules(), &config(), &store());
    assert_eq!(second.t, 100);
    assert_eq!(second.rules.len(), 2);
    let user = &second.rules[0];
    assert_eq!((user.rule.as_str(), user.decisions, user.denials), ("per-user", 10, 3));
    assert_eq!(user.outcomes.0[Outcome::Allowed as usize], 7);
    assert_eq!((second.rules[1].decisions, second.rules[1].denials), (1, 1));
    assert_eq!(second.store_errors, 1);
    let latency = second.latency_us.unwrap();
    assert!(latency.p50 > 25.0 && latency.p50 <= 50.0, "{latency:?}: both in the 25–50 µs bucket");

    // The next second counts only what came after.
    live.record(None, &per_user, Outcome::Allowed, Some(&hit));
    let second = live.tick(101, rules(), &config(), &store());
    assert_eq!((second.rules[0].decisions, second.rules[1].decisions), (1, 0));
    assert_eq!(second.latency_us, None);
    assert_eq!(live.history().len(), 2);

    let json: serde_json::Value = serde_json::from_str(&json(&*second)).unwrap();
    assert_eq!(json["rules"][0]["outcomes"]["allowed"], 1);
    assert_eq!(json["rules"][0]["outcomes"]["local_denied"], 0);
}

#[test]
fn the_snapshot_names_the_keys_denied_most_in_the_last_minute_and_forgets_older_ones() {
    let live = Live::new();
    let per_ip = rule("per-ip", &["ip", "route"]);
    let names = ["per-ip"];
    let rules = || names.iter().map(|n| (None, *n));
    let flood = Descriptors::new().with("ip", "203.0.113.9").with("route", "POST /login");
    for _ in 0..500 {
        live.record(None, &per_ip, Outcome::Denied, Some(&Hit::new(&flood, 1)));
    }
    for i in 0..2_000 {
        let other =
            Descriptors::new().with("ip", format!("10.0.{}.{}", i / 256, i % 256)).with("route", "GET /");
        live.record(None, &per_ip, Outcome::Denied, Some(&Hit::new(&other, 1)));
        live.record(None, &per_ip, Outcome::Allowed, Some(&Hit::new(&other, 1)));
    }
    live.tick(1, rules(), &config(), &store());
    let snapshot = live.snapshot(&config(), &store());
    assert_eq!(snapshot.config.version, 3);
    let stats = &snapshot.rules[0];
    assert_eq!((stats.decisions_per_s, stats.denials_per_s), (4_500, 2_500));
    assert!((stats.denial_ratio_last_minute - 2_500.0 / 4_500.0).abs() < 1e-9);
    let top = &stats.top_offenders[0];
    assert_eq!(top.key, "ip=203.0.113.9 route=POST /login");
    assert!(top.denied - top.error <= 500 && top.denied >= 500, "{top:?}");
    assert!(stats.top_offenders.len() <= TOP_OFFENDERS);

    // A minute of quiet later, the flood is forgotten.
    for t in 2..=61 {
        live.tick(t, rules(), &config(), &store());
    }
    let snapshot = live.snapshot(&config(), &store());
    assert!(snapshot.rules[0].top_offenders.is_empty(), "{:?}", snapshot.rules[0].top_offenders);
    assert_eq!(snapshot.rules[0].outcomes_last_minute.decisions(), 0);
}

#[test]
fn history_keeps_five_minutes_and_rules_no_longer_in_force_are_forgotten() {
    let live = Live::new();
    let names = ["a", "b"];
    for t in 0..400 {
        live.tick(t, names.iter().map(|n| (None, *n)), &config(), &store());
    }
    let history = live.history();
    assert_eq!(history.len(), HISTORY_SECONDS);
    assert_eq!(history[0].t, 100);
    let second = live.tick(400, names[..1].iter().map(|n| (None, *n)), &config(), &store());
    assert_eq!(second.rules.len(), 1);
    assert_eq!(live.rules.len(), 1);
    // An Envoy domain's rule is labelled domain/rule.
    let second = live.tick(401, [(Some("edge"), names[0])], &config(), &store());
    assert_eq!(second.rules[0].rule, "edge/a");
}

#[test]
fn subscribers_get_the_history_then_each_tick_and_their_stream_ends_on_close() {
    let live = Live::new();
    let names = ["a"];
    live.tick(1, names.iter().map(|n| (None, *n)), &config(), &store());
    let (history, mut receiver) = live.subscribe().unwrap();
    assert_eq!(history.len(), 1);
    live.tick(2, names.iter().map(|n| (None, *n)), &config(), &store());
    let event = receiver.try_recv().unwrap();
    assert!(event.starts_with("event: second\ndata: {\"t\":2,"), "{event}");
    assert!(event.contains("\n\nevent: stats\ndata: {\"t\":2,"), "{event}");
    live.close();
    assert!(matches!(receiver.try_recv(), Err(broadcast::error::TryRecvError::Closed)));
    assert!(live.subscribe().is_none());
}

#[test]
fn percentiles_interpolate_within_buckets() {
    let mut counts = vec![0u64; DURATION_BUCKETS.len() + 1];
    // 100 decisions between 100 and 250 µs.
    counts[4] = 100;
    let l = percentiles(&counts).unwrap();
    assert!((l.p50 - 175.0).abs() < 1e-6 && (l.p99 - 248.5).abs() < 1e-6, "{l:?}");
    assert_eq!(percentiles(&vec![0; DURATION_BUCKETS.len() + 1]), None);
}

#[test]
fn each_view_counts_what_it_observes_of_a_domain_and_a_new_domain_counts_on() {
    use std::collections::BTreeSet;

    use floodgate::store::{MemoryConfig, MemoryStore};
    use floodgate::{Impossible, Mode};
    use floodgate_core::{ManualClock, Timestamp};

    use crate::control::Domain;
    use crate::metrics::Metrics;

    let window =
        |limit| FixedWindow::try_new(NonZeroU64::new(limit).unwrap(), Duration::from_secs(60)).unwrap();
    let rules = || vec![Rule::new("per-ip", window(2)).key(["ip"]), Rule::new("global", window(100))];
    let metrics = Metrics::new("memory");
    let domain = || Domain::new(None, floodgate::Policy::new(rules()).unwrap(), &metrics, &BTreeSet::new());
    let memory =
        MemoryStore::with_config(MemoryConfig::default(), ManualClock::new(Timestamp::from_micros(0)));
    let (first, second) = (Arc::new(Live::new()), Arc::new(Live::new()));
    let observe = |live: &Arc<Live>, domain: &Domain, ip: &str| {
        let descriptors = Descriptors::new().with("ip", ip);
        let hits = [Hit::new(&descriptors, 1)];
        let result = domain.policy.evaluate_now(&memory, Mode::Check, &hits, Impossible::Error).unwrap();
        let observed =
            Observed { api: Api::Check, domain, hits: &hits, result: &result, took: Duration::ZERO };
        LiveObserver(Arc::clone(live)).observe(&observed);
    };
    let names = ["per-ip", "global"];
    let totals = |live: &Live, t: u64| {
        let second = live.tick(t, names.iter().map(|n| (None, *n)), &config(), &store());
        second.rules.iter().map(|r| (r.decisions, r.denials)).collect::<Vec<_>>()
    };

    // The first view fills the domain's rules; the second, observing the same domain, still
    // counts into its own totals, not the first's.
    let old = domain();
    observe(&first, &old, "10.0.0.1");
    observe(&second, &old, "10.0.0.1");
    observe(&first, &old, "10.0.0.1");
    assert_eq!(totals(&first, 1), [(2, 1), (2, 0)], "per-ip denied 10.0.0.1's third request");
    assert_eq!(totals(&second, 1), [(1, 0), (1, 0)]);

    // A reloaded configuration's domain counts on into the same rules' totals, denied keys too.
    let new = domain();
    for _ in 0..3 {
        observe(&first, &new, "10.0.0.2");
    }
    assert_eq!(totals(&first, 2), [(3, 1), (3, 0)]);
    let snapshot = first.snapshot(&config(), &store());
    let mut offenders: Vec<&str> = snapshot.rules[0].top_offenders.iter().map(|o| o.key.as_str()).collect();
    offenders.sort_unstable();
    assert_eq!(offenders, ["ip=10.0.0.1", "ip=10.0.0.2"]);
}
