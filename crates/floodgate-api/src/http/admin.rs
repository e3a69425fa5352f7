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
//!
//! In `/admin/keys`, `rule` and `domain` are reserved; every other query parameter is a
//! descriptor (the rule's key descriptors, and those its `match` conditions need). With the
//! `domain` of an Envoy file, the descriptors are one Envoy descriptor's entries in query order
//! (`?domain=edge&rule=remote_address&remote_address=10.0.0.1`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use floodgate::{Descriptors, Hit, Impossible, Mode};
use floodgate_http::problem::{FORBIDDEN_TYPE, NOT_FOUND_TYPE, STORE_UNAVAILABLE_TYPE, UNAUTHORIZED_TYPE};
use floodgate_http::{Problem, ceil_ms};
use http::{HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::api::as_domain_sees_them;
use super::responses::{
    AdminAccess, BodyProblems, ConfigDocument, JsonProblems, KeyProblems, StoreProblem, TAG_ADMIN, YAML,
};
use super::switches::{clear_switches, get_switches, set_switches};
use super::{MAX_ADMIN_BODY, invalid, json, malformed, problem, read_body};
use super::{dashboard, stats};
use floodgate_app::App;
use floodgate_app::audit::{Applied, AuditRecord, Diff, ErrorReport, Trigger};
use floodgate_app::auth::{Access, admin_access};
use floodgate_app::control::{ApplyError, Domain, Running};

pub(super) fn router(app: App) -> Router<App> {
    Router::new()
        .route("/admin/config", get(get_config).post(apply_config))
        .route("/admin/config/validate", post(validate_config))
        .route("/admin/reload", post(reload))
        .route("/admin/rollback", post(rollback))
        .route("/admin/audit", get(audit))
        .route("/admin/keys", get(inspect_key).delete(reset_key))
        .route("/admin/gateway/switches", get(get_switches).put(set_switches).delete(clear_switches))
        .route("/admin/stats", get(stats::snapshot))
        .route("/admin/stats/stream", get(stats::stream))
        .route("/dashboard", get(dashboard::page))
        .route("/dashboard/dashboard.js", get(dashboard::script))
        .route("/dashboard/dashboard.css", get(dashboard::style))
        .route_layer(middleware::from_fn_with_state(app, authorize))
}

// === access ===

/// Whether a request may use the admin API when no `auth` client holds the `admin` scope: with
/// `token`, its bearer must carry it; without, the peer must be on loopback. See the module docs.
pub fn admitted(token: Option<&str>, peer: Option<SocketAddr>, authorization: Option<&HeaderValue>) -> bool {
    let loopback = peer.is_some_and(|p| p.ip().is_loopback() || p.ip().to_canonical().is_loopback());
    admin_access(token, None, loopback, authorization.map(HeaderValue::as_bytes)) == Access::Admitted
}

async fn authorize(State(app): State<App>, request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let loopback = peer.is_some_and(|p| p.ip().is_loopback() || p.ip().to_canonical().is_loopback());
    let authorization = request.headers().get(http::header::AUTHORIZATION).map(HeaderValue::as_bytes);
    let running = app.control().load();
    let access = admin_access(app.admin_token(), running.auth.as_deref(), loopback, authorization);
    drop(running);
    match access {
        Access::Admitted => next.run(request).await,
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

// === configuration ===

/// The running configuration.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = RunningConfig)]
pub(super) struct ConfigView<'a> {
    /// 1 at start, +1 for every applied change (reloads and rollbacks).
    version: u64,
    /// The content hash (FNV-1a 64, hex).
    hash: &'a str,
    /// The file or directory it was read from (`null`: the built-in example or a posted text).
    path: Option<String>,
    /// The rate-limit header style: `ietf`, `legacy`, `both` or `none`.
    #[schema(value_type = floodgate_http::HeaderStyle)]
    headers: &'static str,
    /// How many rules are in force, over all policies.
    rules: usize,
    /// The Envoy domains, sorted.
    domains: Vec<&'a str>,
    /// The configuration's text.
    text: &'a str,
}

/// The running configuration: version, hash, path, header style, rule count, Envoy domains and
/// text.
#[utoipa::path(
    get,
    path = "/admin/config",
    tag = TAG_ADMIN,
    operation_id = "getConfig",
    security((), ("adminToken" = [])),
    responses((status = 200, description = "The running configuration.", body = ConfigView<'static>), AdminAccess),
)]
pub(super) async fn get_config(State(app): State<App>) -> Response {
    let running = app.control().current();
    let mut domains: Vec<&str> = running.domains.keys().map(String::as_str).collect();
    domains.sort_unstable();
    json(
        StatusCode::OK,
        &ConfigView {
            version: running.version,
            hash: &running.source.hash,
            path: running.source.path.as_ref().map(|p| p.display().to_string()),
            headers: running.headers.as_str(),
            rules: running.rule_count(),
            domains,
            text: &running.source.text,
        },
    )
}

async fn config_text(request: Request) -> Result<String, Response> {
    let body = read_body(request, MAX_ADMIN_BODY).await?;
    String::from_utf8(body.to_vec()).map_err(|e| malformed(format!("The body is not UTF-8 text: {e}.")))
}

/// Whether a configuration is valid: with what applying it would change, or its error.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Validation {
    /// Whether it is valid (and could replace the running one).
    valid: bool,
    /// How many rules it has, over all policies (when valid).
    #[serde(skip_serializing_if = "Option::is_none")]
    rules: Option<usize>,
    /// Its Envoy domains (when valid).
    #[serde(skip_serializing_if = "Option::is_none")]
    domains: Option<Vec<String>>,
    /// Rules applying it would add (when valid; Envoy rules as `domain/rule`).
    #[serde(skip_serializing_if = "Option::is_none")]
    added: Option<Vec<String>>,
    /// Rules applying it would remove (when valid).
    #[serde(skip_serializing_if = "Option::is_none")]
    removed: Option<Vec<String>>,
    /// Rules applying it would change (when valid).
    #[serde(skip_serializing_if = "Option::is_none")]
    changed: Option<Vec<String>>,
    /// Why it is not valid.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorReport>,
}

/// Validates a YAML configuration (native or envoyproxy/ratelimit) without applying it.
#[utoipa::path(
    post,
    path = "/admin/config/validate",
    tag = TAG_ADMIN,
    operation_id = "validateConfig",
    security((), ("adminToken" = [])),
    request_body(
        description = "A configuration, as a file holds it: YAML (JSON is YAML too), UTF-8, at most 4 MiB; read as YAML whatever the `content-type`.",
        content((inline(ConfigDocument) = YAML), (inline(ConfigDocument) = "application/json")),
    ),
    responses(
        (status = 200, description = "Valid: what applying it would change.", body = Validation),
        (status = 422, description = "Not a valid configuration, or one that cannot replace the running one (a store change): the error with file, line, column and field.", body = Validation),
        BodyProblems,
        AdminAccess,
    ),
)]
pub(super) async fn validate_config(State(app): State<App>, request: Request) -> Response {
    let text = match config_text(request).await {
        Ok(text) => text,
        Err(response) => return response,
    };
    match app.control().validate_text(&text) {
        Ok(config) => {
            let running = app.control().current();
            let rules = config.policy.rules().count()
                + config.domains.values().map(|p| p.rules().count()).sum::<usize>();
            let Diff { added, removed, changed } = Diff::between(&running.fingerprints, &config.fingerprints);
            json(
                StatusCode::OK,
                &Validation {
                    valid: true,
                    rules: Some(rules),
                    domains: Some(config.domains.keys().cloned().collect()),
                    added: Some(added),
                    removed: Some(removed),
                    changed: Some(changed),
                    error: None,
                },
            )
        }
        Err(error) => json(
            StatusCode::UNPROCESSABLE_ENTITY,
            &Validation {
                valid: false,
                rules: None,
                domains: None,
                added: None,
                removed: None,
                changed: None,
                error: Some(error.report()),
            },
        ),
    }
}

/// What a change did: the version in force and the rules it changed, or why it was refused.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ApplyView {
    /// Whether a new version is in force (`false` when refused, or when the text equals the
    /// running configuration).
    applied: bool,
    /// The version in force (unless refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<u64>,
    /// Its content hash (unless refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    hash: Option<String>,
    /// Rules the change added (unless refused; Envoy rules as `domain/rule`).
    #[serde(skip_serializing_if = "Option::is_none")]
    added: Option<Vec<String>>,
    /// Rules the change removed (unless refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    removed: Option<Vec<String>>,
    /// Rules the change changed (unless refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    changed: Option<Vec<String>>,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorReport>,
}

fn apply_response(result: Result<Applied, ApplyError>) -> Response {
    match result {
        Ok(Applied { version, hash, changed, diff: Diff { added, removed, changed: rules } }) => json(
            StatusCode::OK,
            &ApplyView {
                applied: changed,
                version: Some(version),
                hash: Some(hash),
                added: Some(added),
                removed: Some(removed),
                changed: Some(rules),
                error: None,
            },
        ),
        Err(error) => {
            let status = match &error {
                ApplyError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                ApplyError::Refused(_) | ApplyError::NoFile => StatusCode::CONFLICT,
                ApplyError::UnknownVersion { .. } => StatusCode::NOT_FOUND,
                ApplyError::State(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let refused = ApplyView {
                applied: false,
                version: None,
                hash: None,
                added: None,
                removed: None,
                changed: None,
                error: Some(error.report()),
            };
            json(status, &refused)
        }
    }
}

/// Validates and applies a YAML configuration: in force until the next reload.
#[utoipa::path(
    post,
    path = "/admin/config",
    tag = TAG_ADMIN,
    operation_id = "applyConfig",
    security((), ("adminToken" = [])),
    request_body(
        description = "A configuration, as a file holds it: YAML (JSON is YAML too), UTF-8, at most 4 MiB; read as YAML whatever the `content-type`.",
        content((inline(ConfigDocument) = YAML), (inline(ConfigDocument) = "application/json")),
    ),
    responses(
        (status = 200, description = "Applied (or equal to the running configuration: `applied` false).", body = ApplyView),
        (status = 409, description = "Valid, but it changes the store: restart to change stores.", body = ApplyView),
        (status = 500, description = "Not applied: the admin state directory could not be written.", body = ApplyView),
        (status = 422, description = "Not a valid configuration: the error with file, line, column and field.", body = ApplyView),
        BodyProblems,
        AdminAccess,
    ),
)]
pub(super) async fn apply_config(State(app): State<App>, request: Request) -> Response {
    match config_text(request).await {
        Ok(text) => apply_response(app.control().apply_text(&text).await),
        Err(response) => response,
    }
}

/// Reloads the configuration from the `--config` file.
#[utoipa::path(
    post,
    path = "/admin/reload",
    tag = TAG_ADMIN,
    operation_id = "reloadConfig",
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "Reloaded (or unchanged: `applied` false).", body = ApplyView),
        (status = 409, description = "No file to reload from (started without `--config`), or the file changes the store.", body = ApplyView),
        (status = 500, description = "Not applied: the admin state directory could not be written.", body = ApplyView),
        (status = 422, description = "The file is not a valid configuration now; the running one stays.", body = ApplyView),
        AdminAccess,
    ),
)]
pub(super) async fn reload(State(app): State<App>) -> Response {
    apply_response(app.control().reload(Trigger::File).await)
}

/// Which version to put back.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RollbackBody {
    /// The version whose configuration to restore (`null` or absent: the one before the current).
    version: Option<u64>,
}

/// Puts a kept version's configuration back in force, as a new version.
#[utoipa::path(
    post,
    path = "/admin/rollback",
    tag = TAG_ADMIN,
    operation_id = "rollback",
    security((), ("adminToken" = [])),
    request_body(content = Option<RollbackBody>, description = "`{\"version\": n}`, or no body for the version before the current one.", example = json!({"version": 1})),
    responses(
        (status = 200, description = "Restored, as a new version.", body = ApplyView),
        (status = 404, description = "That version is not kept (the last 32 are).", body = ApplyView),
        (status = 409, description = "That version, read back from the state directory, cannot be put back in force: its configuration no longer reads, or it changes what is fixed at start.", body = ApplyView),
        (status = 500, description = "Not applied: the admin state directory could not be written.", body = ApplyView),
        JsonProblems,
        AdminAccess,
    ),
)]
pub(super) async fn rollback(State(app): State<App>, request: Request) -> Response {
    let body = match read_body(request, super::MAX_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let target = if body.iter().all(u8::is_ascii_whitespace) {
        RollbackBody::default()
    } else {
        // `null`, like no body, is the version before the current one.
        match serde_json::from_slice::<Option<RollbackBody>>(&body) {
            Ok(target) => target.unwrap_or_default(),
            Err(e) if e.is_data() => return invalid(format!("Expected {{\"version\": n}} or no body: {e}.")),
            Err(e) => return malformed(format!("The body is not valid JSON: {e}.")),
        }
    };
    apply_response(app.control().rollback(target.version).await)
}

/// The audit log.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = AuditLog)]
pub(super) struct AuditView {
    /// Every configuration change kept (the last 1000), applied or rejected, oldest first.
    records: Vec<AuditRecord>,
}

/// Every configuration change, applied or rejected.
#[utoipa::path(
    get,
    path = "/admin/audit",
    tag = TAG_ADMIN,
    operation_id = "getAudit",
    security((), ("adminToken" = [])),
    responses((status = 200, description = "The audit log.", body = AuditView), AdminAccess),
)]
pub(super) async fn audit(State(app): State<App>) -> Response {
    json(StatusCode::OK, &AuditView { records: app.control().audit() })
}

// === keys ===

/// The rule, domain and descriptors of a `/admin/keys` query.
#[allow(clippy::result_large_err)] // a response, built only on the error path
fn key_query(params: Vec<(String, String)>) -> Result<(String, Option<String>, Descriptors), Response> {
    let mut rule = None;
    let mut domain = None;
    let mut descriptors = Descriptors::new();
    for (name, value) in params {
        match name.as_str() {
            "rule" => rule = Some(value),
            "domain" => domain = Some(value),
            _ => descriptors.insert(name, value),
        }
    }
    let rule =
        rule.ok_or_else(|| invalid("Missing query parameter `rule`: the rule whose key to address."))?;
    Ok((rule, domain, descriptors))
}

/// The query of `/admin/keys`: the rule, its domain, and the descriptors that make its key.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read as a list of pairs (`key_query`); this says what the pairs may be
pub(super) struct KeyQuery {
    /// The rule whose key to address.
    #[param(example = "per-user")]
    rule: String,
    /// The Envoy domain the rule belongs to (absent: the native policy).
    domain: Option<String>,
    /// Every other query parameter is a descriptor: the rule's key descriptors, and those its `match` conditions need (with `domain`, one Envoy descriptor's entries in query order).
    #[param(style = Form, explode, example = json!({"user": "u1"}))]
    descriptors: Option<std::collections::HashMap<String, String>>,
}

/// A key's state, as a request of cost 1 would see it now.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = KeyState)]
pub(super) struct KeyView {
    /// The rule.
    rule: String,
    /// Its capacity.
    limit: u64,
    /// What is left now.
    remaining: u64,
    /// Milliseconds until fully replenished, rounded up.
    reset_after_ms: u64,
    /// Whether a request of cost 1 would pass now.
    allowed: bool,
    /// When it would not: milliseconds until it would, rounded up.
    retry_after_ms: Option<u64>,
    /// What the rule would do with a request of cost 1 (as a verdict's `outcome`).
    #[schema(value_type = String)]
    outcome: &'static str,
}

/// A `/admin/keys` query resolved against the running configuration: the rule it names, in the
/// policy of the domain it names, and the descriptors that make the key.
struct KeyTarget {
    running: Arc<Running>,
    domain: Option<String>,
    rule: String,
    definition: floodgate::Rule,
    descriptors: Descriptors,
}

impl KeyTarget {
    // The error is the finished answer to the client, returned once per admin call.
    #[allow(clippy::result_large_err)]
    fn resolve(app: &App, params: Vec<(String, String)>) -> Result<KeyTarget, Response> {
        let (rule, domain, descriptors) = key_query(params)?;
        let running = app.control().current();
        let policy = running.domain(domain.as_deref());
        let Some(definition) = policy.policy.rules().find(|r| r.name() == rule).cloned() else {
            return Err(no_rule(&rule));
        };
        // As for `/v1/check`: an Envoy domain's descriptors are one Envoy descriptor, in query order.
        let descriptors = as_domain_sees_them(&running, domain.as_deref(), descriptors);
        Ok(KeyTarget { running, domain, rule, definition, descriptors })
    }

    /// The policy of the domain the query names.
    fn policy(&self) -> &Domain {
        self.running.domain(self.domain.as_deref())
    }
}

/// A key's state (limit, remaining, reset, whether a request of 1 would pass) without consuming.
#[utoipa::path(
    get,
    path = "/admin/keys",
    tag = TAG_ADMIN,
    operation_id = "inspectKey",
    security((), ("adminToken" = [])),
    params(
        KeyQuery,
    ),
    responses(
        (status = 200, description = "The key's state.", body = KeyView),
        KeyProblems,
        AdminAccess,
    ),
)]
pub(super) async fn inspect_key(
    State(app): State<App>,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let target = match KeyTarget::resolve(&app, params) {
        Ok(target) => target,
        Err(response) => return response,
    };
    let (rule, definition, descriptors) = (&target.rule, &target.definition, &target.descriptors);
    // Not a decision (nothing is counted): the key's state, as a peek of 1 sees it.
    let hits = [Hit::new(descriptors, 1)];
    let peeked = target.policy().policy.evaluate(app.control().store(), Mode::Peek, &hits, Impossible::Error);
    let verdict = match peeked.await {
        Ok(v) => v,
        Err(e) => return invalid(format!("The key cannot be inspected: {e}.")),
    };
    let Some(limit) = verdict.limits.iter().find(|l| *l.rule == *rule) else {
        return invalid(format!(
            "Rule {rule:?} does not apply to these descriptors: give its key descriptors {:?} and the \
             descriptors its `match` conditions need.",
            definition.key_descriptors()
        ));
    };
    let d = &limit.decision;
    json(
        StatusCode::OK,
        &KeyView {
            rule: rule.clone(),
            limit: d.limit,
            // A peek reports what would be left after a request of 1; when it would pass, one more
            // is left now.
            remaining: if d.allowed { d.remaining.saturating_add(1).min(d.limit) } else { d.remaining },
            reset_after_ms: ceil_ms(d.reset_after),
            allowed: d.allowed,
            retry_after_ms: d.retry_after.map(ceil_ms),
            outcome: limit.outcome.as_str(),
        },
    )
}

/// Forgets a key's state: its next request starts afresh.
#[utoipa::path(
    delete,
    path = "/admin/keys",
    tag = TAG_ADMIN,
    operation_id = "resetKey",
    security((), ("adminToken" = [])),
    params(
        KeyQuery,
    ),
    responses(
        (status = 200, description = "Forgotten (`reset` false: it had no state).", body = Reset),
        KeyProblems,
        StoreProblem,
        AdminAccess,
    ),
)]
pub(super) async fn reset_key(
    State(app): State<App>,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let target = match KeyTarget::resolve(&app, params) {
        Ok(target) => target,
        Err(response) => return response,
    };
    let (rule, descriptors) = (target.rule.clone(), &target.descriptors);
    if let Some(missing) = target.definition.key_descriptors().iter().find(|d| descriptors.get(d).is_none()) {
        return invalid(format!("Missing key descriptor {missing:?} of rule {rule:?}."));
    }
    match target.policy().policy.reset(app.control().store(), &rule, descriptors).await {
        Ok(existed) => json(StatusCode::OK, &Reset { rule, reset: existed }),
        Err(e) => problem(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            STORE_UNAVAILABLE_TYPE,
            "Store Unavailable",
            format!("The key could not be reset: {e}."),
        )),
    }
}

/// A key forgotten.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = KeyReset)]
pub(super) struct Reset {
    /// The rule.
    rule: String,
    /// Whether the key had state.
    reset: bool,
}

fn no_rule(rule: &str) -> Response {
    problem(Problem::new(
        StatusCode::NOT_FOUND,
        NOT_FOUND_TYPE,
        "No Such Rule",
        format!("No rule named {rule:?} in this policy (Envoy rules: add `domain=`)."),
    ))
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

    #[test]
    fn key_query_separates_rule_domain_and_descriptors() {
        let (rule, domain, d) = key_query(vec![
            ("rule".into(), "per-user".into()),
            ("user".into(), "u1".into()),
            ("domain".into(), "envoy".into()),
        ])
        .unwrap();
        assert_eq!((rule.as_str(), domain.as_deref()), ("per-user", Some("envoy")));
        assert_eq!(d.get("user"), Some("u1"));
        assert!(key_query(vec![("user".into(), "u1".into())]).is_err());
    }
}
