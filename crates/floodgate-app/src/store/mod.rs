//! [`AnyStore`]: the store a [`StoreConfig`](floodgate_config::StoreConfig) describes, opened — the memory store, or a Redis node
//! or cluster — as one [`Store`], with its readiness and key count. The server and
//! `floodgate-bench` open their stores here, so both run on the same thing.
//!
//! A Redis store is opened without connecting: it connects on first use and reconnects by itself,
//! so a process can start while Redis is down ([`AnyStore::ready`] tells when it answers). Only an
//! invalid configuration (a URL the `redis` crate refuses, a prefix with `{` or `}`) fails
//! [`AnyStore::open`].
//!
//! A Redis store is opened as the [`Survival`](floodgate_config::Survival) settings say: inside a circuit
//! [`Breaker`], inside a [`Fallback`] that decides the `local` rules on an in-process memory store
//! while Redis fails, inside a [`Prefetch`] that serves the rules with `prefetch` from batch
//! leases. [`AnyStore::fallback`] gives the fallback (to set its instances, replay what it
//! admitted, read its stats), [`AnyStore::breaker`] the breaker, [`AnyStore::prefetch`] the
//! prefetch wrapper (to return ended leases, flush them on a reload). The memory store decides
//! every request itself: `prefetch` has no effect on it.

mod clock;
mod open;
mod redis;

use floodgate::core::{Clock, Grant};
use floodgate::store::{
    Applied, Breaker, BreakerState, Fallback, MemoryStats, Mode, Op, OverflowStats, Prefetch, Records,
};
use floodgate::{Limit, MemoryConfig, MemoryStore, Store, StoreError};
use floodgate_redis::{Readiness, RedisStore};

pub use self::clock::ServeClock;
pub use self::open::{Hooks, OpenError, guard};
pub use self::redis::{redis_config, same_store};

/// A Redis store inside its breaker and the local fallback.
pub type FallbackStore<C = ServeClock> = Fallback<Breaker<RedisStore, C>, C>;

/// A Redis store as it is run: its breaker inside, then the local fallback, then prefetch outside
/// (a batch is taken through the breaker and the fallback like any check).
pub type Guarded<C = ServeClock> = Prefetch<FallbackStore<C>, C>;

/// The configured store. Cheap to clone (clones share the store).
#[derive(Debug, Clone)]
pub enum AnyStore<C: Clock = ServeClock> {
    /// The embedded memory store.
    Memory(MemoryStore<C>),
    /// A Redis node or a Redis Cluster, inside its breaker and fallback.
    Redis(Guarded<C>),
}

impl<C: Clock> AnyStore<C> {
    /// A memory store with `config` on `clock`, its sweeper not started (tests drive the clock and
    /// sweep themselves).
    pub fn memory_on(config: MemoryConfig, clock: C) -> Self {
        AnyStore::Memory(MemoryStore::with_config(config, clock))
    }

    /// The `store` label of the store metrics: `memory`, `redis` or `redis_cluster`.
    pub fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(_) => "memory",
            AnyStore::Redis(store) if store.inner().inner().inner().is_cluster() => "redis_cluster",
            AnyStore::Redis(_) => "redis",
        }
    }

    /// The Redis store itself (no breaker, no fallback), for a Redis kind.
    pub fn redis(&self) -> Option<&RedisStore> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(store) => Some(store.inner().inner().inner()),
        }
    }

    /// A Redis store's fallback.
    pub fn fallback(&self) -> Option<&FallbackStore<C>> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(store) => Some(store.inner()),
        }
    }

    /// A Redis store's prefetch wrapper (the store as it is run).
    pub fn prefetch(&self) -> Option<&Guarded<C>> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(store) => Some(store),
        }
    }

    /// A Redis store's breaker state.
    pub fn breaker(&self) -> Option<BreakerState> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(store) => Some(store.inner().inner().state()),
        }
    }

    /// Writes a checkpoint of a persisted memory store (see [`MemoryStore::checkpoint`]), so that
    /// the next start loads one file; other stores have nothing to do. Blocks while it writes.
    pub fn checkpoint(&self) -> Result<(), floodgate::store::PersistError> {
        match self {
            AnyStore::Memory(store) => store.checkpoint(),
            AnyStore::Redis(_) => Ok(()),
        }
    }

    /// Whether [`AnyStore::keys`] can answer (whether `floodgate_keys` is exported).
    pub fn counts_keys(&self) -> bool {
        matches!(self, AnyStore::Memory(_))
    }

    /// Whether the store reports the reservations that expire unsettled: the memory store's sweeper
    /// does ([`MemoryStore::on_expired_records`]); Redis lets them vanish with their key's TTL.
    pub fn reports_expiries(&self) -> bool {
        matches!(self, AnyStore::Memory(_))
    }

    /// How many keys the store holds, when it knows cheaply (for `floodgate_keys`): the memory
    /// store does; Redis is not asked (counting would mean `DBSIZE`, which counts other data too, or
    /// a `SCAN` on every scrape).
    pub fn keys(&self) -> Option<usize> {
        self.memory_stats().map(|stats| stats.keys)
    }

    /// The memory store's counts (keys, its cap, overflow counters); `None` for Redis.
    pub fn memory_stats(&self) -> Option<MemoryStats> {
        match self {
            AnyStore::Memory(store) => Some(store.stats()),
            AnyStore::Redis(_) => None,
        }
    }

    /// The rules whose new keys found the memory store full, with their overflow decisions.
    pub fn overflow(&self) -> Vec<OverflowStats> {
        match self {
            AnyStore::Memory(store) => store.overflow(),
            AnyStore::Redis(_) => Vec::new(),
        }
    }

    /// Whether the store can decide now: the memory store always can; Redis when it answers
    /// `PING` ([`RedisStore::ready`]: cached for a second, on a connection of its own).
    pub async fn ready(&self) -> Readiness {
        match self {
            AnyStore::Memory(_) => Readiness::Ready,
            AnyStore::Redis(store) => store.inner().inner().inner().ready().await,
        }
    }
}

// `async fn`s, so that each variant's future type is one match arm.
impl<C: Clock> Store for AnyStore<C> {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(store) => store.apply(ops, mode, out).await,
            AnyStore::Redis(store) => store.apply(ops, mode, out).await,
        }
    }

    fn try_apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Option<Result<(), StoreError>> {
        match self {
            AnyStore::Memory(store) => store.try_apply_now(ops, mode, out),
            AnyStore::Redis(store) => store.try_apply_now(ops, mode, out),
        }
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(store) => store.refund(key, limit, grant).await,
            AnyStore::Redis(store) => store.refund(key, limit, grant).await,
        }
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        match self {
            AnyStore::Memory(store) => store.reset(key).await,
            AnyStore::Redis(store) => store.reset(key).await,
        }
    }
}

impl<C: Clock> Records for AnyStore<C> {
    async fn adjust_once(
        &self,
        ops: &[Op<'_>],
        adjustment: floodgate::store::Adjustment<'_>,
        once: floodgate::store::Once<'_>,
    ) -> Result<bool, StoreError> {
        match self {
            AnyStore::Memory(store) => store.adjust_once(ops, adjustment, once).await,
            AnyStore::Redis(store) => store.adjust_once(ops, adjustment, once).await,
        }
    }

    async fn put_record(
        &self,
        id: &[u8],
        body: &[u8],
        ttl: std::time::Duration,
        kept: std::time::Duration,
    ) -> Result<floodgate::core::Timestamp, StoreError> {
        match self {
            AnyStore::Memory(store) => store.put_record(id, body, ttl, kept).await,
            AnyStore::Redis(store) => store.put_record(id, body, ttl, kept).await,
        }
    }

    async fn get_record(&self, id: &[u8]) -> Result<Option<floodgate::store::Record>, StoreError> {
        match self {
            AnyStore::Memory(store) => store.get_record(id).await,
            AnyStore::Redis(store) => store.get_record(id).await,
        }
    }

    async fn settle_record(
        &self,
        id: &[u8],
        settlement: &[u8],
    ) -> Result<floodgate::store::Settle, StoreError> {
        match self {
            AnyStore::Memory(store) => store.settle_record(id, settlement).await,
            AnyStore::Redis(store) => store.settle_record(id, settlement).await,
        }
    }
}
