//! The memory store's settings ([`MemoryConfig`]), and what it does with a new key once it is full
//! ([`OnFull`]).

use std::time::Duration;

use super::PersistConfig;

/// What the memory store does with a *new* key once it holds `max_keys` keys.
///
/// Live counters are never evicted to make room: evicting them would silently stop enforcing
/// their limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFull {
    /// Fail the request with [`StoreError::Full`](crate::StoreError::Full); each rule's
    /// store-failure policy (fail open or closed) decides what the client sees.
    Reject,
    /// Count each new key of a rule on one of the rule's `overflow_counters` shared counters,
    /// chosen by a hash of the key keyed at random per store (so clients cannot aim at one): a
    /// newcomer shares its limit with a small random group rather than with every other new key,
    /// until idle keys expire and make room. Each counter enforces the rule's own limit, so a key
    /// is never counted more loosely than alone; when room returns, a key moving into the table
    /// starts from its counter's state, not afresh.
    #[default]
    Aggregate,
}

/// Memory store settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryConfig {
    /// The most keys held at once (default 1 000 000).
    pub max_keys: usize,
    /// What to do with new keys when full (default [`OnFull::Aggregate`]).
    pub on_full: OnFull,
    /// The shared counters per rule that [`OnFull::Aggregate`] spreads new keys over (default
    /// 65 536; at least 1). A counter takes a table entry like a key, but is not counted in
    /// `max_keys`: it is created when a new key first lands on it and dropped by the sweeper
    /// once its state expires, so at most `overflow_counters` per rule are held.
    pub overflow_counters: usize,
    /// How often the background sweeper drops expired keys (default 10 s).
    pub sweep_interval: Duration,
    /// Where the store persists its state, if anywhere (default: nowhere; see
    /// [`MemoryStore::open`](super::MemoryStore::open), which opens it —
    /// [`MemoryStore::with_config`](super::MemoryStore::with_config) does not).
    pub persist: Option<PersistConfig>,
}

impl MemoryConfig {
    /// The most `overflow_counters` a rule may have: their number is written in 4 bytes of their
    /// keys, and 16 M counters (about 2 GB per rule) is beyond any sensible memory bound.
    pub const MAX_OVERFLOW_COUNTERS: usize = 1 << 24;
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_keys: 1_000_000,
            on_full: OnFull::Aggregate,
            overflow_counters: 65_536,
            sweep_interval: Duration::from_secs(10),
            persist: None,
        }
    }
}
