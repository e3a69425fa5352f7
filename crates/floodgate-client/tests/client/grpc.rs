//! The RLS client (feature `grpc`) against the server's gRPC listener.

use std::time::{Duration, Instant};

use floodgate_client::grpc::RlsClient;
use floodgate_client::{FailMode, FailureReason};

use super::{CONFIG, Running};

#[tokio::test]
async fn should_rate_limit_allows_then_denies_with_retry_after_then_fails_closed_when_stopped() {
    let mut server = Running::start(CONFIG).await;
    let rls = RlsClient::connect_lazy(format!("http://{}", server.grpc))
        .unwrap()
        .deadline(Duration::from_secs(1))
        .fail_mode(FailMode::Closed);
    // A domain no Envoy file defines gets the native rules: `per-user`, 3 an hour.
    let user: &[(&str, &str)] = &[("user", "g1")];
    for _ in 0..3 {
        let d = rls.should_rate_limit("app", &[user], 1).await.unwrap();
        assert!(d.allowed);
        assert!(d.failure.is_none());
    }
    let denied = rls.should_rate_limit("app", &[user], 1).await.unwrap();
    assert!(!denied.allowed);
    assert!(denied.retry_after.unwrap() >= Duration::from_secs(1));
    let statuses = &denied.response.unwrap().statuses;
    assert_eq!(statuses[0].limit_remaining, 0);
    server.stop().await;

    let rls = rls.deadline(Duration::from_millis(300));
    let started = Instant::now();
    let d = rls.should_rate_limit("app", &[user], 1).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(400), "{:?}", started.elapsed());
    assert!(!d.allowed);
    assert!(matches!(
        d.failure,
        Some((FailureReason::Unreachable | FailureReason::Deadline, FailMode::Closed))
    ));
    assert_eq!(d.retry_after, Some(Duration::from_secs(1)));
    assert_eq!(rls.stats().failed_closed, 1);
}
