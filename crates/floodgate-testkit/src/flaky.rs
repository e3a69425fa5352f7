//! [`FlakyStore`]: a real store that can be made to fail or hang on command, for breakers and
//! fallbacks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use floodgate::Limit;
use floodgate::store::{Adjustment, Applied, Mode, Once, Op, Record, Records, Settle, Store, StoreError};
use floodgate_core::Grant;
use tokio::sync::Notify;

/// How a [`FlakyStore`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// As the wrapped store does.
    Healthy,
    /// Every call fails at once with a transient backend error (a refused connection).
    Failing,
    /// Every call waits until the store is told to behave otherwise (a black-holed host).
    Hanging,
}

/// Where [`FlakyStore::lose_adjustments`] makes an adjustment fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// Before it reaches the store: nothing is made (an instance that crashed before the call).
    Before,
    /// After the store made it: the answer is lost (an instance that crashed after the call).
    After,
}

/// Wraps a real store; [`FlakyStore::set`] makes it fail or hang. Calls that reach the wrapped
/// store are counted ([`FlakyStore::calls`]). Clones share the behaviour and the count.
#[derive(Debug, Clone)]
pub struct FlakyStore<S> {
    inner: S,
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    behaviour: AtomicU8,
    calls: AtomicUsize,
    attempts: AtomicUsize,
    changed: Notify,
    /// How many of the next [`Records::adjust_once`] calls fail, and where (0 before, 1 after).
    lost_adjustments: AtomicUsize,
    lost_after: AtomicBool,
}

impl<S> FlakyStore<S> {
    /// A healthy store over `inner`.
    pub fn new(inner: S) -> Self {
        FlakyStore { inner, state: Arc::default() }
    }

    /// From now on, answer as `behaviour` says (hanging calls in flight then answer so too).
    pub fn set(&self, behaviour: Behaviour) {
        self.state.behaviour.store(behaviour as u8, Ordering::SeqCst);
        self.state.changed.notify_waiters();
    }

    /// Makes the next `n` [`Records::adjust_once`] calls fail with a transient error, `at` the point
    /// given: a settlement cut off between its steps.
    pub fn lose_adjustments(&self, n: usize, at: Lost) {
        self.state.lost_after.store(at == Lost::After, Ordering::SeqCst);
        self.state.lost_adjustments.store(n, Ordering::SeqCst);
    }

    /// Calls that reached the wrapped store.
    pub fn calls(&self) -> usize {
        self.state.calls.load(Ordering::SeqCst)
    }

    /// Every call made, whether it failed, hung or reached the wrapped store.
    pub fn attempts(&self) -> usize {
        self.state.attempts.load(Ordering::SeqCst)
    }

    fn behaviour(&self) -> Behaviour {
        match self.state.behaviour.load(Ordering::SeqCst) {
            1 => Behaviour::Failing,
            2 => Behaviour::Hanging,
            _ => Behaviour::Healthy,
        }
    }

    /// Waits while hanging; then whether the call may reach the wrapped store.
    async fn gate(&self) -> Result<(), StoreError> {
        self.state.attempts.fetch_add(1, Ordering::SeqCst);
        loop {
            let changed = self.state.changed.notified();
            match self.behaviour() {
                Behaviour::Healthy => {
                    self.state.calls.fetch_add(1, Ordering::SeqCst);
                    return Ok(());
                }
                Behaviour::Failing => {
                    return Err(StoreError::Backend {
                        message: "connection refused (a flaky test store)".into(),
                        transient: true,
                        source: None,
                    });
                }
                Behaviour::Hanging => changed.await,
            }
        }
    }
}

impl<S: Store> Store for FlakyStore<S> {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        self.gate().await?;
        self.inner.apply(ops, mode, out).await
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        self.gate().await?;
        self.inner.refund(key, limit, grant).await
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        self.gate().await?;
        self.inner.reset(key).await
    }
}

/// Record calls fail or hang as the others do; [`FlakyStore::lose_adjustments`] cuts off
/// adjustments besides.
impl<S: Store> Records for FlakyStore<S> {
    async fn adjust_once(
        &self,
        ops: &[Op<'_>],
        adjustment: Adjustment<'_>,
        once: Once<'_>,
    ) -> Result<bool, StoreError> {
        self.gate().await?;
        let lost = self
            .state
            .lost_adjustments
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if lost.is_err() {
            return self.inner.adjust_once(ops, adjustment, once).await;
        }
        let message = if self.state.lost_after.load(Ordering::SeqCst) {
            self.inner.adjust_once(ops, adjustment, once).await?;
            "the adjustment's answer was lost (a flaky test store)"
        } else {
            "the adjustment was cut off (a flaky test store)"
        };
        Err(StoreError::Backend { message: message.into(), transient: true, source: None })
    }

    async fn put_record(
        &self,
        id: &[u8],
        body: &[u8],
        ttl: std::time::Duration,
        kept: std::time::Duration,
    ) -> Result<floodgate_core::Timestamp, StoreError> {
        self.gate().await?;
        self.inner.put_record(id, body, ttl, kept).await
    }

    async fn get_record(&self, id: &[u8]) -> Result<Option<Record>, StoreError> {
        self.gate().await?;
        self.inner.get_record(id).await
    }

    async fn settle_record(&self, id: &[u8], settlement: &[u8]) -> Result<Settle, StoreError> {
        self.gate().await?;
        self.inner.settle_record(id, settlement).await
    }
}
