//! [`AnyStore`]: the store a [`StoreConfig`] describes, opened — the memory store, or a Redis node
//! or cluster — as one [`Store`], with its readiness and key count. The server and
//! `floodgate-bench` open their stores here, so both run on the same thing.
//!
//! A Redis store is opened without connecting: it connects on first use and reconnects by itself,
//! so a process can start while Redis is down ([`AnyStore::ready`] tells when it answers). Only an
//! invalid configuration (a URL the `redis` crate refuses, a prefix with `{` or `}`) fails
//! [`AnyStore::open`].

use floodgate::core::{Clock, Grant, SystemClock};
use floodgate::store::{Applied, Mode, Op};
use floodgate::{Limit, MemoryConfig, MemoryStore, Store, StoreError};
use floodgate_redis::{Readiness, RedisStore};

use crate::StoreConfig;

/// The configured store. Cheap to clone (clones share the store).
#[derive(Debug, Clone)]
pub enum AnyStore<C: Clock = SystemClock> {
    /// The embedded memory store.
    Memory(MemoryStore<C>),
    /// A Redis node or a Redis Cluster.
    Redis(RedisStore),
}

/// A store that cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The store's configuration is refused (a bad URL, a prefix with `{` or `}`).
    #[error("store: invalid {kind} configuration: {message}")]
    Invalid {
        /// `redis` or `redis_cluster`.
        kind: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The Redis store needs a Tokio runtime to be opened in.
    #[error("store: the {kind} store must be opened within a Tokio runtime")]
    NoRuntime {
        /// `redis` or `redis_cluster`.
        kind: &'static str,
    },
}

impl AnyStore<SystemClock> {
    /// Opens the store `config` describes, on the process clock; a memory store's sweeper is
    /// started. A Redis store is not connected yet (see the module docs). Must be called within a
    /// Tokio runtime for the Redis kinds.
    pub fn open(config: &StoreConfig) -> Result<AnyStore, OpenError> {
        match config {
            StoreConfig::Memory(memory) => {
                let store = MemoryStore::with_config(memory.clone(), SystemClock::new());
                store.start_sweeper();
                Ok(AnyStore::Memory(store))
            }
            StoreConfig::Redis(redis) => {
                let kind = config.kind();
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(OpenError::NoRuntime { kind });
                }
                let store = RedisStore::connect_lazy(redis.clone())
                    .map_err(|e| OpenError::Invalid { kind, message: e.to_string() })?;
                Ok(AnyStore::Redis(store))
            }
        }
    }
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
            AnyStore::Redis(store) if store.is_cluster() => "redis_cluster",
            AnyStore::Redis(_) => "redis",
        }
    }

    /// Whether [`AnyStore::keys`] can answer (whether `floodgate_keys` is exported).
    pub fn counts_keys(&self) -> bool {
        matches!(self, AnyStore::Memory(_))
    }

    /// How many keys the store holds, when it knows cheaply (for `floodgate_keys`): the memory
    /// store does; Redis is not asked (counting would mean `DBSIZE`, which counts other data too, or
    /// a `SCAN` on every scrape).
    pub fn keys(&self) -> Option<usize> {
        match self {
            AnyStore::Memory(store) => Some(store.stats().keys),
            AnyStore::Redis(_) => None,
        }
    }

    /// Whether the store can decide now: the memory store always can; Redis when it answers
    /// `PING` ([`RedisStore::ready`]: cached for a second, on a connection of its own).
    pub async fn ready(&self) -> Readiness {
        match self {
            AnyStore::Memory(_) => Readiness::Ready,
            AnyStore::Redis(store) => store.ready().await,
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
