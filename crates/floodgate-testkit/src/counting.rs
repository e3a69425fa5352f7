//! [`CountingStore`]: a store that counts the calls made to the store it wraps.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use floodgate::Limit;
use floodgate::store::{Applied, Mode, Op, Store, StoreError, Wraps};
use floodgate_core::Grant;

/// Wraps a real store and counts every call made to it, to test how many round trips a front door
/// or the engine makes per request (one `apply` per request, no refunds on a single node…).
/// Clones share the counts.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use std::num::NonZeroU64;
/// use std::time::Duration;
/// use floodgate::{Descriptors, Engine, MemoryStore, Policy, Rule};
/// use floodgate_core::FixedWindow;
/// use floodgate_testkit::CountingStore;
///
/// let store = CountingStore::new(MemoryStore::new());
/// let rule = Rule::new("per-user", FixedWindow::try_new(NonZeroU64::new(5).unwrap(), Duration::from_secs(60))?)
///     .key(["user"]);
/// let engine = Engine::new(Policy::new([rule])?, store.clone());
/// engine.check(&Descriptors::new().with("user", "u1"), 1).await?;
/// assert_eq!(store.calls().applies, 1);
/// assert_eq!(store.calls().refunds, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct CountingStore<S> {
    inner: S,
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    applies: AtomicUsize,
    ops: AtomicUsize,
    refunds: AtomicUsize,
    resets: AtomicUsize,
}

/// How many calls a [`CountingStore`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Calls {
    /// [`Store::apply`] calls.
    pub applies: usize,
    /// Ops over all `apply` calls.
    pub ops: usize,
    /// [`Store::refund`] calls.
    pub refunds: usize,
    /// [`Store::reset`] calls.
    pub resets: usize,
}

impl<S> CountingStore<S> {
    /// Counts the calls made to `inner`.
    pub fn new(inner: S) -> Self {
        CountingStore { inner, counts: Arc::default() }
    }

    /// The calls so far.
    pub fn calls(&self) -> Calls {
        let c = &self.counts;
        Calls {
            applies: c.applies.load(Ordering::SeqCst),
            ops: c.ops.load(Ordering::SeqCst),
            refunds: c.refunds.load(Ordering::SeqCst),
            resets: c.resets.load(Ordering::SeqCst),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Store> Store for CountingStore<S> {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        self.counts.applies.fetch_add(1, Ordering::SeqCst);
        self.counts.ops.fetch_add(ops.len(), Ordering::SeqCst);
        self.inner.apply(ops, mode, out).await
    }

    fn try_apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Option<Result<(), StoreError>> {
        let answered = self.inner.try_apply_now(ops, mode, out)?;
        self.counts.applies.fetch_add(1, Ordering::SeqCst);
        self.counts.ops.fetch_add(ops.len(), Ordering::SeqCst);
        Some(answered)
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        self.counts.refunds.fetch_add(1, Ordering::SeqCst);
        self.inner.refund(key, limit, grant).await
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        self.counts.resets.fetch_add(1, Ordering::SeqCst);
        self.inner.reset(key).await
    }
}

/// Record calls are passed through, not counted.
impl<S: Store> Wraps for CountingStore<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }
}
