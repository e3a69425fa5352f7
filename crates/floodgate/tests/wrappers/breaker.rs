//! The breaker's transitions: closed → open on the failure rate with a minimum of calls; open
//! fails at once without calling the store; after `open_for` exactly one probe; a hung probe does
//! not hold half-open past its timeout; success closes, failure reopens.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate::core::{FixedWindow, ManualClock};
use floodgate::store::{Applied, Breaker, BreakerConfig, BreakerState, Mode, Store, StoreError};
use floodgate::{Limit, MemoryConfig, MemoryStore};
use floodgate_testkit::{Behaviour, FlakyStore, START, TestKey};

type Flaky = FlakyStore<MemoryStore<ManualClock>>;

fn config() -> BreakerConfig {
    BreakerConfig {
        failure_rate: 0.5,
        min_calls: 10,
        window: Duration::from_secs(10),
        // The rate alone, unless a test says otherwise.
        consecutive_failures: u32::MAX,
        open_for: Duration::from_secs(2),
        probe_timeout: Duration::from_millis(20),
    }
}

struct Rig {
    breaker: Breaker<Flaky, ManualClock>,
    flaky: Flaky,
    clock: ManualClock,
    changes: Arc<Mutex<Vec<BreakerState>>>,
    limit: Limit,
    key: TestKey,
}

fn rig() -> Rig {
    rig_with(config())
}

fn rig_with(config: BreakerConfig) -> Rig {
    let clock = ManualClock::new(START);
    let flaky = FlakyStore::new(MemoryStore::with_config(MemoryConfig::default(), clock.clone()));
    let changes = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&changes);
    let on_change = Arc::new(move |s| seen.lock().unwrap().push(s));
    let breaker = Breaker::on_change(flaky.clone(), config, clock.clone(), on_change);
    let limit = FixedWindow::try_new(1_000_000.try_into().unwrap(), Duration::from_secs(60)).unwrap().into();
    Rig { breaker, flaky, clock, changes, limit, key: TestKey::new("r", "k") }
}

impl Rig {
    async fn call(&self) -> Result<(), StoreError> {
        let mut out = Applied::default();
        self.breaker.apply(&[self.key.op(&self.limit, 1)], Mode::Check, &mut out).await
    }

    fn changes(&self) -> Vec<BreakerState> {
        self.changes.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn it_opens_on_the_failure_rate_only_with_enough_calls_and_then_calls_nothing() {
    let r = rig();
    // Nine failures of nine calls: under the minimum of ten, still closed.
    r.flaky.set(Behaviour::Failing);
    for _ in 0..9 {
        assert!(r.call().await.is_err());
    }
    assert_eq!(r.breaker.state(), BreakerState::Closed);
    // The tenth failure: 10 calls, 100% failed.
    assert!(matches!(r.call().await, Err(StoreError::Backend { .. })));
    assert_eq!(r.breaker.state(), BreakerState::Open);
    assert_eq!(r.changes(), [BreakerState::Open], "one change, told once");

    // Open: calls fail at once with BreakerOpen, and the store is not called at all.
    let attempts = r.flaky.attempts();
    r.flaky.set(Behaviour::Healthy);
    for _ in 0..100 {
        assert_eq!(r.call().await, Err(StoreError::BreakerOpen));
    }
    assert_eq!(r.flaky.attempts(), attempts, "no store call while open");
    assert!(StoreError::BreakerOpen.is_transient());
}

#[tokio::test]
async fn a_failure_rate_under_the_threshold_keeps_it_closed_and_old_failures_age_out() {
    let r = rig();
    // 4 failures in 10 calls: 40% < 50%.
    for i in 0..10 {
        r.flaky.set(if i < 4 { Behaviour::Failing } else { Behaviour::Healthy });
        let _ = r.call().await;
    }
    assert_eq!(r.breaker.state(), BreakerState::Closed);
    // Five more failures, but 11 s later: the first ten calls left the window; 5 calls < minimum.
    r.clock.advance(Duration::from_secs(11));
    r.flaky.set(Behaviour::Failing);
    for _ in 0..5 {
        let _ = r.call().await;
    }
    assert_eq!(r.breaker.state(), BreakerState::Closed, "aged-out calls do not count");
}

#[tokio::test]
async fn after_open_for_exactly_one_probe_goes_out_and_success_closes() {
    let r = rig();
    r.flaky.set(Behaviour::Failing);
    for _ in 0..10 {
        let _ = r.call().await;
    }
    assert_eq!(r.breaker.state(), BreakerState::Open);
    r.clock.advance(Duration::from_millis(1_999));
    assert_eq!(r.call().await, Err(StoreError::BreakerOpen), "1 ms before open_for: still open");

    // The store answers again, but hangs the probe: one call reaches it, the others fail at once.
    r.clock.advance(Duration::from_millis(1));
    r.flaky.set(Behaviour::Hanging);
    let before = r.flaky.attempts();
    let (probe, others) = tokio::join!(r.call(), async {
        tokio::task::yield_now().await;
        let mut answers = Vec::new();
        for _ in 0..5 {
            answers.push(r.call().await);
        }
        assert_eq!(r.breaker.state(), BreakerState::HalfOpen);
        r.flaky.set(Behaviour::Healthy);
        answers
    });
    assert_eq!(probe, Ok(()), "the probe succeeds once the store answers");
    assert!(others.iter().all(|a| *a == Err(StoreError::BreakerOpen)), "{others:?}");
    assert_eq!(r.flaky.attempts() - before, 1, "exactly one probe");
    assert_eq!(r.breaker.state(), BreakerState::Closed);
    assert_eq!(r.changes(), [BreakerState::Open, BreakerState::HalfOpen, BreakerState::Closed]);
    assert_eq!(r.call().await, Ok(()), "closed: calls go through");
}

#[tokio::test]
async fn a_failed_probe_reopens_for_another_open_for() {
    let r = rig();
    r.flaky.set(Behaviour::Failing);
    for _ in 0..10 {
        let _ = r.call().await;
    }
    r.clock.advance(Duration::from_secs(2));
    assert!(
        matches!(r.call().await, Err(StoreError::Backend { .. })),
        "the probe reaches the store and fails"
    );
    assert_eq!(r.breaker.state(), BreakerState::Open);
    r.clock.advance(Duration::from_millis(1_999));
    assert_eq!(
        r.call().await,
        Err(StoreError::BreakerOpen),
        "open for another open_for from the failed probe"
    );
    r.clock.advance(Duration::from_millis(1));
    r.flaky.set(Behaviour::Healthy);
    assert_eq!(r.call().await, Ok(()));
    assert_eq!(r.breaker.state(), BreakerState::Closed);
}

#[tokio::test]
async fn a_hung_probe_does_not_hold_half_open_past_its_timeout() {
    let r = rig();
    r.flaky.set(Behaviour::Failing);
    for _ in 0..10 {
        let _ = r.call().await;
    }
    r.clock.advance(Duration::from_secs(2));
    r.flaky.set(Behaviour::Hanging);
    // The first probe hangs (never completes here); within its timeout others are refused.
    let hung = tokio::spawn({
        let breaker = r.breaker.clone();
        let (key, limit) = (r.key.clone(), r.limit.clone());
        async move {
            let mut out = Applied::default();
            breaker.apply(&[key.op(&limit, 1)], Mode::Check, &mut out).await
        }
    });
    tokio::task::yield_now().await;
    assert_eq!(r.breaker.state(), BreakerState::HalfOpen);
    assert_eq!(r.call().await, Err(StoreError::BreakerOpen));
    // Past the probe timeout, the next caller probes instead, and closes the breaker.
    r.clock.advance(Duration::from_millis(20));
    r.flaky.set(Behaviour::Healthy);
    assert_eq!(r.call().await, Ok(()));
    assert_eq!(r.breaker.state(), BreakerState::Closed);
    let _ = hung.await;

    // A probe whose caller gives up frees half-open at once.
    r.flaky.set(Behaviour::Failing);
    for _ in 0..10 {
        let _ = r.call().await;
    }
    r.clock.advance(Duration::from_secs(2));
    r.flaky.set(Behaviour::Hanging);
    let abandoned = tokio::time::timeout(Duration::from_millis(5), r.call()).await;
    assert!(abandoned.is_err(), "the caller gave up on its probe");
    r.flaky.set(Behaviour::Healthy);
    assert_eq!(r.call().await, Ok(()), "the next caller probes without waiting for a timeout");
    assert_eq!(r.breaker.state(), BreakerState::Closed);
}

#[tokio::test]
async fn failures_in_a_row_open_it_whatever_the_successes_before() {
    let r = rig_with(BreakerConfig { consecutive_failures: 5, ..config() });
    // A busy store: a thousand successes in the window.
    for _ in 0..1000 {
        r.call().await.unwrap();
    }
    r.flaky.set(Behaviour::Failing);
    for _ in 0..4 {
        assert!(r.call().await.is_err());
    }
    // One success in between starts the count again.
    r.flaky.set(Behaviour::Healthy);
    r.call().await.unwrap();
    r.flaky.set(Behaviour::Failing);
    for _ in 0..4 {
        assert!(r.call().await.is_err());
    }
    assert_eq!(r.breaker.state(), BreakerState::Closed, "4 in a row, a 0.8% failure rate");
    assert!(r.call().await.is_err());
    assert_eq!(r.breaker.state(), BreakerState::Open, "the fifth in a row opens it");
    let attempts = r.flaky.attempts();
    assert_eq!(r.call().await, Err(StoreError::BreakerOpen));
    assert_eq!(r.flaky.attempts(), attempts);
    assert_eq!(r.changes(), [BreakerState::Open]);
}

#[tokio::test]
async fn calls_that_fail_together_in_one_stall_are_one_failure_of_the_streak() {
    let r = rig_with(BreakerConfig { consecutive_failures: 5, ..config() });
    for _ in 0..1000 {
        r.call().await.unwrap();
    }
    // Fifty calls in flight when the store stalls; a millisecond later they all fail together.
    r.flaky.set(Behaviour::Hanging);
    let stalled = futures_util::future::join_all((0..50).map(|_| r.call()));
    let (failed, ()) = tokio::join!(stalled, async {
        tokio::task::yield_now().await;
        r.clock.advance(Duration::from_millis(1));
        r.flaky.set(Behaviour::Failing);
    });
    assert!(failed.iter().all(Result::is_err));
    assert_eq!(r.breaker.state(), BreakerState::Closed, "one stall: one failure of the streak, not fifty");
    // A store that keeps failing fails the calls sent after the stall too: those count.
    for _ in 0..3 {
        assert!(r.call().await.is_err());
    }
    assert_eq!(r.breaker.state(), BreakerState::Closed, "4 in a row");
    assert!(r.call().await.is_err());
    assert_eq!(r.breaker.state(), BreakerState::Open, "the fifth sent after the streak began opens it");
}

/// A breaker that never opens is the store it wraps: the store conformance suite passes through it.
mod conformance {
    floodgate_testkit::conformance_tests!(|clock| floodgate::store::Breaker::with_clock(
        floodgate::MemoryStore::with_config(floodgate::MemoryConfig::default(), clock.clone()),
        floodgate::store::BreakerConfig::default(),
        clock,
    ));
}
