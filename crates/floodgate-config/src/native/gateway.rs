//! `gateway:`: Floodgate as a reverse proxy in front of an application (DESIGN.md §9) — its
//! listener, trusted proxies, identity (JWT verification, claims, unverified identity headers),
//! routes with their upstreams, timeouts, retries, breakers, concurrency, fallback and degradation,
//! and the operator switches (shedding, stale reads, accepted writes).
//!
//! Everything is read into [`GatewayConfig`] and checked now, so that a mistake is reported at its
//! line: route templates, methods and upstream URLs, the HS256 secret's environment variable (read
//! at load), the JWKS file (read and each key checked at load).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use floodgate::breaker::BreakerConfig;
use http::{HeaderName, Method, StatusCode, Uri};
use ipnet::IpNet;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet};

use super::store::positive_duration;
use crate::error::Invalid;
use crate::yaml::{Fields, Item, Value, did_you_mean};

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
            shed_retry_after: Duration::from_secs(30),
            stale_cache: StaleCacheConfig::default(),
            state_dir: None,
            max_accepted_body: 1 << 20,
            tls: None,
            http: super::http_server::HttpConfig::default(),
        }
    }
}

/// Which forwarding header the trusted proxies append to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded`.
    Forwarded,
}

/// Who the caller is: a verified JWT's claims, or, without a token, unverified identity headers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Identity {
    /// JWT verification; `None`: no token is verified, every request is anonymous.
    pub jwt: Option<Jwt>,
    /// Which claims give `user`, `tenant` and `plan` (default `sub`, `tid`, `plan`).
    pub claims: Claims,
    /// Request headers that give `user`, `tenant` or `plan` **only when no token was verified**
    /// (default none). A verified token's claims always win, and the gateway replaces these
    /// headers with the verified values toward the upstream.
    pub headers: IdentityHeaders,
}

/// The claims that give the identity descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// `user` (default `sub`).
    pub user: String,
    /// `tenant` (default `tid`).
    pub tenant: String,
    /// `plan` (default `plan`).
    pub plan: String,
}

impl Default for Claims {
    fn default() -> Self {
        Claims { user: "sub".into(), tenant: "tid".into(), plan: "plan".into() }
    }
}

/// Unverified identity headers (see [`Identity::headers`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentityHeaders {
    /// The header giving `user`, e.g. `x-user-id`.
    pub user: Option<HeaderName>,
    /// The header giving `tenant`, e.g. `x-tenant-id`.
    pub tenant: Option<HeaderName>,
    /// The header giving `plan`.
    pub plan: Option<HeaderName>,
}

impl IdentityHeaders {
    /// `(descriptor, header)` for each header configured.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &HeaderName)> {
        [("user", &self.user), ("tenant", &self.tenant), ("plan", &self.plan)]
            .into_iter()
            .filter_map(|(d, h)| h.as_ref().map(|h| (d, h)))
    }
}

/// How tokens are verified: HS256 with a shared secret, RS256/ES256 with the keys of a JWKS file.
#[derive(Clone, PartialEq)]
pub struct Jwt {
    /// The HS256 secret: the raw bytes of the environment variable named by `hs256_secret_env`.
    pub hs256_secret: Option<Secret>,
    /// The environment variable the secret was read from.
    pub hs256_secret_env: Option<String>,
    /// The RS256 and ES256 (P-256) keys of the JWKS file.
    pub jwks: Vec<Jwk>,
    /// The JWKS file.
    pub jwks_file: Option<PathBuf>,
    /// The required `iss`, if any.
    pub issuer: Option<String>,
    /// The accepted `aud` values (a token must name one), if any.
    pub audience: Option<Vec<String>>,
    /// Clock skew allowed on `exp` and `nbf` (default 0 s).
    pub leeway: Duration,
}

impl fmt::Debug for Jwt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jwt")
            .field("hs256_secret_env", &self.hs256_secret_env)
            .field("jwks_file", &self.jwks_file)
            .field("jwks", &self.jwks.len())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway", &self.leeway)
            .finish_non_exhaustive()
    }
}

/// Secret bytes, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

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
}

/// An upstream: `http://host:port[/base]`, HTTP/1.1 by default or HTTP/2 with prior knowledge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// The base URI (scheme `http`); its path, if any, is prefixed to the request's.
    pub uri: Uri,
    /// Speak HTTP/2 with prior knowledge (h2c) rather than HTTP/1.1.
    pub http2: bool,
}

/// Shedding priority: under `shed: low` the low routes are shed, under `shed: normal` the normal
/// ones too; critical routes are never shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Priority {
    /// Shed first.
    Low,
    /// Shed second (the default).
    #[default]
    Normal,
    /// Never shed.
    Critical,
}

impl Priority {
    /// `low`, `normal` or `critical`.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::Critical => "critical",
        }
    }
}

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

/// The degradations a route offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Degrade {
    /// `read: stale_cache`: the last good response of a GET is kept, and served while the read
    /// switch says so (or the breaker is open).
    pub stale_cache: bool,
    /// `write: accept_async`: writes are stored durably, answered 202 and replayed later while the
    /// write switch says so (or the breaker is open).
    pub accept_async: bool,
}

/// The operator switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Switches {
    /// Which priorities are shed.
    pub shed: Shed,
    /// Serve reads from the stale cache (routes with `read: stale_cache`).
    pub stale_reads: bool,
    /// Accept writes asynchronously (routes with `write: accept_async`).
    pub async_writes: bool,
}

/// Which priorities are shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Shed {
    /// Nothing (the default).
    #[default]
    None,
    /// Low-priority routes.
    Low,
    /// Low- and normal-priority routes.
    Normal,
}

impl Shed {
    /// `none`, `low` or `normal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Shed::None => "none",
            Shed::Low => "low",
            Shed::Normal => "normal",
        }
    }

    /// Whether a route of `priority` is shed.
    pub fn sheds(self, priority: Priority) -> bool {
        match self {
            Shed::None => false,
            Shed::Low => priority == Priority::Low,
            Shed::Normal => priority <= Priority::Normal,
        }
    }

    /// Parses `none`, `low` or `normal`.
    pub fn parse(text: &str) -> Option<Shed> {
        match text {
            "none" => Some(Shed::None),
            "low" => Some(Shed::Low),
            "normal" => Some(Shed::Normal),
            _ => None,
        }
    }
}

/// The stale cache's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleCacheConfig {
    /// All entries together, in body bytes (default 64 MiB); the oldest go first.
    pub max_bytes: usize,
    /// One entry's body (default 1 MiB); larger responses are not kept.
    pub max_entry: usize,
}

impl Default for StaleCacheConfig {
    fn default() -> Self {
        StaleCacheConfig { max_bytes: 64 << 20, max_entry: 1 << 20 }
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
    "shed_retry_after",
    "stale_cache",
    "state_dir",
    "max_accepted_body",
    "tls",
    "http",
];
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
];

/// Validates the `gateway` section.
pub(crate) fn compile(item: Item<'_>) -> Result<GatewayConfig, Invalid> {
    let fields = item.fields("the gateway settings", Some(FIELDS))?;
    let mut config = GatewayConfig::default();
    if let Some(l) = fields.get("listen") {
        let text = l.text("an address such as 127.0.0.1:8000")?;
        config.listen = text.parse().map_err(|_| {
            l.error(format!(
                "invalid listen address {}: expected IP:port, e.g. 127.0.0.1:8000",
                l.node.describe()
            ))
        })?;
    }
    if let Some(t) = fields.get("trusted_proxies").filter(|i| !i.is_null()) {
        for cidr in t.elements("a list of CIDRs")? {
            let text = cidr.text("a CIDR such as 10.0.0.0/8")?;
            let net = text.parse::<IpNet>().or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from));
            config.trusted_proxies.push(net.map_err(|_| {
                cidr.error(format!(
                    "invalid trusted proxy {}: expected a CIDR such as 10.0.0.0/8 or an IP address",
                    cidr.node.describe()
                ))
            })?);
        }
    }
    if let Some(h) = fields.get("forwarded_header") {
        config.forwarded_header = match h.str("x-forwarded-for or forwarded")?.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => ForwardedHeader::XForwardedFor,
            "forwarded" => ForwardedHeader::Forwarded,
            other => {
                return Err(h.error(format!(
                    "unknown forwarded_header {other:?}: expected x-forwarded-for or forwarded{}",
                    did_you_mean(other, ["x-forwarded-for", "forwarded"])
                )));
            }
        };
    }
    if let Some(i) = fields.get("identity").filter(|i| !i.is_null()) {
        config.identity = identity(i)?;
    }
    if let Some(s) = fields.get("switches").filter(|i| !i.is_null()) {
        config.switches = switches(s)?;
    }
    if let Some(m) = fields.get("max_waiting") {
        let n = m.u64_at_least("max_waiting", 0)?;
        config.max_waiting = usize::try_from(n).map_err(|_| m.error("max_waiting is too large"))?;
    }
    if let Some(r) = fields.get("shed_retry_after") {
        config.shed_retry_after = positive_duration(r, "shed_retry_after")?;
    }
    if let Some(c) = fields.get("stale_cache").filter(|i| !i.is_null()) {
        let cache = c.fields("the stale cache's bounds", Some(&["max_bytes", "max_entry"]))?;
        if let Some(b) = cache.get("max_bytes") {
            config.stale_cache.max_bytes = size(&b, "max_bytes")?;
        }
        if let Some(e) = cache.get("max_entry") {
            config.stale_cache.max_entry = size(&e, "max_entry")?;
        }
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
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen = Seen::default();
    if let Some(list) = fields.get("routes").filter(|i| !i.is_null()) {
        for element in list.elements("a list of routes")? {
            let route = route(element.clone())?;
            if let Some(line) = names.get(&route.name) {
                let at = element.fields("a route", None)?.get("name").unwrap_or(element.clone());
                return Err(
                    at.error(format!("duplicate route name {:?} (first defined at line {line})", route.name))
                );
            }
            names.insert(route.name.clone(), element.node.line);
            check_overlap(&element, &route, &mut seen)?;
            if route.degrade.accept_async && config.state_dir.is_none() {
                return Err(element.error(format!(
                    "route {:?} accepts writes asynchronously (degrade.write: accept_async), which are kept on \
                     disk: set gateway.state_dir",
                    route.name
                )));
            }
            config.routes.push(route);
        }
    }
    Ok(config)
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

fn size(item: &Item<'_>, what: &str) -> Result<usize, Invalid> {
    let n = item.u64_at_least(what, 1)?;
    usize::try_from(n).map_err(|_| item.error(format!("{what} {n} is too large")))
}

fn identity(item: Item<'_>) -> Result<Identity, Invalid> {
    let fields = item.fields("the identity settings", Some(&["jwt", "claims", "headers"]))?;
    let mut identity = Identity::default();
    if let Some(j) = fields.get("jwt").filter(|i| !i.is_null()) {
        identity.jwt = Some(jwt(j)?);
    }
    if let Some(c) = fields.get("claims").filter(|i| !i.is_null()) {
        let claims = c.fields("the claims of the identity descriptors", Some(&["user", "tenant", "plan"]))?;
        for (name, slot) in [
            ("user", &mut identity.claims.user),
            ("tenant", &mut identity.claims.tenant),
            ("plan", &mut identity.claims.plan),
        ] {
            if let Some(claim) = claims.get(name) {
                let text = claim.str("a claim name")?;
                if text.is_empty() {
                    return Err(claim.error("a claim name cannot be empty"));
                }
                *slot = text.to_owned();
            }
        }
    }
    if let Some(h) = fields.get("headers").filter(|i| !i.is_null()) {
        let headers = h.fields("identity headers (user, tenant, plan)", Some(&["user", "tenant", "plan"]))?;
        for (name, slot) in [
            ("user", &mut identity.headers.user),
            ("tenant", &mut identity.headers.tenant),
            ("plan", &mut identity.headers.plan),
        ] {
            if let Some(header) = headers.get(name) {
                *slot = Some(header_name(&header)?);
            }
        }
    }
    Ok(identity)
}

fn header_name(item: &Item<'_>) -> Result<HeaderName, Invalid> {
    let text = item.str("a header name")?;
    HeaderName::from_bytes(text.to_ascii_lowercase().as_bytes())
        .map_err(|_| item.error(format!("invalid header name {}", item.node.describe())))
}

const JWT_FIELDS: &[&str] = &["hs256_secret_env", "jwks_file", "issuer", "audience", "leeway"];

fn jwt(item: Item<'_>) -> Result<Jwt, Invalid> {
    let fields = item.fields("the JWT settings", Some(JWT_FIELDS))?;
    let mut jwt = Jwt {
        hs256_secret: None,
        hs256_secret_env: None,
        jwks: Vec::new(),
        jwks_file: None,
        issuer: None,
        audience: None,
        leeway: Duration::ZERO,
    };
    if let Some(e) = fields.get("hs256_secret_env") {
        let name = e.str("an environment variable name")?;
        let value = std::env::var_os(name).ok_or_else(|| {
            e.error(format!("the environment variable {name:?} (the HS256 secret) is not set"))
        })?;
        let bytes = value.into_encoded_bytes();
        if bytes.len() < 32 {
            return Err(e.error(format!(
                "the HS256 secret in {name:?} is {} bytes: use at least 32 random bytes",
                bytes.len()
            )));
        }
        jwt.hs256_secret = Some(Secret(bytes));
        jwt.hs256_secret_env = Some(name.to_owned());
    }
    if let Some(f) = fields.get("jwks_file") {
        let path = f.str("a JWKS file path")?;
        let text = std::fs::read_to_string(path)
            .map_err(|e| f.error(format!("cannot read the JWKS file {path:?}: {e}")))?;
        let set: JwkSet = serde_json::from_str(&text)
            .map_err(|e| f.error(format!("the JWKS file {path:?} is not a JSON Web Key Set: {e}")))?;
        for (i, key) in set.keys.iter().enumerate() {
            check_jwk(key).map_err(|why| f.error(format!("the JWKS file {path:?}: key {i}: {why}")))?;
        }
        if set.keys.is_empty() {
            return Err(f.error(format!("the JWKS file {path:?} has no keys")));
        }
        jwt.jwks = set.keys;
        jwt.jwks_file = Some(PathBuf::from(path));
    }
    if jwt.hs256_secret.is_none() && jwt.jwks.is_empty() {
        return Err(
            item.error("jwt needs hs256_secret_env, jwks_file or both: the keys tokens are verified with")
        );
    }
    if let Some(i) = fields.get("issuer") {
        jwt.issuer = Some(i.str("an issuer")?.to_owned());
    }
    if let Some(a) = fields.get("audience") {
        let values = match &a.node.value {
            Value::Seq(_) => a
                .elements("a list of audiences")?
                .iter()
                .map(|e| e.str("an audience").map(str::to_owned))
                .collect::<Result<Vec<_>, _>>()?,
            _ => vec![a.str("an audience")?.to_owned()],
        };
        if values.is_empty() {
            return Err(a.error("audience is an empty list: name at least one, or remove it"));
        }
        jwt.audience = Some(values);
    }
    if let Some(l) = fields.get("leeway") {
        let text = l.text("a duration")?;
        jwt.leeway = crate::duration::parse(&text)
            .map_err(|why| l.error(format!("invalid leeway {}: {why}", l.node.describe())))?;
    }
    Ok(jwt)
}

/// A JWKS key the gateway can verify with: RSA (RS256) or EC P-256 (ES256), with a usable key.
fn check_jwk(key: &Jwk) -> Result<(), String> {
    use jsonwebtoken::jwk::{EllipticCurve, KeyAlgorithm};
    match &key.algorithm {
        AlgorithmParameters::RSA(_) => {
            if key.common.key_algorithm.is_some_and(|a| a != KeyAlgorithm::RS256) {
                return Err("an RSA key must be for RS256".into());
            }
        }
        AlgorithmParameters::EllipticCurve(ec) => {
            if ec.curve != EllipticCurve::P256 {
                return Err("an EC key must be on P-256 (ES256)".into());
            }
            if key.common.key_algorithm.is_some_and(|a| a != KeyAlgorithm::ES256) {
                return Err("an EC key must be for ES256".into());
            }
        }
        _ => return Err("only RSA (RS256) and EC P-256 (ES256) keys are supported".into()),
    }
    jsonwebtoken::DecodingKey::from_jwk(key).map(|_| ()).map_err(|e| format!("unusable key: {e}"))
}

fn switches(item: Item<'_>) -> Result<Switches, Invalid> {
    let fields = item.fields("the switches", Some(&["shed", "read", "write"]))?;
    let mut switches = Switches::default();
    if let Some(s) = fields.get("shed") {
        let text = s.text("none, low or normal")?;
        switches.shed = Shed::parse(&text).ok_or_else(|| {
            s.error(format!(
                "unknown shed {text:?}: expected none, low or normal{}",
                did_you_mean(&text, ["none", "low", "normal"])
            ))
        })?;
    }
    if let Some(r) = fields.get("read") {
        switches.stale_reads = match r.str("live or stale_cache")? {
            "live" => false,
            "stale_cache" => true,
            other => {
                return Err(r.error(format!("unknown read switch {other:?}: expected live or stale_cache")));
            }
        };
    }
    if let Some(w) = fields.get("write") {
        switches.async_writes = match w.str("live or accept_async")? {
            "live" => false,
            "accept_async" => true,
            other => {
                return Err(w.error(format!("unknown write switch {other:?}: expected live or accept_async")));
            }
        };
    }
    Ok(switches)
}

fn route(item: Item<'_>) -> Result<Route, Invalid> {
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
    let upstream = upstream(fields.require("upstream", "a route needs upstream: http://host:port")?)?;
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

fn upstream(item: Item<'_>) -> Result<Upstream, Invalid> {
    let (url_item, http2) = if item.is_map() {
        let fields = item.fields("an upstream", Some(&["url", "http2"]))?;
        let url = fields.require("url", "the upstream's base URL, e.g. http://127.0.0.1:9000")?;
        let http2 = match fields.get("http2") {
            Some(h) => h.bool()?,
            None => false,
        };
        (url, http2)
    } else {
        (item, false)
    };
    let text = url_item.str("an upstream URL")?;
    let uri: Uri = text
        .parse()
        .map_err(|_| url_item.error(format!("invalid upstream URL {text:?}: expected http://host:port")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(url_item.error(format!(
                "upstream {text:?}: TLS to upstreams is not supported yet; use http:// (a sidecar or the network \
                 encrypts)"
            )));
        }
        _ => return Err(url_item.error(format!("invalid upstream URL {text:?}: expected http://host:port"))),
    }
    if uri.authority().is_none() || uri.host().is_none_or(str::is_empty) {
        return Err(url_item.error(format!("invalid upstream URL {text:?}: no host")));
    }
    if uri.query().is_some() {
        return Err(url_item.error(format!("upstream URL {text:?}: a query cannot be part of an upstream")));
    }
    Ok(Upstream { uri, http2 })
}

fn timeouts(item: Item<'_>) -> Result<Timeouts, Invalid> {
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

fn retries(item: Item<'_>) -> Result<Retries, Invalid> {
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

fn breaker(item: Item<'_>) -> Result<BreakerConfig, Invalid> {
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

fn fallback(item: Item<'_>) -> Result<Fallback, Invalid> {
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

fn degrade(item: Item<'_>) -> Result<Degrade, Invalid> {
    let fields = item.fields("the degradations", Some(&["read", "write"]))?;
    let mut degrade = Degrade::default();
    if let Some(r) = fields.get("read") {
        match r.str("stale_cache")? {
            "stale_cache" => degrade.stale_cache = true,
            other => return Err(r.error(format!("unknown read degradation {other:?}: expected stale_cache"))),
        }
    }
    if let Some(w) = fields.get("write") {
        match w.str("accept_async")? {
            "accept_async" => degrade.accept_async = true,
            other => {
                return Err(w.error(format!("unknown write degradation {other:?}: expected accept_async")));
            }
        }
    }
    Ok(degrade)
}
