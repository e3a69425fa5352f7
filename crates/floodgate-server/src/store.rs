//! [`ServerStore`]: the store the server runs on, chosen by the configuration's `store.kind`.
//!
//! One store is opened at start and shared by every engine (the native policy and each Envoy
//! domain), across reloads: counters live in the store, keyed by namespace, rule name and key
//! descriptors, so they outlive any one policy. A change of the `store` section is refused on
//! reload: it takes a restart.
//!
//! # The Redis stores (`kind: redis`, `kind: redis_cluster`)
//!
//! - **Start without Redis.** The store is built with
//!   [`RedisStore::connect_lazy`](floodgate_redis::RedisStore::connect_lazy): the server starts and
//!   serves even when Redis is unreachable, connects on the first decision and reconnects by itself
//!   after failures. Only an invalid store configuration (a URL the `redis` crate refuses, a prefix
//!   with `{` or `}`) stops the start (exit 64). Until Redis answers, `/readyz` answers 503 and every
//!   decision follows its rules' `on_store_error`.
//! - **Decisions while Redis fails** (down, or slower than `deadline`) follow each rule's
//!   `on_store_error`: `fail_open` allows (`error_allowed`), `fail_closed` denies with
//!   `Retry-After: 1` (`error_denied`); `local` behaves as `fail_open` until the local fallback lands.
//!   Every such decision counts one `floodgate_store_errors_total{store="redis"}` (or
//!   `redis_cluster`).
//! - **Readiness** ([`ServerStore::ready`]): a `PING` on a connection of its own (on a cluster, to
//!   every master), answered within the store's `deadline` (at least [`PROBE_TIMEOUT_FLOOR`], so
//!   that a probe that has to reconnect does not flap), its answer cached for [`PROBE_CACHE`]. Not
//!   ready while Redis does not answer, whatever the rules' `on_store_error`: no local fallback exists
//!   yet, and a load balancer should prefer an instance that can reach the store (a `fail_open`
//!   answer is no decision). Ready again by itself once Redis answers.
//! - **`floodgate_keys`** is not exported for Redis: counting keys would mean `DBSIZE` on every node
//!   (which counts other applications' keys too) or a `SCAN` of the prefix, on every scrape of every
//!   instance. Redis's own `INFO keyspace` (e.g. through redis_exporter) tells it.

use std::sync::Arc;
use std::time::Duration;

use floodgate::core::{Grant, SystemClock};
use floodgate::store::{Applied, Mode, Op};
use floodgate::{Limit, MemoryConfig, MemoryStore, Store, StoreError};
use floodgate_redis::{RedisConfig, RedisStore};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;

use crate::config::StoreConfig;

/// How long a readiness answer about Redis is reused.
pub const PROBE_CACHE: Duration = Duration::from_secs(1);
/// The least time a readiness `PING` is given, whatever the store's deadline.
pub const PROBE_TIMEOUT_FLOOR: Duration = Duration::from_millis(100);

/// The configured store.
#[derive(Debug, Clone)]
pub enum ServerStore {
    /// The embedded memory store (its sweeper running).
    Memory(MemoryStore),
    /// A Redis node or a Redis Cluster, with the readiness probe's own connection.
    Redis {
        /// The store.
        store: RedisStore,
        /// `PING`, cached (see the module docs).
        probe: Arc<Probe>,
    },
}

/// A store that cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenStoreError {
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

impl ServerStore {
    /// Opens the store `config` describes. A Redis store is not connected yet (see the module
    /// docs): this fails only on an invalid configuration. Must be called within a Tokio runtime
    /// for the Redis kinds.
    pub fn open(config: &StoreConfig) -> Result<ServerStore, OpenStoreError> {
        let (kind, redis, deadline) = match config {
            StoreConfig::Memory(memory) => return Ok(ServerStore::memory(memory.clone())),
            StoreConfig::Redis { url, prefix, deadline } => {
                let mut c = RedisConfig::node(url.as_str());
                c.prefix.clone_from(prefix);
                c.deadline = *deadline;
                ("redis", c, *deadline)
            }
            StoreConfig::RedisCluster { urls, prefix, deadline } => {
                let mut c = RedisConfig::cluster(urls.iter().map(String::as_str));
                c.prefix.clone_from(prefix);
                c.deadline = *deadline;
                ("redis_cluster", c, *deadline)
            }
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(OpenStoreError::NoRuntime { kind });
        }
        let invalid = |message: String| OpenStoreError::Invalid { kind, message };
        let probe = Probe::new(&redis, deadline.max(PROBE_TIMEOUT_FLOOR)).map_err(invalid)?;
        let store = RedisStore::connect_lazy(redis).map_err(|e| invalid(e.to_string()))?;
        Ok(ServerStore::Redis { store, probe: Arc::new(probe) })
    }

    /// A memory store with `config` on the process clock, its sweeper started.
    pub fn memory(config: MemoryConfig) -> ServerStore {
        let store = MemoryStore::with_config(config, SystemClock::new());
        store.start_sweeper();
        ServerStore::Memory(store)
    }

    /// The `store` label of the store metrics: `memory`, `redis` or `redis_cluster`.
    pub fn kind(&self) -> &'static str {
        match self {
            ServerStore::Memory(_) => "memory",
            ServerStore::Redis { store, .. } if store.is_cluster() => "redis_cluster",
            ServerStore::Redis { .. } => "redis",
        }
    }

    /// Whether [`ServerStore::keys`] can answer (whether `floodgate_keys` is exported).
    pub fn counts_keys(&self) -> bool {
        matches!(self, ServerStore::Memory(_))
    }

    /// How many keys the store holds, when it knows cheaply (for `floodgate_keys`): the memory
    /// store does; Redis is not asked (see the module docs).
    pub fn keys(&self) -> Option<usize> {
        match self {
            ServerStore::Memory(store) => Some(store.stats().keys),
            ServerStore::Redis { .. } => None,
        }
    }

    /// Whether decisions can be made (`/readyz`). The memory store always can; Redis when it
    /// answers `PING` (cached for [`PROBE_CACHE`]).
    pub async fn ready(&self) -> bool {
        match self {
            ServerStore::Memory(_) => true,
            ServerStore::Redis { probe, .. } => probe.ready(self.kind()).await,
        }
    }
}

/// The readiness probe of a Redis store: its own connection, so that probing never takes one of
/// the store's in-flight slots, and the last answer.
pub struct Probe {
    conn: ProbeConn,
    timeout: Duration,
    /// When the last answer was had, and what it was; the lock also makes concurrent probes wait
    /// for one `PING` rather than each sending their own.
    last: tokio::sync::Mutex<Option<(tokio::time::Instant, bool)>>,
}

#[derive(Clone)]
enum ProbeConn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("cluster", &matches!(self.conn, ProbeConn::Cluster(_)))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Probe {
    /// A probe of `config`'s Redis, not connected yet; every `PING` gets `timeout`.
    fn new(config: &RedisConfig, timeout: Duration) -> Result<Probe, String> {
        let bad = |e: redis::RedisError| e.to_string();
        let conn = match &config.target {
            floodgate_redis::Target::Node(url) => {
                let client = redis::Client::open(url.as_str()).map_err(bad)?;
                let manager = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(0)
                    .set_min_delay(Duration::from_millis(10))
                    .set_max_delay(Duration::from_millis(500));
                ProbeConn::Node(ConnectionManager::new_lazy_with_config(client, manager).map_err(bad)?)
            }
            floodgate_redis::Target::Cluster(seeds) => {
                let client = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(0)
                    .build()
                    .map_err(bad)?;
                let cluster =
                    ClusterConfig::new().set_connection_timeout(timeout).set_response_timeout(timeout);
                ProbeConn::Cluster(client.get_pending_async_connection_with_config(cluster))
            }
        };
        Ok(Probe { conn, timeout, last: tokio::sync::Mutex::new(None) })
    }

    /// Whether Redis answered `PING` (every master of a cluster) within the timeout, as of at most
    /// [`PROBE_CACHE`] ago. Logs each change.
    async fn ready(&self, kind: &'static str) -> bool {
        let mut last = self.last.lock().await;
        let now = tokio::time::Instant::now();
        if let Some((at, ready)) = *last
            && now.duration_since(at) < PROBE_CACHE
        {
            return ready;
        }
        let result = tokio::time::timeout(self.timeout, self.ping()).await;
        let ready = matches!(result, Ok(Ok(())));
        let was = last.map(|(_, r)| r);
        if was != Some(ready) {
            match (&result, ready) {
                (_, true) => tracing::info!(store = kind, "store reachable: ready"),
                (Ok(Err(e)), false) => {
                    tracing::warn!(store = kind, error = %e, "store unreachable: not ready (rules follow on_store_error)");
                }
                (_, false) => tracing::warn!(
                    store = kind,
                    timeout = ?self.timeout,
                    "store did not answer PING in time: not ready (rules follow on_store_error)"
                ),
            }
        }
        *last = Some((tokio::time::Instant::now(), ready));
        ready
    }

    async fn ping(&self) -> redis::RedisResult<()> {
        let ping = redis::cmd("PING");
        match self.conn.clone() {
            ProbeConn::Node(mut c) => ping.query_async::<()>(&mut c).await,
            ProbeConn::Cluster(mut c) => ping.query_async::<()>(&mut c).await,
        }
    }
}

// `async fn`s, so that each variant's future type is one match arm.
impl Store for ServerStore {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        match self {
            ServerStore::Memory(store) => store.apply(ops, mode, out).await,
            ServerStore::Redis { store, .. } => store.apply(ops, mode, out).await,
        }
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        match self {
            ServerStore::Memory(store) => store.refund(key, limit, grant).await,
            ServerStore::Redis { store, .. } => store.refund(key, limit, grant).await,
        }
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        match self {
            ServerStore::Memory(store) => store.reset(key).await,
            ServerStore::Redis { store, .. } => store.reset(key).await,
        }
    }
}
