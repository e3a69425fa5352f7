//! The retry budget: retries are allowed at most a share of the calls made lately, so that a
//! service that fails is not sent a second wave of retries on top of its traffic (Finagle's and
//! linkerd's retry budgets, tower's `TpsBudget`).
//!
//! Every call sent counts; every retry asks the budget first. Over the last `window`, a retry is
//! granted while the retries granted stay within `ratio` × the calls that were not retries, plus
//! `min_per_second` × the window's seconds — the floor that lets a quiet client retry at all.
//! A retry refused returns the error of the attempt it would have repeated.
//!
//! The counts sit in ten buckets over the window, on the client's clock, so the arithmetic is
//! tested on a manual clock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate_core::Clock;

use crate::clock::SharedClock;
use crate::error::Error;

/// Buckets of the window.
const BUCKETS: usize = 10;

/// One million: the ratio is kept in parts per million so that the arithmetic is exact.
const PPM: u64 = 1_000_000;

/// How many retries the client allows (see [`ClientBuilder::retry_budget`](crate::ClientBuilder::retry_budget)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudgetConfig {
    /// The share of recent calls that may be retried, from 0 to 1. Default 0.1.
    pub ratio: f64,
    /// Retries allowed per second of `window` whatever the traffic, so that a quiet client can
    /// still retry. Default 1 (10 retries in the default window).
    pub min_per_second: u32,
    /// How far back calls and retries are counted. Default 10 s.
    pub window: Duration,
}

impl Default for RetryBudgetConfig {
    fn default() -> RetryBudgetConfig {
        RetryBudgetConfig { ratio: 0.1, min_per_second: 1, window: Duration::from_secs(10) }
    }
}

impl RetryBudgetConfig {
    /// Checks the settings; an error names the field.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if !(0.0..=1.0).contains(&self.ratio) {
            return Err(Error::Config {
                field: "retry_budget.ratio",
                reason: format!("must be from 0 to 1 (a share of the calls), not {}", self.ratio),
            });
        }
        if self.window.is_zero() {
            return Err(Error::Config {
                field: "retry_budget.window",
                reason: "must be longer than 0".into(),
            });
        }
        Ok(())
    }
}

/// The budget of one client: the calls and retries of the window, and what it granted and refused.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    clock: SharedClock,
    /// `ratio` in parts per million.
    ratio_ppm: u64,
    /// The floor, in millionths of a retry: `min_per_second` × the window in µs.
    floor_ppm: u64,
    /// The length of one bucket, µs.
    span: u64,
    buckets: Mutex<[Bucket; BUCKETS]>,
    granted: AtomicU64,
    refused: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// Which span of time the counts are for (its index since the epoch).
    span: u64,
    calls: u64,
    retries: u64,
}

impl RetryBudget {
    /// A budget of `config` (validated) on `clock`.
    pub(crate) fn new(config: &RetryBudgetConfig, clock: SharedClock) -> RetryBudget {
        let window = u64::try_from(config.window.as_micros()).unwrap_or(u64::MAX);
        RetryBudget {
            clock,
            ratio_ppm: (config.ratio * PPM as f64).round() as u64,
            floor_ppm: u64::from(config.min_per_second).saturating_mul(window),
            span: (window / BUCKETS as u64).max(1),
            buckets: Mutex::new([Bucket::default(); BUCKETS]),
            granted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// A call was sent (a first attempt or a retry).
    pub(crate) fn deposit(&self) {
        self.with_current(|bucket| bucket.calls += 1, |_, _| ());
    }

    /// Asks for a retry: whether it may be sent.
    pub(crate) fn withdraw(&self) -> bool {
        let (floor, ratio) = (self.floor_ppm, self.ratio_ppm);
        let granted = self.with_current(
            |_| (),
            |buckets, current| {
                let (calls, retries) = totals(buckets, current);
                let first = calls.saturating_sub(retries);
                let allowed = floor.saturating_add(ratio.saturating_mul(first));
                let granted = (retries + 1).saturating_mul(PPM) <= allowed;
                if granted {
                    buckets[(current % BUCKETS as u64) as usize].retries += 1;
                }
                granted
            },
        );
        match granted {
            true => self.granted.fetch_add(1, Ordering::Relaxed),
            false => self.refused.fetch_add(1, Ordering::Relaxed),
        };
        granted
    }

    /// Retries granted and refused since the client was built.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.granted.load(Ordering::Relaxed), self.refused.load(Ordering::Relaxed))
    }

    /// Runs `touch` on the current bucket (emptied first when it held an older span), then `then`
    /// on all of them.
    fn with_current<T>(
        &self,
        touch: impl FnOnce(&mut Bucket),
        then: impl FnOnce(&mut [Bucket; BUCKETS], u64) -> T,
    ) -> T {
        let current = self.clock.now().as_micros() / self.span;
        let mut buckets = self.buckets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let bucket = &mut buckets[(current % BUCKETS as u64) as usize];
        if bucket.span != current {
            *bucket = Bucket { span: current, ..Bucket::default() };
        }
        touch(bucket);
        then(&mut buckets, current)
    }
}

/// The calls and retries of the buckets within the window ending at span `current`.
fn totals(buckets: &[Bucket; BUCKETS], current: u64) -> (u64, u64) {
    buckets
        .iter()
        .filter(|b| current.saturating_sub(b.span) < BUCKETS as u64 && b.span <= current)
        .fold((0, 0), |(c, r), b| (c + b.calls, r + b.retries))
}

#[cfg(test)]
mod tests {
    use floodgate_core::{ManualClock, Timestamp};

    use super::*;

    fn budget(ratio: f64, min_per_second: u32) -> (RetryBudget, ManualClock) {
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let config = RetryBudgetConfig { ratio, min_per_second, window: Duration::from_secs(10) };
        config.validate().unwrap();
        (RetryBudget::new(&config, SharedClock::new(clock.clone())), clock)
    }

    /// Sends `calls` first attempts, each followed by as many retries as the budget grants (at
    /// most `per_call`, each sent): the retries granted.
    fn drive(budget: &RetryBudget, calls: u32, per_call: u32) -> u32 {
        let mut granted = 0;
        for _ in 0..calls {
            budget.deposit();
            for _ in 0..per_call {
                if !budget.withdraw() {
                    break;
                }
                granted += 1;
                budget.deposit();
            }
        }
        granted
    }

    #[test]
    fn retries_are_at_most_the_ratio_of_the_first_calls() {
        let (budget, _) = budget(0.1, 0);
        assert!(!budget.withdraw(), "no calls yet, no floor: nothing to retry on");
        assert_eq!(drive(&budget, 9, 2), 0, "9 calls: 0.9 of a retry");
        assert_eq!(drive(&budget, 1, 2), 1, "the 10th call earns one");
        assert_eq!(drive(&budget, 90, 2), 9, "100 calls: 10 retries, the retries themselves earning none");
        assert_eq!(budget.counts().0, 10);
        assert!(budget.counts().1 > 0);
    }

    #[test]
    fn the_floor_lets_a_quiet_client_retry() {
        let (budget, _) = budget(0.1, 1);
        // 1 a second over 10 s: 10 retries with no traffic to speak of.
        assert_eq!(drive(&budget, 1, 100), 10);
        assert_eq!(drive(&budget, 9, 1), 1, "10 first calls: the floor and one more");
    }

    #[test]
    fn calls_and_retries_age_out_of_the_window() {
        let (budget, clock) = budget(0.5, 0);
        assert_eq!(drive(&budget, 4, 1), 2);
        assert!(!budget.withdraw());
        // Still within the window: spent.
        clock.advance(Duration::from_secs(9));
        assert!(!budget.withdraw());
        // The calls and retries of the first second are gone: nothing to retry on, nothing spent.
        clock.advance(Duration::from_secs(1));
        assert!(!budget.withdraw());
        assert_eq!(drive(&budget, 2, 1), 1, "earned anew");
    }

    #[test]
    fn a_ratio_of_zero_and_no_floor_never_retries_and_one_retries_every_call() {
        let (none, _) = budget(0.0, 0);
        assert_eq!(drive(&none, 50, 2), 0);
        let (all, _) = budget(1.0, 0);
        assert_eq!(drive(&all, 50, 2), 50, "one retry per call: a retry earns nothing itself");
    }

    #[test]
    fn a_ratio_outside_zero_to_one_or_an_empty_window_is_refused_by_name() {
        for ratio in [-0.1, 1.5, f64::NAN] {
            let config = RetryBudgetConfig { ratio, ..RetryBudgetConfig::default() };
            assert!(matches!(config.validate(), Err(Error::Config { field: "retry_budget.ratio", .. })));
        }
        let config = RetryBudgetConfig { window: Duration::ZERO, ..RetryBudgetConfig::default() };
        assert!(matches!(config.validate(), Err(Error::Config { field: "retry_budget.window", .. })));
    }
}
