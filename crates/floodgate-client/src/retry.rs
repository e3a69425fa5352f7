//! Retries of calls that surely did not run: the policy (attempts, exponential backoff with full
//! jitter, `Retry-After`), which [`Client::retry`](crate::Client::retry) runs within the client's
//! retry budget.

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, FailureReason};

/// How [`retry`] retries: at most `attempts` times after the first call, waiting a random time
/// below `min(max_backoff, base × 2^(n-1))` (full jitter), at least what the error's
/// `Retry-After` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first call. Default 2.
    pub attempts: u32,
    /// The first backoff ceiling. Default 100 ms.
    pub base: Duration,
    /// The largest backoff ceiling. Default 2 s.
    pub max_backoff: Duration,
    /// Full jitter (default) or exactly the backoff.
    pub jitter: bool,
    /// The call is idempotent: an error with an unknown outcome (a deadline, a connection lost
    /// mid-call) may be retried. Default false.
    pub idempotent: bool,
    /// A `Retry-After` longer than this is not waited for: the error is returned. Default 60 s.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: 2,
            base: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            jitter: true,
            idempotent: false,
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// An error that says whether its call may be retried.
pub trait Retryable {
    /// The call surely did not run (a refused connection, a 429): retrying cannot run it twice.
    fn surely_not_run(&self) -> bool;
    /// The call's outcome is unknown (a timeout, a connection lost mid-call).
    fn outcome_unknown(&self) -> bool;
    /// How long the error asks to wait (`Retry-After`).
    fn retry_after(&self) -> Option<Duration>;
}

/// A call the open breaker refused did not run, but is not retried: the breaker decides when the
/// service is tried again. Nor is a TLS failure, which a retry would meet again.
impl Retryable for Error {
    fn surely_not_run(&self) -> bool {
        match self {
            Error::RateLimited { .. } => true,
            Error::Unavailable { not_sent: true, reason, .. } => {
                !matches!(reason, FailureReason::BreakerOpen | FailureReason::Tls)
            }
            _ => false,
        }
    }

    fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            Error::Unavailable {
                not_sent: false,
                reason: FailureReason::Deadline | FailureReason::Unreachable,
                ..
            }
        )
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::RateLimited { retry_after } => Some(*retry_after),
            _ => None,
        }
    }
}

/// Calls `call` and retries it as `policy` says, only when its error surely did not run (or, with
/// `idempotent`, when its outcome is unknown). Any other error is returned at once.
///
/// This knows no retry budget: [`Client::retry`](crate::Client::retry) is the same within the
/// client's.
pub async fn retry<T, E, F, Fut>(policy: RetryPolicy, call: F) -> Result<T, E>
where
    E: Retryable,
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    retry_granted(policy, call, || true).await
}

/// [`retry`], asking `grant` before each retry; a retry it refuses returns the error.
pub(crate) async fn retry_granted<T, E, F, Fut>(
    policy: RetryPolicy,
    mut call: F,
    mut grant: impl FnMut() -> bool,
) -> Result<T, E>
where
    E: Retryable,
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut attempt = 0;
    loop {
        match call(attempt).await {
            Ok(value) => return Ok(value),
            Err(error) => {
                let retryable = error.surely_not_run() || (policy.idempotent && error.outcome_unknown());
                if !retryable || attempt >= policy.attempts {
                    return Err(error);
                }
                let asked = error.retry_after();
                if asked.is_some_and(|d| d > policy.max_retry_after) || !grant() {
                    return Err(error);
                }
                let wait = backoff(&policy, attempt).max(asked.unwrap_or_default());
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
        }
    }
}

/// The wait before retry `attempt + 1`.
pub(crate) fn backoff(policy: &RetryPolicy, attempt: u32) -> Duration {
    let ceiling = policy.base.saturating_mul(2u32.saturating_pow(attempt)).min(policy.max_backoff);
    if policy.jitter {
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(if nanos == 0 { 0 } else { fastrand::u64(0..nanos) })
    } else {
        ceiling
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_jitter_stays_below_the_exponential_ceiling() {
        let policy = RetryPolicy {
            base: Duration::from_millis(10),
            max_backoff: Duration::from_millis(35),
            ..RetryPolicy::default()
        };
        for _ in 0..1000 {
            assert!(backoff(&policy, 0) < Duration::from_millis(10));
            assert!(backoff(&policy, 1) < Duration::from_millis(20));
            assert!(backoff(&policy, 5) < Duration::from_millis(35));
        }
        let exact = RetryPolicy { jitter: false, ..policy };
        assert_eq!(backoff(&exact, 1), Duration::from_millis(20));
        assert_eq!(backoff(&exact, 9), Duration::from_millis(35));
    }
}
