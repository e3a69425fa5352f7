//! The RLS client (feature `grpc`) against the server's gRPC listener.

use std::time::Duration;

use floodgate_client::grpc::RlsClient;
use floodgate_client::{FailMode, FailureReason};
use floodgate_testkit::wait;

use super::{CONFIG, Running, silent};

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

    // Stopped: the call fails closed, ended by the refused connection or by its deadline, whichever
    // the channel meets first.
    let rls = rls.deadline(Duration::from_millis(300));
    let d = wait::finished("a call to the stopped server", rls.should_rate_limit("app", &[user], 1))
        .await
        .unwrap();
    assert!(!d.allowed);
    assert!(matches!(
        d.failure,
        Some((FailureReason::Unreachable | FailureReason::Deadline, FailMode::Closed))
    ));
    assert_eq!(d.retry_after, Some(Duration::from_secs(1)));
    assert_eq!(rls.stats().failed_closed, 1);
}

#[tokio::test]
async fn should_rate_limit_fails_by_its_deadline_when_the_service_never_answers() {
    let (addr, _, holder) = silent().await;
    let rls = RlsClient::connect_lazy(format!("http://{addr}"))
        .unwrap()
        .deadline(Duration::from_millis(300))
        .fail_mode(FailMode::Closed);
    let user: &[(&str, &str)] = &[("user", "g1")];
    // Nothing answers: only the deadline ends the call.
    let d =
        wait::finished("a call to a silent service", rls.should_rate_limit("app", &[user], 1)).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.failure, Some((FailureReason::Deadline, FailMode::Closed)));
    assert_eq!(d.retry_after, Some(Duration::from_secs(1)));
    assert_eq!((rls.stats().deadline, rls.stats().failed_closed), (1, 1));
    holder.abort();
}
