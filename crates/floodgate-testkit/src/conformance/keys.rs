//! Keys: distinct keys never share state.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Limit, Store};
use floodgate_core::{FixedWindow, ManualClock};

use crate::StoreUnderTest;

/// Keys of different rules, or of different values under one rule, are separate counters, also
/// when their values contain the separators a naive encoding would confuse (`a:b` + `c` versus
/// `a` + `b:c`) or when one value is a prefix of another.
pub async fn keys_of_different_rules_are_independent<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "keys_of_different_rules_are_independent");
    let two = NonZeroU64::new(2).expect("2 is not 0");
    let limit: Limit = FixedWindow::try_new(two, Duration::from_secs(60)).expect("a valid window").into();
    let keys = [
        t.key("a", "u1"),
        t.key("b", "u1"),
        t.key("a", "u2"),
        t.key("a", "u"),
        t.key("a", ""),
        t.key("a:b", "c"),
        t.key("a", "b:c"),
        t.key("a", "u1 "),
    ];
    for (i, k) in keys.iter().enumerate() {
        assert!(keys[..i].iter().all(|earlier| earlier.bytes() != k.bytes()), "key {i} is distinct");
    }
    // Exhaust the keys one by one: each must still be fresh when its turn comes.
    for (i, k) in keys.iter().enumerate() {
        let first = t.check(k, &limit, 2).await.decision;
        assert!(first.allowed, "key {i} was charged through an earlier key: {first:?}");
        assert!(!t.check(k, &limit, 1).await.decision.allowed, "key {i} is exhausted");
    }
}
