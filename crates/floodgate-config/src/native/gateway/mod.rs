//! `gateway:`: Floodgate as a reverse proxy in front of an application (DESIGN.md §9) — its
//! listener, trusted proxies, identity (JWT verification, claims, unverified identity headers),
//! routes with their upstreams, timeouts, retries, breakers, concurrency, fallback and degradation,
//! and the operator switches (shedding, stale reads, accepted writes).
//!
//! Everything is read into [`GatewayConfig`] and checked now, so that a mistake is reported at its
//! line: route templates, methods and upstream URLs, the HS256 secret's environment variable (read
//! at load), the JWKS file (read and each key checked at load).
//!
//! One file per subject: `listener.rs` (where the gateway listens, whose forwarding headers it
//! believes), `identity.rs` (JWT, claims, identity headers), `routes.rs` (matching, priority, no
//! two routes for one request), `tier.rs` (priority tiers of requests waiting under `action: delay`), `llm.rs` (LLM routes: the model API, the completion allowance,
//! tokenizers, what a stream over its budget gets), `upstream.rs` (upstreams, timeouts, retries, breakers, fallbacks)
//! and `switches.rs` (the operator switches, the degradations routes offer, the stale cache).

mod identity;
mod listener;
mod llm;
mod routes;
mod switches;
mod tier;
mod upstream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

pub use self::identity::{Claims, Identity, IdentityHeaders, Jwt, Secret};
pub use self::listener::ForwardedHeader;
pub use self::llm::{Allowance, Llm, LlmApi, LlmUpstream, OverBudget, Price, Tokenizer, WhenShort};
pub use self::routes::Route;
pub use self::switches::{Degrade, Priority, Shed, StaleCacheConfig, Switches};
pub use self::tier::{Tier, TierFrom};
pub use self::upstream::{Fallback, Retries, SYSTEM_CA_BUNDLE, Timeouts, Upstream, UpstreamTls};
use crate::error::Invalid;
use crate::native::positive_duration;
use crate::yaml::Item;

/// The gateway's settings: the `gateway:` section. Its `Default` is no route at all on
/// `127.0.0.1:8000`.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    /// Where the gateway listens (default `127.0.0.1:8000`; `floodgate serve --gateway` overrides).
    pub listen: SocketAddr,
    /// The proxies whose forwarding headers are believed, walked from the right (default none).
    pub trusted_proxies: Vec<IpNet>,
    /// Which forwarding header the trusted proxies append to (default `X-Forwarded-For`).
    pub forwarded_header: ForwardedHeader,
    /// Who the caller is.
    pub identity: Identity,
    /// The routes, in order.
    pub routes: Vec<Route>,
    /// The operator switches as configured (the admin API may override them until a reload).
    pub switches: Switches,
    /// The most requests waiting for capacity under `action: delay` at once (default 1024).
    pub max_waiting: usize,
    /// The priority tiers of waiting requests (`delay_queue: {weights, aging}`; default tiers 0–3
    /// weighing 8, 4, 2, 1, aging one tier a second).
    pub delay_queue: floodgate::delay::Fairness,
    /// What `Retry-After` a shed request gets (default 30 s).
    pub shed_retry_after: Duration,
    /// The last good GET responses kept for `read: stale_cache`.
    pub stale_cache: StaleCacheConfig,
    /// Where accepted writes (`write: accept_async`) are kept; required when a route accepts them.
    pub state_dir: Option<PathBuf>,
    /// The largest body an accepted write may have (default 1 MiB; larger ones get 413).
    pub max_accepted_body: usize,
    /// TLS on the gateway's listener (`tls: {cert, key, client_ca}`), if any.
    pub tls: Option<super::tls::TlsConfig>,
    /// The gateway listener's limits against slow and hostile clients (`http:`, the same fields and
    /// defaults as the top-level `http:` section, which is the HTTP API listener's).
    pub http: super::http_server::HttpConfig,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8000)),
            trusted_proxies: Vec::new(),
            forwarded_header: ForwardedHeader::XForwardedFor,
            identity: Identity::default(),
            routes: Vec::new(),
            switches: Switches::default(),
            max_waiting: 1024,
            delay_queue: floodgate::delay::Fairness::default(),
            shed_retry_after: Duration::from_secs(30),
            stale_cache: StaleCacheConfig::default(),
            state_dir: None,
            max_accepted_body: 1 << 20,
            tls: None,
            http: super::http_server::HttpConfig::default(),
        }
    }
}

const FIELDS: &[&str] = &[
    "listen",
    "trusted_proxies",
    "forwarded_header",
    "identity",
    "routes",
    "switches",
    "max_waiting",
    "delay_queue",
    "shed_retry_after",
    "stale_cache",
    "state_dir",
    "max_accepted_body",
    "tls",
    "http",
];

/// Validates the `gateway` section (`rules`: the configuration's rules, which routes may name).
pub(crate) fn compile(item: Item<'_>, rules: &[floodgate::Rule]) -> Result<GatewayConfig, Invalid> {
    let fields = item.fields("the gateway settings", Some(FIELDS))?;
    let mut config = GatewayConfig::default();
    if let Some(l) = fields.get("listen") {
        config.listen = listener::listen(l)?;
    }
    if let Some(t) = fields.get("trusted_proxies").filter(|i| !i.is_null()) {
        config.trusted_proxies = listener::trusted_proxies(t)?;
    }
    if let Some(h) = fields.get("forwarded_header") {
        config.forwarded_header = listener::forwarded_header(h)?;
    }
    if let Some(i) = fields.get("identity").filter(|i| !i.is_null()) {
        config.identity = identity::identity(i)?;
    }
    if let Some(s) = fields.get("switches").filter(|i| !i.is_null()) {
        config.switches = switches::switches(s)?;
    }
    if let Some(m) = fields.get("max_waiting") {
        let n = m.u64_at_least("max_waiting", 0)?;
        config.max_waiting = usize::try_from(n).map_err(|_| m.error("max_waiting is too large"))?;
    }
    if let Some(q) = fields.get("delay_queue").filter(|i| !i.is_null()) {
        config.delay_queue = tier::fairness(q)?;
    }
    if let Some(r) = fields.get("shed_retry_after") {
        config.shed_retry_after = positive_duration(r, "shed_retry_after")?;
    }
    if let Some(c) = fields.get("stale_cache").filter(|i| !i.is_null()) {
        config.stale_cache = switches::stale_cache(c)?;
    }
    if let Some(d) = fields.get("state_dir") {
        let text = d.str("a directory")?;
        if text.is_empty() {
            return Err(d.error("state_dir is empty: give a directory for accepted writes"));
        }
        config.state_dir = Some(PathBuf::from(text));
    }
    if let Some(h) = fields.get("http").filter(|i| !i.is_null()) {
        config.http = super::http_server::compile(h)?;
    }
    if let Some(m) = fields.get("max_accepted_body") {
        config.max_accepted_body = size(&m, "max_accepted_body")?;
    }
    if let Some(t) = fields.get("tls").filter(|i| !i.is_null()) {
        config.tls = Some(super::tls::compile(t)?);
    }
    if let Some(list) = fields.get("routes").filter(|i| !i.is_null()) {
        config.routes = routes::routes(list, config.state_dir.is_some(), rules, config.delay_queue.tiers())?;
    }
    Ok(config)
}

/// A size in bytes (or a count), at least 1.
fn size(item: &Item<'_>, what: &str) -> Result<usize, Invalid> {
    let n = item.u64_at_least(what, 1)?;
    usize::try_from(n).map_err(|_| item.error(format!("{what} {n} is too large")))
}
