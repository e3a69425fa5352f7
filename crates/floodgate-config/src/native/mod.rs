//! Floodgate's native YAML format (DESIGN.md §3; the reference is `docs/configuration.md`), one
//! module per section: [`store`](self::store) (`store:`, with [`redis`] for a Redis store's
//! connection), [`descriptors`] (`descriptors:`, the
//! vocabulary rules may use), [`rules`] (`rules:`), [`limits`] (a rule's algorithm and its
//! parameters, read through the [algorithm registry](crate::algorithm)) and [`partition_keys`]
//! (`partition_keys:`, the secret behind the rules' advertised partition keys).

pub mod admin;
pub mod auth;
mod descriptors;
pub mod gateway;
pub mod http_server;
mod limits;
mod partition_keys;
pub mod redis;
pub mod rlqs;
mod rules;
mod stated;
mod store;
pub mod tls;

#[cfg(test)]
mod tests;

use std::str::FromStr;
use std::time::Duration;

use floodgate::Rule;
use floodgate_http::HeaderStyle;

use self::descriptors::Vocabulary;
use crate::duration;
use crate::error::Invalid;
use crate::yaml::Item;
use crate::{StoreConfig, Survival};

pub use self::descriptors::KNOWN_DESCRIPTORS;
pub use self::limits::DEFAULT_LEASE;
pub(crate) use self::rules::limit_alone;

/// A validated native configuration, before its rules are compiled into a policy.
#[derive(Debug)]
pub(crate) struct Native {
    pub(crate) store: StoreConfig,
    pub(crate) survival: Survival,
    pub(crate) headers: HeaderStyle,
    pub(crate) rules: Vec<Rule>,
    /// `(rule name, fingerprint)` in rule order.
    pub(crate) fingerprints: Vec<(String, u64)>,
    /// The `gateway` section, if any (boxed: most configurations have none).
    pub(crate) gateway: Option<Box<gateway::GatewayConfig>>,
    /// The `auth` section, if any (boxed: most configurations have none).
    pub(crate) auth: Option<Box<auth::AuthConfig>>,
    /// The `http` section (its defaults when absent).
    pub(crate) http: http_server::HttpConfig,
    /// The `tls` section, if any.
    pub(crate) tls: Option<Box<tls::TlsConfig>>,
    /// The `admin` section (its defaults when absent).
    pub(crate) admin: admin::AdminConfig,
    /// The `rlqs` section, if any.
    pub(crate) rlqs: Option<Box<rlqs::RlqsConfig>>,
}

const TOP_FIELDS: &[&str] = &[
    "store",
    "headers",
    "partition_keys",
    "descriptors",
    "rules",
    "gateway",
    "auth",
    "http",
    "tls",
    "admin",
    "rlqs",
];

/// Validates a native configuration document (its root is a mapping without `domain`).
pub(crate) fn compile(root: Item<'_>) -> Result<Native, Invalid> {
    let fields = root.fields("a Floodgate configuration", Some(TOP_FIELDS))?;
    let vocabulary = match fields.get("descriptors") {
        Some(item) => Vocabulary::declared(item)?,
        None => Vocabulary::default(),
    };
    let (store, survival) = match fields.get("store") {
        Some(item) => store::compile(item, &vocabulary)?,
        None => (StoreConfig::default(), Survival::default()),
    };
    let headers = match fields.get("headers") {
        Some(item) if item.seq("").is_ok() => {
            let mut names = Vec::new();
            for element in item.elements("header styles")? {
                names.push((element.str("a header style")?, element));
            }
            if names.is_empty() {
                return Err(
                    item.error("headers is an empty list: name at least one of ietf, legacy, both, openai")
                );
            }
            let mut style = HeaderStyle::None;
            // Each prefix of the list, so that the error points at the name that makes it wrong.
            for (k, (_, element)) in names.iter().enumerate() {
                style = HeaderStyle::from_names(names[..=k].iter().map(|(n, _)| *n))
                    .map_err(|e| element.error(e.to_string()))?;
            }
            style
        }
        Some(item) => {
            let text = item.str("a header style, or a list of them such as [ietf, openai]")?;
            HeaderStyle::from_str(text).map_err(|e| item.error(e.to_string()))?
        }
        None => HeaderStyle::default(),
    };
    let partition_keys = match fields.get("partition_keys").filter(|i| !i.is_null()) {
        Some(item) => Some(partition_keys::compile(item)?),
        None => None,
    };
    let mut rules = Vec::new();
    let mut fingerprints = Vec::new();
    // (name, line) of every rule so far, to point a duplicate at the first.
    let mut seen: Vec<(String, usize)> = Vec::new();
    // A Redis store computes in Lua doubles: rules whose arithmetic would not be exact are refused.
    let in_doubles = matches!(store, StoreConfig::Redis(_)).then(|| store.kind());
    if let Some(list) = fields.get("rules").filter(|i| !i.is_null()) {
        for item in list.elements("a list of rules")? {
            let (rule, fingerprint) =
                rules::compile(item, &vocabulary, partition_keys.as_ref(), &mut seen, in_doubles)?;
            fingerprints.push((rule.name().to_owned(), fingerprint));
            rules.push(rule);
        }
    }
    let gateway = match fields.get("gateway").filter(|i| !i.is_null()) {
        Some(item) => Some(Box::new(gateway::compile(item, &rules)?)),
        None => None,
    };
    let auth = match fields.get("auth").filter(|i| !i.is_null()) {
        Some(item) => Some(Box::new(auth::compile(item)?)),
        None => None,
    };
    let http = match fields.get("http").filter(|i| !i.is_null()) {
        Some(item) => http_server::compile(item)?,
        None => http_server::HttpConfig::default(),
    };
    let tls = match fields.get("tls").filter(|i| !i.is_null()) {
        Some(item) => Some(Box::new(tls::compile(item)?)),
        None => None,
    };
    let admin = match fields.get("admin").filter(|i| !i.is_null()) {
        Some(item) => admin::compile(item)?,
        None => admin::AdminConfig::default(),
    };
    let rlqs = match fields.get("rlqs").filter(|i| !i.is_null()) {
        Some(item) => {
            let (rlqs, rule_fingerprints) = rlqs::compile(item)?;
            fingerprints.extend(rule_fingerprints);
            Some(Box::new(rlqs))
        }
        None => None,
    };
    Ok(Native { store, survival, headers, rules, fingerprints, gateway, auth, http, tls, admin, rlqs })
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
