//! [`Metrics`]: the server's Prometheus series, rendered on its own `GET /metrics`.
//!
//! Each [`App`](crate::App) owns one Prometheus recorder (from `metrics-exporter-prometheus`, built
//! without its HTTP listener) and records into it through handles registered once — per rule and
//! outcome when a configuration is applied, indexed by the rule's position in its policy, so a
//! decision records with no lookup by string, no lock and no allocation. Decisions reach them
//! through the decision path's metrics observer (`decide.rs`); this module only keeps the handles. Several apps in one process (tests) never mix their series. The `floodgate` binary
//! also installs its app's recorder as the process's global `metrics` recorder
//! ([`Metrics::install_global`]), so that series recorded through the `metrics` facade by library
//! crates (stores) appear on the same page.
//!
//! Series (labels are bounded: rule names and fixed words, never keys or client addresses):
//!
//! | series | type | labels |
//! |---|---|---|
//! | `floodgate_decisions_total` | counter | `rule`, `result` = `allowed`, `denied`, `shadow_denied`, `tagged`, `error_allowed`, `error_denied`, `local_allowed`, `local_denied` |
//! | `floodgate_decision_duration_seconds` | histogram (10 µs … 1 s): one request, all its descriptor sets | — |
//! | `floodgate_store_errors_total` | counter | `store` |
//! | `floodgate_fallback_active` | gauge (0/1): 1 while the store fails, for the rules with `on_store_error: local` | `rule` |
//! | `floodgate_store_breaker_state` | gauge: 0 closed, 1 open, 2 half-open (Redis stores) | `store` |
//! | `floodgate_fallback_instances` | gauge: the instances local shares are computed for (Redis stores) | `store` |
//! | `floodgate_prefetch_decisions_total` | counter: checks decided from a `prefetch` lease (`source` = `lease`: a batch taken earlier, or a denial remembered), and the calls that went to the store for checks no lease decided, of any rule (`source` = `store`; near the limit a prefetch check may make two) (Redis stores) | `store`, `source` |
//! | `floodgate_prefetch_units_total` | counter: unspent leased units, by `outcome` = `returned` (refunded to the store) or `expired` (their window ended first) (Redis stores) | `store`, `outcome` |
//! | `floodgate_fallback_units_total` | counter: units admitted locally, by `outcome` = `charged` (to the store, on recovery), `expired`, `dropped` (Redis stores) | `store`, `outcome` |
//! | `floodgate_store_give_backs_total` | counter: what a check across Redis Cluster slots took in the slots that admitted, given back because another slot denied or failed, by `result` = `started`, `retried` (a first attempt failed), `landed`, `lost` (never landed: stays charged until it replenishes) (Redis Cluster stores) | `store`, `result` |
//! | `floodgate_keys` | gauge, read from the store on each scrape (memory store only: Redis is not scanned) | `store` |
//! | `floodgate_keys_fill_ratio` | gauge: `floodgate_keys` / `max_keys` (memory store) | `store` |
//! | `floodgate_overflow_counters` | gauge: overflow counters held, over all rules (memory store; not in `floodgate_keys`) | `store` |
//! | `floodgate_overflow_decisions_total` | counter: requests of new keys decided on their rule's overflow counters because the memory store was full (from the first overflow of a rule on) | `rule` |
//! | `floodgate_config_version` | gauge | — |
//! | `floodgate_config_reloads_total` | counter | `result` = `applied`, `rejected` |
//! | `floodgate_requests_total` | counter | `api` = `check`, `peek`, `report`, `grpc`; `code` = HTTP status or `OK`/`OVER_LIMIT`/`UNAUTHENTICATED`/`PERMISSION_DENIED`; `client` = a configured `auth` client's name, or `anonymous` (no client identified) |
//! | `floodgate_decisions_detailed_total` | counter, Envoy rules with `detailed_metric` or `value_to_metric` only | `rule`, `value` (at most 100 per rule, then `_other`), `result` |
//! | `floodgate_reservations_total` | counter: reservations, from a rule's first on ([`reservations`]) | `rule`, `result` = `granted`, `refused`, `committed`, `released`, `expired`, `late` |
//! | `floodgate_reservation_units_total` | counter: the same in units of the rule's cost (or permits) | `rule`, `result` |
//!
//! The RLQS series (`floodgate_rlqs_*`) are listed in [`rlqs`].
//!
//! Rules of an Envoy domain are labelled `<domain>/<rule>`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use self::sharded::Sharded;

pub mod reservations;
pub mod rlqs;
pub mod sharded;

use self::reservations::Reservations;
pub use self::reservations::{
    RESERVATION_UNITS_TOTAL, RESERVATIONS_TOTAL, ReservationResult, RuleReservations,
};
pub use self::rlqs::RlqsSeries;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Weak;

use floodgate::store::{BreakerState, FallbackStats, MemoryStats, OverflowStats, PrefetchStats};
use floodgate::{Descriptors, Hit, OnStoreError, Outcome, Rule, Verdict};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

/// `floodgate_decisions_total`.
pub const DECISIONS_TOTAL: &str = "floodgate_decisions_total";
/// `floodgate_decision_duration_seconds`.
pub const DECISION_DURATION_SECONDS: &str = "floodgate_decision_duration_seconds";
/// `floodgate_store_errors_total`.
pub const STORE_ERRORS_TOTAL: &str = "floodgate_store_errors_total";
/// `floodgate_fallback_active`.
pub const FALLBACK_ACTIVE: &str = "floodgate_fallback_active";
/// `floodgate_keys`.
pub const KEYS: &str = "floodgate_keys";
/// `floodgate_keys_fill_ratio`.
pub const KEYS_FILL_RATIO: &str = "floodgate_keys_fill_ratio";
/// `floodgate_overflow_counters`.
pub const OVERFLOW_COUNTERS: &str = "floodgate_overflow_counters";
/// `floodgate_overflow_decisions_total`.
pub const OVERFLOW_DECISIONS_TOTAL: &str = "floodgate_overflow_decisions_total";
/// `floodgate_store_breaker_state`.
pub const BREAKER_STATE: &str = "floodgate_store_breaker_state";
/// `floodgate_fallback_instances`.
pub const FALLBACK_INSTANCES: &str = "floodgate_fallback_instances";
/// `floodgate_fallback_units_total`.
pub const FALLBACK_UNITS_TOTAL: &str = "floodgate_fallback_units_total";
/// `floodgate_prefetch_decisions_total`.
pub const PREFETCH_DECISIONS_TOTAL: &str = "floodgate_prefetch_decisions_total";
/// `floodgate_prefetch_units_total`.
pub const PREFETCH_UNITS_TOTAL: &str = "floodgate_prefetch_units_total";
/// `floodgate_store_give_backs_total`.
pub const GIVE_BACKS_TOTAL: &str = "floodgate_store_give_backs_total";
/// `floodgate_config_version`.
pub const CONFIG_VERSION: &str = "floodgate_config_version";
/// `floodgate_config_reloads_total`.
pub const CONFIG_RELOADS_TOTAL: &str = "floodgate_config_reloads_total";
/// `floodgate_requests_total`.
pub const REQUESTS_TOTAL: &str = "floodgate_requests_total";
/// `floodgate_decisions_detailed_total`.
pub const DECISIONS_DETAILED_TOTAL: &str = "floodgate_decisions_detailed_total";

/// `floodgate_gateway_upstream_duration_seconds`: the gateway's upstream calls (the gateway
/// registers its series; see `gateway/metrics.rs`).
pub const GATEWAY_UPSTREAM_DURATION_SECONDS: &str = "floodgate_gateway_upstream_duration_seconds";

/// The upper bounds of the gateway's upstream latency histogram, in seconds: 1 ms to 120 s.
pub const GATEWAY_UPSTREAM_BUCKETS: [f64; 14] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 120.0];

/// The help text of `floodgate_decision_duration_seconds`.
const DURATION_HELP: &str =
    "Time to decide one request (all its descriptor sets, one store call), in seconds.";

/// The upper bounds of the decision latency histogram, in seconds: 10 µs to 1 s.
pub const DURATION_BUCKETS: [f64; 16] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0,
];

/// Every outcome, in the order of [`outcome_index`].
const OUTCOMES: [Outcome; 8] = Outcome::ALL;

/// A rule's `rule` label: its name, or `<domain>/<name>` for a rule of an Envoy domain.
fn rule_label(domain: Option<&str>, rule: &str) -> String {
    match domain {
        Some(domain) => format!("{domain}/{rule}"),
        None => rule.to_owned(),
    }
}

fn outcome_index(outcome: Outcome) -> usize {
    // Outcomes number from 0 in declaration order, the order of `Outcome::ALL`.
    outcome as usize
}

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// The server's metrics: a Prometheus recorder and the handles the server records through.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
    store: &'static str,
    /// `floodgate_decision_duration_seconds`: counts per bucket (the last one `+Inf`), then the
    /// sum in nanoseconds. Rendered here rather than by the exporter, whose histograms take every
    /// sample through one shared atomic.
    decision_duration: Arc<Sharded>,
    store_errors: Counter,
    /// `None` when the store does not count its keys cheaply (Redis): no series at all, rather
    /// than a misleading 0.
    keys: Option<Gauge>,
    /// `floodgate_keys_fill_ratio` and `floodgate_overflow_counters`, with `keys`.
    fill_ratio: Option<Gauge>,
    overflow_counters: Option<Gauge>,
    config_version: Gauge,
    reloads_applied: Counter,
    reloads_rejected: Counter,
    /// `floodgate_requests_total` of requests without a client (`client="anonymous"`).
    anonymous: Arc<ClientRequests>,
    /// `floodgate_requests_total` of every `auth` client ever configured, by name: bounded by
    /// the configurations applied, and kept across reloads so a client's counts go on.
    clients: Mutex<Vec<Arc<ClientRequests>>>,
    /// The decision counters of every policy still alive, flushed into their series on scrape.
    rule_metrics: Mutex<Vec<Weak<RuleCounts>>>,
    /// A Redis store's breaker and fallback series, registered on the first scrape that has them.
    survival: OnceLock<SurvivalSeries>,
    /// `floodgate_store_give_backs_total` by result: started, retried, landed, lost.
    give_backs: OnceLock<[Counter; 4]>,
    /// The reservation series of every rule named so far.
    reservations: Reservations,
    /// The RLQS series.
    rlqs: RlqsSeries,
}

struct SurvivalSeries {
    breaker: Gauge,
    instances: Gauge,
    charged: Counter,
    expired: Counter,
    dropped: Counter,
    prefetch_store: Counter,
    prefetch_lease: Counter,
    prefetch_returned: Counter,
    prefetch_expired: Counter,
}

/// What the store says of itself on a scrape.
#[derive(Debug, Clone, Default)]
pub struct StoreStatus {
    /// The memory store's counts.
    pub memory: Option<MemoryStats>,
    /// The rules whose new keys overflowed (the memory store).
    pub overflow: Vec<OverflowStats>,
    /// A Redis store's breaker.
    pub breaker: Option<BreakerState>,
    /// A Redis store's fallback.
    pub fallback: Option<FallbackStats>,
    /// A Redis store's prefetch leases.
    pub prefetch: Option<PrefetchStats>,
    /// A Redis Cluster store's give-backs across slots.
    pub give_backs: Option<floodgate_redis::GiveBacks>,
}

/// The front doors counted in `floodgate_requests_total{api}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/check`.
    Check,
    /// `POST /v1/peek`.
    Peek,
    /// `POST /v1/report`.
    Report,
    /// Envoy RLS `ShouldRateLimit`.
    Grpc,
    /// The gateway (counted in `floodgate_gateway_requests_total`, not here).
    Gateway,
}

/// Every [`Api`], in declaration order (their `api` labels).
const APIS: [&str; 5] = ["check", "peek", "report", "grpc", "gateway"];

impl Api {
    /// The `api` label.
    pub fn label(self) -> &'static str {
        APIS[self as usize]
    }
}

/// The `code` labels: the HTTP statuses the API answers with (`other` for any other), then the
/// gRPC overall codes and refusals.
const CODES: [&str; 18] = [
    "200",
    "400",
    "401",
    "403",
    "404",
    "405",
    "409",
    "413",
    "415",
    "422",
    "429",
    "500",
    "503",
    "other",
    "OK",
    "OVER_LIMIT",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
];

/// The gRPC answers counted in `floodgate_requests_total{api="grpc"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcCode {
    /// `OK`.
    Ok = 14,
    /// `OVER_LIMIT`.
    OverLimit = 15,
    /// The `UNAUTHENTICATED` status: no token, or an unknown one.
    Unauthenticated = 16,
    /// The `PERMISSION_DENIED` status: a client without the scope, or a pinned descriptor.
    PermissionDenied = 17,
}

/// One client's `floodgate_requests_total`, by [`Api`] and code: counted sharded, and the series
/// registered on first use (so only codes actually answered have a series).
pub struct ClientRequests {
    name: String,
    requests: Sharded,
    series: [[OnceLock<Counter>; CODES.len()]; APIS.len()],
}

impl std::fmt::Debug for ClientRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientRequests").field("name", &self.name).finish_non_exhaustive()
    }
}

impl ClientRequests {
    fn new(name: &str) -> ClientRequests {
        ClientRequests {
            name: name.to_owned(),
            requests: Sharded::new(APIS.len() * CODES.len()),
            series: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
        }
    }

    fn add(&self, api: Api, code: usize) {
        self.requests.add(api as usize * CODES.len() + code, 1);
    }

    /// Moves what was counted into the series.
    fn flush(&self, recorder: &PrometheusRecorder) {
        for (a, api) in APIS.iter().enumerate() {
            for (c, code) in CODES.iter().enumerate() {
                let n = self.requests.take(a * CODES.len() + c);
                if n == 0 {
                    continue;
                }
                self.series[a][c]
                    .get_or_init(|| {
                        let labels = vec![
                            Label::new("api", *api),
                            Label::new("code", *code),
                            Label::new("client", self.name.clone()),
                        ];
                        recorder.register_counter(&Key::from_parts(REQUESTS_TOTAL, labels), &METADATA)
                    })
                    .increment(n);
            }
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("store", &self.inner.store).finish_non_exhaustive()
    }
}

/// What a store tells of itself: series it cannot fill are not exported at all, rather than a
/// misleading 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreReports {
    /// It counts its keys cheaply (the memory store, not Redis): `floodgate_keys`,
    /// `floodgate_keys_fill_ratio`, `floodgate_overflow_counters`.
    pub keys: bool,
    /// It reports the reservations that expire unsettled (the memory store's sweeper; Redis does
    /// not): `floodgate_reservations_total{result="expired"}` and its units.
    pub expiries: bool,
}

impl Metrics {
    /// A fresh recorder for a server on the store labelled `store` (`memory`, …), which reports
    /// what the memory store reports.
    pub fn new(store: &'static str) -> Metrics {
        Metrics::for_store(store, StoreReports { keys: true, expiries: true })
    }

    /// A fresh recorder for a server on the store labelled `store`, which `reports` what it can.
    pub fn for_store(store: &'static str, reports: StoreReports) -> Metrics {
        let counts_keys = reports.keys;
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(GATEWAY_UPSTREAM_DURATION_SECONDS.to_owned()),
                &GATEWAY_UPSTREAM_BUCKETS,
            )
            .map_or_else(|_| PrometheusBuilder::new().build_recorder(), PrometheusBuilder::build_recorder);
        describe(&recorder);
        let handle = recorder.handle();
        let recorder = Arc::new(recorder);
        let r = &*recorder;
        let store_label = || vec![Label::new("store", store)];
        let inner = Inner {
            decision_duration: Arc::new(Sharded::new(DURATION_BUCKETS.len() + 2)),
            store_errors: r.register_counter(&Key::from_parts(STORE_ERRORS_TOTAL, store_label()), &METADATA),
            keys: counts_keys.then(|| r.register_gauge(&Key::from_parts(KEYS, store_label()), &METADATA)),
            fill_ratio: counts_keys
                .then(|| r.register_gauge(&Key::from_parts(KEYS_FILL_RATIO, store_label()), &METADATA)),
            overflow_counters: counts_keys
                .then(|| r.register_gauge(&Key::from_parts(OVERFLOW_COUNTERS, store_label()), &METADATA)),
            config_version: r.register_gauge(&Key::from_static_name(CONFIG_VERSION), &METADATA),
            reloads_applied: r.register_counter(
                &Key::from_parts(CONFIG_RELOADS_TOTAL, vec![Label::new("result", "applied")]),
                &METADATA,
            ),
            reloads_rejected: r.register_counter(
                &Key::from_parts(CONFIG_RELOADS_TOTAL, vec![Label::new("result", "rejected")]),
                &METADATA,
            ),
            anonymous: Arc::new(ClientRequests::new(floodgate_config::auth::ANONYMOUS)),
            clients: Mutex::new(Vec::new()),
            rule_metrics: Mutex::new(Vec::new()),
            survival: OnceLock::new(),
            give_backs: OnceLock::new(),
            reservations: Reservations::new(Arc::clone(&recorder), reports.expiries),
            rlqs: RlqsSeries::register(&recorder),
            store,
            handle,
            recorder,
        };
        // Zero-valued series exist from the start, so that `increase()` and absence alerts work.
        inner.store_errors.increment(0);
        inner.reloads_applied.increment(0);
        inner.reloads_rejected.increment(0);
        Metrics { inner: Arc::new(inner) }
    }

    /// The RLQS series.
    pub fn rlqs(&self) -> &RlqsSeries {
        &self.inner.rlqs
    }

    /// Installs this recorder as the process's global `metrics` recorder, so that the `metrics`
    /// macros of library crates record into it. Only the first call in a process succeeds; the
    /// binary calls it once.
    pub fn install_global(&self) -> Result<(), metrics::SetRecorderError<SharedRecorder>> {
        metrics::set_global_recorder(SharedRecorder(Arc::clone(&self.inner.recorder)))
    }

    /// The Prometheus text exposition of every series, with what the store says of itself
    /// (`floodgate_keys`, the breaker's state, the fallback's).
    pub fn render(&self, store: StoreStatus) -> String {
        if let Some(memory) = store.memory {
            let set = |gauge: &Option<Gauge>, value: f64| {
                if let Some(gauge) = gauge {
                    gauge.set(value);
                }
            };
            set(&self.inner.keys, memory.keys as f64);
            set(&self.inner.fill_ratio, memory.keys as f64 / memory.max_keys.max(1) as f64);
            set(&self.inner.overflow_counters, memory.overflow_counters as f64);
        }
        for overflow in &store.overflow {
            let Some((domain, rule)) = floodgate::key::rule_of(&overflow.scope) else { continue };
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            let label = rule_label(domain.map(text).as_deref(), &text(rule));
            let key = Key::from_parts(OVERFLOW_DECISIONS_TOTAL, vec![Label::new("rule", label)]);
            self.inner.recorder.register_counter(&key, &METADATA).absolute(overflow.decisions);
        }
        if let (Some(breaker), Some(fallback)) = (store.breaker, store.fallback) {
            let series = self.inner.survival.get_or_init(|| self.survival_series());
            series.breaker.set(f64::from(breaker.gauge()));
            series.instances.set(f64::from(fallback.instances));
            series.charged.absolute(fallback.charged_units);
            series.expired.absolute(fallback.expired_units);
            series.dropped.absolute(fallback.dropped_units);
            if let Some(prefetch) = store.prefetch {
                series.prefetch_store.absolute(prefetch.store_calls);
                series.prefetch_lease.absolute(prefetch.local_decisions);
                series.prefetch_returned.absolute(prefetch.returned_units);
                series.prefetch_expired.absolute(prefetch.expired_units);
            }
        }
        if let Some(g) = store.give_backs {
            let series = self.inner.give_backs.get_or_init(|| {
                let r = &*self.inner.recorder;
                ["started", "retried", "landed", "lost"].map(|result| {
                    let labels = vec![Label::new("store", self.inner.store), Label::new("result", result)];
                    let counter = r.register_counter(&Key::from_parts(GIVE_BACKS_TOTAL, labels), &METADATA);
                    counter.increment(0);
                    counter
                })
            });
            for (counter, value) in series.iter().zip([g.started, g.retried, g.landed, g.lost]) {
                counter.absolute(value);
            }
        }
        self.flush(store.fallback.is_some_and(|f| f.degraded));
        let mut text = self.inner.handle.render();
        self.render_duration(&mut text);
        text
    }

    fn survival_series(&self) -> SurvivalSeries {
        let r = &*self.inner.recorder;
        let store = || Label::new("store", self.inner.store);
        let units = |outcome: &'static str| {
            let counter = r.register_counter(
                &Key::from_parts(FALLBACK_UNITS_TOTAL, vec![store(), Label::new("outcome", outcome)]),
                &METADATA,
            );
            counter.increment(0);
            counter
        };
        let labelled = |name: &'static str, label: &'static str, value: &'static str| {
            let counter = r
                .register_counter(&Key::from_parts(name, vec![store(), Label::new(label, value)]), &METADATA);
            counter.increment(0);
            counter
        };
        SurvivalSeries {
            prefetch_store: labelled(PREFETCH_DECISIONS_TOTAL, "source", "store"),
            prefetch_lease: labelled(PREFETCH_DECISIONS_TOTAL, "source", "lease"),
            prefetch_returned: labelled(PREFETCH_UNITS_TOTAL, "outcome", "returned"),
            prefetch_expired: labelled(PREFETCH_UNITS_TOTAL, "outcome", "expired"),
            breaker: r.register_gauge(&Key::from_parts(BREAKER_STATE, vec![store()]), &METADATA),
            instances: r.register_gauge(&Key::from_parts(FALLBACK_INSTANCES, vec![store()]), &METADATA),
            charged: units("charged"),
            expired: units("expired"),
            dropped: units("dropped"),
        }
    }

    /// Moves what the sharded counters counted into their series; sets `floodgate_fallback_active`
    /// of the rules that fall back locally to whether the store is `degraded`.
    fn flush(&self, degraded: bool) {
        let inner = &*self.inner;
        inner.anonymous.flush(&inner.recorder);
        for client in inner.clients.lock().iter() {
            client.flush(&inner.recorder);
        }
        inner.rule_metrics.lock().retain(|weak| match weak.upgrade() {
            Some(counts) => {
                counts.flush();
                for gauge in counts.fallback.iter().flatten() {
                    gauge.set(if degraded { 1.0 } else { 0.0 });
                }
                true
            }
            None => false,
        });
    }

    /// `floodgate_decision_duration_seconds`, in the exposition format.
    fn render_duration(&self, out: &mut String) {
        let h = &self.inner.decision_duration;
        let name = DECISION_DURATION_SECONDS;
        let _ = writeln!(out, "# HELP {name} {DURATION_HELP}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, bound) in DURATION_BUCKETS.iter().enumerate() {
            cumulative += h.get(i);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += h.get(DURATION_BUCKETS.len());
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let sum = h.get(DURATION_BUCKETS.len() + 1) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {cumulative}");
    }

    /// The recorder, for front doors that register series of their own (the gateway).
    pub fn recorder(&self) -> &PrometheusRecorder {
        &self.inner.recorder
    }

    /// Drains buffered histogram samples; call periodically (the server does every 5 s) so that
    /// memory stays bounded when nobody scrapes.
    pub fn run_upkeep(&self) {
        self.inner.handle.run_upkeep();
    }

    /// Handles for the rules of one policy; rule names are prefixed `<domain>/` when `domain` is
    /// given. Their series are created at zero, and `floodgate_fallback_active` set to 0. Rules
    /// whose label is in `detailed` are also counted per value of their key
    /// (`floodgate_decisions_detailed_total`, at most [`DETAILED_VALUES`] values each).
    pub fn rules<'a>(
        &self,
        domain: Option<&str>,
        rules: impl Iterator<Item = &'a Rule>,
        detailed: &BTreeSet<String>,
    ) -> RuleMetrics {
        let r = &*self.inner.recorder;
        let mut series = Vec::new();
        let mut details = Vec::new();
        let mut fallback = Vec::new();
        let mut reservations = Vec::new();
        for rule in rules {
            let label = rule_label(domain, rule.name());
            reservations.push(self.inner.reservations.rule(&label));
            details.push(
                detailed.contains(&label).then(|| Detail::new(label.clone(), rule, &self.inner.recorder)),
            );
            let per_outcome = OUTCOMES.map(|outcome| {
                let key = Key::from_parts(
                    DECISIONS_TOTAL,
                    vec![Label::new("rule", label.clone()), Label::new("result", outcome.as_str())],
                );
                let counter = r.register_counter(&key, &METADATA);
                counter.increment(0);
                counter
            });
            let active = r.register_gauge(
                &Key::from_parts(FALLBACK_ACTIVE, vec![Label::new("rule", label)]),
                &METADATA,
            );
            active.set(0.0);
            fallback.push((rule.store_error_policy() == OnStoreError::Local).then_some(active));
            series.push(per_outcome);
        }
        let counts =
            Arc::new(RuleCounts { counts: Sharded::new(series.len() * OUTCOMES.len()), series, fallback });
        self.inner.rule_metrics.lock().push(Arc::downgrade(&counts));
        RuleMetrics {
            counts,
            details,
            reservations,
            decision_duration: Arc::clone(&self.inner.decision_duration),
        }
    }

    /// The reservation series of `rule` (of the Envoy domain `domain`, labelled
    /// `<domain>/<rule>`): the same ones for the same label, across reloads.
    pub fn reservations(&self, domain: Option<&str>, rule: &str) -> Arc<RuleReservations> {
        match domain {
            None => self.inner.reservations.rule(rule),
            Some(_) => self.inner.reservations.rule(&rule_label(domain, rule)),
        }
    }

    /// Counts one store failure.
    pub fn store_error(&self) {
        self.inner.store_errors.increment(1);
    }

    /// Sets `floodgate_config_version`.
    pub fn config_version(&self, version: u64) {
        self.inner.config_version.set(version as f64);
    }

    /// Counts one reload, applied or rejected.
    pub fn reload(&self, applied: bool) {
        if applied { &self.inner.reloads_applied } else { &self.inner.reloads_rejected }.increment(1);
    }

    /// Counts one HTTP API request of `client` (`None`: anonymous) answered with `status`.
    pub fn http_request(&self, client: Option<&ClientRequests>, api: Api, status: http::StatusCode) {
        client.unwrap_or(&self.inner.anonymous).add(api, status_index(status));
    }

    /// Counts one `ShouldRateLimit` of `client` (`None`: anonymous) answered `code`.
    pub fn grpc_request(&self, client: Option<&ClientRequests>, code: GrpcCode) {
        client.unwrap_or(&self.inner.anonymous).add(Api::Grpc, code as usize);
    }

    /// The request counters of the `auth` client `name`: the same ones for the same name, across
    /// reloads.
    pub fn client(&self, name: &str) -> Arc<ClientRequests> {
        let mut clients = self.inner.clients.lock();
        if let Some(found) = clients.iter().find(|c| c.name == name) {
            return Arc::clone(found);
        }
        let counts = Arc::new(ClientRequests::new(name));
        clients.push(Arc::clone(&counts));
        counts
    }
}

/// The index in [`CODES`] of an HTTP status (`other` for one the API does not answer with).
fn status_index(status: http::StatusCode) -> usize {
    let label = status.as_str();
    CODES[..14].iter().position(|c| *c == label).unwrap_or(13)
}

/// The decision counters of one policy's rules, made by the app's [`Metrics`] when the policy is
/// applied.
#[derive(Debug)]
pub struct RuleMetrics {
    /// Per rule (in policy order) and outcome, counted sharded.
    counts: Arc<RuleCounts>,
    /// Per rule, in policy order: its per-value counters, for detailed rules.
    details: Vec<Option<Detail>>,
    /// Per rule, in policy order: its reservation series.
    reservations: Vec<Arc<RuleReservations>>,
    decision_duration: Arc<Sharded>,
}

/// The decision counts of one policy's rules, and the series they are flushed into: on every
/// scrape, and when the policy is dropped (so that nothing counted is lost across reloads).
#[derive(Debug)]
pub struct RuleCounts {
    counts: Sharded,
    series: Vec<[Counter; 8]>,
    /// Per rule, `floodgate_fallback_active` of those that fall back locally.
    fallback: Vec<Option<Gauge>>,
}

impl RuleCounts {
    fn flush(&self) {
        for (rule, per_outcome) in self.series.iter().enumerate() {
            for (outcome, series) in per_outcome.iter().enumerate() {
                let n = self.counts.take(rule * OUTCOMES.len() + outcome);
                if n > 0 {
                    series.increment(n);
                }
            }
        }
    }
}

impl Drop for RuleCounts {
    fn drop(&mut self) {
        self.flush();
    }
}

impl RuleMetrics {
    /// Counts each limit of `verdict` (decided for `hits`) under its rule and outcome — and, for a
    /// detailed rule, its key's value — and the decision's duration.
    pub fn record(&self, verdict: &Verdict, hits: &[Hit<'_>], took: Duration) {
        self.record_duration(took);
        for limit in &verdict.limits {
            let outcome = outcome_index(limit.outcome);
            if limit.index < self.counts.series.len() {
                self.counts.counts.add(limit.index * OUTCOMES.len() + outcome, 1);
            }
            if let (Some(Some(detail)), Some(hit)) = (self.details.get(limit.index), hits.get(limit.hit)) {
                detail.record(hit.descriptors, outcome);
            }
        }
    }

    /// The reservation series of the rule at `index` in the policy.
    pub fn reservations(&self, index: usize) -> Option<&RuleReservations> {
        self.reservations.get(index).map(|r| &**r)
    }

    /// Records a decision's duration alone (a request that could never pass).
    pub fn record_duration(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = DURATION_BUCKETS.iter().position(|b| seconds <= *b).unwrap_or(DURATION_BUCKETS.len());
        self.decision_duration.add(bucket, 1);
        self.decision_duration
            .add(DURATION_BUCKETS.len() + 1, u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }
}

/// The most values of one detailed rule counted apart; the others are counted under
/// `value="_other"`, so that a detailed rule adds at most this many series per outcome.
pub const DETAILED_VALUES: usize = 100;

/// The per-value counters of one detailed rule (envoyproxy/ratelimit's `detailed_metric`), bounded:
/// the first [`DETAILED_VALUES`] values seen get series of their own.
struct Detail {
    label: String,
    /// The rule's key descriptors, whose values name the series.
    key: Vec<String>,
    recorder: Arc<PrometheusRecorder>,
    values: papaya::HashMap<Box<str>, [Counter; 8]>,
    other: [Counter; 8],
}

impl std::fmt::Debug for Detail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detail").field("label", &self.label).field("values", &self.values.len()).finish()
    }
}

impl Detail {
    fn new(label: String, rule: &Rule, recorder: &Arc<PrometheusRecorder>) -> Self {
        let other = Self::register(recorder, &label, "_other");
        Detail {
            key: rule.key_descriptors().to_vec(),
            recorder: Arc::clone(recorder),
            values: papaya::HashMap::new(),
            other,
            label,
        }
    }

    fn register(recorder: &PrometheusRecorder, rule: &str, value: &str) -> [Counter; 8] {
        OUTCOMES.map(|outcome| {
            let labels = vec![
                Label::new("rule", rule.to_owned()),
                Label::new("value", value.to_owned()),
                Label::new("result", outcome.as_str()),
            ];
            recorder.register_counter(&Key::from_parts(DECISIONS_DETAILED_TOTAL, labels), &METADATA)
        })
    }

    /// The value as envoyproxy/ratelimit names it in its statistics: `key_value` for each key
    /// descriptor, joined by `.`.
    fn value(&self, descriptors: &Descriptors) -> String {
        let parts: Vec<String> =
            self.key.iter().map(|k| format!("{k}_{}", descriptors.get(k).unwrap_or_default())).collect();
        parts.join(".")
    }

    fn record(&self, descriptors: &Descriptors, outcome: usize) {
        let value = self.value(descriptors);
        let values = self.values.pin();
        if let Some(counters) = values.get(value.as_str()) {
            counters[outcome].increment(1);
        } else if values.len() < DETAILED_VALUES {
            let counters = values.get_or_insert_with(value.clone().into_boxed_str(), || {
                Self::register(&self.recorder, &self.label, &value)
            });
            counters[outcome].increment(1);
        } else {
            self.other[outcome].increment(1);
        }
    }
}

fn describe(r: &PrometheusRecorder) {
    let d = |name: &'static str, unit: Option<Unit>, help: &'static str| {
        r.describe_counter(KeyName::from_const_str(name), unit, SharedString::const_str(help));
    };
    d(
        DECISIONS_TOTAL,
        None,
        "Decisions per rule and result (allowed, denied, shadow_denied, tagged, error_allowed, error_denied, local_allowed, local_denied).",
    );
    d(STORE_ERRORS_TOTAL, None, "Decisions during which the store failed.");
    d(
        DECISIONS_DETAILED_TOTAL,
        None,
        "Decisions of Envoy rules with detailed_metric, per value of their key (the first 100 values; then _other).",
    );
    d(CONFIG_RELOADS_TOTAL, None, "Configuration reloads, applied or rejected.");
    d(
        FALLBACK_UNITS_TOTAL,
        None,
        "Units admitted by local fallbacks, by what became of them: charged to the store on recovery, expired (their window ended, their bucket refilled) or dropped (too many keys owed).",
    );
    d(
        PREFETCH_DECISIONS_TOTAL,
        None,
        "Checks decided from a prefetch lease (a batch taken earlier, or a remembered denial), and store calls for the checks no lease decided, of any rule.",
    );
    d(
        PREFETCH_UNITS_TOTAL,
        None,
        "Unspent leased units of prefetch rules: returned to the store, or expired with their window.",
    );
    d(
        GIVE_BACKS_TOTAL,
        None,
        "Give-backs of what a check across cluster slots took in the slots that admitted, because another slot denied or failed: started, retried, landed, lost.",
    );
    d(REQUESTS_TOTAL, None, "API requests by API and response code.");
    d(
        OVERFLOW_DECISIONS_TOTAL,
        None,
        "Requests of new keys decided on their rule's overflow counters because the memory store was full.",
    );
    let g = |name: &'static str, help: &'static str| {
        r.describe_gauge(KeyName::from_const_str(name), None, SharedString::const_str(help));
    };
    g(FALLBACK_ACTIVE, "1 while a rule decides on its local share because the store fails.");
    g(BREAKER_STATE, "The store's circuit breaker: 0 closed, 1 open, 2 half-open.");
    g(FALLBACK_INSTANCES, "The instances each rule's local share is computed for.");
    g(KEYS, "Keys held by the store.");
    g(KEYS_FILL_RATIO, "Keys held by the memory store over its max_keys.");
    g(OVERFLOW_COUNTERS, "Overflow counters the memory store holds for rules whose new keys found it full.");
    g(CONFIG_VERSION, "Version of the running configuration (1 at start, +1 per applied change).");
    reservations::describe(r);
    rlqs::describe(r);
}

/// The app's Prometheus recorder, shared, as installed globally by [`Metrics::install_global`].
#[derive(Debug)]
pub struct SharedRecorder(Arc<PrometheusRecorder>);

impl Recorder for SharedRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.0.register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.0.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.0.register_histogram(key, metadata)
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use floodgate::{LimitOutcome, Policy};
    use floodgate_core::{Decision, FixedWindow};

    use super::*;

    #[test]
    fn a_detailed_rule_counts_its_first_values_apart_and_the_rest_together() {
        let window = FixedWindow::try_new(NonZeroU64::MIN, Duration::from_secs(60)).unwrap();
        let policy = Policy::new([Rule::new("per-path", window).key(["path"])]).unwrap();
        let metrics = Metrics::new("memory");
        let detailed = BTreeSet::from(["edge/per-path".to_owned()]);
        let rules = metrics.rules(Some("edge"), policy.rules(), &detailed);
        let limit = LimitOutcome {
            rule: "per-path".into(),
            index: 0,
            hit: 0,
            decision: Decision {
                allowed: true,
                limit: 1,
                remaining: 0,
                reset_after: Duration::ZERO,
                retry_after: None,
            },
            outcome: Outcome::Allowed,
            enforced: true,
            window: Duration::from_secs(60),
            dimension: "requests".into(),
            quota: false,
            degrade_to: None,
            grant: None,
            permit: false,
            shard: None,
            partition: None,
        };
        let verdict = Verdict { allowed: true, limits: [limit].into_iter().collect(), ..Verdict::default() };
        for i in 0..DETAILED_VALUES + 5 {
            let descriptors = Descriptors::new().with("path", format!("/p{i}"));
            rules.record(&verdict, &[Hit::new(&descriptors, 1)], Duration::ZERO);
        }
        let text = metrics.render(StoreStatus::default());
        let allowed: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(DECISIONS_DETAILED_TOTAL) && l.contains("result=\"allowed\""))
            .collect();
        assert_eq!(allowed.len(), DETAILED_VALUES + 1, "100 values and _other");
        assert!(allowed.iter().any(|l| l.contains("value=\"path_/p0\"") && l.ends_with(" 1")));
        let other = allowed.iter().find(|l| l.contains("value=\"_other\"")).unwrap();
        assert!(other.ends_with(" 5"), "{other}");
        // The rule's own series counts every decision.
        assert!(text.contains(&format!(
            "floodgate_decisions_total{{rule=\"edge/per-path\",result=\"allowed\"}} {}",
            DETAILED_VALUES + 5
        )));
    }
}
