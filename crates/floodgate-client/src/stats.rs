//! What a client counts: its calls, the fail mode's decisions and why, the breaker's transitions,
//! the retries its budget granted and refused.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::decision::FailMode;
use crate::error::FailureReason;

/// What a client counted since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Calls sent (a call the open breaker refused is not).
    pub calls: u64,
    /// Checks, peeks and reserves allowed by [`FailMode::Open`].
    pub failed_open: u64,
    /// Checks, peeks and reserves denied by [`FailMode::Closed`].
    pub failed_closed: u64,
    /// Calls without a verdict because the service was unreachable.
    pub unreachable: u64,
    /// Calls without a verdict within the deadline.
    pub deadline: u64,
    /// Calls answered with a 5xx or no verdict.
    pub server_error: u64,
    /// Calls without a verdict because the TLS handshake failed.
    pub tls: u64,
    /// Calls not sent because the circuit breaker was open (or half-open with its probe in flight).
    pub breaker_open: u64,
    /// Times the breaker opened (after failures, or after a failed probe).
    pub breaker_opened: u64,
    /// Times it went half-open to send a probe.
    pub breaker_half_opened: u64,
    /// Times a probe's success closed it.
    pub breaker_closed: u64,
    /// Retries the retry budget granted.
    pub retries: u64,
    /// Retries the retry budget refused (the error of the attempt was returned instead).
    pub retries_refused: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    calls: AtomicU64,
    failed_open: AtomicU64,
    failed_closed: AtomicU64,
    unreachable: AtomicU64,
    deadline: AtomicU64,
    server_error: AtomicU64,
    tls: AtomicU64,
    breaker_open: AtomicU64,
}

impl Counters {
    pub(crate) fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count(&self, reason: FailureReason, mode: Option<FailMode>) {
        match reason {
            FailureReason::Unreachable => &self.unreachable,
            FailureReason::Deadline => &self.deadline,
            FailureReason::ServerError => &self.server_error,
            FailureReason::Tls => &self.tls,
            FailureReason::BreakerOpen => &self.breaker_open,
        }
        .fetch_add(1, Ordering::Relaxed);
        match mode {
            Some(FailMode::Open) => self.failed_open.fetch_add(1, Ordering::Relaxed),
            Some(FailMode::Closed) => self.failed_closed.fetch_add(1, Ordering::Relaxed),
            None => 0,
        };
    }

    /// The calls and failures; the breaker's and the budget's counts are left at 0.
    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            calls: self.calls.load(Ordering::Relaxed),
            failed_open: self.failed_open.load(Ordering::Relaxed),
            failed_closed: self.failed_closed.load(Ordering::Relaxed),
            unreachable: self.unreachable.load(Ordering::Relaxed),
            deadline: self.deadline.load(Ordering::Relaxed),
            server_error: self.server_error.load(Ordering::Relaxed),
            tls: self.tls.load(Ordering::Relaxed),
            breaker_open: self.breaker_open.load(Ordering::Relaxed),
            ..Stats::default()
        }
    }
}
