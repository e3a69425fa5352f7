//! envoyproxy/ratelimit configuration files, compiled into Floodgate rules.
//!
//! # The format
//!
//! ```yaml
//! domain: edge_proxy_per_ip
//! descriptors:
//!   - key: remote_address            # per client address
//!     rate_limit: {unit: second, requests_per_unit: 10}
//!   - key: remote_address            # this address is not limited at all
//!     value: 10.0.0.1
//!     rate_limit: {unlimited: true}
//!   - key: database
//!     value: users
//!     shadow_mode: true
//!     descriptors:
//!       - key: user
//!         rate_limit: {unit: minute, requests_per_unit: 100, name: users-per-user}
//! ```
//!
//! Envoy sends each descriptor of a request as an ordered list of entries (key, value) and
//! envoyproxy/ratelimit walks the tree with them: at each level an entry with a matching `value`
//! wins over one without; the limit found at the *last* entry applies, and only if the tree path
//! has exactly as many levels as the request's descriptor.
//!
//! # The mapping
//!
//! Every tree path ending in a `rate_limit` becomes one rule in the domain's namespace:
//! - algorithm `fixed_window`, window = the unit (1 s, 1 min, 1 h, 1 d, and — as envoyproxy/ratelimit
//!   counts them — a week of 7 days, a month of 30 days, a year of 365 days, all aligned to the
//!   Unix epoch), limit = `requests_per_unit`;
//! - name = `rate_limit.name` when given, else the path as envoyproxy/ratelimit names it in its
//!   statistics: `key_value.key2` (entries joined by `.`, a value — or a wildcard pattern — appended
//!   with `_`);
//! - conditions: the request descriptor's keys are exactly the path's keys, in order (descriptor
//!   [`ENVOY_KEYS`]); entries with a `value` must equal it, entries with a wildcard value (`*`
//!   anywhere, any number of times: `files/*`, `/api/*/action`) must match it;
//! - key: the entries without a value (one counter per value), and wildcard entries (one counter
//!   per matching value) unless `share_threshold: true` (every matching value shares one);
//! - `shadow_mode: true` → action `shadow`;
//! - at each level the tree walk prefers an entry whose value equals the request's, then the first
//!   wildcard entry that matches, then the entry without a value: a path entry loses to such
//!   siblings, so their values and patterns are excluded from the rule ([`Condition::NoneOf`],
//!   [`Condition::NotLike`]) at every level where it happens. This is how `unlimited: true` on a
//!   specific value stops the less specific limit;
//! - `unlimited: true` makes no rule of its own;
//! - `replaces: [{name: n}]` → [`Rule::replaces`]: when a request's descriptors match both, the
//!   replaced limit is not applied (neither checked nor charged), as in envoyproxy/ratelimit;
//! - `detailed_metric: true` on the limited entry, or `value_to_metric: true` on any entry of its
//!   path: the rule's decisions are also counted per value of its key (bounded: see the server's
//!   metrics), as envoyproxy/ratelimit puts the values into its statistics' names.
//!
//! Requests are mapped with [`envoy_descriptors`](floodgate_http::envoy::envoy_descriptors).
//!
//! # Not supported
//! - `requests_per_unit: 0` (refuse everything): Floodgate limits are at least 1 — refused with an
//!   error rather than silently allowing one request per unit.
//! - `replaces` naming no limit of the domain (a no-op in envoyproxy/ratelimit, most likely a
//!   typo): refused with an error; `replaces` on an `unlimited` rate_limit: refused.
//! - `quota_mode`, `metadata`: refused as unknown fields.
//!
//! # Envoy's limit override
//!
//! A descriptor Envoy sends with `limit` (a route's `RateLimitDescriptor.limit`:
//! `requests_per_unit` and `unit`) states that limit and window to the rules that apply to it,
//! as caller-stated limits ([`floodgate::stated`]): each rule of the domain takes them, up to the
//! domain's bound, on a counter of its own when they differ from the rule's. The bound is
//! Floodgate's own top-level field (envoyproxy/ratelimit has none):
//!
//! ```yaml
//! limit_override: { max_requests_per_unit: 1000000, max_unit: day }   # the default
//! limit_override: refuse                                               # overrides are an error
//! ```

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Action, Condition, Limit, Pattern, Rule};
use floodgate_core::FixedWindow;

use crate::doubles::InexactRule;
use crate::error::Invalid;
use crate::fingerprint::Canonical;
use crate::yaml::{Item, did_you_mean};
use floodgate_http::envoy::{ENVOY_KEYS, entry_names, keys_descriptor};

/// One domain's rules.
#[derive(Debug)]
pub(crate) struct Domain {
    pub(crate) name: String,
    /// Where the domain name is, to point at a duplicate.
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) rules: Vec<Rule>,
    /// `(rule name, fingerprint)` in rule order.
    pub(crate) fingerprints: Vec<(String, u64)>,
    /// The rules counted per value of their key too (`detailed_metric`, `value_to_metric`).
    pub(crate) detailed: Vec<String>,
    /// The first rule whose limit a Redis store could not decide (`requests_per_unit` of 2^52 or
    /// more): refused when the directory's store is Redis.
    pub(crate) inexact: Option<Box<InexactRule>>,
}

const TOP_FIELDS: &[&str] = &["domain", "descriptors", "limit_override"];

/// The default bound on Envoy's limit override: a million requests per unit.
pub(crate) const DEFAULT_MAX_OVERRIDE: u64 = 1_000_000;
/// The default longest unit of Envoy's limit override: a day.
pub(crate) const DEFAULT_MAX_OVERRIDE_UNIT: Duration = Duration::from_secs(86_400);

/// `limit_override`: the domain's bound on Envoy's per-descriptor limits, or `refuse`.
fn limit_override(item: Option<Item<'_>>) -> Result<Option<floodgate::Statable>, Invalid> {
    let bound = |n: u64, unit: Duration| {
        Some(floodgate::Statable::new().limit(NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN)).window(unit))
    };
    let Some(item) = item.filter(|i| !i.is_null()) else {
        return Ok(bound(DEFAULT_MAX_OVERRIDE, DEFAULT_MAX_OVERRIDE_UNIT));
    };
    if !item.is_map() {
        let text = item.str("refuse, or {max_requests_per_unit: N, max_unit: UNIT}")?;
        if text == "refuse" {
            return Ok(None);
        }
        return Err(item.error(format!(
            "unknown limit_override {text:?}: expected refuse, or {{max_requests_per_unit: N, max_unit: UNIT}}"
        )));
    }
    let fields = item.fields(
        "the bound on Envoy's limit override (e.g. {max_requests_per_unit: 1000000, max_unit: day})",
        Some(&["max_requests_per_unit", "max_unit"]),
    )?;
    let max = match fields.get("max_requests_per_unit") {
        Some(m) => m.u64_at_least("max_requests_per_unit", 1)?,
        None => DEFAULT_MAX_OVERRIDE,
    };
    let unit = match fields.get("max_unit") {
        Some(u) => {
            let text = u.str("a unit")?.to_ascii_lowercase();
            match UNITS.iter().find(|(name, _)| *name == text) {
                Some((_, secs)) => Duration::from_secs(*secs),
                None => {
                    return Err(u.error(format!(
                        "unknown unit {text:?}: expected second, minute, hour, day, week, month or year"
                    )));
                }
            }
        }
        None => DEFAULT_MAX_OVERRIDE_UNIT,
    };
    Ok(bound(max, unit))
}
const DESCRIPTOR_FIELDS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "shadow_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "descriptors",
];
const RATE_LIMIT_FIELDS: &[&str] = &["unit", "requests_per_unit", "unlimited", "name", "replaces"];
/// The units and their length in seconds, as envoyproxy/ratelimit counts them.
const UNITS: [(&str, u64); 7] = [
    ("second", 1),
    ("minute", 60),
    ("hour", 3600),
    ("day", 86_400),
    ("week", 7 * 86_400),
    ("month", 30 * 86_400),
    ("year", 365 * 86_400),
];

/// A descriptor entry of the tree.
#[derive(Debug)]
struct Entry<'a> {
    item: Item<'a>,
    key: String,
    value: Option<EntryValue>,
    limit: Option<Spec<'a>>,
    shadow: bool,
    /// `detailed_metric: true`.
    detailed: bool,
    /// `value_to_metric: true`.
    value_to_metric: bool,
    /// `share_threshold: true` (wildcard values only).
    share: bool,
    children: Vec<Entry<'a>>,
}

/// An entry's `value`: one value, or a pattern with `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum EntryValue {
    Exact(String),
    Wildcard(Pattern),
}

impl EntryValue {
    fn text(&self) -> &str {
        match self {
            EntryValue::Exact(v) => v,
            EntryValue::Wildcard(p) => p.as_str(),
        }
    }
}

/// A `rate_limit`.
#[derive(Debug)]
enum Spec<'a> {
    Limited {
        at: Item<'a>,
        window: Duration,
        per_unit: NonZeroU64,
        /// Where `requests_per_unit` is written.
        per_unit_at: Item<'a>,
        name: Option<(String, Item<'a>)>,
        replaces: Vec<(String, Item<'a>)>,
    },
    Unlimited,
}

/// Validates an envoyproxy/ratelimit document (its root is a mapping with `domain`).
pub(crate) fn compile(root: Item<'_>) -> Result<Domain, Invalid> {
    let fields = root.fields("an envoyproxy/ratelimit configuration", Some(TOP_FIELDS))?;
    let domain_item = fields.require("domain", "the rate limit domain")?;
    let domain = domain_item.text("a domain name")?.into_owned();
    if domain.is_empty() {
        return Err(domain_item.error("the domain is empty"));
    }
    let tree = match fields.get("descriptors").filter(|i| !i.is_null()) {
        Some(list) => entries(&list)?,
        None => Vec::new(),
    };
    let mut compiled = Compiled::default();
    let mut path: Vec<(&Entry<'_>, &[Entry<'_>])> = Vec::new();
    walk(&tree, &mut path, &domain, &mut compiled)?;
    let rules = resolve_replaces(compiled.rules, &compiled.explicit, &compiled.replaces)?;
    let rules = match limit_override(fields.get("limit_override"))? {
        Some(bound) => rules.into_iter().map(|r| r.statable(bound)).collect(),
        None => rules,
    };
    Ok(Domain {
        name: domain,
        line: domain_item.node.line,
        column: domain_item.node.column,
        rules,
        fingerprints: compiled.fingerprints,
        detailed: compiled.detailed,
        inexact: compiled.inexact,
    })
}

/// Parses one level of `descriptors`.
fn entries<'a>(list: &Item<'a>) -> Result<Vec<Entry<'a>>, Invalid> {
    let mut out: Vec<Entry<'a>> = Vec::new();
    for item in list.elements("a list of descriptors")? {
        let fields = item.fields("a descriptor", Some(DESCRIPTOR_FIELDS))?;
        let key_item = fields.require("key", "every descriptor needs a key, e.g. key: remote_address")?;
        let key = key_item.text("a descriptor key")?.into_owned();
        if key.is_empty() {
            return Err(key_item.error("the key is empty"));
        }
        if key == ENVOY_KEYS {
            return Err(key_item.error(format!("{ENVOY_KEYS:?} is reserved by Floodgate")));
        }
        let value = match fields.get("value").filter(|v| !v.is_null()) {
            // An empty value is the same as none, as in envoyproxy/ratelimit.
            Some(v) => {
                Some(v.text("a descriptor value")?.into_owned()).filter(|t| !t.is_empty()).map(|text| {
                    if text.contains('*') {
                        EntryValue::Wildcard(Pattern::new(text))
                    } else {
                        EntryValue::Exact(text)
                    }
                })
            }
            None => None,
        };
        if let Some(first) = out.iter().find(|e| e.key == key && e.value == value) {
            let what = match &value {
                Some(v) => format!("key {key:?} with value {:?}", v.text()),
                None => format!("key {key:?} without a value"),
            };
            return Err(
                item.error(format!("duplicate descriptor: {what} (first at line {})", first.item.node.line))
            );
        }
        let limit = match fields.get("rate_limit").filter(|r| !r.is_null()) {
            Some(r) => Some(spec(&r)?),
            None => None,
        };
        let shadow = match fields.get("shadow_mode") {
            Some(s) => s.bool()?,
            None => false,
        };
        let flag = |name: &str| fields.get(name).map_or(Ok(false), |f| f.bool());
        let detailed = flag("detailed_metric")?;
        let value_to_metric = flag("value_to_metric")?;
        let share = flag("share_threshold")?;
        if share && !matches!(value, Some(EntryValue::Wildcard(_))) {
            let at = fields.get("share_threshold").unwrap_or(item.clone());
            return Err(at.error("share_threshold applies only to a wildcard value (one with `*`)"));
        }
        let children = match fields.get("descriptors").filter(|d| !d.is_null()) {
            Some(list) => entries(&list)?,
            None => Vec::new(),
        };
        out.push(Entry { item, key, value, limit, shadow, detailed, value_to_metric, share, children });
    }
    Ok(out)
}

/// Parses a `rate_limit`.
fn spec<'a>(item: &Item<'a>) -> Result<Spec<'a>, Invalid> {
    let fields = item.fields("a rate_limit", Some(RATE_LIMIT_FIELDS))?;
    let name = match fields.get("name") {
        Some(n) => {
            let text = n.text("a limit name")?.into_owned();
            if text.is_empty() || text.chars().any(char::is_control) {
                return Err(n.error(format!("invalid name {}", n.node.describe())));
            }
            Some((text, n))
        }
        None => None,
    };
    let mut replaces = Vec::new();
    if let Some(list) = fields.get("replaces").filter(|r| !r.is_null()) {
        for entry in list.elements("a list of {name: ...}")? {
            let replaced = entry.fields("a replaced limit", Some(&["name"]))?;
            let replaced_name = replaced.require("name", "the name of the replaced limit")?;
            let text = replaced_name.text("a limit name")?;
            if text.is_empty() {
                return Err(replaced_name.error("the name is empty"));
            }
            if name.as_ref().is_some_and(|(n, _)| *n == text) {
                return Err(replaced_name.error(format!("a limit cannot replace itself ({text:?})")));
            }
            replaces.push((text.into_owned(), replaced_name));
        }
    }
    let unlimited = match fields.get("unlimited") {
        Some(u) => u.bool()?,
        None => false,
    };
    if unlimited {
        if let Some(unit) = fields.key_item("unit") {
            return Err(unit.error("unit does not apply to an unlimited rate_limit"));
        }
        if let Some((_, at)) = replaces.first() {
            return Err(at.error(
                "replaces on an unlimited rate_limit is not supported: give the replacing limit a unit and \
                 requests_per_unit",
            ));
        }
        return Ok(Spec::Unlimited);
    }
    let unit_item =
        fields.require("unit", "second, minute, hour, day, week, month or year (or unlimited: true)")?;
    let unit = unit_item.str("a unit")?;
    let Some((_, secs)) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) else {
        return Err(unit_item.error(format!(
            "unknown unit {unit:?}: expected second, minute, hour, day, week, month or year{}",
            did_you_mean(unit, UNITS.iter().map(|(u, _)| *u))
        )));
    };
    let per_unit_item =
        fields.require("requests_per_unit", "how many requests per unit, e.g. requests_per_unit: 10")?;
    if matches!(per_unit_item.node.value, crate::yaml::Value::Int(0)) {
        return Err(per_unit_item.error(
            "requests_per_unit 0 (refuse every request) cannot be imported: a Floodgate limit allows at \
             least 1 per window; block such clients before the rate limiter",
        ));
    }
    let per_unit = per_unit_item.u64_at_least("requests_per_unit", 1)?;
    Ok(Spec::Limited {
        at: item.clone(),
        window: Duration::from_secs(*secs),
        per_unit: NonZeroU64::new(per_unit).unwrap_or(NonZeroU64::MIN),
        per_unit_at: per_unit_item,
        name,
        replaces,
    })
}

/// What the walk of a domain's tree compiles.
#[derive(Debug, Default)]
struct Compiled<'a> {
    rules: Vec<Rule>,
    /// The first rule a store computing in doubles could not decide.
    inexact: Option<Box<InexactRule>>,
    fingerprints: Vec<(String, u64)>,
    /// `(name, line)` of every rule so far, to point a duplicate at the first.
    seen: Vec<(String, usize)>,
    /// The names given with `rate_limit.name`: only those can be replaced.
    explicit: Vec<String>,
    /// Per rule (by position): the names it replaces, and where.
    replaces: Vec<Vec<(String, Item<'a>)>>,
    detailed: Vec<String>,
}

/// Compiles every limited path under `level` (whose entries are siblings), depth first.
fn walk<'t, 'a>(
    level: &'t [Entry<'a>],
    path: &mut Vec<(&'t Entry<'a>, &'t [Entry<'a>])>,
    domain: &str,
    out: &mut Compiled<'a>,
) -> Result<(), Invalid> {
    for entry in level {
        path.push((entry, level));
        if let Some(Spec::Limited { at, window, per_unit, per_unit_at, name, replaces }) = &entry.limit {
            let (rule, fingerprint) =
                rule(path, domain, at, *window, *per_unit, name.as_ref(), replaces, &mut out.seen)?;
            if out.inexact.is_none() {
                out.inexact = InexactRule::of(&rule, per_unit_at).map(Box::new);
            }
            if let Some((explicit, _)) = name {
                out.explicit.push(explicit.clone());
            }
            if entry.detailed || path.iter().any(|(e, _)| e.value_to_metric) {
                out.detailed.push(rule.name().to_owned());
            }
            out.fingerprints.push((rule.name().to_owned(), fingerprint));
            out.replaces.push(replaces.clone());
            out.rules.push(rule);
        }
        walk(&entry.children, path, domain, out)?;
        path.pop();
    }
    Ok(())
}

/// Applies each rule's `replaces`, which may name limits further down the file: every replaced
/// name must be a `rate_limit.name` of the domain.
fn resolve_replaces(
    rules: Vec<Rule>,
    explicit: &[String],
    replaces: &[Vec<(String, Item<'_>)>],
) -> Result<Vec<Rule>, Invalid> {
    rules
        .into_iter()
        .zip(replaces)
        .map(|(rule, replaced)| {
            for (name, at) in replaced {
                if !explicit.contains(name) {
                    return Err(at.error(format!(
                        "replaces {name:?}, but no rate_limit of this domain is named so (replaces refers to \
                         rate_limit.name)"
                    )));
                }
            }
            Ok(if replaced.is_empty() {
                rule
            } else {
                rule.replaces(replaced.iter().map(|(n, _)| n.as_str()))
            })
        })
        .collect()
}

/// The rule of the path ending in a limited entry.
#[allow(clippy::too_many_arguments)] // one call site, the walk's; each argument is a part of the path's limit
fn rule(
    path: &[(&Entry<'_>, &[Entry<'_>])],
    domain: &str,
    at: &Item<'_>,
    window: Duration,
    per_unit: NonZeroU64,
    name: Option<&(String, Item<'_>)>,
    replaces: &[(String, Item<'_>)],
    seen: &mut Vec<(String, usize)>,
) -> Result<(Rule, u64), Invalid> {
    let keys: Vec<&str> = path.iter().map(|(e, _)| e.key.as_str()).collect();
    let names = entry_names(&keys);
    let (name, name_at) = match name {
        Some((n, item)) => (n.clone(), item),
        None => (derived_name(path), at),
    };
    if let Some((_, line)) = seen.iter().find(|(n, _)| *n == name) {
        return Err(name_at.error(format!("duplicate rule name {name:?} (first at line {line})")));
    }
    seen.push((name.clone(), name_at.node.line));

    let limit: Limit = FixedWindow::try_new(per_unit, window).map_err(|e| at.error(e.to_string()))?.into();
    let mut rule = Rule::new(name.as_str(), limit).when(ENVOY_KEYS, keys_descriptor(&keys));
    let mut key = Vec::new();
    let mut canonical = Canonical::default();
    canonical.field("domain", domain).field("name", &name);
    for (level, ((entry, siblings), descriptor)) in path.iter().zip(&names).enumerate() {
        let value = entry.value.as_ref().map(EntryValue::text);
        canonical.field("entry", (&entry.key, value));
        // The siblings that the tree walk prefers to this entry: an equal value first, then the
        // first matching wildcard, then no value.
        let same_key = || siblings.iter().filter(|s| s.key == entry.key);
        let exact: Vec<&str> = same_key()
            .filter_map(|s| match &s.value {
                Some(EntryValue::Exact(v)) => Some(v.as_str()),
                _ => None,
            })
            .collect();
        let mut wildcards = same_key().filter_map(|s| match &s.value {
            Some(EntryValue::Wildcard(p)) => Some(p),
            _ => None,
        });
        let preferred: (Vec<&str>, Vec<&Pattern>) = match &entry.value {
            Some(EntryValue::Exact(v)) => {
                rule = rule.when(descriptor.as_str(), v.as_str());
                (Vec::new(), Vec::new())
            }
            Some(EntryValue::Wildcard(pattern)) => {
                rule = rule.when_condition(descriptor.as_str(), Condition::Like(pattern.clone()));
                if entry.share {
                    canonical.field("shared", level);
                } else {
                    key.push(descriptor.clone());
                }
                (exact, wildcards.by_ref().take_while(|p| *p != pattern).collect())
            }
            None => {
                key.push(descriptor.clone());
                (exact, wildcards.collect())
            }
        };
        let (mut values, mut patterns) = preferred;
        if !values.is_empty() {
            values.sort_unstable();
            canonical.field("excluded", (level, &values));
            let values = values.iter().map(|v| v.to_string()).collect();
            rule = rule.when_condition(descriptor.as_str(), Condition::NoneOf(values));
        }
        if !patterns.is_empty() {
            patterns.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
            let texts: Vec<&str> = patterns.iter().map(|p| p.as_str()).collect();
            canonical.field("excluded_patterns", (level, &texts));
            rule = rule.when_condition(
                descriptor.as_str(),
                Condition::NotLike(patterns.into_iter().cloned().collect()),
            );
        }
    }
    let last = path.last().map(|(e, _)| *e);
    let shadow = last.is_some_and(|e| e.shadow);
    canonical
        .field("window", window.as_secs())
        .field("requests_per_unit", per_unit.get())
        .field("shadow", shadow);
    if !replaces.is_empty() {
        let names: Vec<&str> = replaces.iter().map(|(n, _)| n.as_str()).collect();
        canonical.field("replaces", names);
    }
    if last.is_some_and(|e| e.detailed) || path.iter().any(|(e, _)| e.value_to_metric) {
        canonical.field("detailed", true);
    }
    if shadow {
        rule = rule.action(Action::Shadow);
    }
    Ok((rule.key(key), canonical.hash()))
}

/// The path as envoyproxy/ratelimit names it in statistics: `key_value.key2`.
fn derived_name(path: &[(&Entry<'_>, &[Entry<'_>])]) -> String {
    let parts: Vec<String> = path
        .iter()
        .map(|(e, _)| match &e.value {
            Some(v) => format!("{}_{}", e.key, v.text()),
            None => e.key.clone(),
        })
        .collect();
    parts.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse_document;

    fn compile_text(text: &str) -> Result<Domain, Invalid> {
        let root = parse_document(text).expect("valid YAML");
        compile(Item::root(&root))
    }

    fn names(domain: &Domain) -> Vec<&str> {
        domain.rules.iter().map(|r| r.name()).collect()
    }

    #[test]
    fn paths_become_rules_named_like_envoy_statistics() {
        let domain = compile_text(
            "domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    descriptors:
      - key: collection
        rate_limit: {unit: MINUTE, requests_per_unit: 100}
  - key: region
    value: eu
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1, name: eu-users}
",
        )
        .unwrap();
        assert_eq!(domain.name, "mongo_cps");
        assert_eq!(names(&domain), ["database_users", "database.collection", "eu-users"]);
        let Limit::FixedWindow(w) = domain.rules[1].limit() else { panic!("a fixed window") };
        assert_eq!(w.window(), Duration::from_secs(60));
        assert_eq!(domain.rules[1].key_descriptors(), ["database", "collection"]);
        assert!(domain.rules[0].key_descriptors().is_empty());
        assert_eq!(domain.rules[2].key_descriptors(), ["user"]);
    }

    #[test]
    fn shadow_mode_shadows() {
        let domain = compile_text(
            "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        )
        .unwrap();
        assert_eq!(domain.rules[0].action_kind(), Action::Shadow);
    }

    #[test]
    fn unlimited_makes_no_rule() {
        let domain = compile_text(
            "domain: d
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unlimited: true, name: trusted}
",
        )
        .unwrap();
        assert_eq!(names(&domain), ["remote_address"]);
    }

    #[test]
    fn refuses_what_cannot_be_imported() {
        for (text, field, says) in [
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: exact\n    share_threshold: true\n",
                "descriptors[0].share_threshold",
                "only to a wildcard",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: nobody}]}\n",
                "descriptors[0].rate_limit.replaces[0].name",
                "no rate_limit of this domain is named so",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, replaces: [{name: x}]}\n",
                "descriptors[0].rate_limit.replaces[0].name",
                "not supported",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
                "descriptors[0].rate_limit.unit",
                "week, month or year",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
                "descriptors[0].rate_limit.requests_per_unit",
                "cannot be imported",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
                "descriptors[0].rate_limit.unit",
                "does not apply",
            ),
            ("domain: d\ndescriptors:\n  - key: k\n  - key: k\n", "descriptors[1]", "duplicate descriptor"),
            ("domain: d\ndescriptors:\n  - value: v\n", "descriptors[0].key", "missing field"),
            ("domain: d\ndescriptors:\n  - key: envoy.keys\n", "descriptors[0].key", "reserved"),
            ("domain: ''\n", "domain", "empty"),
            ("domain: d\nrules: []\n", "rules", "unknown field"),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n",
                "descriptors[0].rate_limit.replaces[0].name",
                "replace itself",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: x}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1, name: x}\n",
                "descriptors[1].rate_limit.name",
                "duplicate rule name",
            ),
        ] {
            let e = compile_text(text).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{text}");
            assert!(e.message.contains(says), "{text}: {}", e.message);
        }
    }

    #[test]
    fn exclusions_at_two_levels_compile() {
        let domain = compile_text(
            "domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: b
        value: y
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
    value: x
",
        )
        .expect("values carved out at two levels are expressible");
        assert_eq!(names(&domain), ["a.b", "a.b_y"]);
    }

    #[test]
    fn fingerprints_are_per_path() {
        let text =
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        let fp = |t: &str| compile_text(t).unwrap().fingerprints[0].1;
        assert_eq!(fp(text), fp(text));
        assert_ne!(fp(text), fp(&text.replace("second", "minute")));
        assert_ne!(fp(text), fp(&text.replace("domain: d", "domain: e")));
    }

    #[test]
    fn wildcard_values_match_after_exact_ones_and_before_no_value_in_file_order() {
        let domain = compile_text(
            "domain: d
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*/action
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: /api/health
    rate_limit: {unlimited: true}
",
        )
        .unwrap();
        assert_eq!(names(&domain), ["path", "path_/api/*/action", "path_/api/*"]);
        let r = |i: usize| &domain.rules[i];
        // Each matching value of a wildcard has a counter of its own, unless it shares one.
        assert_eq!(r(1).key_descriptors(), ["path"]);
        assert!(r(2).key_descriptors().is_empty(), "share_threshold: one counter for every match");
        let holds = |rule: &Rule, value: &str| {
            rule.conditions().iter().filter(|(n, _)| n == "path").all(|(_, c)| c.holds(Some(value)))
        };
        for (value, expected) in [
            ("/api/health", [false, false, false]),
            ("/api/v1/action", [false, true, false]),
            ("/api/v1/list", [false, false, true]),
            ("/home", [true, false, false]),
        ] {
            let got = [holds(r(0), value), holds(r(1), value), holds(r(2), value)];
            assert_eq!(got, expected, "{value}: exactly one rule, as the tree walk picks it");
        }
    }

    #[test]
    fn replaces_names_a_limit_of_the_domain_and_units_go_up_to_a_year() {
        let domain = compile_text(
            "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: week}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {replaces: [{name: specific_limit}], requests_per_unit: 10, unit: year}
",
        )
        .unwrap();
        assert_eq!(domain.rules[1].replaced(), [std::sync::Arc::<str>::from("specific_limit")]);
        assert!(domain.rules[0].replaced().is_empty());
        let window = |i: usize| match domain.rules[i].limit() {
            Limit::FixedWindow(w) => w.window(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (window(0), window(1)),
            (Duration::from_secs(7 * 86_400), Duration::from_secs(365 * 86_400))
        );
        assert_eq!(domain.detailed, ["key_2_value_2.user"]);
    }
}
