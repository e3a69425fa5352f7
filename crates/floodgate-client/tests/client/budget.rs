//! The retry budget against a stopped server and a server answering 503: the retries stop at the
//! budget's share of the calls, counted by the caller and by the server. The budget's window runs
//! on a manual clock that the test leaves still, so every call falls within it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use floodgate_client::{Client, Error, FailureReason, RetryBudgetConfig, RetryPolicy};
use floodgate_core::{ManualClock, Timestamp};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::{read_message, refusing_url, user};

/// 10 % of the calls, plus 1 a second over a 2 s window: 2 retries with no traffic at all.
const BUDGET: RetryBudgetConfig =
    RetryBudgetConfig { ratio: 0.1, min_per_second: 1, window: Duration::from_secs(2) };

/// Calls made in each test, each of which would retry twice.
const CALLS: u32 = 30;

/// The retries the budget grants over `CALLS` calls: the floor of 2, then one per 10 calls.
const GRANTED: u32 = 2 + CALLS / 10;

fn client(url: &str) -> Client {
    Client::builder(url)
        .deadline(Duration::from_secs(5))
        // The budget alone: no breaker that would stop the calls first.
        .no_breaker()
        .retry_budget(BUDGET)
        .clock(ManualClock::new(Timestamp::from_secs(1_000_000)))
        .build()
        .unwrap()
}

#[tokio::test]
async fn retries_of_a_stopped_server_stop_at_the_budget() {
    let floodgate = client(&refusing_url().await);
    let policy = RetryPolicy { base: Duration::from_millis(1), ..RetryPolicy::default() };
    let attempts = AtomicU32::new(0);
    for _ in 0..CALLS {
        let usage = user("r");
        let result = floodgate
            .retry(policy, |_| {
                attempts.fetch_add(1, Ordering::SeqCst);
                floodgate.report(&usage)
            })
            .await;
        assert!(matches!(
            result,
            Err(Error::Unavailable { reason: FailureReason::Unreachable, not_sent: true, .. })
        ));
    }
    // Without the budget: 3 attempts a call, 90 in all.
    assert_eq!(attempts.load(Ordering::SeqCst), CALLS + GRANTED);
    let stats = floodgate.stats();
    assert_eq!(stats.calls, u64::from(CALLS + GRANTED));
    assert_eq!(stats.retries, u64::from(GRANTED));
    // Every call asked once and was refused, but the first (granted twice, then out of attempts)
    // and the 10th, 20th, 30th (granted once, then refused).
    assert_eq!(stats.retries_refused, u64::from(CALLS - 1));
}

/// A service that answers every request with a 503 problem: its address and how many requests it
/// answered.
async fn unavailable() -> (SocketAddr, Arc<AtomicU32>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicU32::new(0));
    let counter = answered.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let body = r#"{"type":"https://floodgate.dev/problems/store-unavailable","title":"Store Unavailable","status":503,"detail":"the store does not answer"}"#;
                let answer = format!(
                    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let mut buffer = Vec::new();
                while read_message(&mut stream, &mut buffer).await.is_some() {
                    counter.fetch_add(1, Ordering::SeqCst);
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, answered)
}

#[tokio::test]
async fn the_retries_of_commits_answered_503_stop_at_the_budget() {
    let (addr, answered) = unavailable().await;
    let floodgate = client(&format!("http://{addr}"));
    for _ in 0..CALLS {
        let result = floodgate.commit("0123456789abcdef0123456789abcdef", &[("tokens", 1)]).await;
        assert!(matches!(result, Err(Error::Unavailable { reason: FailureReason::ServerError, .. })));
    }
    // Without the budget, each commit is tried three times: 90 requests.
    assert_eq!(answered.load(Ordering::SeqCst), CALLS + GRANTED, "requests the server answered");
    let stats = floodgate.stats();
    assert_eq!((stats.retries, stats.server_error), (u64::from(GRANTED), u64::from(CALLS)));
}
