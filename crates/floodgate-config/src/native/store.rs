//! `store:`: which store holds the counters, read into the stores' own settings types
//! ([`MemoryConfig`], [`RedisConfig`]) so that their defaults are the only defaults.

use std::time::Duration;

use floodgate::{MemoryConfig, OnFull};
use floodgate_redis::{HashTag, RedisConfig};

use super::descriptors::Vocabulary;
use crate::StoreConfig;
use crate::duration;
use crate::error::Invalid;
use crate::yaml::{Fields, Item, did_you_mean};

const STORE_FIELDS: &[&str] = &[
    "kind",
    "max_keys",
    "on_full",
    "sweep_interval",
    "url",
    "urls",
    "prefix",
    "deadline",
    "connect_timeout",
    "max_in_flight",
    "hash_tag",
];
const MEMORY_FIELDS: &[&str] = &["kind", "max_keys", "on_full", "sweep_interval"];
const REDIS_FIELDS: &[&str] = &["kind", "url", "prefix", "deadline", "connect_timeout", "max_in_flight"];
const CLUSTER_FIELDS: &[&str] =
    &["kind", "urls", "prefix", "deadline", "connect_timeout", "max_in_flight", "hash_tag"];

/// Validates the `store` section.
pub(crate) fn compile(item: Item<'_>, vocabulary: &Vocabulary) -> Result<StoreConfig, Invalid> {
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
    match kind {
        "memory" => memory(&fields).map(StoreConfig::Memory),
        "redis" => {
            let url = fields.require("url", "a Redis store needs url: redis://host:port")?;
            let config = RedisConfig::node(redis_url(url)?);
            redis(&fields, config, vocabulary).map(StoreConfig::Redis)
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
                .map(redis_url)
                .collect::<Result<Vec<_>, _>>()?;
            redis(&fields, RedisConfig::cluster(urls), vocabulary).map(StoreConfig::Redis)
        }
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
    if let Some(sweep) = fields.get("sweep_interval") {
        config.sweep_interval = positive_duration(sweep, "sweep_interval")?;
    }
    Ok(config)
}

/// The settings a Redis node and a cluster share, over `config`'s defaults.
fn redis(
    fields: &Fields<'_>,
    mut config: RedisConfig,
    vocabulary: &Vocabulary,
) -> Result<RedisConfig, Invalid> {
    if let Some(p) = fields.get("prefix") {
        let text = p.str("a key prefix")?;
        if text.is_empty() {
            return Err(p.error("prefix is empty: keys need a prefix so they cannot collide with other data"));
        }
        text.clone_into(&mut config.prefix);
    }
    if let Some(d) = fields.get("deadline") {
        config.deadline = positive_duration(d, "deadline")?;
    }
    if let Some(c) = fields.get("connect_timeout") {
        config.connect_timeout = positive_duration(c, "connect_timeout")?;
    }
    if let Some(m) = fields.get("max_in_flight") {
        let n = m.u64_at_least("max_in_flight", 1)?;
        config.max_in_flight = usize::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_IN_FLIGHT)
            .ok_or_else(|| m.error(format!("invalid max_in_flight {n}: at most {MAX_IN_FLIGHT}")))?;
    }
    if let Some(h) = fields.get("hash_tag") {
        config.hash_tag = match h.str("key, or a descriptor name")? {
            "key" => HashTag::Key,
            descriptor => {
                vocabulary.check(descriptor, h.clone())?;
                HashTag::Descriptor(descriptor.to_owned())
            }
        };
    }
    Ok(config)
}

/// The most calls in flight a store may be given (the semaphore's and the pipeline's size).
const MAX_IN_FLIGHT: usize = 1 << 20;

fn redis_url(item: Item<'_>) -> Result<String, Invalid> {
    let url = item.str("a Redis URL")?;
    let schemes = ["redis://", "rediss://", "redis+unix://", "unix://"];
    if !schemes.iter().any(|s| url.starts_with(s)) || url.len() <= url.find("//").map_or(0, |i| i + 2) {
        return Err(item.error(format!(
            "invalid Redis URL {url:?}: expected redis://host:port, rediss://host:port or unix:///path/to/socket"
        )));
    }
    Ok(url.to_owned())
}

/// A duration such as `60s`, longer than zero.
pub(crate) fn positive_duration(item: Item<'_>, what: &str) -> Result<Duration, Invalid> {
    let text = item.text(what)?;
    let d = duration::parse(&text)
        .map_err(|why| item.error(format!("invalid {what} {}: {why}", item.node.describe())))?;
    if d.is_zero() {
        return Err(item.error(format!("invalid {what} {}: must be longer than 0", item.node.describe())));
    }
    Ok(d)
}
