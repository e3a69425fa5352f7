//! [`Fallback`]: while the store it wraps fails, the rules that say `on_store_error: local` decide
//! from an in-process limiter holding this instance's share of their limit, so that a dead Redis
//! never leaves the fleet unprotected.
//!
//! - **The share.** An op that falls back ([`Op::falls_back`]) is decided on a local
//!   [`MemoryStore`] under the same key, with its limit scaled by [`Limit::share`]:
//!   `ceil(limit × local_factor / instances)`, same algorithm. `instances` is set with
//!   [`Fallback::set_instances`] (a fixed number, or a count discovered through heartbeats in the
//!   store, kept current by whoever runs them). With `local_factor` 2, a fleet that lost its store
//!   admits at most twice its global limit, and each instance no more than its share.
//! - **The rest of the request.** Ops whose rules fail open or closed are left to the engine,
//!   which applies their policies: a request with an enforced `fail_closed` limit is denied, so its
//!   local limits are only peeked (nothing consumed for a request that does not pass).
//! - **Back on the store.** Every call tries the store first (through its breaker, which answers at
//!   once while open): the first call it answers is decided on it again, with nothing to switch.
//! - **What the local limiters admitted** is owed to the store: each admission is recorded per key
//!   (at most `max_owed_keys` keys; beyond that, units are counted as dropped), and
//!   [`Fallback::replay`] charges what is still owed once the store answers again, as reports
//!   (which never deny). "Still owed" follows the algorithm: units of a fixed window or quota
//!   period that has ended are not charged (they no longer count); a sliding window's or log's are
//!   charged while the last local admission is within one window; a bucket's less what has refilled
//!   since the last local admission. So after an outage, a key's counter on the store holds what the
//!   fleet admitted, and it stays within its limit from then on.
//!
//! Local decisions carry no grant (nothing of them can be refunded to the store). Time comes from
//! the local store's [`Clock`], so that tests drive it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use floodgate_core::{Clock, Decision, Grant, SystemClock, Timestamp};
use parking_lot::Mutex;
use smallvec::SmallVec;

use super::{Applied, MemoryStore, Mode, Op, OpResult, Store, StoreError, Wraps};
use crate::{Limit, OnStoreError};

/// How a [`Fallback`] shares limits out. See the [module docs](self).
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackConfig {
    /// How much more than its even share each instance may admit while the store fails (default
    /// 2: `ceil(limit × 2 / instances)`); above 0.
    pub local_factor: f64,
    /// The instances sharing the limits until [`Fallback::set_instances`] says otherwise (default 1).
    pub instances: u32,
    /// The most keys whose local admissions are remembered for [`Fallback::replay`] (default
    /// 100 000). Admissions for further keys are counted in [`FallbackStats::dropped_units`].
    pub max_owed_keys: usize,
}

impl Default for FallbackConfig {
    fn default() -> Self {
        FallbackConfig { local_factor: 2.0, instances: 1, max_owed_keys: 100_000 }
    }
}

/// Called when the store starts failing (`true`) and when it answers again (`false`), once per
/// change: for logs and the `floodgate_fallback_active` gauge.
pub type OnFallback = Arc<dyn Fn(bool) + Send + Sync>;

/// A [`Store`] that decides the ops that fall back locally while the store it wraps fails.
/// Cloning shares it.
pub struct Fallback<S, C: Clock = SystemClock> {
    inner: S,
    shared: Arc<Shared<C>>,
}

struct Shared<C: Clock> {
    local: MemoryStore<C>,
    config: FallbackConfig,
    instances: AtomicU32,
    degraded: AtomicBool,
    owed: Mutex<HashMap<Box<[u8]>, Owing>>,
    on_change: Option<OnFallback>,
    local_decisions: AtomicU64,
    charged_units: AtomicU64,
    expired_units: AtomicU64,
    dropped_units: AtomicU64,
}

/// What a key's local limiter admitted since it last started owing.
#[derive(Debug, Clone)]
struct Owing {
    /// The rule's limit (not the share): what the store charges it against.
    limit: Limit,
    scope_len: usize,
    units: u64,
    /// The last local admission.
    last: Timestamp,
}

/// What the fallback has done (for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FallbackStats {
    /// Whether the store's last call failed: the rules that fall back decide locally now.
    pub degraded: bool,
    /// The instances the limits are shared by.
    pub instances: u32,
    /// Requests decided (in part) locally.
    pub local_decisions: u64,
    /// Keys with local admissions not yet charged to the store.
    pub owed_keys: usize,
    /// Units charged to the store on recovery.
    pub charged_units: u64,
    /// Units admitted locally that no longer counted when the store answered again (their window
    /// had ended, their bucket had refilled): not charged.
    pub expired_units: u64,
    /// Units admitted locally that could not be remembered (more than `max_owed_keys` keys owed).
    pub dropped_units: u64,
}

/// What one [`Fallback::replay`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Replayed {
    /// Keys charged.
    pub keys: usize,
    /// Units charged.
    pub units: u64,
    /// Units that no longer counted.
    pub expired: u64,
    /// Keys left owing because the store failed again (tried on the next replay).
    pub left: usize,
}

/// How many ops one replay call charges.
const REPLAY_BATCH: usize = 32;

impl<S: Clone, C: Clock> Clone for Fallback<S, C> {
    fn clone(&self) -> Self {
        Fallback { inner: self.inner.clone(), shared: Arc::clone(&self.shared) }
    }
}

impl<S: fmt::Debug, C: Clock> fmt::Debug for Fallback<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fallback")
            .field("inner", &self.inner)
            .field("config", &self.shared.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<S, C: Clock> Fallback<S, C> {
    /// `inner`, falling back on `local` (a memory store of its own, on the clock the fallback
    /// reads time from; start its sweeper for a long-running process).
    pub fn new(inner: S, local: MemoryStore<C>, config: FallbackConfig) -> Self {
        Fallback::build(inner, local, config, None)
    }

    /// [`Fallback::new`], calling `on_change` when the store starts and stops failing.
    pub fn on_change(inner: S, local: MemoryStore<C>, config: FallbackConfig, on_change: OnFallback) -> Self {
        Fallback::build(inner, local, config, Some(on_change))
    }

    fn build(inner: S, local: MemoryStore<C>, config: FallbackConfig, on_change: Option<OnFallback>) -> Self {
        let shared = Shared {
            local,
            instances: AtomicU32::new(config.instances.max(1)),
            config,
            degraded: AtomicBool::new(false),
            owed: Mutex::new(HashMap::new()),
            on_change,
            local_decisions: AtomicU64::new(0),
            charged_units: AtomicU64::new(0),
            expired_units: AtomicU64::new(0),
            dropped_units: AtomicU64::new(0),
        };
        Fallback { inner, shared: Arc::new(shared) }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The local store.
    pub fn local(&self) -> &MemoryStore<C> {
        &self.shared.local
    }

    /// Shares the limits by `instances` from the next local decision on (at least 1).
    pub fn set_instances(&self, instances: u32) {
        self.shared.instances.store(instances.max(1), Ordering::Release);
    }

    /// The instances the limits are shared by.
    pub fn instances(&self) -> u32 {
        self.shared.instances.load(Ordering::Acquire)
    }

    /// Whether the store's last call failed (the rules that fall back decide locally now).
    pub fn is_degraded(&self) -> bool {
        self.shared.degraded.load(Ordering::Acquire)
    }

    /// What the fallback has done.
    pub fn stats(&self) -> FallbackStats {
        let s = &*self.shared;
        FallbackStats {
            degraded: self.is_degraded(),
            instances: self.instances(),
            local_decisions: s.local_decisions.load(Ordering::Relaxed),
            owed_keys: s.owed.lock().len(),
            charged_units: s.charged_units.load(Ordering::Relaxed),
            expired_units: s.expired_units.load(Ordering::Relaxed),
            dropped_units: s.dropped_units.load(Ordering::Relaxed),
        }
    }

    /// Whether there are local admissions to charge and the store is answering: when a
    /// [`Fallback::replay`] is due.
    pub fn replay_due(&self) -> bool {
        !self.is_degraded() && !self.shared.owed.lock().is_empty()
    }

    fn set_degraded(&self, degraded: bool) {
        if self.shared.degraded.load(Ordering::Relaxed) != degraded
            && self.shared.degraded.swap(degraded, Ordering::AcqRel) != degraded
            && let Some(on_change) = &self.shared.on_change
        {
            on_change(degraded);
        }
    }

    /// The store failed with `error` on `ops`: decides those that fall back on the local store
    /// into `out` (marked [`Applied::degraded`]), or returns the error when none does.
    fn decide_locally(
        &self,
        ops: &[Op<'_>],
        mode: Mode,
        out: &mut Applied,
        error: StoreError,
    ) -> Result<(), StoreError> {
        self.set_degraded(true);
        if !ops.iter().any(Op::falls_back) {
            return Err(error);
        }
        let s = &*self.shared;
        let instances = self.instances();
        // A request that an enforced fail-closed limit denies consumes nothing: peek the rest.
        let mut denied = ops.iter().any(|o| o.enforce && o.on_error == OnStoreError::FailClosed);
        let mut shares: SmallVec<[(usize, Limit); 4]> = SmallVec::new();
        let mut too_costly: SmallVec<[(usize, u64); 2]> = SmallVec::new();
        for (i, op) in ops.iter().enumerate().filter(|(_, o)| o.falls_back()) {
            let share = op.limit.share(s.config.local_factor, instances);
            if mode != Mode::Report && op.cost > share.capacity() {
                // More than this instance's whole share: never granted locally.
                denied |= op.enforce;
                too_costly.push((i, share.capacity()));
                continue;
            }
            shares.push((i, share));
        }
        let local_ops: SmallVec<[Op<'_>; 4]> =
            shares.iter().map(|(i, share)| Op { limit: share, ..ops[*i] }).collect();
        let local_mode = if mode == Mode::Check && denied { Mode::Peek } else { mode };
        let mut local = Applied::default();
        match s.local.try_apply_now(&local_ops, local_mode, &mut local) {
            Some(Ok(())) => {}
            // The local store refuses (full, set to reject): the rules' policies decide.
            Some(Err(_)) | None => return Err(error),
        }
        out.results.clear();
        out.at = local.at;
        let mut decided = shares.iter().map(|(i, _)| *i).zip(local.results.iter()).peekable();
        for (i, op) in ops.iter().enumerate() {
            let result = match decided.peek() {
                Some((j, r)) if *j == i => {
                    let r = **r;
                    decided.next();
                    r
                }
                _ => {
                    let capacity =
                        too_costly.iter().find(|(j, _)| *j == i).map_or(op.limit.capacity(), |c| c.1);
                    OpResult { decision: never(capacity), grant: None, previous: None }
                }
            };
            out.results.push(result);
        }
        out.degraded = Some(Arc::new(error));
        s.local_decisions.fetch_add(1, Ordering::Relaxed);
        self.owe(ops, &shares, &local, local.at);
        Ok(())
    }

    /// Records what the local store consumed, to charge the store with later.
    fn owe(&self, ops: &[Op<'_>], shares: &[(usize, Limit)], local: &Applied, now: Timestamp) {
        let consumed = shares.iter().zip(&local.results).filter(|(_, r)| r.grant.is_some());
        let mut owed = None;
        for ((i, _), r) in consumed {
            let op = &ops[*i];
            let cost = r.grant.map_or(op.cost, |g| g.cost);
            let owed = owed.get_or_insert_with(|| self.shared.owed.lock());
            if let Some(owing) = owed.get_mut(op.key) {
                let expired = owing.units - still_owed(owing, now);
                self.shared.expired_units.fetch_add(expired, Ordering::Relaxed);
                if owing.limit != *op.limit {
                    // The rule changed (a reload): what is owed is charged against the new limit.
                    owing.limit = op.limit.clone();
                }
                owing.units = owing.units - expired + cost;
                owing.last = now;
            } else if owed.len() < self.shared.config.max_owed_keys {
                let owing =
                    Owing { limit: op.limit.clone(), scope_len: op.scope_len, units: cost, last: now };
                owed.insert(op.key.into(), owing);
            } else {
                self.shared.dropped_units.fetch_add(cost, Ordering::Relaxed);
            }
        }
    }
}

impl<S: Store, C: Clock> Fallback<S, C> {
    /// Charges the store with what the local limiters admitted and still counts (see the
    /// [module docs](self)), in reports of up to 32 keys per call; keys whose call fails stay owed
    /// for the next replay. Call it once the store answers again ([`Fallback::replay_due`]); the
    /// server does, every few hundred milliseconds.
    pub async fn replay(&self) -> Replayed {
        let mut pending: Vec<(Box<[u8]>, Owing)> = self.shared.owed.lock().drain().collect();
        let now = self.shared.local.clock().now();
        let mut replayed = Replayed::default();
        let mut due: Vec<(Box<[u8]>, Owing)> = Vec::with_capacity(pending.len());
        for (key, mut owing) in pending.drain(..) {
            let units = still_owed(&owing, now);
            replayed.expired += owing.units - units;
            if units > 0 {
                owing.units = units;
                due.push((key, owing));
            }
        }
        let mut applied = Applied::default();
        let mut failed_from = None;
        for (start, batch) in due.chunks(REPLAY_BATCH).enumerate().map(|(n, b)| (n * REPLAY_BATCH, b)) {
            let ops: SmallVec<[Op<'_>; REPLAY_BATCH]> = batch
                .iter()
                .map(|(key, owing)| Op {
                    key,
                    scope_len: owing.scope_len,
                    limit: &owing.limit,
                    cost: owing.units,
                    enforce: true,
                    on_error: OnStoreError::FailOpen,
                    prefetch: None,
                    block_for: None,
                })
                .collect();
            if self.inner.apply(&ops, Mode::Report, &mut applied).await.is_err() {
                failed_from = Some(start);
                break;
            }
            replayed.keys += batch.len();
            replayed.units += batch.iter().map(|(_, o)| o.units).sum::<u64>();
        }
        if let Some(start) = failed_from {
            let mut owed = self.shared.owed.lock();
            for (key, owing) in due.drain(start..) {
                replayed.left += 1;
                // Admissions recorded meanwhile for the same key add up.
                match owed.get_mut(&key) {
                    Some(newer) => newer.units = newer.units.saturating_add(owing.units),
                    None => {
                        owed.insert(key, owing);
                    }
                }
            }
        }
        let s = &*self.shared;
        s.charged_units.fetch_add(replayed.units, Ordering::Relaxed);
        s.expired_units.fetch_add(replayed.expired, Ordering::Relaxed);
        replayed
    }
}

/// Of what `owing` admitted locally, what still counts at `now` (see the module docs).
fn still_owed(owing: &Owing, now: Timestamp) -> u64 {
    let since = now.saturating_since(owing.last);
    match &owing.limit {
        Limit::FixedWindow(a) => {
            let w = micros(a.window()).max(1);
            if now.as_micros() / w == owing.last.as_micros() / w { owing.units } else { 0 }
        }
        Limit::Quota(a) => {
            let calendar = a.calendar();
            if calendar.bounds(now).0 == calendar.bounds(owing.last).0 { owing.units } else { 0 }
        }
        Limit::SlidingWindow(a) => {
            if since < a.window() {
                owing.units
            } else {
                0
            }
        }
        Limit::SlidingLog(a) => {
            if since < a.window() {
                owing.units
            } else {
                0
            }
        }
        Limit::Budget(a) => {
            if since < a.ttl() {
                owing.units
            } else {
                0
            }
        }
        Limit::TokenBucket(a) => refilled_less(owing.units, a.rate(), since),
        Limit::Gcra(a) => refilled_less(owing.units, a.rate(), since),
        Limit::Concurrency(_) => 0,
    }
}

/// `units` less the tokens `rate` refills in `elapsed`.
fn refilled_less(units: u64, rate: floodgate_core::Rate, elapsed: Duration) -> u64 {
    let refilled = u128::from(rate.count()) * elapsed.as_micros() / rate.period().as_micros().max(1);
    units.saturating_sub(u64::try_from(refilled).unwrap_or(u64::MAX))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A denial that waiting does not lift: more than the share could ever grant.
fn never(capacity: u64) -> Decision {
    Decision { allowed: false, limit: capacity, remaining: 0, reset_after: Duration::ZERO, retry_after: None }
}

impl<S: Store, C: Clock> Store for Fallback<S, C> {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        out.degraded = None;
        match self.inner.apply(ops, mode, out).await {
            Ok(()) => {
                self.set_degraded(false);
                Ok(())
            }
            Err(error) => self.decide_locally(ops, mode, out, error),
        }
    }

    fn try_apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Option<Result<(), StoreError>> {
        out.degraded = None;
        match self.inner.try_apply_now(ops, mode, out)? {
            Ok(()) => {
                self.set_degraded(false);
                Some(Ok(()))
            }
            Err(error) => Some(self.decide_locally(ops, mode, out, error)),
        }
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        self.inner.refund(key, limit, grant).await
    }

    /// Resets the key on the store, and forgets its local state and what it owes.
    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        self.shared.owed.lock().remove(key);
        let _ = self.shared.local.reset(key).await;
        self.inner.reset(key).await
    }
}

impl<S: Store, C: Clock> Wraps for Fallback<S, C> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }
}
