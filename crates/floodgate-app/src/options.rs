//! [`ServeOptions`]: how the service runs, beside its configuration.

use std::path::PathBuf;
use std::time::Duration;

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
    /// The memory store's clock stands at this time and moves only when the admin API moves it
    /// (`--manual-clock`, for tests; see [`ServeClock`](crate::store::ServeClock)); `None`: the
    /// process clock.
    pub manual_clock: Option<floodgate_core::Timestamp>,
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

    /// Run the memory store on a manual clock stopped at `start` (see
    /// [`ServeOptions::manual_clock`]).
    pub fn manual_clock(mut self, start: floodgate_core::Timestamp) -> Self {
        self.manual_clock = Some(start);
        self
    }

    /// Keep the admin state in `dir`.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }
}
