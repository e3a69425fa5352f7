//! A call Redis runs after its caller gave up changes nothing: checks and reports carry a
//! not-after time on Redis's clock, past which the scripts answer "stale" and write nothing — so a
//! paused Redis that comes back never charges the requests the engine denied meanwhile.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::store::{Applied, Mode, Op};
use floodgate::{Descriptors, Engine, Limit, OnStoreError, Policy, Rule, Store, StoreError};
use floodgate_core::{Clock, FixedWindow, Gcra, Rate, SlidingLog, SystemClock, Timestamp, TokenBucket};
use floodgate_redis::{RedisConfig, RedisStore};
use floodgate_testkit::process::Signal;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{TestKey, every_algorithm, wait};
use futures_util::future::join_all;

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

/// A process clock that stands still, except when the test steps it back (as no real clock does:
/// it stands for an estimate of Redis's time that has fallen behind).
#[derive(Debug, Clone)]
struct SteppedBack {
    start: Timestamp,
    behind_us: Arc<AtomicU64>,
}

impl SteppedBack {
    fn new() -> Self {
        SteppedBack { start: SystemClock::new().now(), behind_us: Arc::new(AtomicU64::new(0)) }
    }

    fn step_back(&self, by: Duration) {
        let by = u64::try_from(by.as_micros()).expect("a short step");
        self.behind_us.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for SteppedBack {
    fn now(&self) -> Timestamp {
        let behind = Duration::from_micros(self.behind_us.load(Ordering::SeqCst));
        self.start.saturating_sub(behind)
    }
}

/// Checks and reports of every algorithm, alone (the single-limit scripts where the algorithm has
/// one) and all in one request (the driver; across slots on a cluster), run by Redis past their
/// not-after time: each is a timeout, and nothing is charged.
async fn late_calls_write_nothing(base: RedisStore) {
    // The store estimates Redis's time from this clock and the offset seen in a reply.
    let clock = SteppedBack::new();
    let store = base.with_local_clock(clock.clone());
    let limits = every_algorithm(10);
    let name = format!("stale-{}-{}", std::process::id(), SystemClock::new().now().as_micros());
    let keys: Vec<TestKey> = limits.iter().map(|l| TestKey::new(&name, l.algorithm_name())).collect();
    let all: Vec<Op<'_>> = keys.iter().zip(&limits).map(|(k, l)| k.op(l, 1)).collect();
    let mut requests: Vec<Vec<Op<'_>>> = all.iter().map(|op| vec![*op]).collect();
    requests.push(all.clone());
    let mut out = Applied::default();

    // A first reply gives the offset to Redis's clock (before it, calls go unguarded).
    store.apply(&all, Mode::Peek, &mut out).await.expect("a peek");
    for ops in &requests {
        for mode in [Mode::Check, Mode::Report] {
            // The process clock steps back an hour, and with it the store's estimate of Redis's
            // time: Redis runs the call an hour past its not-after time, as it would a call queued
            // behind an hour-long pause.
            clock.step_back(Duration::from_secs(3600));
            let err = store.apply(ops, mode, &mut out).await.expect_err("a stale call");
            assert!(matches!(err, StoreError::Timeout(d) if d == crate::SHARED_DEADLINE), "{mode:?}: {err}");
        }
    }
    store.apply(&all, Mode::Peek, &mut out).await.expect("a peek");
    for (r, l) in out.results.iter().zip(&limits) {
        assert!(r.decision.allowed, "{}: {r:?}", l.algorithm_name());
        assert_eq!(r.decision.remaining, 9, "{} was charged by a stale call", l.algorithm_name());
    }

    // The stale answer carried Redis's time: the estimate is right again, and the next check counts.
    store.apply(&all, Mode::Check, &mut out).await.expect("a check in time");
    for (r, l) in out.results.iter().zip(&limits) {
        assert!(r.decision.allowed && r.grant.is_some(), "{}: {r:?}", l.algorithm_name());
        assert_eq!(r.decision.remaining, 9, "{}", l.algorithm_name());
    }
}

#[tokio::test]
async fn node_checks_and_reports_run_past_their_not_after_time_write_nothing() {
    late_calls_write_nothing(crate::node_store().await).await;
}

#[tokio::test]
async fn cluster_checks_and_reports_run_past_their_not_after_time_write_nothing() {
    late_calls_write_nothing(crate::cluster_store().await).await;
}

/// The three request shapes a rule set makes: a fixed window alone (`one_window.lua`), a GCRA
/// alone (`one_bucket.lua`), a sliding log and a token bucket together (the driver); each limit
/// 10 per hour or day, failing closed.
fn policies() -> Vec<Policy> {
    let hour = Duration::from_secs(3600);
    let day = Rate::try_new(nz(10), Duration::from_secs(86_400)).expect("a rate");
    let rule = |name: &str, limit: Limit| {
        Rule::new(name, limit).key(["user"]).on_store_error(OnStoreError::FailClosed)
    };
    let fixed: Limit = FixedWindow::try_new(nz(10), hour).expect("a window").into();
    let gcra: Limit = Gcra::try_new(day, nz(10)).expect("a gcra").into();
    let log: Limit = SlidingLog::try_new(nz(10), hour).expect("a log").into();
    let bucket: Limit = TokenBucket::try_new(day, nz(10)).expect("a bucket").into();
    vec![
        Policy::new([rule("fixed", fixed)]).expect("a policy"),
        Policy::new([rule("gcra", gcra)]).expect("a policy"),
        Policy::new([rule("log", log), rule("bucket", bucket)]).expect("a policy"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_charges_nothing_for_the_requests_denied_while_it_was_paused() {
    let mut server = RedisServer::start();
    let deadline = Duration::from_millis(20);
    let url = server.url();
    let config = |deadline| RedisConfig {
        deadline,
        connect_timeout: crate::CONNECT,
        ..RedisConfig::node(url.clone())
    };
    let store = crate::warm_store(config(deadline)).await;
    let engines: Vec<Engine<RedisStore>> =
        policies().into_iter().map(|p| Engine::new(p, store.clone())).collect();
    let user = Descriptors::new().with("user", "u");

    // A reply within the deadline gives the store the offset to Redis's clock (a peek: nothing is
    // charged). On two busy cores a 20 ms deadline is missed now and then.
    wait::until("a running Redis answers within the deadline", || async {
        engines[0].peek(&user, 1).await.expect("valid").store_error.is_none().then_some(())
    })
    .await;

    // Frozen: every check waits out the deadline and is denied by `fail_closed`, while its script
    // waits in Redis's socket, unread.
    server.signal(Signal::Stop).expect("SIGSTOP");
    for engine in &engines {
        let verdicts =
            wait::finished("checks on a paused Redis", join_all((0..20).map(|_| engine.check(&user, 1))))
                .await;
        for v in verdicts {
            let v = v.expect("a valid request");
            assert_eq!(v.store_error.as_deref(), Some(&StoreError::Timeout(deadline)), "{v:?}");
            assert!(!v.allowed, "denied by fail_closed: {v:?}");
        }
    }
    // Every check was sent before its verdict came back, and is stale on Redis's clock from
    // deadline + 2 × 50 ms after it was sent. Redis resumes later than that (a sleep never ends
    // early), so it runs every one of them past its not-after time.
    tokio::time::sleep(deadline + Duration::from_millis(500)).await;
    server.signal(Signal::Cont).expect("SIGCONT");
    // Redis runs one connection's commands in order: once the store's connection answers a call
    // sent after the checks, Redis has run them all.
    wait::until("the resumed Redis answers after the backlog", || async {
        engines[0].peek(&user, 1).await.expect("valid").store_error.is_none().then_some(())
    })
    .await;

    // The limits are as if the denied requests never were.
    let observer = RedisStore::connect(config(crate::SHARED_DEADLINE)).await.expect("connect");
    for policy in policies() {
        let engine = Engine::new(policy, observer.clone());
        let peek = engine.peek(&user, 1).await.expect("a peek");
        for l in &peek.limits {
            assert_eq!(l.decision.remaining, 9, "{}: charged by requests denied during the pause", l.rule);
        }
        for i in 0..11 {
            let v = engine.check(&user, 1).await.expect("a check");
            assert_eq!(v.store_error, None);
            assert_eq!(v.allowed, i < 10, "check {i} after the pause: the whole limit, then denials");
        }
    }
}
