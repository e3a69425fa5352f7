//! `max_keys`: a full store refuses or aggregates new keys, and never evicts live counters.

use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use floodgate::store::Mode;
use floodgate::{MemoryConfig, MemoryStore, OnFull, StoreError};
use floodgate_core::ManualClock;
use floodgate_testkit::{StoreUnderTest, every_algorithm};

use super::{admitted, apply};

fn capped(max_keys: usize, on_full: OnFull) -> impl Fn(ManualClock) -> MemoryStore<ManualClock> {
    move |clock| {
        MemoryStore::with_config(MemoryConfig { max_keys, on_full, ..MemoryConfig::default() }, clock)
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

/// With `OnFull::Aggregate`, the new keys of a rule share one overflow counter of that rule: a
/// flood of new keys gets the rule's limit once, in aggregate; other rules get their own overflow
/// counter; and the live counters that were there first are never evicted nor charged.
#[test]
fn a_full_aggregating_store_counts_the_new_keys_of_a_rule_together() {
    let t = StoreUnderTest::new(capped(2, OnFull::Aggregate), "a_full_aggregating_store");
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
    // Two live keys, and one overflow key per rule that met a full store.
    assert_eq!(t.store().stats().keys, 2 + 2 * 7);
}

/// A peek is what a check would answer. In a full aggregating store a check of a new key is decided
/// by its rule's overflow counter, so a peek of a new key must be too.
#[test]
fn a_peek_of_a_new_key_in_a_full_aggregating_store_answers_as_a_check_would() {
    let t = StoreUnderTest::new(capped(1, OnFull::Aggregate), "a_peek_of_a_new_key_in_a_full_store");
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
