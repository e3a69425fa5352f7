//! `GET`/`POST /admin/clock`: the store's manual clock, on a server started with
//! `--manual-clock` (for tests that drive a real server through windows, blocks and expiries on
//! the same clock as a reference). Without it the clock is the process's, and both answer 404.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use floodgate_core::{Clock as _, Timestamp};
use floodgate_http::Problem;
use floodgate_http::problem::NOT_FOUND_TYPE;
use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::responses::{AdminAccess, ClockProblems, TAG_ADMIN};
use super::super::{json, problem};
use floodgate_app::App;

/// The manual clock's time.
#[derive(Debug, Serialize, ToSchema)]
pub(in crate::http) struct ClockView {
    /// Milliseconds since the Unix epoch (rounded down).
    now_ms: u64,
}

/// How to move the manual clock: by `advance_ms`, or to `set_ms` (never backwards); one of them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http) struct MoveClock {
    /// Milliseconds to move forward.
    advance_ms: Option<u64>,
    /// The time to move to, in milliseconds since the Unix epoch; at or after the clock's.
    set_ms: Option<u64>,
}

fn not_manual() -> Response {
    problem(Problem::new(
        StatusCode::NOT_FOUND,
        NOT_FOUND_TYPE,
        "Not Found",
        "This server runs on the process clock: /admin/clock exists only with `floodgate serve --manual-clock`.",
    ))
}

/// The store's manual clock (a server started with `--manual-clock`; 404 otherwise).
#[utoipa::path(
    get,
    path = "/admin/clock",
    tag = TAG_ADMIN,
    operation_id = "getClock",
    security((), ("adminToken" = [])),
    responses((status = 200, description = "The manual clock's time.", body = ClockView), ClockProblems, AdminAccess),
)]
pub(in crate::http) async fn get_clock(State(app): State<App>) -> Response {
    match app.manual_clock() {
        Some(clock) => json(StatusCode::OK, &ClockView { now_ms: clock.now().as_micros() / 1_000 }),
        None => not_manual(),
    }
}

/// Moves the store's manual clock forward (a server started with `--manual-clock`; 404
/// otherwise): `{"advance_ms": n}` or `{"set_ms": t}`; never backwards (422).
#[utoipa::path(
    post,
    path = "/admin/clock",
    tag = TAG_ADMIN,
    operation_id = "moveClock",
    security((), ("adminToken" = [])),
    request_body(content = MoveClock, description = "`advance_ms` or `set_ms`, one of them."),
    responses((status = 200, description = "The manual clock's time after the move.", body = ClockView), ClockProblems, AdminAccess),
)]
pub(in crate::http) async fn move_clock(State(app): State<App>, body: Bytes) -> Response {
    let Some(clock) = app.manual_clock() else { return not_manual() };
    let invalid = |detail: String| problem(Problem::invalid(detail));
    let request: MoveClock = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return invalid(format!(
                "The body must be {{\"advance_ms\": n}} or {{\"set_ms\": t}} (whole milliseconds): {e}."
            ));
        }
    };
    let now = clock.now();
    let to = match (request.advance_ms, request.set_ms) {
        (Some(ms), None) => now.saturating_add(std::time::Duration::from_millis(ms)),
        (None, Some(ms)) if Timestamp::from_millis(ms) >= now => Timestamp::from_millis(ms),
        (None, Some(ms)) => {
            return invalid(format!(
                "set_ms {ms} is before the clock's time {}: a clock never goes backwards.",
                now.as_micros() / 1_000
            ));
        }
        _ => return invalid("Give one of advance_ms and set_ms.".into()),
    };
    clock.set(to);
    json(StatusCode::OK, &ClockView { now_ms: to.as_micros() / 1_000 })
}
