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
//! - algorithm `fixed_window`, window = the unit (1 s, 1 min, 1 h, 1 d, aligned to the Unix epoch,
//!   as envoyproxy/ratelimit counts), limit = `requests_per_unit`;
//! - name = `rate_limit.name` when given, else the path as envoyproxy/ratelimit names it in its
//!   statistics: `key_value.key2` (entries joined by `.`, a value appended with `_`);
//! - conditions: the request descriptor's keys are exactly the path's keys, in order (descriptor
//!   [`ENVOY_KEYS`]); entries with a `value` must equal it;
//! - key: the entries without a value (one counter per value), e.g. per `remote_address`;
//! - `shadow_mode: true` → action `shadow`;
//! - a path entry without a value loses to a sibling entry *with* a value at the same level (that
//!   is how the tree walk goes): those sibling values are excluded from the rule with a
//!   [`Condition::NoneOf`] on that entry, at every level where it happens. This is how
//!   `unlimited: true` on a specific value stops the less specific limit;
//! - `unlimited: true` makes no rule of its own;
//! - `replaces` is validated but not applied (see below).
//!
//! Requests are mapped with [`envoy_descriptors`](floodgate_http::envoy::envoy_descriptors).
//!
//! # Not supported
//! - `requests_per_unit: 0` (refuse everything): Floodgate limits are at least 1 — refused with an
//!   error rather than silently allowing one request per unit.
//! - Wildcard values (`value: "/api/*"`): refused with an error (prefix matches are not expressible
//!   as Floodgate conditions).
//! - `replaces`: accepted and validated, but both limits apply (stricter than envoyproxy/ratelimit,
//!   which drops the replaced limit when both match one request). Floodgate checks each Envoy
//!   descriptor on its own, so a limit cannot see the other descriptors of the request.
//! - `detailed_metric`: accepted and ignored (metrics are per rule).
//! - Limits sent by Envoy in the request descriptor (`limit` override): the server's concern.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Action, Condition, Limit, Rule};
use floodgate_core::FixedWindow;

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
}

const TOP_FIELDS: &[&str] = &["domain", "descriptors"];
const DESCRIPTOR_FIELDS: &[&str] =
    &["key", "value", "rate_limit", "shadow_mode", "detailed_metric", "descriptors"];
const RATE_LIMIT_FIELDS: &[&str] = &["unit", "requests_per_unit", "unlimited", "name", "replaces"];
const UNITS: [(&str, u64); 4] = [("second", 1), ("minute", 60), ("hour", 3600), ("day", 86_400)];

/// A descriptor entry of the tree.
#[derive(Debug)]
struct Entry<'a> {
    item: Item<'a>,
    key: String,
    value: Option<String>,
    limit: Option<Spec<'a>>,
    shadow: bool,
    children: Vec<Entry<'a>>,
}

/// A `rate_limit`.
#[derive(Debug)]
enum Spec<'a> {
    Limited { at: Item<'a>, window: Duration, per_unit: NonZeroU64, name: Option<(String, Item<'a>)> },
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
    let mut rules = Vec::new();
    let mut fingerprints = Vec::new();
    let mut seen: Vec<(String, usize)> = Vec::new();
    let mut path: Vec<(&Entry<'_>, &[Entry<'_>])> = Vec::new();
    walk(&tree, &mut path, &domain, &mut rules, &mut fingerprints, &mut seen)?;
    Ok(Domain {
        name: domain,
        line: domain_item.node.line,
        column: domain_item.node.column,
        rules,
        fingerprints,
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
            Some(v) => {
                let text = v.text("a descriptor value")?.into_owned();
                if text.ends_with('*') {
                    return Err(v.error(format!(
                        "wildcard value {text:?} is not supported: list the values, or leave value out to \
                         limit every value separately"
                    )));
                }
                // An empty value is the same as none, as in envoyproxy/ratelimit.
                Some(text).filter(|t| !t.is_empty())
            }
            None => None,
        };
        if let Some(first) = out.iter().find(|e| e.key == key && e.value == value) {
            let what = match &value {
                Some(v) => format!("key {key:?} with value {v:?}"),
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
        if let Some(d) = fields.get("detailed_metric") {
            d.bool()?;
        }
        let children = match fields.get("descriptors").filter(|d| !d.is_null()) {
            Some(list) => entries(&list)?,
            None => Vec::new(),
        };
        out.push(Entry { item, key, value, limit, shadow, children });
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
    if let Some(replaces) = fields.get("replaces").filter(|r| !r.is_null()) {
        for entry in replaces.elements("a list of {name: ...}")? {
            let replaced = entry.fields("a replaced limit", Some(&["name"]))?;
            let replaced_name = replaced.require("name", "the name of the replaced limit")?;
            let text = replaced_name.text("a limit name")?;
            if text.is_empty() {
                return Err(replaced_name.error("the name is empty"));
            }
            if name.as_ref().is_some_and(|(n, _)| *n == text) {
                return Err(replaced_name.error(format!("a limit cannot replace itself ({text:?})")));
            }
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
        return Ok(Spec::Unlimited);
    }
    let unit_item = fields.require("unit", "second, minute, hour or day (or unlimited: true)")?;
    let unit = unit_item.str("a unit")?;
    let Some((_, secs)) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) else {
        return Err(unit_item.error(format!(
            "unknown unit {unit:?}: expected second, minute, hour or day{}",
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
        name,
    })
}

/// Compiles every limited path under `level` (whose entries are siblings), depth first.
fn walk<'t, 'a>(
    level: &'t [Entry<'a>],
    path: &mut Vec<(&'t Entry<'a>, &'t [Entry<'a>])>,
    domain: &str,
    rules: &mut Vec<Rule>,
    fingerprints: &mut Vec<(String, u64)>,
    seen: &mut Vec<(String, usize)>,
) -> Result<(), Invalid> {
    for entry in level {
        path.push((entry, level));
        if let Some(Spec::Limited { at, window, per_unit, name }) = &entry.limit {
            let (rule, fingerprint) = rule(path, domain, at, *window, *per_unit, name.as_ref(), seen)?;
            fingerprints.push((rule.name().to_owned(), fingerprint));
            rules.push(rule);
        }
        walk(&entry.children, path, domain, rules, fingerprints, seen)?;
        path.pop();
    }
    Ok(())
}

/// The rule of the path ending in a limited entry.
fn rule(
    path: &[(&Entry<'_>, &[Entry<'_>])],
    domain: &str,
    at: &Item<'_>,
    window: Duration,
    per_unit: NonZeroU64,
    name: Option<&(String, Item<'_>)>,
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
    // (level, excluded values) of each key-only entry that a more specific sibling overrides.
    let mut exclusions: Vec<(usize, Vec<&str>)> = Vec::new();
    for (level, ((entry, siblings), descriptor)) in path.iter().zip(&names).enumerate() {
        canonical.field("entry", (&entry.key, &entry.value));
        match &entry.value {
            Some(value) => rule = rule.when(descriptor.as_str(), value.as_str()),
            None => {
                key.push(descriptor.clone());
                let overridden: Vec<&str> = siblings
                    .iter()
                    .filter(|s| s.key == entry.key)
                    .filter_map(|s| s.value.as_deref())
                    .collect();
                if !overridden.is_empty() {
                    exclusions.push((level, overridden));
                }
            }
        }
    }
    for (level, values) in &exclusions {
        let mut sorted = values.clone();
        sorted.sort_unstable();
        canonical.field("excluded", (level, &sorted));
        let values = sorted.iter().map(|v| v.to_string()).collect();
        rule = rule.when_condition(names[*level].as_str(), Condition::NoneOf(values));
    }
    let shadow = path.last().is_some_and(|(e, _)| e.shadow);
    canonical
        .field("window", window.as_secs())
        .field("requests_per_unit", per_unit.get())
        .field("shadow", shadow);
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
            Some(v) => format!("{}_{v}", e.key),
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
                "domain: d\ndescriptors:\n  - key: k\n    value: '/api/*'\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                "descriptors[0].value",
                "wildcard",
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
}
