//! A route's retry budget ([`Budget`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use floodgate_config::gateway::Retries;

/// A route's retry budget, Envoy-style: retries in flight may reach `budget` × the route's first
/// attempts in flight (at least `min_concurrent`), so that retry traffic stays within `budget` of
/// new traffic however hard the upstream fails.
#[derive(Debug, Default)]
pub(super) struct Budget {
    first: AtomicU64,
    retries: AtomicU64,
}

/// A first attempt in flight; counted until dropped.
#[derive(Debug)]
pub(super) struct FirstAttempt(Arc<Budget>);

/// A retry in flight (its backoff and its attempt); counted until dropped.
#[derive(Debug)]
pub(super) struct RetrySlot(Arc<Budget>);

impl Budget {
    pub(super) fn first_attempt(self: &Arc<Self>) -> FirstAttempt {
        self.first.fetch_add(1, Ordering::AcqRel);
        FirstAttempt(Arc::clone(self))
    }

    /// A retry, if the budget allows one now.
    pub(super) fn try_retry(self: &Arc<Self>, settings: &Retries) -> Option<RetrySlot> {
        let first = self.first.load(Ordering::Acquire) as f64;
        let allowed = (settings.budget * first).max(f64::from(settings.min_concurrent));
        let mut current = self.retries.load(Ordering::Acquire);
        loop {
            if (current + 1) as f64 > allowed {
                return None;
            }
            match self.retries.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(RetrySlot(Arc::clone(self))),
                Err(seen) => current = seen,
            }
        }
    }

    /// `(first attempts, retries)` in flight.
    #[cfg(test)]
    fn in_flight(&self) -> (u64, u64) {
        (self.first.load(Ordering::Acquire), self.retries.load(Ordering::Acquire))
    }
}

impl Drop for FirstAttempt {
    fn drop(&mut self) {
        self.0.first.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for RetrySlot {
    fn drop(&mut self) {
        self.0.retries.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_in_flight_stay_within_the_budget_of_first_attempts() {
        let budget = Arc::new(Budget::default());
        let settings = Retries { budget: 0.2, min_concurrent: 0, ..Retries::default() };
        let firsts: Vec<_> = (0..10).map(|_| budget.first_attempt()).collect();
        let a = budget.try_retry(&settings).expect("0.2 × 10 = 2 retries");
        let b = budget.try_retry(&settings).expect("the second");
        assert!(budget.try_retry(&settings).is_none(), "a third would pass 20 %");
        drop(a);
        let c = budget.try_retry(&settings).expect("a place came back");
        assert_eq!(budget.in_flight(), (10, 2));
        drop((b, c, firsts));
        assert_eq!(budget.in_flight(), (0, 0));
        assert!(budget.try_retry(&settings).is_none(), "no traffic, no minimum: no retry");
        let floor = Retries { budget: 0.2, min_concurrent: 3, ..Retries::default() };
        let held: Vec<_> = (0..3).map(|_| budget.try_retry(&floor).expect("within the minimum")).collect();
        assert!(budget.try_retry(&floor).is_none());
        drop(held);
    }
}
