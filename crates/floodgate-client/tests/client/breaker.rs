//! The circuit breaker against a stopped server (connections refused) and a black-holed one
//! (connections accepted, never answered): failures open it, the fail mode then decides at once
//! with nothing sent, one probe goes when its open time is over, and the real server back at the
//! same address closes it. The open time runs on a manual clock, moved by the test.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use floodgate_client::{BreakerConfig, BreakerState, Client, Error, FailMode, FailureReason, RetryPolicy};
use floodgate_core::{ManualClock, Timestamp};
use floodgate_testkit::wait;

use super::{CONFIG, Running, silent, user};

const OPEN_FOR: Duration = Duration::from_secs(30);

fn breaker() -> BreakerConfig {
    BreakerConfig { consecutive_failures: 3, open_for: OPEN_FOR, ..BreakerConfig::default() }
}

fn clock() -> ManualClock {
    ManualClock::new(Timestamp::from_secs(1_000_000))
}

#[tokio::test]
async fn a_stopped_server_opens_the_breaker_then_the_fail_mode_decides_unsent_until_a_probe_finds_it_back() {
    let mut server = Running::start(CONFIG).await;
    let addr = server.addr;
    let clock = clock();
    // A deadline far longer than a refused connection takes: the refusal ends each call.
    let floodgate = Client::builder(server.url())
        .deadline(Duration::from_secs(5))
        .fail_mode(FailMode::Closed)
        .breaker(breaker())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(floodgate.check(&user("b")).await.unwrap().allowed);
    server.stop().await;

    for n in 1..=3 {
        let d = wait::finished("a check of the stopped server", floodgate.check(&user("b"))).await.unwrap();
        assert_eq!(
            d.failure,
            Some((FailureReason::Unreachable, FailMode::Closed)),
            "call {n}: sent, refused"
        );
    }
    assert_eq!(floodgate.breaker_state(), Some(BreakerState::Open), "3 failures in a row");
    let sent = floodgate.stats().calls;
    assert_eq!(sent, 4);

    // Open: the fail mode decides at once, nothing is sent.
    let d = floodgate.check(&user("b")).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.status, 0);
    assert_eq!(d.failure, Some((FailureReason::BreakerOpen, FailMode::Closed)));
    assert_eq!(d.retry_after_secs(), Some(1));
    let d = floodgate.check(&user("b").fail_mode(FailMode::Open)).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.failure, Some((FailureReason::BreakerOpen, FailMode::Open)));
    // A call without a fail mode gets the error, and is not retried: the breaker decides when the
    // service is tried again.
    let (attempts, usage) = (AtomicU32::new(0), user("b"));
    let policy = RetryPolicy { base: Duration::from_millis(1), ..RetryPolicy::default() };
    let result = floodgate
        .retry(policy, |_| {
            attempts.fetch_add(1, Ordering::SeqCst);
            floodgate.report(&usage)
        })
        .await;
    match result {
        Err(Error::Unavailable { reason: FailureReason::BreakerOpen, not_sent: true, message, .. }) => {
            assert!(message.contains("circuit breaker is open"), "{message}");
        }
        other => panic!("expected the breaker's refusal, got {other:?}"),
    }
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    let stats = floodgate.stats();
    assert_eq!(stats.calls, sent, "nothing sent while open");
    assert_eq!(stats.breaker_open, 3);
    assert_eq!((stats.unreachable, stats.failed_closed, stats.failed_open), (3, 4, 1));
    assert_eq!(stats.breaker_opened, 1);

    // The server is back where it was; the breaker sends nothing until its open time is over.
    let mut server = Running::start_at(CONFIG, addr).await;
    let d = floodgate.check(&user("b")).await.unwrap();
    assert_eq!(d.failure, Some((FailureReason::BreakerOpen, FailMode::Closed)));
    assert_eq!(floodgate.stats().calls, sent);

    clock.advance(OPEN_FOR);
    let d = floodgate.check(&user("b")).await.unwrap();
    assert_eq!((d.status, d.failure), (200, None), "the probe, answered by the server");
    assert_eq!(floodgate.breaker_state(), Some(BreakerState::Closed));
    assert!(floodgate.check(&user("b")).await.unwrap().allowed, "closed: calls are sent again");
    let stats = floodgate.stats();
    assert_eq!((stats.breaker_opened, stats.breaker_half_opened, stats.breaker_closed), (1, 1, 1));
    assert_eq!(stats.calls, sent + 2);
    server.stop().await;
}

#[tokio::test]
async fn a_black_holed_server_opens_the_breaker_by_deadlines_and_one_probe_goes_at_a_time() {
    let (addr, accepted, holder) = silent().await;
    let clock = clock();
    let floodgate = Client::builder(format!("http://{addr}"))
        .deadline(Duration::from_millis(200))
        .fail_mode(FailMode::Open)
        .breaker(breaker())
        .clock(clock.clone())
        .build()
        .unwrap();
    // Nothing answers: each call ends at its deadline, a failure.
    for n in 1..=3 {
        let d = wait::finished("a check of a black hole", floodgate.check(&user("h"))).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.failure, Some((FailureReason::Deadline, FailMode::Open)), "call {n}");
    }
    assert_eq!(floodgate.breaker_state(), Some(BreakerState::Open));
    // A call given up mid-way leaves its connection unusable: one connection each.
    wait::until("the three calls' connections", || async {
        (accepted.load(Ordering::SeqCst) == 3).then_some(())
    })
    .await;

    // Open: decided at once, and the black hole sees nothing more.
    let d = floodgate.check(&user("h")).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.failure, Some((FailureReason::BreakerOpen, FailMode::Open)));
    assert_eq!(floodgate.stats().calls, 3);

    // Half-open: one probe goes; a call meanwhile is decided at once. The probe meets the hole
    // and the breaker opens again.
    clock.advance(OPEN_FOR);
    let probe = tokio::spawn({
        let floodgate = floodgate.clone();
        async move { floodgate.check(&user("h")).await }
    });
    wait::until("the probe's connection", || async { (accepted.load(Ordering::SeqCst) == 4).then_some(()) })
        .await;
    let meanwhile = floodgate.check(&user("h")).await.unwrap();
    assert_eq!(meanwhile.failure, Some((FailureReason::BreakerOpen, FailMode::Open)));
    let probed = wait::finished("the probe", probe).await.unwrap().unwrap();
    assert_eq!(probed.failure, Some((FailureReason::Deadline, FailMode::Open)));
    assert_eq!(floodgate.breaker_state(), Some(BreakerState::Open), "a failed probe opens it again");
    assert_eq!(accepted.load(Ordering::SeqCst), 4, "one probe, no other call");

    // The hole is gone and the server listens where it was: the next probe closes the breaker.
    holder.abort();
    let _ = holder.await;
    let mut server = Running::start_at(CONFIG, addr).await;
    clock.advance(OPEN_FOR);
    // This call's deadline far longer than the server takes to answer on a busy machine.
    let d = floodgate.check(&user("h").deadline(Duration::from_secs(10))).await.unwrap();
    assert_eq!((d.status, d.failure), (200, None));
    assert_eq!(floodgate.breaker_state(), Some(BreakerState::Closed));
    let stats = floodgate.stats();
    assert_eq!((stats.breaker_opened, stats.breaker_half_opened, stats.breaker_closed), (2, 2, 1));
    assert_eq!((stats.calls, stats.deadline, stats.breaker_open), (5, 4, 2));
    assert_eq!(stats.failed_open, 6);
    server.stop().await;
}
