//! The admin API under `/admin/`.
//!
//! Access: with no admin token configured, only loopback peers (the peer address of the TCP
//! connection; forwarding headers are ignored); with a token, every caller — loopback or not — must
//! send `Authorization: Bearer <token>`. A server whose HTTP listener is not on loopback refuses to
//! start without a token.
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
use floodgate_http::problem::{NOT_FOUND_TYPE, STORE_UNAVAILABLE_TYPE, UNAUTHORIZED_TYPE};
use floodgate_http::{Problem, ceil_ms};
use http::{HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};

use super::api::as_domain_sees_them;
use super::{MAX_ADMIN_BODY, invalid, json, malformed, problem, read_body};
use crate::audit::{Applied, AuditRecord, Diff, ErrorReport, Trigger};
use crate::control::{ApplyError, Domain, Running};
use crate::state::Shared;

pub(super) fn router(shared: Arc<Shared>) -> Router<Arc<Shared>> {
    Router::new()
        .route("/admin/config", get(get_config).post(apply_config))
        .route("/admin/config/validate", post(validate_config))
        .route("/admin/reload", post(reload))
        .route("/admin/rollback", post(rollback))
        .route("/admin/audit", get(audit))
        .route("/admin/keys", get(inspect_key).delete(reset_key))
        .route_layer(middleware::from_fn_with_state(shared, authorize))
}

// === access ===

/// Whether a request may use the admin API: see the module docs.
pub fn admitted(token: Option<&str>, peer: Option<SocketAddr>, authorization: Option<&HeaderValue>) -> bool {
    match token {
        Some(token) => authorization
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| constant_time_eq(given.trim().as_bytes(), token.as_bytes())),
        None => peer.is_some_and(|p| p.ip().is_loopback() || p.ip().to_canonical().is_loopback()),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn authorize(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let authorization = request.headers().get(http::header::AUTHORIZATION);
    if admitted(shared.admin_token.as_deref(), peer, authorization) {
        return next.run(request).await;
    }
    if shared.admin_token.is_some() {
        let mut response = problem(Problem::new(
            StatusCode::UNAUTHORIZED,
            UNAUTHORIZED_TYPE,
            "Unauthorized",
            "The admin API requires `Authorization: Bearer <token>` with the server's admin token.",
        ));
        response.headers_mut().insert(http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        response
    } else {
        problem(Problem::new(
            StatusCode::FORBIDDEN,
            UNAUTHORIZED_TYPE,
            "Forbidden",
            "The admin API answers loopback clients only; set an admin token to reach it from elsewhere.",
        ))
    }
}

// === configuration ===

#[derive(Debug, Serialize)]
struct ConfigView<'a> {
    version: u64,
    hash: &'a str,
    path: Option<String>,
    headers: &'static str,
    rules: usize,
    domains: Vec<&'a str>,
    text: &'a str,
}

async fn get_config(State(shared): State<Arc<Shared>>) -> Response {
    let running = shared.control.current();
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

#[derive(Debug, Serialize)]
struct Validation {
    valid: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    rules: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    domains: Option<Vec<String>>,
    /// What applying it would change.
    #[serde(skip_serializing_if = "Option::is_none", flatten)]
    diff: Option<Diff>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorReport>,
}

async fn validate_config(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let text = match config_text(request).await {
        Ok(text) => text,
        Err(response) => return response,
    };
    match shared.control.validate_text(&text) {
        Ok(config) => {
            let running = shared.control.current();
            let rules = config.policy.rules().count()
                + config.domains.values().map(|p| p.rules().count()).sum::<usize>();
            json(
                StatusCode::OK,
                &Validation {
                    valid: true,
                    rules: Some(rules),
                    domains: Some(config.domains.keys().cloned().collect()),
                    diff: Some(Diff::between(&running.fingerprints, &config.fingerprints)),
                    error: None,
                },
            )
        }
        Err(error) => json(
            StatusCode::UNPROCESSABLE_ENTITY,
            &Validation { valid: false, rules: None, domains: None, diff: None, error: Some(error.report()) },
        ),
    }
}

#[derive(Debug, Serialize)]
struct ApplyView {
    applied: bool,
    #[serde(flatten)]
    result: Option<Applied>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorReport>,
}

fn apply_response(result: Result<Applied, ApplyError>) -> Response {
    match result {
        Ok(applied) => {
            json(StatusCode::OK, &ApplyView { applied: applied.changed, result: Some(applied), error: None })
        }
        Err(error) => {
            let status = match &error {
                ApplyError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                ApplyError::Refused(_) | ApplyError::NoFile => StatusCode::CONFLICT,
                ApplyError::UnknownVersion { .. } => StatusCode::NOT_FOUND,
            };
            json(status, &ApplyView { applied: false, result: None, error: Some(error.report()) })
        }
    }
}

async fn apply_config(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    match config_text(request).await {
        Ok(text) => apply_response(shared.control.apply_text(&text).await),
        Err(response) => response,
    }
}

async fn reload(State(shared): State<Arc<Shared>>) -> Response {
    apply_response(shared.control.reload(Trigger::File).await)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RollbackBody {
    version: Option<u64>,
}

async fn rollback(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let body = match read_body(request, super::MAX_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let target = if body.iter().all(u8::is_ascii_whitespace) {
        RollbackBody::default()
    } else {
        match serde_json::from_slice::<RollbackBody>(&body) {
            Ok(target) => target,
            Err(e) if e.is_data() => return invalid(format!("Expected {{\"version\": n}} or no body: {e}.")),
            Err(e) => return malformed(format!("The body is not valid JSON: {e}.")),
        }
    };
    apply_response(shared.control.rollback(target.version).await)
}

async fn audit(State(shared): State<Arc<Shared>>) -> Response {
    #[derive(Serialize)]
    struct AuditView {
        records: Vec<AuditRecord>,
    }
    json(StatusCode::OK, &AuditView { records: shared.control.audit() })
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

#[derive(Debug, Serialize)]
struct KeyView {
    rule: String,
    limit: u64,
    /// What is left now.
    remaining: u64,
    reset_after_ms: u64,
    /// Whether a request of cost 1 would pass now.
    allowed: bool,
    retry_after_ms: Option<u64>,
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
    fn resolve(shared: &Shared, params: Vec<(String, String)>) -> Result<KeyTarget, Response> {
        let (rule, domain, descriptors) = key_query(params)?;
        let running = shared.control.current();
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

async fn inspect_key(
    State(shared): State<Arc<Shared>>,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let target = match KeyTarget::resolve(&shared, params) {
        Ok(target) => target,
        Err(response) => return response,
    };
    let (rule, definition, descriptors) = (&target.rule, &target.definition, &target.descriptors);
    // Not a decision (nothing is counted): the key's state, as a peek of 1 sees it.
    let hits = [Hit::new(descriptors, 1)];
    let peeked =
        target.policy().policy.evaluate(shared.control.store(), Mode::Peek, &hits, Impossible::Error);
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

async fn reset_key(
    State(shared): State<Arc<Shared>>,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let target = match KeyTarget::resolve(&shared, params) {
        Ok(target) => target,
        Err(response) => return response,
    };
    let (rule, descriptors) = (target.rule.clone(), &target.descriptors);
    if let Some(missing) = target.definition.key_descriptors().iter().find(|d| descriptors.get(d).is_none()) {
        return invalid(format!("Missing key descriptor {missing:?} of rule {rule:?}."));
    }
    #[derive(Serialize)]
    struct Reset {
        rule: String,
        /// Whether the key had state.
        reset: bool,
    }
    match target.policy().policy.reset(shared.control.store(), &rule, descriptors).await {
        Ok(existed) => json(StatusCode::OK, &Reset { rule, reset: existed }),
        Err(e) => problem(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            STORE_UNAVAILABLE_TYPE,
            "Store Unavailable",
            format!("The key could not be reset: {e}."),
        )),
    }
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
