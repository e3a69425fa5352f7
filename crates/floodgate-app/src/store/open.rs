//! Opening the store a [`StoreConfig`] describes: the memory store, or a Redis store inside its
//! breaker, fallback and prefetch ([`guard`]).

use floodgate::core::Clock;
use floodgate::store::{Breaker, Fallback, FallbackConfig, OnChange, OnFallback, Prefetch};
use floodgate::{MemoryConfig, MemoryStore};
use floodgate_config::{Instances, StoreConfig, Survival};
use floodgate_redis::RedisStore;

use super::redis::{probed_within_deadline, redis_config};
use super::{AnyStore, Guarded, ServeClock};

/// Who to tell when a Redis store's breaker or fallback changes state (logs, metrics).
#[derive(Default, Clone)]
pub struct Hooks {
    /// Every change of the breaker's state.
    pub breaker: Option<OnChange>,
    /// The store starting (`true`) and stopping (`false`) to fail.
    pub fallback: Option<OnFallback>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("breaker", &self.breaker.is_some())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
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
    /// The memory store's persistence directory cannot be used (locked by another process,
    /// unreadable, or corrupt).
    #[error("{0}")]
    Persist(String),
    /// The Redis store needs a Tokio runtime to be opened in.
    #[error("store: the {kind} store must be opened within a Tokio runtime")]
    NoRuntime {
        /// `redis` or `redis_cluster`.
        kind: &'static str,
    },
}

impl AnyStore<ServeClock> {
    /// Opens the store `config` describes, on the process clock, a Redis store (with the settings
    /// [`redis_config`] gives) inside the breaker and fallback `survival` describes, a breaker's
    /// probe bounded by the store's deadline; memory stores' sweepers are started. A Redis store
    /// is not connected yet (see the module docs). Must be called within a Tokio runtime for the
    /// Redis kinds.
    pub fn open(config: &StoreConfig, survival: &Survival) -> Result<AnyStore, OpenError> {
        AnyStore::open_with(config, survival, Hooks::default())
    }

    /// [`AnyStore::open`], telling `hooks` of the breaker's and the fallback's changes.
    pub fn open_with(config: &StoreConfig, survival: &Survival, hooks: Hooks) -> Result<AnyStore, OpenError> {
        AnyStore::open_on(config, survival, hooks, ServeClock::system())
    }

    /// [`AnyStore::open_with`] on `clock`: a [manual clock](ServeClock::Manual) for the memory
    /// store only (a Redis store keeps Redis's time).
    pub fn open_on(
        config: &StoreConfig,
        survival: &Survival,
        hooks: Hooks,
        clock: ServeClock,
    ) -> Result<AnyStore, OpenError> {
        if clock.as_manual().is_some() && !matches!(config, StoreConfig::Memory(_)) {
            return Err(OpenError::Invalid {
                kind: config.kind(),
                message: "a manual clock (--manual-clock) is for the memory store: Redis keeps its own time"
                    .into(),
            });
        }
        match config {
            StoreConfig::Memory(memory) => {
                let (store, _) = MemoryStore::open(memory.clone(), clock)
                    .map_err(|e| OpenError::Persist(e.to_string()))?;
                store.start_sweeper();
                Ok(AnyStore::Memory(store))
            }
            StoreConfig::Redis(redis) => {
                let kind = config.kind();
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(OpenError::NoRuntime { kind });
                }
                let redis = redis_config(redis);
                let survival = probed_within_deadline(survival, &redis);
                let store = RedisStore::connect_lazy(redis)
                    .map_err(|e| OpenError::Invalid { kind, message: e.to_string() })?;
                let local = MemoryStore::with_config(MemoryConfig::default(), clock.clone());
                local.start_sweeper();
                Ok(AnyStore::Redis(guard(store, &survival, local, clock, hooks)))
            }
        }
    }
}

/// `store` inside the breaker and the fallback `survival` describes, inside prefetch.
pub fn guard<C: Clock + Clone>(
    store: RedisStore,
    survival: &Survival,
    local: MemoryStore<C>,
    clock: C,
    hooks: Hooks,
) -> Guarded<C> {
    let breaker = match hooks.breaker {
        Some(on_change) => Breaker::on_change(store, survival.breaker.clone(), clock.clone(), on_change),
        None => Breaker::with_clock(store, survival.breaker.clone(), clock.clone()),
    };
    let instances = match survival.instances {
        Instances::Fixed(n) => n,
        Instances::Discover => 1,
    };
    let config =
        FallbackConfig { local_factor: survival.local_factor, instances, ..FallbackConfig::default() };
    let fallback = match hooks.fallback {
        Some(on_change) => Fallback::on_change(breaker, local, config, on_change),
        None => Fallback::new(breaker, local, config),
    };
    Prefetch::new(fallback, clock)
}
