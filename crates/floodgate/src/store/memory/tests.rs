//! The slot's word: exactness against the algorithms, and linearizability under threads against
//! requests that lock the same key.

use std::num::NonZeroU64;
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use floodgate_core::{Algorithm, FixedWindow, Gcra, ManualClock, Rate, SlidingWindow, TokenBucket};
use proptest::prelude::*;

use super::slot::State;
use super::*;
use crate::OnStoreError;
use crate::store::OpResult;

const START: Timestamp = Timestamp::from_secs(1_700_000_000);

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

fn store() -> (MemoryStore<ManualClock>, ManualClock) {
    let clock = ManualClock::new(START);
    (MemoryStore::with_config(MemoryConfig::default(), clock.clone()), clock)
}

fn op<'a>(key: &'a [u8], limit: &'a Limit, cost: u64) -> Op<'a> {
    Op {
        key,
        scope_len: 0,
        limit,
        cost,
        enforce: true,
        on_error: OnStoreError::FailOpen,
        prefetch: None,
        block_for: None,
    }
}

fn apply<C: Clock>(store: &MemoryStore<C>, ops: &[Op<'_>], mode: Mode) -> Applied {
    let mut out = Applied::default();
    store.apply_now(ops, mode, &mut out).unwrap();
    out
}

fn in_word<C: Clock>(store: &MemoryStore<C>, key: &[u8]) -> bool {
    let guard = store.inner.map.guard();
    store.inner.map.get(&store.inner.hashing.lookup(key), &guard).is_some_and(Slot::in_word)
}

/// A roomy limit that never denies, for the other key of a multi-limit request.
fn roomy() -> Limit {
    FixedWindow::try_new(nz(1 << 40), Duration::from_secs(60)).unwrap().into()
}

fn buckets(capacity: u64) -> [Limit; 2] {
    let rate = Rate::try_new(nz(capacity), Duration::from_secs(60)).unwrap();
    [
        TokenBucket::try_new(rate, nz(capacity)).unwrap().into(),
        Gcra::try_new(rate, nz(capacity)).unwrap().into(),
    ]
}

#[test]
fn slot_sizes_stay_compact() {
    assert_eq!(std::mem::size_of::<State>(), 32);
    assert!(std::mem::size_of::<Slot>() <= 48, "{}", std::mem::size_of::<Slot>());
}

#[test]
fn a_bucket_key_lives_in_its_word_between_requests() {
    let other = roomy();
    for limit in buckets(10) {
        let (store, _) = store();
        let (key, x) = (b"bucket".as_slice(), b"x".as_slice());
        apply(&store, &[op(key, &limit, 1)], Mode::Check);
        assert!(in_word(&store, key), "a single-limit check puts a bucket into the word");
        apply(&store, &[op(key, &limit, 1), op(x, &other, 1)], Mode::Check);
        assert!(in_word(&store, key), "a locking request puts back what it took");
        let window = roomy();
        apply(&store, &[op(key, &window, 1)], Mode::Check);
        assert!(!in_word(&store, key), "another algorithm's state is behind the lock");
        let d = apply(&store, &[op(key, &limit, 1)], Mode::Check).results[0].decision;
        assert_eq!(d.remaining, 9, "a key whose algorithm changed starts afresh");
        assert!(in_word(&store, key));
        assert!(store.reset_now(key).0);
        assert!(!in_word(&store, key));
    }
    let (store, _) = store();
    let sliding: Limit = SlidingWindow::try_new(nz(10), Duration::from_secs(60)).unwrap().into();
    apply(&store, &[op(b"s", &sliding, 1)], Mode::Check);
    assert!(!in_word(&store, b"s"));
}

#[test]
fn a_tat_too_large_for_the_word_stays_behind_the_lock_and_exact() {
    let limit: Limit = TokenBucket::try_new("1000000/s".parse().unwrap(), nz(10)).unwrap().into();
    let Limit::TokenBucket(bucket) = &limit else { unreachable!() };
    let (store, clock) = store();
    let mut tat = 0u64;
    let huge = 1 << 62;
    let (reported, _) = bucket.report(&mut tat, clock.now(), huge);
    let got = apply(&store, &[op(b"k", &limit, huge)], Mode::Report).results[0];
    assert_eq!(got.decision, reported);
    assert!(!in_word(&store, b"k"), "a TAT past 62 bits stays behind the lock");
    clock.advance(Duration::from_secs(1));
    let expected = bucket.decide(&tat, clock.now(), 1);
    assert!(!expected.allowed);
    assert_eq!(apply(&store, &[op(b"k", &limit, 1)], Mode::Check).results[0].decision, expected);
}

/// One step of a sequence applied to one key, both by the store and by the algorithm on a plain
/// state.
#[derive(Debug, Clone)]
enum Step {
    Check(u64),
    Peek(u64),
    Report(u64),
    /// A check together with a roomy limit on another key: the locked path.
    Locked(u64),
    /// Gives back the last grant.
    Refund,
    Wait(u64),
}

fn step(burst: u64) -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1..=burst).prop_map(Step::Check),
        1 => (1..=burst).prop_map(Step::Peek),
        1 => prop_oneof![(1..=burst * 2), Just(1 << 62), Just(u64::MAX)].prop_map(Step::Report),
        2 => (1..=burst).prop_map(Step::Locked),
        1 => Just(Step::Refund),
        2 => (0..5_000_000u64).prop_map(Step::Wait),
    ]
}

/// Runs `steps` on one key of `limit` (whose algorithm is `a`), in the store and on a plain state.
fn same_as_the_algorithm<A: Algorithm<State = u64>>(
    a: &A,
    limit: &Limit,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let other = roomy();
    let (store, clock) = store();
    let mut tat = 0u64;
    let mut last = None;
    let clamp = |c: u64| c.min(a.capacity());
    for s in steps {
        let now = clock.now();
        let (expected, got) = match *s {
            Step::Check(c) | Step::Locked(c) => {
                let (decision, grant) = a.check(&mut tat, now, clamp(c)).unwrap();
                let mut ops = vec![op(b"k", limit, clamp(c))];
                if matches!(s, Step::Locked(_)) {
                    ops.push(op(b"x", &other, 1));
                }
                last = grant.or(last);
                (OpResult { decision, grant, previous: None }, apply(&store, &ops, Mode::Check).results[0])
            }
            Step::Peek(c) => {
                let decision = a.decide(&tat, now, clamp(c));
                let got = apply(&store, &[op(b"k", limit, clamp(c))], Mode::Peek).results[0];
                (OpResult { decision, grant: None, previous: None }, got)
            }
            Step::Report(c) => {
                let (decision, grant) = a.report(&mut tat, now, c);
                last = Some(grant);
                let got = apply(&store, &[op(b"k", limit, c)], Mode::Report).results[0];
                (OpResult { decision, grant: Some(grant), previous: None }, got)
            }
            Step::Refund => {
                if let Some(g) = last.take() {
                    a.refund(&mut tat, now, &g);
                    store.refund_now(b"k", limit, g);
                }
                continue;
            }
            Step::Wait(us) => {
                clock.advance(Duration::from_micros(us));
                continue;
            }
        };
        prop_assert_eq!(got, expected, "{:?} at {:?}", s, now);
    }
    Ok(())
}

proptest! {
    /// Whether a key's TAT is in the word or behind the lock, every decision and grant is the
    /// algorithm's own.
    #[test]
    fn decisions_in_the_word_are_the_algorithms_exactly(
        interval_us in 1u64..2_000_000,
        burst in 1u64..20,
        gcra in any::<bool>(),
        steps in prop::collection::vec(step(20), 1..80),
    ) {
        let rate = Rate::try_new(nz(1), Duration::from_micros(interval_us)).unwrap();
        if gcra {
            let a = Gcra::try_new(rate, nz(burst)).unwrap();
            same_as_the_algorithm(&a, &a.into(), &steps)?;
        } else {
            let a = TokenBucket::try_new(rate, nz(burst)).unwrap();
            same_as_the_algorithm(&a, &a.into(), &steps)?;
        }
    }
}

/// A small deterministic generator, one per thread.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// How much of a bucket is used on `key`, exactly, from a peek with the clock frozen.
fn used_bucket(store: &MemoryStore<ManualClock>, key: &[u8], limit: &Limit) -> u64 {
    let d = apply(store, &[op(key, limit, 1)], Mode::Peek).results[0].decision;
    if d.allowed {
        return d.limit - d.remaining - 1;
    }
    let interval = match limit {
        Limit::TokenBucket(b) => b.rate().interval_us(),
        Limit::Gcra(g) => g.rate().interval_us(),
        _ => unreachable!("a bucket"),
    };
    d.limit - 1 + u64::try_from(d.retry_after.unwrap().as_micros()).unwrap() / interval
}

/// Threads mix single-limit checks and peeks of one bucket key (decided in its word), refunds of
/// what they got (under its lock), and two-limit requests naming it in either order (which lock
/// it): with the clock frozen, the key ends charged exactly once per admission not refunded,
/// never past its capacity, and the other key of the two-limit requests exactly once per admitted
/// one.
#[test]
fn requests_in_the_word_and_under_the_lock_on_one_key_are_exact_under_threads() {
    const THREADS: usize = 8;
    const ATTEMPTS: usize = 10_000;
    const CAPACITY: u64 = 1_000;
    let other = roomy();
    for limit in buckets(CAPACITY) {
        let (store, _) = store();
        let (key, x) = (b"hot".as_slice(), b"x".as_slice());
        let barrier = Barrier::new(THREADS);
        // (admitted single, admitted locked, refunded) per thread.
        let counts: Vec<(u64, u64, u64)> = thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|i| {
                    let (store, barrier, limit, other) = (&store, &barrier, &limit, &other);
                    s.spawn(move || {
                        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
                        let mut counts = (0, 0, 0);
                        barrier.wait();
                        for _ in 0..ATTEMPTS {
                            match rng.below(8) {
                                0..=3 => {
                                    let r = apply(store, &[op(key, limit, 1)], Mode::Check).results[0];
                                    if let Some(grant) = r.grant {
                                        counts.0 += 1;
                                        if rng.below(4) == 0 {
                                            store.refund_now(key, limit, grant);
                                            counts.2 += 1;
                                        }
                                    }
                                }
                                4 => {
                                    let d = apply(store, &[op(key, limit, 1)], Mode::Peek).results[0];
                                    assert!(d.grant.is_none());
                                }
                                5 | 6 => {
                                    let ops = [op(key, limit, 1), op(x, other, 1)];
                                    let r = apply(store, &ops, Mode::Check);
                                    counts.1 += u64::from(r.results[0].grant.is_some());
                                    assert_eq!(r.results[0].grant.is_some(), r.results[1].grant.is_some());
                                }
                                _ => {
                                    let ops = [op(x, other, 1), op(key, limit, 1)];
                                    let r = apply(store, &ops, Mode::Check);
                                    counts.1 += u64::from(r.results[1].grant.is_some());
                                    assert_eq!(r.results[0].grant.is_some(), r.results[1].grant.is_some());
                                }
                            }
                        }
                        counts
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a worker thread panicked")).collect()
        });
        let single: u64 = counts.iter().map(|c| c.0).sum();
        let locked: u64 = counts.iter().map(|c| c.1).sum();
        let refunded: u64 = counts.iter().map(|c| c.2).sum();
        let name = limit.algorithm_name();
        let used = used_bucket(&store, key, &limit);
        assert_eq!(used, single + locked - refunded, "{name}: charged once per admission not refunded");
        assert!(used <= CAPACITY, "{name}: {used} past the capacity");
        assert!(single + locked >= CAPACITY, "{name}: the threads filled the bucket ({single} + {locked})");
        let d = apply(&store, &[op(x, &other, 1)], Mode::Peek).results[0].decision;
        assert_eq!(
            d.limit - d.remaining - 1,
            locked,
            "{name}: the other key charged once per admitted request"
        );
    }
}
