//! Where a route's requests go and how each is protected on the way: the upstream, timeouts,
//! retries within a budget, the circuit breaker and the answer while it is open.

use std::time::Duration;

use floodgate::breaker::BreakerConfig;
use http::{StatusCode, Uri};

use crate::error::Invalid;
use crate::native::positive_duration;
use crate::native::tls::PemFile;
use crate::yaml::{Fields, Item, Value};

use super::size;

/// An upstream: `http://host:port[/base]` or `https://…`, HTTP/1.1 by default; with `http2`, HTTP/2
/// (h2c with prior knowledge on `http`, offered by ALPN beside HTTP/1.1 on `https`). Its URL may
/// come from an environment variable (`url_env`, read at load, `url` its default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// The base URI (scheme `http` or `https`); its path, if any, is prefixed to the request's.
    pub uri: Uri,
    /// Speak HTTP/2: h2c with prior knowledge on `http`; on `https`, offered by ALPN and spoken when
    /// the upstream takes it (else HTTP/1.1).
    pub http2: bool,
    /// TLS to an `https` upstream; `None` on `http`.
    pub tls: Option<UpstreamTls>,
}

/// TLS to an `https` upstream: the CAs its certificate must chain to, and the name it is checked
/// against (the URL's host: a DNS name or an IP address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// The CA bundle (PEM), read at load: `tls.ca`, else the system's ([`SYSTEM_CA_BUNDLE`]).
    pub ca: PemFile,
}

/// The CA bundle an `https` upstream without `tls.ca` is checked against: the system's public
/// roots, where Debian, Ubuntu and Alpine keep them (`ca-certificates`).
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A route's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To connect to the upstream (default 1 s).
    pub connect: Duration,
    /// From sending the request to the response's head (default 30 s).
    pub first_byte: Duration,
    /// From the request's arrival to the response body's end (default none): a body still
    /// streaming then is cut.
    pub total: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { connect: Duration::from_secs(1), first_byte: Duration::from_secs(30), total: None }
    }
}

/// A route's retries: idempotent methods only, capped by `attempts` and by the budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Retries {
    /// Retries after the first try (default 2).
    pub attempts: u32,
    /// Retry a request whose connection could not be made (the request surely did not run).
    pub on_connect_error: bool,
    /// Retry on these response statuses.
    pub statuses: Vec<u16>,
    /// The share of the route's first attempts in flight that retries in flight may reach
    /// (default 20 %).
    pub budget: f64,
    /// Retries in flight always allowed whatever the budget (default 3, as Envoy's
    /// `min_retry_concurrency`).
    pub min_concurrent: u32,
    /// The first backoff's cap (default 25 ms); each retry doubles it, up to `max_backoff`; the
    /// wait is drawn uniformly below it (full jitter).
    pub backoff: Duration,
    /// The largest backoff cap (default 250 ms).
    pub max_backoff: Duration,
    /// The largest request body kept to replay (default 64 KiB); a request with a larger (or
    /// streaming, unsized) body is not retried.
    pub max_body: usize,
}

impl Default for Retries {
    fn default() -> Self {
        Retries {
            attempts: 2,
            on_connect_error: true,
            statuses: vec![502, 503],
            budget: 0.2,
            min_concurrent: 3,
            backoff: Duration::from_millis(25),
            max_backoff: Duration::from_millis(250),
            max_body: 64 << 10,
        }
    }
}

/// The answer while a route's breaker is open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    /// Its status (default 503).
    pub status: StatusCode,
    /// Its body (default empty).
    pub body: String,
    /// Its content type (default `text/plain; charset=utf-8`).
    pub content_type: String,
    /// Its `Retry-After`, if any.
    pub retry_after: Option<Duration>,
}

/// Reads and checks `tls:` of an `https` upstream (`None`: none given), reading its CA bundle.
fn upstream_tls(item: Option<Item<'_>>, at: &Item<'_>) -> Result<UpstreamTls, Invalid> {
    let ca_item = match item {
        Some(item) => item.fields("the upstream's TLS settings", Some(&["ca"]))?.get("ca"),
        None => None,
    };
    let ca = match &ca_item {
        Some(c) => {
            let path = c.str("a file path")?;
            if path.is_empty() {
                return Err(c.error("ca is empty: give a PEM CA bundle's path"));
            }
            PemFile::read(path).map_err(|e| c.error(e.0))?
        }
        None => PemFile::read(SYSTEM_CA_BUNDLE).map_err(|e| {
            at.error(format!(
                "an https upstream without tls.ca is checked against the system's CA bundle, which \
                     cannot be read ({e}): install ca-certificates, or give `tls: {{ca: <PEM file>}}`"
            ))
        })?,
    };
    let at = ca_item.as_ref().unwrap_or(at);
    let mut roots = rustls::RootCertStore::empty();
    for cert in ca.certs("CA certificate").map_err(|e| at.error(e.0))? {
        roots
            .add(cert)
            .map_err(|e| at.error(format!("{}: not a usable CA certificate: {e}", ca.path().display())))?;
    }
    Ok(UpstreamTls { ca })
}

pub(super) fn upstream(item: Item<'_>) -> Result<Upstream, Invalid> {
    upstream_with(item, &[])
}

/// An upstream whose map may have the fields `extra` too (read by the caller).
pub(super) fn upstream_with(item: Item<'_>, extra: &[&str]) -> Result<Upstream, Invalid> {
    let mut tls_item = None;
    let (url_item, http2, from_env) = if item.is_map() {
        let mut allowed = vec!["url", "url_env", "http2", "tls"];
        allowed.extend_from_slice(extra);
        let fields = item.fields("an upstream", Some(&allowed))?;
        let http2 = match fields.get("http2") {
            Some(h) => h.bool()?,
            None => false,
        };
        tls_item = fields.get("tls");
        // `url_env`: the URL from an environment variable (read at load), `url` the default.
        let from_env = match fields.get("url_env") {
            None => None,
            Some(e) => {
                let name = e.str("an environment variable's name")?;
                match std::env::var(name) {
                    Ok(value) if !value.trim().is_empty() => {
                        Some((e, name.to_owned(), value.trim().to_owned()))
                    }
                    _ if fields.get("url").is_some() => None,
                    _ => {
                        return Err(e.error(format!(
                            "the environment variable {name} is not set, and no url is given as the default"
                        )));
                    }
                }
            }
        };
        let url = match &from_env {
            Some((e, ..)) => e.clone(),
            None => fields.require("url", "the upstream's base URL, e.g. http://127.0.0.1:9000")?,
        };
        (url, http2, from_env.map(|(_, name, value)| (name, value)))
    } else {
        (item, false, None)
    };
    let owned;
    let text = match &from_env {
        Some((_, value)) => {
            owned = value.clone();
            owned.as_str()
        }
        None => url_item.str("an upstream URL")?,
    };
    let source = from_env.as_ref().map(|(name, _)| format!(" (from {name})")).unwrap_or_default();
    let uri: Uri = text.parse().map_err(|_| {
        url_item.error(format!("invalid upstream URL {text:?}{source}: expected http://host:port"))
    })?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(url_item.error(format!(
                "invalid upstream URL {text:?}{source}: expected http://host:port or https://host:port"
            )));
        }
    };
    if uri.authority().is_none() || uri.host().is_none_or(str::is_empty) {
        return Err(url_item.error(format!("invalid upstream URL {text:?}{source}: no host")));
    }
    if uri.query().is_some() {
        return Err(
            url_item.error(format!("upstream URL {text:?}{source}: a query cannot be part of an upstream"))
        );
    }
    let tls = match (https, tls_item) {
        (true, tls_item) => Some(upstream_tls(tls_item, &url_item)?),
        (false, Some(t)) => {
            return Err(t.error(format!("upstream {text:?}{source}: tls is for https:// upstreams")));
        }
        (false, None) => None,
    };
    Ok(Upstream { uri, http2, tls })
}

pub(super) fn timeouts(item: Item<'_>) -> Result<Timeouts, Invalid> {
    let fields = item.fields("the timeouts", Some(&["connect", "first_byte", "total"]))?;
    let mut timeouts = Timeouts::default();
    if let Some(c) = fields.get("connect") {
        timeouts.connect = positive_duration(c, "connect timeout")?;
    }
    if let Some(f) = fields.get("first_byte") {
        timeouts.first_byte = positive_duration(f, "first_byte timeout")?;
    }
    if let Some(t) = fields.get("total") {
        let total = positive_duration(t.clone(), "total timeout")?;
        if total < timeouts.connect {
            return Err(t.error("the total timeout is shorter than the connect timeout"));
        }
        timeouts.total = Some(total);
    }
    Ok(timeouts)
}

fn percent(item: &Item<'_>, what: &str, zero_ok: bool) -> Result<f64, Invalid> {
    let value = match item.number() {
        Some(n) => Some(n),
        None => item.str("a percentage").ok().and_then(|s| {
            let s = s.trim();
            s.strip_suffix('%').unwrap_or(s).trim().parse::<f64>().ok()
        }),
    };
    match value.filter(|p| p.is_finite() && (*p > 0.0 || (zero_ok && *p == 0.0)) && *p <= 100.0) {
        Some(p) => Ok(p / 100.0),
        None => Err(item.error(format!(
            "invalid {what} {}: expected a percentage {} and at most 100%, e.g. {what}: 20%",
            item.node.describe(),
            if zero_ok { "from 0%" } else { "above 0%" }
        ))),
    }
}

pub(super) fn retries(item: Item<'_>) -> Result<Retries, Invalid> {
    let fields = item.fields(
        "the retries",
        Some(&["attempts", "on", "budget", "min_concurrent", "backoff", "max_backoff", "max_body"]),
    )?;
    let mut retries = Retries { on_connect_error: false, statuses: Vec::new(), ..Retries::default() };
    if let Some(a) = fields.get("attempts") {
        let n = a.u64_at_least("attempts", 1)?;
        retries.attempts =
            u32::try_from(n).ok().filter(|n| *n <= 10).ok_or_else(|| a.error("attempts: at most 10"))?;
    }
    match fields.get("on") {
        None => {
            retries.on_connect_error = true;
            retries.statuses = vec![502, 503];
        }
        Some(on) => {
            for e in on.elements("a list of connect_error and statuses")? {
                match &e.node.value {
                    Value::Int(_) => {
                        let code = e.u64_at_least("status", 100)?;
                        if !(500..=599).contains(&code) && code != 429 {
                            return Err(e.error(format!(
                                "retrying on status {code} makes no sense: only 5xx statuses and 429 are retried"
                            )));
                        }
                        retries.statuses.push(code as u16);
                    }
                    _ => match e.str("connect_error or a status")? {
                        "connect_error" => retries.on_connect_error = true,
                        other => {
                            return Err(e.error(format!(
                                "unknown retry condition {other:?}: expected connect_error or a status such as 503"
                            )));
                        }
                    },
                }
            }
        }
    }
    if let Some(b) = fields.get("budget") {
        retries.budget = percent(&b, "budget", true)?;
    }
    if let Some(m) = fields.get("min_concurrent") {
        let n = m.u64_at_least("min_concurrent", 0)?;
        retries.min_concurrent = u32::try_from(n).map_err(|_| m.error("min_concurrent is too large"))?;
    }
    if let Some(b) = fields.get("backoff") {
        retries.backoff = positive_duration(b, "backoff")?;
    }
    if let Some(m) = fields.get("max_backoff") {
        retries.max_backoff = positive_duration(m, "max_backoff")?;
    }
    if retries.max_backoff < retries.backoff {
        let at = fields.get("max_backoff").or_else(|| fields.get("backoff")).unwrap_or(item.clone());
        return Err(at.error("max_backoff is shorter than backoff"));
    }
    if let Some(m) = fields.get("max_body") {
        retries.max_body = size(&m, "max_body")?;
    }
    Ok(retries)
}

pub(super) fn breaker(item: Item<'_>) -> Result<BreakerConfig, Invalid> {
    let fields: Fields<'_> = item.fields(
        "the breaker settings",
        Some(&["failure_rate", "min_calls", "consecutive_failures", "window", "open_for"]),
    )?;
    let mut config = BreakerConfig::default();
    if let Some(rate) = fields.get("failure_rate") {
        config.failure_rate = percent(&rate, "failure_rate", false)?;
    }
    if let Some(min) = fields.get("min_calls") {
        let n = min.u64_at_least("min_calls", 1)?;
        config.min_calls = u32::try_from(n).map_err(|_| min.error("min_calls is too large"))?;
    }
    if let Some(c) = fields.get("consecutive_failures") {
        let n = c.u64_at_least("consecutive_failures", 1)?;
        config.consecutive_failures =
            u32::try_from(n).map_err(|_| c.error("consecutive_failures is too large"))?;
    }
    if let Some(w) = fields.get("window") {
        config.window = positive_duration(w, "window")?;
    }
    if let Some(o) = fields.get("open_for") {
        config.open_for = positive_duration(o, "open_for")?;
    }
    Ok(config)
}

pub(super) fn fallback(item: Item<'_>) -> Result<Fallback, Invalid> {
    let fields =
        item.fields("the fallback response", Some(&["status", "body", "content_type", "retry_after"]))?;
    let status = match fields.get("status") {
        None => StatusCode::SERVICE_UNAVAILABLE,
        Some(s) => {
            let n = s.u64_at_least("status", 200)?;
            u16::try_from(n)
                .ok()
                .filter(|n| *n <= 599)
                .and_then(|n| StatusCode::from_u16(n).ok())
                .ok_or_else(|| s.error(format!("invalid status {n}: expected 200 to 599")))?
        }
    };
    let body = match fields.get("body") {
        None => String::new(),
        Some(b) => b.str("a body")?.to_owned(),
    };
    let content_type = match fields.get("content_type") {
        None => "text/plain; charset=utf-8".to_owned(),
        Some(c) => {
            let text = c.str("a content type")?;
            http::HeaderValue::from_str(text)
                .map_err(|_| c.error(format!("invalid content type {text:?}")))?;
            text.to_owned()
        }
    };
    let retry_after = match fields.get("retry_after") {
        None => None,
        Some(r) => Some(positive_duration(r, "retry_after")?),
    };
    Ok(Fallback { status, body, content_type, retry_after })
}
