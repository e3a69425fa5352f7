//! Checks, peeks and reports: what consumes, and what does not.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::store::{Mode, Op};
use floodgate::{Limit, Store};
use floodgate_core::{FixedWindow, ManualClock};

use crate::{StoreUnderTest, every_algorithm};

fn fixed_window(limit: u64) -> Limit {
    let limit = NonZeroU64::new(limit).expect("a limit of at least 1");
    FixedWindow::try_new(limit, Duration::from_secs(60)).expect("a valid window").into()
}

/// An allowed check consumes its cost; a denied one consumes nothing, so a smaller request still
/// fits after it. For every algorithm, with costs above 1.
pub async fn check_consumes_only_when_allowed<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "check_consumes_only_when_allowed");
    for limit in every_algorithm(5) {
        let name = limit.algorithm_name();
        let key = t.key(name, "k");

        let first = t.check(&key, &limit, 3).await.decision;
        assert!(first.allowed, "{name}: 3 of 5 must fit a fresh key");
        assert_eq!(first.remaining, 2, "{name}: remaining after taking 3 of 5");

        let over = t.check(&key, &limit, 3).await.decision;
        assert!(!over.allowed, "{name}: 3 more must not fit in the 2 left");
        assert_eq!(over.remaining, 2, "{name}: a denial reports what is left");

        let rest = t.check(&key, &limit, 2).await.decision;
        assert!(rest.allowed, "{name}: the denied check must have consumed nothing, so 2 still fit");
        assert_eq!(rest.remaining, 0, "{name}: remaining after taking all 5");

        let empty = t.check(&key, &limit, 1).await.decision;
        assert!(!empty.allowed, "{name}: nothing is left");
    }
}

/// A peek answers what a check would, and changes nothing: it creates no state for a key never
/// seen, and repeating it gives the same answer. For every algorithm.
pub async fn peek_consumes_nothing<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "peek_consumes_nothing");
    for limit in every_algorithm(5) {
        let name = limit.algorithm_name();
        let key = t.key(name, "k");

        for _ in 0..3 {
            let fresh = t.peek(&key, &limit, 5).await.decision;
            assert!(fresh.allowed, "{name}: the whole capacity fits a key never seen");
            assert_eq!(fresh.remaining, 0, "{name}: remaining after a peek of the whole capacity");
        }
        assert!(!t.reset(&key).await, "{name}: peeks must not create state");

        assert!(t.check(&key, &limit, 4).await.decision.allowed, "{name}: 4 of 5 fit after peeks");
        let denied = t.peek(&key, &limit, 2).await.decision;
        assert!(!denied.allowed, "{name}: a peek of 2 with 1 left is denied, as a check would be");
        assert_eq!(t.peek(&key, &limit, 2).await.decision, denied, "{name}: a peek changes nothing");
        let fits = t.peek(&key, &limit, 1).await.decision;
        assert!(fits.allowed && fits.remaining == 0, "{name}: a peek of 1 with 1 left: {fits:?}");
        let taken = t.check(&key, &limit, 1).await.decision;
        assert!(taken.allowed, "{name}: the peeks must have left the last unit to take");
        assert_eq!(taken.remaining, 0, "{name}: remaining after the last unit");
    }
}

/// A report takes any cost, also beyond the capacity and from an exhausted limit, is never denied,
/// and counts in full: the limit stays exhausted until all of it has drained. For every algorithm,
/// and for every op of a multi-op report, shadow ops included.
pub async fn report_never_denies_and_consumes_past_the_limit<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "report_never_denies_and_consumes_past_the_limit");
    for limit in every_algorithm(5) {
        let name = limit.algorithm_name();
        let key = t.key(name, "k");

        // `StoreUnderTest::apply` asserts that every report is allowed and granted.
        let big = t.report(&key, &limit, 8).await.decision;
        assert_eq!(big.remaining, 0, "{name}: a report of 8 on a limit of 5 leaves nothing");
        t.report(&key, &limit, 1).await;

        let after = t.check(&key, &limit, 1).await.decision;
        assert!(!after.allowed, "{name}: a check after reporting past the limit is denied");
        if matches!(limit, Limit::TokenBucket(_) | Limit::Gcra(_)) {
            // 9 taken from a bucket of 5 refilled every 12s: one more fits after (9 − 5 + 1) × 12s.
            assert_eq!(
                after.retry_after,
                Some(Duration::from_secs(60)),
                "{name}: every reported unit counts, not just the capacity"
            );
        }
    }

    // One report over every algorithm at once, with a cost above every capacity, a shadow op and
    // an exhausted op among them: each op is charged in full.
    let limits = every_algorithm(5);
    let keys: Vec<_> = limits.iter().map(|l| t.key(&format!("multi-{}", l.algorithm_name()), "k")).collect();
    assert!(t.check(&keys[0], &limits[0], 5).await.decision.allowed, "exhausting the first op's limit");
    let ops: Vec<_> = keys
        .iter()
        .zip(&limits)
        .enumerate()
        .map(|(i, (k, l))| if i == 1 { k.shadow_op(l, 8) } else { k.op(l, 8) })
        .collect();
    let reported = t.apply(&ops, Mode::Report).await;
    for ((k, limit), r) in keys.iter().zip(&limits).zip(&reported) {
        let name = limit.algorithm_name();
        assert_eq!(r.decision.remaining, 0, "{name}: a multi-op report of 8 on a limit of 5 leaves nothing");
        assert!(!t.peek(k, limit, 1).await.decision.allowed, "{name}: the multi-op report was charged");
    }
}

/// All-or-nothing: when one enforced op of a check denies, no op consumes anything, wherever the
/// denying op sits among them. Every algorithm denies, and every algorithm is spared.
pub async fn denied_request_consumes_nothing_from_any_limit<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "denied_request_consumes_nothing_from_any_limit");
    for blocker in every_algorithm(1) {
        for victim in every_algorithm(5) {
            let (bn, vn) = (blocker.algorithm_name(), victim.algorithm_name());
            let block = t.key(&format!("{bn}-blocks-{vn}"), "blocker");
            assert!(t.check(&block, &blocker, 1).await.decision.allowed, "{bn}: exhausting the blocker");
            let a = t.key(&format!("{vn}-blocked-by-{bn}"), "a");
            let c = t.key(&format!("{vn}-blocked-by-{bn}"), "c");

            let orders: [[Op<'_>; 3]; 3] = [
                [block.op(&blocker, 1), a.op(&victim, 2), c.op(&victim, 2)],
                [a.op(&victim, 2), block.op(&blocker, 1), c.op(&victim, 2)],
                [a.op(&victim, 2), c.op(&victim, 2), block.op(&blocker, 1)],
            ];
            for ops in &orders {
                // `StoreUnderTest::apply` asserts that no op of the denied request has a grant.
                let results = t.apply(ops, Mode::Check).await;
                for (op, r) in ops.iter().zip(&results) {
                    let blocking = op.key == block.bytes();
                    assert_eq!(r.decision.allowed, !blocking, "{vn} with {bn}: each op's own decision");
                }
            }
            for victim_key in [&a, &c] {
                let full = t.peek(victim_key, &victim, 5).await.decision;
                assert!(full.allowed, "{vn}: charged by requests that {bn} denied: {full:?}");
            }
        }
    }
}

/// A shadow op (`enforce: false`) never denies the request, and consumes only when the request is
/// admitted and it would itself have allowed. Every algorithm as the shadow limit.
pub async fn shadow_op_does_not_block_and_consumes_only_when_admitted<S: Store>(
    make: impl FnOnce(ManualClock) -> S,
) {
    let t = StoreUnderTest::new(make, "shadow_op_does_not_block_and_consumes_only_when_admitted");
    let enforced = fixed_window(2);
    for (strict, loose) in every_algorithm(1).into_iter().zip(every_algorithm(5)) {
        let name = strict.algorithm_name();
        let e = t.key(&format!("enforced-{name}"), "k");
        let s = t.key(&format!("strict-shadow-{name}"), "k");
        let l = t.key(&format!("loose-shadow-{name}"), "k");
        let ops = [e.op(&enforced, 1), s.shadow_op(&strict, 1), l.shadow_op(&loose, 1)];

        let first = t.apply(&ops, Mode::Check).await;
        assert!(first.iter().all(|r| r.decision.allowed && r.grant.is_some()), "{name}: all fit: {first:?}");

        let second = t.apply(&ops, Mode::Check).await;
        assert!(!second[1].decision.allowed, "{name}: the strict shadow limit is exhausted");
        assert!(second[0].grant.is_some(), "{name}: a shadow denial must not block the request");
        assert!(second[1].grant.is_none(), "{name}: a shadow op that denies consumes nothing");
        assert!(second[2].grant.is_some(), "{name}: an allowing shadow op of an admitted request consumes");

        let third = t.apply(&ops, Mode::Check).await;
        assert!(!third[0].decision.allowed, "{name}: the enforced limit is exhausted");
        assert!(third[2].decision.allowed, "{name}: the loose shadow limit still allows");
        assert!(third[2].grant.is_none(), "{name}: a shadow op of a denied request consumes nothing");

        let rest = t.peek(&l, &loose, 3).await.decision;
        assert!(
            rest.allowed && rest.remaining == 0,
            "{name}: exactly 2 of 5 taken from the shadow: {rest:?}"
        );
    }
}
