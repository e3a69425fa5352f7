//! [`CircuitBreaker`]: the state machine of a circuit breaker, on an injected [`Clock`], shared by
//! every breaker of the project — the store's ([`store::Breaker`](crate::store::Breaker)) and the
//! gateway's per route — so that both open, probe and close by the same rules.
//!
//! - **Closed**: calls go through; their outcomes are counted over a sliding `window` (in ten
//!   buckets). When at least `min_calls` were made in the window and the share of failures reaches
//!   `failure_rate`, the breaker opens; it also opens after `consecutive_failures` failures with no
//!   success between them, so that a dependency that dies under heavy traffic is cut off at once
//!   rather than once its earlier successes have aged out of the window. A failure counts toward that
//!   streak only if its call was sent once the streak had begun (its first failure seen): the calls
//!   in flight together when one stall made them all fail are one failure, not hundreds; a
//!   dependency that keeps failing fails the calls sent after it too.
//! - **Open**: no calls; every call is rejected at once.
//! - **Half-open**, after `open_for`: **exactly one** call goes through as a probe while the others
//!   keep being rejected. Success closes the breaker, failure opens it again. A probe that takes
//!   longer than `probe_timeout` — hung, or its caller gone — no longer holds half-open: the next
//!   caller probes instead.
//!
//! A caller asks [`CircuitBreaker::admit`] before each call and reports the outcome:
//! [`CircuitBreaker::record`] for a closed-state call, [`CircuitBreaker::finish_probe`] (or
//! [`CircuitBreaker::abandon_probe`]) for the probe.
//!
//! ```
//! use std::time::Duration;
//! use floodgate::breaker::{Admission, BreakerConfig, BreakerState, CircuitBreaker};
//! use floodgate_core::{ManualClock, Timestamp};
//!
//! let clock = ManualClock::new(Timestamp::from_micros(1_000_000));
//! let config = BreakerConfig { min_calls: 2, open_for: Duration::from_secs(5), ..BreakerConfig::default() };
//! let breaker = CircuitBreaker::new(config, clock.clone());
//! for _ in 0..2 {
//!     let Admission::Call(sent) = breaker.admit() else { panic!("closed") };
//!     breaker.record(true, sent);
//! }
//! assert_eq!(breaker.state(), BreakerState::Open);
//! assert!(matches!(breaker.admit(), Admission::Reject));
//! clock.advance(Duration::from_secs(5));
//! assert!(matches!(breaker.admit(), Admission::Probe));
//! assert!(matches!(breaker.admit(), Admission::Reject), "one probe at a time");
//! breaker.finish_probe(true);
//! assert_eq!(breaker.state(), BreakerState::Closed);
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use floodgate_core::Clock;

/// Buckets of the failure window.
const BUCKETS: usize = 10;

/// When a breaker opens and how it comes back. See the [module docs](self).
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    /// The share of failed calls over `window` that opens the breaker, in `(0, 1]` (default 0.5).
    pub failure_rate: f64,
    /// The fewest calls in `window` for the rate to count (default 20).
    pub min_calls: u32,
    /// How far back calls are counted (default 10 s).
    pub window: Duration,
    /// Failures in a row, with no success between them, that open the breaker whatever the rate
    /// (default 10); a failure counts only if its call was sent after the streak's first failure
    /// was seen (see the module docs).
    pub consecutive_failures: u32,
    /// How long the breaker stays open before one probe (default 2 s).
    pub open_for: Duration,
    /// How long a probe may take before another caller probes instead (default 1 s; a store's
    /// breaker sets it to the store's deadline, a route's to its timeout).
    pub probe_timeout: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_rate: 0.5,
            min_calls: 20,
            window: Duration::from_secs(10),
            consecutive_failures: 10,
            open_for: Duration::from_secs(2),
            probe_timeout: Duration::from_secs(1),
        }
    }
}

/// Where a breaker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls are rejected at once.
    Open,
    /// One probe is (or may be) in flight; other calls are rejected at once.
    HalfOpen,
}

impl BreakerState {
    /// The value of the breaker gauges (`floodgate_store_breaker_state`,
    /// `floodgate_gateway_breaker_state`): 0 closed, 1 open, 2 half-open.
    pub fn gauge(self) -> u8 {
        self as u8
    }

    /// `closed`, `open` or `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    fn from_u8(v: u8) -> BreakerState {
        match v {
            1 => BreakerState::Open,
            2 => BreakerState::HalfOpen,
            _ => BreakerState::Closed,
        }
    }
}

/// Called on every change of state, once per change (for logs and metrics).
pub type OnChange = Arc<dyn Fn(BreakerState) + Send + Sync>;

/// What a call may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Go through; report its outcome with [`CircuitBreaker::record`], passing this send time
    /// (µs since the epoch, on the breaker's clock).
    Call(u64),
    /// Go through as the one probe; report with [`CircuitBreaker::finish_probe`], or
    /// [`CircuitBreaker::abandon_probe`] when its caller gives up without an outcome.
    Probe,
    /// Do not call: the breaker is open (or another call is the probe).
    Reject,
}

/// A circuit breaker's state machine (see the [module docs](self)); lock-free, shared by reference.
pub struct CircuitBreaker<C: Clock> {
    clock: C,
    config: BreakerConfig,
    state: AtomicU8,
    /// When it last opened, µs since the epoch.
    opened_at: AtomicU64,
    /// When the probe in flight started, µs since the epoch; 0 when none is.
    probe_started: AtomicU64,
    /// Failures since the last success (of calls sent since the streak began).
    consecutive: AtomicU32,
    /// When the streak's first failure was seen, µs since the epoch; 0 when there is no streak.
    streak_since: AtomicU64,
    buckets: [Bucket; BUCKETS],
    on_change: Option<OnChange>,
}

#[derive(Default)]
struct Bucket {
    /// Which span of time the counts are for (its index since the epoch).
    span: AtomicU64,
    calls: AtomicU32,
    failures: AtomicU32,
}

impl<C: Clock> fmt::Debug for CircuitBreaker<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker").field("state", &self.state()).field("config", &self.config).finish()
    }
}

impl<C: Clock> CircuitBreaker<C> {
    /// A closed breaker reading time from `clock`.
    pub fn new(config: BreakerConfig, clock: C) -> Self {
        Self::build(config, clock, None)
    }

    /// A closed breaker calling `on_change` on every change of state (once per change).
    pub fn with_on_change(config: BreakerConfig, clock: C, on_change: OnChange) -> Self {
        Self::build(config, clock, Some(on_change))
    }

    fn build(config: BreakerConfig, clock: C, on_change: Option<OnChange>) -> Self {
        CircuitBreaker {
            clock,
            config,
            state: AtomicU8::new(BreakerState::Closed as u8),
            opened_at: AtomicU64::new(0),
            probe_started: AtomicU64::new(0),
            consecutive: AtomicU32::new(0),
            streak_since: AtomicU64::new(0),
            buckets: Default::default(),
            on_change,
        }
    }

    /// The settings.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The state now.
    pub fn state(&self) -> BreakerState {
        BreakerState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// While open: how long until the probe may go (zero once it may). `None` when not open.
    pub fn open_remaining(&self) -> Option<Duration> {
        if self.state() != BreakerState::Open {
            return None;
        }
        let now = self.clock.now().as_micros();
        let reopens = self.opened_at.load(Ordering::Acquire).saturating_add(micros(self.config.open_for));
        Some(Duration::from_micros(reopens.saturating_sub(now)))
    }

    /// Whether a call may go now (see [`Admission`]).
    pub fn admit(&self) -> Admission {
        let now = self.clock.now().as_micros();
        match self.state() {
            BreakerState::Closed => Admission::Call(now),
            BreakerState::Open => {
                let reopens =
                    self.opened_at.load(Ordering::Acquire).saturating_add(micros(self.config.open_for));
                if now < reopens {
                    return Admission::Reject;
                }
                let half_open = (BreakerState::Open as u8, BreakerState::HalfOpen as u8);
                if self
                    .state
                    .compare_exchange(half_open.0, half_open.1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    self.probe_started.store(now.max(1), Ordering::Release);
                    self.changed(BreakerState::HalfOpen);
                    Admission::Probe
                } else {
                    // Another caller took the probe (or the breaker moved on): this call waits its turn.
                    Admission::Reject
                }
            }
            BreakerState::HalfOpen => {
                let started = self.probe_started.load(Ordering::Acquire);
                let stale = started == 0 || now >= started.saturating_add(micros(self.config.probe_timeout));
                if stale
                    && self
                        .probe_started
                        .compare_exchange(started, now.max(1), Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    Admission::Probe
                } else {
                    Admission::Reject
                }
            }
        }
    }

    /// Counts the outcome of a closed-state call sent at `sent` (µs since the epoch, from
    /// [`Admission::Call`]); opens when the window's failure rate or the streak of failures says so.
    pub fn record(&self, failed: bool, sent: u64) {
        let now = self.clock.now().as_micros();
        let span_len = (micros(self.config.window) / BUCKETS as u64).max(1);
        let span = now / span_len;
        let bucket = &self.buckets[(span % BUCKETS as u64) as usize];
        let seen = bucket.span.load(Ordering::Acquire);
        if seen != span
            && bucket.span.compare_exchange(seen, span, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            bucket.calls.store(0, Ordering::Release);
            bucket.failures.store(0, Ordering::Release);
        }
        bucket.calls.fetch_add(1, Ordering::AcqRel);
        if !failed {
            if self.consecutive.load(Ordering::Relaxed) != 0 {
                self.consecutive.store(0, Ordering::Relaxed);
                self.streak_since.store(0, Ordering::Relaxed);
            }
            return;
        }
        bucket.failures.fetch_add(1, Ordering::AcqRel);
        // The first failure begins a streak; after it, only calls sent since it began count.
        let since = self.streak_since.load(Ordering::Acquire);
        let in_a_row = if since == 0 {
            match self.streak_since.compare_exchange(0, now.max(1), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => self.consecutive.fetch_add(1, Ordering::AcqRel).saturating_add(1),
                Err(_) => self.consecutive.load(Ordering::Acquire),
            }
        } else if sent >= since {
            self.consecutive.fetch_add(1, Ordering::AcqRel).saturating_add(1)
        } else {
            self.consecutive.load(Ordering::Acquire)
        };
        // Only a failure can open the breaker, so only a failure sums the window.
        let (mut calls, mut failures) = (0u64, 0u64);
        for b in &self.buckets {
            let age = span.saturating_sub(b.span.load(Ordering::Acquire));
            if age < BUCKETS as u64 {
                calls += u64::from(b.calls.load(Ordering::Acquire));
                failures += u64::from(b.failures.load(Ordering::Acquire));
            }
        }
        let tripped = (calls >= u64::from(self.config.min_calls.max(1))
            && failures as f64 >= self.config.failure_rate * calls as f64)
            || in_a_row >= self.config.consecutive_failures.max(1);
        if tripped && self.transition(BreakerState::Closed, BreakerState::Open) {
            self.opened_at.store(now, Ordering::Release);
        }
    }

    /// The probe's outcome: closed again, or open for another `open_for`.
    pub fn finish_probe(&self, succeeded: bool) {
        self.probe_started.store(0, Ordering::Release);
        self.consecutive.store(0, Ordering::Release);
        self.streak_since.store(0, Ordering::Release);
        if succeeded {
            for b in &self.buckets {
                b.calls.store(0, Ordering::Release);
                b.failures.store(0, Ordering::Release);
            }
            self.transition(BreakerState::HalfOpen, BreakerState::Closed);
        } else {
            self.opened_at.store(self.clock.now().as_micros(), Ordering::Release);
            self.transition(BreakerState::HalfOpen, BreakerState::Open);
        }
    }

    /// The probe ended with no outcome (its caller gave up): half-open is free for the next caller
    /// at once.
    pub fn abandon_probe(&self) {
        self.probe_started.store(0, Ordering::Release);
    }

    fn transition(&self, from: BreakerState, to: BreakerState) -> bool {
        let moved =
            self.state.compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if moved {
            self.changed(to);
        }
        moved
    }

    fn changed(&self, to: BreakerState) {
        if let Some(on_change) = &self.on_change {
            on_change(to);
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
