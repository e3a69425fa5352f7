//! [`Server`]: an app with its front doors on bound listeners — the HTTP API and Envoy RLS
//! (`floodgate-api`) and the gateway (`floodgate-gateway`) — its background tasks, and graceful
//! shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use floodgate_app::tls::Tls;
use floodgate_app::{App, StartError};
use floodgate_gateway::Gateway;
use tokio::net::TcpListener;
use tokio::sync::watch;

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
        let admin_clients = app.control().current().auth.as_ref().is_some_and(|a| a.any_admin());
        check_admin_exposure(http_addr, app.admin_token().is_some() || admin_clients)?;
        let grpc_addr = grpc.as_ref().map(TcpListener::local_addr).transpose()?;
        let running = app.control().current();
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
        let gateway = Gateway::open(self.app.clone())
            .map_err(|e| StartError::Gateway(std::io::Error::other(e)))?
            .ok_or(StartError::NoGateway)?;
        let running = self.app.control().current();
        if let Some(gateway) = running.gateway.as_ref()
            && let Some(files) = gateway.tls.as_ref()
        {
            let handshake = gateway.http.header_read_timeout;
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
    /// heartbeats, charging the store with what local shares admitted: see
    /// [`floodgate_app::survival`]).
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let Server { app, http, grpc, gateway, tls, gateway_tls, .. } = self;
        let doors = |stop: &watch::Receiver<bool>| {
            if app.options().sighup {
                crate::signals::reload_on_sighup(app.clone(), stop.clone())?;
            }
            for watched in tls.iter().flat_map(|(h, g)| [h, g]).chain(gateway_tls.iter()) {
                tokio::spawn(Arc::clone(watched).watch(stop.clone()));
            }
            let (http_tls, grpc_tls) = match &tls {
                Some((h, g)) => (Some(Arc::clone(h)), Some(Arc::clone(g))),
                None => (None, None),
            };
            let mut doors =
                vec![tokio::spawn(floodgate_api::serve_http(app.clone(), http, http_tls, stop.clone()))];
            if let Some(listener) = grpc {
                doors.push(tokio::spawn(floodgate_api::serve_grpc(
                    app.clone(),
                    listener,
                    grpc_tls,
                    stop.clone(),
                )));
            }
            if let Some((gateway, listener, _)) = gateway {
                doors.push(tokio::spawn(gateway.serve(listener, gateway_tls.clone(), stop.clone())));
            }
            Ok(doors)
        };
        app.run(shutdown, doors).await
    }
}

/// Refuses to expose the admin API beyond loopback without a token.
pub fn check_admin_exposure(http: SocketAddr, has_token: bool) -> Result<(), StartError> {
    if !http.ip().is_loopback() && !has_token {
        return Err(StartError::AdminTokenRequired(http));
    }
    Ok(())
}
