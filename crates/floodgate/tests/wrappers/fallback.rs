//! The local fallback: while the store fails, `local` rules decide on this instance's share of
//! their limit; other rules keep their policies; back on the store as soon as it answers, and what
//! was admitted locally is charged to it, as far as it still counts.

use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate::core::{Concurrency, FixedWindow, ManualClock, Rate, TokenBucket};
use floodgate::store::{Breaker, BreakerConfig, Fallback, FallbackConfig};
use floodgate::{
    Descriptors, Engine, Limit, MemoryConfig, MemoryStore, OnStoreError, Outcome, Policy, Rule, RuleError,
    Verdict,
};
use floodgate_testkit::{Behaviour, FlakyStore, START};

type Shared = MemoryStore<ManualClock>;
type Flaky = FlakyStore<Shared>;

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

fn per_hour(n: u64) -> FixedWindow {
    FixedWindow::try_new(nz(n), Duration::from_secs(3600)).unwrap()
}

struct Rig {
    engine: Engine<Fallback<Flaky, ManualClock>>,
    flaky: Flaky,
    clock: ManualClock,
    changes: Arc<Mutex<Vec<bool>>>,
}

fn rig(rules: impl IntoIterator<Item = Rule>, config: FallbackConfig) -> Rig {
    let clock = ManualClock::new(START);
    let shared = MemoryStore::with_config(MemoryConfig::default(), clock.clone());
    let flaky = FlakyStore::new(shared);
    let local = MemoryStore::with_config(MemoryConfig::default(), clock.clone());
    let changes = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&changes);
    let fallback =
        Fallback::on_change(flaky.clone(), local, config, Arc::new(move |d| seen.lock().unwrap().push(d)));
    let engine = Engine::new(Policy::new(rules).unwrap(), fallback);
    Rig { engine, flaky, clock, changes }
}

fn shares(instances: u32, local_factor: f64) -> FallbackConfig {
    FallbackConfig { local_factor, instances, ..FallbackConfig::default() }
}

fn user(name: &str) -> Descriptors {
    Descriptors::new().with("user", name).with("tenant", "acme")
}

impl Rig {
    async fn check(&self, d: &Descriptors) -> Verdict {
        self.engine.check(d, 1).await.unwrap()
    }

    /// How many of `n` checks pass.
    async fn admitted(&self, d: &Descriptors, n: usize) -> usize {
        let mut admitted = 0;
        for _ in 0..n {
            admitted += usize::from(self.check(d).await.allowed);
        }
        admitted
    }

    fn fallback(&self) -> &Fallback<Flaky, ManualClock> {
        self.engine.store()
    }
}

fn local_user_rule(limit: u64) -> Rule {
    Rule::new("user", per_hour(limit)).key(["user"]).on_store_error(OnStoreError::Local)
}

#[tokio::test]
async fn while_the_store_fails_a_local_rule_admits_its_share_and_no_more() {
    // ceil(30 × 2 / 3) = 20 of the 30 per hour.
    let r = rig([local_user_rule(30)], shares(3, 2.0));
    r.flaky.set(Behaviour::Failing);
    let alice = user("alice");
    let first = r.check(&alice).await;
    assert!(first.allowed);
    assert_eq!(first.limits[0].outcome, Outcome::LocalAllowed);
    assert_eq!(first.limits[0].decision.limit, 20, "the share is advertised as the limit");
    assert_eq!(first.limits[0].decision.remaining, 19);
    assert!(first.store_error.as_deref().is_some_and(|e| e.is_transient()), "the store's error is kept");
    assert_eq!(first.limits[0].grant, None, "a local admission has nothing to give back to the store");
    assert_eq!(r.admitted(&alice, 30).await, 19);
    let denied = r.check(&alice).await;
    assert!(!denied.allowed);
    assert_eq!(denied.limits[0].outcome, Outcome::LocalDenied);
    assert!(denied.retry_after().is_some_and(|d| d > Duration::ZERO), "a local denial says when to retry");
    // Another key has a share of its own.
    assert_eq!(r.admitted(&user("bob"), 25).await, 20);
    // The fleet shrinks to one instance: the share follows (ceil(30 × 2 / 1) = 60), the count carries.
    r.fallback().set_instances(1);
    assert_eq!(r.admitted(&alice, 100).await, 40);
    assert_eq!(r.flaky.calls(), 0, "the failing store decided nothing");
}

#[tokio::test]
async fn the_other_rules_of_a_request_keep_their_policies() {
    let closed =
        Rule::new("tenant-closed", per_hour(1000)).key(["tenant"]).on_store_error(OnStoreError::FailClosed);
    let open = Rule::new("tenant-open", per_hour(1000)).key(["tenant"]);
    let local = local_user_rule(10);
    let r = rig([local.clone(), closed], shares(1, 1.0));
    r.flaky.set(Behaviour::Failing);
    for _ in 0..20 {
        let v = r.check(&user("alice")).await;
        assert!(!v.allowed, "a fail-closed rule denies while the store fails");
        assert_eq!(v.limits[0].outcome, Outcome::LocalAllowed, "the local share would allow");
        assert_eq!(v.limits[1].outcome, Outcome::ErrorDenied);
        // What a check would leave, the same every time: a denied request consumes nothing locally.
        assert_eq!(v.limits[0].decision.remaining, 9);
    }
    let r = rig([local, open], shares(1, 1.0));
    r.flaky.set(Behaviour::Failing);
    let v = r.check(&user("alice")).await;
    assert!(v.allowed);
    assert_eq!(
        v.limits.iter().map(|l| l.outcome).collect::<Vec<_>>(),
        [Outcome::LocalAllowed, Outcome::ErrorAllowed]
    );
    assert_eq!(v.limits[0].decision.remaining, 9);
    assert_eq!(r.admitted(&user("alice"), 20).await, 9, "the local share still caps the request");
}

#[tokio::test]
async fn without_a_local_rule_the_store_error_is_the_engines_to_handle() {
    let r = rig([Rule::new("user", per_hour(5)).key(["user"])], shares(1, 2.0));
    r.flaky.set(Behaviour::Failing);
    let v = r.check(&user("alice")).await;
    assert!(v.allowed);
    assert_eq!(v.limits[0].outcome, Outcome::ErrorAllowed);
    assert!(r.fallback().is_degraded(), "the store is failing, whatever the rules");
    assert_eq!(r.fallback().stats().local_decisions, 0);
}

#[tokio::test]
async fn back_on_the_store_as_soon_as_it_answers_and_what_was_admitted_locally_is_charged() {
    // ceil(30 × 1 / 2) = 15 locally.
    let r = rig([local_user_rule(30)], shares(2, 1.0));
    let alice = user("alice");
    assert_eq!(r.admitted(&alice, 5).await, 5, "5 on the store");
    r.flaky.set(Behaviour::Failing);
    assert_eq!(r.admitted(&alice, 10).await, 10, "10 locally");
    assert!(!r.fallback().replay_due(), "nothing is charged while the store fails");
    r.flaky.set(Behaviour::Healthy);
    let v = r.check(&alice).await;
    assert_eq!(v.limits[0].outcome, Outcome::Allowed, "decided on the store again");
    assert_eq!(v.store_error, None);
    assert_eq!(v.limits[0].decision.remaining, 24, "the store saw 6 of the 16 so far");
    assert_eq!(*r.changes.lock().unwrap(), [true, false], "one change each way");
    assert!(r.fallback().replay_due());
    let replayed = r.fallback().replay().await;
    assert_eq!((replayed.keys, replayed.units, replayed.expired, replayed.left), (1, 10, 0, 0));
    assert!(!r.fallback().replay_due());
    assert_eq!(r.fallback().stats().charged_units, 10);
    // 16 admitted in this window, everywhere: 14 more, then the limit.
    assert_eq!(r.admitted(&alice, 20).await, 14);
}

#[tokio::test]
async fn admissions_of_a_window_that_has_ended_are_not_charged() {
    let r = rig([local_user_rule(30)], shares(1, 1.0));
    let alice = user("alice");
    r.flaky.set(Behaviour::Failing);
    assert_eq!(r.admitted(&alice, 12).await, 12);
    // The window ends while the store is down.
    r.clock.advance(Duration::from_secs(3600));
    r.flaky.set(Behaviour::Healthy);
    assert!(r.check(&alice).await.allowed);
    let replayed = r.fallback().replay().await;
    assert_eq!((replayed.keys, replayed.units, replayed.expired), (0, 0, 12));
    assert_eq!(r.admitted(&alice, 40).await, 29, "a fresh window: the limit, less the one check");
}

#[tokio::test]
async fn a_buckets_admissions_are_charged_less_what_has_refilled() {
    let bucket = TokenBucket::try_new(Rate::per_second(nz(1)), nz(100)).unwrap();
    let rule = Rule::new("user", bucket).key(["user"]).on_store_error(OnStoreError::Local);
    let r = rig([rule], shares(1, 1.0));
    let alice = user("alice");
    r.flaky.set(Behaviour::Failing);
    assert_eq!(r.admitted(&alice, 50).await, 50);
    r.clock.advance(Duration::from_secs(20));
    r.flaky.set(Behaviour::Healthy);
    let replayed = r.fallback().replay().await;
    assert_eq!((replayed.units, replayed.expired), (30, 20), "20 tokens came back in 20 s");
    // The store's bucket: full (100), less the 30 still owed.
    assert_eq!(r.admitted(&alice, 100).await, 70);
}

#[tokio::test]
async fn a_failing_replay_keeps_what_is_owed_for_the_next() {
    let r = rig([local_user_rule(100)], shares(1, 1.0));
    r.flaky.set(Behaviour::Failing);
    assert_eq!(r.admitted(&user("alice"), 3).await, 3);
    assert_eq!(r.admitted(&user("bob"), 4).await, 4);
    let replayed = r.fallback().replay().await;
    assert_eq!((replayed.keys, replayed.left), (0, 2));
    assert_eq!(r.admitted(&user("alice"), 2).await, 2, "more local admissions meanwhile add up");
    r.flaky.set(Behaviour::Healthy);
    let replayed = r.fallback().replay().await;
    assert_eq!((replayed.keys, replayed.units, replayed.left), (2, 9, 0));
    let peek = r.engine.peek(&user("alice"), 1).await.unwrap();
    assert_eq!(peek.limits[0].decision.remaining, 94, "100, less the 5 charged, less this one");
}

#[tokio::test]
async fn what_is_owed_is_bounded_and_the_excess_counted() {
    let config = FallbackConfig { max_owed_keys: 2, ..shares(1, 1.0) };
    let r = rig([local_user_rule(100)], config);
    r.flaky.set(Behaviour::Failing);
    for name in ["a", "b", "c", "d"] {
        assert_eq!(r.admitted(&user(name), 3).await, 3);
    }
    let stats = r.fallback().stats();
    assert_eq!((stats.owed_keys, stats.dropped_units, stats.local_decisions), (2, 6, 12));
}

#[tokio::test]
async fn a_cost_above_the_share_is_denied_locally_and_consumes_nothing() {
    let r = rig([local_user_rule(10)], shares(4, 2.0)); // a share of 5
    r.flaky.set(Behaviour::Failing);
    let v = r.engine.check(&user("alice"), 6).await.unwrap();
    assert!(!v.allowed);
    assert_eq!(v.limits[0].outcome, Outcome::LocalDenied);
    assert_eq!(v.limits[0].decision.retry_after, None, "waiting cannot help");
    assert_eq!(r.admitted(&user("alice"), 10).await, 5);
}

#[tokio::test]
async fn reports_while_the_store_fails_are_counted_locally_and_charged_later() {
    let r = rig([local_user_rule(10)], shares(1, 1.0));
    r.flaky.set(Behaviour::Failing);
    let v = r.engine.report(&user("alice"), 4).await.unwrap();
    assert_eq!(v.limits[0].outcome, Outcome::LocalAllowed);
    assert_eq!(r.admitted(&user("alice"), 10).await, 6);
    r.flaky.set(Behaviour::Healthy);
    assert_eq!(r.fallback().replay().await.units, 10);
    assert_eq!(r.admitted(&user("alice"), 10).await, 0);
}

#[tokio::test]
async fn with_the_breaker_open_the_share_decides_without_calling_the_store() {
    let clock = ManualClock::new(START);
    let flaky = FlakyStore::new(MemoryStore::with_config(MemoryConfig::default(), clock.clone()));
    let breaker_config =
        BreakerConfig { min_calls: 5, open_for: Duration::from_secs(2), ..BreakerConfig::default() };
    let breaker = Breaker::with_clock(flaky.clone(), breaker_config, clock.clone());
    let local = MemoryStore::with_config(MemoryConfig::default(), clock.clone());
    let engine = Engine::new(
        Policy::new([local_user_rule(100)]).unwrap(),
        Fallback::new(breaker, local, shares(1, 1.0)),
    );
    flaky.set(Behaviour::Failing);
    for _ in 0..5 {
        assert!(engine.check(&user("alice"), 1).await.unwrap().allowed);
    }
    let attempts = flaky.attempts();
    for _ in 0..50 {
        let v = engine.check(&user("alice"), 1).await.unwrap();
        assert_eq!(v.limits[0].outcome, Outcome::LocalAllowed);
        assert!(matches!(v.store_error.as_deref(), Some(floodgate::StoreError::BreakerOpen)));
    }
    assert_eq!(flaky.attempts(), attempts, "no store call while the breaker is open");
    assert_eq!(engine.check(&user("alice"), 1).await.unwrap().limits[0].decision.remaining, 44);
    // The store is back; after open_for, the probe finds it and the next decisions are its own.
    flaky.set(Behaviour::Healthy);
    clock.advance(Duration::from_secs(2));
    let v = engine.check(&user("alice"), 1).await.unwrap();
    assert_eq!(v.limits[0].outcome, Outcome::Allowed);
    assert_eq!(engine.store().replay().await.units, 56);
}

#[test]
fn a_concurrency_rule_cannot_fall_back_locally() {
    let permits = Concurrency::try_new(nz(5), Duration::from_secs(30)).unwrap();
    let rule = Rule::new("slots", permits).on_store_error(OnStoreError::Local);
    let e = Policy::new([rule]).unwrap_err();
    assert!(matches!(e, RuleError::LocalConcurrency { .. }), "{e}");
    assert!(e.to_string().contains("fail_open or fail_closed"), "{e}");
}

#[test]
fn a_share_is_the_same_algorithm_scaled() {
    let window: Limit = per_hour(100).into();
    assert_eq!(window.share(2.0, 3), per_hour(67).into());
    assert_eq!(window.share(2.0, 1000), per_hour(1).into(), "never less than 1");
    let bucket: Limit = TokenBucket::try_new(Rate::per_second(nz(10)), nz(20)).unwrap().into();
    let expected: Limit = TokenBucket::try_new(Rate::per_second(nz(7)), nz(14)).unwrap().into();
    assert_eq!(bucket.share(2.0, 3), expected);
    let permits: Limit = Concurrency::try_new(nz(5), Duration::from_secs(30)).unwrap().into();
    assert_eq!(permits.share(2.0, 3), permits, "concurrency is not shared out");
}

/// A fallback over a store that answers is that store: the store conformance suite passes through it.
mod conformance {
    floodgate_testkit::conformance_tests!(|clock| floodgate::store::Fallback::new(
        floodgate::MemoryStore::with_config(floodgate::MemoryConfig::default(), clock.clone()),
        floodgate::MemoryStore::with_config(floodgate::MemoryConfig::default(), clock),
        floodgate::store::FallbackConfig::default(),
    ));
}
