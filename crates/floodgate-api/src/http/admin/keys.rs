//! A key's state: `GET /admin/keys` reads it without consuming, `DELETE /admin/keys` forgets it —
//! each reset recorded in the audit log (`GET /admin/audit`, `source` `key_reset`) with who asked,
//! and logged (`event` `key_reset`).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::Response;
use floodgate::{Descriptors, Hit, Impossible, Mode};
use floodgate_http::problem::NOT_FOUND_TYPE;
use floodgate_http::{Problem, ceil_ms};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::http::api::as_domain_sees_them;
use crate::http::responses::{AdminAccess, KeyProblems, StoreProblem, TAG_ADMIN};
use crate::http::usage::PreviousPeriod;
use crate::http::{invalid, json, problem};
use floodgate_app::App;
use floodgate_app::audit::AuditedKey;
use floodgate_app::auth::AdminCaller;
use floodgate_app::control::{Domain, Running};

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

/// A key's state, as a request of cost 1 (in the rule's dimension) would see it now.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = KeyState)]
pub(super) struct KeyView {
    /// The rule.
    rule: String,
    /// The cost dimension it counts: `requests`, or a dimension of `costs` (`tokens`,
    /// `usd_micros`, …).
    dimension: String,
    /// Its capacity.
    limit: u64,
    /// What counts now (the limit less what is left): the window's or period's count, a bucket's
    /// deficit, the permits held.
    used: u64,
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
    /// For a quota: what the key counted in the calendar period before the current one, as
    /// `GET /v1/usage` reads it. `null` for the other algorithms, which keep no past.
    previous: Option<PreviousPeriod>,
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
    // Not a decision (nothing is counted): the key's state, as a peek of 1 in the rule's own
    // dimension sees it (a token or spend rule takes no part in a request of 1 request).
    let costs = floodgate::Costs::new().with(definition.cost_dimension(), 1);
    let hits = [Hit::with_costs(descriptors, &costs)];
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
    // A peek reports what would be left after a request of 1; when it would pass, one more is left
    // now.
    let remaining = if d.allowed { d.remaining.saturating_add(1).min(d.limit) } else { d.remaining };
    // A quota's previous period: one more read, of the usage (which the verdict does not carry, so
    // that decisions carry nothing they do not use).
    let previous = match definition.limit() {
        floodgate::Limit::Quota(_) => {
            match target.policy().policy.usage(app.control().store(), rule, descriptors).await {
                Ok(usage) => usage.previous.map(PreviousPeriod::from),
                Err(floodgate::usage::UsageError::Store(e)) => {
                    return problem(Problem::store_unavailable(format!(
                        "The key's previous period could not be read: {e}."
                    )));
                }
                Err(e) => return invalid(format!("The key's previous period cannot be read: {e}.")),
            }
        }
        _ => None,
    };
    json(
        StatusCode::OK,
        &KeyView {
            rule: rule.clone(),
            dimension: definition.cost_dimension().to_owned(),
            limit: d.limit,
            used: d.limit.saturating_sub(remaining),
            remaining,
            reset_after_ms: ceil_ms(d.reset_after),
            allowed: d.allowed,
            retry_after_ms: d.retry_after.map(ceil_ms),
            outcome: limit.outcome.as_str(),
            previous,
        },
    )
}

/// Forgets a key's state (audited): its next request starts afresh.
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
    caller: Option<Extension<AdminCaller>>,
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
    let result = target.policy().policy.reset(app.control().store(), &rule, descriptors).await;
    let key = AuditedKey {
        rule: rule.clone(),
        domain: target.domain.clone(),
        descriptors: descriptors.iter().map(|(n, v)| (n.to_owned(), v.to_owned())).collect(),
        reset: result.as_ref().ok().copied(),
    };
    let by = AdminCaller::audit_name(caller.as_deref());
    let error = result.as_ref().err().map(ToString::to_string);
    app.control().record_key_reset(key, by, error).await;
    match result {
        Ok(existed) => json(StatusCode::OK, &Reset { rule, reset: existed }),
        Err(e) => problem(Problem::store_unavailable(format!("The key could not be reset: {e}."))),
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
