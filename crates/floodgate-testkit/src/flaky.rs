//! [`FlakyStore`]: a real store that can be made to fail or hang on command, for breakers and
//! fallbacks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use floodgate::Limit;
use floodgate::store::{Applied, Mode, Op, Record, Settle, Store, StoreError};
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
