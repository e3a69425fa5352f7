//! The running configuration and how it changes: [`Running`] (what requests are decided on),
//! [`Control`] (apply, reload, validate, roll back — one at a time) and the audit log.
//!
//! Every request loads the current [`Running`] once (an `ArcSwap`), so a swap is atomic: requests
//! in flight finish on the policy they started with. All engines — the native policy's and each
//! Envoy domain's — share the one store opened at start, whose state is keyed by namespace, rule
//! name and key descriptors: counters of rules that keep their name and key survive a reload, under
//! the new limit (a rule whose algorithm changes starts afresh).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use floodgate::core::{Clock, SystemClock};
use floodgate::headers::HeaderStyle;
use floodgate::{Engine, Policy};
use serde::Serialize;

use crate::config::{self, Config, ConfigError, Source, StoreConfig};
use crate::metrics::{Metrics, RuleMetrics};
use crate::store::ServerStore;

/// How many applied versions are kept for rollback.
pub const KEPT_VERSIONS: usize = 32;
/// How many audit records are kept.
pub const KEPT_AUDIT_RECORDS: usize = 1000;

/// One policy ready to decide: its engine over the shared store, and its metric handles.
#[derive(Debug)]
pub struct Domain {
    /// The engine.
    pub engine: Engine<ServerStore>,
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
}

impl Running {
    /// The policy deciding requests for `domain`: that Envoy domain's, or the native policy when
    /// no domain is given or no Envoy file defines it.
    pub fn domain(&self, domain: Option<&str>) -> &Domain {
        domain.and_then(|d| self.domains.get(d)).unwrap_or(&self.native)
    }

    /// How many rules are in force, over all policies.
    pub fn rule_count(&self) -> usize {
        self.native.engine.policy().rules().count()
            + self.domains.values().map(|d| d.engine.policy().rules().count()).sum::<usize>()
    }
}

/// What triggered a configuration change (the audit record's `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// The configuration loaded at start.
    Startup,
    /// The file watcher saw the file (or its directory) change.
    Watch,
    /// `SIGHUP`.
    Sighup,
    /// `POST /admin/reload`: reload from the file.
    File,
    /// `POST /admin/config`: a YAML body.
    Admin,
    /// `POST /admin/rollback`.
    Rollback,
}

/// Whether a change was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It is in force.
    Applied,
    /// It was refused; the running configuration stayed.
    Rejected,
}

/// A configuration error as JSON: the message, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorReport {
    /// The full message (`file:line:col: field: what`).
    pub message: String,
    /// The file, when there is one.
    pub file: Option<String>,
    /// 1-based line.
    pub line: Option<usize>,
    /// 1-based column.
    pub column: Option<usize>,
    /// The field path, e.g. `rules[1].rate`.
    pub field: Option<String>,
}

impl From<&ConfigError> for ErrorReport {
    fn from(e: &ConfigError) -> Self {
        ErrorReport {
            message: e.message.clone(),
            file: e.file.as_ref().map(|f| f.display().to_string()),
            line: e.line,
            column: e.column,
            field: e.field.clone(),
        }
    }
}

impl ErrorReport {
    fn plain(message: impl Into<String>) -> Self {
        ErrorReport { message: message.into(), file: None, line: None, column: None, field: None }
    }
}

/// One audit record: a configuration change, applied or rejected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    /// The version it became (`null` when rejected).
    pub version: Option<u64>,
    /// When, RFC 3339 (UTC).
    pub time: String,
    /// What triggered it.
    pub source: Trigger,
    /// The file or directory it was read from, if any.
    pub path: Option<String>,
    /// The content hash (FNV-1a 64, hex) of the applied text (`null` when rejected).
    pub hash: Option<String>,
    /// Rules added, removed and changed (by fingerprint; Envoy rules as `domain/rule`).
    pub added: Vec<String>,
    /// See `added`.
    pub removed: Vec<String>,
    /// See `added`.
    pub changed: Vec<String>,
    /// Applied or rejected.
    pub result: Outcome,
    /// Why it was rejected.
    pub error: Option<ErrorReport>,
    /// For a rollback: the version whose configuration it restored.
    pub restored: Option<u64>,
}

/// The rules added, removed and changed between two fingerprint sets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// New rules.
    pub added: Vec<String>,
    /// Rules gone.
    pub removed: Vec<String>,
    /// Rules whose definition changed.
    pub changed: Vec<String>,
}

impl Diff {
    /// `before` → `after`.
    pub fn between(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> Diff {
        let mut diff = Diff::default();
        for (rule, fp) in after {
            match before.get(rule) {
                None => diff.added.push(rule.clone()),
                Some(old) if old != fp => diff.changed.push(rule.clone()),
                Some(_) => {}
            }
        }
        diff.removed = before.keys().filter(|r| !after.contains_key(*r)).cloned().collect();
        diff
    }
}

/// What an applied change did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Applied {
    /// The version now in force.
    pub version: u64,
    /// Its content hash.
    pub hash: String,
    /// Whether anything changed: `false` when the content equals the running configuration
    /// (nothing applied, no new version).
    pub changed: bool,
    /// Rules added, removed and changed.
    #[serde(flatten)]
    pub diff: Diff,
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
    store: ServerStore,
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
    Store(#[from] crate::store::OpenStoreError),
    /// The HTTP listener is not on loopback and no admin token is set.
    #[error(
        "the HTTP listener {0} is not on loopback: the admin API needs a bearer token \
         (--admin-token or FLOODGATE_ADMIN_TOKEN)"
    )]
    AdminTokenRequired(std::net::SocketAddr),
    /// A listener's address cannot be read.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
}

impl Control {
    /// Puts `config` in force as version 1 over `store` (opened from `config.store`).
    pub fn start(config: Config, store: ServerStore, path: Option<PathBuf>, metrics: Metrics) -> Control {
        let running = build(1, config, &store, &metrics);
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
        let running = Arc::new(running);
        let history =
            History { versions: VecDeque::from([Arc::clone(&running)]), last_watch_rejection: None };
        Control {
            current: ArcSwap::new(running),
            store,
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
    pub fn store(&self) -> &ServerStore {
        &self.store
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
        if config.source.hash == current.source.hash {
            return Ok(Applied {
                version: current.version,
                hash: current.source.hash.clone(),
                changed: false,
                diff: Diff::default(),
            });
        }
        let diff = Diff::between(&current.fingerprints, &config.fingerprints);
        let running = build(current.version + 1, config, &self.store, &self.metrics);
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
        history.versions.push_back(Arc::clone(&running));
        while history.versions.len() > KEPT_VERSIONS {
            history.versions.pop_front();
        }
        self.metrics.config_version(running.version);
        self.metrics.reload(true);
        tracing::info!(
            version = running.version,
            source = ?trigger,
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
        tracing::warn!(source = ?trigger, error = %report.message, "configuration rejected; the running one stays");
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

    fn record(&self, record: AuditRecord) {
        let mut audit = self.audit.lock();
        audit.push_back(record);
        while audit.len() > KEPT_AUDIT_RECORDS {
            audit.pop_front();
        }
    }
}

/// Refuses a configuration that changes the store: the store is opened once, at start.
fn check_replaceable(current: &Running, config: &Config) -> Result<(), ApplyError> {
    if current.store != config.store {
        return Err(ApplyError::Refused(format!(
            "store: the store settings cannot change while running ({} → {}); restart floodgate to change them",
            store_summary(&current.store),
            store_summary(&config.store)
        )));
    }
    Ok(())
}

fn store_summary(store: &StoreConfig) -> String {
    match store {
        StoreConfig::Memory(m) => format!("memory, max_keys {}", m.max_keys),
        StoreConfig::Redis { url, .. } => format!("redis {url}"),
        StoreConfig::RedisCluster { urls, .. } => format!("redis_cluster {}", urls.join(",")),
    }
}

/// Builds the engines of `config` over `store`.
fn build(version: u64, config: Config, store: &ServerStore, metrics: &Metrics) -> Running {
    let Config { store: store_config, headers, policy, domains, fingerprints, source } = config;
    let native = Arc::new(domain(None, policy, store, metrics));
    let domains = domains
        .into_iter()
        .map(|(name, policy)| {
            let d = Arc::new(domain(Some(&name), policy, store, metrics));
            (name, d)
        })
        .collect();
    Running { version, headers, native, domains, source, fingerprints, store: store_config }
}

fn domain(name: Option<&str>, policy: Policy, store: &ServerStore, metrics: &Metrics) -> Domain {
    let rule_metrics = metrics.rules(name, policy.rules().map(|r| r.name()));
    Domain { engine: Engine::new(policy, store.clone()), metrics: rule_metrics }
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

    fn fp(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn diff_names_added_removed_and_changed_rules() {
        let before = fp(&[("a", 1), ("b", 2), ("c", 3)]);
        let after = fp(&[("a", 1), ("b", 20), ("d", 4)]);
        let diff = Diff::between(&before, &after);
        assert_eq!(diff.added, ["d"]);
        assert_eq!(diff.removed, ["c"]);
        assert_eq!(diff.changed, ["b"]);
    }

    #[test]
    fn audit_time_is_rfc3339_utc() {
        let t = rfc3339(&SystemClock::new());
        assert!(t.ends_with('Z') && t.contains('T'), "{t}");
    }
}
