//! The HTTP listener: connections accepted, served with HTTP/1.1 (and h2c), and shut down
//! gracefully. Check, peek and report requests go straight to their handler — the data plane
//! pays for no router and no per-request extension — and everything else (health, metrics, the
//! admin API) to the axum [router](super::router), with the peer's address for the admin API's
//! loopback check.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

use super::api;
use crate::metrics::Api;
use crate::state::{Shared, stopped};

/// Serves `listener` until `stop` turns true, then stops accepting and waits for the requests in
/// flight (idle keep-alive connections are closed).
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    router: Router,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: the listener itself is fine; wait a little
                // rather than spin, as a busy server must keep accepting once it can.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut stop) => break,
        };
        let _ = tcp.set_nodelay(true);
        // One reference per connection: requests clone it (a count only this connection touches)
        // rather than the shared state's, which every core would contend for on every request.
        let connection = Arc::new(Connection { shared: Arc::clone(&shared), router: router.clone(), peer });
        let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let connection = Arc::clone(&connection);
            async move { Ok::<_, std::convert::Infallible>(connection.dispatch(request).await) }
        });
        let connection =
            graceful.watch(builder.serve_connection_with_upgrades(TokioIo::new(tcp), service).into_owned());
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// What the requests of one connection share.
struct Connection {
    shared: Arc<Shared>,
    router: Router,
    peer: SocketAddr,
}

impl Connection {
    /// The check API's requests to their handler, the rest through the router.
    async fn dispatch(&self, request: http::Request<Incoming>) -> http::Response<Body> {
        if request.method() == http::Method::POST {
            let api = match request.uri().path() {
                "/v1/check" => Some(Api::Check),
                "/v1/peek" => Some(Api::Peek),
                "/v1/report" => Some(Api::Report),
                _ => None,
            };
            if let Some(api) = api {
                return api::handle(&self.shared, request, api).await;
            }
        }
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(self.peer));
        match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(infallible) => match infallible {},
        }
    }
}
