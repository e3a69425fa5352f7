//! The sweeper: expired keys go, live ones stay, and sweeping never changes a decision.

use std::num::NonZeroU64;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use floodgate::Limit;
use floodgate::store::{Mode, Op, OpResult};
use floodgate_core::{Concurrency, FixedWindow, Grant, Rate, SlidingLog, Timestamp, TokenBucket};
use floodgate_testkit::{START, StoreUnderTest, TestKey, every_algorithm};

use super::{admitted, apply, memory, refund};

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

fn at(offset: Duration) -> Timestamp {
    START.saturating_add(offset)
}

#[test]
fn sweep_removes_keys_once_their_state_expires_and_not_before() {
    let t = StoreUnderTest::new(memory, "sweep_removes_keys_once_their_state_expires_and_not_before");
    let limits = every_algorithm(5);
    let keys: Vec<TestKey> = limits.iter().map(|l| t.key(l.algorithm_name(), "k")).collect();
    for (key, limit) in keys.iter().zip(&limits) {
        assert!(admitted(t.store(), &[key.op(limit, 1)]));
    }
    assert_eq!(t.store().stats().keys, 7);
    assert_eq!(t.store().sweep(), 0, "nothing has expired yet");

    // Taken at START (a UTC midnight): buckets are full again after one 12s cell, minute windows,
    // logs and leases end after 60s, a sliding window forgets after two windows, a daily quota at the
    // second midnight (its count is the previous day's for the whole of the next).
    for (expiry_s, swept, left) in [(12, 2, 5), (60, 3, 2), (120, 1, 1), (172_800, 1, 0)] {
        let expiry = at(Duration::from_secs(expiry_s));
        t.set(Timestamp::from_micros(expiry.as_micros() - 1));
        assert_eq!(t.store().sweep(), 0, "nothing is swept 1µs before it expires at +{expiry_s}s");
        t.set(expiry);
        assert_eq!(t.store().sweep(), swept, "keys expiring at +{expiry_s}s");
        assert_eq!(t.store().stats().keys, left, "keys left after +{expiry_s}s");
    }
    assert_eq!(t.store().stats().bytes_estimate, 0, "an empty store holds no key bytes");
}

#[test]
fn a_key_that_has_not_expired_is_not_swept_and_keeps_enforcing() {
    let t = StoreUnderTest::new(memory, "a_key_that_has_not_expired_is_not_swept_and_keeps_enforcing");
    let short: Limit = SlidingLog::try_new(nz(3), Duration::from_secs(10)).unwrap().into();
    let long: Limit = SlidingLog::try_new(nz(3), Duration::from_secs(60)).unwrap().into();
    let (s, l) = (t.key("short", "k"), t.key("long", "k"));
    assert!(admitted(t.store(), &[s.op(&short, 3), l.op(&long, 3)]));
    t.advance(Duration::from_secs(30));
    assert_eq!(t.store().sweep(), 1, "only the 10s log has expired");
    assert_eq!(t.store().stats().keys, 1);
    let d = apply(t.store(), &[l.op(&long, 1)], Mode::Check).unwrap().results[0].decision;
    assert!(!d.allowed, "the live key still enforces its limit after a sweep");
    assert_eq!(d.retry_after, Some(Duration::from_secs(30)), "and remembers when its entries leave");
    assert!(admitted(t.store(), &[s.op(&short, 3)]), "the swept key starts fresh");
}

/// What one step of traffic does, for the comparison of a swept and an unswept store.
#[derive(Debug, Clone, Copy)]
enum Step {
    Apply { key: usize, cost: u64, mode: Mode },
    Refund { grant: usize },
}

/// Two stores take the same traffic; one is swept after every step. Every decision and grant must
/// be the same: a swept key behaves exactly as the expired state it replaced.
#[test]
fn sweeping_never_changes_a_decision() {
    let limits = every_algorithm(4);
    let swept = StoreUnderTest::new(memory, "sweeping_never_changes_a_decision");
    let kept = StoreUnderTest::new(memory, "sweeping_never_changes_a_decision");
    // Two keys per algorithm, the same bytes in both stores.
    let keys: Vec<(TestKey, &Limit)> =
        limits.iter().flat_map(|l| ["a", "b"].map(|v| (TestKey::new(l.algorithm_name(), v), l))).collect();
    let mut rng = 0x2545_F491_4F6C_DD1D_u64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut grants: Vec<(usize, Grant)> = Vec::new();
    let mut removed = 0;
    for i in 0..3_000 {
        // Mostly small steps, sometimes long enough for every state but the quota to expire.
        let dt = match next(10) {
            0 => Duration::from_secs(next(300)),
            1..=3 => Duration::ZERO,
            _ => Duration::from_millis(next(20_000)),
        };
        swept.advance(dt);
        kept.advance(dt);
        let step = match next(8) {
            0 if !grants.is_empty() => Step::Refund { grant: next(grants.len() as u64) as usize },
            1 => Step::Apply { key: next(keys.len() as u64) as usize, cost: 1 + next(6), mode: Mode::Report },
            2 => Step::Apply { key: next(keys.len() as u64) as usize, cost: 1 + next(4), mode: Mode::Peek },
            _ => Step::Apply { key: next(keys.len() as u64) as usize, cost: 1 + next(4), mode: Mode::Check },
        };
        match step {
            Step::Apply { key, cost, mode } => {
                let (k, limit) = &keys[key];
                let ops = [k.op(limit, cost)];
                let a: OpResult = apply(swept.store(), &ops, mode).unwrap().results[0];
                let b: OpResult = apply(kept.store(), &ops, mode).unwrap().results[0];
                // A permit's lease id only names it; a fresh key numbers its permits afresh.
                let grant = |r: OpResult| r.grant.map(|g| (g.at, g.cost));
                assert_eq!(
                    (a.decision, grant(a)),
                    (b.decision, grant(b)),
                    "step {i}: {mode:?} of {cost} on {} key {key}",
                    limit.algorithm_name()
                );
                // Late releases of permits from before a sweep are the subject of
                // `a_late_release_after_the_key_was_swept_frees_no_other_permit`.
                if let (Some(g), false) = (a.grant, limit.holds_permits()) {
                    grants.push((key, g));
                }
            }
            Step::Refund { grant } => {
                let (key, g) = grants.swap_remove(grant);
                let (k, limit) = &keys[key];
                refund(swept.store(), k.bytes(), limit, g);
                refund(kept.store(), k.bytes(), limit, g);
            }
        }
        removed += swept.store().sweep();
    }
    assert!(removed > 100, "the sweeper had keys to remove ({removed})");
}

/// A permit taken before its key expired and was swept, released late (its holder outlived the
/// lease), must not free a permit taken since by someone else.
#[test]
fn a_late_release_after_the_key_was_swept_frees_no_other_permit() {
    let t = StoreUnderTest::new(memory, "a_late_release_after_the_key_was_swept_frees_no_other_permit");
    let limit: Limit = Concurrency::try_new(nz(1), Duration::from_secs(30)).unwrap().into();
    let key = t.key("permits", "k");
    let check = || apply(t.store(), &[key.op(&limit, 1)], Mode::Check).unwrap().results[0];

    let slow = check().grant.expect("the slow holder's permit");
    t.advance(Duration::from_secs(31));
    assert_eq!(t.store().sweep(), 1, "the lease ended, the key is swept");
    let current = check();
    assert!(current.grant.is_some(), "the next holder gets the only permit");
    // The slow holder finally finishes and releases its long-expired permit.
    refund(t.store(), key.bytes(), &limit, slow);
    let d = check().decision;
    assert!(!d.allowed, "the only permit is still held by the current holder, whatever the late release");
}

/// Threads hammer keys while another thread sweeps without pause, and the clock jumps between
/// rounds so that every key expires just as a round begins: no update may land in a removed slot,
/// so every round admits exactly the limit. Rounds go on (up to a bound) until the sweeper has
/// removed keys, so that a sweeper the scheduler kept waiting cannot make the test vacuous.
#[test]
fn sweeping_while_checking_never_loses_an_update() {
    const ROUNDS: usize = 300;
    const MAX_ROUNDS: usize = 20 * ROUNDS;
    const CHECKERS: usize = 4;
    const ATTEMPTS: usize = 6;
    const LIMIT: u64 = 10;
    let window: Limit = FixedWindow::try_new(nz(LIMIT), Duration::from_secs(1)).unwrap().into();
    let bucket: Limit = TokenBucket::try_new(Rate::per_second(nz(LIMIT)), nz(LIMIT)).unwrap().into();
    let t = StoreUnderTest::new(memory, "sweeping_while_checking_never_loses_an_update");
    let (w, b, w2, b2) =
        (t.key("window", "k"), t.key("bucket", "k"), t.key("window", "k2"), t.key("bucket", "k2"));
    let requests: [Vec<Op<'_>>; 3] =
        [vec![w.op(&window, 1)], vec![b.op(&bucket, 1)], vec![w2.op(&window, 1), b2.op(&bucket, 1)]];
    let admissions: [AtomicUsize; 3] = Default::default();
    let swept = AtomicUsize::new(0);
    let (stop, finished) = (AtomicBool::new(false), AtomicBool::new(false));
    let (start, end) = (Barrier::new(CHECKERS + 1), Barrier::new(CHECKERS + 1));
    let mut rounds = Vec::with_capacity(ROUNDS);

    thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                swept.fetch_add(t.store().sweep(), Ordering::Relaxed);
            }
        });
        for _ in 0..CHECKERS {
            s.spawn(|| {
                loop {
                    start.wait();
                    if finished.load(Ordering::Acquire) {
                        break;
                    }
                    for _ in 0..ATTEMPTS {
                        for (request, n) in requests.iter().zip(&admissions) {
                            if admitted(t.store(), request) {
                                n.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    end.wait();
                }
            });
        }
        let mut round = 0;
        while round < ROUNDS || (swept.load(Ordering::Relaxed) == 0 && round < MAX_ROUNDS) {
            // Whole seconds: the last round's window ends and its bucket is full again right now.
            t.set(at(Duration::from_secs(round as u64 + 1)));
            start.wait();
            end.wait();
            rounds.push(admissions.each_ref().map(|n| n.swap(0, Ordering::Relaxed)));
            round += 1;
        }
        finished.store(true, Ordering::Release);
        start.wait();
        stop.store(true, Ordering::Relaxed);
    });
    // Asserted once the threads are done, so that a failure cannot leave them waiting.
    for (round, counts) in rounds.iter().enumerate() {
        assert_eq!(*counts, [LIMIT as usize; 3], "round {round}: admissions of window, bucket, both");
    }
    assert!(swept.into_inner() > 0, "the sweeper removed expired keys while the checkers ran");
}
