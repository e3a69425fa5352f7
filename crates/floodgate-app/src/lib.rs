//! Floodgate's service core: what every front door (the HTTP API, Envoy RLS, the gateway) stands
//! on. Today: the store assembly ([`store`]) — the store a [`floodgate_config::StoreConfig`]
//! describes, opened, a Redis store inside its breaker, local fallback and prefetch.
//!
//! ```
//! use floodgate_app::store::AnyStore;
//!
//! let config = floodgate_config::parse("floodgate.yaml", "store: {kind: memory, max_keys: 1000}\nrules: []\n")?;
//! let store = AnyStore::open(&config.store, &config.survival)?;
//! assert_eq!((store.kind(), store.keys()), ("memory", Some(0)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! No features.

pub mod store;
