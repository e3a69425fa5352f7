//! The memory store and the Redis store fed the same random traffic on the same test clock: every
//! decision, grant and time equal — penalty boxes included.

use std::num::NonZeroU64;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::store::{Applied, Mode, Op};
use floodgate::{Limit, MemoryConfig, MemoryStore, Store};
use floodgate_core::calendar::Period;
use floodgate_core::{
    Calendar, Concurrency, FixedWindow, Gcra, Grant, ManualClock, Quota, Rate, SlidingLog, SlidingWindow,
    TokenBucket,
};
use floodgate_redis::RedisStore;
use floodgate_testkit::{START, TestKey};
use proptest::prelude::*;
use tokio::runtime::Runtime;

static RT: LazyLock<Runtime> =
    LazyLock::new(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"));
static STORE: LazyLock<RedisStore> = LazyLock::new(|| RT.block_on(crate::node_store()));

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

/// A random limit: any algorithm, capacity 1..12, windows from 1µs to a day (mostly short, so that
/// time steps cross them).
fn any_limit() -> impl Strategy<Value = Limit> {
    let window = prop_oneof![1u64..50, 1_000u64..2_000_000, Just(60_000_000u64), Just(86_400_000_000u64)];
    (0..7u8, 1u64..12, window, 0..4usize).prop_map(|(algo, cap, w, zone)| {
        let d = Duration::from_micros(w);
        let rate = Rate::try_new(nz(cap.min(w)), d).expect("a rate no faster than 1/µs");
        let zone = ["UTC", "Europe/Berlin", "America/Santiago", "Asia/Kolkata"][zone];
        let period = [Period::Day, Period::Month { anchor_day: 31 }][usize::from(w % 2 == 0)];
        match algo {
            0 => FixedWindow::try_new(nz(cap), d).expect("valid").into(),
            1 => SlidingWindow::try_new(nz(cap), d).expect("valid").into(),
            2 => SlidingLog::try_new(nz(cap), d).expect("valid").into(),
            3 => TokenBucket::try_new(rate, nz(cap)).expect("valid").into(),
            4 => Gcra::try_new(rate, nz(cap)).expect("valid").into(),
            5 => Concurrency::try_new(nz(cap), d).expect("valid").into(),
            _ => Quota::new(nz(cap), Calendar::try_new(period, zone).expect("a zone")).into(),
        }
    })
}

/// A limit of an algorithm a penalty box applies to (all but concurrency), with a penalty box half
/// the time: from a few µs (ending within a step or two) to longer than most windows.
fn any_boxed_limit() -> impl Strategy<Value = (Limit, Option<Duration>)> {
    let block = prop_oneof![
        Just(None),
        (1u64..50).prop_map(|us| Some(Duration::from_micros(us))),
        (1_000u64..2_000_000).prop_map(|us| Some(Duration::from_micros(us))),
        Just(Some(Duration::from_secs(90))),
    ];
    (any_limit().prop_filter("a box applies", |l| !l.holds_permits()), block)
}

#[derive(Debug, Clone)]
enum Step {
    /// Time passes, then one request over some of the limits.
    Request {
        dt: u64,
        mode: Mode,
        limits: Vec<(usize, bool)>,
        cost: u64,
    },
    /// Time passes, then an earlier grant is given back.
    Refund {
        dt: u64,
        which: prop::sample::Index,
    },
    Reset {
        which: prop::sample::Index,
    },
}

fn any_dt() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        1u64..100,
        100u64..1_000_000,
        1_000_000u64..120_000_000,
        3_600_000_000u64..90_000_000_000
    ]
}

/// A limit of the algorithms that have a single-limit script (token bucket, GCRA, fixed window), so
/// that a sequence moves their keys between those scripts and the driver often.
fn single_script_limit() -> impl Strategy<Value = Limit> {
    let window = prop_oneof![1u64..50, 1_000u64..2_000_000, Just(60_000_000u64)];
    (0..3u8, 1u64..12, window).prop_map(|(algo, cap, w)| {
        let d = Duration::from_micros(w);
        let rate = Rate::try_new(nz(cap.min(w)), d).expect("a rate no faster than 1/µs");
        match algo {
            0 => FixedWindow::try_new(nz(cap), d).expect("valid").into(),
            1 => TokenBucket::try_new(rate, nz(cap)).expect("valid").into(),
            _ => Gcra::try_new(rate, nz(cap)).expect("valid").into(),
        }
    })
}

fn any_step(n: usize) -> impl Strategy<Value = Step> {
    let mode = prop_oneof![6 => Just(Mode::Check), 2 => Just(Mode::Peek), 2 => Just(Mode::Report)];
    // Half the requests name one limit (the single-limit scripts), half one to three (the driver,
    // or a single-limit script when they repeat one): the same keys go through both.
    let limits = prop_oneof![
        prop::collection::vec((0..n, prop::bool::weighted(0.8)), 1..2),
        prop::collection::vec((0..n, prop::bool::weighted(0.8)), 1..4),
    ];
    prop_oneof![
        8 => (any_dt(), mode, limits, 1u64..30).prop_map(|(dt, mode, limits, cost)| Step::Request { dt, mode, limits, cost }),
        2 => (any_dt(), any::<prop::sample::Index>()).prop_map(|(dt, which)| Step::Refund { dt, which }),
        1 => any::<prop::sample::Index>().prop_map(|which| Step::Reset { which }),
    ]
}

/// Limits, each with its penalty box (or none), and steps over them.
type Traffic = (Vec<(Limit, Option<Duration>)>, Vec<Step>);

fn traffic<L: Strategy<Value = Limit>>(limit: L) -> impl Strategy<Value = Traffic> {
    boxed_traffic(limit.prop_map(|l| (l, None)))
}

fn boxed_traffic<L: Strategy<Value = (Limit, Option<Duration>)>>(limit: L) -> impl Strategy<Value = Traffic> {
    prop::collection::vec(limit, 1..5).prop_flat_map(|limits| {
        let n = limits.len();
        (Just(limits), prop::collection::vec(any_step(n), 1..40))
    })
}

async fn apply(store: &impl Store, ops: &[Op<'_>], mode: Mode) -> Applied {
    let mut out = Applied::default();
    store.apply(ops, mode, &mut out).await.expect("the store answers");
    out
}

async fn replay(limits: Vec<(Limit, Option<Duration>)>, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let (limits, blocks): (Vec<Limit>, Vec<Option<Duration>>) = limits.into_iter().unzip();
    static CASE: AtomicU64 = AtomicU64::new(0);
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    let clock = ManualClock::new(START);
    let memory = MemoryStore::with_config(MemoryConfig::default(), clock.clone());
    let redis = STORE.with_clock(clock.clone());
    let keys: Vec<TestKey> = (0..limits.len())
        .map(|i| TestKey::new(&format!("diff-{}-{case}", std::process::id()), &i.to_string()))
        .collect();
    let mut grants: Vec<(usize, Grant)> = Vec::new();
    for (n, step) in steps.into_iter().enumerate() {
        match step {
            Step::Request { dt, mode, limits: chosen, cost } => {
                clock.advance(Duration::from_micros(dt));
                let mut seen = Vec::new();
                let mut ops = Vec::new();
                for (i, enforce) in chosen {
                    if seen.contains(&i) {
                        continue;
                    }
                    seen.push(i);
                    // Checks and peeks never carry a cost above the capacity (the engine refuses them).
                    // Nor, here, reports on limits with a penalty box: the memory store asks the
                    // algorithm about a report on a key in its box as about a check, which a cost
                    // above the capacity overflows (a debug build panics).
                    let within = mode != Mode::Report || blocks[i].is_some();
                    let cost = if within { cost.min(limits[i].capacity()) } else { cost };
                    let op = if enforce {
                        keys[i].op(&limits[i], cost)
                    } else {
                        keys[i].shadow_op(&limits[i], cost)
                    };
                    ops.push(Op { block_for: blocks[i], ..op });
                }
                let m = apply(&memory, &ops, mode).await;
                let r = apply(&redis, &ops, mode).await;
                let names: Vec<_> = ops.iter().map(|o| (o.limit, o.cost, o.enforce, o.block_for)).collect();
                prop_assert_eq!(&m, &r, "step {} ({:?} of {:?} at {:?})", n, mode, names, clock);
                for (op_index, result) in m.results.iter().enumerate() {
                    if let Some(g) = result.grant {
                        let i = seen[op_index];
                        grants.push((i, g));
                    }
                }
            }
            Step::Refund { dt, which } => {
                clock.advance(Duration::from_micros(dt));
                if grants.is_empty() {
                    continue;
                }
                let (i, g) = grants.remove(which.index(grants.len()));
                memory.refund(keys[i].bytes(), &limits[i], g).await.expect("memory refund");
                redis.refund(keys[i].bytes(), &limits[i], g).await.expect("redis refund");
            }
            Step::Reset { which } => {
                let i = which.index(keys.len());
                // Whether a key "existed" differs once Redis has expired it; the state after must not.
                memory.reset(keys[i].bytes()).await.expect("memory reset");
                redis.reset(keys[i].bytes()).await.expect("redis reset");
                grants.retain(|(k, _)| *k != i);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_decision_equals_the_memory_store((limits, steps) in traffic(any_limit())) {
        LazyLock::force(&STORE);
        RT.block_on(replay(limits, steps))?;
    }

    #[test]
    fn single_limit_scripts_and_the_driver_share_state((limits, steps) in traffic(single_script_limit())) {
        LazyLock::force(&STORE);
        RT.block_on(replay(limits, steps))?;
    }

    #[test]
    fn every_decision_with_penalty_boxes_equals_the_memory_store((limits, steps) in boxed_traffic(any_boxed_limit())) {
        LazyLock::force(&STORE);
        RT.block_on(replay(limits, steps))?;
    }
}
