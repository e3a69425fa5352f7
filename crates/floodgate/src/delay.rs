//! `action: delay`: what a front door that can hold a request (the gateway, the tower layer) does
//! with a denial — wait for capacity up to the rule's `max_wait`, then decide again.
//!
//! The engine enforces a delay rule like a deny rule: a verdict is allowed or denied, exactly, and a
//! denied request consumed nothing. [`next_wait`] says whether the front door should wait rather
//! than answer 429, and for how long: only when **every** limit that denied is a delay rule, and
//! the wait (the verdict's exact `retry_after`) still fits within the smallest `max_wait` of those
//! rules, counted from the request's first denial. After the wait the request is decided again from
//! scratch — another request may have taken the capacity meanwhile, so it may wait again, until its
//! `max_wait` is spent.
//!
//! Waiting requests are bounded ([`Waiting`]): past the bound a request that would wait is denied
//! at once, so that a flood cannot park unbounded work in memory. Time is the caller's: it passes how
//! long the request has waited so far, measured on its own clock.
//!
//! ```
//! use std::num::NonZeroU64;
//! use std::time::Duration;
//! use floodgate::{Action, Descriptors, Engine, MemoryStore, Policy, Rule};
//! use floodgate::delay::next_wait;
//! use floodgate_core::{FixedWindow, ManualClock, Timestamp};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let rule = Rule::new("smooth", FixedWindow::try_new(NonZeroU64::new(1).unwrap(), Duration::from_secs(1))?)
//!     .action(Action::Delay { max_wait: Duration::from_secs(2) });
//! let clock = ManualClock::new(Timestamp::from_secs(100));
//! let engine = Engine::new(Policy::new([rule])?, MemoryStore::with_config(Default::default(), clock.clone()));
//! let any = Descriptors::new();
//! assert!(engine.check(&any, 1).await?.allowed);
//! let denied = engine.check(&any, 1).await?;
//! // Denied by a delay rule: wait one second (the window's end), well within max_wait.
//! assert_eq!(next_wait(&engine.policy(), &denied, Duration::ZERO), Some(Duration::from_secs(1)));
//! // Having already waited 1.5 s, another second would pass max_wait: deny.
//! assert_eq!(next_wait(&engine.policy(), &denied, Duration::from_millis(1500)), None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::{Action, Policy, Verdict};

/// How long to wait before deciding a denied request again, or `None` to deny it now.
///
/// `Some(wait)` only when `verdict` is denied, every denying limit is a rule of `policy` with
/// [`Action::Delay`], each has a `retry_after`, and `waited + wait` is within the smallest
/// `max_wait` of those rules. `waited` is how long the request has already waited.
pub fn next_wait(policy: &Policy, verdict: &Verdict, waited: Duration) -> Option<Duration> {
    if verdict.allowed {
        return None;
    }
    let mut budget = Duration::MAX;
    let mut wait = Duration::ZERO;
    for limit in verdict.limits.iter().filter(|l| l.outcome.denies()) {
        let rule = policy.rule(limit.index).filter(|r| r.name() == &*limit.rule)?;
        let Action::Delay { max_wait } = rule.action_kind() else { return None };
        budget = budget.min(max_wait);
        wait = wait.max(limit.decision.retry_after?);
    }
    (!wait.is_zero() && waited.saturating_add(wait) <= budget).then_some(wait)
}

/// The bound on requests waiting for capacity, and how many waited: shared by the front door's
/// requests (cheap to clone).
#[derive(Debug, Clone)]
pub struct Waiting {
    inner: Arc<Counts>,
}

#[derive(Debug)]
struct Counts {
    max: usize,
    now: AtomicUsize,
    waited: AtomicU64,
    refused: AtomicU64,
}

impl Waiting {
    /// At most `max` requests wait at once.
    pub fn new(max: usize) -> Self {
        Waiting {
            inner: Arc::new(Counts {
                max,
                now: AtomicUsize::new(0),
                waited: AtomicU64::new(0),
                refused: AtomicU64::new(0),
            }),
        }
    }

    /// A place among the waiting requests, or `None` when `max` already wait (the request is then
    /// denied at once). The place is given back when the slot is dropped.
    pub fn enter(&self) -> Option<WaitSlot> {
        let counts = &self.inner;
        let mut now = counts.now.load(Ordering::Relaxed);
        loop {
            if now >= counts.max {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            match counts.now.compare_exchange_weak(now, now + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        counts.waited.fetch_add(1, Ordering::Relaxed);
        Some(WaitSlot { inner: Arc::clone(&self.inner) })
    }

    /// The most requests that wait at once.
    pub fn max(&self) -> usize {
        self.inner.max
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.inner.now.load(Ordering::Relaxed)
    }

    /// Waits begun so far (a request that waits twice counts twice).
    pub fn waited(&self) -> u64 {
        self.inner.waited.load(Ordering::Relaxed)
    }

    /// Requests that would have waited but found `max` already waiting, and were denied.
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }
}

/// One waiting request's place (see [`Waiting::enter`]).
#[derive(Debug)]
pub struct WaitSlot {
    inner: Arc<Counts>,
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        self.inner.now.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_is_bounded_and_places_come_back() {
        let waiting = Waiting::new(2);
        let a = waiting.enter().unwrap();
        let _b = waiting.enter().unwrap();
        assert!(waiting.enter().is_none());
        assert_eq!((waiting.waiting(), waiting.waited(), waiting.refused()), (2, 2, 1));
        drop(a);
        assert!(waiting.enter().is_some());
        assert_eq!(waiting.waiting(), 1);
    }
}
