//! Floodgate's native YAML format (DESIGN.md §3; the reference is `docs/configuration.md`).

use std::num::NonZeroU64;
use std::str::FromStr;
use std::time::Duration;

use floodgate::headers::HeaderStyle;
use floodgate::{Action, ByDescriptor, Condition, Limit, MemoryConfig, OnFull, OnStoreError, Rule};
use floodgate_core::calendar::Period;
use floodgate_core::{
    Calendar, Concurrency, FixedWindow, Gcra, Quota, Rate, SlidingLog, SlidingWindow, TokenBucket,
};
use jiff::civil::Weekday;

use super::StoreConfig;
use super::duration;
use super::error::Invalid;
use super::fingerprint::Canonical;
use super::yaml::{Fields, Item, Value, did_you_mean};

/// A validated native configuration, before its rules are compiled into a policy.
#[derive(Debug)]
pub(crate) struct Native {
    pub(crate) store: StoreConfig,
    pub(crate) headers: HeaderStyle,
    pub(crate) rules: Vec<Rule>,
    /// `(rule name, fingerprint)` in rule order.
    pub(crate) fingerprints: Vec<(String, u64)>,
}

const TOP_FIELDS: &[&str] = &["store", "headers", "descriptors", "rules"];

const RULE_FIELDS: &[&str] = &[
    "name",
    "match",
    "key",
    "algorithm",
    "limit",
    "window",
    "rate",
    "burst",
    "lease",
    "period",
    "time_zone",
    "anchor",
    "overage",
    "action",
    "rollout",
    "on_store_error",
];

/// The fields of a rule that parameterise its algorithm.
const PARAMETERS: &[&str] = &["limit", "window", "rate", "burst", "lease", "period", "time_zone", "anchor"];

/// Descriptor names every front door knows (DESIGN.md §3), besides `header.<name>`.
pub(crate) const KNOWN_DESCRIPTORS: &[&str] =
    &["ip", "user", "tenant", "api_key", "plan", "route", "method", "session"];

/// The default Redis key prefix.
pub(crate) const DEFAULT_PREFIX: &str = "floodgate";
/// The default store deadline.
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_millis(5);
/// The default concurrency lease.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Validates a native configuration document (its root is a mapping without `domain`).
pub(crate) fn compile(root: Item<'_>) -> Result<Native, Invalid> {
    let fields = root.fields("a Floodgate configuration", Some(TOP_FIELDS))?;
    let store = match fields.get("store") {
        Some(item) => store(item)?,
        None => StoreConfig::Memory(MemoryConfig::default()),
    };
    let headers = match fields.get("headers") {
        Some(item) => {
            let text = item.str("a header style")?;
            HeaderStyle::from_str(text).map_err(|e| item.error(e.to_string()))?
        }
        None => HeaderStyle::default(),
    };
    let vocabulary = match fields.get("descriptors") {
        Some(item) => Vocabulary::declared(item)?,
        None => Vocabulary::default(),
    };
    let mut rules = Vec::new();
    let mut fingerprints = Vec::new();
    // (name, line) of every rule so far, to point a duplicate at the first.
    let mut seen: Vec<(String, usize)> = Vec::new();
    if let Some(list) = fields.get("rules").filter(|i| !i.is_null()) {
        for item in list.elements("a list of rules")? {
            let (rule, fingerprint) = rule(item, &vocabulary, &mut seen)?;
            fingerprints.push((rule.name().to_owned(), fingerprint));
            rules.push(rule);
        }
    }
    Ok(Native { store, headers, rules, fingerprints })
}

// === store ===

const STORE_FIELDS: &[&str] =
    &["kind", "max_keys", "on_full", "sweep_interval", "url", "urls", "prefix", "deadline"];
const MEMORY_FIELDS: &[&str] = &["kind", "max_keys", "on_full", "sweep_interval"];
const REDIS_FIELDS: &[&str] = &["kind", "url", "prefix", "deadline"];
const CLUSTER_FIELDS: &[&str] = &["kind", "urls", "prefix", "deadline"];

fn store(item: Item<'_>) -> Result<StoreConfig, Invalid> {
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
        "memory" => {
            let mut config = MemoryConfig::default();
            if let Some(max) = fields.get("max_keys") {
                let n = max.u64_at_least("max_keys", 1)?;
                config.max_keys =
                    usize::try_from(n).map_err(|_| max.error(format!("max_keys {n} is too large")))?;
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
            Ok(StoreConfig::Memory(config))
        }
        "redis" => {
            let url = fields.require("url", "a Redis store needs url: redis://host:port")?;
            let url = redis_url(url)?;
            let (prefix, deadline) = redis_common(&fields)?;
            Ok(StoreConfig::Redis { url, prefix, deadline })
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
            let (prefix, deadline) = redis_common(&fields)?;
            Ok(StoreConfig::RedisCluster { urls, prefix, deadline })
        }
    }
}

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

fn redis_common(fields: &Fields<'_>) -> Result<(String, Duration), Invalid> {
    let prefix = match fields.get("prefix") {
        Some(p) => {
            let text = p.str("a key prefix")?;
            if text.is_empty() {
                return Err(
                    p.error("prefix is empty: keys need a prefix so they cannot collide with other data")
                );
            }
            text.to_owned()
        }
        None => DEFAULT_PREFIX.to_owned(),
    };
    let deadline = match fields.get("deadline") {
        Some(d) => positive_duration(d, "deadline")?,
        None => DEFAULT_DEADLINE,
    };
    Ok((prefix, deadline))
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

// === descriptors ===

/// The descriptor names a configuration may use: the known ones, `header.<name>`, and those
/// declared in the top-level `descriptors` list.
#[derive(Debug, Default)]
struct Vocabulary {
    declared: Vec<String>,
}

impl Vocabulary {
    fn declared(item: Item<'_>) -> Result<Self, Invalid> {
        let mut declared: Vec<String> = Vec::new();
        for entry in item.elements("a list of descriptor names")? {
            let name = entry.text("a descriptor name")?;
            if name.trim().is_empty() || name.chars().any(char::is_control) {
                return Err(entry.error(format!("invalid descriptor name {}", entry.node.describe())));
            }
            if name == "global" {
                return Err(
                    entry.error("\"global\" is reserved: `key: [global]` means one key for all requests")
                );
            }
            if declared.iter().any(|d| *d == name) {
                return Err(entry.error(format!("descriptor {name:?} is declared twice")));
            }
            declared.push(name.into_owned());
        }
        Ok(Vocabulary { declared })
    }

    /// Checks that `name` is a descriptor this configuration may use; `at` points at it.
    fn check(&self, name: &str, at: Item<'_>) -> Result<(), Invalid> {
        if KNOWN_DESCRIPTORS.contains(&name) || self.declared.iter().any(|d| d == name) {
            return Ok(());
        }
        if let Some(header) = name.strip_prefix("header.") {
            return check_header_name(header, at);
        }
        let candidates = KNOWN_DESCRIPTORS.iter().copied().chain(self.declared.iter().map(String::as_str));
        Err(at.error(format!(
            "unknown descriptor {name:?}: expected one of {}, header.<name>, or a name declared in the \
             top-level \"descriptors\" list{}",
            KNOWN_DESCRIPTORS.join(", "),
            did_you_mean(name, candidates)
        )))
    }
}

/// Header descriptors are named in lower case, as HTTP/2 sends them and the extractors record them.
fn check_header_name(header: &str, at: Item<'_>) -> Result<(), Invalid> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if header.is_empty() || !header.chars().all(token) {
        return Err(at.error(format!("invalid header name {header:?} in \"header.{header}\"")));
    }
    if header.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(at.error(format!(
            "header descriptors are lower case: write \"header.{}\"",
            header.to_ascii_lowercase()
        )));
    }
    Ok(())
}

// === rules ===

/// The algorithms, as named in configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    TokenBucket,
    Gcra,
    Concurrency,
    Quota,
}

impl Algorithm {
    const ALL: [Algorithm; 7] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::Concurrency,
        Algorithm::Quota,
    ];

    fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::Concurrency => "concurrency",
            Algorithm::Quota => "quota",
        }
    }

    /// The parameters the algorithm takes.
    fn parameters(self) -> &'static [&'static str] {
        match self {
            Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingLog => &["limit", "window"],
            Algorithm::TokenBucket | Algorithm::Gcra => &["rate", "burst"],
            Algorithm::Concurrency => &["limit", "lease"],
            Algorithm::Quota => &["limit", "period", "time_zone", "anchor"],
        }
    }

    /// The parameters it requires, each with an example.
    fn required(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingLog => {
                &[("limit", "limit: 100"), ("window", "window: 60s")]
            }
            Algorithm::TokenBucket | Algorithm::Gcra => &[("rate", "rate: 10/s")],
            Algorithm::Concurrency => &[("limit", "limit: 10")],
            Algorithm::Quota => &[("limit", "limit: 10000"), ("period", "period: month")],
        }
    }
}

/// How one count becomes a [`Limit`] (a limit may vary `by` a descriptor: one count per value).
#[derive(Debug)]
enum Shape {
    Window(Algorithm, Duration),
    Concurrency(Duration),
    Quota(Calendar),
}

impl Shape {
    fn limit(&self, count: NonZeroU64, at: &Item<'_>) -> Result<Limit, Invalid> {
        let limit: Limit = match self {
            Shape::Window(Algorithm::FixedWindow, w) => FixedWindow::try_new(count, *w).map(Limit::from),
            Shape::Window(Algorithm::SlidingLog, w) => SlidingLog::try_new(count, *w).map(Limit::from),
            Shape::Window(_, w) => SlidingWindow::try_new(count, *w).map(Limit::from),
            Shape::Concurrency(lease) => Concurrency::try_new(count, *lease).map(Limit::from),
            Shape::Quota(calendar) => Ok(Quota::new(count, calendar.clone()).into()),
        }
        .map_err(|e| at.error(e.to_string()))?;
        Ok(limit)
    }
}

/// A `limit`: one count, or counts that vary by a descriptor's value.
#[derive(Debug)]
enum Count<'a> {
    One(NonZeroU64),
    By {
        descriptor: String,
        /// `(value, count, where)` in document order.
        values: Vec<(String, NonZeroU64, Item<'a>)>,
        default: Option<(NonZeroU64, Item<'a>)>,
    },
}

fn rule(
    item: Item<'_>,
    vocabulary: &Vocabulary,
    seen: &mut Vec<(String, usize)>,
) -> Result<(Rule, u64), Invalid> {
    let fields = item.fields("a rule", Some(RULE_FIELDS))?;
    let mut canonical = Canonical::default();

    // name
    let name_item = fields.require("name", "every rule needs a unique name, e.g. name: chat-per-user")?;
    let name = name_item.text("a rule name")?;
    if name.trim().is_empty() || name.chars().any(char::is_control) {
        return Err(name_item
            .error(format!("invalid rule name {}: must be non-empty text", name_item.node.describe())));
    }
    if let Some((_, line)) = seen.iter().find(|(n, _)| *n == name) {
        return Err(name_item.error(format!("duplicate rule name {name:?} (first defined at line {line})")));
    }
    seen.push((name.to_string(), name_item.node.line));
    canonical.field("name", &name);

    // algorithm and its parameters
    let algorithm_item = fields.require(
        "algorithm",
        "expected one of fixed_window, sliding_window, sliding_log, token_bucket, gcra, concurrency, quota",
    )?;
    let algorithm_name = algorithm_item.str("an algorithm")?;
    let Some(algorithm) = Algorithm::ALL.into_iter().find(|a| a.name() == algorithm_name) else {
        let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        return Err(algorithm_item.error(format!(
            "unknown algorithm {algorithm_name:?}: expected one of {}{}",
            names.join(", "),
            did_you_mean(algorithm_name, names.iter().copied())
        )));
    };
    canonical.field("algorithm", algorithm.name());
    for given in fields.names() {
        if PARAMETERS.contains(&given)
            && !algorithm.parameters().contains(&given)
            && let Some(key) = fields.key_item(given)
        {
            return Err(key.error(format!(
                "{given:?} does not apply to algorithm {} (its parameters: {})",
                algorithm.name(),
                algorithm.parameters().join(", ")
            )));
        }
    }
    for (param, example) in algorithm.required() {
        if fields.get(param).is_none() {
            return Err(item.missing(
                param,
                format!("algorithm {} requires {param:?} (e.g. {example})", algorithm.name()),
            ));
        }
    }

    let (limit, by) = match algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra => {
            if let Some(overage) = fields.get("overage") {
                return Err(overage.error(OVERAGE_WITHOUT_BY));
            }
            (bucket(&fields, algorithm, &mut canonical)?, None)
        }
        _ => {
            let shape = shape(&fields, algorithm, &mut canonical)?;
            let limit_item = fields.require("limit", "a limit is required")?;
            let count = count(limit_item.clone(), vocabulary)?;
            counted(&fields, &shape, &count, &limit_item, &mut canonical)?
        }
    };
    let mut rule = Rule::new(name.as_ref(), limit);
    if let Some(by) = by {
        rule = rule.vary_by(by);
    }

    // match
    let mut conditions: Vec<(String, String)> = Vec::new();
    if let Some(match_item) = fields.get("match").filter(|i| !i.is_null()) {
        let entries = match_item.fields("conditions on descriptors", None)?;
        for (descriptor, key, value) in entries.iter() {
            vocabulary.check(descriptor, key)?;
            let condition = condition(&value)?;
            let described = match &condition {
                Condition::Present => "present".to_owned(),
                Condition::OneOf(values) => format!("one of {values:?}"),
                Condition::NoneOf(values) => format!("none of {values:?}"),
            };
            conditions.push((descriptor.to_owned(), described));
            rule = rule.when_condition(descriptor, condition);
        }
    }
    conditions.sort();
    canonical.field("match", &conditions);

    // key
    let key = match fields.get("key").filter(|i| !i.is_null()) {
        Some(key_item) => key(key_item, vocabulary)?,
        None => Vec::new(),
    };
    canonical.field("key", &key);
    rule = rule.key(key);

    // action, rollout, store failures
    let action = match fields.get("action") {
        Some(a) => {
            let text = a.str("an action")?;
            match text {
                "deny" => Action::Deny,
                "shadow" => Action::Shadow,
                "tag" => Action::Tag,
                "delay" => {
                    return Err(a.error(
                        "action \"delay\" is only available in-process (tower layer) and in the gateway; \
                         the server answers at once: use deny, shadow or tag",
                    ));
                }
                other => {
                    return Err(a.error(format!(
                        "unknown action {other:?}: expected deny, shadow or tag{}",
                        did_you_mean(other, ["deny", "shadow", "tag"])
                    )));
                }
            }
        }
        None => Action::Deny,
    };
    canonical.field("action", action_name(action));
    rule = rule.action(action);

    let rollout = match fields.get("rollout") {
        Some(r) => rollout(r)?,
        None => 100.0,
    };
    canonical.field("rollout", rollout);
    rule = rule.rollout(rollout);

    let on_store_error = match fields.get("on_store_error") {
        Some(o) => {
            let text = o.str("a store failure policy")?;
            canonical.field("on_store_error", text);
            match text {
                "fail_open" => OnStoreError::FailOpen,
                "fail_closed" => OnStoreError::FailClosed,
                // The fallback store (an in-memory share of the limit) is not built yet: until it is,
                // `local` behaves as `fail_open`. Accepted so configurations need not change later.
                "local" => OnStoreError::FailOpen,
                other => {
                    let options = ["fail_open", "fail_closed", "local"];
                    return Err(o.error(format!(
                        "unknown on_store_error {other:?}: expected fail_open, fail_closed or local{}",
                        did_you_mean(other, options)
                    )));
                }
            }
        }
        None => OnStoreError::FailOpen,
    };
    rule = rule.on_store_error(on_store_error);

    Ok((rule, canonical.hash()))
}

/// A token bucket or GCRA rule: `rate` and `burst`.
fn bucket(fields: &Fields<'_>, algorithm: Algorithm, canonical: &mut Canonical) -> Result<Limit, Invalid> {
    let rate_item = fields.require("rate", "e.g. rate: 10/s")?;
    let rate = rate(&rate_item)?;
    let burst_item = fields.get("burst");
    let burst = match &burst_item {
        Some(b) => b.u64_at_least("burst", 1)?,
        None if algorithm == Algorithm::Gcra => 1,
        None => rate.count(),
    };
    let burst = NonZeroU64::new(burst).unwrap_or(NonZeroU64::MIN);
    canonical.field("rate", (rate.count(), rate.period().as_micros())).field("burst", burst.get());
    let at = burst_item.as_ref().unwrap_or(&rate_item);
    let limit: Limit = if algorithm == Algorithm::Gcra {
        Gcra::try_new(rate, burst).map(Limit::from)
    } else {
        TokenBucket::try_new(rate, burst).map(Limit::from)
    }
    .map_err(|e| at.error(e.to_string()))?;
    Ok(limit)
}

/// A rate such as `10/s`, `600/m`, `5000/h`.
fn rate(item: &Item<'_>) -> Result<Rate, Invalid> {
    if let Some(n) = item.number() {
        return Err(item.error(format!(
            "invalid rate {}: a unit is missing: write \"{n}/s\", \"{n}/m\" or \"{n}/h\"",
            item.node.describe()
        )));
    }
    let text = item.str("a rate such as 10/s")?;
    // RateError's message quotes the text and lists the units.
    text.parse::<Rate>().map_err(|e| item.error(e.to_string()))
}

/// The shape of a window, concurrency or quota limit.
fn shape(fields: &Fields<'_>, algorithm: Algorithm, canonical: &mut Canonical) -> Result<Shape, Invalid> {
    match algorithm {
        Algorithm::Concurrency => {
            let lease = match fields.get("lease") {
                Some(l) => positive_duration(l, "lease")?,
                None => DEFAULT_LEASE,
            };
            canonical.field("lease", duration::format(lease));
            Ok(Shape::Concurrency(lease))
        }
        Algorithm::Quota => {
            let period_item = fields.require("period", "day, week or month")?;
            let period_name = period_item.str("a period")?;
            let anchor = fields.get("anchor");
            let period = match period_name {
                "day" => {
                    if let Some(a) = &anchor {
                        return Err(
                            a.error("anchor does not apply to period day (days begin at local midnight)")
                        );
                    }
                    Period::Day
                }
                "week" => Period::Week {
                    starts_on: match &anchor {
                        Some(a) => weekday(a)?,
                        None => Weekday::Monday,
                    },
                },
                "month" => Period::Month {
                    anchor_day: match &anchor {
                        Some(a) => {
                            let day = a.u64_at_least("anchor", 1)?;
                            u8::try_from(day).ok().filter(|d| *d <= 31).ok_or_else(|| {
                                a.error(format!("invalid anchor {day}: a day of the month is 1 to 31"))
                            })?
                        }
                        None => 1,
                    },
                },
                other => {
                    return Err(period_item.error(format!(
                        "unknown period {other:?}: expected day, week or month{}",
                        did_you_mean(other, ["day", "week", "month"])
                    )));
                }
            };
            let zone_item = fields.get("time_zone");
            let zone = match &zone_item {
                Some(z) => z.str("an IANA time zone such as Europe/Berlin")?,
                None => "UTC",
            };
            let calendar = Calendar::try_new(period, zone).map_err(|e| {
                zone_item.as_ref().or(anchor.as_ref()).unwrap_or(&period_item).error(e.to_string())
            })?;
            let period_text = match period {
                Period::Day => "day".to_owned(),
                Period::Week { starts_on } => format!("week from {}", starts_on.to_monday_one_offset()),
                Period::Month { anchor_day } => format!("month from {anchor_day}"),
            };
            canonical.field("period", period_text).field("time_zone", calendar.time_zone_name());
            Ok(Shape::Quota(calendar))
        }
        _ => {
            let window_item = fields.require("window", "e.g. window: 60s")?;
            let window = positive_duration(window_item, "window")?;
            canonical.field("window", duration::format(window));
            Ok(Shape::Window(algorithm, window))
        }
    }
}

fn weekday(item: &Item<'_>) -> Result<Weekday, Invalid> {
    let text = item.text("a weekday")?.to_ascii_lowercase();
    let days = [
        ("monday", Weekday::Monday),
        ("tuesday", Weekday::Tuesday),
        ("wednesday", Weekday::Wednesday),
        ("thursday", Weekday::Thursday),
        ("friday", Weekday::Friday),
        ("saturday", Weekday::Saturday),
        ("sunday", Weekday::Sunday),
    ];
    days.iter()
        .find(|(name, _)| *name == text || (text.len() == 3 && name.starts_with(text.as_str())))
        .map(|(_, day)| *day)
        .ok_or_else(|| {
            item.error(format!(
                "invalid anchor {}: a week starts on a weekday, monday to sunday",
                item.node.describe()
            ))
        })
}

/// `limit: 100` or `limit: {by: plan, values: {free: 100, pro: 10000}, default: 10}`.
fn count<'a>(item: Item<'a>, vocabulary: &Vocabulary) -> Result<Count<'a>, Invalid> {
    if !item.is_map() {
        let n = item.u64_at_least("limit", 1)?;
        return Ok(Count::One(NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN)));
    }
    let fields = item.fields("a limit that varies by a descriptor", Some(&["by", "values", "default"]))?;
    let by = fields.require("by", "the descriptor the limit varies with, e.g. by: plan")?;
    let descriptor = by.str("a descriptor name")?;
    vocabulary.check(descriptor, by)?;
    let values_item =
        fields.require("values", "the limit for each value, e.g. values: {free: 100, pro: 10000}")?;
    let values_fields = values_item.fields("limits by value", None)?;
    if values_fields.len() == 0 {
        return Err(values_item.error("values is empty: give the limit for at least one value"));
    }
    let mut values = Vec::new();
    for (value, _, entry) in values_fields.iter() {
        let n = entry.u64_at_least("limit", 1)?;
        values.push((value.to_owned(), NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN), entry));
    }
    let default = match fields.get("default") {
        Some(d) => {
            let n = d.u64_at_least("limit", 1)?;
            Some((NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN), d))
        }
        None => None,
    };
    Ok(Count::By { descriptor: descriptor.to_owned(), values, default })
}

const OVERAGE_WITHOUT_BY: &str =
    "overage applies only to a limit that varies by a descriptor (limit: {by: plan, values: {...}})";

/// The limit (and its variants) of a window, concurrency or quota rule.
fn counted(
    fields: &Fields<'_>,
    shape: &Shape,
    count: &Count<'_>,
    limit_item: &Item<'_>,
    canonical: &mut Canonical,
) -> Result<(Limit, Option<ByDescriptor>), Invalid> {
    let overage = fields.get("overage");
    match count {
        Count::One(n) => {
            if let Some(o) = overage {
                return Err(o.error(OVERAGE_WITHOUT_BY));
            }
            canonical.field("limit", n.get());
            Ok((shape.limit(*n, limit_item)?, None))
        }
        Count::By { descriptor, values, default } => {
            let mut actions = match overage {
                Some(o) => overage_actions(&o, values)?,
                None => Vec::new(),
            };
            let mut by = ByDescriptor::new(descriptor.as_str());
            for (value, n, at) in values {
                let action = actions.iter().find(|(v, _)| v == value).map(|(_, a)| *a);
                by = by.variant(value.as_str(), shape.limit(*n, at)?, action);
            }
            let base = match default {
                Some((n, at)) => shape.limit(*n, at)?,
                None => {
                    // Values not listed are not subject to the rule; the rule's own limit is never
                    // used but must exist: take the first variant's.
                    by = by.only_listed();
                    let (_, n, at) = &values[0];
                    shape.limit(*n, at)?
                }
            };
            let mut counts: Vec<(&str, u64)> = values.iter().map(|(v, n, _)| (v.as_str(), n.get())).collect();
            counts.sort_unstable();
            actions.sort_by(|a, b| a.0.cmp(&b.0));
            let actions: Vec<(&str, &str)> =
                actions.iter().map(|(v, a)| (v.as_str(), action_name(*a))).collect();
            canonical
                .field("limit.by", descriptor)
                .field("limit.values", counts)
                .field("limit.default", default.as_ref().map(|(n, _)| n.get()))
                .field("overage", &actions);
            Ok((base, Some(by)))
        }
    }
}

/// `overage: {free: degrade, enterprise: deny}`: the action per value when the limit is exceeded.
fn overage_actions(
    item: &Item<'_>,
    values: &[(String, NonZeroU64, Item<'_>)],
) -> Result<Vec<(String, Action)>, Invalid> {
    let fields = item.fields("actions by value", None)?;
    let mut actions = Vec::new();
    for (value, key, action_item) in fields.iter() {
        if !values.iter().any(|(v, ..)| v == value) {
            let listed: Vec<&str> = values.iter().map(|(v, ..)| v.as_str()).collect();
            return Err(key.error(format!(
                "overage for {value:?}, which has no limit in limit.values (values: {})",
                listed.join(", ")
            )));
        }
        let action = match action_item.str("deny or degrade")? {
            "deny" => Action::Deny,
            "degrade" | "tag" => Action::Tag,
            "shadow" => Action::Shadow,
            other => {
                return Err(action_item.error(format!(
                    "unknown overage {other:?}: expected deny, degrade (allow and tag) or shadow{}",
                    did_you_mean(other, ["deny", "degrade", "shadow", "tag"])
                )));
            }
        };
        actions.push((value.to_owned(), action));
    }
    Ok(actions)
}

/// A condition in `match`: a value, a list of values, or `{present: true}`.
fn condition(item: &Item<'_>) -> Result<Condition, Invalid> {
    match &item.node.value {
        Value::Map(_) => {
            let fields = item.fields("a condition", Some(&["present", "not"]))?;
            match (fields.get("present"), fields.get("not")) {
                (Some(present), None) if present.bool()? => Ok(Condition::Present),
                (Some(present), None) => Err(present.error(
                    "present: false is not supported (a rule cannot require a descriptor to be absent): \
                     remove the condition",
                )),
                (None, Some(not)) => Ok(Condition::NoneOf(values(&not)?)),
                (Some(present), Some(_)) => {
                    Err(present.error("write either {present: true} or {not: [...]}"))
                }
                (None, None) => Err(item.error("expected {present: true} or {not: [values]}")),
            }
        }
        Value::Seq(_) => Ok(Condition::OneOf(values(item)?)),
        Value::Null => {
            Err(item.error("expected a value, a list of values, {present: true} or {not: [values]}"))
        }
        _ => Ok(Condition::OneOf(vec![item.text("a descriptor value")?.into_owned()])),
    }
}

/// A value or a non-empty list of values.
fn values(item: &Item<'_>) -> Result<Vec<String>, Invalid> {
    if !matches!(item.node.value, Value::Seq(_)) {
        return Ok(vec![item.text("a descriptor value")?.into_owned()]);
    }
    let elements = item.elements("a list of values")?;
    if elements.is_empty() {
        return Err(item.error("an empty list matches nothing: list at least one value"));
    }
    elements.iter().map(|e| e.text("a descriptor value").map(|t| t.into_owned())).collect()
}

/// `key: [user]`, `key: user`, `key: []` or `key: [global]`.
fn key(item: Item<'_>, vocabulary: &Vocabulary) -> Result<Vec<String>, Invalid> {
    let elements = match item.node.value {
        Value::Str(_) => vec![item],
        _ => item.elements("a list of descriptor names")?,
    };
    let mut key: Vec<String> = Vec::new();
    for element in &elements {
        let name = element.str("a descriptor name")?;
        if name == "global" {
            if elements.len() > 1 {
                return Err(element.error(
                    "\"global\" means one key for all requests and cannot be combined with other descriptors",
                ));
            }
            continue;
        }
        vocabulary.check(name, element.clone())?;
        if key.iter().any(|k| k == name) {
            return Err(element.error(format!("descriptor {name:?} appears twice in the key")));
        }
        key.push(name.to_owned());
    }
    Ok(key)
}

/// `rollout: 50%`, `rollout: 50` or `rollout: 12.5%`.
fn rollout(item: Item<'_>) -> Result<f64, Invalid> {
    let percent = match item.number() {
        Some(n) => Some(n),
        None => item.str("a percentage").ok().and_then(|s| {
            let s = s.trim();
            s.strip_suffix('%').unwrap_or(s).trim().parse::<f64>().ok()
        }),
    };
    let described = item.node.describe();
    match percent.filter(|p| p.is_finite()) {
        Some(p) if (0.0..=100.0).contains(&p) => Ok(p),
        Some(p) if p > 100.0 => Err(item.error(format!("invalid rollout {described}: above 100%"))),
        _ => Err(item.error(format!(
            "invalid rollout {described}: expected a percentage from 0% to 100%, e.g. rollout: 50%"
        ))),
    }
}

/// An action's name in fingerprints.
fn action_name(action: Action) -> &'static str {
    match action {
        Action::Deny => "deny",
        Action::Shadow => "shadow",
        Action::Tag => "tag",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::yaml::parse_document;

    fn compile_text(text: &str) -> Result<Native, Invalid> {
        let root = parse_document(text).expect("valid YAML");
        compile(Item::root(&root))
    }

    /// A one-rule configuration with `body` as the rule's fields (indented by the caller).
    fn one_rule(body: &str) -> Result<Native, Invalid> {
        compile_text(&format!("rules:\n  - name: r\n{body}"))
    }

    fn error(text: &str) -> Invalid {
        compile_text(text).expect_err("an invalid configuration")
    }

    #[test]
    fn defaults() {
        let native = compile_text("rules: []\n").unwrap();
        assert_eq!(native.store, StoreConfig::Memory(MemoryConfig::default()));
        assert_eq!(native.headers, HeaderStyle::Both);
        assert!(native.rules.is_empty());
        assert!(compile_text("{}\n").unwrap().rules.is_empty());
    }

    #[test]
    fn store_kinds() {
        let memory =
            compile_text("store: {kind: memory, max_keys: 10, on_full: reject, sweep_interval: 1s}\n")
                .unwrap();
        assert_eq!(
            memory.store,
            StoreConfig::Memory(MemoryConfig {
                max_keys: 10,
                on_full: OnFull::Reject,
                sweep_interval: Duration::from_secs(1)
            })
        );
        let redis = compile_text("store: {kind: redis, url: 'redis://127.0.0.1:6379'}\n").unwrap();
        assert_eq!(
            redis.store,
            StoreConfig::Redis {
                url: "redis://127.0.0.1:6379".into(),
                prefix: DEFAULT_PREFIX.into(),
                deadline: DEFAULT_DEADLINE
            }
        );
        let cluster =
            compile_text("store:\n  kind: redis_cluster\n  urls: ['redis://a:1', 'redis://b:2']\n  prefix: fg\n  deadline: 20ms\n")
                .unwrap();
        assert_eq!(
            cluster.store,
            StoreConfig::RedisCluster {
                urls: vec!["redis://a:1".into(), "redis://b:2".into()],
                prefix: "fg".into(),
                deadline: Duration::from_millis(20)
            }
        );
    }

    #[test]
    fn store_settings_must_fit_the_kind() {
        let e = error("store:\n  kind: memory\n  url: redis://x\n");
        assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("store.url")));
        assert!(e.message.contains("does not apply to store kind memory"), "{}", e.message);
        let e = error("store: {kind: redis}\n");
        assert_eq!(e.field.as_deref(), Some("store.url"));
        let e = error("store: {kind: redis, url: 'http://x'}\n");
        assert!(e.message.contains("invalid Redis URL \"http://x\""), "{}", e.message);
        let e = error("store: {kind: redis_cluster, urls: []}\n");
        assert_eq!(e.field.as_deref(), Some("store.urls"));
        let e = error("store: {kind: mem}\n");
        assert!(e.message.contains("unknown store kind \"mem\""), "{}", e.message);
        let e = error("store: {max_keys: 0}\n");
        assert!(e.message.contains("invalid max_keys 0"), "{}", e.message);
        let e = error("store: {on_full: evict}\n");
        assert!(e.message.contains("unknown on_full \"evict\""), "{}", e.message);
    }

    #[test]
    fn header_styles() {
        for (text, style) in [
            ("ietf", HeaderStyle::Ietf),
            ("legacy", HeaderStyle::Legacy),
            ("both", HeaderStyle::Both),
            ("none", HeaderStyle::None),
        ] {
            assert_eq!(compile_text(&format!("headers: {text}\n")).unwrap().headers, style);
        }
        let e = error("headers: x-ratelimit\n");
        assert!(e.message.contains("\"x-ratelimit\""), "{}", e.message);
    }

    #[test]
    fn bucket_defaults() {
        let native = one_rule("    algorithm: token_bucket\n    rate: 600/m\n").unwrap();
        let Limit::TokenBucket(bucket) = native.rules[0].limit() else { panic!("a token bucket") };
        assert_eq!(bucket.burst(), 600, "a token bucket's burst defaults to the rate's count");
        let native = one_rule("    algorithm: gcra\n    rate: 5000/h\n").unwrap();
        let Limit::Gcra(gcra) = native.rules[0].limit() else { panic!("a gcra") };
        assert_eq!(gcra.burst(), 1, "a gcra's burst defaults to 1");
        let e = one_rule("    algorithm: gcra\n    rate: 10\n").unwrap_err();
        assert!(e.message.contains("\"10/s\""), "{}", e.message);
        let e = one_rule("    algorithm: token_bucket\n    rate: 1/d\n    burst: 1000000000000000\n")
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("rules[0].burst"));
    }

    #[test]
    fn concurrency_and_quota_defaults() {
        let native = one_rule("    algorithm: concurrency\n    limit: 4\n").unwrap();
        let Limit::Concurrency(c) = native.rules[0].limit() else { panic!("concurrency") };
        assert_eq!(c.lease(), DEFAULT_LEASE);
        let native = one_rule("    algorithm: quota\n    limit: 4\n    period: month\n").unwrap();
        let Limit::Quota(q) = native.rules[0].limit() else { panic!("quota") };
        assert_eq!(q.calendar().period(), Period::Month { anchor_day: 1 });
        assert_eq!(q.calendar().time_zone_name(), "UTC");
        let native = one_rule(
            "    algorithm: quota\n    limit: 4\n    period: week\n    anchor: sun\n    time_zone: Europe/Berlin\n",
        )
        .unwrap();
        let Limit::Quota(q) = native.rules[0].limit() else { panic!("quota") };
        assert_eq!(q.calendar().period(), Period::Week { starts_on: Weekday::Sunday });
        assert_eq!(q.calendar().time_zone_name(), "Europe/Berlin");
    }

    #[test]
    fn quota_anchors_fit_the_period() {
        let e = one_rule("    algorithm: quota\n    limit: 4\n    period: day\n    anchor: 1\n").unwrap_err();
        assert!(e.message.contains("anchor does not apply to period day"), "{}", e.message);
        let e =
            one_rule("    algorithm: quota\n    limit: 4\n    period: month\n    anchor: 32\n").unwrap_err();
        assert!(e.message.contains("invalid anchor 32"), "{}", e.message);
        let e = one_rule("    algorithm: quota\n    limit: 4\n    period: week\n    anchor: someday\n")
            .unwrap_err();
        assert!(e.message.contains("\"someday\""), "{}", e.message);
        let e = one_rule("    algorithm: quota\n    limit: 4\n    period: year\n").unwrap_err();
        assert!(e.message.contains("unknown period \"year\""), "{}", e.message);
    }

    #[test]
    fn descriptors_known_declared_and_headers() {
        let rule = "    key: [tier]\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
        let e = one_rule(rule).unwrap_err();
        assert!(e.message.contains("unknown descriptor \"tier\""), "{}", e.message);
        assert!(compile_text(&format!("descriptors: [tier]\nrules:\n  - name: r\n{rule}")).is_ok());
        let header =
            "    key: [header.x-api-key]\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
        assert!(one_rule(header).is_ok());
        let e = one_rule(&header.replace("x-api-key", "X-Api-Key")).unwrap_err();
        assert!(e.message.contains("\"header.x-api-key\""), "{}", e.message);
        let e = one_rule(&header.replace("x-api-key", "")).unwrap_err();
        assert!(e.message.contains("invalid header name"), "{}", e.message);
        let e = error("descriptors: [tier, tier]\n");
        assert_eq!(e.field.as_deref(), Some("descriptors[1]"));
        let e = error("descriptors: [global]\n");
        assert!(e.message.contains("reserved"), "{}", e.message);
    }

    #[test]
    fn key_forms() {
        let base = "    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
        for (key, expected) in [
            ("[user, tenant]", vec!["user", "tenant"]),
            ("user", vec!["user"]),
            ("[]", vec![]),
            ("[global]", vec![]),
        ] {
            let native = one_rule(&format!("    key: {key}\n{base}")).unwrap();
            assert_eq!(native.rules[0].key_descriptors(), expected.as_slice(), "key: {key}");
        }
        assert!(one_rule(base).unwrap().rules[0].key_descriptors().is_empty());
        let e = one_rule(&format!("    key: [user, user]\n{base}")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("rules[0].key[1]"));
        let e = one_rule(&format!("    key: [global, user]\n{base}")).unwrap_err();
        assert!(e.message.contains("cannot be combined"), "{}", e.message);
    }

    #[test]
    fn match_forms() {
        let base = "    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
        for condition in
            ["{route: 'POST /chat'}", "{method: [GET, POST]}", "{user: {present: true}}", "{plan: 1}", "{}"]
        {
            assert!(one_rule(&format!("    match: {condition}\n{base}")).is_ok(), "{condition}");
        }
        for (condition, field, says) in [
            ("{user: {present: false}}", "rules[0].match.user.present", "not supported"),
            ("{user: []}", "rules[0].match.user", "empty list"),
            ("{user: ~}", "rules[0].match.user", "expected a value"),
            ("{user: {exists: true}}", "rules[0].match.user.exists", "unknown field"),
            ("[user]", "rules[0].match", "expected conditions"),
        ] {
            let e = one_rule(&format!("    match: {condition}\n{base}")).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{condition}");
            assert!(e.message.contains(says), "{condition}: {}", e.message);
        }
    }

    #[test]
    fn limits_by_descriptor() {
        let base = "    key: [tenant]\n    algorithm: quota\n    period: month\n";
        let ok = one_rule(&format!(
            "{base}    limit: {{by: plan, values: {{free: 100, pro: 10000}}, default: 10}}\n    overage: {{free: degrade, pro: deny}}\n"
        ));
        assert!(ok.is_ok(), "{ok:?}");
        for (extra, field, says) in [
            ("    limit: {by: plan, values: {}}\n", "rules[0].limit.values", "empty"),
            ("    limit: {by: plan, values: {free: 0}}\n", "rules[0].limit.values.free", "invalid limit 0"),
            ("    limit: {by: plam, values: {free: 1}}\n", "rules[0].limit.by", "did you mean \"plan\""),
            ("    limit: {values: {free: 1}}\n", "rules[0].limit.by", "missing field"),
            (
                "    limit: {by: plan, values: {free: 1}}\n    overage: {pro: deny}\n",
                "rules[0].overage.pro",
                "no limit",
            ),
            (
                "    limit: {by: plan, values: {free: 1}}\n    overage: {free: explode}\n",
                "rules[0].overage.free",
                "unknown overage",
            ),
            ("    limit: 5\n    overage: {free: deny}\n", "rules[0].overage", "varies by a descriptor"),
        ] {
            let e = one_rule(&format!("{base}{extra}")).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{extra}");
            assert!(e.message.contains(says), "{extra}: {}", e.message);
        }
    }

    #[test]
    fn actions_rollouts_and_store_failures() {
        let base = "    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
        for (action, expected) in [("deny", Action::Deny), ("shadow", Action::Shadow), ("tag", Action::Tag)] {
            let native = one_rule(&format!("{base}    action: {action}\n")).unwrap();
            assert_eq!(native.rules[0].action_kind(), expected);
        }
        let e = one_rule(&format!("{base}    action: delay\n")).unwrap_err();
        assert!(e.message.contains("only available in-process"), "{}", e.message);
        for rollout in ["50%", "50", "12.5%", "0%", "100%", "100"] {
            assert!(one_rule(&format!("{base}    rollout: {rollout}\n")).is_ok(), "{rollout}");
        }
        for rollout in ["150%", "-1%", "half", "101", "inf%"] {
            let e = one_rule(&format!("{base}    rollout: {rollout}\n")).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("rules[0].rollout"), "{rollout}");
        }
        for policy in ["fail_open", "fail_closed", "local"] {
            assert!(one_rule(&format!("{base}    on_store_error: {policy}\n")).is_ok(), "{policy}");
        }
        let e = one_rule(&format!("{base}    on_store_error: retry\n")).unwrap_err();
        assert!(e.message.contains("unknown on_store_error \"retry\""), "{}", e.message);
    }

    #[test]
    fn rule_names_must_be_text() {
        let base = "    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
        let e = compile_text(&format!("rules:\n  - name: ''\n{base}")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("rules[0].name"));
        let e =
            compile_text("rules:\n  - algorithm: fixed_window\n    limit: 1\n    window: 1s\n").unwrap_err();
        assert!(e.message.contains("missing field \"name\""), "{}", e.message);
        // A number is a fine name: it is read as written.
        let native = compile_text(&format!("rules:\n  - name: 007\n{base}")).unwrap();
        assert_eq!(native.rules[0].name(), "007");
    }

    #[test]
    fn fingerprints_change_with_the_definition_only() {
        let a = "rules:\n  - name: r\n    match: {route: a, method: GET}\n    algorithm: fixed_window\n    limit: 1\n    window: 60s\n";
        let reordered = "rules:\n  - name: r\n    window: 1m\n    limit: 1\n    algorithm: fixed_window\n    match: {method: GET, route: a}\n";
        let changed = a.replace("limit: 1", "limit: 2");
        let fp = |t: &str| compile_text(t).unwrap().fingerprints[0].1;
        assert_eq!(fp(a), fp(reordered), "field order and spelling of equal durations do not matter");
        assert_ne!(fp(a), fp(&changed));
    }
}
