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

mod fixed;
mod running;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use crate::store::{AnyStore, OpenError};
use arc_swap::ArcSwap;
use floodgate::Engine;
use floodgate::core::{Clock, SystemClock};
use floodgate_config::{self as config, Config, ConfigError};

use crate::admin_state::{self, Restored, StateDir, StateError, StoredSource, StoredVersion};
use crate::audit::{Applied, AuditRecord, AuditedKey, Diff, ErrorReport, Outcome, Trigger};
use crate::auth::Clients;
use crate::metrics::Metrics;

use self::fixed::{check_replaceable, resume};
use self::running::build;
pub use self::running::{Domain, Running};
use crate::switches::{Overrides, SwitchChange};

/// How many applied versions are kept for rollback.
pub const KEPT_VERSIONS: usize = 32;
/// How many audit records are kept.
pub const KEPT_AUDIT_RECORDS: usize = 1000;

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
    /// The change could not be written to the state directory, so it was not applied.
    #[error("not applied: {0}")]
    State(String),
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
    audit: Arc<parking_lot::Mutex<VecDeque<AuditRecord>>>,
    /// Where changes are written before they are answered, when there is a state directory.
    state: Option<Arc<parking_lot::Mutex<StateDir>>>,
    /// The gateway switches the state directory held at start.
    restored_switches: SwitchChange,
}

#[derive(Debug)]
struct History {
    /// Applied versions, oldest first, at most [`KEPT_VERSIONS`].
    versions: VecDeque<Kept>,
    /// The last rejection recorded for a watch event, to not repeat it for every event.
    last_watch_rejection: Option<String>,
    /// The hash of the configuration file (or directory, or built-in example) as last read.
    file_hash: String,
}

/// What asked for a configuration change: its trigger, and the admin caller who asked
/// ([`AdminCaller::label`](crate::auth::AdminCaller::label)), if one did.
#[derive(Debug)]
struct Change {
    trigger: Trigger,
    by: Option<String>,
}

/// A version kept for rollback.
#[derive(Debug)]
struct Kept {
    version: u64,
    /// The version as it ran; `None` for a version read back from the state directory and not put
    /// in force since (it is read again from `source` when rolled back to).
    running: Option<Arc<Running>>,
    /// Its texts.
    source: Arc<StoredSource>,
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
    /// The admin state directory cannot be used.
    #[error(transparent)]
    State(#[from] StateError),
    /// `--state-dir` and the configuration's `admin.state_dir` name different directories.
    #[error(
        "--state-dir {} and the configuration's admin.state_dir {} differ: give one, or the same",
        .0.display(),
        .1.display()
    )]
    StateDirConflict(PathBuf, PathBuf),
}

impl Control {
    /// Puts a configuration in force over `store` (opened from `config.store`), with the admin
    /// state read from `state` when there is one (`None`: kept in memory only): the kept versions become rollback targets, the
    /// audit log continues, and the latest kept version is put back in force — unless the
    /// configuration file changed since it was applied, in which case `config` (the file as it is
    /// now) wins as a new version. Writes the start to the state directory before returning.
    pub fn start(
        config: Config,
        store: AnyStore,
        path: Option<PathBuf>,
        metrics: Metrics,
        state: Option<(StateDir, Restored)>,
    ) -> Result<Control, StartError> {
        let clock = SystemClock::new();
        let (dir, restored) = match state {
            Some((dir, restored)) => (Some(dir), restored),
            None => (None, Restored::default()),
        };
        let Restored { versions: stored, audit: restored_audit, switches } = restored;
        let file_hash = config.source.hash.clone();
        let (config, version, resumed) = resume(config, stored.last());
        let running = build(version, config, &metrics);
        let engine = Arc::new(Engine::from_shared(Arc::clone(&running.native.policy), store.clone()));
        metrics.config_version(version);
        let record = AuditRecord {
            version: Some(version),
            time: rfc3339(&clock),
            source: Trigger::Startup,
            path: running.source.path.as_ref().map(|p| p.display().to_string()),
            hash: Some(running.source.hash.clone()),
            added: running.fingerprints.keys().cloned().collect(),
            removed: Vec::new(),
            changed: Vec::new(),
            result: Outcome::Applied,
            error: None,
            restored: resumed,
            by: None,
            key: None,
        };
        tracing::info!(
            event = "config_applied",
            version,
            source = Trigger::Startup.as_str(),
            resumed,
            hash = %running.source.hash,
            added = ?record.added,
            "configuration applied"
        );
        let running = Arc::new(running);
        let mut versions: VecDeque<Kept> = stored
            .iter()
            .map(|v| Kept { version: v.version, running: None, source: Arc::new(v.source.clone()) })
            .collect();
        let source = match (resumed, versions.back()) {
            (Some(_), Some(last)) => Arc::clone(&last.source),
            _ => Arc::new(StoredSource::of(&running.source, "built-in example")),
        };
        match versions.back_mut() {
            Some(last) if resumed.is_some() => last.running = Some(Arc::clone(&running)),
            _ => versions.push_back(Kept {
                version,
                running: Some(Arc::clone(&running)),
                source: Arc::clone(&source),
            }),
        }
        while versions.len() > KEPT_VERSIONS {
            versions.pop_front();
        }
        let mut audit: VecDeque<AuditRecord> = restored_audit.into();
        audit.push_back(record.clone());
        while audit.len() > KEPT_AUDIT_RECORDS {
            audit.pop_front();
        }
        let mut dir = dir;
        if let Some(dir) = dir.as_mut() {
            if resumed.is_none() {
                let stored = StoredVersion {
                    version,
                    time: record.time.clone(),
                    trigger: Trigger::Startup,
                    restored: None,
                    file_hash: file_hash.clone(),
                    source: (*source).clone(),
                };
                dir.write_version(&stored, versions.front().map_or(version, |k| k.version))?;
            }
            let kept: Vec<AuditRecord> = audit.iter().cloned().collect();
            dir.append_audit(&record, &kept)?;
        }
        let history = History { versions, last_watch_rejection: None, file_hash };
        Ok(Control::assemble(running, store, engine, metrics, path, clock, history, audit, dir, switches))
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        running: Arc<Running>,
        store: AnyStore,
        engine: Arc<Engine<AnyStore>>,
        metrics: Metrics,
        path: Option<PathBuf>,
        clock: SystemClock,
        history: History,
        audit: VecDeque<AuditRecord>,
        state: Option<StateDir>,
        restored_switches: SwitchChange,
    ) -> Control {
        Control {
            current: ArcSwap::new(running),
            store,
            engine,
            metrics,
            path,
            clock,
            history: tokio::sync::Mutex::new(history),
            audit: Arc::new(parking_lot::Mutex::new(audit)),
            state: state.map(|s| Arc::new(parking_lot::Mutex::new(s))),
            restored_switches,
        }
    }

    /// The gateway switches the admin API had set, as the state directory held them at start
    /// (none without a state directory).
    pub fn restored_switches(&self) -> SwitchChange {
        self.restored_switches
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
        self.history.lock().await.versions.iter().map(|k| k.version).collect()
    }

    /// Reloads from the configuration file, as asked `by` an admin caller
    /// ([`AdminCaller::label`](crate::auth::AdminCaller::label), the audit record's `by`), or by
    /// no one (`None`: the file watcher, `SIGHUP`).
    pub async fn reload(&self, trigger: Trigger, by: Option<String>) -> Result<Applied, ApplyError> {
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
        self.apply_loaded(&mut history, loaded, trigger, by).await
    }

    /// Validates and applies a YAML body (`POST /admin/config`), as asked `by` the caller
    /// ([`AdminCaller::label`](crate::auth::AdminCaller::label), the audit record's `by`).
    pub async fn apply_text(&self, text: &str, by: String) -> Result<Applied, ApplyError> {
        let mut history = self.history.lock().await;
        self.apply_loaded(&mut history, config::parse("admin", text), Trigger::Admin, Some(by)).await
    }

    /// Validates a YAML body without applying it; also refuses what a reload would refuse.
    pub fn validate_text(&self, text: &str) -> Result<Config, ApplyError> {
        let config = config::parse("admin", text).map_err(ApplyError::Invalid)?;
        check_replaceable(&self.current.load(), &config)?;
        Ok(config)
    }

    /// Puts the configuration of `version` back in force as a new version, or that of the version
    /// applied before the current one when `version` is `None`. A version read back from the state
    /// directory is read again from its kept texts, and refused ([`ApplyError::Refused`]) when they
    /// no longer make a valid configuration or would change what is fixed at start. Asked `by` the
    /// caller ([`AdminCaller::label`](crate::auth::AdminCaller::label), the audit record's `by`).
    pub async fn rollback(&self, version: Option<u64>, by: String) -> Result<Applied, ApplyError> {
        let mut history = self.history.lock().await;
        let current = self.current.load_full();
        let target = match version {
            Some(v) => history.versions.iter().find(|k| k.version == v),
            None => history.versions.iter().rev().nth(1),
        };
        let Some(target) = target else {
            let kept: Vec<String> = history.versions.iter().map(|k| k.version.to_string()).collect();
            return Err(ApplyError::UnknownVersion {
                version: version.unwrap_or(current.version.saturating_sub(1)),
                kept: kept.join(", "),
            });
        };
        let (target_version, source) = (target.version, Arc::clone(&target.source));
        let running = match &target.running {
            Some(target) => Running {
                version: current.version + 1,
                headers: target.headers,
                native: Arc::clone(&target.native),
                domains: target.domains.clone(),
                source: target.source.clone(),
                fingerprints: target.fingerprints.clone(),
                store: target.store.clone(),
                survival: target.survival.clone(),
                gateway: target.gateway.clone(),
                detailed: Arc::clone(&target.detailed),
                auth: target.auth.clone(),
                http: target.http,
                tls: target.tls.clone(),
                admin: target.admin.clone(),
                rlqs: target.rlqs.clone(),
            },
            None => {
                let config = source.read().map_err(|e| {
                    ApplyError::Refused(format!(
                        "version {target_version} cannot be put back in force: its kept configuration no longer \
                         reads: {e}"
                    ))
                })?;
                check_replaceable(&current, &config)?;
                build(current.version + 1, config, &self.metrics)
            }
        };
        let diff = Diff::between(&current.fingerprints, &running.fingerprints);
        let change = Change { trigger: Trigger::Rollback, by: Some(by) };
        self.install(&mut history, running, source, diff, change, Some(target_version)).await
    }

    async fn apply_loaded(
        &self,
        history: &mut History,
        loaded: Result<Config, ConfigError>,
        trigger: Trigger,
        by: Option<String>,
    ) -> Result<Applied, ApplyError> {
        let change = Change { trigger, by };
        let current = self.current.load_full();
        let checked = loaded
            .map_err(ApplyError::Invalid)
            .and_then(|config| check_replaceable(&current, &config).map(|()| config));
        let config = match checked {
            Ok(config) => config,
            Err(error) => {
                self.reject(history, &error, change).await;
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
        let source = Arc::new(StoredSource::of(&config.source, "admin"));
        let running = build(current.version + 1, config, &self.metrics);
        self.install(history, running, source, diff, change, None).await
    }

    async fn install(
        &self,
        history: &mut History,
        running: Running,
        source: Arc<StoredSource>,
        diff: Diff,
        change: Change,
        restored: Option<u64>,
    ) -> Result<Applied, ApplyError> {
        let Change { trigger, by } = change;
        let record = AuditRecord {
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
            by,
            key: None,
        };
        let file_hash = match trigger {
            Trigger::Startup | Trigger::Watch | Trigger::Sighup | Trigger::File => {
                running.source.hash.clone()
            }
            Trigger::Admin | Trigger::Rollback | Trigger::Switch | Trigger::KeyReset => {
                history.file_hash.clone()
            }
        };
        // On disk first: a change that cannot be kept is not applied.
        if let Some(state) = &self.state {
            let stored = StoredVersion {
                version: running.version,
                time: record.time.clone(),
                trigger,
                restored,
                file_hash: file_hash.clone(),
                source: (*source).clone(),
            };
            // The versions kept once this one is pushed.
            let oldest_kept = history
                .versions
                .iter()
                .map(|k| k.version)
                .chain([running.version])
                .rev()
                .nth(KEPT_VERSIONS - 1)
                .unwrap_or(0);
            let (state, audit, appended) = (Arc::clone(state), Arc::clone(&self.audit), record.clone());
            let written = admin_state::blocking(move || {
                let mut state = state.lock();
                state.write_version(&stored, oldest_kept)?;
                let kept = kept_with(&audit, &appended);
                state.append_audit(&appended, &kept)
            })
            .await;
            if let Err(e) = written {
                tracing::error!(
                    event = "config_not_persisted",
                    version = running.version,
                    source = trigger.as_str(),
                    error = %e,
                    "configuration not applied: the state directory cannot be written"
                );
                return Err(ApplyError::State(e.to_string()));
            }
        }
        history.file_hash = file_hash;
        let running = Arc::new(running);
        self.current.store(Arc::clone(&running));
        self.engine.set_shared_policy(Arc::clone(&running.native.policy));
        history.versions.push_back(Kept {
            version: running.version,
            running: Some(Arc::clone(&running)),
            source,
        });
        while history.versions.len() > KEPT_VERSIONS {
            history.versions.pop_front();
        }
        self.metrics.config_version(running.version);
        self.metrics.reload(true);
        tracing::info!(
            event = "config_applied",
            version = running.version,
            source = trigger.as_str(),
            by = record.by.as_deref(),
            restored,
            hash = %running.source.hash,
            added = ?diff.added,
            removed = ?diff.removed,
            changed = ?diff.changed,
            "configuration applied"
        );
        self.remember(record);
        Ok(Applied { version: running.version, hash: running.source.hash.clone(), changed: true, diff })
    }

    async fn reject(&self, history: &mut History, error: &ApplyError, change: Change) {
        let Change { trigger, by } = change;
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
            by = by.as_deref(),
            error = %report.message,
            "configuration rejected; the running one stays"
        );
        let path = match trigger {
            Trigger::Admin => None,
            _ => self.path.as_ref().map(|p| p.display().to_string()),
        };
        let record = AuditRecord {
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
            by,
            key: None,
        };
        // The rejection is answered whether or not its record is kept: nothing changed.
        if let Err(e) = self.persist_record(&record).await {
            tracing::error!(event = "audit_not_persisted", error = %e, "the rejection's audit record was not written");
        }
        self.remember(record);
    }

    /// Changes the gateway's operator switches (admin API), as asked `by` the caller
    /// ([`AdminCaller::label`](crate::auth::AdminCaller::label)): `change` sets them on `overrides` and
    /// says what changed, as audit lines (`gateway.switches.shed: none → low`). With a state
    /// directory, the switches and the audit record are on disk before this returns; when they
    /// cannot be written, the switches are put back as they were and the change is refused.
    pub async fn change_switches(
        &self,
        overrides: &Overrides,
        by: String,
        change: impl FnOnce() -> Vec<String>,
    ) -> Result<Vec<String>, ApplyError> {
        // One change at a time, with the configuration's.
        let _history = self.history.lock().await;
        let before = overrides.current();
        let changed = change();
        if changed.is_empty() {
            return Ok(changed);
        }
        let current = self.current.load();
        let record = AuditRecord {
            version: Some(current.version),
            time: rfc3339(&self.clock),
            source: Trigger::Switch,
            path: None,
            hash: Some(current.source.hash.clone()),
            added: Vec::new(),
            removed: Vec::new(),
            changed: changed.clone(),
            result: Outcome::Applied,
            error: None,
            restored: None,
            by: Some(by.clone()),
            key: None,
        };
        if let Some(state) = &self.state {
            let (state, audit, appended, now) =
                (Arc::clone(state), Arc::clone(&self.audit), record.clone(), overrides.current());
            let written = admin_state::blocking(move || {
                let mut state = state.lock();
                state.write_switches(now)?;
                let kept = kept_with(&audit, &appended);
                state.append_audit(&appended, &kept)
            })
            .await;
            if let Err(e) = written {
                overrides.restore(before);
                tracing::error!(event = "switches_not_persisted", error = %e, "gateway switches not changed: the state directory cannot be written");
                return Err(ApplyError::State(e.to_string()));
            }
        }
        tracing::info!(event = "switches_changed", changes = ?changed, by = %by, "gateway switches changed");
        self.remember(record);
        Ok(changed)
    }

    /// Records a key reset of the admin API (`DELETE /admin/keys`) in the audit log — `by` the
    /// caller ([`AdminCaller::label`](crate::auth::AdminCaller::label)), failed with `error` when
    /// the store could not reset the key — and logs it (`key_reset`: info, or warn when it failed).
    /// With a state directory, the record is on disk before this returns; when it cannot be
    /// written, that is logged (`audit_not_persisted`) and the reset stands: it was made.
    pub async fn record_key_reset(&self, key: AuditedKey, by: String, error: Option<String>) {
        // One audit record at a time, with the configuration's changes.
        let _history = self.history.lock().await;
        let current = self.current.load();
        let descriptors: Vec<String> = key.descriptors.iter().map(|(n, v)| format!("{n}={v:?}")).collect();
        let descriptors = descriptors.join(" ");
        match &error {
            None => tracing::info!(
                event = "key_reset",
                rule = %key.rule,
                domain = key.domain.as_deref(),
                descriptors = %descriptors,
                by = %by,
                reset = key.reset,
                "key reset"
            ),
            Some(error) => tracing::warn!(
                event = "key_reset",
                rule = %key.rule,
                domain = key.domain.as_deref(),
                descriptors = %descriptors,
                by = %by,
                error = %error,
                "key not reset: the store failed"
            ),
        }
        let record = AuditRecord {
            version: Some(current.version),
            time: rfc3339(&self.clock),
            source: Trigger::KeyReset,
            path: None,
            hash: Some(current.source.hash.clone()),
            added: Vec::new(),
            removed: Vec::new(),
            changed: Vec::new(),
            result: if error.is_none() { Outcome::Applied } else { Outcome::Rejected },
            error: error.map(ErrorReport::plain),
            restored: None,
            by: Some(by),
            key: Some(key),
        };
        if let Err(e) = self.persist_record(&record).await {
            tracing::error!(event = "audit_not_persisted", error = %e, "the key reset's audit record was not written");
        }
        self.remember(record);
    }

    /// Appends `record` to the state directory's audit log, when there is one.
    async fn persist_record(&self, record: &AuditRecord) -> Result<(), StateError> {
        let Some(state) = &self.state else { return Ok(()) };
        let (state, audit, appended) = (Arc::clone(state), Arc::clone(&self.audit), record.clone());
        admin_state::blocking(move || {
            let kept = kept_with(&audit, &appended);
            state.lock().append_audit(&appended, &kept)
        })
        .await
    }

    /// Adds `record` to the audit log readers see.
    fn remember(&self, record: AuditRecord) {
        let mut audit = self.audit.lock();
        audit.push_back(record);
        while audit.len() > KEPT_AUDIT_RECORDS {
            audit.pop_front();
        }
    }
}

/// The audit log as kept once `record` is added: what a rewrite of the log's file holds.
fn kept_with(audit: &parking_lot::Mutex<VecDeque<AuditRecord>>, record: &AuditRecord) -> Vec<AuditRecord> {
    let audit = audit.lock();
    let skip = (audit.len() + 1).saturating_sub(KEPT_AUDIT_RECORDS);
    audit.iter().skip(skip).cloned().chain([record.clone()]).collect()
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
