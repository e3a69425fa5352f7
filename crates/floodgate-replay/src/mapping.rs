//! A log record made into the descriptors a front door would have sent: `ip` (the logged peer,
//! walked back through a logged `X-Forwarded-For` past the trusted proxies by the same
//! [`ClientIp`] the gateway uses), `route` (`"METHOD /template"` by the `--routes` patterns, or
//! `"METHOD /raw/path"` when none matches; never the query string), `method`, and any other
//! descriptor from a logged field (`--map user=remote_user`, `--map tenant=header.x-tenant`;
//! JSON lines name theirs with `--json-field`).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::net::IpAddr;

use floodgate::{Descriptors, Policy};
use floodgate_tower::ClientIp;

use crate::log::Record;

/// A `--routes` pattern that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--routes {pattern:?}: {why}")]
pub struct BadRoute {
    /// The pattern as given.
    pub pattern: String,
    /// Why.
    pub why: String,
}

/// Route templates, as the gateway and axum read them (`/api/orders/{id}`, `/files/{*rest}`),
/// each for every method or, written `POST /api/orders`, for one.
#[derive(Debug, Default)]
pub struct Routes {
    any: matchit::Router<String>,
    by_method: Vec<(String, matchit::Router<String>)>,
    count: usize,
}

impl Routes {
    /// Patterns separated by commas (each `"/path/{param}"` or `"METHOD /path/{param}"`).
    pub fn parse<'a>(lists: impl IntoIterator<Item = &'a str>) -> Result<Routes, BadRoute> {
        let mut routes = Routes::default();
        for pattern in lists.into_iter().flat_map(|l| l.split(',')).map(str::trim).filter(|p| !p.is_empty()) {
            let bad = |why: String| BadRoute { pattern: pattern.to_owned(), why };
            let (method, path) = match pattern.split_once(' ') {
                Some((m, p)) if m.bytes().all(|b| b.is_ascii_uppercase()) => (Some(m), p.trim()),
                Some(_) => return Err(bad("expected \"/path\" or \"METHOD /path\"".into())),
                None => (None, pattern),
            };
            if !path.starts_with('/') {
                return Err(bad("a route starts with /".into()));
            }
            let router = match method {
                None => &mut routes.any,
                Some(m) => {
                    if !routes.by_method.iter().any(|(n, _)| n == m) {
                        routes.by_method.push((m.to_owned(), matchit::Router::new()));
                    }
                    let i = routes.by_method.iter().position(|(n, _)| n == m).unwrap_or_default();
                    &mut routes.by_method[i].1
                }
            };
            router.insert(path, path.to_owned()).map_err(|e| bad(e.to_string()))?;
            routes.count += 1;
        }
        Ok(routes)
    }

    /// How many patterns.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The template matching `path` (without its query) for `method`: a method's own patterns
    /// first, then those for every method.
    pub fn template<'p>(&'p self, method: &str, path: &str) -> Option<&'p str> {
        let own = self.by_method.iter().find(|(m, _)| m == method).and_then(|(_, r)| r.at(path).ok());
        own.or_else(|| self.any.at(path).ok()).map(|m| m.value.as_str())
    }
}

/// `--map DESCRIPTOR=FIELD`: descriptor `DESCRIPTOR` from the logged field `FIELD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldMap {
    /// The descriptor.
    pub descriptor: String,
    /// The record's field ([`Record::field`]).
    pub field: String,
}

/// How records become descriptors.
#[derive(Debug)]
pub struct Mapping {
    client_ip: ClientIp,
    routes: Routes,
    maps: Vec<FieldMap>,
    /// The descriptors the policies use: only these are read from a record's fields.
    used: BTreeSet<String>,
    /// Clients found already, by logged peer and `X-Forwarded-For`.
    texts: crate::tally::FastMap<Box<str>, Option<String>>,
    seen: String,
}

impl Mapping {
    /// A mapping for `policies` (the descriptors their rules key on or test).
    pub fn new(client_ip: ClientIp, routes: Routes, maps: Vec<FieldMap>, policies: &[&Policy]) -> Self {
        let mut used = BTreeSet::new();
        for policy in policies {
            for rule in policy.rules() {
                used.extend(rule.key_descriptors().iter().cloned());
                used.extend(rule.conditions().iter().map(|(d, _)| d.clone()));
                used.extend(rule.varies_by().map(str::to_owned));
                used.extend(rule.calendar_descriptors().map(str::to_owned));
            }
        }
        Mapping { client_ip, routes, maps, used, texts: Default::default(), seen: String::new() }
    }

    /// The descriptors the policies use that nothing in this mapping can give for a record of a
    /// format logging `fields` (beside `ip`, `route`, `method`): rules keyed on them never apply.
    pub fn unmapped<'a>(&'a self, fields: &'a [&str]) -> impl Iterator<Item = &'a str> {
        self.used.iter().map(String::as_str).filter(move |d| {
            !matches!(*d, "ip" | "route" | "method" | "global")
                && !self.maps.iter().any(|m| m.descriptor == *d)
                && !fields.contains(d)
        })
    }

    /// The client address of `record`: the logged peer (or, when only `X-Forwarded-For` is logged,
    /// as in Envoy's default format, its last entry: the peer Envoy saw), walked back through the
    /// trusted proxies by [`ClientIp::resolve_x_forwarded_for`]. `None` when neither is an
    /// address.
    pub fn client(&self, record: &Record<'_>) -> Option<IpAddr> {
        let xff = record.forwarded_for.as_deref();
        let peer = match (record.addr.as_deref(), xff) {
            (Some(addr), _) => parse_addr(addr)?,
            (None, Some(list)) => parse_addr(list.rsplit(',').next()?)?,
            (None, None) => return None,
        };
        Some(match xff {
            Some(list) => self.client_ip.resolve_x_forwarded_for(peer, list),
            None => peer,
        })
    }

    /// The `ip` descriptor of `record`: [`Mapping::client`] as text, formatted once per address.
    /// Remembered by the logged peer and `X-Forwarded-For` (the same text always walks to the
    /// same client), for up to 65 536 of them.
    fn client_text(&mut self, record: &Record<'_>) -> Option<String> {
        self.seen.clear();
        self.seen.push_str(record.addr.as_deref().unwrap_or(""));
        self.seen.push('\n');
        self.seen.push_str(record.forwarded_for.as_deref().unwrap_or(""));
        if let Some(text) = self.texts.get(self.seen.as_str()) {
            return text.clone();
        }
        let text = self.client(record).map(|ip| ip.to_string());
        if self.texts.len() < 1 << 16 {
            self.texts.insert(self.seen.as_str().into(), text.clone());
        }
        text
    }

    /// The descriptors of `record`, written into `out` (cleared first).
    pub fn descriptors(&mut self, record: &Record<'_>, out: &mut Descriptors) {
        *out = Descriptors::with_capacity(4 + self.maps.len());
        if let Some(ip) = self.client_text(record) {
            out.insert("ip", ip);
        }
        let method: &str = &record.method;
        // Only what a rule reads is built (`ip` always: clients are counted by it).
        if self.used.contains("route") {
            let path = record.path.split(['?', '#']).next().unwrap_or_default();
            let template = self.routes.template(method, path).unwrap_or(path);
            let mut route = String::with_capacity(method.len() + 1 + template.len());
            route.push_str(method);
            route.push(' ');
            route.push_str(template);
            out.insert("route", route);
        }
        if self.used.contains("method") {
            out.insert("method", method);
        }
        for m in &self.maps {
            if let Some(value) = record.field(&m.field) {
                out.insert(m.descriptor.clone(), value);
            }
        }
        for (name, value) in &record.fields {
            if self.used.contains(*name) && out.get(name).is_none() {
                out.insert(Cow::Owned((*name).to_owned()), value);
            }
        }
    }
}

/// An address as a log writes it: `v4`, `v6`, `[v6]`, with or without a port.
fn parse_addr(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = text.strip_prefix('[') {
        return rest.split_once(']')?.0.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    }
    let (host, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Format;

    fn policy(yaml: &str) -> Policy {
        floodgate_config::parse("test", yaml).unwrap().policy
    }

    const PER_USER: &str = "rules:\n  - name: per-user\n    key: [user, route, method]\n    algorithm: fixed_window\n    limit: 5\n    window: 1s\n  - name: per-agent\n    key: [header.user-agent]\n    algorithm: fixed_window\n    limit: 5\n    window: 1s\n";

    fn mapping(trusted: &[&str], routes: &[&str], maps: &[(&str, &str)]) -> Mapping {
        let p = policy(PER_USER);
        Mapping::new(
            ClientIp::new().try_trust(trusted).unwrap(),
            Routes::parse(routes.iter().copied()).unwrap(),
            maps.iter().map(|(d, f)| FieldMap { descriptor: (*d).into(), field: (*f).into() }).collect(),
            &[&p],
        )
    }

    fn line(addr: &str, user: &str, request: &str, xff: &str) -> String {
        format!(
            r#"{addr} - {user} [02/Dec/2026:09:00:00 +0000] "{request} HTTP/1.1" 200 12 "-" "Mozilla/5.0 (Macintosh)" "{xff}""#
        )
    }

    fn descriptors(m: &mut Mapping, text: &str) -> Descriptors {
        let record = Format::Combined.parse(text).unwrap();
        let mut d = Descriptors::new();
        m.descriptors(&record, &mut d);
        d
    }

    #[test]
    fn routes_are_templated_by_the_patterns_and_raw_otherwise() {
        let mut m = mapping(&[], &["/api/orders/{id}, POST /api/orders", "/files/{*rest}"], &[]);
        let d = descriptors(&mut m, &line("192.0.2.1", "-", "GET /api/orders/42?expand=1", "-"));
        assert_eq!(d.get("route"), Some("GET /api/orders/{id}"));
        assert_eq!(d.get("method"), Some("GET"));
        let d = descriptors(&mut m, &line("192.0.2.1", "-", "POST /api/orders", "-"));
        assert_eq!(d.get("route"), Some("POST /api/orders"));
        let d = descriptors(&mut m, &line("192.0.2.1", "-", "GET /files/a/b.png", "-"));
        assert_eq!(d.get("route"), Some("GET /files/{*rest}"));
        // The POST-only pattern does not template a GET, and no pattern templates this path.
        let d = descriptors(&mut m, &line("192.0.2.1", "-", "GET /health?probe=1", "-"));
        assert_eq!(d.get("route"), Some("GET /health"));
    }

    #[test]
    fn bad_route_patterns_are_refused_with_the_pattern() {
        for bad in ["api/orders", "get /x", "/a/{id}, /a/{other}"] {
            let e = Routes::parse([bad]).unwrap_err();
            assert!(bad.contains(&e.pattern), "{e}");
        }
    }

    #[test]
    fn the_client_is_walked_back_through_trusted_proxies_only() {
        let mut m = mapping(&["10.0.0.0/8"], &[], &[]);
        // Trusted peer: the walk goes right to left past trusted hops.
        let d = descriptors(&mut m, &line("10.0.0.7", "-", "GET /", "203.0.113.9, 10.1.2.3"));
        assert_eq!(d.get("ip"), Some("203.0.113.9"));
        // A spoofed left-most entry is not believed: the first untrusted hop from the right wins.
        let d = descriptors(&mut m, &line("10.0.0.7", "-", "GET /", "1.1.1.1, 198.51.100.4"));
        assert_eq!(d.get("ip"), Some("198.51.100.4"));
        // Untrusted peer: its X-Forwarded-For is ignored.
        let d = descriptors(&mut m, &line("192.0.2.50", "-", "GET /", "203.0.113.9"));
        assert_eq!(d.get("ip"), Some("192.0.2.50"));
    }

    #[test]
    fn envoy_lines_take_the_last_forwarded_hop_as_the_peer() {
        let m = mapping(&["10.0.0.0/8"], &[], &[]);
        let text = r#"[2026-12-02T09:00:00.120Z] "GET /api/orders/3 HTTP/1.1" 200 - 0 312 4 3 "198.51.100.7, 10.2.0.1" "okhttp/4.12" "5b1f0c8e" "shop.example" "10.1.2.3:8080""#;
        let record = Format::Envoy.parse(text).unwrap();
        assert_eq!(m.client(&record), Some("198.51.100.7".parse().unwrap()));
    }

    #[test]
    fn fields_become_descriptors_by_map_or_by_the_policy_using_them() {
        let mut m = mapping(&[], &[], &[("user", "remote_user")]);
        let d = descriptors(&mut m, &line("192.0.2.1", "alice", "GET /", "-"));
        assert_eq!(d.get("user"), Some("alice"));
        // The policy keys on header.user-agent, which combined logs.
        assert_eq!(d.get("header.user-agent"), Some("Mozilla/5.0 (Macintosh)"));
        // The referer is logged too, but no rule uses it.
        assert_eq!(d.get("header.referer"), None);
        // No user logged: no descriptor (the rule does not apply), never an empty value.
        let d = descriptors(&mut m, &line("192.0.2.1", "-", "GET /", "-"));
        assert_eq!(d.get("user"), None);
    }

    #[test]
    fn descriptors_nothing_gives_are_named() {
        let m = mapping(&[], &[], &[]);
        let unmapped: Vec<_> = m.unmapped(&["header.user-agent"]).collect();
        assert_eq!(unmapped, ["user"]);
    }
}
