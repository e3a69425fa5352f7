//! `rlqs:`: Envoy's rate limit quota service (DESIGN.md §17; the guide is `docs/rlqs.md`).
//!
//! ```yaml
//! rlqs:
//!   reporting_interval: 1s      # the Envoys' reporting_interval: shares are recomputed this often
//!   assignment_ttl: 10s         # how long an assignment holds without being re-sent
//!   abandon_after: 60s          # a bucket no stream reports for this long is abandoned
//!   floor: 10%                  # of an equal share, kept by every stream however idle
//!   change_threshold: 5%        # a share is re-sent when it moves more than this
//!   domains:
//!     rlqs-example:
//!       - name: api
//!         match: { name: api }   # on the bucket id's keys and values, like descriptors
//!         key: [user]            # one global limit per value of `user` (optional)
//!         algorithm: fixed_window
//!         limit: 100
//!         window: 1s
//!       - name: health
//!         match: { name: health }
//!         blanket: allow_all     # or deny_all: no limit to share
//! ```
//!
//! A bucket is governed by the first rule of its domain that matches its id. A rule is an
//! ordinary rule's `name`, `match`, `key`, `algorithm` and parameters (`fixed_window`,
//! `sliding_window`, `sliding_log`, `token_bucket` or `gcra`), whose limit is global: it is split
//! among the streams that report the bucket. `strategy: requests_per_time_unit` sends a window
//! rule's shares as Envoy's `requests_per_time_unit` (the window must be 1s, 1m, 1h or 1d);
//! the default is `token_bucket`.

use std::collections::BTreeMap;
use std::time::Duration;

use floodgate::{Condition, Limit, LimitKind};

use super::descriptors::Vocabulary;
use super::positive_duration;
use super::rules;
use crate::algorithm;
use crate::error::Invalid;
use crate::fingerprint::Canonical;
use crate::yaml::{Item, alternatives, did_you_mean};

/// The `rlqs` section.
#[derive(Debug, Clone, PartialEq)]
pub struct RlqsConfig {
    /// How often the Envoys report, and so how often shares are recomputed (default 1 s).
    pub reporting_interval: Duration,
    /// How long an assignment holds unless re-sent (default 10 reporting intervals): what an Envoy
    /// keeps deciding on if this server goes away without saying so.
    pub assignment_ttl: Duration,
    /// A bucket that no stream has reported for this long is abandoned (default 60 s).
    pub abandon_after: Duration,
    /// The share every stream keeps however idle, as a fraction of an equal share (default 0.1).
    pub floor: f64,
    /// A share is re-sent when it moves by more than this fraction of itself (default 0.05), or
    /// when its assignment's TTL nears its end.
    pub change_threshold: f64,
    /// The bucket rules of each domain, in order (the first that matches a bucket governs it).
    pub domains: BTreeMap<String, Vec<BucketRule>>,
}

impl Default for RlqsConfig {
    fn default() -> Self {
        RlqsConfig {
            reporting_interval: Duration::from_secs(1),
            assignment_ttl: Duration::from_secs(10),
            abandon_after: Duration::from_secs(60),
            floor: 0.1,
            change_threshold: 0.05,
            domains: BTreeMap::new(),
        }
    }
}

/// One rule of a domain: which buckets, keyed how, granted what.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketRule {
    /// The rule's name, unique in its domain.
    pub name: String,
    /// Conditions on the bucket id's keys (all must hold).
    pub conditions: Vec<(String, Condition)>,
    /// The id keys whose values make a bucket group of its own (empty: one group for the rule).
    pub key: Vec<String>,
    /// What the rule grants.
    pub grant: Grant,
}

impl BucketRule {
    /// Whether the rule governs a bucket whose id is `id` (its keys and values).
    pub fn matches<'a>(&self, id: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.conditions.iter().all(|(key, condition)| condition.holds(id(key)))
    }
}

/// What a bucket rule grants.
#[derive(Debug, Clone, PartialEq)]
pub enum Grant {
    /// A global limit, split among the streams by demand, sent as `token_bucket` shares (or
    /// `requests_per_time_unit` with `per_time_unit`).
    Share {
        /// The global limit.
        limit: Limit,
        /// Send shares as `requests_per_time_unit` (a window rule whose window is 1s, 1m, 1h or 1d).
        per_time_unit: bool,
    },
    /// Every request allowed (`blanket: allow_all`).
    AllowAll,
    /// Every request denied (`blanket: deny_all`).
    DenyAll,
}

const FIELDS: &[&str] =
    &["reporting_interval", "assignment_ttl", "abandon_after", "floor", "change_threshold", "domains"];

/// The fields of a bucket rule besides the algorithm's parameters.
const RULE_FIELDS: &[&str] = &["name", "match", "key", "algorithm", "strategy", "blanket"];

/// The algorithms a share can be given for.
const SHAREABLE: &[LimitKind] = &[
    LimitKind::FixedWindow,
    LimitKind::SlidingWindow,
    LimitKind::SlidingLog,
    LimitKind::TokenBucket,
    LimitKind::Gcra,
];

/// Validates the `rlqs` section; returns it with a fingerprint per rule (`rlqs:<domain>/<rule>`)
/// and one of its settings (`rlqs`), for the audit diff.
pub(crate) fn compile(item: Item<'_>) -> Result<(RlqsConfig, Vec<(String, u64)>), Invalid> {
    let fields = item.fields("the rate limit quota service's settings", Some(FIELDS))?;
    let mut config = RlqsConfig::default();
    if let Some(i) = fields.get("reporting_interval") {
        config.reporting_interval = positive_duration(i.clone(), "reporting_interval")?;
        if config.reporting_interval < Duration::from_millis(100) {
            return Err(i.error("reporting_interval is below 100ms, the shortest Envoy's filter accepts"));
        }
    }
    config.assignment_ttl = config.reporting_interval * 10;
    if let Some(i) = fields.get("assignment_ttl") {
        config.assignment_ttl = positive_duration(i.clone(), "assignment_ttl")?;
        if config.assignment_ttl < config.reporting_interval * 3 {
            return Err(i.error(format!(
                "assignment_ttl must be at least 3 reporting intervals ({:?}), so that an assignment is \
                 renewed before it expires",
                config.reporting_interval * 3
            )));
        }
    }
    if let Some(i) = fields.get("abandon_after") {
        config.abandon_after = positive_duration(i.clone(), "abandon_after")?;
    }
    if config.abandon_after < config.reporting_interval * 2 {
        let at = fields.get("abandon_after").unwrap_or_else(|| item.clone());
        return Err(at.error(format!(
            "abandon_after must be at least 2 reporting intervals ({:?}): a bucket is reported once an interval",
            config.reporting_interval * 2
        )));
    }
    if let Some(i) = fields.get("floor") {
        config.floor = fraction(&i, "floor", 1.0)?;
    }
    if let Some(i) = fields.get("change_threshold") {
        config.change_threshold = fraction(&i, "change_threshold", 1.0)?;
    }
    let mut settings = Canonical::default();
    settings
        .field("reporting_interval", config.reporting_interval)
        .field("assignment_ttl", config.assignment_ttl)
        .field("abandon_after", config.abandon_after)
        .field("floor", config.floor)
        .field("change_threshold", config.change_threshold);
    let mut fingerprints = vec![("rlqs".to_owned(), settings.hash())];
    if let Some(domains) = fields.get("domains").filter(|i| !i.is_null()) {
        let entries = domains.fields("the domains, each a list of bucket rules", None)?;
        for (name, key, rules) in entries.iter() {
            if name.is_empty() {
                return Err(key.error("a domain name must not be empty"));
            }
            let mut compiled = Vec::new();
            let mut seen: Vec<(String, usize)> = Vec::new();
            for rule in rules.elements("a list of bucket rules")? {
                let (rule, fingerprint) = bucket_rule(rule, &mut seen)?;
                fingerprints.push((format!("rlqs:{name}/{}", rule.name), fingerprint));
                compiled.push(rule);
            }
            config.domains.insert(name.to_owned(), compiled);
        }
    }
    Ok((config, fingerprints))
}

/// One bucket rule, with its fingerprint.
fn bucket_rule(item: Item<'_>, seen: &mut Vec<(String, usize)>) -> Result<(BucketRule, u64), Invalid> {
    let mut allowed: Vec<&str> = RULE_FIELDS.to_vec();
    allowed.extend(algorithm::all_parameters());
    let fields = item.fields("a bucket rule", Some(&allowed))?;
    let blanket = match fields.get("blanket") {
        Some(b) => {
            let text = b.str("allow_all or deny_all")?;
            let grant = match text {
                "allow_all" => Grant::AllowAll,
                "deny_all" => Grant::DenyAll,
                other => {
                    return Err(b.error(format!(
                        "unknown blanket {other:?}: expected {}{}",
                        alternatives(["allow_all", "deny_all"]),
                        did_you_mean(other, ["allow_all", "deny_all"])
                    )));
                }
            };
            if let Some(extra) = fields.names().find(|n| !["name", "match", "key", "blanket"].contains(n)) {
                let at = fields.key_item(extra).unwrap_or_else(|| b.clone());
                return Err(at.error(format!(
                    "{extra} has no meaning beside blanket: a blanket rule allows or denies every request"
                )));
            }
            Some(grant)
        }
        None => None,
    };
    if let Some(grant) = blanket {
        let name_item = fields.require("name", "every rule needs a unique name, e.g. name: api")?;
        let name = name_item.text("a rule name")?.into_owned();
        if let Some((_, line)) = seen.iter().find(|(n, _)| *n == name) {
            return Err(
                name_item.error(format!("duplicate rule name {name:?} (first defined at line {line})"))
            );
        }
        seen.push((name.clone(), name_item.node.line));
        let conditions = match fields.get("match").filter(|i| !i.is_null()) {
            Some(m) => rules::conditions(m, &Vocabulary::open())?,
            None => Vec::new(),
        };
        let key = match fields.get("key").filter(|i| !i.is_null()) {
            Some(k) => rules::key_of(k, &Vocabulary::open())?,
            None => Vec::new(),
        };
        let mut canonical = Canonical::default();
        canonical
            .field("name", &name)
            .field("match", &conditions)
            .field("key", &key)
            .field("blanket", &grant);
        return Ok((BucketRule { name, conditions, key, grant }, canonical.hash()));
    }
    // The rest as an ordinary rule reads it; `strategy` is ours.
    let strategy = fields.get("strategy");
    let (rule, fingerprint) = rules::compile_with(item.clone(), &Vocabulary::open(), seen, &["strategy"])?;
    let limit_item = fields.get("algorithm");
    let limit = rule.limit().clone();
    let at = limit_item.unwrap_or_else(|| item.clone());
    if !SHAREABLE.contains(&limit.kind()) {
        return Err(at.error(format!(
            "the {} algorithm cannot be shared among Envoys: RLQS rules take {}",
            limit.kind(),
            SHAREABLE.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
        )));
    }
    if rule.statable_values().is_some() {
        return Err(
            at.error("RLQS limits are the configuration's: a limit from the request has no request here")
        );
    }
    if rule.varies_by().is_some() {
        return Err(at.error(
            "an RLQS limit is one count: a limit that varies by a descriptor has no descriptors here",
        ));
    }
    let per_time_unit = match strategy {
        None => false,
        Some(s) => match s.str("token_bucket or requests_per_time_unit")? {
            "token_bucket" => false,
            "requests_per_time_unit" => {
                let window = match &limit {
                    Limit::FixedWindow(a) => Some(a.window()),
                    Limit::SlidingWindow(a) => Some(a.window()),
                    Limit::SlidingLog(a) => Some(a.window()),
                    _ => None,
                };
                let unit = [1, 60, 3600, 86_400].map(Duration::from_secs);
                if !window.is_some_and(|w| unit.contains(&w)) {
                    return Err(s.error(
                        "requests_per_time_unit needs a window rule whose window is one of Envoy's units: 1s, 1m, \
                         1h or 1d",
                    ));
                }
                true
            }
            other => {
                return Err(s.error(format!(
                    "unknown strategy {other:?}: expected token_bucket or requests_per_time_unit{}",
                    did_you_mean(other, ["token_bucket", "requests_per_time_unit"])
                )));
            }
        },
    };
    let mut canonical = Canonical::default();
    canonical.field("rule", fingerprint).field("per_time_unit", per_time_unit);
    let rule = BucketRule {
        name: rule.name().to_owned(),
        conditions: rule.conditions().to_vec(),
        key: rule.key_descriptors().to_vec(),
        grant: Grant::Share { limit, per_time_unit },
    };
    Ok((rule, canonical.hash()))
}

/// A fraction from 0 to `max`: `0.1`, `10%`.
fn fraction(item: &Item<'_>, what: &str, max: f64) -> Result<f64, Invalid> {
    let value = match item.number() {
        Some(n) => Some(n),
        None => item.str("a fraction").ok().and_then(|s| {
            let s = s.trim();
            s.strip_suffix('%').and_then(|p| p.trim().parse::<f64>().ok()).map(|p| p / 100.0)
        }),
    };
    match value.filter(|v| v.is_finite()) {
        Some(v) if (0.0..=max).contains(&v) => Ok(v),
        _ => Err(item.error(format!(
            "invalid {what} {}: expected a fraction from 0 to {max} or a percentage, e.g. 10%",
            item.node.describe()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse_document;

    fn compiled(text: &str) -> Result<RlqsConfig, String> {
        let root = parse_document(text).expect("valid YAML");
        compile(Item::root(&root)).map(|(c, _)| c).map_err(|e| {
            format!(
                "{}:{}: {}: {}",
                e.line.unwrap_or(0),
                e.column.unwrap_or(0),
                e.field.unwrap_or_default(),
                e.message
            )
        })
    }

    #[test]
    fn a_domain_maps_bucket_ids_to_rules() {
        let config = compiled(
            "reporting_interval: 2s\nfloor: 5%\ndomains:\n  d:\n    - name: api\n      match: { name: api }\n      key: [user]\n      algorithm: fixed_window\n      limit: 100\n      window: 1s\n      strategy: requests_per_time_unit\n    - name: health\n      match: { name: health }\n      blanket: allow_all\n",
        )
        .unwrap();
        assert_eq!(config.reporting_interval, Duration::from_secs(2));
        assert_eq!(config.assignment_ttl, Duration::from_secs(20));
        assert!((config.floor - 0.05).abs() < 1e-12);
        let rules = &config.domains["d"];
        assert_eq!(rules[0].name, "api");
        assert_eq!(rules[0].key, ["user"]);
        assert!(
            matches!(&rules[0].grant, Grant::Share { limit, per_time_unit: true } if limit.capacity() == 100)
        );
        assert!(rules[0].matches(|k| (k == "name").then_some("api")));
        assert!(!rules[0].matches(|k| (k == "name").then_some("web")));
        assert_eq!(rules[1].grant, Grant::AllowAll);
    }

    #[test]
    fn errors_name_the_field_and_where_it_is() {
        let e = compiled("domains:\n  d:\n    - name: a\n      algorithm: concurrency\n      limit: 3\n")
            .unwrap_err();
        assert!(e.starts_with("4:18: domains.d[0].algorithm") && e.contains("cannot be shared"), "{e}");
        let e = compiled("domains:\n  d:\n    - name: a\n      blanket: allow\n").unwrap_err();
        assert!(e.contains("4:16") && e.contains("unknown blanket \"allow\""), "{e}");
        let e =
            compiled("domains:\n  d:\n    - name: a\n      blanket: deny_all\n      limit: 3\n").unwrap_err();
        assert!(e.contains("limit has no meaning beside blanket"), "{e}");
        let e = compiled("reporting_interval: 50ms\n").unwrap_err();
        assert!(e.contains("below 100ms"), "{e}");
        let e = compiled("assignment_ttl: 2s\n").unwrap_err();
        assert!(e.contains("at least 3 reporting intervals"), "{e}");
        let e = compiled("floor: 150%\n").unwrap_err();
        assert!(e.contains("1:8: floor: invalid floor"), "{e}");
        let e = compiled(
            "domains:\n  d:\n    - name: a\n      algorithm: fixed_window\n      limit: 3\n      window: 7s\n      strategy: requests_per_time_unit\n",
        )
        .unwrap_err();
        assert!(e.contains("7:17") && e.contains("one of Envoy's units"), "{e}");
        let e = compiled(
            "domains:\n  d:\n    - name: a\n      blanket: deny_all\n    - name: a\n      blanket: allow_all\n",
        )
        .unwrap_err();
        assert!(e.contains("duplicate rule name"), "{e}");
        let e = compiled(
            "domains:\n  d:\n    - name: a\n      algorithm: fixed_window\n      limit: 3\n      windw: 1s\n",
        )
        .unwrap_err();
        assert!(e.contains("6:7") && e.contains("windw"), "{e}");
    }
}
