//! [`App`] (the server's state with its front doors) and [`Server`] (an app on bound listeners).
//! The front doors are built here over the shared state ([`crate::state`]); they never import
//! this module.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use floodgate_app::store::{AnyStore, Hooks};
use floodgate_config::Config;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin_state::StateDir;
use crate::control::{Control, StartError};
use crate::gateway::{Gateway, PlainTcp};
use crate::metrics::Metrics;
use crate::state::{ServeOptions, Shared, stopped};
use crate::tls::Tls;

/// The rate-limit service: the running configuration with its store, and the HTTP and gRPC front
/// doors over it. Cheap to clone (shared state).
///
/// ```no_run
/// # async fn run() -> anyhow::Result<()> {
/// use floodgate_server::{App, ServeOptions, Server};
/// use floodgate_config as config;
/// use tokio::net::TcpListener;
///
/// let app = App::new(config::builtin(), ServeOptions::default())?;
/// let http = TcpListener::bind("127.0.0.1:0").await?;
/// let grpc = TcpListener::bind("127.0.0.1:0").await?;
/// let server = Server::new(app, http, Some(grpc))?;
/// println!("HTTP on {}", server.http_addr());
/// server.run(async { tokio::signal::ctrl_c().await.ok(); }).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct App {
    pub(crate) shared: Arc<Shared>,
}

impl App {
    /// Opens the store of `config` and puts `config` in force as version 1. A Redis store is not
    /// connected yet (it connects on first use; `/readyz` tells when it answers), so this fails
    /// only on an invalid store configuration. Call it within a Tokio runtime.
    pub fn new(config: Config, options: ServeOptions) -> Result<App, StartError> {
        let hooks =
            Hooks { breaker: Some(crate::survival::breaker_log(config.store.kind())), fallback: None };
        let store = AnyStore::open_with(&config.store, &config.survival, hooks)?;
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
        let metrics = Metrics::for_store(store.kind(), store.counts_keys());
        let state = match state_dir(options.state_dir.as_deref(), config.admin.state_dir.as_deref())? {
            Some(dir) => Some(StateDir::open(dir, crate::control::KEPT_AUDIT_RECORDS)?),
            None => None,
        };
        let control = Control::start(config, store, options.config_path.clone(), metrics.clone(), state)?;
        Ok(App { shared: Arc::new(Shared::new(control, metrics, options)) })
    }

    /// The running configuration and what changes it.
    pub fn control(&self) -> &Control {
        &self.shared.control
    }

    /// The app's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// The HTTP API (check, report, peek, health, metrics, admin) as an axum router. Serve it with
    /// `into_make_service_with_connect_info::<SocketAddr>()`: the admin API reads the peer address.
    pub fn router(&self) -> axum::Router {
        crate::http::router(Arc::clone(&self.shared))
    }

    /// The Envoy RLS v3 gRPC service.
    pub fn grpc_service(&self) -> crate::grpc::RateLimitServer {
        crate::grpc::service(Arc::clone(&self.shared))
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

/// An [`App`] on bound listeners: HTTP, gRPC when given, and the gateway's (see
/// [`Server::gateway`]).
#[derive(Debug)]
pub struct Server {
    app: App,
    http: TcpListener,
    grpc: Option<TcpListener>,
    http_addr: SocketAddr,
    grpc_addr: Option<SocketAddr>,
    gateway: Option<(Gateway, TcpListener, SocketAddr)>,
    /// TLS of the HTTP and gRPC listeners (HTTP offers `h2` and `http/1.1`, gRPC `h2`).
    tls: Option<(Arc<Tls>, Arc<Tls>)>,
    /// TLS of the gateway's listener.
    gateway_tls: Option<Arc<Tls>>,
}

impl Server {
    /// Takes already-bound listeners (tests bind port 0). Refuses an HTTP listener that is not on
    /// loopback when no admin token is set and no `auth` client holds the `admin` scope: the admin
    /// API shares the HTTP listener.
    pub fn new(app: App, http: TcpListener, grpc: Option<TcpListener>) -> Result<Server, StartError> {
        let http_addr = http.local_addr()?;
        let admin_clients = app.shared.control.current().auth.as_ref().is_some_and(|a| a.any_admin());
        check_admin_exposure(http_addr, app.shared.admin_token.is_some() || admin_clients)?;
        let grpc_addr = grpc.as_ref().map(TcpListener::local_addr).transpose()?;
        let running = app.shared.control.current();
        let tls = match &running.tls {
            Some(files) => {
                let handshake = running.http.header_read_timeout;
                let http = Tls::new(files, &[b"h2", b"http/1.1"], handshake)?;
                let grpc = Tls::new(files, &[b"h2"], handshake)?;
                Some((Arc::new(http), Arc::new(grpc)))
            }
            None => None,
        };
        Ok(Server { app, http, grpc, http_addr, grpc_addr, gateway: None, tls, gateway_tls: None })
    }

    /// Serves the gateway (the configuration's `gateway:` section) on `listener` too. Opens its
    /// accepted-writes queue; refuses when the configuration has no gateway.
    pub fn gateway(mut self, listener: TcpListener) -> Result<Server, StartError> {
        let addr = listener.local_addr()?;
        let gateway = Gateway::open(Arc::clone(&self.app.shared))
            .map_err(|e| StartError::Gateway(std::io::Error::other(e)))?
            .ok_or(StartError::NoGateway)?;
        let running = self.app.shared.control.current();
        if let Some(gateway) = running.gateway.as_ref()
            && let Some(files) = gateway.config.tls.as_ref()
        {
            let handshake = gateway.config.http.header_read_timeout;
            self.gateway_tls = Some(Arc::new(Tls::new(files, &[b"h2", b"http/1.1"], handshake)?));
        }
        self.gateway = Some((gateway, listener, addr));
        Ok(self)
    }

    /// The gateway listener's address.
    pub fn gateway_addr(&self) -> Option<SocketAddr> {
        self.gateway.as_ref().map(|(_, _, addr)| *addr)
    }

    /// The HTTP listener's address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The gRPC listener's address.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_addr
    }

    /// The app.
    pub fn app(&self) -> &App {
        &self.app
    }

    /// Serves until `shutdown` completes, then shuts down gracefully: stops accepting, lets
    /// requests in flight finish, and returns. Starts the file watcher and the `SIGHUP` handler
    /// when the app's options ask for them, and on a Redis store the survival task (fleet
    /// heartbeats, charging the store with what local shares admitted: see [`crate::survival`]).
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let Server { app, http, grpc, gateway, tls, gateway_tls, .. } = self;
        let shared = Arc::clone(&app.shared);
        let (stop_tx, stop_rx) = watch::channel(false);

        let watcher = if shared.options.watch {
            match crate::reload::watch(Arc::clone(&shared), stop_rx.clone()) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the configuration file; reload with SIGHUP or the admin API");
                    None
                }
            }
        } else {
            None
        };
        let tokens = watcher
            .is_some()
            .then(|| tokio::spawn(crate::reload::watch_token_files(Arc::clone(&shared), stop_rx.clone())));
        if shared.options.sighup {
            crate::reload::on_sighup(Arc::clone(&shared), stop_rx.clone())?;
        }
        let upkeep = tokio::spawn(upkeep(shared.metrics.clone(), stop_rx.clone()));
        let live = tokio::spawn(live(Arc::clone(&shared), stop_rx.clone()));
        let survival = tokio::spawn(crate::survival::run(Arc::clone(&shared), stop_rx.clone()));

        for watched in tls.iter().flat_map(|(h, g)| [h, g]).chain(gateway_tls.iter()) {
            tokio::spawn(Arc::clone(watched).watch(stop_rx.clone()));
        }
        let stopped = |mut rx: watch::Receiver<bool>| async move { stopped(&mut rx).await };
        let http_tls = tls.as_ref().map(|(h, _)| Arc::clone(h));
        let http_task = tokio::spawn(crate::http::serve(
            http,
            Arc::clone(&shared),
            app.router(),
            http_tls,
            stop_rx.clone(),
        ));
        let grpc_task = grpc.map(|listener| {
            let svc = app.grpc_service();
            let stop = stopped(stop_rx.clone());
            // The limits of `http:` apply to the gRPC listener's connections too (see
            // `crate::listener`); the header list's bound is set at start.
            let max_header_list = shared.control.load().http.max_header_bytes;
            let builder = tonic::transport::Server::builder()
                .http2_max_header_list_size(u32::try_from(max_header_list).unwrap_or(u32::MAX))
                .add_service(svc);
            let grpc_tls = tls.as_ref().map(|(_, grpc)| Arc::clone(grpc));
            let incoming =
                crate::listener::grpc_incoming(listener, Arc::clone(&shared), grpc_tls, stop_rx.clone());
            tokio::spawn(async move {
                builder.serve_with_incoming_shutdown(incoming, stop).await.map_err(std::io::Error::other)
            })
        });

        let gateway_task = gateway.map(|(gateway, listener, _)| match gateway_tls {
            None => tokio::spawn(gateway.serve(listener, PlainTcp, stop_rx.clone())),
            Some(tls) => tokio::spawn(gateway.serve(listener, tls, stop_rx.clone())),
        });

        shutdown.await;
        tracing::info!("shutting down: no new connections; finishing requests in flight");
        shared.draining.store(true, Ordering::SeqCst);
        let _ = stop_tx.send(true);

        let http_result = http_task.await.map_err(std::io::Error::other)?;
        let gateway_result = match gateway_task {
            Some(task) => task.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        };
        let grpc_result = match grpc_task {
            Some(task) => task.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        };
        drop(watcher);
        if let Some(tokens) = tokens {
            let _ = tokens.await;
        }
        let store = shared.control.store().clone();
        match tokio::task::spawn_blocking(move || store.checkpoint()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "store.persist: no checkpoint at shutdown; the next start replays the log")
            }
            Err(e) => tracing::warn!(error = %e, "store.persist: the shutdown checkpoint failed"),
        }
        let _ = upkeep.await;
        let _ = live.await;
        let _ = survival.await;
        http_result?;
        gateway_result?;
        grpc_result
    }
}

/// Refuses to expose the admin API beyond loopback without a token.
pub fn check_admin_exposure(http: SocketAddr, has_token: bool) -> Result<(), StartError> {
    if !http.ip().is_loopback() && !has_token {
        return Err(StartError::AdminTokenRequired(http));
    }
    Ok(())
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

/// Ticks the dashboard's live view once a second (see [`crate::live`]); closes its streams on stop,
/// so that graceful shutdown does not wait for them.
async fn live(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    use floodgate_core::Clock as _;
    let clock = floodgate_core::SystemClock::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick completes at once: start counting from the next.
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let running = shared.control.current();
                let (config, store) = crate::live::context(&running, shared.control.store());
                shared.live.tick(clock.now().as_secs(), crate::live::rules_in_force(&running), &config, &store);
            }
            () = stopped(&mut stop) => {
                shared.live.close();
                return;
            }
        }
    }
}
