//! The configuration in force and how the admin API changes it: `GET /admin/config`,
//! `POST /admin/config`, `/admin/config/validate`, `/admin/reload`, `/admin/rollback`, and the audit
//! log (`GET /admin/audit`), which also holds the other admin changes (gateway switches, key
//! resets).

use axum::Extension;
use axum::extract::{Request, State};
use axum::response::Response;
use floodgate_http::wire::Cost;
use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::http::responses::{AdminAccess, BodyProblems, ConfigDocument, JsonProblems, TAG_ADMIN, YAML};
use crate::http::{MAX_ADMIN_BODY, invalid, json, malformed, read_body};
use floodgate_app::App;
use floodgate_app::audit::{Applied, AuditRecord, Diff, ErrorReport, Trigger};
use floodgate_app::auth::AdminCaller;
use floodgate_app::control::ApplyError;

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
pub(super) async fn apply_config(
    State(app): State<App>,
    caller: Option<Extension<AdminCaller>>,
    request: Request,
) -> Response {
    let by = AdminCaller::audit_name(caller.as_deref());
    match config_text(request).await {
        Ok(text) => apply_response(app.control().apply_text(&text, by).await),
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
pub(super) async fn reload(State(app): State<App>, caller: Option<Extension<AdminCaller>>) -> Response {
    let by = AdminCaller::audit_name(caller.as_deref());
    apply_response(app.control().reload(Trigger::File, Some(by)).await)
}

/// Which version to put back.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RollbackBody {
    /// The version whose configuration to restore (`null` or absent: the one before the current):
    /// a whole number, however it is written (`3`, `3.0`).
    #[schema(value_type = Option<u64>)]
    version: Option<Cost>,
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
pub(super) async fn rollback(
    State(app): State<App>,
    caller: Option<Extension<AdminCaller>>,
    request: Request,
) -> Response {
    let body = match read_body(request, crate::http::MAX_BODY).await {
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
    let by = AdminCaller::audit_name(caller.as_deref());
    apply_response(app.control().rollback(target.version.map(|Cost(v)| v), by).await)
}

/// The audit log.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = AuditLog)]
pub(super) struct AuditView {
    /// Every admin change kept (the last 1000), oldest first: configuration changes applied or
    /// rejected, changes of the gateway's switches, key resets.
    records: Vec<AuditRecord>,
}

/// Every admin change: configuration changes (applied or rejected), gateway switches, key resets.
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
