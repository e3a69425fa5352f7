//! Floodgate's service core: what every front door stands on.
//!
//! An [`App`] is one running service: the configuration in force and how it changes
//! ([`control`]: apply, reload, rollback, kept versions, the admin state on disk, the audit log),
//! the store it decides on (opened here, from the configuration: [`store`]), the one decision path
//! every front door goes down ([`decide`]: descriptors → policy → store → observers), who may call
//! ([`auth`]), the Prometheus metrics ([`metrics`]), the dashboard's live view ([`live`]), the
//! tasks that keep a shared store survivable ([`survival`]), the gateway switches the admin API
//! sets ([`switches`]), and the listener every door accepts its connections with ([`listener`],
//! with one TLS acceptor: [`tls`]).
//!
//! The front doors are crates of their own above this one — `floodgate-api` (the HTTP API and
//! Envoy RLS) and `floodgate-gateway` — and never depend on each other; the `floodgate` binary
//! (`floodgate-server`) wires them to an app. Nothing here knows a front door.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use floodgate::{Descriptors, Hit};
//! use floodgate_app::{App, ServeOptions};
//! use floodgate_app::metrics::Api;
//!
//! let app = App::new(floodgate_config::builtin(), ServeOptions::default())?;
//! let running = app.control().load();
//! let descriptors = Descriptors::new().with("user", "u1").with("route", "POST /chat");
//! let verdict = app.decisions().decide(running.domain(None), Api::Check, &[Hit::new(&descriptors, 1)]).await?;
//! assert!(verdict.allowed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

pub mod admin_state;
pub mod audit;
pub mod auth;
pub mod control;
pub mod decide;
mod http1;
pub mod listener;
pub mod live;
pub mod metrics;
mod options;
pub mod reload;
pub mod rlqs;
pub mod store;
pub mod survival;
pub mod switches;
pub mod tls;
pub mod workers;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use floodgate_config::Config;
use floodgate_redis::Readiness;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admin_state::StateDir;
use crate::control::Control;
use crate::decide::DecisionPath;
use crate::live::{Live, LiveObserver};
use crate::metrics::{Metrics, StoreReports};
use crate::store::{AnyStore, Hooks, ServeClock};
use crate::switches::Overrides;

pub use crate::control::StartError;
pub use crate::options::ServeOptions;

/// One running service: its configuration, store, decision path, metrics and live view, below
/// every front door. Cheap to clone (clones share the service).
#[derive(Debug, Clone)]
pub struct App {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    control: Control,
    decisions: DecisionPath,
    metrics: Metrics,
    /// The dashboard's live view of decisions.
    live: Arc<Live>,
    admin_token: Option<String>,
    options: ServeOptions,
    /// Set once shutdown begins: `/readyz` answers 503 from then on.
    draining: AtomicBool,
    /// The admin API's overrides of the gateway's switches.
    switches: Overrides,
    /// The last readiness seen (0 unknown, else a [`Ready`]), to log each change once.
    readiness: AtomicU8,
    /// The store's clock.
    clock: ServeClock,
    /// Envoy's rate limit quota service: its streams and shares.
    rlqs: rlqs::Quotas<ServeClock>,
}

impl App {
    /// Opens the store of `config` and puts `config` in force as version 1 (or resumes the admin
    /// state of `options.state_dir`). A Redis store is not connected yet (it connects on first
    /// use; [`App::ready`] tells when it answers), so this fails only on an invalid store
    /// configuration or an unusable state directory. Call it within a Tokio runtime.
    pub fn new(config: Config, options: ServeOptions) -> Result<App, StartError> {
        let hooks = Hooks { breaker: Some(survival::breaker_log(config.store.kind())), fallback: None };
        let clock = match options.manual_clock {
            Some(start) => ServeClock::manual(start),
            None => ServeClock::system(),
        };
        let store = AnyStore::open_on(&config.store, &config.survival, hooks, clock.clone())?;
        if let AnyStore::Memory(memory) = &store
            && let Some(r) = memory.recovered()
        {
            if let Some((file, at, dropped)) = &r.truncated {
                tracing::warn!(
                    file = %file.display(), offset = at, bytes = dropped,
                    "store.persist: cut a torn write off the end of the log (a crash during a write; it was never acknowledged)"
                );
            }
            tracing::info!(
                keys = r.keys,
                records = r.records,
                expired = r.expired,
                segments = r.segments,
                took_ms = r.took.as_millis() as u64,
                "store.persist: state loaded"
            );
        }
        let reports = StoreReports { keys: store.counts_keys(), expiries: store.reports_expiries() };
        let metrics = Metrics::for_store(store.kind(), reports);
        let state = match state_dir(options.state_dir.as_deref(), config.admin.state_dir.as_deref())? {
            Some(dir) => Some(StateDir::open(dir, control::KEPT_AUDIT_RECORDS)?),
            None => None,
        };
        let control = Control::start(config, store, options.config_path.clone(), metrics.clone(), state)?;
        let live = Arc::new(Live::new());
        let quotas = rlqs::Quotas::new(clock.clone(), metrics.rlqs().clone());
        let switches = Overrides::default();
        switches.restore(control.restored_switches());
        let decisions = DecisionPath::new(
            control.store().clone(),
            metrics.clone(),
            vec![Box::new(LiveObserver(Arc::clone(&live)))],
            options.decision_log_sample,
        );
        let inner = Inner {
            control,
            decisions,
            metrics,
            live,
            admin_token: options.admin_token.clone().filter(|t| !t.is_empty()),
            options,
            draining: AtomicBool::new(false),
            clock,
            switches,
            readiness: AtomicU8::new(0),
            rlqs: quotas,
        };
        Ok(App { inner: Arc::new(inner) })
    }

    /// The running configuration and what changes it.
    pub fn control(&self) -> &Control {
        &self.inner.control
    }

    /// The decision path every front door decides on.
    pub fn decisions(&self) -> &DecisionPath {
        &self.inner.decisions
    }

    /// The app's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The dashboard's live view of decisions.
    pub fn live(&self) -> &Arc<Live> {
        &self.inner.live
    }

    /// The bearer token the admin API requires, if one is set (never empty).
    pub fn admin_token(&self) -> Option<&str> {
        self.inner.admin_token.as_deref()
    }

    /// The store's clock when it is a manual one (`--manual-clock`), which `POST /admin/clock`
    /// moves.
    pub fn manual_clock(&self) -> Option<&floodgate_core::ManualClock> {
        self.inner.clock.as_manual()
    }

    /// Envoy's rate limit quota service: its streams, buckets and shares ([`rlqs`]).
    pub fn rlqs(&self) -> &rlqs::Quotas<ServeClock> {
        &self.inner.rlqs
    }

    /// How the app runs.
    pub fn options(&self) -> &ServeOptions {
        &self.inner.options
    }

    /// The admin API's overrides of the gateway's switches.
    pub fn switches(&self) -> &Overrides {
        &self.inner.switches
    }

    /// Whether shutdown has begun.
    pub fn draining(&self) -> bool {
        self.inner.draining.load(Ordering::Relaxed)
    }

    /// Begins shutdown: [`App::draining`] is true from now on (`/readyz` answers 503).
    pub fn drain(&self) {
        self.inner.draining.store(true, Ordering::SeqCst);
    }

    /// Whether the app can decide now (`/readyz`), logging each change of the answer: the store
    /// answers, or it does not but every rule in force decides on a local share meanwhile
    /// (`on_store_error: local` over a Redis store).
    pub async fn ready(&self) -> Ready {
        let store = self.control().store();
        let readiness = store.ready().await;
        let answer = if readiness.is_ready() {
            Ready::Store
        } else if store.fallback().is_some() && self.control().current().all_local() {
            Ready::Local
        } else {
            Ready::No
        };
        if self.inner.readiness.swap(answer as u8, Ordering::Relaxed) != answer as u8 {
            let kind = store.kind();
            let why = match &readiness {
                Readiness::Failed(why) => why.as_str(),
                _ => "no answer when last asked",
            };
            match answer {
                Ready::Store => {
                    tracing::info!(event = "readiness", store = kind, ready = true, "store reachable: ready")
                }
                Ready::Local => tracing::warn!(
                    event = "readiness",
                    store = kind,
                    ready = true,
                    error = %why,
                    "store unreachable: ready on local shares (every rule has on_store_error local)"
                ),
                Ready::No => tracing::warn!(
                    event = "readiness",
                    store = kind,
                    ready = false,
                    error = %why,
                    "store unreachable: not ready (rules follow on_store_error)"
                ),
            }
        }
        answer
    }

    /// Runs the app with its front doors until `shutdown` completes: starts the app's tasks
    /// ([`App::start_tasks`]) and the doors `doors` spawns (each serving until the `stop` it is
    /// given turns true); then shuts down gracefully — [`App::drain`], stop, wait for every door
    /// to let its requests in flight finish, [`Tasks::finish`]. The first error of a door is
    /// returned, once all have ended.
    pub async fn run(
        &self,
        shutdown: impl Future<Output = ()>,
        doors: impl FnOnce(&watch::Receiver<bool>) -> std::io::Result<Vec<Door>>,
    ) -> std::io::Result<()> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let tasks = self.start_tasks(&stop_rx);
        let (doors, mut result) = match doors(&stop_rx) {
            Ok(doors) => {
                shutdown.await;
                tracing::info!("shutting down: no new connections; finishing requests in flight");
                (doors, Ok(()))
            }
            Err(e) => (Vec::new(), Err(e)),
        };
        self.drain();
        let _ = stop_tx.send(true);
        for door in doors {
            let ended = door.await.map_err(std::io::Error::other).and_then(|served| served);
            if result.is_ok() {
                result = ended;
            }
        }
        tasks.finish().await;
        result
    }

    /// Starts what runs beside the front doors until `stop` turns true: the configuration
    /// watcher and the token-file poller when the options ask to watch, the metrics upkeep, the
    /// live view's ticks, and on a Redis store the survival task (fleet heartbeats, charging the
    /// store with what local shares admitted: see [`survival`]). [`Tasks::finish`] waits for them.
    pub fn start_tasks(&self, stop: &watch::Receiver<bool>) -> Tasks {
        let watcher = if self.options().watch {
            match reload::watch(self.clone(), stop.clone()) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the configuration file; reload with SIGHUP or the admin API");
                    None
                }
            }
        } else {
            None
        };
        let mut handles = vec![
            tokio::spawn(upkeep(self.metrics().clone(), stop.clone())),
            tokio::spawn(live(self.clone(), stop.clone())),
            tokio::spawn(survival::run(self.clone(), stop.clone())),
            tokio::spawn(rlqs::run(self.clone(), stop.clone())),
        ];
        if watcher.is_some() {
            handles.push(tokio::spawn(reload::watch_token_files(self.clone(), stop.clone())));
        }
        Tasks { app: self.clone(), watcher, handles }
    }
}

/// A front door serving its listener, spawned: see [`App::run`].
pub type Door = JoinHandle<std::io::Result<()>>;

/// The tasks [`App::start_tasks`] started.
#[derive(Debug)]
pub struct Tasks {
    app: App,
    watcher: Option<reload::ConfigWatcher>,
    handles: Vec<JoinHandle<()>>,
}

impl Tasks {
    /// Once `stop` has turned true: waits for the tasks to end, then checkpoints a persisted
    /// memory store (so that the next start need not replay its log).
    pub async fn finish(self) {
        drop(self.watcher);
        for handle in self.handles {
            let _ = handle.await;
        }
        let store = self.app.control().store().clone();
        match tokio::task::spawn_blocking(move || store.checkpoint()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "store.persist: no checkpoint at shutdown; the next start replays the log")
            }
            Err(e) => tracing::warn!(error = %e, "store.persist: the shutdown checkpoint failed"),
        }
    }
}

/// The admin state directory: `--state-dir`'s, else the configuration's `admin.state_dir`; both
/// given and different is an error.
fn state_dir<'a>(
    option: Option<&'a std::path::Path>,
    configured: Option<&'a std::path::Path>,
) -> Result<Option<&'a std::path::Path>, StartError> {
    match (option, configured) {
        (Some(a), Some(b)) if a != b => Err(StartError::StateDirConflict(a.to_path_buf(), b.to_path_buf())),
        (Some(dir), _) | (None, Some(dir)) => Ok(Some(dir)),
        (None, None) => Ok(None),
    }
}

/// Drains histogram buffers every 5 s.
async fn upkeep(metrics: Metrics, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = tick.tick() => metrics.run_upkeep(),
            () = stopped(&mut stop) => return,
        }
    }
}

/// Ticks the dashboard's live view once a second (see [`live`]); closes its streams on stop, so
/// that graceful shutdown does not wait for them.
async fn live(app: App, mut stop: watch::Receiver<bool>) {
    use floodgate_core::Clock as _;
    let clock = floodgate_core::SystemClock::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick completes at once: start counting from the next.
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let running = app.control().current();
                let (config, store) = live::context(&running, app.control().store());
                app.live().tick(clock.now().as_secs(), live::rules_in_force(&running), &config, &store);
            }
            () = stopped(&mut stop) => {
                app.live().close();
                return;
            }
        }
    }
}

/// What `/readyz` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Ready {
    /// The store answers.
    Store = 1,
    /// It does not, and every rule decides on its local share.
    Local = 2,
    /// It does not, and some rule fails open or closed.
    No = 3,
}

/// Completes once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
