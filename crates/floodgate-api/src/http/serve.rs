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
use floodgate_http::Answer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

use super::api;
use floodgate_app::App;
use floodgate_app::listener;
use floodgate_app::metrics::Api;
use floodgate_app::tls::Tls;

/// Serves `listener` until `stop` turns true, then stops accepting and waits for the requests in
/// flight (idle keep-alive connections are closed).
///
/// The limits of the configuration in force (`http:`) apply to each connection as it is accepted:
/// beyond `max_connections` open ones it is closed at once; HTTP/1 request heads must arrive within
/// `header_read_timeout` (a slowloris client is closed then) and fit `max_header_bytes` (431
/// beyond; HTTP/2: the header list); a connection without a byte read or written for
/// `idle_timeout` is closed.
pub async fn serve(
    app: App,
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let router = super::router(app.clone());
    let limits = || app.control().load().http;
    let connection = |peer| {
        // One reference per connection: requests clone it (a count only this connection touches)
        // rather than the app's, which every core would contend for on every request.
        let connection = Arc::new(Connection { app: app.clone(), router: router.clone(), peer });
        // The request's future is `dispatch`'s own, not one around it: hyper moves it into place.
        move |request| Arc::clone(&connection).dispatch(request)
    };
    listener::serve(listener, "http", limits, tls, connection, stop).await;
    Ok(())
}

/// What the requests of one connection share.
struct Connection {
    app: App,
    router: Router,
    peer: SocketAddr,
}

impl Connection {
    /// The check API's requests to their handler, the rest through the router.
    async fn dispatch(self: Arc<Self>, mut request: http::Request<Body>) -> Answer<Body> {
        if request.method() == http::Method::POST {
            let api = match request.uri().path() {
                "/v1/check" => Some(Api::Check),
                "/v1/peek" => Some(Api::Peek),
                "/v1/report" => Some(Api::Report),
                _ => None,
            };
            if let Some(api) = api {
                return api::handle(&self.app, request, api).await;
            }
        }
        request.extensions_mut().insert(ConnectInfo(self.peer));
        match self.router.clone().oneshot(request).await {
            Ok(response) => response.into(),
            Err(infallible) => match infallible {},
        }
    }
}
