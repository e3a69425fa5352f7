//! [`Prefetch`]: batch leases for hot keys. For a rule with `prefetch: { batch, ttl }`, an
//! instance takes up to `batch` units from the shared counter in **one** store call and spends them
//! locally on later requests for the same key, so that a hot key costs the store about one call per
//! `batch` decisions.
//!
//! - **Never over-admits.** Leased units are consumed on the store when they are taken: what the
//!   fleet admits from leases was granted by the store first, so the total admitted across all
//!   instances stays within the limit.
//! - **A lease ends** when its `ttl` has passed, and never later than the window it was taken in
//!   (fixed window, sliding window, quota: the end of the store's current window, computed on the
//!   store's clock from the time of the take). Its unspent units then go back to the store with
//!   [`Store::refund`], by [`Prefetch::return_due`] — except a fixed window's or quota's units once
//!   their window has ended (they are worth nothing in the next one, and are not refunded). Buckets
//!   get back what is unspent; a sliding window while its units still weigh (until the end of the
//!   window after the one they were taken in). [`Prefetch::flush`] returns every lease at once (on a
//!   reload, at shutdown); a lease whose rule's limit changed is returned on its next use.
//! - **Near the limit**, when the store cannot grant a whole batch, the request is asked again at
//!   its own cost, in a second store call, and that answer is the decision: exact, except that units
//!   held in other instances' unspent leases are not available to it (the under-admission bound:
//!   at most `batch − 1` units per other instance per key, and only until those leases end). The
//!   store's `remaining` is remembered for the key (for at most `ttl`): while it is below a batch,
//!   requests ask for their own cost only.
//! - **Denials are remembered** for the key for `min(retry_after, ttl)`: a request of at least the
//!   denied cost is denied without a store call. Nothing but a refund can make the store grant it
//!   sooner, so this too under-admits by at most the units other leases return meanwhile.
//! - **Several ops (rules) in one request**, all-or-nothing: ops with a live lease holding their
//!   cost reserve it, ops with a remembered denial are denied, and the others go to the store in one
//!   call (enlarged to a batch where the rule prefetches). Only when every op is decided locally is
//!   the store not called. When the request is denied, whatever it reserved goes back to its
//!   lease: **a denied request consumes no leased unit**. A request an enforced remembered denial
//!   denies asks the store only to peek the other ops.
//! - Only [`Mode::Check`] uses leases; peeks and reports go to the store as they are (a peek sees
//!   leased units as consumed). A request the store below could not decide (its error) returns no
//!   lease unit; a degraded answer (a [`Fallback`](super::Fallback) decided locally) is redone on
//!   the store below with the request as it was, so the fallback decides it as without prefetch.
//!
//! Decisions served from a lease report `remaining` as the store's remaining at the take plus the
//! lease's unspent units, and their grants carry the take's time, so a refund of a reservation
//! served from a lease is charged back to the store exactly. Time comes from the [`Clock`] the
//! wrapper is built with; the store's clock decides windows.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use floodgate_core::{Clock, Decision, Grant, SystemClock, Timestamp};
use parking_lot::Mutex;
use smallvec::SmallVec;

use super::{Applied, Mode, Op, OpResult, Store, StoreError, Wraps};
use crate::Limit;

/// A rule's batch leases: take up to `size` units in one store call, spend them locally for at
/// most `ttl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefetchBatch {
    size: NonZeroU64,
    ttl: Duration,
}

/// A [`PrefetchBatch`] that cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PrefetchError {
    /// A batch of fewer than 2 units saves no store call.
    #[error("a prefetch batch must be at least 2 units (got {0})")]
    Batch(u64),
    /// A lease must live for some time.
    #[error("a prefetch ttl must be above zero")]
    Ttl,
}

impl PrefetchBatch {
    /// Batches of `size` (at least 2) living at most `ttl` (above zero).
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::store::PrefetchBatch;
    /// let batch = PrefetchBatch::try_new(20, Duration::from_secs(1))?;
    /// assert_eq!(batch.size(), 20);
    /// assert!(PrefetchBatch::try_new(1, Duration::from_secs(1)).is_err());
    /// # Ok::<(), floodgate::store::PrefetchError>(())
    /// ```
    pub fn try_new(size: u64, ttl: Duration) -> Result<Self, PrefetchError> {
        let size = NonZeroU64::new(size).filter(|s| s.get() >= 2).ok_or(PrefetchError::Batch(size))?;
        if ttl.is_zero() {
            return Err(PrefetchError::Ttl);
        }
        Ok(PrefetchBatch { size, ttl })
    }

    /// The most units taken in one store call.
    pub fn size(&self) -> u64 {
        self.size.get()
    }

    /// The longest a lease is spent from.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// A [`Store`] that serves hot keys from batch leases. See the [module docs](self). Cloning shares
/// it.
pub struct Prefetch<S, C: Clock = SystemClock> {
    inner: S,
    shared: Arc<Shared<C>>,
}

struct Shared<C: Clock> {
    clock: C,
    keys: papaya::HashMap<Box<[u8]>, Mutex<KeyState>>,
    /// Units taken out of ended or replaced leases, to give back to the store.
    returning: Mutex<Vec<Returning>>,
    /// The store's clock minus the local clock (µs), as of the last store answer.
    offset: AtomicI64,
    store_calls: AtomicU64,
    local_decisions: AtomicU64,
    batches: AtomicU64,
    returned_units: AtomicU64,
    expired_units: AtomicU64,
}

/// What one key's leases and memories are.
struct KeyState {
    /// The limit they belong to: when the rule's limit changes (a reload) they are dropped.
    limit: Limit,
    scope_len: usize,
    /// Changes whenever a lease is installed afresh or taken away: a reservation made on one
    /// generation is given back to it only.
    generation: u64,
    lease: Option<Lease>,
    denial: Option<Denial>,
    /// The store's remaining for the key, and until when it is trusted.
    hint: Option<(u64, Timestamp)>,
}

struct Lease {
    units: u64,
    /// The store's time of the take (for grants and refunds).
    taken: Timestamp,
    /// Local time: no unit is spent from then on.
    until: Timestamp,
    /// Local time: after it, unspent units no longer count on the store (`None`: always refunded).
    worth_until: Option<Timestamp>,
    /// The store's remaining right after the take.
    store_remaining: u64,
    /// Local time at which the store said the key is replenished.
    reset_at: Timestamp,
}

struct Denial {
    cost: u64,
    /// Local time at which the remembered denial is dropped.
    until: Timestamp,
    decided: Timestamp,
    decision: Decision,
}

struct Returning {
    key: Box<[u8]>,
    limit: Limit,
    grant: Grant,
    worth_until: Option<Timestamp>,
}

/// What a [`Prefetch`] has done (for metrics and the bench).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PrefetchStats {
    /// Calls made to the store below to decide checks (batches, retries, uncovered ops).
    pub store_calls: u64,
    /// Checks decided without a store call (from leases or remembered denials).
    pub local_decisions: u64,
    /// Batches taken.
    pub batches: u64,
    /// Unspent units refunded to the store.
    pub returned_units: u64,
    /// Unspent units not refunded because their window had ended.
    pub expired_units: u64,
    /// Keys with lease state now.
    pub keys: usize,
}

/// What one [`Prefetch::return_due`] or [`Prefetch::flush`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Returned {
    /// Leases given back.
    pub leases: usize,
    /// Units refunded to the store.
    pub units: u64,
    /// Units not refunded: their window had ended.
    pub expired: u64,
    /// Units whose refund failed (the store did not answer); they are not tried again, which
    /// can only under-admit.
    pub failed: u64,
}

/// How one op of a check is decided.
#[derive(Debug, Clone, Copy)]
enum Local {
    /// Reserved from the key's lease of `generation`.
    Spent { generation: u64, taken: Timestamp, decision: Decision },
    /// Denied by a remembered denial.
    Denied(Decision),
    /// Asked of the store at `ask` (the op's cost, or a batch).
    Store { ask: u64 },
}

impl<S: Clone, C: Clock> Clone for Prefetch<S, C> {
    fn clone(&self) -> Self {
        Prefetch { inner: self.inner.clone(), shared: Arc::clone(&self.shared) }
    }
}

impl<S: fmt::Debug, C: Clock> fmt::Debug for Prefetch<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prefetch").field("inner", &self.inner).field("stats", &self.stats()).finish()
    }
}

impl<S, C: Clock> Prefetch<S, C> {
    /// `inner`, serving the ops of prefetching rules from leases, on `clock`.
    pub fn new(inner: S, clock: C) -> Self {
        let shared = Shared {
            clock,
            keys: papaya::HashMap::new(),
            returning: Mutex::new(Vec::new()),
            offset: AtomicI64::new(0),
            store_calls: AtomicU64::new(0),
            local_decisions: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            returned_units: AtomicU64::new(0),
            expired_units: AtomicU64::new(0),
        };
        Prefetch { inner, shared: Arc::new(shared) }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// What the wrapper has done.
    pub fn stats(&self) -> PrefetchStats {
        let s = &*self.shared;
        PrefetchStats {
            store_calls: s.store_calls.load(Ordering::Relaxed),
            local_decisions: s.local_decisions.load(Ordering::Relaxed),
            batches: s.batches.load(Ordering::Relaxed),
            returned_units: s.returned_units.load(Ordering::Relaxed),
            expired_units: s.expired_units.load(Ordering::Relaxed),
            keys: s.keys.len(),
        }
    }

    /// Unspent units this instance holds in leases now (live or ended, not yet returned).
    pub fn held_units(&self) -> u64 {
        let keys = self.shared.keys.pin();
        let leased: u64 = keys.values().filter_map(|k| k.lock().lease.as_ref().map(|l| l.units)).sum();
        leased + self.shared.returning.lock().iter().map(|r| r.grant.cost).sum::<u64>()
    }

    fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// The store's time now, as last seen.
    fn store_now(&self, now: Timestamp) -> Timestamp {
        let offset = self.shared.offset.load(Ordering::Relaxed);
        Timestamp::from_micros(now.as_micros().saturating_add_signed(offset))
    }

    /// Decides every op locally where a lease or a remembered denial can, reserving lease units.
    fn plan(&self, ops: &[Op<'_>], now: Timestamp, plan: &mut SmallVec<[Local; 4]>) {
        let keys = self.shared.keys.pin();
        for op in ops {
            let local = match (op.prefetch, keys.get(op.key)) {
                (None, _) => Local::Store { ask: op.cost },
                (Some(batch), None) => Local::Store { ask: batch_ask(op, batch, None) },
                (Some(batch), Some(state)) => {
                    let mut state = state.lock();
                    self.refresh(op, &mut state, now);
                    self.decide_locally(op, batch, &mut state, now)
                }
            };
            plan.push(local);
        }
    }

    /// Drops what of `state` no longer holds at `now`: an ended lease (its units go back), a
    /// lapsed denial or hint, everything when the rule's limit changed.
    fn refresh(&self, op: &Op<'_>, state: &mut KeyState, now: Timestamp) {
        if state.limit != *op.limit {
            self.take_lease(op.key, state);
            state.limit = op.limit.clone();
            state.scope_len = op.scope_len;
            state.denial = None;
            state.hint = None;
        }
        if state.lease.as_ref().is_some_and(|l| l.until <= now) {
            self.take_lease(op.key, state);
        }
        if state.denial.as_ref().is_some_and(|d| d.until <= now) {
            state.denial = None;
        }
        if state.hint.is_some_and(|(_, until)| until <= now) {
            state.hint = None;
        }
    }

    fn decide_locally(
        &self,
        op: &Op<'_>,
        batch: PrefetchBatch,
        state: &mut KeyState,
        now: Timestamp,
    ) -> Local {
        let capacity = op.limit.capacity();
        if let Some(lease) = state.lease.as_mut().filter(|l| l.units >= op.cost) {
            lease.units -= op.cost;
            let decision = Decision {
                allowed: true,
                limit: capacity,
                remaining: lease.store_remaining.saturating_add(lease.units).min(capacity),
                reset_after: lease.reset_at.saturating_since(now),
                retry_after: None,
            };
            return Local::Spent { generation: state.generation, taken: lease.taken, decision };
        }
        if let Some(denial) = state.denial.as_ref().filter(|d| op.cost >= d.cost) {
            let elapsed = now.saturating_since(denial.decided);
            let d = denial.decision;
            let decision = Decision {
                remaining: d.remaining,
                reset_after: d.reset_after.saturating_sub(elapsed),
                retry_after: d.retry_after.map(|r| r.saturating_sub(elapsed).max(Duration::from_micros(1))),
                ..d
            };
            return Local::Denied(decision);
        }
        Local::Store { ask: batch_ask(op, batch, state.hint.map(|(remaining, _)| remaining)) }
    }

    /// Takes `state`'s lease away, queueing its unspent units to go back to the store.
    fn take_lease(&self, key: &[u8], state: &mut KeyState) {
        if let Some(lease) = state.lease.take() {
            state.generation += 1;
            state.denial = None;
            if lease.units > 0 {
                self.shared.returning.lock().push(Returning {
                    key: key.into(),
                    limit: state.limit.clone(),
                    grant: Grant { at: lease.taken, cost: lease.units, lease: 0 },
                    worth_until: lease.worth_until,
                });
            }
        }
    }

    /// Gives back what `plan` reserved (the request was not admitted, or not decided).
    fn unreserve(&self, ops: &[Op<'_>], plan: &[Local]) {
        let keys = self.shared.keys.pin();
        for (op, local) in ops.iter().zip(plan) {
            let Local::Spent { generation, taken, .. } = *local else { continue };
            if let Some(state) = keys.get(op.key) {
                let mut state = state.lock();
                if state.generation == generation
                    && let Some(lease) = state.lease.as_mut()
                {
                    lease.units += op.cost;
                    continue;
                }
            }
            // The lease ended meanwhile: the units go back to the store (whose refund credits
            // them only as far as they still count).
            let worth_until = None;
            let grant = Grant { at: taken, cost: op.cost, lease: 0 };
            let returning = Returning { key: op.key.into(), limit: op.limit.clone(), grant, worth_until };
            self.shared.returning.lock().push(returning);
        }
    }

    /// Records what the store answered for the prefetching ops of an admitted or denied request:
    /// new leases, denials, hints.
    fn record(
        &self,
        op: &Op<'_>,
        ask: u64,
        result: &mut OpResult,
        store_at: Timestamp,
        now: Timestamp,
        admitted: bool,
    ) {
        let Some(batch) = op.prefetch else { return };
        let keys = self.shared.keys.pin();
        let state = keys.get_or_insert_with(op.key.into(), || {
            Mutex::new(KeyState {
                limit: op.limit.clone(),
                scope_len: op.scope_len,
                generation: 0,
                lease: None,
                denial: None,
                hint: None,
            })
        });
        let mut state = state.lock();
        if state.limit != *op.limit {
            self.take_lease(op.key, &mut state);
            state.limit = op.limit.clone();
            state.scope_len = op.scope_len;
        }
        let window_left = window_end(op.limit, store_at).map(|end| end.saturating_since(store_at));
        let bound = window_left.map_or(batch.ttl, |w| w.min(batch.ttl));
        let d = result.decision;
        state.hint = Some((d.remaining, now.saturating_add(bound)));
        if !d.allowed {
            if ask == op.cost && op.cost <= op.limit.capacity() {
                let retry = d.retry_after.unwrap_or(Duration::from_micros(1));
                let until = now.saturating_add(retry.min(batch.ttl));
                state.denial = Some(Denial { cost: op.cost, until, decided: now, decision: d });
            }
            return;
        }
        state.denial = None;
        let Some(grant) = result.grant.filter(|_| admitted && ask > op.cost) else { return };
        let leftover = grant.cost - op.cost;
        self.shared.batches.fetch_add(1, Ordering::Relaxed);
        result.grant = Some(Grant { cost: op.cost, ..grant });
        result.decision.remaining = d.remaining.saturating_add(leftover).min(op.limit.capacity());
        let until = now.saturating_add(bound);
        let worth_until = worth_span(op.limit, store_at).map(|w| now.saturating_add(w));
        let reset_at = now.saturating_add(d.reset_after);
        // A live lease joins the new units only if it was taken in their window: the store's
        // clock may have passed into the next one since this request read the local clock, and
        // units go back to (and grants name) the window that counted them.
        let same_window = |l: &Lease| window_end(op.limit, l.taken) == window_end(op.limit, grant.at);
        match state.lease.as_mut().filter(|l| l.until > now && same_window(l)) {
            // A live lease of the same window: the units join it, ending with the earlier.
            Some(lease) => {
                lease.units += leftover;
                lease.store_remaining = d.remaining;
                lease.reset_at = reset_at;
            }
            None => {
                self.take_lease(op.key, &mut state);
                state.generation += 1;
                state.lease = Some(Lease {
                    units: leftover,
                    taken: grant.at,
                    until,
                    worth_until,
                    store_remaining: d.remaining,
                    reset_at,
                });
            }
        }
    }

    /// Fills `out` for a request every op of which was decided locally.
    fn finish_locally(&self, ops: &[Op<'_>], plan: &[Local], now: Timestamp, out: &mut Applied) {
        let admitted = !ops.iter().zip(plan).any(|(op, l)| op.enforce && matches!(l, Local::Denied(_)));
        if !admitted {
            self.unreserve(ops, plan);
        }
        out.results.clear();
        out.at = self.store_now(now);
        for (op, local) in ops.iter().zip(plan) {
            out.results.push(match *local {
                Local::Spent { taken, decision, .. } => OpResult {
                    decision,
                    grant: admitted.then_some(Grant { at: taken, cost: op.cost, lease: 0 }),
                    previous: None,
                },
                Local::Denied(decision) => OpResult { decision, grant: None, previous: None },
                Local::Store { .. } => unreachable!("finish_locally is called when every op is local"),
            });
        }
        self.shared.local_decisions.fetch_add(1, Ordering::Relaxed);
    }
}

impl<S: Store, C: Clock> Prefetch<S, C> {
    /// Refunds the unspent units of every lease that has ended, and forgets keys with nothing
    /// live. Call it every few hundred milliseconds (the server does).
    pub async fn return_due(&self) -> Returned {
        self.give_back(false).await
    }

    /// Refunds the unspent units of every lease now, ended or not, and forgets every remembered
    /// denial: on a reload, at shutdown.
    pub async fn flush(&self) -> Returned {
        self.give_back(true).await
    }

    async fn give_back(&self, all: bool) -> Returned {
        let now = self.now();
        {
            let keys = self.shared.keys.pin();
            let mut idle: Vec<Box<[u8]>> = Vec::new();
            for (key, state) in keys.iter() {
                let mut state = state.lock();
                if all || state.lease.as_ref().is_some_and(|l| l.until <= now) {
                    self.take_lease(key, &mut state);
                }
                if all || state.denial.as_ref().is_some_and(|d| d.until <= now) {
                    state.denial = None;
                }
                if all || state.hint.is_some_and(|(_, until)| until <= now) {
                    state.hint = None;
                }
                if state.lease.is_none() && state.denial.is_none() && state.hint.is_none() {
                    idle.push(key.clone());
                }
            }
            for key in idle {
                // A key used again since is kept: its state came back to life.
                keys.remove_if(&key, |_, state| {
                    let state = state.lock();
                    state.lease.is_none() && state.denial.is_none() && state.hint.is_none()
                })
                .ok();
            }
        }
        let due: Vec<Returning> = std::mem::take(&mut *self.shared.returning.lock());
        let mut returned = Returned::default();
        for r in due {
            returned.leases += 1;
            if r.worth_until.is_some_and(|w| now >= w) {
                returned.expired += r.grant.cost;
                continue;
            }
            match self.inner.refund(&r.key, &r.limit, r.grant).await {
                Ok(()) => returned.units += r.grant.cost,
                Err(_) => returned.failed += r.grant.cost,
            }
        }
        self.shared.returned_units.fetch_add(returned.units, Ordering::Relaxed);
        self.shared.expired_units.fetch_add(returned.expired, Ordering::Relaxed);
        returned
    }

    /// One store call for the ops `plan` leaves to the store, results into `applied`.
    async fn ask(
        &self,
        ops: &[Op<'_>],
        plan: &[Local],
        mode: Mode,
        applied: &mut Applied,
    ) -> Result<(), StoreError> {
        let asked: SmallVec<[Op<'_>; 4]> = ops
            .iter()
            .zip(plan)
            .filter_map(|(op, l)| match l {
                Local::Store { ask } => Some(Op { cost: *ask, ..*op }),
                _ => None,
            })
            .collect();
        self.shared.store_calls.fetch_add(1, Ordering::Relaxed);
        self.inner.apply(&asked, mode, applied).await
    }

    async fn check(&self, ops: &[Op<'_>], out: &mut Applied) -> Result<(), StoreError> {
        let now = self.now();
        let mut plan: SmallVec<[Local; 4]> = SmallVec::new();
        self.plan(ops, now, &mut plan);
        if plan.iter().all(|l| !matches!(l, Local::Store { .. })) {
            self.finish_locally(ops, &plan, now, out);
            return Ok(());
        }
        let locally_denied = ops.iter().zip(&plan).any(|(op, l)| op.enforce && matches!(l, Local::Denied(_)));
        let mode = if locally_denied { Mode::Peek } else { Mode::Check };
        let mut applied = Applied::default();
        let stored = |plan: &[Local]| {
            ops.iter()
                .zip(plan.iter().copied())
                .filter_map(|(op, l)| if let Local::Store { ask } = l { Some((*op, ask)) } else { None })
                .collect::<SmallVec<[(Op<'_>, u64); 4]>>()
        };
        if let Err(error) = self.ask(ops, &plan, mode, &mut applied).await {
            self.unreserve(ops, &plan);
            return Err(error);
        }
        // A batch the store could not grant: ask again at the ops' own costs, and decide on that.
        let batch_refused = stored(&plan)
            .iter()
            .zip(&applied.results)
            .any(|((op, ask), r)| *ask > op.cost && !r.decision.allowed);
        if applied.degraded.is_none() && batch_refused {
            for (op, l) in ops.iter().zip(plan.iter_mut()) {
                if let Local::Store { ask } = l {
                    *ask = op.cost;
                }
            }
            if let Err(error) = self.ask(ops, &plan, mode, &mut applied).await {
                self.unreserve(ops, &plan);
                return Err(error);
            }
        }
        if applied.degraded.is_some() {
            // The store below decided locally: it decides the request as it is.
            self.unreserve(ops, &plan);
            return self.inner.apply(ops, Mode::Check, out).await;
        }
        let admitted = mode == Mode::Check
            && stored(&plan)
                .iter()
                .zip(&applied.results)
                .all(|((op, _), r)| !op.enforce || r.decision.allowed);
        if !admitted {
            self.unreserve(ops, &plan);
        }
        out.results.clear();
        out.at = applied.at;
        out.degraded = None;
        let offset = applied.at.as_micros() as i64 - now.as_micros() as i64;
        self.shared.offset.store(offset, Ordering::Relaxed);
        let mut answers = applied.results.iter();
        for (op, local) in ops.iter().zip(&plan) {
            let result = match *local {
                Local::Spent { taken, decision, .. } => OpResult {
                    decision,
                    grant: admitted.then_some(Grant { at: taken, cost: op.cost, lease: 0 }),
                    previous: None,
                },
                Local::Denied(decision) => OpResult { decision, grant: None, previous: None },
                Local::Store { ask } => {
                    let mut result = *answers.next().expect("the store answers every op it is asked");
                    self.record(op, ask, &mut result, applied.at, now, admitted);
                    // Asked as a peek when denied locally, answered for a check.
                    result.previous = None;
                    result
                }
            };
            out.results.push(result);
        }
        Ok(())
    }
}

/// What to ask the store for a prefetching op: a batch (at least its cost, at most what the limit
/// grants at once), or only its cost when the store last said fewer than a batch remain.
fn batch_ask(op: &Op<'_>, batch: PrefetchBatch, remaining: Option<u64>) -> u64 {
    let size = batch.size().min(op.limit.capacity()).max(op.cost);
    match remaining {
        Some(r) if r < size => op.cost,
        _ => size,
    }
}

/// The end (store time) of the window that `at` is in, for the algorithms with windows.
fn window_end(limit: &Limit, at: Timestamp) -> Option<Timestamp> {
    let fixed = |window: Duration| {
        let w = u64::try_from(window.as_micros()).unwrap_or(u64::MAX).max(1);
        let t = at.as_micros();
        Timestamp::from_micros((t - t % w).saturating_add(w))
    };
    match limit {
        Limit::FixedWindow(a) => Some(fixed(a.window())),
        Limit::SlidingWindow(a) => Some(fixed(a.window())),
        Limit::Quota(a) => Some(a.calendar().bounds(at).1),
        _ => None,
    }
}

/// How long after a take at `at` its units still count on the store (so that a refund gives
/// something back): to the end of a fixed window or quota period, one window more for a sliding
/// window; `None` for buckets (a refund always gives back what has not refilled).
fn worth_span(limit: &Limit, at: Timestamp) -> Option<Duration> {
    let left = window_end(limit, at)?.saturating_since(at);
    match limit {
        Limit::SlidingWindow(a) => Some(left + a.window()),
        _ => Some(left),
    }
}

impl<S: Store, C: Clock> Store for Prefetch<S, C> {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        if mode != Mode::Check || ops.iter().all(|o| o.prefetch.is_none()) {
            self.shared.store_calls.fetch_add(1, Ordering::Relaxed);
            return self.inner.apply(ops, mode, out).await;
        }
        self.check(ops, out).await
    }

    /// Answers at once when every op is decided from leases or remembered denials; otherwise
    /// what the store below answers at once, for requests that use no lease.
    fn try_apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Option<Result<(), StoreError>> {
        if mode != Mode::Check || ops.iter().all(|o| o.prefetch.is_none()) {
            return self.inner.try_apply_now(ops, mode, out);
        }
        let now = self.now();
        let mut plan: SmallVec<[Local; 4]> = SmallVec::new();
        self.plan(ops, now, &mut plan);
        if plan.iter().all(|l| !matches!(l, Local::Store { .. })) {
            self.finish_locally(ops, &plan, now, out);
            return Some(Ok(()));
        }
        self.unreserve(ops, &plan);
        None
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        self.inner.refund(key, limit, grant).await
    }

    /// Resets the key on the store and drops its lease (its units are forgotten with the store's
    /// state).
    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        self.shared.keys.pin().remove(key);
        self.inner.reset(key).await
    }
}

impl<S: Store, C: Clock> Wraps for Prefetch<S, C> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }
}
