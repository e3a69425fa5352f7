//! [`RedisConfig`]: where the Redis store connects and how it behaves.

use std::time::Duration;

use crate::TlsConfig;

/// Which Redis the store talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One Redis node (or a primary behind a proxy): `redis://[user:password@]host:port[/db]`,
    /// `rediss://` for TLS (certificates in [`RedisConfig::tls`]), `redis+unix:///path` for a
    /// socket.
    Node(String),
    /// A Redis Cluster, found from any of these seed nodes (`redis://host:port` each, or all
    /// `rediss://host:port` for TLS).
    Cluster(Vec<String>),
}

/// Which part of a key picks its cluster slot.
///
/// Keys in one slot are applied by one atomic script call; a request whose keys span slots goes
/// slot by slot, given back on denial (see the crate docs). On a single node the tag changes
/// nothing but the key's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HashTag {
    /// The whole key: limits spread evenly over the cluster; a request with several limits usually
    /// spans slots.
    #[default]
    Key,
    /// The value of this descriptor, for keys made with it (`tenant`): every limit of one tenant
    /// lives in one slot, so a request's per-user, per-tenant and per-route-and-tenant limits stay
    /// in one atomic call. Keys without the descriptor fall back to [`HashTag::Key`].
    Descriptor(String),
}

/// How a check whose keys span cluster slots orders its calls (see the crate docs, "Redis
/// Cluster"). Either way each slot applies its keys all-or-nothing, the slots that admitted give
/// back when another denies, and the request never over-admits; the orders differ in what a
/// denied request charges in the meantime, and in round trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CrossSlot {
    /// The slots of keys that denied lately (a hint kept per key for the time the denial said to
    /// retry after, 50 ms to 1 min) are asked first; the other slots are only read, writing
    /// nothing, and are asked to consume once the first have admitted. A request that such a key
    /// denies charges nothing elsewhere, in one round trip; one that such a key admits takes two.
    /// Requests with no key denied lately go at once, as [`CrossSlot::AtOnce`].
    #[default]
    DeniedFirst,
    /// Every slot consumes at once, in one round trip; a denied request charges the slots that
    /// admitted until their give-back lands, a round trip later.
    AtOnce,
}

/// Redis store settings. Every field has a documented default; build with
/// [`RedisConfig::node`] or [`RedisConfig::cluster`] and adjust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// Where to connect (default `redis://127.0.0.1:6379`).
    pub target: Target,
    /// Prepended to every key (default `"floodgate"`, as the server's configuration); must not
    /// contain `{` or `}`. Instances, servers and libraries alike, share counters when they share
    /// the prefix.
    pub prefix: String,
    /// The longest a call may take, waiting for a free slot included; past it the call fails with
    /// [`StoreError::Timeout`](floodgate::StoreError::Timeout) and the rules' failure policies
    /// decide (default 50 ms: a healthy node or cluster under load on a small machine never missed
    /// it; 20 ms did, at 256 calls in flight — see BENCHMARKS.md, "The store deadline").
    pub deadline: Duration,
    /// The longest a connection attempt may take (default 1 s). Calls never wait for it longer
    /// than their deadline.
    pub connect_timeout: Duration,
    /// The most calls in flight at once per store; more wait (within their deadline) for one to
    /// finish (default 1024). Also the multiplexed connection's pipeline buffer.
    pub max_in_flight: usize,
    /// Which part of a key picks its cluster slot (default [`HashTag::Key`]).
    pub hash_tag: HashTag,
    /// How a check whose keys span cluster slots orders its calls (default
    /// [`CrossSlot::DeniedFirst`]).
    pub cross_slot: CrossSlot,
    /// The certificates of a TLS connection (default `None`: with a `rediss://` URL, the server is
    /// verified against the platform's trusted roots, and no client certificate is presented).
    /// Only for `rediss://` URLs: with any other, building the store fails.
    pub tls: Option<TlsConfig>,
}

impl RedisConfig {
    /// A single node at `url`, with the defaults.
    pub fn node(url: impl Into<String>) -> Self {
        RedisConfig { target: Target::Node(url.into()), ..RedisConfig::default() }
    }

    /// A cluster found from `seeds`, with the defaults.
    pub fn cluster<I, S>(seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisConfig {
            target: Target::Cluster(seeds.into_iter().map(Into::into).collect()),
            ..RedisConfig::default()
        }
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            target: Target::Node("redis://127.0.0.1:6379".into()),
            prefix: "floodgate".into(),
            deadline: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            max_in_flight: 1024,
            hash_tag: HashTag::Key,
            cross_slot: CrossSlot::DeniedFirst,
            tls: None,
        }
    }
}
