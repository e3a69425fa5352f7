//! `routes:`: each route's name, the requests it takes (`match`: a path template and methods),
//! its shedding priority, and the protections of its upstream; no two routes take the same
//! request.

use std::collections::BTreeMap;

use floodgate::breaker::BreakerConfig;
use http::Method;

use crate::error::Invalid;
use crate::yaml::{Item, Value, did_you_mean};

use super::llm::{Llm, llm};
use super::switches::{Degrade, Priority, degrade};
use super::tier::{Tier, tier};
use super::upstream::{
    Fallback, Retries, Timeouts, Upstream, breaker, fallback, retries, timeouts, upstream,
};

/// One route: which requests it takes, where they go, and how they are protected.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Its name (metrics label `route`, admin API, logs).
    pub name: String,
    /// The path template, axum/matchit style: `/api/orders/{id}`, `/static/{*rest}`.
    pub path: String,
    /// The methods it takes; `None`: every method.
    pub methods: Option<Vec<Method>>,
    /// Where requests go.
    pub upstream: Upstream,
    /// Its shedding priority (default `normal`).
    pub priority: Priority,
    /// Its timeouts.
    pub timeouts: Timeouts,
    /// Its retries (default none).
    pub retries: Option<Retries>,
    /// Its circuit breaker (default none).
    pub breaker: Option<BreakerConfig>,
    /// The most requests in flight to its upstream (default unbounded).
    pub concurrency: Option<u32>,
    /// What is answered while its breaker is open (default a 503 problem).
    pub fallback: Option<Fallback>,
    /// Which degradations it offers when the switches turn them on.
    pub degrade: Degrade,
    /// Where its requests get their priority tier when they wait under `action: delay` (`None`:
    /// every request is of the lowest tier).
    pub tier: Option<Tier>,
    /// Its LLM settings, when it is an LLM route (`llm: {api: openai}`): token budgets reserved at
    /// admission, charged from what the model generated.
    pub llm: Option<Llm>,
}

const ROUTE_FIELDS: &[&str] = &[
    "name",
    "match",
    "upstream",
    "priority",
    "timeouts",
    "retries",
    "breaker",
    "concurrency",
    "fallback",
    "degrade",
    "tier",
    "llm",
];

/// The `routes` list, in order; a route that accepts writes asynchronously needs `has_state_dir`.
pub(super) fn routes(
    list: Item<'_>,
    has_state_dir: bool,
    rules: &[floodgate::Rule],
    tiers: u8,
) -> Result<Vec<Route>, Invalid> {
    let mut routes = Vec::new();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen = Seen::default();
    for element in list.elements("a list of routes")? {
        let route = route(element.clone(), rules, tiers)?;
        if let Some(line) = names.get(&route.name) {
            let at = element.fields("a route", None)?.get("name").unwrap_or(element.clone());
            return Err(
                at.error(format!("duplicate route name {:?} (first defined at line {line})", route.name))
            );
        }
        names.insert(route.name.clone(), element.node.line);
        check_overlap(&element, &route, &mut seen)?;
        if route.degrade.accept_async && !has_state_dir {
            return Err(element.error(format!(
                "route {:?} accepts writes asynchronously (degrade.write: accept_async), which are kept on \
                 disk: set gateway.state_dir",
                route.name
            )));
        }
        routes.push(route);
    }
    Ok(routes)
}

/// The routes of one template so far: their methods (`None`: all) and names.
type SameTemplate = Vec<(Option<Vec<Method>>, String)>;

/// The routes read so far, to refuse overlaps: by template, and as a router for conflicts.
#[derive(Default)]
struct Seen {
    templates: BTreeMap<String, SameTemplate>,
    matcher: matchit::Router<()>,
}

/// Two routes of the same template must not share a method; two templates must not conflict.
fn check_overlap(at: &Item<'_>, route: &Route, seen: &mut Seen) -> Result<(), Invalid> {
    if let Some(others) = seen.templates.get_mut(&route.path) {
        for (methods, other) in others.iter() {
            let overlap = match (methods, &route.methods) {
                (None, _) | (_, None) => true,
                (Some(a), Some(b)) => a.iter().any(|m| b.contains(m)),
            };
            if overlap {
                return Err(at.error(format!(
                    "route {:?} takes the same path and method as route {other:?}",
                    route.name
                )));
            }
        }
        others.push((route.methods.clone(), route.name.clone()));
        return Ok(());
    }
    // The same template with other parameter names, or a conflicting wildcard.
    seen.matcher.insert(route.path.clone(), ()).map_err(|e| {
        at.error(format!("route {:?}: path {:?} conflicts with another route: {e}", route.name, route.path))
    })?;
    seen.templates.insert(route.path.clone(), vec![(route.methods.clone(), route.name.clone())]);
    Ok(())
}

fn route(item: Item<'_>, rules: &[floodgate::Rule], tiers: u8) -> Result<Route, Invalid> {
    let fields = item.fields("a route", Some(ROUTE_FIELDS))?;
    let name_item = fields.require("name", "every route needs a unique name, e.g. name: orders")?;
    let name = name_item.text("a route name")?.into_owned();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(name_item.error(format!(
            "invalid route name {}: letters, digits, '-', '_' and '.' only (it is a metric label)",
            name_item.node.describe()
        )));
    }
    let m = fields.require("match", "a route needs match: { path: \"/api/orders/{id}\", methods: [GET] }")?;
    let matching = m.fields("the route's match", Some(&["path", "methods"]))?;
    let path_item = matching.require("path", "a path template such as /api/orders/{id}")?;
    let path = path_item.str("a path template")?.to_owned();
    check_template(&path).map_err(|why| path_item.error(format!("invalid path template {path:?}: {why}")))?;
    let methods = match matching.get("methods") {
        None => None,
        Some(list) => {
            let mut methods: Vec<Method> = Vec::new();
            let elements = match &list.node.value {
                Value::Seq(_) => list.elements("a list of methods")?,
                _ => vec![list.clone()],
            };
            if elements.is_empty() {
                return Err(
                    list.error("methods is an empty list: name at least one, or remove it for every method")
                );
            }
            for e in elements {
                let text = e.str("a method")?;
                let method = Method::from_bytes(text.to_ascii_uppercase().as_bytes())
                    .map_err(|_| e.error(format!("invalid method {}", e.node.describe())))?;
                if methods.contains(&method) {
                    return Err(e.error(format!("method {method} is listed twice")));
                }
                methods.push(method);
            }
            Some(methods)
        }
    };
    // An LLM route may list its upstreams in order instead (`llm.upstreams`): the first is its
    // upstream.
    let llm_upstreams =
        fields.get("llm").filter(Item::is_map).and_then(|l| l.fields("", None).ok()?.get("upstreams"));
    let upstream = match (fields.get("upstream"), llm_upstreams) {
        (Some(u), None) => upstream(u)?,
        (Some(u), Some(_)) => {
            return Err(u.error("give the route's upstream or llm.upstreams, not both"));
        }
        (None, Some(_)) => {
            Upstream { uri: http::Uri::from_static("http://llm.upstreams"), http2: false, tls: None }
        }
        (None, None) => {
            return Err(item.missing(
                "upstream",
                "missing field \"upstream\": a route needs upstream: http://host:port",
            ));
        }
    };
    let priority = match fields.get("priority") {
        None => Priority::Normal,
        Some(p) => match p.str("critical, normal or low")? {
            "critical" => Priority::Critical,
            "normal" => Priority::Normal,
            "low" => Priority::Low,
            other => {
                return Err(p.error(format!(
                    "unknown priority {other:?}: expected critical, normal or low{}",
                    did_you_mean(other, ["critical", "normal", "low"])
                )));
            }
        },
    };
    let timeouts = match fields.get("timeouts").filter(|i| !i.is_null()) {
        None => Timeouts::default(),
        Some(t) => timeouts(t)?,
    };
    let retries = match fields.get("retries").filter(|i| !i.is_null()) {
        None => None,
        Some(r) => Some(retries(r)?),
    };
    let breaker = match fields.get("breaker").filter(|i| !i.is_null()) {
        None => None,
        Some(b) => {
            let mut config = breaker(b)?;
            // A probe that has not answered within the route's time no longer holds half-open.
            config.probe_timeout = timeouts.total.unwrap_or(timeouts.connect + timeouts.first_byte);
            Some(config)
        }
    };
    let concurrency = match fields.get("concurrency") {
        None => None,
        Some(c) => {
            let n = c.u64_at_least("concurrency", 1)?;
            Some(u32::try_from(n).map_err(|_| c.error(format!("concurrency {n} is too large")))?)
        }
    };
    let fallback = match fields.get("fallback").filter(|i| !i.is_null()) {
        None => None,
        Some(f) => Some(fallback(f)?),
    };
    let degrade = match fields.get("degrade").filter(|i| !i.is_null()) {
        None => Degrade::default(),
        Some(d) => degrade(d)?,
    };
    if degrade.stale_cache && methods.as_ref().is_some_and(|m| !m.contains(&Method::GET)) {
        let at = fields.get("degrade").unwrap_or(item.clone());
        return Err(at.error("read: stale_cache keeps GET responses, and this route takes no GET"));
    }
    let tier = match fields.get("tier").filter(|i| !i.is_null()) {
        None => None,
        Some(t) => Some(tier(t, tiers)?),
    };
    let llm = match fields.get("llm").filter(|i| !i.is_null()) {
        None => None,
        Some(l) => Some(llm(l, rules)?),
    };
    // With llm.upstreams, the route's upstream is the first of them.
    let upstream = match llm.as_ref().and_then(|l| l.upstreams.first()) {
        Some(first) => first.upstream.clone(),
        None => upstream,
    };
    if llm.is_some() && (degrade.stale_cache || degrade.accept_async) {
        let at = fields.get("degrade").unwrap_or(item.clone());
        return Err(at.error(
            "an LLM route cannot degrade to stale reads or accepted writes: its calls are metered as they run",
        ));
    }
    Ok(Route {
        name,
        path,
        methods,
        upstream,
        priority,
        timeouts,
        retries,
        breaker,
        concurrency,
        fallback,
        degrade,
        tier,
        llm,
    })
}

/// A template axum accepts without panicking: `/` first, `{name}` segments, one `{*rest}` last.
fn check_template(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err("it must start with /".into());
    }
    let mut router = matchit::Router::new();
    router.insert(path, ()).map_err(|e| e.to_string())?;
    for segment in path.split('/') {
        let opens = segment.matches('{').count();
        if opens != segment.matches('}').count() || opens > 1 {
            return Err(format!("segment {segment:?}: one {{parameter}} per segment"));
        }
        if let Some(inner) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            let name = inner.strip_prefix('*').unwrap_or(inner);
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("parameter {segment:?}: name it with letters, digits and _"));
            }
        } else if opens > 0 {
            return Err(format!("segment {segment:?}: a parameter takes the whole segment"));
        }
    }
    Ok(())
}
