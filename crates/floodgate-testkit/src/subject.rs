//! The store under test, its clock, and the keys and limits the suite uses.

use std::fmt::Write as _;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::store::{Applied, Mode, Op, OpResult, Store, StoreError};
use floodgate::{Limit, OnStoreError};
use floodgate_core::calendar::Period;
use floodgate_core::{
    Calendar, Concurrency, FixedWindow, Gcra, Grant, ManualClock, Quota, Rate, SlidingLog, SlidingWindow,
    Timestamp, TokenBucket,
};

/// Where the clock of every [`StoreUnderTest`] starts: 2023-11-15T00:00:00Z, a UTC midnight, so
/// minute windows and daily quotas begin on it.
pub const START: Timestamp = Timestamp::from_secs(1_700_006_400);

/// A key encoded the way the engine encodes keys (see `floodgate::key`): a length-prefixed rule
/// name, then a length-prefixed value. Different `(rule, value)` pairs never share a key, and
/// [`TestKey::scope_len`] covers the rule part, as [`Op::scope_len`] expects.
///
/// ```
/// use floodgate_testkit::TestKey;
/// let key = TestKey::new("per-user", "u1");
/// assert_eq!(key.bytes(), b"8:per-user2:u1");
/// assert_eq!(&key.bytes()[..key.scope_len()], b"8:per-user");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TestKey {
    bytes: Vec<u8>,
    scope_len: usize,
}

impl TestKey {
    /// The key of `value` under the rule named `rule`.
    pub fn new(rule: &str, value: &str) -> Self {
        let mut bytes = Vec::new();
        push_field(&mut bytes, rule.as_bytes());
        let scope_len = bytes.len();
        push_field(&mut bytes, value.as_bytes());
        TestKey { bytes, scope_len }
    }

    /// The encoded key.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// How many leading bytes name the rule.
    pub fn scope_len(&self) -> usize {
        self.scope_len
    }

    /// An enforced op of `cost` against `limit` on this key.
    pub fn op<'a>(&'a self, limit: &'a Limit, cost: u64) -> Op<'a> {
        Op {
            key: &self.bytes,
            scope_len: self.scope_len,
            limit,
            cost,
            enforce: true,
            on_error: OnStoreError::FailOpen,
            prefetch: None,
            block_for: None,
        }
    }

    /// A shadow op (`enforce: false`): evaluated, never denies the request.
    pub fn shadow_op<'a>(&'a self, limit: &'a Limit, cost: u64) -> Op<'a> {
        Op { enforce: false, ..self.op(limit, cost) }
    }
}

fn push_field(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(field.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(field);
}

/// One limit of each of the seven algorithms, each granting at most `capacity` at once:
/// `fixed_window`, `sliding_window` and `sliding_log` of `capacity` per minute, `token_bucket` and
/// `gcra` of burst `capacity` refilled at `capacity` per minute, `concurrency` of `capacity`
/// permits leased for a minute, and `quota` of `capacity` per UTC day.
///
/// # Panics
/// When `capacity` is 0, or above one per microsecond for a minute (60 000 000).
pub fn every_algorithm(capacity: u64) -> Vec<Limit> {
    let cap = NonZeroU64::new(capacity).expect("a capacity of at least 1");
    let minute = Duration::from_secs(60);
    let rate = Rate::try_new(cap, minute).expect("a representable rate");
    vec![
        FixedWindow::try_new(cap, minute).expect("a valid window").into(),
        SlidingWindow::try_new(cap, minute).expect("a valid window").into(),
        SlidingLog::try_new(cap, minute).expect("a valid window").into(),
        TokenBucket::try_new(rate, cap).expect("a valid bucket").into(),
        Gcra::try_new(rate, cap).expect("a valid bucket").into(),
        Concurrency::try_new(cap, minute).expect("a valid lease").into(),
        Quota::new(cap, Calendar::utc(Period::Day)).into(),
    ]
}

/// A store built around a [`ManualClock`] that starts at [`START`], with helpers that apply one op
/// and check the store's answer is well formed.
///
/// Keys made with [`StoreUnderTest::key`] carry a namespace unique to this value (the test's name,
/// the process id and a counter), so tests sharing one backend (one Redis server) never see each
/// other's keys.
#[derive(Debug)]
pub struct StoreUnderTest<S> {
    store: S,
    clock: ManualClock,
    namespace: String,
}

impl<S: Store> StoreUnderTest<S> {
    /// Builds the store with `make`, around a fresh clock stopped at [`START`]; `test` names the
    /// key namespace.
    pub fn new(make: impl FnOnce(ManualClock) -> S, test: &str) -> Self {
        static INSTANCE: AtomicU64 = AtomicU64::new(0);
        let clock = ManualClock::new(START);
        let mut namespace = String::from(test);
        let _ = write!(namespace, "#{}.{}", std::process::id(), INSTANCE.fetch_add(1, Ordering::Relaxed));
        StoreUnderTest { store: make(clock.clone()), clock, namespace }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The clock the store reads.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// The clock's time.
    pub fn now(&self) -> Timestamp {
        floodgate_core::Clock::now(&self.clock)
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    /// Moves the clock forward to `t`.
    ///
    /// # Panics
    /// When `t` is in the past.
    pub fn set(&self, t: Timestamp) {
        self.clock.set(t);
    }

    /// Moves the clock forward to the next instant (now included) that lies `phase` into a period
    /// of length `period` since the Unix epoch: `advance_to_phase(60s, 59s)` stops 1s before a
    /// minute boundary.
    pub fn advance_to_phase(&self, period: Duration, phase: Duration) {
        let period = u64::try_from(period.as_micros()).expect("a period that fits in u64 µs");
        let phase = u64::try_from(phase.as_micros()).expect("a phase that fits in u64 µs") % period;
        let now = self.now().as_micros();
        let base = now - now % period;
        let target = if base + phase >= now { base + phase } else { base + period + phase };
        self.set(Timestamp::from_micros(target));
    }

    /// The key of `value` under rule `rule`, in this store's namespace.
    pub fn key(&self, rule: &str, value: &str) -> TestKey {
        TestKey::new(&format!("{}/{rule}", self.namespace), value)
    }

    /// [`Store::apply`], as it is.
    pub async fn try_apply(&self, ops: &[Op<'_>], mode: Mode) -> Result<Applied, StoreError> {
        let mut applied = Applied::default();
        self.store.apply(ops, mode, &mut applied).await.map(|()| applied)
    }

    /// [`Store::apply`], checked to succeed, to answer at the clock's time, with one result per op,
    /// a grant exactly for what was consumed, and a `retry_after` exactly on denials.
    ///
    /// # Panics
    /// When the store fails or answers out of contract.
    pub async fn apply(&self, ops: &[Op<'_>], mode: Mode) -> Vec<OpResult> {
        let now = self.now();
        let applied = match self.try_apply(ops, mode).await {
            Ok(applied) => applied,
            Err(e) => panic!("{mode:?} of {} ops failed: {e}", ops.len()),
        };
        assert_eq!(applied.at, now, "the store must answer at the time of the clock it was built with");
        assert_eq!(applied.results.len(), ops.len(), "one result per op");
        // All-or-nothing: a check is admitted when every enforced op allows, and then consumes
        // from exactly the ops that allow; otherwise from none.
        let admitted = ops.iter().zip(&applied.results).all(|(op, r)| !op.enforce || r.decision.allowed);
        for (op, r) in ops.iter().zip(&applied.results) {
            let name = op.limit.algorithm_name();
            let d = &r.decision;
            assert_eq!(d.limit, op.limit.capacity(), "{name}: a decision reports the limit's capacity");
            assert_eq!(d.allowed, d.retry_after.is_none(), "{name}: retry_after is set exactly on denials");
            if let Some(g) = r.grant {
                assert_eq!((g.at, g.cost), (now, op.cost), "{name}: a grant records when and what it took");
            }
            assert_eq!(
                r.previous.is_some(),
                mode == Mode::Peek && matches!(op.limit, Limit::Quota(_)),
                "{name}: the previous period's count comes exactly with a quota's peek"
            );
            match mode {
                Mode::Peek => assert_eq!(r.grant, None, "{name}: a peek grants nothing"),
                Mode::Report => {
                    assert!(d.allowed, "{name}: a report never denies");
                    assert!(
                        r.grant.is_some() || op.block_for.is_some(),
                        "{name}: a report always consumes (but on a key in a penalty box)"
                    );
                }
                Mode::Check => assert_eq!(
                    r.grant.is_some(),
                    admitted && d.allowed,
                    "{name}: a check consumes from the limits that allow, and only when every enforced one does"
                ),
            }
        }
        applied.results.into_vec()
    }

    /// Applies one op in `mode`.
    pub async fn apply_one(&self, key: &TestKey, limit: &Limit, cost: u64, mode: Mode) -> OpResult {
        self.apply(&[key.op(limit, cost)], mode).await[0]
    }

    /// Checks one enforced op.
    pub async fn check(&self, key: &TestKey, limit: &Limit, cost: u64) -> OpResult {
        self.apply_one(key, limit, cost, Mode::Check).await
    }

    /// Peeks one op.
    pub async fn peek(&self, key: &TestKey, limit: &Limit, cost: u64) -> OpResult {
        self.apply_one(key, limit, cost, Mode::Peek).await
    }

    /// Reports one op.
    pub async fn report(&self, key: &TestKey, limit: &Limit, cost: u64) -> OpResult {
        self.apply_one(key, limit, cost, Mode::Report).await
    }

    /// [`Store::refund`], checked to succeed.
    ///
    /// # Panics
    /// When the store fails.
    pub async fn refund(&self, key: &TestKey, limit: &Limit, grant: Grant) {
        if let Err(e) = self.store.refund(key.bytes(), limit, grant).await {
            panic!("refund failed: {e}");
        }
    }

    /// [`Store::reset`], checked to succeed: whether the key had state.
    ///
    /// # Panics
    /// When the store fails.
    pub async fn reset(&self, key: &TestKey) -> bool {
        match self.store.reset(key.bytes()).await {
            Ok(existed) => existed,
            Err(e) => panic!("reset failed: {e}"),
        }
    }
}
