//! `max_keys`: a full store refuses new keys or spreads them over overflow counters, and never
//! evicts live counters. (The distinct-key flood of a million keys is its own test binary,
//! `tests/flood`.)

use std::num::NonZeroU64;
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use floodgate::store::Mode;
use floodgate::{MemoryConfig, MemoryStore, OnFull, StoreError};
use floodgate_core::{FixedWindow, ManualClock};
use floodgate_testkit::{StoreUnderTest, every_algorithm};

use super::{admitted, apply};

fn capped(max_keys: usize, on_full: OnFull) -> impl Fn(ManualClock) -> MemoryStore<ManualClock> {
    spread(max_keys, on_full, MemoryConfig::default().overflow_counters)
}

fn spread(
    max_keys: usize,
    on_full: OnFull,
    overflow_counters: usize,
) -> impl Fn(ManualClock) -> MemoryStore<ManualClock> {
    move |clock| {
        let config = MemoryConfig { max_keys, on_full, overflow_counters, ..MemoryConfig::default() };
        MemoryStore::with_config(config, clock)
    }
}

#[test]
fn a_full_store_rejects_new_keys_and_keeps_serving_existing_ones() {
    let t = StoreUnderTest::new(capped(2, OnFull::Reject), "a_full_store_rejects_new_keys");
    let limit = every_algorithm(3).swap_remove(0); // a fixed window of 3 a minute
    let (k1, k2, k3) = (t.key("r", "k1"), t.key("r", "k2"), t.key("r", "k3"));
    assert!(admitted(t.store(), &[k1.op(&limit, 1)]));
    assert!(admitted(t.store(), &[k2.op(&limit, 3)]));

    for mode in [Mode::Check, Mode::Report] {
        match apply(t.store(), &[k1.op(&limit, 1), k3.op(&limit, 1)], mode) {
            Err(e @ StoreError::Full { max_keys: 2 }) => {
                assert!(!e.is_transient(), "a full store stays full")
            }
            other => panic!("{mode:?} of a new key in a full store: {other:?}"),
        }
    }
    assert_eq!(t.store().stats().overflows, 2);
    assert_eq!(t.store().stats().keys, 2);
    assert!(admitted(t.store(), &[k1.op(&limit, 2)]), "the failed requests consumed nothing from k1");
    assert!(!admitted(t.store(), &[k1.op(&limit, 1)]), "existing keys keep enforcing");
    assert!(!admitted(t.store(), &[k2.op(&limit, 1)]), "existing keys keep enforcing");

    t.advance(Duration::from_secs(60));
    assert_eq!(t.store().sweep(), 2, "the minute is over: both keys expire");
    assert!(admitted(t.store(), &[k3.op(&limit, 1)]), "expired keys made room for a new one");
}

/// With `OnFull::Aggregate` and one overflow counter, the new keys of a rule share that counter:
/// a flood of new keys gets the rule's limit once, in aggregate; other rules get their own
/// counter; and the live counters that were there first are never evicted nor charged.
#[test]
fn a_full_store_with_one_overflow_counter_counts_the_new_keys_of_a_rule_together() {
    let t = StoreUnderTest::new(spread(2, OnFull::Aggregate, 1), "a_full_aggregating_store");
    for limit in every_algorithm(5) {
        let name = limit.algorithm_name();
        let (a1, b1) = (t.key(&format!("{name}-a"), "1"), t.key(&format!("{name}-b"), "1"));
        let keys_before = t.store().stats().keys;
        if keys_before == 0 {
            assert!(admitted(t.store(), &[a1.op(&limit, 2)]));
            assert!(admitted(t.store(), &[b1.op(&limit, 1)]));
        }
        let flood = |rule: &str, n: usize| {
            (0..n).filter(|i| admitted(t.store(), &[t.key(rule, &format!("new-{i}")).op(&limit, 1)])).count()
        };
        assert_eq!(flood(&format!("{name}-a"), 40), 5, "{name}: 40 new keys of rule a share its limit of 5");
        assert_eq!(flood(&format!("{name}-b"), 20), 5, "{name}: 20 new keys of rule b share their own 5");
        if keys_before == 0 {
            let a1_left = apply(t.store(), &[a1.op(&limit, 3)], Mode::Peek).unwrap().results[0].decision;
            assert!(
                a1_left.allowed && a1_left.remaining == 0,
                "{name}: a1 kept its own counter: {a1_left:?}"
            );
            let b1_left = apply(t.store(), &[b1.op(&limit, 4)], Mode::Peek).unwrap().results[0].decision;
            assert!(
                b1_left.allowed && b1_left.remaining == 0,
                "{name}: b1 kept its own counter: {b1_left:?}"
            );
        }
    }
    // Two live keys, and one overflow counter per rule that met a full store (not counted as keys).
    let stats = t.store().stats();
    assert_eq!((stats.keys, stats.overflow_counters), (2, 2 * 7));
    let mut overflowed = t.store().overflow();
    overflowed.sort_by(|a, b| a.scope.cmp(&b.scope));
    assert_eq!(overflowed.len(), 2 * 7, "one entry per rule that overflowed");
    let a = t.key("fixed_window-a", "x");
    let a = overflowed.iter().find(|o| *o.scope == a.bytes()[..a.scope_len()]).expect("rule a overflowed");
    assert_eq!(a.decisions, 40, "every request of a new key of rule a was an overflow decision");
}

/// With many overflow counters, new keys in a full store are spread over them: a key that exhausts
/// its counter's limit takes it from the few keys that share that counter only, each counter still
/// enforces the rule's limit, and live keys keep theirs.
#[test]
fn a_full_store_spreads_new_keys_over_overflow_counters() {
    const COUNTERS: usize = 1024;
    for limit in every_algorithm(3) {
        let t = StoreUnderTest::new(spread(1, OnFull::Aggregate, COUNTERS), "spreads_new_keys");
        let name = limit.algorithm_name();
        let live = t.key(name, "live");
        assert!(admitted(t.store(), &[live.op(&limit, 3)]));
        // 48 flood keys, one request each, over 1024 counters of limit 3: for one to be denied, four
        // would have to land on one counter.
        let flood: Vec<_> = (0..48).map(|i| t.key(name, &format!("flood-{i}"))).collect();
        let admitted_flood = flood.iter().filter(|k| admitted(t.store(), &[k.op(&limit, 1)])).count();
        assert!(admitted_flood >= 44, "{name}: {admitted_flood} of 48 new keys over {COUNTERS} counters");
        // One flood key hammering: it exhausts its own counter, and only that one.
        let hammered = (0..10).filter(|_| admitted(t.store(), &[flood[0].op(&limit, 1)])).count();
        assert!(hammered < 3, "{name}: its counter holds at most 3, and it already spent 1");
        // 60 newcomers: at most one counter is spent.
        let newcomers = (0..60)
            .filter(|i| admitted(t.store(), &[t.key(name, &format!("new-{i}")).op(&limit, 1)]))
            .count();
        assert!(newcomers >= 55, "{name}: {newcomers} of 60 newcomers admitted");
        assert!(!admitted(t.store(), &[live.op(&limit, 1)]), "{name}: the live key keeps its own counter");
        assert!(t.store().stats().overflow_counters <= 48 + 60);
    }
}

/// A peek is what a check would answer. In a full aggregating store a check of a new key is decided
/// by its rule's overflow counter, so a peek of a new key must be too.
#[test]
fn a_peek_of_a_new_key_in_a_full_aggregating_store_answers_as_a_check_would() {
    let t = StoreUnderTest::new(spread(1, OnFull::Aggregate, 1), "a_peek_of_a_new_key_in_a_full_store");
    let limit = every_algorithm(2).swap_remove(0);
    assert!(admitted(t.store(), &[t.key("r", "first").op(&limit, 1)]));
    assert!(admitted(t.store(), &[t.key("r", "new-1").op(&limit, 2)]), "the overflow counter takes 2");
    let newcomer = t.key("r", "new-2");
    let check_would = apply(t.store(), &[newcomer.op(&limit, 1)], Mode::Check).unwrap().results[0].decision;
    assert!(!check_would.allowed, "the overflow counter of rule r is exhausted");
    let peek = apply(t.store(), &[newcomer.op(&limit, 1)], Mode::Peek).unwrap().results[0].decision;
    assert_eq!(peek, check_would, "a peek of a new key must answer what a check of it answers");
}

/// The first checks of one new key racing in a store with room for exactly that key: none may be
/// refused as "full", since the key they race to create is the one that fits.
#[test]
fn racing_first_checks_of_one_new_key_are_not_refused_as_full() {
    first_checks_of_one_new_key_race(OnFull::Reject);
}

/// The first checks of one new key racing in a store with room for exactly that key: all count on
/// that key, none on the rule's overflow key, so a limit of 1 admits exactly one of them.
#[test]
fn racing_first_checks_of_one_new_key_are_not_counted_on_the_overflow_key() {
    first_checks_of_one_new_key_race(OnFull::Aggregate);
}

fn first_checks_of_one_new_key_race(on_full: OnFull) {
    const THREADS: usize = 4;
    for trial in 0..500 {
        let t = StoreUnderTest::new(capped(1, on_full), "racing_first_checks_of_one_new_key");
        let limit = every_algorithm(1).swap_remove(0);
        let key = t.key("r", "k");
        let barrier = Barrier::new(THREADS);
        let outcomes: Vec<Result<bool, String>> = thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        apply(t.store(), &[key.op(&limit, 1)], Mode::Check)
                            .map(|a| a.results[0].decision.allowed)
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let admitted = outcomes.iter().filter(|o| matches!(o, Ok(true))).count();
        assert!(
            outcomes.iter().all(Result::is_ok) && admitted == 1,
            "{on_full:?}, trial {trial}: {THREADS} first checks of one key with limit 1 and room for it: {outcomes:?}"
        );
    }
}

/// A key decided on an overflow counter that later finds room in the table starts from its
/// counter's state, not afresh: it never gets its limit twice in one window.
#[test]
fn a_key_moving_from_its_overflow_counter_into_the_table_keeps_what_it_spent() {
    let short: floodgate::Limit =
        FixedWindow::try_new(NonZeroU64::new(5).unwrap(), Duration::from_secs(1)).unwrap().into();
    for limit in every_algorithm(5) {
        let name = limit.algorithm_name();
        let t = StoreUnderTest::new(spread(1, OnFull::Aggregate, 8), "moving_into_the_table");
        // A key that expires within a second holds the one place.
        assert!(admitted(t.store(), &[t.key("blocker", "1").op(&short, 1)]));
        let late = t.key(name, "late");
        assert!(admitted(t.store(), &[late.op(&limit, 4)]), "{name}: decided on its overflow counter");
        assert_eq!(t.store().stats().keys, 1);
        t.advance(Duration::from_secs(1));
        assert_eq!(t.store().sweep(), 1, "{name}: the blocker expired");
        assert!(admitted(t.store(), &[late.op(&limit, 1)]), "{name}: one left, now in the table");
        assert_eq!(t.store().stats().keys, 1, "{name}: the key moved into the freed place");
        assert!(!admitted(t.store(), &[late.op(&limit, 1)]), "{name}: 4 on the counter + 1 = its limit of 5");
    }
}

/// A refund of a grant taken on an overflow counter goes back to that counter: a concurrency
/// permit released by a new key in a full store frees its place.
#[test]
fn a_refund_of_a_key_on_its_overflow_counter_goes_back_to_the_counter() {
    let t = StoreUnderTest::new(spread(1, OnFull::Aggregate, 1), "refund_on_the_counter");
    let limit = every_algorithm(1).into_iter().find(|l| l.algorithm_name() == "concurrency").unwrap();
    assert!(admitted(t.store(), &[t.key("r", "live").op(&limit, 1)]));
    let newcomer = t.key("r", "new");
    let grant = apply(t.store(), &[newcomer.op(&limit, 1)], Mode::Check).unwrap().results[0];
    assert!(grant.decision.allowed);
    assert!(!admitted(t.store(), &[t.key("r", "other").op(&limit, 1)]), "the one counter's permit is held");
    super::ready(floodgate::Store::refund(t.store(), newcomer.bytes(), &limit, grant.grant.unwrap()))
        .unwrap();
    assert!(
        admitted(t.store(), &[t.key("r", "other").op(&limit, 1)]),
        "the release freed the counter's permit"
    );
}

/// The bound in docs/configuration.md: after a flood of `F` distinct keys, one request each, over
/// `B` counters of limit `L`, a newcomer's counter holds a Poisson(`F/B`) number of flood requests,
/// and the newcomer is refused when they reach `L`.
#[test]
fn newcomers_are_refused_as_often_as_the_documented_bound_says() {
    const COUNTERS: usize = 4096;
    const FLOOD: usize = 200_000;
    const NEWCOMERS: usize = 2000;
    const LIMIT: u64 = 50;
    let t = StoreUnderTest::new(spread(1, OnFull::Aggregate, COUNTERS), "the_documented_bound");
    let limit: floodgate::Limit =
        FixedWindow::try_new(NonZeroU64::new(LIMIT).unwrap(), Duration::from_secs(3600)).unwrap().into();
    assert!(admitted(t.store(), &[t.key("r", "live").op(&limit, 1)]));
    for i in 0..FLOOD {
        admitted(t.store(), &[t.key("r", &format!("flood-{i}")).op(&limit, 1)]);
    }
    let admitted_newcomers = (0..NEWCOMERS)
        .filter(|i| admitted(t.store(), &[t.key("r", &format!("newcomer-{i}")).op(&limit, 1)]))
        .count();
    let measured = admitted_newcomers as f64 / NEWCOMERS as f64;
    // The newcomers before one on the same counter add about NEWCOMERS / 2 / COUNTERS.
    let lambda = (FLOOD as f64 + NEWCOMERS as f64 / 2.0) / COUNTERS as f64;
    let predicted = poisson_cdf(lambda, LIMIT - 1);
    assert!(
        (measured - predicted).abs() < 0.04,
        "admitted {measured:.3} of newcomers, the bound says {predicted:.3} (λ = {lambda:.1})"
    );
}

/// P(X ≤ k) for X ~ Poisson(λ).
fn poisson_cdf(lambda: f64, k: u64) -> f64 {
    let mut term = (-lambda).exp();
    let mut sum = term;
    for i in 1..=k {
        term *= lambda / i as f64;
        sum += term;
    }
    sum
}
