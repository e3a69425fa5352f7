//! `/admin/gateway/switches`: the gateway's operator switches — which priorities are shed, whether
//! reads come from the stale cache and writes are accepted for later — set without a restart,
//! each change recorded in the audit log. What the admin API sets overrides the configuration's
//! `gateway.switches` (across reloads) until `DELETE` clears it.

use axum::Extension;
use axum::extract::{Request, State};
use axum::response::Response;
use floodgate_config::gateway::{Shed, Switches};
use floodgate_http::Problem;
use floodgate_http::problem::{NOT_FOUND_TYPE, STATE_NOT_WRITTEN_TYPE};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::responses::{AdminAccess, BodyProblems, TAG_ADMIN};
use super::{invalid, json, malformed, problem, read_body};
use floodgate_app::App;
use floodgate_app::auth::AdminCaller;
use floodgate_app::switches::SwitchChange;

/// The gateway's switches.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct SwitchesView {
    /// Which priorities are shed: `none`, `low` (low routes) or `normal` (low and normal routes).
    #[schema(example = "low")]
    shed: &'static str,
    /// `live`, or `stale_cache`: GETs of routes with `read: stale_cache` are answered from their last
    /// good response.
    #[schema(example = "live")]
    read: &'static str,
    /// `live`, or `accept_async`: writes to routes with `write: accept_async` are kept and answered
    /// 202, then replayed.
    #[schema(example = "live")]
    write: &'static str,
    /// Whether the admin API overrides the configuration's switches.
    overridden: bool,
}

/// A change of the switches; a field left out stays as it is.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SwitchesBody {
    /// `none`, `low` or `normal`.
    #[schema(example = "low")]
    shed: Option<String>,
    /// `live` or `stale_cache`.
    read: Option<String>,
    /// `live` or `accept_async`.
    write: Option<String>,
}

fn view(switches: Switches, overridden: bool) -> SwitchesView {
    SwitchesView {
        shed: switches.shed.as_str(),
        read: if switches.stale_reads { "stale_cache" } else { "live" },
        write: if switches.async_writes { "accept_async" } else { "live" },
        overridden,
    }
}

/// The switches as configured, or a 409 without a gateway.
#[allow(clippy::result_large_err)] // a response, built only on the error path
fn configured(app: &App) -> Result<Switches, Response> {
    match &app.control().current().gateway {
        Some(gateway) => Ok(gateway.switches),
        None => Err(problem(Problem::new(
            StatusCode::CONFLICT,
            NOT_FOUND_TYPE,
            "Conflict",
            "The configuration has no gateway section.",
        ))),
    }
}

/// The gateway's switches in force.
#[utoipa::path(
    get,
    path = "/admin/gateway/switches",
    tag = TAG_ADMIN,
    operation_id = "getGatewaySwitches",
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "The switches in force.", body = SwitchesView),
        (status = 409, description = "The configuration has no gateway section.", body = Problem, content_type = "application/problem+json"),
        AdminAccess,
    ),
)]
pub(super) async fn get_switches(State(app): State<App>) -> Response {
    match configured(&app) {
        Ok(configured) => {
            json(StatusCode::OK, &view(app.switches().effective(configured), app.switches().any()))
        }
        Err(response) => response,
    }
}

/// Sets some of the gateway's switches (audited); they hold across reloads until cleared.
#[utoipa::path(
    put,
    path = "/admin/gateway/switches",
    tag = TAG_ADMIN,
    operation_id = "setGatewaySwitches",
    security((), ("adminToken" = [])),
    request_body(content = SwitchesBody, description = "The switches to change: `shed`, `read`, `write`."),
    responses(
        (status = 200, description = "The switches in force now.", body = SwitchesView),
        (status = 409, description = "The configuration has no gateway section.", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Not changed: the admin state directory could not be written.", body = Problem, content_type = "application/problem+json"),
        BodyProblems,
        AdminAccess,
    ),
)]
#[allow(clippy::result_large_err)] // a response, built only on the error path
pub(super) async fn set_switches(
    State(app): State<App>,
    caller: Option<Extension<AdminCaller>>,
    request: Request,
) -> Response {
    let configured = match configured(&app) {
        Ok(configured) => configured,
        Err(response) => return response,
    };
    let body = match read_body(request, super::MAX_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let body: SwitchesBody = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) if e.is_data() || e.is_eof() && !body.is_empty() => {
            return invalid(format!("Expected {{\"shed\", \"read\", \"write\"}}: {e}."));
        }
        Err(e) => return malformed(format!("The body is not valid JSON: {e}.")),
    };
    let mut change = SwitchChange::default();
    if let Some(shed) = &body.shed {
        match Shed::parse(shed) {
            Some(shed) => change.shed = Some(shed),
            None => return invalid(format!("Unknown shed {shed:?}: expected none, low or normal.")),
        }
    }
    let flag = |value: &Option<String>, on: &str| -> Result<Option<bool>, Response> {
        match value.as_deref() {
            None => Ok(None),
            Some("live") => Ok(Some(false)),
            Some(v) if v == on => Ok(Some(true)),
            Some(other) => Err(invalid(format!("Unknown switch value {other:?}: expected live or {on}."))),
        }
    };
    change.stale_reads = match flag(&body.read, "stale_cache") {
        Ok(v) => v,
        Err(response) => return response,
    };
    change.async_writes = match flag(&body.write, "accept_async") {
        Ok(v) => v,
        Err(response) => return response,
    };
    let switches = &app.switches();
    let changed = app
        .control()
        .change_switches(switches, AdminCaller::audit_name(caller.as_deref()), || {
            switches.set(change, switches.effective(configured))
        })
        .await;
    if let Err(e) = changed {
        return not_kept(&e);
    }
    json(StatusCode::OK, &view(app.switches().effective(configured), app.switches().any()))
}

/// The answer when the switches' change cannot be written to the state directory (it was not made).
fn not_kept(e: &floodgate_app::control::ApplyError) -> Response {
    problem(Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        STATE_NOT_WRITTEN_TYPE,
        "State not written",
        format!("The switches were not changed: {e}."),
    ))
}

/// Clears the admin API's switches (audited): the configuration's hold again.
#[utoipa::path(
    delete,
    path = "/admin/gateway/switches",
    tag = TAG_ADMIN,
    operation_id = "clearGatewaySwitches",
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "The switches in force now: the configuration's.", body = SwitchesView),
        (status = 409, description = "The configuration has no gateway section.", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Not cleared: the admin state directory could not be written.", body = Problem, content_type = "application/problem+json"),
        AdminAccess,
    ),
)]
pub(super) async fn clear_switches(
    State(app): State<App>,
    caller: Option<Extension<AdminCaller>>,
) -> Response {
    let configured = match configured(&app) {
        Ok(configured) => configured,
        Err(response) => return response,
    };
    let switches = &app.switches();
    let cleared = app
        .control()
        .change_switches(switches, AdminCaller::audit_name(caller.as_deref()), || {
            if !switches.any() {
                return Vec::new();
            }
            let before = switches.effective(configured);
            switches.clear();
            let after = switches.effective(configured);
            let mut changed = vec!["gateway.switches: admin overrides cleared".to_owned()];
            if before != after {
                changed.push(format!(
                    "gateway.switches.shed: {} → {}",
                    before.shed.as_str(),
                    after.shed.as_str()
                ));
            }
            changed
        })
        .await;
    if let Err(e) = cleared {
        return not_kept(&e);
    }
    json(StatusCode::OK, &view(configured, false))
}
