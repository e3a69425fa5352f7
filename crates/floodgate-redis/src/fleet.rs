//! The fleet: instances sharing a store announce themselves in it, so that each can tell how many
//! share its limits (the local fallback's `instances: discover`).
//!
//! One sorted set, `<prefix>{fleet}` (a hash tag no limit key has: theirs are 8 hex digits), holds
//! each live instance with the time its announcement expires, on Redis's clock. A heartbeat adds or
//! refreshes its instance, drops those whose announcement expired, and counts the rest, in one
//! script; an instance that stops cleanly leaves at once, one that dies is gone once its
//! announcement expires. Heartbeats go on the readiness probe's connection, never taking a
//! decision's in-flight slot.

use std::sync::LazyLock;
use std::time::Duration;

use floodgate::StoreError;
use redis::Script;

use crate::RedisStore;
use crate::error::classify;

/// Announces ARGV[1] until now + ARGV[2] ms, forgets the expired, counts the live.
static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZCARD', KEYS[1])
",
    )
});

/// Removes ARGV[1].
static LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new("return redis.call('ZREM', KEYS[1], ARGV[1])"));

impl RedisStore {
    /// The key of the fleet's sorted set.
    pub fn fleet_key(&self) -> Vec<u8> {
        let mut key = self.prefix().to_vec();
        key.extend_from_slice(b"{fleet}");
        key
    }

    /// Announces `instance` (a name unique in the fleet) as live for `ttl`, and returns how many
    /// instances are live now, this one included, on Redis's clock.
    pub async fn heartbeat(&self, instance: &str, ttl: Duration) -> Result<u32, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let key = self.fleet_key();
        let mut invocation = HEARTBEAT.prepare_invoke();
        invocation.key(key.as_slice()).arg(instance).arg(ttl_ms);
        self.on_probe::<u32>(&invocation).await.map(|live| live.max(1))
    }

    /// Removes `instance` from the fleet (on a clean stop), so that the others' shares follow at once.
    pub async fn leave(&self, instance: &str) -> Result<(), StoreError> {
        let key = self.fleet_key();
        let mut invocation = LEAVE.prepare_invoke();
        invocation.key(key.as_slice()).arg(instance);
        self.on_probe::<i64>(&invocation).await.map(drop)
    }

    /// Runs `invocation` on the probe's connection, within its timeout.
    pub(crate) async fn on_probe<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let timeout = self.probe().timeout();
        match self.probe().run::<T>(invocation).await {
            Some(Ok(value)) => Ok(value),
            Some(Err(e)) => Err(classify(e, timeout)),
            None => Err(StoreError::Timeout(timeout)),
        }
    }
}
