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
//! The state machine is [`CircuitBreaker`](crate::breaker::CircuitBreaker), which the gateway's
//! per-route breakers share; time comes from its [`Clock`], so every transition is tested on a
//! manual clock.

use std::fmt;
use std::sync::Arc;

use floodgate_core::{Clock, Grant, SystemClock};

use crate::breaker::{Admission, CircuitBreaker};
pub use crate::breaker::{BreakerConfig, BreakerState, OnChange};

use super::{Applied, Mode, Op, Store, StoreError, Wraps};
use crate::Limit;

/// A [`Store`] that stops calling the store it wraps while that store keeps failing. Cloning
/// shares the breaker.
pub struct Breaker<S, C: Clock = SystemClock> {
    inner: S,
    machine: Arc<CircuitBreaker<C>>,
}

impl<S: Clone, C: Clock> Clone for Breaker<S, C> {
    fn clone(&self) -> Self {
        Breaker { inner: self.inner.clone(), machine: Arc::clone(&self.machine) }
    }
}

impl<S: fmt::Debug, C: Clock> fmt::Debug for Breaker<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("inner", &self.inner)
            .field("state", &self.state())
            .field("config", self.machine.config())
            .finish()
    }
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
        Breaker { inner, machine: Arc::new(CircuitBreaker::new(config, clock)) }
    }

    /// This breaker calling `on_change` on every change of state (once per change).
    pub fn on_change(inner: S, config: BreakerConfig, clock: C, on_change: OnChange) -> Self {
        Breaker { inner, machine: Arc::new(CircuitBreaker::with_on_change(config, clock, on_change)) }
    }

    /// The state now.
    pub fn state(&self) -> BreakerState {
        self.machine.state()
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Runs `call` as the breaker admits it.
    async fn guarded<T>(&self, call: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        match self.machine.admit() {
            Admission::Reject => Err(StoreError::BreakerOpen),
            Admission::Call(sent) => {
                let result = call.await;
                self.machine.record(counts_as_failure(&result), sent);
                result
            }
            Admission::Probe => {
                let probe = Probe { machine: &self.machine, done: false };
                let result = call.await;
                probe.finish(!counts_as_failure(&result));
                result
            }
        }
    }
}

/// The one probe in flight; if it is dropped unfinished (its caller gave up), half-open is free
/// for the next caller at once.
struct Probe<'a, C: Clock> {
    machine: &'a CircuitBreaker<C>,
    done: bool,
}

impl<C: Clock> Probe<'_, C> {
    fn finish(mut self, succeeded: bool) {
        self.done = true;
        self.machine.finish_probe(succeeded);
    }
}

impl<C: Clock> Drop for Probe<'_, C> {
    fn drop(&mut self) {
        if !self.done {
            self.machine.abandon_probe();
        }
    }
}

/// Whether an outcome tells of a failing store: every error but a full memory store's, which is
/// about keys, not about the store answering.
fn counts_as_failure<T>(result: &Result<T, StoreError>) -> bool {
    matches!(result, Err(e) if !matches!(e, StoreError::Full { .. }))
}

impl<S: Store, C: Clock> Store for Breaker<S, C> {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        self.guarded(self.inner.apply(ops, mode, out)).await
    }

    fn try_apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Option<Result<(), StoreError>> {
        match self.machine.admit() {
            Admission::Reject => Some(Err(StoreError::BreakerOpen)),
            Admission::Call(sent) => {
                let result = self.inner.try_apply_now(ops, mode, out)?;
                self.machine.record(counts_as_failure(&result), sent);
                Some(result)
            }
            Admission::Probe => {
                let probe = Probe { machine: &self.machine, done: false };
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

/// The record calls pass the breaker as every call does: refused while it is open, counted while
/// it is closed, a probe while it is half-open.
impl<S: Store, C: Clock> Wraps for Breaker<S, C> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    fn pass_through<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>> + Send,
    ) -> impl Future<Output = Result<T, StoreError>> + Send {
        self.guarded(call)
    }
}
