//! Configuration: Floodgate's native YAML and envoyproxy/ratelimit files, validated on load.
//!
//! INTERFACE CONTRACT (the server is written against these signatures; the bodies are being
//! implemented in this module).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use floodgate::Policy;
use floodgate::headers::HeaderStyle;

/// Which store to use, and its settings.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreConfig {
    /// The embedded memory store.
    Memory(floodgate::MemoryConfig),
    /// A single Redis node (the Redis store comes with its own crate).
    Redis {
        /// `redis://…` URL.
        url: String,
        /// Key prefix.
        prefix: String,
        /// The most a decision may wait for the store.
        deadline: Duration,
    },
    /// A Redis Cluster.
    RedisCluster {
        /// Seed node URLs.
        urls: Vec<String>,
        /// Key prefix.
        prefix: String,
        /// The most a decision may wait for the store.
        deadline: Duration,
    },
}

/// A loaded, validated configuration.
#[derive(Debug)]
pub struct Config {
    /// The store.
    pub store: StoreConfig,
    /// Which rate-limit headers to send.
    pub headers: HeaderStyle,
    /// The native rules (namespace-less), used for HTTP checks and for gRPC domains that no
    /// envoyproxy/ratelimit file defines.
    pub policy: Policy,
    /// Policies per Envoy domain (from envoyproxy/ratelimit files), each in its own namespace.
    pub domains: BTreeMap<String, Policy>,
    /// A fingerprint per rule (`domain/rule` or `rule` → hash of its definition), for audit diffs.
    pub fingerprints: BTreeMap<String, u64>,
    /// Where it came from.
    pub source: Source,
}

/// Where a configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The file or directory, or `None` for the built-in example or an admin-API body.
    pub path: Option<PathBuf>,
    /// The text(s) loaded, concatenated in load order (shown by the admin API).
    pub text: String,
    /// SHA-256-free content hash (FNV-1a 64 of `text`), hex.
    pub hash: String,
}

/// A configuration that cannot be used: what, where (file, line, column), which field, and the
/// offending value quoted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// The full human message, e.g.
    /// `floodgate.yaml:12:12: rules[1].rate: invalid rate "ten/s": expected N/unit ...`.
    pub message: String,
    /// The file, when there is one.
    pub file: Option<PathBuf>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The field path, e.g. `rules[1].rate`.
    pub field: Option<String>,
}

/// Loads `path`: a native YAML file, an envoyproxy/ratelimit YAML file (recognised by a top-level
/// `domain`), or a directory of such files (each envoyproxy file its own domain; at most one native
/// file). Only `*.yaml` / `*.yml` files of a directory are read, in name order.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    unimplemented!("config::load {path:?}")
}

/// Parses one configuration text (either format); `name` is used in error messages.
pub fn parse(name: &str, text: &str) -> Result<Config, ConfigError> {
    unimplemented!("config::parse {name} {text}")
}

/// The built-in example policy used when `floodgate serve` runs without `--config`.
pub fn builtin() -> Config {
    unimplemented!("config::builtin")
}
