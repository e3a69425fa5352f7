//! What the store holds at a moment of a `flood` run: its keys, the memory they take, and the
//! server's overflow series.

use std::collections::BTreeMap;

use super::limitador::Limitador;
use crate::harness::LocalServer;
use crate::harness::metrics;
use crate::harness::process::resident_set;
use crate::harness::redis::{self, RedisServer};
use crate::harness::server::METRIC_KEYS as KEYS;

/// The limiter a run measures, where its counters are looked at.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Holder<'a> {
    /// The in-process server, on its memory store or on the Redis `node`.
    Floodgate(&'a LocalServer, Option<&'a RedisServer>),
    /// A `limitador-server` of this run.
    Limitador(&'a Limitador),
}

impl Holder<'_> {
    /// `floodgate memory`, `floodgate redis`, `limitador memory`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Holder::Floodgate(_, None) => "floodgate memory",
            Holder::Floodgate(_, Some(_)) => "floodgate redis",
            Holder::Limitador(_) => "limitador memory",
        }
    }

    /// Where [`Snapshot::keys`] is read: `floodgate_keys`, `dbsize` or `limitador_counters`.
    pub(crate) fn keys_from(&self) -> &'static str {
        match self {
            Holder::Floodgate(_, None) => "floodgate_keys",
            Holder::Floodgate(_, Some(_)) => "dbsize",
            Holder::Limitador(_) => "limitador_counters",
        }
    }

    /// Whose memory [`Snapshot::rss_bytes`] is: `bench_process` (the in-process server's) or
    /// `limitador_server`.
    pub(crate) fn rss_from(&self) -> &'static str {
        match self {
            Holder::Floodgate(..) => "bench_process",
            Holder::Limitador(_) => "limitador_server",
        }
    }
}

/// Decisions made on a memory store's overflow counters, on `/metrics` once the server exports
/// them (a server without the series reports none: an empty map, not an error).
pub(crate) const OVERFLOW_DECISIONS_TOTAL: &str = "floodgate_overflow_decisions_total";

/// One look at the store.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
    /// Keys held: `floodgate_keys` (memory store), `DBSIZE` (Redis), or limitador's live
    /// counters; `None` if unread.
    pub(crate) keys: Option<u64>,
    /// The resident memory (`VmRSS`) of this process (a Floodgate server runs in it), or of
    /// `limitador-server`, in bytes.
    pub(crate) rss_bytes: Option<u64>,
    /// Redis's `used_memory`, in bytes.
    pub(crate) redis_used_memory: Option<u64>,
    /// The memory store's own estimate of the bytes it holds (keys, slots, table overhead), read
    /// in process; `None` on another store.
    pub(crate) store_bytes: Option<u64>,
    /// The memory store's overflow counters held (not in `keys`).
    pub(crate) overflow_counters: Option<u64>,
    /// Each `floodgate_overflow_decisions_total` series: its labels (`{rule="…"}`, or empty) and
    /// value.
    pub(crate) overflow_decisions: BTreeMap<String, u64>,
}

/// Looks at the counters of `holder`.
pub(crate) async fn take(holder: Holder<'_>) -> Snapshot {
    let (server, node) = match holder {
        Holder::Floodgate(server, node) => (server, node),
        Holder::Limitador(limitador) => {
            let keys = limitador.counters().await;
            return Snapshot { keys, rss_bytes: limitador.rss_bytes(), ..Snapshot::default() };
        }
    };
    let page = server.scrape_metrics().await.unwrap_or_default();
    let (keys, redis_used_memory) = match node {
        None => (metrics::total(&page, KEYS).map(|keys| keys as u64), None),
        Some(node) => {
            let keys = redis::query(node, &["DBSIZE"]).and_then(|n| n.trim().parse().ok());
            let info = redis::query(node, &["INFO", "memory"]);
            (keys, info.as_deref().and_then(|info| info_field(info, "used_memory")))
        }
    };
    let overflow_decisions = metrics::series(&page, OVERFLOW_DECISIONS_TOTAL)
        .into_iter()
        .map(|(labels, v)| (labels, v as u64))
        .collect();
    let memory = server.memory_stats();
    Snapshot {
        keys,
        rss_bytes: resident_bytes(),
        redis_used_memory,
        store_bytes: memory.as_ref().map(|m| m.bytes_estimate as u64),
        overflow_counters: memory.as_ref().map(|m| m.overflow_counters as u64),
        overflow_decisions,
    }
}

/// A `name:value` field of a Redis `INFO` reply.
fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

/// This process's resident set size, from `/proc/self/status` (Linux).
fn resident_bytes() -> Option<u64> {
    resident_set("self")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::process::vm_rss;

    #[test]
    fn redis_info_and_the_resident_set_are_read_in_bytes() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nused_memory_rss:2000\r\n";
        assert_eq!(info_field(info, "used_memory"), Some(1_048_576));
        assert_eq!(info_field(info, "used_memory_peak"), None);
        assert_eq!(vm_rss("Name:\tfloodgate-bench\nVmRSS:\t   20480 kB\nRssAnon:\t 1 kB\n"), Some(20 << 20));
        assert_eq!(vm_rss("Name:\tx\n"), None);
        assert!(resident_bytes().is_some_and(|b| b > 0));
    }
}
