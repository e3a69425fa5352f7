//! `store:`: which store holds the counters — the memory store, read into its own settings type
//! ([`MemoryConfig`]) so that its defaults are the only defaults, or a Redis node or cluster (its
//! connection settings read by [`redis`](super::redis), its survival here).

use floodgate::store::{Fsync, PersistConfig};
use floodgate::{MemoryConfig, OnFull};

use super::descriptors::Vocabulary;
use super::positive_duration;
use super::redis::{self, RedisTarget};
use crate::duration;
use crate::error::Invalid;
use crate::yaml::{Fields, Item, did_you_mean};
use crate::{Instances, StoreConfig, Survival};

const STORE_FIELDS: &[&str] = &[
    "kind",
    "max_keys",
    "on_full",
    "overflow_counters",
    "sweep_interval",
    "url",
    "urls",
    "prefix",
    "deadline",
    "connect_timeout",
    "max_in_flight",
    "hash_tag",
    "cross_slot",
    "tls",
    "breaker",
    "instances",
    "local_factor",
    "persist",
];
const MEMORY_FIELDS: &[&str] =
    &["kind", "max_keys", "on_full", "overflow_counters", "sweep_interval", "persist"];
const PERSIST_FIELDS: &[&str] = &["path", "fsync"];
const REDIS_FIELDS: &[&str] = &[
    "kind",
    "url",
    "prefix",
    "deadline",
    "connect_timeout",
    "max_in_flight",
    "tls",
    "breaker",
    "instances",
    "local_factor",
];
const CLUSTER_FIELDS: &[&str] = &[
    "kind",
    "urls",
    "prefix",
    "deadline",
    "connect_timeout",
    "max_in_flight",
    "hash_tag",
    "cross_slot",
    "tls",
    "breaker",
    "instances",
    "local_factor",
];
const BREAKER_FIELDS: &[&str] = &["failure_rate", "min_calls", "consecutive_failures", "window", "open_for"];

/// Validates the `store` section.
pub(crate) fn compile(item: Item<'_>, vocabulary: &Vocabulary) -> Result<(StoreConfig, Survival), Invalid> {
    let fields = item.fields("the store settings", Some(STORE_FIELDS))?;
    let kind = match fields.get("kind") {
        Some(k) => k.str("a store kind")?,
        None => "memory",
    };
    let allowed = match kind {
        "memory" => MEMORY_FIELDS,
        "redis" => REDIS_FIELDS,
        "redis_cluster" => CLUSTER_FIELDS,
        other => {
            let kinds = ["memory", "redis", "redis_cluster"];
            return Err(fields.get("kind").unwrap_or(item.clone()).error(format!(
                "unknown store kind {other:?}: expected memory, redis or redis_cluster{}",
                did_you_mean(other, kinds)
            )));
        }
    };
    for name in fields.names() {
        if !allowed.contains(&name)
            && let Some(key) = fields.key_item(name)
        {
            return Err(key.error(format!(
                "{name:?} does not apply to store kind {kind} (its settings: {})",
                allowed[1..].join(", ")
            )));
        }
    }
    let target = match kind {
        "memory" => return Ok((StoreConfig::Memory(memory(&fields)?), Survival::default())),
        "redis" => {
            let url = fields.require("url", "a Redis store needs url: redis://host:port")?;
            RedisTarget::Node(redis::url(url)?)
        }
        _ => {
            let urls =
                fields.require("urls", "a Redis Cluster store needs urls: [redis://host:port, ...]")?;
            if urls.seq("a list of Redis URLs")?.is_empty() {
                return Err(urls.error("urls is empty: list at least one seed node"));
            }
            let urls = urls
                .elements("a list of Redis URLs")?
                .into_iter()
                .map(redis::url)
                .collect::<Result<Vec<_>, _>>()?;
            RedisTarget::Cluster(urls)
        }
    };
    let store = redis::compile(&fields, target, vocabulary)?;
    let survival = survival(&fields)?;
    Ok((StoreConfig::Redis(store), survival))
}

/// The breaker and the local fallback's share of a Redis store.
fn survival(fields: &Fields<'_>) -> Result<Survival, Invalid> {
    let mut survival = Survival::default();
    if let Some(b) = fields.get("breaker") {
        let breaker = b.fields("the breaker settings", Some(BREAKER_FIELDS))?;
        if let Some(rate) = breaker.get("failure_rate") {
            survival.breaker.failure_rate = failure_rate(rate)?;
        }
        if let Some(min) = breaker.get("min_calls") {
            let n = min.u64_at_least("min_calls", 1)?;
            survival.breaker.min_calls = u32::try_from(n)
                .map_err(|_| min.error(format!("min_calls {n} is too large (at most {})", u32::MAX)))?;
        }
        if let Some(c) = breaker.get("consecutive_failures") {
            let n = c.u64_at_least("consecutive_failures", 1)?;
            survival.breaker.consecutive_failures = u32::try_from(n).map_err(|_| {
                c.error(format!("consecutive_failures {n} is too large (at most {})", u32::MAX))
            })?;
        }
        if let Some(w) = breaker.get("window") {
            survival.breaker.window = positive_duration(w, "window")?;
        }
        if let Some(o) = breaker.get("open_for") {
            survival.breaker.open_for = positive_duration(o, "open_for")?;
        }
    }
    if let Some(i) = fields.get("instances") {
        survival.instances = match i.number() {
            Some(_) => {
                let n = i.u64_at_least("instances", 1)?;
                Instances::Fixed(
                    u32::try_from(n)
                        .map_err(|_| i.error(format!("instances {n} is too large (at most {})", u32::MAX)))?,
                )
            }
            None => match i.str("a number of instances, or discover")? {
                "discover" => Instances::Discover,
                other => {
                    return Err(i.error(format!(
                        "invalid instances {other:?}: expected a number (instances: 3) or discover{}",
                        did_you_mean(other, ["discover"])
                    )));
                }
            },
        };
    }
    if let Some(f) = fields.get("local_factor") {
        survival.local_factor = match f.number().filter(|n| n.is_finite() && *n > 0.0) {
            Some(n) => n,
            None => {
                return Err(f.error(format!(
                    "invalid local_factor {}: expected a number above 0, e.g. local_factor: 2 (each \
                     instance's share is ceil(limit × local_factor / instances))",
                    f.node.describe()
                )));
            }
        };
    }
    Ok(survival)
}

/// A share of calls: `50%` (or `50`), above 0% and at most 100%.
fn failure_rate(item: Item<'_>) -> Result<f64, Invalid> {
    let percent = match item.number() {
        Some(n) => Some(n),
        None => item.str("a percentage").ok().and_then(|s| {
            let s = s.trim();
            s.strip_suffix('%').unwrap_or(s).trim().parse::<f64>().ok()
        }),
    };
    match percent.filter(|p| p.is_finite() && *p > 0.0 && *p <= 100.0) {
        Some(p) => Ok(p / 100.0),
        None => Err(item.error(format!(
            "invalid failure_rate {}: expected a percentage above 0% and at most 100%, e.g. failure_rate: 50%",
            item.node.describe()
        ))),
    }
}

fn memory(fields: &Fields<'_>) -> Result<MemoryConfig, Invalid> {
    let mut config = MemoryConfig::default();
    if let Some(max) = fields.get("max_keys") {
        let n = max.u64_at_least("max_keys", 1)?;
        config.max_keys = usize::try_from(n).map_err(|_| max.error(format!("max_keys {n} is too large")))?;
    }
    if let Some(on_full) = fields.get("on_full") {
        config.on_full = match on_full.str("aggregate or reject")? {
            "aggregate" => OnFull::Aggregate,
            "reject" => OnFull::Reject,
            other => {
                return Err(on_full.error(format!(
                    "unknown on_full {other:?}: expected aggregate or reject{}",
                    did_you_mean(other, ["aggregate", "reject"])
                )));
            }
        };
    }
    if let Some(counters) = fields.get("overflow_counters") {
        if config.on_full == OnFull::Reject {
            return Err(counters.error(
                "overflow_counters applies to on_full: aggregate only: with on_full: reject a full store refuses new keys",
            ));
        }
        let n = counters.u64_at_least("overflow_counters", 1)?;
        config.overflow_counters = usize::try_from(n)
            .ok()
            .filter(|n| *n <= MemoryConfig::MAX_OVERFLOW_COUNTERS)
            .ok_or_else(|| {
                counters.error(format!(
                    "overflow_counters {n} is too large: at most {} per rule",
                    MemoryConfig::MAX_OVERFLOW_COUNTERS
                ))
            })?;
    }
    if let Some(sweep) = fields.get("sweep_interval") {
        config.sweep_interval = positive_duration(sweep, "sweep_interval")?;
    }
    if let Some(p) = fields.get("persist") {
        config.persist = Some(persist(p)?);
    }
    Ok(config)
}

/// `persist: {path: DIR, fsync: always | <interval>}`: where the memory store keeps its state
/// across restarts. The path is relative to the working directory.
fn persist(item: Item<'_>) -> Result<PersistConfig, Invalid> {
    let fields = item.fields("the persistence settings (path, fsync)", Some(PERSIST_FIELDS))?;
    let path = fields.require("path", "persist needs path: the directory that keeps the store's state")?;
    let dir = path.str("a directory path")?;
    if dir.is_empty() {
        return Err(path.error("path is empty: give the directory that keeps the store's state"));
    }
    let fsync = match fields.get("fsync") {
        None => Fsync::Always,
        Some(f) => match &*f.text("always, or an interval such as 50ms")? {
            "always" => Fsync::Always,
            text => {
                let every = duration::parse(text).map_err(|why| {
                    f.error(format!(
                        "invalid fsync {}: expected always, or an interval such as 50ms ({why})",
                        f.node.describe()
                    ))
                })?;
                if every.is_zero() {
                    return Err(f.error("invalid fsync 0: an interval must be longer than 0 (or say always)"));
                }
                Fsync::Every(every)
            }
        },
    };
    Ok(PersistConfig { path: dir.into(), fsync })
}
