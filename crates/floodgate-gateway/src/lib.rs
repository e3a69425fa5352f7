//! The gateway: Floodgate as a reverse proxy in front of an application (DESIGN.md §9), limiting
//! with the same rules, engine and store as the check API, down the same decision path.
//!
//! ```text
//!  client ─► listener (TCP, or TLS with `gateway.tls`) ─► route table (matchit, route templates)
//!     ─► shed? ─► rules before verification (ip, global, route, header.*)
//!     ─► JWT verification (401 when present but invalid) ─► rules after it (user, tenant, plan,
//!        authenticated) ─► degradation (stale reads, accepted writes) ─► concurrency ─► breaker
//!     ─► upstream (HTTP/1.1: a connection driven inline by the request's own task, from a pool per
//!        upstream; h2c and upgrades: hyper-util's pooled client; timeouts, retries within a budget)
//!     ─► response streamed back (rate-limit headers added, hop-by-hop headers dropped)
//! ```
//!
//! - [`Gateway::serve`] accepts connections with the listener every door uses
//!   ([`floodgate_app::listener::serve`]): the same connection limits (`gateway.http`) and, with
//!   `gateway.tls`, the same TLS acceptor as the API's listeners.
//! - Routes are a matchit router of `gateway.routes`' templates (the router axum's is made of, so a
//!   path matches the same template it did behind axum), each with its routes' methods (`GET` also
//!   takes `HEAD`); the `route` descriptor is the method and the matched template, as
//!   [`floodgate_tower::route_template`] writes it (`GET /api/orders/{id}`), never the raw path. No
//!   axum router or tower service sits in the per-request path. Each applied configuration
//!   rebuilds the table on the first request that sees it; a route's breaker, concurrency, retry
//!   budget and stale cache survive a reload when its settings do (`routes.rs`).
//! - Upstream HTTP/1.1 connections are TCP streams that the task of the request using them writes
//!   and reads itself — no connection task, no channel between the request and its connection —
//!   speaking HTTP/1.1 through the gateway's own codec (`h1.rs`: the request head written from the
//!   request's parts, the response head parsed with httparse, the body's framing decoded in place),
//!   and pooled per upstream between requests (`pool.rs`). h2c and `https` upstreams and upgrades
//!   (WebSocket) go through hyper-util's pooled client (`upstream.rs`).
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
//! - LLM routes (`llm.rs`, `llm: {api: openai}`): on their metered endpoints the rules after
//!   verification are one reservation of the call's prompt tokens and completion allowance (capped
//!   to what is left, or refused), and the answer is metered as it flows and committed when it
//!   ends; what they answer themselves is in OpenAI's error format.

mod body;
mod budget;
mod call;
mod cool_off;
mod descriptors;
mod h1;
mod handler;
mod identity;
mod llm;
mod metrics;
mod policies;
mod pool;
mod queue;
mod replay;
mod respond;
mod routes;
mod stale;
mod state;
mod tls_upstream;
mod upstream;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use floodgate_app::App;
use floodgate_app::listener;
use floodgate_app::tls::Tls;

pub use self::queue::QueueError;

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

/// The gateway: its routes, upstream clients, stale cache and accepted-writes queue, over the
/// app. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Gateway {
    inner: Arc<state::GatewayState>,
}

impl Gateway {
    /// The gateway of `app`'s configuration; opens the accepted-writes queue in `state_dir`
    /// when a route accepts writes asynchronously. `None` when the configuration has no gateway.
    pub fn open(app: App) -> Result<Option<Gateway>, QueueError> {
        Ok(state::GatewayState::open(app, handler::build_table)?
            .map(|inner| Gateway { inner: Arc::new(inner) }))
    }

    /// Serves `listener` (each connection handshaken with `tls` when given) until `stop` turns
    /// true, then stops accepting and lets requests in flight finish. Also replays accepted writes
    /// meanwhile.
    pub async fn serve(
        self,
        listener: TcpListener,
        tls: Option<Arc<Tls>>,
        stop: watch::Receiver<bool>,
    ) -> std::io::Result<()> {
        let replayer = tokio::spawn(replay::replay(Arc::clone(&self.inner), stop.clone()));
        let limits = || match &self.inner.app.control().load().gateway {
            Some(gateway) => gateway.http,
            None => floodgate_config::http_server::HttpConfig::default(),
        };
        let connection = |peer| {
            let gateway = Arc::clone(&self.inner);
            // The request's future is `dispatch`'s own, not one around it: hyper moves it into place.
            move |request| handler::dispatch(Arc::clone(&gateway), request, peer)
        };
        listener::serve(listener, "gateway", limits, tls, connection, stop).await;
        let _ = replayer.await;
        Ok(())
    }
}
