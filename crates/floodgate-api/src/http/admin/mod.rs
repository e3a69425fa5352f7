//! The admin API under `/admin/`.
//!
//! Access: with no admin token configured and no `auth` client holding the `admin` scope, only
//! loopback peers (the peer address of the TCP connection; forwarding headers are ignored); with
//! either, every caller — loopback or not — must send `Authorization: Bearer <token>` with the
//! admin token or an `admin` client's token (another client's token: 403). A server whose HTTP
//! listener is not on loopback refuses to start without one of them.
//!
//! | endpoint | does |
//! |---|---|
//! | `GET /admin/config` | the running configuration: version, hash, path, text |
//! | `POST /admin/config/validate` | validates a YAML body (errors with line and column) |
//! | `POST /admin/config` | validates and applies a YAML body |
//! | `POST /admin/reload` | reloads from the configuration file |
//! | `POST /admin/rollback` | `{"version": n}`, or no body for the version before the current |
//! | `GET /admin/audit` | every configuration change, applied or rejected |
//! | `GET /admin/keys?rule=R&<descriptor>=<value>…` | a key's state (remaining, reset) without consuming |
//! | `DELETE /admin/keys?rule=R&<descriptor>=<value>…` | forgets a key's state |
//! | `GET /admin/gateway/switches` | the gateway's switches in force (shedding, stale reads, accepted writes) |
//! | `PUT /admin/gateway/switches` | sets some of them (audited; they outlive reloads) |
//! | `DELETE /admin/gateway/switches` | clears what the admin API set: the configuration's hold again |
//! | `GET /admin/stats` | the live view: decisions per rule, top offenders, store health ([`floodgate_app::live`]) |
//! | `GET /admin/stats/stream` | the same as server-sent events, once a second, after 5 minutes of history |
//! | `GET /dashboard` | the dashboard page (docs/dashboard.md), its assets under `/dashboard/` |
//! | `GET`/`POST /admin/clock` | the store's manual clock, with `--manual-clock` only (tests; 404 otherwise) |
//!
//! In `/admin/keys`, `rule` and `domain` are reserved; every other query parameter is a
//! descriptor (the rule's key descriptors, and those its `match` conditions need). With the
//! `domain` of an Envoy file, the descriptors are one Envoy descriptor's entries in query order
//! (`?domain=edge&rule=remote_address&remote_address=10.0.0.1`).

pub(super) mod clock;
pub(super) mod config;
pub(super) mod keys;

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use floodgate_http::Problem;
use floodgate_http::problem::{FORBIDDEN_TYPE, UNAUTHORIZED_TYPE};
use http::{HeaderValue, StatusCode};

use super::problem;
use super::switches::{clear_switches, get_switches, set_switches};
use super::{dashboard, rlqs, stats};
use floodgate_app::App;
use floodgate_app::auth::{Access, admin_access};

pub(super) fn router(app: App) -> Router<App> {
    Router::new()
        .route("/admin/config", get(config::get_config).post(config::apply_config))
        .route("/admin/config/validate", post(config::validate_config))
        .route("/admin/reload", post(config::reload))
        .route("/admin/rollback", post(config::rollback))
        .route("/admin/audit", get(config::audit))
        .route("/admin/keys", get(keys::inspect_key).delete(keys::reset_key))
        .route("/admin/gateway/switches", get(get_switches).put(set_switches).delete(clear_switches))
        .route("/admin/stats", get(stats::snapshot))
        .route("/admin/stats/stream", get(stats::stream))
        .route("/admin/clock", get(clock::get_clock).post(clock::move_clock))
        .route("/admin/rlqs", get(rlqs::view))
        .route("/dashboard", get(dashboard::page))
        .route("/dashboard/dashboard.js", get(dashboard::script))
        .route("/dashboard/dashboard.css", get(dashboard::style))
        .route_layer(middleware::from_fn_with_state(app, authorize))
}

/// Whether a request may use the admin API when no `auth` client holds the `admin` scope: with
/// `token`, its bearer must carry it; without, the peer must be on loopback. See the module docs.
pub fn admitted(token: Option<&str>, peer: Option<SocketAddr>, authorization: Option<&HeaderValue>) -> bool {
    let loopback = peer.is_some_and(|p| p.ip().is_loopback() || p.ip().to_canonical().is_loopback());
    matches!(
        admin_access(token, None, loopback, authorization.map(HeaderValue::as_bytes)),
        Access::Admitted(_)
    )
}

/// Admits a request as the admin API's access rule says, and puts who it is from
/// ([`AdminCaller`](floodgate_app::auth::AdminCaller)) in its extensions, for the audit log.
async fn authorize(State(app): State<App>, mut request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let loopback = peer.is_some_and(|p| p.ip().is_loopback() || p.ip().to_canonical().is_loopback());
    let authorization = request.headers().get(http::header::AUTHORIZATION).map(HeaderValue::as_bytes);
    let running = app.control().load();
    let access = admin_access(app.admin_token(), running.auth.as_deref(), loopback, authorization);
    drop(running);
    match access {
        Access::Admitted(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Access::Unauthorized => {
            let mut response = problem(Problem::new(
                StatusCode::UNAUTHORIZED,
                UNAUTHORIZED_TYPE,
                "Unauthorized",
                "The admin API requires `Authorization: Bearer <token>` with the server's admin token or \
                 the token of a client with the admin scope.",
            ));
            response.headers_mut().insert(http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            response
        }
        Access::MissingScope(client) => problem(Problem::new(
            StatusCode::FORBIDDEN,
            FORBIDDEN_TYPE,
            "Forbidden",
            format!("Client {client:?} does not have the \"admin\" scope the admin API needs."),
        )),
        Access::LoopbackOnly => problem(Problem::new(
            StatusCode::FORBIDDEN,
            UNAUTHORIZED_TYPE,
            "Forbidden",
            "The admin API answers loopback clients only; set an admin token to reach it from elsewhere.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn without_a_token_only_loopback_peers_are_admitted() {
        assert!(admitted(None, peer("127.0.0.1:5000"), None));
        assert!(admitted(None, peer("[::1]:5000"), None));
        assert!(admitted(None, peer("[::ffff:127.0.0.1]:5000"), None));
        assert!(!admitted(None, peer("10.0.0.7:5000"), None));
        assert!(!admitted(None, None, None));
    }

    #[test]
    fn with_a_token_every_caller_needs_it_even_on_loopback() {
        let good = HeaderValue::from_static("Bearer s3cret");
        let bad = HeaderValue::from_static("Bearer s3creT");
        let basic = HeaderValue::from_static("Basic s3cret");
        assert!(admitted(Some("s3cret"), peer("10.0.0.7:5000"), Some(&good)));
        assert!(!admitted(Some("s3cret"), peer("10.0.0.7:5000"), Some(&bad)));
        assert!(!admitted(Some("s3cret"), peer("10.0.0.7:5000"), Some(&basic)));
        assert!(!admitted(Some("s3cret"), peer("127.0.0.1:5000"), None));
    }
}
