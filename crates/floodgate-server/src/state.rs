//! The server's shared state, below every front door: the running configuration and what changes
//! it ([`Control`]), the decision path, metrics and the serving options. Front doors (HTTP, gRPC)
//! and the tasks around them (reload, upkeep) read it; nothing here knows about them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use floodgate_redis::Readiness;
use tokio::sync::watch;

use crate::control::Control;
use crate::decide::DecisionPath;
use crate::metrics::Metrics;

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
}

/// The server's shared state.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) control: Control,
    pub(crate) path: DecisionPath,
    pub(crate) metrics: Metrics,
    pub(crate) admin_token: Option<String>,
    pub(crate) options: ServeOptions,
    /// Set once shutdown begins: `/readyz` answers 503 from then on.
    pub(crate) draining: AtomicBool,
    /// The last readiness seen (0 unknown, 1 ready, 2 not ready), to log each change once.
    readiness: AtomicU8,
}

impl Shared {
    pub(crate) fn new(control: Control, metrics: Metrics, options: ServeOptions) -> Shared {
        let path = DecisionPath::new(control.store().clone(), metrics.clone());
        Shared {
            control,
            path,
            metrics,
            admin_token: options.admin_token.clone().filter(|t| !t.is_empty()),
            options,
            draining: AtomicBool::new(false),
            readiness: AtomicU8::new(0),
        }
    }

    /// Whether the store can decide now (`/readyz`), logging each change of the answer.
    pub(crate) async fn store_ready(&self) -> bool {
        let store = self.control.store();
        let readiness = store.ready().await;
        let ready = readiness.is_ready();
        let now = if ready { 1 } else { 2 };
        if self.readiness.swap(now, Ordering::Relaxed) != now {
            let kind = store.kind();
            match &readiness {
                Readiness::Ready => tracing::info!(store = kind, "store reachable: ready"),
                Readiness::Failed(why) => tracing::warn!(
                    store = kind,
                    error = %why,
                    "store unreachable: not ready (rules follow on_store_error)"
                ),
                Readiness::Cached => {
                    tracing::warn!(
                        store = kind,
                        "store unreachable: not ready (rules follow on_store_error)"
                    );
                }
            }
        }
        ready
    }
}

/// Completes once `stop` turns true (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
