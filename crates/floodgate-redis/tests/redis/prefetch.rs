//! Prefetch (batch leases) over a real Redis: several instances, each with its own connection and
//! its own [`Prefetch`] wrapper, sharing one hot key, on a manual clock — held still, or moving
//! while they check (see [`admissions_over_time`]).

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use floodgate::store::{Prefetch, PrefetchBatch};
use floodgate::{Descriptors, Engine, Limit, Policy, Rule};
use floodgate_core::calendar::Period;
use floodgate_core::{
    Algorithm, Calendar, Clock, FixedWindow, ManualClock, Quota, Rate, SlidingWindow, Timestamp, TokenBucket,
};
use floodgate_redis::RedisStore;

/// A whole minute: windows of a second or a minute start here.
const START: Timestamp = Timestamp::from_secs(1_800_000_000);

type Instance = Engine<Prefetch<RedisStore, ManualClock>>;

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

fn fixed(limit: u64, window: Duration) -> Limit {
    FixedWindow::try_new(nz(limit), window).expect("a window").into()
}

/// `limit` tokens a day, starting full: nothing refills while a test runs.
fn per_day(limit: u64) -> Limit {
    let rate = Rate::try_new(nz(limit), Duration::from_secs(86_400)).expect("a rate");
    TokenBucket::try_new(rate, nz(limit)).expect("a bucket").into()
}

fn batch(size: u64, ttl: Duration) -> PrefetchBatch {
    PrefetchBatch::try_new(size, ttl).expect("a batch")
}

fn unique(name: &str) -> String {
    format!(
        "{name}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap_or_default()
    )
}

/// `n` instances with their own connections and wrappers, deciding `rules` on one clock.
async fn instances(n: usize, rules: &[Rule], clock: &ManualClock) -> Vec<Arc<Instance>> {
    let mut engines = Vec::new();
    for _ in 0..n {
        let store = RedisStore::connect(super::node_config(floodgate_testkit::redis::RedisServer::shared()))
            .await
            .expect("connect");
        let store = Prefetch::new(store.with_clock(clock.clone()), clock.clone());
        engines.push(Arc::new(Engine::new(Policy::new(rules.iter().cloned()).expect("a policy"), store)));
    }
    engines
}

/// What the store itself (no lease) says remains for `rule`'s global key: a peek without prefetch.
async fn store_remaining(rule: &Rule, clock: &ManualClock) -> u64 {
    let plain = Rule::new(rule.name().to_owned(), rule.limit().clone());
    let store = super::node_store().await.with_clock(clock.clone());
    let engine = Engine::new(Policy::new([plain]).expect("a policy"), store);
    let verdict = engine.peek(&Descriptors::new(), 1).await.expect("a peek");
    // An allowed peek says what would remain after it.
    let decision = verdict.limits[0].decision;
    decision.remaining + u64::from(decision.allowed)
}

async fn never_over_admits(limit: Limit) {
    let clock = ManualClock::new(START);
    let rule = Rule::new(unique("hot"), limit).prefetch(batch(20, Duration::from_secs(1)));
    let engines = instances(3, std::slice::from_ref(&rule), &clock).await;
    let admitted = super::hammer(&engines, 32, 2_000).await;
    let held: u64 = engines.iter().map(|e| e.store().held_units()).sum();
    assert!(admitted <= 500, "admitted {admitted} of a limit of 500");
    assert_eq!(admitted as u64 + held, 500, "what was not admitted is held in leases ({held})");
    assert_eq!(store_remaining(&rule, &clock).await, 0);
    let calls: u64 = engines.iter().map(|e| e.store().stats().store_calls).sum();
    assert!(calls < 2_000 / 4, "{calls} store calls for 2000 decisions");
    for engine in &engines {
        engine.store().flush().await;
    }
    assert_eq!(store_remaining(&rule, &clock).await, held, "flushed leases went back to the store");
    let more = super::hammer(&engines, 4, 1_000).await;
    assert_eq!(more as u64 + engines.iter().map(|e| e.store().held_units()).sum::<u64>(), held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_never_over_admits_a_fixed_window_across_instances() {
    never_over_admits(fixed(500, Duration::from_secs(3_600))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_never_over_admits_a_token_bucket_across_instances() {
    never_over_admits(per_day(500)).await;
}

#[tokio::test]
async fn unused_units_go_back_when_the_ttl_ends() {
    let clock = ManualClock::new(START);
    let rule = Rule::new(unique("ttl"), fixed(100, Duration::from_secs(60)))
        .prefetch(batch(20, Duration::from_secs(1)));
    let engines = instances(1, std::slice::from_ref(&rule), &clock).await;
    let one = &engines[0];
    for _ in 0..5 {
        assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed);
    }
    assert_eq!(one.store().stats().store_calls, 1, "one batch served five requests");
    assert_eq!(store_remaining(&rule, &clock).await, 80);
    assert_eq!(one.store().return_due().await.units, 0, "the lease is live");
    clock.advance(Duration::from_secs(1));
    let returned = one.store().return_due().await;
    assert_eq!((returned.units, returned.expired), (15, 0));
    assert_eq!(store_remaining(&rule, &clock).await, 95, "exactly the five admitted stay counted");
    assert_eq!(one.store().held_units(), 0);
}

#[tokio::test]
async fn a_token_bucket_gets_back_what_is_unspent() {
    let clock = ManualClock::new(START);
    let rule = Rule::new(unique("bucket"), per_day(100)).prefetch(batch(10, Duration::from_millis(500)));
    let engines = instances(1, std::slice::from_ref(&rule), &clock).await;
    for _ in 0..3 {
        assert!(engines[0].check(&Descriptors::new(), 1).await.unwrap().allowed);
    }
    assert_eq!(store_remaining(&rule, &clock).await, 90);
    clock.advance(Duration::from_millis(500));
    assert_eq!(engines[0].store().return_due().await.units, 7);
    assert_eq!(store_remaining(&rule, &clock).await, 97);
}

#[tokio::test]
async fn a_lease_never_outlives_its_window() {
    // The ttl (10 s) is longer than the window (1 s): the window ends the lease.
    let clock = ManualClock::new(START.saturating_add(Duration::from_millis(900)));
    let rule = Rule::new(unique("window"), fixed(100, Duration::from_secs(1)))
        .prefetch(batch(20, Duration::from_secs(10)));
    let engines = instances(1, std::slice::from_ref(&rule), &clock).await;
    let one = &engines[0];
    assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed);
    assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed);
    assert_eq!(one.store().stats().batches, 1);
    clock.advance(Duration::from_millis(100));
    assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed);
    assert_eq!(one.store().stats().batches, 2, "the next window's request took a new batch");
    let returned = one.store().return_due().await;
    assert_eq!(
        (returned.units, returned.expired),
        (0, 18),
        "last window's units are worth nothing: not refunded"
    );
    assert_eq!(store_remaining(&rule, &clock).await, 80, "this window holds only its own batch");
}

#[tokio::test]
async fn flush_returns_every_lease_and_a_changed_limit_drops_it() {
    let clock = ManualClock::new(START);
    let name = unique("flush");
    let rule = Rule::new(name.clone(), fixed(100, Duration::from_secs(60)))
        .prefetch(batch(20, Duration::from_secs(30)));
    let engines = instances(1, std::slice::from_ref(&rule), &clock).await;
    let one = &engines[0];
    assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed);
    assert_eq!(one.store().flush().await.units, 19);
    assert_eq!(store_remaining(&rule, &clock).await, 99);

    // A reload changes the limit: the old lease is not spent on the new rule, and goes back.
    assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed);
    let reloaded =
        Rule::new(name, fixed(50, Duration::from_secs(60))).prefetch(batch(20, Duration::from_secs(30)));
    one.set_policy(Policy::new([reloaded.clone()]).unwrap());
    assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed);
    assert_eq!(one.store().stats().batches, 3, "the reloaded rule took a batch of its own");
    assert_eq!(one.store().return_due().await.units, 19, "the old lease went back");
    assert_eq!(store_remaining(&reloaded, &clock).await, 50 - 2 - 20);
}

#[tokio::test]
async fn a_denied_request_consumes_no_leased_unit() {
    let clock = ManualClock::new(START);
    let hot = Rule::new(unique("hot"), fixed(100, Duration::from_secs(60)))
        .prefetch(batch(20, Duration::from_secs(30)));
    let strict = Rule::new(unique("strict"), fixed(1, Duration::from_secs(60)));
    let engines = instances(1, &[hot.clone(), strict], &clock).await;
    let one = &engines[0];
    assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed);
    assert_eq!(one.store().held_units(), 19);
    for _ in 0..3 {
        let verdict = one.check(&Descriptors::new(), 1).await.unwrap();
        assert!(!verdict.allowed, "the strict rule denies");
        assert_eq!(one.store().held_units(), 19, "the denied request gave its reserved unit back");
    }
    assert_eq!(one.store().flush().await.units, 19);
    assert_eq!(store_remaining(&hot, &clock).await, 99, "only the admitted request counts");
}

#[tokio::test]
async fn near_the_limit_each_request_is_decided_at_its_own_cost() {
    let clock = ManualClock::new(START);
    let ttl = Duration::from_secs(1);
    let rule = Rule::new(unique("near"), fixed(25, Duration::from_secs(3_600))).prefetch(batch(20, ttl));
    let engines = instances(2, std::slice::from_ref(&rule), &clock).await;
    let (x, y) = (&engines[0], &engines[1]);
    assert!(x.check(&Descriptors::new(), 1).await.unwrap().allowed);
    // 5 remain: less than a batch, so each of y's requests takes only its own unit.
    for _ in 0..5 {
        assert!(y.check(&Descriptors::new(), 1).await.unwrap().allowed);
    }
    assert_eq!(y.store().stats().batches, 0);
    let denied = y.check(&Descriptors::new(), 1).await.unwrap();
    assert!(!denied.allowed, "the store is empty; x holds 19 (the under-admission bound)");
    assert!(denied.retry_after().is_some());
    // x's lease ends and goes back; y's remembered denial lapses with its ttl.
    clock.advance(ttl);
    assert_eq!(x.store().return_due().await.units, 19);
    assert!(y.check(&Descriptors::new(), 1).await.unwrap().allowed);
}

#[tokio::test]
async fn a_batch_taken_in_the_next_window_does_not_join_the_last_ones_lease() {
    // A store call happens later than the instance read its clock, by however long the call takes;
    // here the store's clock moves on 200 ms while the instance's stands still, so that the instance
    // still sees the window its lease was taken in (at 0.9 s) when the store counts a new batch in
    // the next one (at 1.1 s). The new batch must not join the old lease: its unspent unit would go
    // back to the first window, and stay counted in the second.
    let (local, store_clock) = (ManualClock::new(START), ManualClock::new(START));
    for clock in [&local, &store_clock] {
        clock.advance(Duration::from_millis(900));
    }
    let rule = Rule::new(
        unique("joined"),
        SlidingWindow::try_new(nz(10), Duration::from_secs(1)).expect("a window"),
    )
    .prefetch(batch(2, Duration::from_secs(10)));
    let store = super::node_store().await.with_clock(store_clock.clone());
    let one =
        Engine::new(Policy::new([rule.clone()]).expect("a policy"), Prefetch::new(store, local.clone()));
    assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed, "a batch of 2 in the first window");
    assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed, "its last unit");
    store_clock.advance(Duration::from_millis(200));
    assert!(one.check(&Descriptors::new(), 1).await.unwrap().allowed, "a batch of 2 in the second window");
    assert_eq!(one.store().stats().batches, 2);
    assert_eq!(one.store().flush().await.units, 1);
    // Half way through the second window: the first one's 2 weigh 1, the second's 1 counts whole.
    store_clock.advance(Duration::from_millis(400));
    assert_eq!(
        store_remaining(&rule, &store_clock).await,
        10 - 1 - 1,
        "the unspent unit went back to the window that counted it"
    );
}

// === Over time: windows turning while instances check ===

/// Runs `schedule` from the clock's time until `end`: at each instant, that many checks of cost 1
/// (no descriptors), taken up by whichever of `tasks` tasks per engine comes first, all at once;
/// when they are decided, the clock moves on by the step, and the schedule repeats. A check is
/// decided at one instant (its verdict's `at`), so admissions can be counted per window exactly.
/// Many checks at an instant are a saturated key; few, then a long step, a quiet key whose leases
/// sit unspent while the store replenishes. Returns the instants of the admitted checks, in order.
async fn admissions_over_time(
    engines: &[Arc<Instance>],
    clock: &ManualClock,
    tasks: usize,
    end: Timestamp,
    schedule: &[(usize, Duration)],
) -> Vec<Timestamp> {
    let tickets = Arc::new(tokio::sync::Semaphore::new(0));
    let decided = Arc::new(tokio::sync::Semaphore::new(0));
    let admitted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut running = Vec::new();
    for engine in engines {
        for _ in 0..tasks {
            let (engine, clock) = (Arc::clone(engine), clock.clone());
            let (tickets, decided, admitted) =
                (Arc::clone(&tickets), Arc::clone(&decided), Arc::clone(&admitted));
            running.push(tokio::spawn(async move {
                // The schedule's end closes the tickets.
                while let Ok(ticket) = tickets.acquire().await {
                    ticket.forget();
                    let now = clock.now();
                    let verdict = engine.check(&Descriptors::new(), 1).await.expect("a valid request");
                    assert_eq!(verdict.store_error, None, "no store errors under load");
                    assert_eq!(verdict.at, now, "decided at the instant the clock shows");
                    if verdict.allowed {
                        admitted.lock().expect("not poisoned").push(now);
                    }
                    decided.add_permits(1);
                }
            }));
        }
    }
    for (checks, step) in schedule.iter().cycle() {
        if clock.now() >= end {
            break;
        }
        tickets.add_permits(*checks);
        let n = u32::try_from(*checks).expect("a few checks");
        decided.acquire_many(n).await.expect("never closed").forget();
        clock.advance(*step);
    }
    tickets.close();
    for task in running {
        task.await.expect("a task");
    }
    let mut admitted = std::mem::take(&mut *admitted.lock().expect("not poisoned"));
    admitted.sort_unstable();
    admitted
}

/// Checks at an instant, then the step to the next one: bursts that saturate the key, single
/// checks that take a batch and leave most of it, quiet spells over which the store replenishes
/// (and windows end) while leases hold units. 237 ms, so each window ends at another point of it.
const SCHEDULE: [(usize, Duration); 13] = {
    let ms = Duration::from_millis;
    [
        (40, ms(1)),
        (40, ms(2)),
        (3, ms(60)),
        (2, ms(1)),
        (30, ms(3)),
        (1, ms(120)),
        (4, ms(1)),
        (50, ms(5)),
        (6, ms(30)),
        (2, ms(2)),
        (25, ms(11)),
        (0, ms(1)),
        (12, ms(0)),
    ]
};

/// Replays `admitted` through `algorithm` on one fresh state, as one store with no leases would
/// see them: the first one it would have refused, if any.
fn first_refused<A: Algorithm>(algorithm: &A, admitted: &[Timestamp]) -> Option<(usize, Timestamp)> {
    let mut state = A::State::default();
    admitted.iter().enumerate().find_map(|(i, at)| {
        let (decision, _) = algorithm.check(&mut state, *at, 1).expect("a cost of 1");
        (!decision.allowed).then_some((i, *at))
    })
}

/// The most of `admitted` (in order) inside any span `[t, t + d)`.
fn most_in_a_span(admitted: &[Timestamp], d: Duration) -> usize {
    let mut most = 0;
    let mut last = 0;
    for (first, t) in admitted.iter().enumerate() {
        let stop = t.saturating_add(d);
        last = last.max(first);
        while last < admitted.len() && admitted[last] < stop {
            last += 1;
        }
        most = most.max(last - first);
    }
    most
}

/// `(batches taken, units spent from them)` by `engines` so far, batches of `size`: each leaves
/// `size − 1` units to spend, give back, let expire or hold still.
fn spent_from_leases(engines: &[Arc<Instance>], size: u64) -> (u64, u64) {
    let (mut batches, mut left) = (0, 0);
    for engine in engines {
        let (stats, store) = (engine.store().stats(), engine.store());
        batches += stats.batches;
        left += stats.returned_units + stats.expired_units + store.held_units();
    }
    (batches, batches * (size - 1) - left)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_keeps_a_sliding_window_within_what_the_store_alone_admits() {
    let (limit, window) = (600, Duration::from_secs(1));
    let algorithm = SlidingWindow::try_new(nz(limit), window).expect("a window");
    let clock = ManualClock::new(START.saturating_add(Duration::from_millis(500)));
    // The ttl outlives the window: windows end the leases.
    let rule = Rule::new(unique("sliding"), algorithm).prefetch(batch(20, Duration::from_secs(2)));
    let engines = instances(3, std::slice::from_ref(&rule), &clock).await;
    let end = START.saturating_add(Duration::from_millis(4_500));
    let admitted = admissions_over_time(&engines, &clock, 8, end, &SCHEDULE).await;
    let (batches, spent) = spent_from_leases(&engines, 20);
    eprintln!("sliding: {} admitted, {batches} batches, {spent} spent", admitted.len());
    assert!(spent > 0, "leases were taken ({batches}) and spent ({spent})");
    assert!(admitted.len() as u64 > limit, "windows turned: {} admitted", admitted.len());
    assert_eq!(first_refused(&algorithm, &admitted), None, "an admission the store alone would refuse");
    // Which keeps to the sliding window's own bound: limit + ⌊limit × d / window⌋ in any span d.
    for d in [Duration::from_micros(1), window / 10, window / 4, window / 2, window] {
        let bound = limit + limit * d.as_micros() as u64 / window.as_micros() as u64;
        let most = most_in_a_span(&admitted, d);
        assert!(most as u64 <= bound, "{most} admitted within {d:?} (bound {bound})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_never_over_admits_a_quota_across_its_period_boundary() {
    let limit = 300;
    let quota = Quota::new(nz(limit), Calendar::utc(Period::Day));
    let midnight = Timestamp::from_secs(1_800_057_600);
    assert_eq!(quota.calendar().bounds(midnight).0, midnight, "a UTC midnight");
    // A few steps before midnight: the day ends with leases half spent.
    let clock = ManualClock::new(Timestamp::from_micros(midnight.as_micros() - 10_000));
    let rule = Rule::new(unique("quota"), quota.clone()).prefetch(batch(20, Duration::from_secs(5)));
    let engines = instances(3, std::slice::from_ref(&rule), &clock).await;
    let admitted =
        admissions_over_time(&engines, &clock, 8, midnight.saturating_add(Duration::from_secs(3)), &SCHEDULE)
            .await;
    let (batches, spent) = spent_from_leases(&engines, 20);
    let before = admitted.iter().filter(|t| **t < midnight).count() as u64;
    let after = admitted.len() as u64 - before;
    eprintln!("quota: {before} + {after} admitted, {batches} batches, {spent} spent");
    assert!(spent > 0, "leases were taken ({batches}) and spent ({spent})");
    assert!(before > 0, "the day before midnight admitted some");
    assert!(before <= limit, "{before} admitted the day before (limit {limit})");
    assert!(after <= limit, "{after} admitted the day after (limit {limit})");
    assert_eq!(first_refused(&quota, &admitted), None, "an admission the store alone would refuse");
}
