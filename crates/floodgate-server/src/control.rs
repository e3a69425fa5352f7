//! The running configuration and how it changes: [`Running`] (what requests are decided on),
//! [`Control`] (apply, reload, validate, roll back — one at a time) and the audit log.
//!
//! Every request loads the current [`Running`] once (one `ArcSwap` load, no reference count
//! touched), and finds there everything it is decided and counted with — the policy of its domain,
//! that policy's metric handles, the header style — so one snapshot is always consistent: a swap is
//! atomic, and requests in flight finish on the version they started with. Every policy runs on the
//! one store opened at start, whose state is keyed by namespace, rule name and key descriptors:
//! counters of rules that keep their name and key survive a reload, under the new limit (a rule
//! whose algorithm changes starts afresh).
//!
//! For whoever holds an engine of its own — a tower layer in front of an embedded app, the
//! gateway — [`Control::engine`] is the native policy's [`Engine`], which lives as long as the
//! server and follows every applied change (reloads and rollbacks).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use floodgate::core::{Clock, SystemClock};
use floodgate::{Engine, Policy};
use floodgate_config::store::{AnyStore, OpenError};
use floodgate_config::{self as config, Config, ConfigError, Source, StoreConfig, Survival};
use floodgate_http::HeaderStyle;

use crate::audit::{Applied, AuditRecord, Diff, ErrorReport, Outcome, Trigger};
use crate::auth::Clients;
use crate::metrics::{Metrics, RuleMetrics};

/// How many applied versions are kept for rollback.
pub const KEPT_VERSIONS: usize = 32;
/// How many audit records are kept.
pub const KEPT_AUDIT_RECORDS: usize = 1000;

/// One policy ready to decide on the shared store, with its metric handles (indexed by rule
/// position, as [`LimitOutcome::index`](floodgate::LimitOutcome::index) gives it).
#[derive(Debug)]
pub struct Domain {
    /// The Envoy domain, or `None` for the native policy.
    pub name: Option<String>,
    /// The policy.
    pub policy: Arc<Policy>,
    pub(crate) metrics: RuleMetrics,
}

/// The configuration in force.
#[derive(Debug)]
pub struct Running {
    /// 1 at start, +1 for every applied change (reloads and rollbacks).
    pub version: u64,
    /// Which rate-limit headers to send.
    pub headers: HeaderStyle,
    /// The native policy: HTTP checks, and gRPC domains that no Envoy file defines.
    pub native: Arc<Domain>,
    /// The policies of Envoy domains.
    pub domains: HashMap<String, Arc<Domain>>,
    /// Where the configuration came from, and its text and hash.
    pub source: Source,
    /// Rule fingerprints, for the audit diff.
    pub fingerprints: BTreeMap<String, u64>,
    /// The store section (it cannot change without a restart).
    pub store: StoreConfig,
    /// The store's breaker and fallback settings (likewise).
    pub survival: Survival,
    /// The gateway's settings and its two phases of the native policy, when there is a gateway.
    pub gateway: Option<Arc<GatewayPolicies>>,
    /// Who may call (the `auth:` section), when anyone is named.
    pub(crate) auth: Option<Arc<Clients>>,
    /// The HTTP listener's limits, for the connections accepted from now on.
    pub http: floodgate_config::http_server::HttpConfig,
    /// TLS on the HTTP and gRPC listeners (set up at start; its files are watched).
    pub tls: Option<floodgate_config::tls::TlsConfig>,
}

/// The native policy as the gateway applies it, in two phases (DESIGN.md §9): the rules that need
/// no verified identity run before the JWT is verified (per `ip`, global, per route: a flood of bad
/// tokens is stopped there, before any signature is checked), the rules whose key, `match` or
/// plan-dependent limit uses `user`, `tenant`, `plan` or `authenticated` after it. Each rule is in
/// exactly one phase, so it counts once per request. Both phases keep the rules' names and keys,
/// hence the same counters as the check API's native policy.
#[derive(Debug)]
pub struct GatewayPolicies {
    /// The `gateway:` section.
    pub config: Arc<floodgate_config::gateway::GatewayConfig>,
    /// The rules run before verification.
    pub before: Domain,
    /// The rules run after verification.
    pub after: Domain,
}

/// The descriptors only a verified identity (or its absence) gives.
pub const IDENTITY_DESCRIPTORS: [&str; 4] = ["user", "tenant", "plan", "authenticated"];

/// Whether `rule` runs after the JWT is verified: its key, conditions, plan-dependent limit or
/// quota calendar use an identity descriptor.
pub fn after_verification(rule: &floodgate::Rule) -> bool {
    let identity = |d: &str| IDENTITY_DESCRIPTORS.contains(&d);
    rule.key_descriptors().iter().any(|d| identity(d))
        || rule.conditions().iter().any(|(d, _)| identity(d))
        || rule.varies_by().is_some_and(identity)
        || rule.calendar_descriptors().any(identity)
}

impl GatewayPolicies {
    fn new(
        config: floodgate_config::gateway::GatewayConfig,
        native: &Policy,
        metrics: &Metrics,
        detailed: &BTreeSet<String>,
    ) -> Self {
        let (after, before): (Vec<_>, Vec<_>) = native.rules().cloned().partition(after_verification);
        // The native policy's rules are valid together, hence in any subset: no rule of a native
        // file replaces another.
        let phase = |rules: Vec<floodgate::Rule>| {
            let policy = Policy::new(rules).unwrap_or_default();
            domain(None, policy, metrics, detailed)
        };
        GatewayPolicies { config: Arc::new(config), before: phase(before), after: phase(after) }
    }
}

impl Running {
    /// The policy deciding requests for `domain`: that Envoy domain's, or the native policy when
    /// no domain is given or no Envoy file defines it.
    pub fn domain(&self, domain: Option<&str>) -> &Domain {
        domain.and_then(|d| self.domains.get(d)).unwrap_or(&self.native)
    }

    /// Whether every rule in force, over all policies, decides on a local share when the store
    /// fails (and there is at least one rule).
    pub fn all_local(&self) -> bool {
        let mut rules =
            self.native.policy.rules().chain(self.domains.values().flat_map(|d| d.policy.rules()));
        let mut any = false;
        let all = rules.all(|r| {
            any = true;
            r.store_error_policy() == floodgate::OnStoreError::Local
        });
        all && any
    }

    /// How many rules are in force, over all policies.
    pub fn rule_count(&self) -> usize {
        self.native.policy.rules().count()
            + self.domains.values().map(|d| d.policy.rules().count()).sum::<usize>()
    }
}

/// Why a change was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The configuration is invalid.
    #[error("{0}")]
    Invalid(ConfigError),
    /// The configuration is valid but cannot replace the running one (a store change).
    #[error("{0}")]
    Refused(String),
    /// There is no file to reload from (the server runs the built-in example or was started
    /// without `--config`).
    #[error("no configuration file to reload: the server was started without --config")]
    NoFile,
    /// A rollback target that is not kept.
    #[error("version {version} is not kept (kept: {kept})")]
    UnknownVersion {
        /// The version asked for.
        version: u64,
        /// The versions kept, as text.
        kept: String,
    },
}

impl ApplyError {
    /// The error as JSON.
    pub fn report(&self) -> ErrorReport {
        match self {
            ApplyError::Invalid(e) => ErrorReport::from(e),
            other => ErrorReport::plain(other.to_string()),
        }
    }
}

/// The running configuration and everything that changes it.
#[derive(Debug)]
pub struct Control {
    current: ArcSwap<Running>,
    store: AnyStore,
    /// The native policy's engine on `store`, following every applied change.
    engine: Arc<Engine<AnyStore>>,
    metrics: Metrics,
    /// Where reloads read from.
    path: Option<PathBuf>,
    clock: SystemClock,
    /// Serializes changes, and holds what they leave behind.
    history: tokio::sync::Mutex<History>,
    /// A copy of the audit log for readers (updated under `history`'s lock).
    audit: parking_lot::Mutex<VecDeque<AuditRecord>>,
}

#[derive(Debug, Default)]
struct History {
    /// Applied versions, oldest first, at most [`KEPT_VERSIONS`].
    versions: VecDeque<Arc<Running>>,
    /// The last rejection recorded for a watch event, to not repeat it for every event.
    last_watch_rejection: Option<String>,
}

/// A configuration the server cannot start with.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store cannot be opened.
    #[error(transparent)]
    Store(#[from] OpenError),
    /// The HTTP listener is not on loopback and no admin token is set.
    #[error(
        "the HTTP listener {0} is not on loopback: the admin API needs a bearer token \
         (--admin-token or FLOODGATE_ADMIN_TOKEN, or an auth client with the admin scope)"
    )]
    AdminTokenRequired(std::net::SocketAddr),
    /// A listener's address cannot be read.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// The gateway's accepted writes cannot be opened.
    #[error("gateway: {0}")]
    Gateway(#[source] std::io::Error),
    /// A listener's TLS files cannot be used.
    #[error("tls: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// A gateway listener was given, but the configuration has no `gateway:` section.
    #[error("a gateway listener was given, but the configuration has no gateway section")]
    NoGateway,
}

impl Control {
    /// Puts `config` in force as version 1 over `store` (opened from `config.store`).
    pub fn start(config: Config, store: AnyStore, path: Option<PathBuf>, metrics: Metrics) -> Control {
        let running = build(1, config, &metrics);
        let engine = Arc::new(Engine::from_shared(Arc::clone(&running.native.policy), store.clone()));
        metrics.config_version(1);
        let clock = SystemClock::new();
        let record = AuditRecord {
            version: Some(1),
            time: rfc3339(&clock),
            source: Trigger::Startup,
            path: running.source.path.as_ref().map(|p| p.display().to_string()),
            hash: Some(running.source.hash.clone()),
            added: running.fingerprints.keys().cloned().collect(),
            removed: Vec::new(),
            changed: Vec::new(),
            result: Outcome::Applied,
            error: None,
            restored: None,
        };
        tracing::info!(
            event = "config_applied",
            version = 1,
            source = Trigger::Startup.as_str(),
            hash = %running.source.hash,
            added = ?record.added,
            "configuration applied"
        );
        let running = Arc::new(running);
        let history =
            History { versions: VecDeque::from([Arc::clone(&running)]), last_watch_rejection: None };
        Control {
            current: ArcSwap::new(running),
            store,
            engine,
            metrics,
            path,
            clock,
            history: tokio::sync::Mutex::new(history),
            audit: parking_lot::Mutex::new(VecDeque::from([record])),
        }
    }

    /// The configuration in force.
    pub fn current(&self) -> Arc<Running> {
        self.current.load_full()
    }

    /// The configuration in force, for one request (no reference count touched).
    pub fn load(&self) -> arc_swap::Guard<Arc<Running>> {
        self.current.load()
    }

    /// The store.
    pub fn store(&self) -> &AnyStore {
        &self.store
    }

    /// The native policy's engine on the store: it lives as long as the server and follows every
    /// applied change, so a tower layer (or the gateway) built on it decides on the configuration
    /// in force.
    pub fn engine(&self) -> &Arc<Engine<AnyStore>> {
        &self.engine
    }

    /// The file or directory reloads read from.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }

    /// The audit log, oldest first.
    pub fn audit(&self) -> Vec<AuditRecord> {
        self.audit.lock().iter().cloned().collect()
    }

    /// The versions kept for rollback, oldest first.
    pub async fn kept_versions(&self) -> Vec<u64> {
        self.history.lock().await.versions.iter().map(|r| r.version).collect()
    }

    /// Reloads from the configuration file.
    pub async fn reload(&self, trigger: Trigger) -> Result<Applied, ApplyError> {
        let Some(path) = self.path.clone() else { return Err(ApplyError::NoFile) };
        let mut history = self.history.lock().await;
        let loaded = tokio::task::spawn_blocking(move || config::load(&path)).await;
        let loaded = loaded.unwrap_or_else(|e| {
            Err(ConfigError {
                message: format!("loading the configuration failed: {e}"),
                file: None,
                line: None,
                column: None,
                field: None,
            })
        });
        self.apply_loaded(&mut history, loaded, trigger)
    }

    /// Validates and applies a YAML body (`POST /admin/config`).
    pub async fn apply_text(&self, text: &str) -> Result<Applied, ApplyError> {
        let mut history = self.history.lock().await;
        self.apply_loaded(&mut history, config::parse("admin", text), Trigger::Admin)
    }

    /// Validates a YAML body without applying it; also refuses what a reload would refuse.
    pub fn validate_text(&self, text: &str) -> Result<Config, ApplyError> {
        let config = config::parse("admin", text).map_err(ApplyError::Invalid)?;
        check_replaceable(&self.current.load(), &config)?;
        Ok(config)
    }

    /// Puts the configuration of `version` back in force as a new version, or that of the version
    /// applied before the current one when `version` is `None`.
    pub async fn rollback(&self, version: Option<u64>) -> Result<Applied, ApplyError> {
        let mut history = self.history.lock().await;
        let current = self.current.load_full();
        let target = match version {
            Some(v) => history.versions.iter().find(|r| r.version == v).cloned(),
            None => history.versions.iter().rev().nth(1).cloned(),
        };
        let Some(target) = target else {
            let kept: Vec<String> = history.versions.iter().map(|r| r.version.to_string()).collect();
            return Err(ApplyError::UnknownVersion {
                version: version.unwrap_or(current.version.saturating_sub(1)),
                kept: kept.join(", "),
            });
        };
        let running = Running {
            version: current.version + 1,
            headers: target.headers,
            native: Arc::clone(&target.native),
            domains: target.domains.clone(),
            source: target.source.clone(),
            fingerprints: target.fingerprints.clone(),
            store: target.store.clone(),
            survival: target.survival.clone(),
            gateway: target.gateway.clone(),
            auth: target.auth.clone(),
            http: target.http,
            tls: target.tls.clone(),
        };
        let diff = Diff::between(&current.fingerprints, &running.fingerprints);
        Ok(self.install(&mut history, running, diff, Trigger::Rollback, Some(target.version)))
    }

    fn apply_loaded(
        &self,
        history: &mut History,
        loaded: Result<Config, ConfigError>,
        trigger: Trigger,
    ) -> Result<Applied, ApplyError> {
        let current = self.current.load_full();
        let checked = loaded
            .map_err(ApplyError::Invalid)
            .and_then(|config| check_replaceable(&current, &config).map(|()| config));
        let config = match checked {
            Ok(config) => config,
            Err(error) => {
                self.reject(history, &error, trigger);
                return Err(error);
            }
        };
        if trigger == Trigger::Watch {
            history.last_watch_rejection = None;
        }
        // The same text may read other tokens (a rotated environment variable or token file): a
        // change to apply, though no rule changed.
        let tokens = auth_changes(current.auth.as_deref().map(Clients::config), config.auth.as_ref());
        if config.source.hash == current.source.hash && tokens.is_empty() {
            return Ok(Applied {
                version: current.version,
                hash: current.source.hash.clone(),
                changed: false,
                diff: Diff::default(),
            });
        }
        let mut diff = Diff::between(&current.fingerprints, &config.fingerprints);
        diff.changed.extend(tokens);
        let running = build(current.version + 1, config, &self.metrics);
        Ok(self.install(history, running, diff, trigger, None))
    }

    fn install(
        &self,
        history: &mut History,
        running: Running,
        diff: Diff,
        trigger: Trigger,
        restored: Option<u64>,
    ) -> Applied {
        let running = Arc::new(running);
        self.current.store(Arc::clone(&running));
        self.engine.set_shared_policy(Arc::clone(&running.native.policy));
        history.versions.push_back(Arc::clone(&running));
        while history.versions.len() > KEPT_VERSIONS {
            history.versions.pop_front();
        }
        self.metrics.config_version(running.version);
        self.metrics.reload(true);
        tracing::info!(
            event = "config_applied",
            version = running.version,
            source = trigger.as_str(),
            restored,
            hash = %running.source.hash,
            added = ?diff.added,
            removed = ?diff.removed,
            changed = ?diff.changed,
            "configuration applied"
        );
        self.record(AuditRecord {
            version: Some(running.version),
            time: rfc3339(&self.clock),
            source: trigger,
            path: running.source.path.as_ref().map(|p| p.display().to_string()),
            hash: Some(running.source.hash.clone()),
            added: diff.added.clone(),
            removed: diff.removed.clone(),
            changed: diff.changed.clone(),
            result: Outcome::Applied,
            error: None,
            restored,
        });
        Applied { version: running.version, hash: running.source.hash.clone(), changed: true, diff }
    }

    fn reject(&self, history: &mut History, error: &ApplyError, trigger: Trigger) {
        let report = error.report();
        if trigger == Trigger::Watch {
            // An editor may touch the file several times with the same mistake: record it once.
            if history.last_watch_rejection.as_ref() == Some(&report.message) {
                return;
            }
            history.last_watch_rejection = Some(report.message.clone());
        }
        self.metrics.reload(false);
        tracing::warn!(
            event = "config_rejected",
            version = self.current.load().version,
            source = trigger.as_str(),
            error = %report.message,
            "configuration rejected; the running one stays"
        );
        let path = match trigger {
            Trigger::Admin => None,
            _ => self.path.as_ref().map(|p| p.display().to_string()),
        };
        self.record(AuditRecord {
            version: None,
            time: rfc3339(&self.clock),
            source: trigger,
            path,
            hash: None,
            added: Vec::new(),
            removed: Vec::new(),
            changed: Vec::new(),
            result: Outcome::Rejected,
            error: Some(report),
            restored: None,
        });
    }

    /// Records a change of the gateway's operator switches (admin API) in the audit log: `changed`
    /// says what, e.g. `gateway.switches.shed: none → low`.
    pub fn audit_switches(&self, changed: Vec<String>) {
        let current = self.current.load();
        tracing::info!(changes = ?changed, "gateway switches changed");
        self.record(AuditRecord {
            version: Some(current.version),
            time: rfc3339(&self.clock),
            source: Trigger::Switch,
            path: None,
            hash: Some(current.source.hash.clone()),
            added: Vec::new(),
            removed: Vec::new(),
            changed,
            result: Outcome::Applied,
            error: None,
            restored: None,
        });
    }

    fn record(&self, record: AuditRecord) {
        let mut audit = self.audit.lock();
        audit.push_back(record);
        while audit.len() > KEPT_AUDIT_RECORDS {
            audit.pop_front();
        }
    }
}

/// Refuses a configuration that changes the store (opened once, at start), or the gateway's
/// listener and state directory (bound and opened once, at start).
fn check_replaceable(current: &Running, config: &Config) -> Result<(), ApplyError> {
    if current.store != config.store || current.survival != config.survival {
        return Err(ApplyError::Refused(format!(
            "store: the store settings cannot change while running ({} → {}); restart floodgate to change them",
            current.store.summary(),
            config.store.summary()
        )));
    }
    let gateway_tls = |g: Option<&floodgate_config::gateway::GatewayConfig>| g.and_then(|g| g.tls.clone());
    if current.tls != config.tls
        || gateway_tls(current.gateway.as_deref().map(|g| &*g.config)) != gateway_tls(config.gateway.as_ref())
    {
        return Err(ApplyError::Refused(
            "tls: the listeners' TLS settings (tls, gateway.tls) cannot change while running; the certificate \
             files themselves are reloaded when they change; restart floodgate to change the settings"
                .into(),
        ));
    }
    let running = current.gateway.as_ref().map(|g| (g.config.listen, g.config.state_dir.clone()));
    let wanted = config.gateway.as_ref().map(|g| (g.listen, g.state_dir.clone()));
    match (running, wanted) {
        (None, None) => Ok(()),
        (Some(_), None) => Err(ApplyError::Refused(
            "gateway: the gateway cannot be removed while running; restart floodgate to remove it".into(),
        )),
        (None, Some(_)) => Err(ApplyError::Refused(
            "gateway: a gateway cannot be added while running (its listener is bound at start); restart floodgate"
                .into(),
        )),
        (Some((listen, dir)), Some((new_listen, new_dir))) if listen != new_listen || dir != new_dir => {
            Err(ApplyError::Refused(format!(
                "gateway: listen and state_dir cannot change while running ({listen} → {new_listen}); restart \
                 floodgate to change them"
            )))
        }
        _ => Ok(()),
    }
}

/// The policies of `config`, with their metric handles.
fn build(version: u64, config: Config, metrics: &Metrics) -> Running {
    let Config {
        store,
        survival,
        headers,
        policy,
        domains,
        fingerprints,
        detailed,
        gateway,
        source,
        auth,
        http,
        tls,
    } = config;
    let auth = auth.map(|a| Arc::new(Clients::new(a, metrics)));
    let gateway = gateway.map(|g| Arc::new(GatewayPolicies::new(g, &policy, metrics, &detailed)));
    let native = Arc::new(domain(None, policy, metrics, &detailed));
    let domains = domains
        .into_iter()
        .map(|(name, policy)| (name.clone(), Arc::new(domain(Some(name), policy, metrics, &detailed))))
        .collect();
    Running {
        version,
        headers,
        native,
        domains,
        source,
        fingerprints,
        store,
        survival,
        gateway,
        auth,
        http,
        tls,
    }
}

/// What changed in who may call, for the audit log: `auth.clients.<name>` for every client added,
/// removed, or whose token, scopes or pinned descriptors changed (never the token itself).
fn auth_changes(
    before: Option<&floodgate_config::auth::AuthConfig>,
    after: Option<&floodgate_config::auth::AuthConfig>,
) -> Vec<String> {
    let clients =
        |a: Option<&floodgate_config::auth::AuthConfig>| a.map(|a| a.clients.clone()).unwrap_or_default();
    let (before, after) = (clients(before), clients(after));
    let mut changed: Vec<String> = Vec::new();
    for client in &after {
        if before.iter().find(|b| b.name == client.name) != Some(client) {
            changed.push(format!("auth.clients.{}", client.name));
        }
    }
    for client in &before {
        if !after.iter().any(|a| a.name == client.name) {
            changed.push(format!("auth.clients.{}", client.name));
        }
    }
    changed
}

fn domain(name: Option<String>, policy: Policy, metrics: &Metrics, detailed: &BTreeSet<String>) -> Domain {
    let rule_metrics = metrics.rules(name.as_deref(), policy.rules(), detailed);
    Domain { name, policy: Arc::new(policy), metrics: rule_metrics }
}

/// The clock's now as RFC 3339, UTC, to the millisecond.
fn rfc3339(clock: &SystemClock) -> String {
    let micros = clock.now().as_micros();
    let ts = jiff::Timestamp::from_microsecond(i64::try_from(micros).unwrap_or(i64::MAX))
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    format!("{ts:.3}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_time_is_rfc3339_utc() {
        let t = rfc3339(&SystemClock::new());
        assert!(t.ends_with('Z') && t.contains('T'), "{t}");
    }
}
