//! [`Breaker`]: a circuit breaker around a store, so that a dead or black-holed store costs a
//! decision nothing rather than its whole deadline.
//!
//! - **Closed**: calls go to the store; their outcomes are counted over a sliding `window` (in ten
//!   buckets). When at least `min_calls` were made in the window and the share of failures reaches
//!   `failure_rate`, the breaker opens; it also opens after `consecutive_failures` failures with no
//!   success between them, so that a store that dies under heavy traffic is cut off at once rather
//!   than once its earlier successes have aged out of the window (a black-holed store would
//!   otherwise cost every call its deadline for most of a window). A failure counts toward that
//!   streak only if its call was sent once the streak had begun (its first failure seen): the calls
//!   in flight together when one stall — a paused process, a busy scheduler, a slow command — made
//!   them all miss their deadline are one failure, not hundreds; a store that keeps failing fails
//!   the calls sent after it too.
//! - **Open**: no calls; every call fails at once with [`StoreError::BreakerOpen`] (transient), so
//!   each rule's `on_store_error` decides without waiting.
//! - **Half-open**, after `open_for`: **exactly one** call goes to the store as a probe while the
//!   others keep failing at once. Success closes the breaker, failure opens it again. A probe that
//!   takes longer than `probe_timeout` (the store's deadline) — hung, or its caller gone — no longer
//!   holds half-open: the next caller probes instead.
//!
//! Time comes from the breaker's [`Clock`], so every transition is tested on a manual clock.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use floodgate_core::{Clock, Grant, SystemClock};

use super::{Applied, Mode, Op, Store, StoreError};
use crate::Limit;

/// Buckets of the failure window.
const BUCKETS: usize = 10;

/// When the breaker opens and how it comes back. See the [module docs](self).
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
    /// How long a probe may take before another caller probes instead (default 1 s; set it to the
    /// store's deadline).
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

/// Where the breaker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls go to the store.
    Closed,
    /// Calls fail at once.
    Open,
    /// One probe is (or may be) in flight; other calls fail at once.
    HalfOpen,
}

impl BreakerState {
    /// The value of `floodgate_store_breaker_state`: 0 closed, 1 open, 2 half-open.
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

/// A [`Store`] that stops calling the store it wraps while that store keeps failing. Cloning
/// shares the breaker.
pub struct Breaker<S, C: Clock = SystemClock> {
    inner: S,
    shared: Arc<Shared<C>>,
}

struct Shared<C> {
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

impl<S: Clone, C: Clock> Clone for Breaker<S, C> {
    fn clone(&self) -> Self {
        Breaker { inner: self.inner.clone(), shared: Arc::clone(&self.shared) }
    }
}

impl<S: fmt::Debug, C: Clock> fmt::Debug for Breaker<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("inner", &self.inner)
            .field("state", &self.state())
            .field("config", &self.shared.config)
            .finish()
    }
}

/// What a call may do.
enum Admit {
    /// Go to the store, its outcome counted.
    Call,
    /// Go to the store as the one probe.
    Probe,
    /// Fail at once.
    Reject,
}

impl<S> Breaker<S, SystemClock> {
    /// A breaker around `inner` on the process clock.
    pub fn new(inner: S, config: BreakerConfig) -> Self {
        Breaker::with_clock(inner, config, SystemClock::new())
    }
}

impl<S, C: Clock> Breaker<S, C> {
    /// A breaker around `inner`, reading time from `clock`.
    pub fn with_clock(inner: S, config: BreakerConfig, clock: C) -> Self {
        Breaker::build(inner, config, clock, None)
    }

    /// This breaker calling `on_change` on every change of state (once per change).
    pub fn on_change(inner: S, config: BreakerConfig, clock: C, on_change: OnChange) -> Self {
        Breaker::build(inner, config, clock, Some(on_change))
    }

    fn build(inner: S, config: BreakerConfig, clock: C, on_change: Option<OnChange>) -> Self {
        let shared = Shared {
            clock,
            config,
            state: AtomicU8::new(BreakerState::Closed as u8),
            opened_at: AtomicU64::new(0),
            probe_started: AtomicU64::new(0),
            consecutive: AtomicU32::new(0),
            streak_since: AtomicU64::new(0),
            buckets: Default::default(),
            on_change,
        };
        Breaker { inner, shared: Arc::new(shared) }
    }

    /// The state now.
    pub fn state(&self) -> BreakerState {
        BreakerState::from_u8(self.shared.state.load(Ordering::Acquire))
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn admit(&self) -> Admit {
        let s = &*self.shared;
        let now = s.clock.now().as_micros();
        match self.state() {
            BreakerState::Closed => Admit::Call,
            BreakerState::Open => {
                let reopens = s.opened_at.load(Ordering::Acquire).saturating_add(micros(s.config.open_for));
                if now < reopens {
                    return Admit::Reject;
                }
                let half_open = (BreakerState::Open as u8, BreakerState::HalfOpen as u8);
                if s.state
                    .compare_exchange(half_open.0, half_open.1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    s.probe_started.store(now.max(1), Ordering::Release);
                    self.changed(BreakerState::HalfOpen);
                    Admit::Probe
                } else {
                    // Another caller took the probe (or the breaker moved on): this call waits its turn.
                    Admit::Reject
                }
            }
            BreakerState::HalfOpen => {
                let started = s.probe_started.load(Ordering::Acquire);
                let stale = started == 0 || now >= started.saturating_add(micros(s.config.probe_timeout));
                if stale
                    && s.probe_started
                        .compare_exchange(started, now.max(1), Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    Admit::Probe
                } else {
                    Admit::Reject
                }
            }
        }
    }

    /// Counts the outcome of a closed-state call sent at `sent` (µs since the epoch); opens when
    /// the window's failure rate or the streak of failures says so.
    fn record(&self, failed: bool, sent: u64) {
        let s = &*self.shared;
        let now = s.clock.now().as_micros();
        let span_len = (micros(s.config.window) / BUCKETS as u64).max(1);
        let span = now / span_len;
        let bucket = &s.buckets[(span % BUCKETS as u64) as usize];
        let seen = bucket.span.load(Ordering::Acquire);
        if seen != span
            && bucket.span.compare_exchange(seen, span, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            bucket.calls.store(0, Ordering::Release);
            bucket.failures.store(0, Ordering::Release);
        }
        bucket.calls.fetch_add(1, Ordering::AcqRel);
        if !failed {
            if s.consecutive.load(Ordering::Relaxed) != 0 {
                s.consecutive.store(0, Ordering::Relaxed);
                s.streak_since.store(0, Ordering::Relaxed);
            }
            return;
        }
        bucket.failures.fetch_add(1, Ordering::AcqRel);
        // The first failure begins a streak; after it, only calls sent since it began count.
        let since = s.streak_since.load(Ordering::Acquire);
        let in_a_row = if since == 0 {
            match s.streak_since.compare_exchange(0, now.max(1), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => s.consecutive.fetch_add(1, Ordering::AcqRel).saturating_add(1),
                Err(_) => s.consecutive.load(Ordering::Acquire),
            }
        } else if sent >= since {
            s.consecutive.fetch_add(1, Ordering::AcqRel).saturating_add(1)
        } else {
            s.consecutive.load(Ordering::Acquire)
        };
        // Only a failure can open the breaker, so only a failure sums the window.
        let (mut calls, mut failures) = (0u64, 0u64);
        for b in &s.buckets {
            let age = span.saturating_sub(b.span.load(Ordering::Acquire));
            if age < BUCKETS as u64 {
                calls += u64::from(b.calls.load(Ordering::Acquire));
                failures += u64::from(b.failures.load(Ordering::Acquire));
            }
        }
        let tripped = (calls >= u64::from(s.config.min_calls.max(1))
            && failures as f64 >= s.config.failure_rate * calls as f64)
            || in_a_row >= s.config.consecutive_failures.max(1);
        if tripped && self.transition(BreakerState::Closed, BreakerState::Open) {
            s.opened_at.store(now, Ordering::Release);
        }
    }

    /// The probe's outcome: closed again, or open for another `open_for`.
    fn finish_probe(&self, succeeded: bool) {
        let s = &*self.shared;
        s.probe_started.store(0, Ordering::Release);
        s.consecutive.store(0, Ordering::Release);
        s.streak_since.store(0, Ordering::Release);
        if succeeded {
            for b in &s.buckets {
                b.calls.store(0, Ordering::Release);
                b.failures.store(0, Ordering::Release);
            }
            self.transition(BreakerState::HalfOpen, BreakerState::Closed);
        } else {
            s.opened_at.store(s.clock.now().as_micros(), Ordering::Release);
            self.transition(BreakerState::HalfOpen, BreakerState::Open);
        }
    }

    fn transition(&self, from: BreakerState, to: BreakerState) -> bool {
        let moved = self
            .shared
            .state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if moved {
            self.changed(to);
        }
        moved
    }

    fn changed(&self, to: BreakerState) {
        if let Some(on_change) = &self.shared.on_change {
            on_change(to);
        }
    }

    /// Runs `call` as the breaker admits it.
    async fn guarded<T>(&self, call: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        match self.admit() {
            Admit::Reject => Err(StoreError::BreakerOpen),
            Admit::Call => {
                let sent = self.shared.clock.now().as_micros();
                let result = call.await;
                self.record(counts_as_failure(&result), sent);
                result
            }
            Admit::Probe => {
                let probe = Probe { breaker: self, done: false };
                let result = call.await;
                probe.finish(!counts_as_failure(&result));
                result
            }
        }
    }
}

/// The one probe in flight; if it is dropped unfinished (its caller gave up), half-open is free
/// for the next caller at once.
struct Probe<'a, S, C: Clock> {
    breaker: &'a Breaker<S, C>,
    done: bool,
}

impl<S, C: Clock> Probe<'_, S, C> {
    fn finish(mut self, succeeded: bool) {
        self.done = true;
        self.breaker.finish_probe(succeeded);
    }
}

impl<S, C: Clock> Drop for Probe<'_, S, C> {
    fn drop(&mut self) {
        if !self.done {
            self.breaker.shared.probe_started.store(0, Ordering::Release);
        }
    }
}

/// Whether an outcome tells of a failing store: every error but a full memory store's, which is
/// about keys, not about the store answering.
fn counts_as_failure<T>(result: &Result<T, StoreError>) -> bool {
    matches!(result, Err(e) if !matches!(e, StoreError::Full { .. }))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl<S: Store, C: Clock> Store for Breaker<S, C> {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        self.guarded(self.inner.apply(ops, mode, out)).await
    }

    fn try_apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Option<Result<(), StoreError>> {
        match self.admit() {
            Admit::Reject => Some(Err(StoreError::BreakerOpen)),
            Admit::Call => {
                let sent = self.shared.clock.now().as_micros();
                let result = self.inner.try_apply_now(ops, mode, out)?;
                self.record(counts_as_failure(&result), sent);
                Some(result)
            }
            Admit::Probe => {
                let probe = Probe { breaker: self, done: false };
                // A store that must be awaited probes through `apply`; dropping the probe frees
                // half-open for that call.
                let result = self.inner.try_apply_now(ops, mode, out)?;
                probe.finish(!counts_as_failure(&result));
                Some(result)
            }
        }
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        self.guarded(self.inner.refund(key, limit, grant)).await
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        self.guarded(self.inner.reset(key)).await
    }
}
