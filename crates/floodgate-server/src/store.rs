//! [`ServerStore`]: the store the server runs on, chosen by the configuration's `store.kind`.
//!
//! One store is opened at start and shared by every engine (the native policy and each Envoy
//! domain), across reloads: counters live in the store, keyed by namespace, rule name and key
//! descriptors, so they outlive any one policy. Only the memory store exists in this build; the
//! Redis stores come with the `floodgate-redis` crate and will be one more variant here.

use floodgate::core::{Grant, SystemClock};
use floodgate::store::{Applied, Mode, Op};
use floodgate::{Limit, MemoryConfig, MemoryStore, Store, StoreError};

use crate::config::StoreConfig;

/// The configured store.
#[derive(Debug, Clone)]
pub enum ServerStore {
    /// The embedded memory store (its sweeper running).
    Memory(MemoryStore),
}

/// A store that cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenStoreError {
    /// The configuration asks for a store this build does not have yet.
    #[error("store kind {kind:?} is not available in this build yet: use `kind: memory`")]
    NotAvailable {
        /// `redis` or `redis_cluster`.
        kind: &'static str,
    },
}

impl ServerStore {
    /// Opens the store `config` describes.
    pub fn open(config: &StoreConfig) -> Result<ServerStore, OpenStoreError> {
        match config {
            StoreConfig::Memory(memory) => Ok(ServerStore::memory(memory.clone())),
            StoreConfig::Redis { .. } => Err(OpenStoreError::NotAvailable { kind: "redis" }),
            StoreConfig::RedisCluster { .. } => Err(OpenStoreError::NotAvailable { kind: "redis_cluster" }),
        }
    }

    /// A memory store with `config` on the process clock, its sweeper started.
    pub fn memory(config: MemoryConfig) -> ServerStore {
        let store = MemoryStore::with_config(config, SystemClock::new());
        store.start_sweeper();
        ServerStore::Memory(store)
    }

    /// The `store` label of the store metrics: `memory`.
    pub fn kind(&self) -> &'static str {
        match self {
            ServerStore::Memory(_) => "memory",
        }
    }

    /// How many keys the store holds, when it knows cheaply (for `floodgate_keys`).
    pub fn keys(&self) -> Option<usize> {
        match self {
            ServerStore::Memory(store) => Some(store.stats().keys),
        }
    }

    /// Whether decisions can be made (`/readyz`). The memory store always can.
    pub async fn ready(&self) -> bool {
        match self {
            ServerStore::Memory(_) => true,
        }
    }
}

// `async fn`s, so that a store variant with another future type (Redis) is one more match arm.
impl Store for ServerStore {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        match self {
            ServerStore::Memory(store) => store.apply(ops, mode, out).await,
        }
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        match self {
            ServerStore::Memory(store) => store.refund(key, limit, grant).await,
        }
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        match self {
            ServerStore::Memory(store) => store.reset(key).await,
        }
    }
}
