//! Surviving a Redis store (DESIGN §7): the task that keeps the local fallback's share current and
//! charges the store with what it admitted, and the logs of the breaker's changes.
//!
//! Every second, while the server runs on a Redis store:
//!
//! - with `instances: discover`, a heartbeat announces this instance in the store for
//!   [`HEARTBEAT_TTL`] and counts the live ones: the local shares follow the fleet as it scales.
//!   While the store fails, the last count stands (the instances that could reach it). A clean stop
//!   leaves the fleet at once.
//! - once the store answers again, what the local shares admitted meanwhile and still counts is
//!   charged to it ([`Fallback::replay`](floodgate::store::Fallback::replay)).
//! - decisions on local shares are logged when they start and when they stop, with how many were
//!   made: once per outage, not per request.
//!
//! Every [`LEASE_TICK`], the unspent units of ended prefetch leases go back to the store
//! ([`Prefetch::return_due`](floodgate::store::Prefetch::return_due)); after a reload, and at
//! the stop, every lease is returned ([`Prefetch::flush`](floodgate::store::Prefetch::flush)).

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use floodgate::store::{BreakerState, OnChange};
use floodgate_config::Instances;
use tokio::sync::watch;

use crate::{App, stopped};

/// How often the task runs.
pub const TICK: Duration = Duration::from_secs(1);
/// How often ended prefetch leases are returned to the store.
pub const LEASE_TICK: Duration = Duration::from_millis(100);
/// How long an instance counts as live after its last heartbeat.
pub const HEARTBEAT_TTL: Duration = Duration::from_secs(5);

/// Logs each change of the breaker's state, once.
pub fn breaker_log(store: &'static str) -> OnChange {
    Arc::new(move |state| match state {
        BreakerState::Open => tracing::warn!(
            event = "breaker",
            store,
            state = "open",
            "store breaker open: the store is not called for open_for; rules decide by on_store_error"
        ),
        BreakerState::HalfOpen => {
            tracing::info!(
                event = "breaker",
                store,
                state = "half_open",
                "store breaker half-open: one probe call"
            )
        }
        BreakerState::Closed => tracing::info!(
            event = "breaker",
            store,
            state = "closed",
            "store breaker closed: the store answers again"
        ),
    })
}

/// A name for this instance that no other shares: host, process and a random part (a restarted
/// process with the same pid is another member).
fn instance_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "floodgate".to_owned());
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    format!("{host}/{}/{random:016x}", std::process::id())
}

/// Runs until `stop`: heartbeats, replays, logs (see the module docs). Returns at once on the
/// memory store.
pub async fn run(app: App, mut stop: watch::Receiver<bool>) {
    let store = app.control().store().clone();
    let (Some(fallback), Some(redis), Some(prefetch)) = (store.fallback(), store.redis(), store.prefetch())
    else {
        return;
    };
    let kind = store.kind();
    let discover = app.control().current().survival.instances == Instances::Discover;
    let instance = instance_name();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leases = tokio::time::interval(LEASE_TICK);
    leases.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut version = app.control().current().version;
    let mut local_before = fallback.stats().local_decisions;
    let mut outage_from: Option<u64> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = leases.tick() => {
                let current = app.control().current().version;
                if current == version {
                    prefetch.return_due().await;
                } else {
                    version = current;
                    prefetch.flush().await;
                }
                continue;
            }
            () = stopped(&mut stop) => break,
        }
        // A cold store connects and loads its scripts before the first burst of decisions would
        // (each would otherwise pay for them within its deadline).
        if !redis.is_warm()
            && let Err(e) = redis.warm().await
        {
            tracing::debug!(store = kind, error = %e, "cannot connect to the store yet");
        }
        if discover {
            match redis.heartbeat(&instance, HEARTBEAT_TTL).await {
                Ok(live) if live != fallback.instances() => {
                    tracing::info!(
                        event = "fleet",
                        store = kind,
                        instances = live,
                        "fleet: local shares now computed for {live} instances"
                    );
                    fallback.set_instances(live);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(store = kind, error = %e, "fleet heartbeat failed; the last count stands")
                }
            }
        }
        let stats = fallback.stats();
        match outage_from {
            None if stats.local_decisions > local_before => {
                tracing::warn!(
                    event = "fallback",
                    store = kind,
                    state = "active",
                    instances = stats.instances,
                    "the store fails: rules with on_store_error local decide on this instance's share"
                );
                outage_from = Some(local_before);
            }
            Some(from) if !stats.degraded => {
                tracing::info!(
                    event = "fallback",
                    store = kind,
                    state = "inactive",
                    local_decisions = stats.local_decisions - from,
                    "the store answers again: back on it from local shares"
                );
                outage_from = None;
            }
            _ => {}
        }
        local_before = stats.local_decisions;
        if fallback.replay_due() {
            let replayed = fallback.replay().await;
            if replayed.keys > 0 || replayed.expired > 0 {
                tracing::info!(
                    event = "fallback_charged",
                    store = kind,
                    keys = replayed.keys,
                    units = replayed.units,
                    expired = replayed.expired,
                    left = replayed.left,
                    "charged the store with what local shares admitted"
                );
            }
        }
    }
    prefetch.flush().await;
    if discover && let Err(e) = redis.leave(&instance).await {
        tracing::debug!(store = kind, error = %e, "could not leave the fleet; the others stop counting this instance once its heartbeat expires");
    }
}
