//! Floodgate's algorithms: pure arithmetic over a compact per-key state and an injected `now`.
//!
//! This crate has no I/O and no async. Stores (in memory, Redis) run these functions under their own
//! atomic read-modify-write; the engine in the `floodgate` crate picks which limits apply.
//!
//! Seven algorithms implement [`Algorithm`]: [`FixedWindow`], [`SlidingWindow`], [`SlidingLog`],
//! [`TokenBucket`], [`Gcra`], [`Concurrency`] and [`Quota`] (calendar periods, see [`Calendar`]).
//! Each takes a cost ≥ 1 (a cost that can never be granted is a [`CostError`], not a denial) and
//! returns a [`Decision`] whose `retry_after` is exact to the microsecond.
//!
//! ```
//! use std::num::NonZeroU64;
//! use std::time::Duration;
//! use floodgate_core::{Algorithm, SlidingLog, Timestamp};
//!
//! let ten_a_minute = SlidingLog::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(60))?;
//! let mut state = Default::default();
//! let start = Timestamp::from_secs(1_700_000_000);
//! for i in 0..10 {
//!     let now = start.saturating_add(Duration::from_secs(i));
//!     assert!(ten_a_minute.check(&mut state, now, 1)?.0.allowed);
//! }
//! let now = start.saturating_add(Duration::from_secs(30));
//! let (decision, _) = ten_a_minute.check(&mut state, now, 1)?;
//! assert!(!decision.allowed);
//! // The first request leaves the window 60s after it was admitted: 30s from now.
//! assert_eq!(decision.retry_after, Some(Duration::from_secs(30)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod algorithm;
pub mod calendar;
mod decision;
mod rate;
mod time;

pub use algorithm::{
    Algorithm, Budget, Concurrency, FixedWindow, Gcra, Grant, LeaseState, LogState, Quota, QuotaState,
    SlidingLog, SlidingState, SlidingWindow, TokenBucket, WindowState,
};
pub use calendar::Calendar;
pub use decision::{CostError, Decision, ceil_secs_at_least_one, validate_cost};
pub use rate::{Rate, RateError};
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
