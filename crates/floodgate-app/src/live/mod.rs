//! [`Live`]: the dashboard's view of decisions, at one-second resolution — decisions and denials
//! per rule and outcome, the decision latency, store failures, and the keys denied most per rule
//! over the last minute (a bounded heavy-hitter sketch, [`sketch::SpaceSaving`]).
//!
//! It sees each decision through the decision path's observer interface ([`LiveObserver`]): a few
//! uncontended atomic adds (per-thread shards) per decision, and for a denial one sketch update
//! under a lock of the thread's own shard. Once a second [`Live::tick`] turns the running totals
//! into one [`Second`] of history (the last [`HISTORY_SECONDS`] are kept) and a [`Snapshot`], and
//! sends both to the live stream's subscribers. Keys are never metric labels: they live here, in
//! memory bounded by the sketch's capacity, and leave only through the admin API.

pub mod sketch;

use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::store::{BreakerState, FallbackStats, MemoryStats};
use floodgate::{Hit, Outcome, Rule};
use parking_lot::Mutex;
use serde::Serialize;
use serde::ser::SerializeMap;
use tokio::sync::broadcast;
use utoipa::ToSchema;

use crate::store::AnyStore;

use self::sketch::SpaceSaving;
use crate::control::{Domain, Running};
use crate::decide::{Observed, Observer};
use crate::metrics::sharded::{Sharded, shard, shards};
use crate::metrics::{Api, DURATION_BUCKETS};

/// Seconds of history kept, and sent to a stream's subscriber when it connects: 5 minutes.
pub const HISTORY_SECONDS: usize = 300;
/// Keys counted per rule in each shard's sketch of each 10-second bucket.
pub const SKETCH_KEYS: usize = 32;
/// Top offenders reported per rule.
pub const TOP_OFFENDERS: usize = 10;
/// The longest key text kept; longer ones are cut.
pub const MAX_KEY_BYTES: usize = 160;
/// The offenders' window is this many buckets of [`BUCKET_SECONDS`]: the last minute.
const BUCKETS: usize = 6;
/// Seconds per offenders' bucket.
const BUCKET_SECONDS: u64 = 10;

/// Every outcome, in the order the counters keep them.
const OUTCOMES: [Outcome; 8] = Outcome::ALL;

/// A rule's identity: its `rule` label (`name`, or `domain/name` for a rule of an Envoy domain).
#[derive(Debug, Clone, PartialEq, Eq)]
struct RuleId {
    domain: Option<Box<str>>,
    rule: Arc<str>,
}

/// A rule's identity, borrowed from a decision.
#[derive(Debug, Clone, Copy)]
struct RuleRef<'a> {
    domain: Option<&'a str>,
    rule: &'a str,
}

impl Hash for RuleId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        RuleRef { domain: self.domain.as_deref(), rule: &self.rule }.hash(state);
    }
}

impl Hash for RuleRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.domain.unwrap_or("").hash(state);
        self.rule.hash(state);
    }
}

impl papaya::Equivalent<RuleId> for RuleRef<'_> {
    fn equivalent(&self, key: &RuleId) -> bool {
        self.domain == key.domain.as_deref() && self.rule == &*key.rule
    }
}

impl RuleId {
    fn label(&self) -> String {
        match &self.domain {
            Some(domain) => format!("{domain}/{}", self.rule),
            None => self.rule.to_string(),
        }
    }
}

/// One rule's running totals and denied keys.
#[derive(Debug)]
struct RuleLive {
    label: String,
    /// Decisions per outcome since the rule was first seen, sharded.
    outcomes: Sharded,
    /// Per shard: the denied keys of each 10-second bucket of the last minute.
    offenders: Box<[Mutex<Offenders>]>,
    /// The totals at the last tick.
    last: Mutex<[u64; 8]>,
}

#[derive(Debug)]
struct Offenders {
    buckets: [SpaceSaving; BUCKETS],
    current: usize,
}

impl RuleLive {
    fn new(label: String) -> Self {
        let offenders = (0..shards())
            .map(|_| {
                Mutex::new(Offenders {
                    buckets: std::array::from_fn(|_| SpaceSaving::new(SKETCH_KEYS, MAX_KEY_BYTES)),
                    current: 0,
                })
            })
            .collect();
        RuleLive { label, outcomes: Sharded::new(OUTCOMES.len()), offenders, last: Mutex::new([0; 8]) }
    }

    fn totals(&self) -> [u64; 8] {
        std::array::from_fn(|i| self.outcomes.get(i))
    }

    /// The keys denied most over the last minute, all shards merged.
    fn top(&self) -> Vec<sketch::Counted> {
        let mut merged = SpaceSaving::new(SKETCH_KEYS, MAX_KEY_BYTES);
        for shard in self.offenders.iter() {
            let shard = shard.lock();
            for bucket in &shard.buckets {
                if bucket.total() > 0 {
                    merged.merge(bucket);
                }
            }
        }
        merged.top(TOP_OFFENDERS)
    }

    /// Starts a new 10-second bucket, forgetting the one a minute old.
    fn rotate(&self) {
        for shard in self.offenders.iter() {
            let mut shard = shard.lock();
            shard.current = (shard.current + 1) % BUCKETS;
            let current = shard.current;
            shard.buckets[current].clear();
        }
    }
}

/// Decisions per outcome, as JSON: `{"allowed": n, "denied": n, ...}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcomes(pub [u64; 8]);

impl Outcomes {
    /// All decisions.
    pub fn decisions(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The refused ones (`denied`, `error_denied`, `local_denied`).
    pub fn denials(&self) -> u64 {
        OUTCOMES.iter().zip(self.0).filter(|(o, _)| o.denies()).map(|(_, n)| n).sum()
    }
}

impl Serialize for Outcomes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(OUTCOMES.len()))?;
        for (outcome, n) in OUTCOMES.iter().zip(self.0) {
            map.serialize_entry(outcome.as_str(), &n)?;
        }
        map.end()
    }
}

/// One second of one rule.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, ToSchema)]
pub struct RuleSecond {
    /// The rule's label.
    pub rule: String,
    /// Decisions in the second.
    pub decisions: u64,
    /// Requests refused in the second.
    pub denials: u64,
    /// Decisions by outcome: `allowed`, `denied`, `shadow_denied`, `tagged`, `error_allowed`,
    /// `error_denied`, `local_allowed`, `local_denied`.
    #[schema(value_type = std::collections::BTreeMap<String, u64>)]
    pub outcomes: Outcomes,
}

/// Decision latency percentiles, in microseconds (interpolated within the histogram's buckets:
/// 10 µs … 1 s).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, ToSchema)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// One second of history.
#[derive(Debug, Clone, Serialize, PartialEq, ToSchema)]
pub struct Second {
    /// The second's end, Unix seconds.
    pub t: u64,
    /// Every rule in force, in configuration order.
    pub rules: Vec<RuleSecond>,
    /// Decision latency in the second (`null`: no decisions).
    pub latency_us: Option<Latency>,
    /// Decisions during which the store failed.
    pub store_errors: u64,
}

/// What the store says of itself, for a snapshot.
#[derive(Debug, Clone, Default)]
pub struct StoreView {
    /// `memory`, `redis` or `redis_cluster`.
    pub kind: &'static str,
    /// The memory store's counts.
    pub memory: Option<MemoryStats>,
    /// A Redis store's breaker.
    pub breaker: Option<BreakerState>,
    /// A Redis store's fallback.
    pub fallback: Option<FallbackStats>,
}

/// The store's health in a snapshot.
#[derive(Debug, Clone, Serialize, PartialEq, ToSchema)]
pub struct StoreHealth {
    /// `memory`, `redis` or `redis_cluster`.
    #[schema(value_type = String)]
    pub kind: &'static str,
    /// Decision latency over the last 10 seconds (`null`: no decisions).
    pub latency_us: Option<Latency>,
    /// Decisions during which the store failed, in the last second.
    pub errors_per_s: u64,
    /// The same, over the last minute.
    pub errors_last_minute: u64,
    /// A Redis store's circuit breaker: `closed`, `open`, `half_open` (`null` for the memory store).
    #[schema(value_type = Option<String>)]
    pub breaker: Option<&'static str>,
    /// A Redis store's fallback (`null` for the memory store).
    pub fallback: Option<FallbackView>,
    /// Keys held (memory store).
    pub keys: Option<usize>,
    /// The most keys held (memory store's `max_keys`).
    pub max_keys: Option<usize>,
}

/// A Redis store's fallback, in a snapshot.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, ToSchema)]
pub struct FallbackView {
    /// Whether the store's last call failed: rules with `on_store_error: local` decide locally now.
    pub degraded: bool,
    /// The instances the limits are shared by.
    pub instances: u32,
    /// Requests decided (in part) locally, since start.
    pub local_decisions: u64,
    /// Keys with local admissions not yet charged to the store.
    pub owed_keys: usize,
}

/// One denied key, in a snapshot.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, ToSchema)]
pub struct Offender {
    /// The rule's key descriptors and their values: `user=u1`, `ip=10.0.0.7 route=GET /a` (`global`
    /// for a rule keyed by nothing).
    pub key: String,
    /// Denials counted over the last minute (an over-estimate by at most `error`).
    pub denied: u64,
    /// How much of `denied` may belong to keys it replaced in the sketch.
    pub error: u64,
}

/// One rule, in a snapshot.
#[derive(Debug, Clone, Serialize, PartialEq, ToSchema)]
pub struct RuleStats {
    /// The rule's label.
    pub rule: String,
    /// Decisions in the last second.
    pub decisions_per_s: u64,
    /// Requests refused in the last second.
    pub denials_per_s: u64,
    /// Decisions by outcome over the last minute.
    #[schema(value_type = std::collections::BTreeMap<String, u64>)]
    pub outcomes_last_minute: Outcomes,
    /// Refused over decided, over the last minute (0 to 1; 0 without decisions).
    pub denial_ratio_last_minute: f64,
    /// The keys denied most over the last minute, most first (denied, shadow-denied and
    /// local-denied decisions).
    pub top_offenders: Vec<Offender>,
}

/// The running configuration, in a snapshot.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, ToSchema)]
pub struct ConfigView {
    /// Its version.
    pub version: u64,
    /// Its content hash.
    pub hash: String,
}

/// Everything the dashboard shows at once (`GET /admin/stats`).
#[derive(Debug, Clone, Serialize, PartialEq, ToSchema)]
pub struct Snapshot {
    /// The last complete second, Unix seconds (0 before the first).
    pub t: u64,
    /// The running configuration.
    pub config: ConfigView,
    /// Every rule in force.
    pub rules: Vec<RuleStats>,
    /// The store.
    pub store: StoreHealth,
}

/// A subscriber's start: the history so far, and the events to come (each a ready SSE text).
pub type Subscription = (Vec<Arc<Second>>, broadcast::Receiver<Arc<str>>);

/// A domain's rules' running totals in one [`Live`] view, by rule position: looked up by name
/// once per domain (a [`Domain`] is built anew for every applied configuration, so a reload starts
/// a new one) and kept in it ([`Domain::live`]), then read by index with no map lookup per
/// decision. Kept for the view that made it ([`Live::id`]); any other view looks up by name.
struct DomainRules {
    view: u64,
    rules: Box<[Arc<RuleLive>]>,
}

/// The next [`Live::id`].
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// The dashboard's live view of decisions. See the module docs.
#[derive(Debug)]
pub struct Live {
    /// Which view this is, for what the domains keep of it ([`Domain::live`]).
    id: u64,
    /// Keyed by the configuration's rule names, never by a client's values: a fast hash.
    rules: papaya::HashMap<RuleId, Arc<RuleLive>, foldhash::fast::RandomState>,
    /// Decision latency: counts per bucket of [`DURATION_BUCKETS`], the last one beyond.
    latency: Sharded,
    store_errors: Sharded,
    hasher: std::collections::hash_map::RandomState,
    ticks: Mutex<Ticks>,
    /// The stream's subscribers (`None` once the server stops: the streams end).
    feed: Mutex<Option<broadcast::Sender<Arc<str>>>>,
}

#[derive(Debug, Default)]
struct Ticks {
    history: VecDeque<Arc<Second>>,
    /// Latency bucket counts per second, for the last 10 seconds' percentiles.
    latency: VecDeque<Vec<u64>>,
    last_latency: Vec<u64>,
    last_errors: u64,
    count: u64,
}

impl Default for Live {
    fn default() -> Self {
        Live::new()
    }
}

impl Live {
    /// An empty view.
    pub fn new() -> Self {
        let (feed, _) = broadcast::channel(16);
        Live {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            rules: papaya::HashMap::with_hasher(foldhash::fast::RandomState::default()),
            latency: Sharded::new(DURATION_BUCKETS.len() + 1),
            store_errors: Sharded::new(1),
            hasher: std::collections::hash_map::RandomState::new(),
            ticks: Mutex::new(Ticks::default()),
            feed: Mutex::new(Some(feed)),
        }
    }

    /// The running totals of a rule, made on first sight.
    fn rule(&self, domain: Option<&str>, rule: &str) -> Arc<RuleLive> {
        let rules = self.rules.pin();
        if let Some(live) = rules.get(&RuleRef { domain, rule }) {
            return Arc::clone(live);
        }
        let id = RuleId { domain: domain.map(Into::into), rule: Arc::from(rule) };
        let label = id.label();
        Arc::clone(rules.get_or_insert_with(id, || Arc::new(RuleLive::new(label))))
    }

    /// The running totals of `domain`'s rules by position (made on its first decision); `None`
    /// when the domain keeps another view's.
    fn rules_of<'d>(&self, domain: &'d Domain) -> Option<&'d [Arc<RuleLive>]> {
        let kept = domain.live.get_or_init(|| {
            let name = domain.name.as_deref();
            let rules = domain.policy.rules().map(|r| self.rule(name, r.name())).collect();
            Box::new(DomainRules { view: self.id, rules })
        });
        let kept = kept.downcast_ref::<DomainRules>()?;
        (kept.view == self.id).then_some(&*kept.rules)
    }

    /// Counts one decision of `rule` (of `domain`) with `outcome`; a denied one also counts its key.
    fn record(&self, domain: Option<&str>, definition: &Rule, outcome: Outcome, hit: Option<&Hit<'_>>) {
        let live = self.rule(domain, definition.name());
        self.record_in(&live, definition, outcome, hit);
    }

    /// [`Live::record`] into the rule's running totals `live`.
    fn record_in(&self, live: &RuleLive, definition: &Rule, outcome: Outcome, hit: Option<&Hit<'_>>) {
        live.outcomes.add(outcome as usize, 1);
        if !matches!(outcome, Outcome::Denied | Outcome::ShadowDenied | Outcome::LocalDenied) {
            return;
        }
        let Some(hit) = hit else { return };
        let key = definition.key_descriptors();
        let mut hasher = self.hasher.build_hasher();
        for name in key {
            hit.descriptors.get(name).unwrap_or("").hash(&mut hasher);
        }
        let hash = hasher.finish();
        let Some(shard) = live.offenders.get(shard()) else { return };
        let mut shard = shard.lock();
        let current = shard.current;
        shard.buckets[current].add(hash, 1, |text| write_key(text, key, hit));
    }

    /// Counts one decision's latency, and a store failure.
    fn record_decision(&self, took: Duration, store_failed: bool) {
        let seconds = took.as_secs_f64();
        let bucket = DURATION_BUCKETS.iter().position(|b| seconds <= *b).unwrap_or(DURATION_BUCKETS.len());
        self.latency.add(bucket, 1);
        if store_failed {
            self.store_errors.add(0, 1);
        }
    }

    /// Closes the stream: every subscriber's stream ends (the server is stopping).
    pub fn close(&self) {
        self.feed.lock().take();
    }

    /// A new subscriber: the history so far, then one event per tick (`None` once closed).
    pub fn subscribe(&self) -> Option<Subscription> {
        let receiver = self.feed.lock().as_ref()?.subscribe();
        let history = self.ticks.lock().history.iter().cloned().collect();
        Some((history, receiver))
    }

    /// The history, oldest first.
    pub fn history(&self) -> Vec<Arc<Second>> {
        self.ticks.lock().history.iter().cloned().collect()
    }

    /// One second has passed (`now`: Unix seconds): the rules in force (their labels' parts, in
    /// order) each get a [`RuleSecond`] of what they decided since the last tick; every 10 seconds
    /// the offenders move on. Returns the second, and sends it with a snapshot to subscribers.
    pub fn tick<'a>(
        &self,
        now: u64,
        rules: impl IntoIterator<Item = (Option<&'a str>, &'a str)>,
        config: &ConfigView,
        store: &StoreView,
    ) -> Arc<Second> {
        let mut seen = HashSet::new();
        let mut rule_seconds = Vec::new();
        for (domain, rule) in rules {
            let live = self.rule(domain, rule);
            if !seen.insert(live.label.clone()) {
                continue;
            }
            let totals = live.totals();
            let mut last = live.last.lock();
            let delta = Outcomes(std::array::from_fn(|i| totals[i].saturating_sub(last[i])));
            *last = totals;
            rule_seconds.push(RuleSecond {
                rule: live.label.clone(),
                decisions: delta.decisions(),
                denials: delta.denials(),
                outcomes: delta,
            });
        }
        // Rules no longer in force are forgotten.
        self.rules.pin().retain(|_, live| seen.contains(&live.label));

        let mut ticks = self.ticks.lock();
        let latency_totals: Vec<u64> = (0..=DURATION_BUCKETS.len()).map(|i| self.latency.get(i)).collect();
        let latency_delta: Vec<u64> = if ticks.last_latency.is_empty() {
            latency_totals.clone()
        } else {
            latency_totals.iter().zip(&ticks.last_latency).map(|(a, b)| a.saturating_sub(*b)).collect()
        };
        ticks.last_latency = latency_totals;
        let errors = self.store_errors.get(0);
        let store_errors = errors.saturating_sub(ticks.last_errors);
        ticks.last_errors = errors;
        let second = Arc::new(Second {
            t: now,
            rules: rule_seconds,
            latency_us: percentiles(&latency_delta),
            store_errors,
        });
        ticks.latency.push_back(latency_delta);
        while ticks.latency.len() > 10 {
            ticks.latency.pop_front();
        }
        ticks.history.push_back(Arc::clone(&second));
        while ticks.history.len() > HISTORY_SECONDS {
            ticks.history.pop_front();
        }
        ticks.count += 1;
        let rotate = ticks.count.is_multiple_of(BUCKET_SECONDS);
        drop(ticks);
        if rotate {
            self.rules.pin().values().for_each(|live| live.rotate());
        }

        let feed = self.feed.lock().clone();
        if let Some(feed) = feed.filter(|f| f.receiver_count() > 0) {
            let snapshot = self.snapshot(config, store);
            let mut event = String::new();
            let _ = write!(event, "event: second\ndata: {}\n\n", json(&*second));
            let _ = write!(event, "event: stats\ndata: {}\n\n", json(&snapshot));
            let _ = feed.send(event.into());
        }
        second
    }

    /// Everything at once: per rule the last second and the last minute, the top offenders, the
    /// store's health.
    pub fn snapshot(&self, config: &ConfigView, store: &StoreView) -> Snapshot {
        let ticks = self.ticks.lock();
        let last = ticks.history.back().cloned();
        let minute: Vec<Arc<Second>> = ticks.history.iter().rev().take(60).cloned().collect();
        let mut latency = vec![0u64; DURATION_BUCKETS.len() + 1];
        for second in &ticks.latency {
            for (sum, n) in latency.iter_mut().zip(second) {
                *sum += n;
            }
        }
        drop(ticks);

        let rules_live: Vec<Arc<RuleLive>> = self.rules.pin().values().cloned().collect();
        let rules = last
            .as_ref()
            .map(|s| s.rules.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|r| {
                let mut total = [0u64; 8];
                for second in &minute {
                    if let Some(rs) = second.rules.iter().find(|x| x.rule == r.rule) {
                        for (t, n) in total.iter_mut().zip(rs.outcomes.0) {
                            *t += n;
                        }
                    }
                }
                let total = Outcomes(total);
                let top = rules_live.iter().find(|l| l.label == r.rule).map(|l| l.top()).unwrap_or_default();
                RuleStats {
                    rule: r.rule.clone(),
                    decisions_per_s: r.decisions,
                    denials_per_s: r.denials,
                    denial_ratio_last_minute: if total.decisions() == 0 {
                        0.0
                    } else {
                        total.denials() as f64 / total.decisions() as f64
                    },
                    outcomes_last_minute: total,
                    top_offenders: top
                        .into_iter()
                        .map(|c| Offender { key: c.key, denied: c.count, error: c.error })
                        .collect(),
                }
            })
            .collect();
        let store = StoreHealth {
            kind: store.kind,
            latency_us: percentiles(&latency),
            errors_per_s: last.as_ref().map_or(0, |s| s.store_errors),
            errors_last_minute: minute.iter().map(|s| s.store_errors).sum(),
            breaker: store.breaker.map(|b| match b {
                BreakerState::Closed => "closed",
                BreakerState::Open => "open",
                BreakerState::HalfOpen => "half_open",
            }),
            fallback: store.fallback.map(|f| FallbackView {
                degraded: f.degraded,
                instances: f.instances,
                local_decisions: f.local_decisions,
                owed_keys: f.owed_keys,
            }),
            keys: store.memory.map(|m| m.keys),
            max_keys: store.memory.map(|m| m.max_keys),
        };
        Snapshot { t: last.map_or(0, |s| s.t), config: config.clone(), rules, store }
    }
}

/// The running configuration and the store, as a snapshot shows them.
pub fn context(running: &Running, store: &AnyStore) -> (ConfigView, StoreView) {
    let config = ConfigView { version: running.version, hash: running.source.hash.clone() };
    let store = StoreView {
        kind: store.kind(),
        memory: store.memory_stats(),
        breaker: store.breaker(),
        fallback: store.fallback().map(|f| f.stats()),
    };
    (config, store)
}

/// Every rule in force, as `(domain, rule)`: the native policy's, then each Envoy domain's (in
/// name order).
pub fn rules_in_force(running: &Running) -> Vec<(Option<&str>, &str)> {
    let mut rules: Vec<(Option<&str>, &str)> =
        running.native.policy.rules().map(|r| (None, r.name())).collect();
    let mut domains: Vec<&Arc<Domain>> = running.domains.values().collect();
    domains.sort_by(|a, b| a.name.cmp(&b.name));
    for domain in domains {
        rules.extend(domain.policy.rules().map(|r| (domain.name.as_deref(), r.name())));
    }
    rules
}

/// JSON text of `value` (these types always serialize).
pub fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// `user=u1 route=GET /a`: the rule's key descriptors and their values (`global` for none).
fn write_key(text: &mut String, key: &[String], hit: &Hit<'_>) {
    if key.is_empty() {
        text.push_str("global");
        return;
    }
    for (i, name) in key.iter().enumerate() {
        if i > 0 {
            text.push(' ');
        }
        let _ = write!(text, "{name}={}", hit.descriptors.get(name).unwrap_or(""));
    }
}

/// p50, p90 and p99 of a latency histogram (counts per bucket of [`DURATION_BUCKETS`], the last
/// beyond 1 s), in µs, interpolated linearly within a bucket; `None` when empty.
fn percentiles(counts: &[u64]) -> Option<Latency> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let at = |q: f64| -> f64 {
        let rank = q * total as f64;
        let mut below = 0u64;
        for (i, &n) in counts.iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                let low = if i == 0 { 0.0 } else { DURATION_BUCKETS[i - 1] };
                let high = DURATION_BUCKETS.get(i).copied().unwrap_or(low);
                let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
                return (low + (high - low) * within) * 1e6;
            }
            below += n;
        }
        DURATION_BUCKETS[DURATION_BUCKETS.len() - 1] * 1e6
    };
    Some(Latency { p50: at(0.5), p90: at(0.9), p99: at(0.99) })
}

/// The decision path's observer that feeds [`Live`].
#[derive(Debug)]
pub struct LiveObserver(pub Arc<Live>);

impl Observer for LiveObserver {
    fn observe(&self, decision: &Observed<'_>) {
        // Peeks decide nothing; like the metrics, they are not counted.
        if decision.api == Api::Peek {
            return;
        }
        let Ok(verdict) = decision.result else {
            self.0.record_decision(decision.took, false);
            return;
        };
        self.0.record_decision(decision.took, verdict.store_error.is_some());
        let domain = decision.domain.name.as_deref();
        let policy = &decision.domain.policy;
        let rules = self.0.rules_of(decision.domain);
        for limit in &verdict.limits {
            let Some(rule) = policy.rule(limit.index) else { continue };
            let hit = decision.hits.get(limit.hit);
            match rules.and_then(|rules| rules.get(limit.index)) {
                Some(live) => self.0.record_in(live, rule, limit.outcome, hit),
                None => self.0.record(domain, rule, limit.outcome, hit),
            }
        }
    }
}

#[cfg(test)]
mod tests;
