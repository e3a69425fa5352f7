//! The gateway: Floodgate as a reverse proxy in front of an application (DESIGN.md §9), limiting
//! with the same rules, engine and store as the check API, down the same decision path.
//!
//! ```text
//!  client ─► listener (any IO: TCP now, TLS later) ─► axum router (route templates)
//!     ─► shed? ─► rules before verification (ip, global, route, header.*)
//!     ─► JWT verification (401 when present but invalid) ─► rules after it (user, tenant, plan,
//!        authenticated) ─► degradation (stale reads, accepted writes) ─► concurrency ─► breaker
//!     ─► upstream (pooled hyper-util client, HTTP/1.1 or h2c; timeouts, retries within a budget)
//!     ─► response streamed back (rate-limit headers added, hop-by-hop headers dropped)
//! ```
//!
//! - [`Gateway::serve`] accepts connections from a listener through an [`Acceptor`], which turns
//!   each TCP stream into the IO the connection is served on ([`PlainTcp`] today; a TLS acceptor
//!   wraps the stream the same way).
//! - Routes are an axum [`Router`](axum::Router) built from `gateway.routes`; the `route`
//!   descriptor is what [`floodgate_tower::route_template`] writes (`GET /api/orders/{id}`), never
//!   the raw path. Each applied configuration rebuilds the table on the first request that sees
//!   it; a route's breaker, concurrency, retry budget and stale cache survive a reload when its
//!   settings do (`routes.rs`).
//! - The client's address is [`floodgate_tower::ClientIp`]'s walk of the forwarding header from
//!   the right, past `trusted_proxies`.
//! - Identity (`identity.rs`): a `Bearer` JWT verified with HS256 (the env var's raw bytes) or
//!   RS256/ES256 (a JWKS file), `iss`/`aud`/`exp`/`nbf` checked, `alg: none` refused; its claims
//!   give `user`, `tenant`, `plan` and `authenticated: "true"`. Without a token the request is
//!   anonymous (`authenticated: "false"`), and the configured identity headers (e.g. `x-user-id`)
//!   give the identity descriptors, unverified; with a verified token they are ignored and replaced
//!   toward the upstream by the verified values.
//! - Everything the gateway answers itself is `application/problem+json`; 429s carry
//!   `Retry-After` and the rate-limit headers, which allowed responses carry too.

mod body;
mod descriptors;
mod handler;
mod identity;
mod metrics;
mod queue;
mod respond;
mod routes;
mod stale;
mod upstream;

use std::future::Future;
use std::sync::Arc;

use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::listener::{Accepted, Accepting, Builders, serve_connection};
use crate::state::Shared;

pub use self::queue::QueueError;

/// Turns an accepted TCP stream into the IO a connection is served on: the stream itself
/// ([`PlainTcp`]), or a TLS session over it.
pub trait Acceptor: Send + Sync + 'static {
    /// The IO connections are served on.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Wraps `tcp` (a TLS acceptor runs its handshake here). An error drops the connection.
    fn accept(&self, tcp: TcpStream) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
}

/// Serves connections as they are: plain TCP.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainTcp;

impl Acceptor for PlainTcp {
    type Io = TcpStream;

    async fn accept(&self, tcp: TcpStream) -> std::io::Result<TcpStream> {
        Ok(tcp)
    }
}

/// The gateway's verification of a request's credentials (its `Authorization` header) with the
/// `identity.jwt` settings `jwt`: `Ok(None)` for an anonymous request (no header, or a scheme
/// other than `Bearer`), `Ok(Some(claims))` for a token that verifies, `Err(why)` for one that does
/// not (the gateway's 401). What the gateway does per request, without a server around it (the
/// `jwt` fuzz target drives it).
pub fn verify_authorization(
    jwt: &floodgate_config::gateway::Jwt,
    headers: &http::HeaderMap,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, String> {
    match identity::Verifier::new(jwt).identify(headers)? {
        identity::Identity::Anonymous => Ok(None),
        identity::Identity::Verified(claims) => Ok(Some(claims)),
    }
}

/// Serves connections over TLS (`gateway.tls`), the handshake within its timeout.
impl Acceptor for Arc<crate::tls::Tls> {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;

    async fn accept(&self, tcp: TcpStream) -> std::io::Result<Self::Io> {
        crate::tls::Tls::accept(self, tcp).await
    }
}

/// The gateway: its routes, upstream clients, stale cache and accepted-writes queue, over the
/// server's shared state. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Gateway {
    inner: Arc<handler::Gateway>,
}

impl Gateway {
    /// The gateway of `shared`'s configuration; opens the accepted-writes queue in `state_dir`
    /// when a route accepts writes asynchronously. `None` when the configuration has no gateway.
    pub(crate) fn open(shared: Arc<Shared>) -> Result<Option<Gateway>, QueueError> {
        Ok(handler::Gateway::open(shared)?.map(|inner| Gateway { inner: Arc::new(inner) }))
    }

    /// Serves `listener` (each connection through `acceptor`) until `stop` turns true, then
    /// stops accepting and lets requests in flight finish. Also replays accepted writes meanwhile.
    pub(crate) async fn serve<A: Acceptor>(
        self,
        listener: TcpListener,
        acceptor: A,
        mut stop: watch::Receiver<bool>,
    ) -> std::io::Result<()> {
        let replayer = tokio::spawn(queue::replay(Arc::clone(&self.inner), stop.clone()));
        let acceptor = Arc::new(acceptor);
        let graceful = GracefulShutdown::new();
        let accepting = Accepting::new(listener, "gateway");
        let mut builders = Builders::default();
        let gateway_limits = || match &self.inner.shared.control.load().gateway {
            Some(gateway) => gateway.config.http,
            None => floodgate_config::http_server::HttpConfig::default(),
        };
        while let Some(Accepted { tcp, peer, limits, slot }) = accepting.next(&mut stop, gateway_limits).await
        {
            let builder = builders.get(&limits);
            let gateway = Arc::clone(&self.inner);
            let acceptor = Arc::clone(&acceptor);
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let _slot = slot;
                let io = match acceptor.accept(tcp).await {
                    Ok(io) => io,
                    Err(e) => {
                        tracing::debug!(error = %e, %peer, "gateway: connection refused by the acceptor");
                        return;
                    }
                };
                let service = move |request| {
                    let gateway = Arc::clone(&gateway);
                    async move { gateway.dispatch(request, peer).await }
                };
                serve_connection(io, builder, service, watcher, limits.idle_timeout, peer, "gateway").await;
            });
        }
        drop(accepting);
        graceful.shutdown().await;
        let _ = replayer.await;
        Ok(())
    }
}
