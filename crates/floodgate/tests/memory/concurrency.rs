//! Exactness under threads: with the clock frozen nothing refills, so admissions are countable.

use std::sync::Barrier;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use floodgate::Limit;
use floodgate::store::Mode;
use floodgate_testkit::{StoreUnderTest, TestKey, every_algorithm};

use super::{Memory, admitted, apply, memory};

const THREADS: usize = 8;

/// Runs `work(thread index)` on `THREADS` threads started together; their results.
fn on_threads<T: Send>(work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    work(i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a worker thread panicked")).collect()
    })
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

#[test]
fn concurrent_checks_on_one_key_admit_exactly_the_limit() {
    const ATTEMPTS: usize = 2_000;
    for limit in every_algorithm(1_000) {
        let name = limit.algorithm_name();
        let t = StoreUnderTest::new(memory, "concurrent_checks_on_one_key_admit_exactly_the_limit");
        let key = t.key(name, "hot");
        let per_thread =
            on_threads(|_| (0..ATTEMPTS).filter(|_| admitted(t.store(), &[key.op(&limit, 1)])).count());
        assert_eq!(per_thread.iter().sum::<usize>(), 1_000, "{name}: {THREADS}×{ATTEMPTS} checks on one key");
        let after = apply(t.store(), &[key.op(&limit, 1)], Mode::Peek).unwrap().results[0].decision;
        assert!(!after.allowed && after.remaining == 0, "{name}: the key is exactly full: {after:?}");
    }
}

/// How much of `limit` is used on `key`, from a peek of 1 with the clock frozen: exact while
/// something is left, and for buckets (whose `retry_after` grows with every unit taken past the
/// capacity) also when nothing is; `None` for a full window counter, which cannot tell.
fn used(t: &StoreUnderTest<Memory>, key: &TestKey, limit: &Limit) -> Option<u64> {
    let d = apply(t.store(), &[key.op(limit, 1)], Mode::Peek).unwrap().results[0].decision;
    if d.allowed {
        return Some(d.limit - d.remaining - 1);
    }
    let interval = match limit {
        Limit::TokenBucket(b) => b.rate().interval_us(),
        Limit::Gcra(g) => g.rate().interval_us(),
        _ => return None,
    };
    let retry = u64::try_from(d.retry_after?.as_micros()).ok()?;
    Some(d.limit - 1 + retry / interval)
}

/// Rule A: 50 per user (u1..u4); rule B: 120 in all. Requests for random users on many threads:
/// never more than 120 admitted, never more than 50 for a user, and every counter charged exactly
/// once per admitted request, never for a denied one.
#[test]
fn overlapping_multi_rule_requests_are_all_or_nothing_under_threads() {
    const ATTEMPTS: usize = 100;
    const USERS: usize = 4;
    let algorithms = every_algorithm(50).into_iter().zip(every_algorithm(120)).take(5);
    for (per_user, global) in algorithms {
        let name = per_user.algorithm_name();
        let t =
            StoreUnderTest::new(memory, "overlapping_multi_rule_requests_are_all_or_nothing_under_threads");
        let users: Vec<TestKey> = (1..=USERS).map(|u| t.key("per-user", &format!("u{u}"))).collect();
        let all = t.key("global", "");
        // (attempts, admissions) per user, per thread.
        let counts = on_threads(|i| {
            let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
            let mut counts = [(0usize, 0usize); USERS];
            for _ in 0..ATTEMPTS {
                let u = rng.below(USERS as u64) as usize;
                let ops = if rng.below(2) == 0 {
                    [users[u].op(&per_user, 1), all.op(&global, 1)]
                } else {
                    [all.op(&global, 1), users[u].op(&per_user, 1)]
                };
                counts[u].0 += 1;
                counts[u].1 += usize::from(admitted(t.store(), &ops));
            }
            counts
        });
        let attempts: Vec<usize> = (0..USERS).map(|u| counts.iter().map(|c| c[u].0).sum()).collect();
        let admissions: Vec<usize> = (0..USERS).map(|u| counts.iter().map(|c| c[u].1).sum()).collect();
        let total: usize = admissions.iter().sum();

        assert!(total <= 120, "{name}: {total} admitted past the global limit of 120");
        for (u, n) in admissions.iter().enumerate() {
            assert!(*n <= 50, "{name}: u{} admitted {n} past its limit of 50", u + 1);
        }
        if attempts.iter().all(|a| *a >= 50) {
            // Every user could fill its 50 (200 in all), so only the global limit stops requests,
            // and it stops them at exactly 120 unless denied requests were charged to it.
            assert_eq!(total, 120, "{name}: admissions per user {admissions:?} of attempts {attempts:?}");
        }
        assert_eq!(
            used(&t, &all, &global).unwrap_or(120),
            total as u64,
            "{name}: global charged per admission"
        );
        for (u, key) in users.iter().enumerate() {
            let charged = used(&t, key, &per_user).unwrap_or(50);
            assert_eq!(charged, admissions[u] as u64, "{name}: u{} charged once per admission", u + 1);
        }
    }
}

/// Requests naming the same keys in opposite and rotated orders, on many threads: the store locks
/// keys in one global order, so they never deadlock, and every key counts every request.
#[test]
fn requests_naming_keys_in_opposite_orders_do_not_deadlock() {
    const ROUNDS: usize = 300;
    let (done, finished) = mpsc::channel();
    let worker = thread::spawn(move || {
        let limit = every_algorithm(1_000_000).swap_remove(0);
        let t = StoreUnderTest::new(memory, "requests_naming_keys_in_opposite_orders_do_not_deadlock");
        let (a, b, c) = (t.key("rule-a", "x"), t.key("rule-b", "x"), t.key("rule-a", "y"));
        on_threads(|i| {
            for r in 0..ROUNDS {
                let ops = match (i + r) % 4 {
                    0 => vec![a.op(&limit, 1), b.op(&limit, 1)],
                    1 => vec![b.op(&limit, 1), a.op(&limit, 1)],
                    2 => vec![c.op(&limit, 1), b.op(&limit, 1), a.op(&limit, 1)],
                    _ => vec![b.op(&limit, 1), c.op(&limit, 1), a.op(&limit, 1)],
                };
                assert!(admitted(t.store(), &ops));
            }
        });
        let remaining = |k: &TestKey| {
            apply(t.store(), &[k.op(&limit, 1)], Mode::Peek).unwrap().results[0].decision.remaining
        };
        done.send([remaining(&a), remaining(&b), remaining(&c)]).expect("the test is waiting");
    });
    let remaining = match finished.recv_timeout(Duration::from_secs(20)) {
        Ok(remaining) => remaining,
        Err(_) => panic!("requests locking keys in different orders deadlocked (no progress in 20s)"),
    };
    worker.join().expect("the worker finished");
    let requests = THREADS * ROUNDS;
    // a is in every request, b too, c in half of them; a peek of 1 leaves one less.
    let expected = [1_000_000 - requests - 1, 1_000_000 - requests - 1, 1_000_000 - requests / 2 - 1];
    assert_eq!(remaining.map(|r| r as usize), expected, "remaining of a, b, c");
}
