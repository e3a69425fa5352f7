//! The server's shared state, below every front door: the running configuration and what changes
//! it ([`Control`]), the decision path, metrics and the serving options. Front doors (HTTP, gRPC)
//! and the tasks around them (reload, upkeep) read it; nothing here knows about them.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use floodgate_redis::Readiness;
use tokio::sync::watch;

use crate::control::Control;
use crate::decide::DecisionPath;
use crate::live::{Live, LiveObserver};
use crate::metrics::Metrics;
use crate::switches::Overrides;

/// How the server runs, beside its configuration. `Default`: no file to reload from, no admin
/// token, no file watching, no signal handling (what in-process tests want); the binary sets them.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The configuration file or directory that reloads read from (`None`: the built-in example or
    /// an in-memory configuration; `/admin/reload` then answers 409).
    pub config_path: Option<PathBuf>,
    /// The bearer token the admin API requires (`None`: loopback peers only, no token).
    pub admin_token: Option<String>,
    /// Watch `config_path`'s directory and reload on change (default `false`).
    pub watch: bool,
    /// Reload on `SIGHUP` (default `false`).
    pub sighup: bool,
    /// How long events must be quiet before the watcher reloads (default 200 ms when zero).
    pub debounce: Duration,
    /// The share of decisions logged, one line each (0 to 1; default 0: none). See
    /// `floodgate serve --decision-log-sample`.
    pub decision_log_sample: f64,
    /// Where the admin state is kept (`--state-dir`); the configuration's `admin.state_dir` when
    /// `None`. Giving both, different, is an error at start.
    pub state_dir: Option<PathBuf>,
}

impl ServeOptions {
    /// Reloads read from `path`.
    pub fn config_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_path = Some(path.into());
        self
    }

    /// The admin API requires `token` as a bearer token.
    pub fn admin_token(mut self, token: impl Into<String>) -> Self {
        self.admin_token = Some(token.into());
        self
    }

    /// Watch the configuration file's directory.
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// Reload on `SIGHUP`.
    pub fn sighup(mut self, sighup: bool) -> Self {
        self.sighup = sighup;
        self
    }

    /// Keep the admin state in `dir`.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }
}

/// The server's shared state.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) control: Control,
    pub(crate) path: DecisionPath,
    pub(crate) metrics: Metrics,
    /// The dashboard's live view of decisions.
    pub(crate) live: Arc<Live>,
    pub(crate) admin_token: Option<String>,
    pub(crate) options: ServeOptions,
    /// Set once shutdown begins: `/readyz` answers 503 from then on.
    pub(crate) draining: AtomicBool,
    /// The admin API's overrides of the gateway's switches.
    pub(crate) switches: Overrides,
    /// The last readiness seen (0 unknown, else a [`Ready`]), to log each change once.
    readiness: AtomicU8,
}

impl Shared {
    pub(crate) fn new(control: Control, metrics: Metrics, options: ServeOptions) -> Shared {
        let live = Arc::new(Live::new());
        let switches = Overrides::default();
        switches.restore(control.restored_switches());
        let path = DecisionPath::new(
            control.store().clone(),
            metrics.clone(),
            vec![Box::new(LiveObserver(Arc::clone(&live)))],
            options.decision_log_sample,
        );
        Shared {
            control,
            path,
            metrics,
            live,
            admin_token: options.admin_token.clone().filter(|t| !t.is_empty()),
            options,
            draining: AtomicBool::new(false),
            switches,
            readiness: AtomicU8::new(0),
        }
    }

    /// Whether the server can decide now (`/readyz`), logging each change of the answer: the store
    /// answers, or it does not but every rule in force decides on a local share meanwhile
    /// (`on_store_error: local` over a Redis store).
    pub(crate) async fn ready(&self) -> Ready {
        let store = self.control.store();
        let readiness = store.ready().await;
        let answer = if readiness.is_ready() {
            Ready::Store
        } else if store.fallback().is_some() && self.control.current().all_local() {
            Ready::Local
        } else {
            Ready::No
        };
        if self.readiness.swap(answer as u8, Ordering::Relaxed) != answer as u8 {
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
}

/// What `/readyz` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Ready {
    /// The store answers.
    Store = 1,
    /// It does not, and every rule decides on its local share.
    Local = 2,
    /// It does not, and some rule fails open or closed.
    No = 3,
}

/// Completes once `stop` turns true (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
