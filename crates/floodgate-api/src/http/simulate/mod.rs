//! `POST /v1/simulate`: the playground ([`crate::playground`]) over HTTP.
//!
//! Body: an algorithm and its parameters exactly as a rule writes them (read by the
//! configuration's own parser, so its errors name the line, column and field), the `requests`
//! (`at_ms`, `cost`), and optionally `sample_ms` / `until_ms` for the level between requests.
//! Answer: one decision per request, in the order given (they are simulated in time order; one
//! whose cost the limit never grants is refused with no time to retry at). Nothing is stored or
//! counted; every error is a 400 naming the field.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::response::Response;
use floodgate_config::auth::Scope;
use floodgate_http::Problem;
use floodgate_http::problem::INVALID_TYPE;
use http::StatusCode;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use self::body::SimulateBody;
use super::api::authorized;
use super::responses::{SimulateProblems, TAG_DECISIONS};
use super::{json, malformed, problem, read_body};
use crate::playground::{self, MAX_REQUESTS, Sampling};
use floodgate_app::App;
use floodgate_app::auth::{Access, admin_access};

mod body;

/// The fields of the body besides the algorithm's.
const FIELDS: [&str; 4] = ["requests", "sample_ms", "until_ms", "block_for"];

/// The decisions.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Simulation)]
pub(super) struct SimulationView {
    /// The algorithm simulated.
    algorithm: &'static str,
    /// The limit's capacity: the most one window, bucket or period grants.
    limit: u64,
    /// One decision per request, in the order given.
    decisions: Vec<SimulatedDecision>,
    /// The level at each sampled instant (with `sample_ms` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    levels: Option<Vec<SampledLevel>>,
}

/// One request's decision.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct SimulatedDecision {
    /// The request's time.
    at_ms: u64,
    /// Whether it passed (and consumed its cost).
    allowed: bool,
    /// Capacity left after it.
    remaining: u64,
    /// When refused: milliseconds until the same request would pass, rounded up (the exact
    /// `Retry-After`, in ms); `null` when allowed, or when its cost is above what the limit ever
    /// grants at once (it never passes).
    retry_after_ms: Option<u64>,
    /// Milliseconds until the limit is fully replenished, rounded up.
    reset_after_ms: u64,
}

/// The level at one instant.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct SampledLevel {
    /// The instant.
    at_ms: u64,
    /// What a request of 1 would find left: tokens in a bucket, the limit less a window's count.
    remaining: u64,
}

/// Runs one limit — an algorithm with its parameters, as a rule writes them — over request times
/// and costs on a simulated clock: the real algorithms, no store, nothing counted.
#[utoipa::path(
    post,
    path = "/v1/simulate",
    tag = TAG_DECISIONS,
    operation_id = "simulate",
    security((), ("clientToken" = []), ("adminToken" = [])),
    request_body(content = SimulateBody, description = "The algorithm with its parameters (as in a rule), and the requests. JSON, at most 1 MiB."),
    responses(
        (status = 200, description = "One decision per request.", body = SimulationView, example = json!({"algorithm": "token_bucket", "limit": 8, "decisions": [{"at_ms": 0, "allowed": true, "remaining": 7, "retry_after_ms": null, "reset_after_ms": 500}]})),
        SimulateProblems,
    ),
)]
pub(super) async fn simulate(State(app): State<App>, request: Request) -> Response {
    let running = app.control().load();
    if let Err(refusal) = authorized(&running, request.headers(), Scope::Check) {
        // The dashboard's playground calls it with the admin surface's access.
        let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
        let loopback = peer.is_some_and(|p| p.ip().to_canonical().is_loopback());
        let authorization = request.headers().get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
        let access = admin_access(app.admin_token(), running.auth.as_deref(), loopback, authorization);
        if !matches!(access, Access::Admitted(_)) {
            return refusal;
        }
    }
    drop(running);
    let body = match read_body(request, super::MAX_SIMULATE_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(value) => value,
        Err(e) => return malformed(format!("The body is not valid JSON: {e}.")),
    };
    let Some(object) = value.as_object() else {
        return bad(
            "The body must be a JSON object: {\"algorithm\": ..., its parameters, \"requests\": [...]}.",
        );
    };
    // The algorithm and its parameters, by the configuration's parser (JSON is YAML).
    let text = String::from_utf8_lossy(&body);
    let limit = match floodgate_config::parse_limit(&text, &FIELDS) {
        Ok(limit) => limit,
        Err(e) => return bad(e.message),
    };
    let requests = match requests(object) {
        Ok(requests) => requests,
        Err(message) => return bad(message),
    };
    let sampling = match sampling(object, &requests) {
        Ok(sampling) => sampling,
        Err(message) => return bad(message),
    };
    let block_for = match object.get("block_for") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if limit.holds_permits() => {
            return bad(format!("block_for {text:?}: not available for the concurrency algorithm."));
        }
        Some(Value::String(text)) => match floodgate_config::duration::parse(text) {
            Ok(d) if d.is_zero() => {
                return bad(format!(
                    "block_for {text:?}: must be longer than 0 (leave it out for no block)."
                ));
            }
            Ok(d) => Some(d),
            Err(e) => return bad(format!("block_for {text:?} is not a duration: {e}.")),
        },
        Some(other) => return bad(format!("block_for must be a duration such as \"15m\", not {other}.")),
    };
    let run = match playground::simulate_boxed(&limit, block_for, &requests, sampling) {
        Ok(run) => run,
        Err(e) => return bad(e.to_string()),
    };
    let decisions = requests
        .iter()
        .zip(&run.decisions)
        .map(|(r, d)| SimulatedDecision {
            at_ms: r.at_ms,
            allowed: d.allowed,
            remaining: d.remaining,
            retry_after_ms: d.retry_after.map(playground::ceil_ms),
            reset_after_ms: playground::ceil_ms(d.reset_after),
        })
        .collect();
    let levels = sampling.map(|_| {
        run.levels.iter().map(|l| SampledLevel { at_ms: l.at_ms, remaining: l.remaining }).collect()
    });
    json(
        StatusCode::OK,
        &SimulationView { algorithm: limit.algorithm_name(), limit: limit.capacity(), decisions, levels },
    )
}

/// A 400 naming what is wrong.
fn bad(detail: impl Into<String>) -> Response {
    problem(Problem::new(StatusCode::BAD_REQUEST, INVALID_TYPE, "Invalid Simulation", detail))
}

/// `requests`: a list of `{"at_ms": n, "cost": n}`.
fn requests(object: &Map<String, Value>) -> Result<Vec<playground::Request>, String> {
    let Some(list) = object.get("requests") else {
        return Err("requests: missing: the requests to simulate, e.g. [{\"at_ms\": 0, \"cost\": 1}]".into());
    };
    let Some(list) = list.as_array() else {
        return Err(format!("requests: expected a list of {{\"at_ms\": n, \"cost\": n}}, found {list}"));
    };
    if list.len() > MAX_REQUESTS {
        return Err(format!(
            "requests: {} requests: at most {MAX_REQUESTS} are simulated at once",
            list.len()
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, entry)| {
            let Some(fields) = entry.as_object() else {
                return Err(format!("requests[{i}]: expected {{\"at_ms\": n, \"cost\": n}}, found {entry}"));
            };
            if let Some(unknown) = fields.keys().find(|k| *k != "at_ms" && *k != "cost") {
                return Err(format!("requests[{i}].{unknown}: unknown field: expected at_ms and cost"));
            }
            let at_ms = match fields.get("at_ms") {
                Some(v) => whole(v).ok_or_else(|| {
                    format!("requests[{i}].at_ms: expected a whole number of milliseconds, found {v}")
                })?,
                None => return Err(format!("requests[{i}].at_ms: missing: when the request arrives, in ms")),
            };
            let cost = match fields.get("cost").filter(|v| !v.is_null()) {
                Some(v) => whole(v)
                    .filter(|c| *c >= 1)
                    .ok_or_else(|| format!("requests[{i}].cost: expected a whole number ≥ 1, found {v}"))?,
                None => 1,
            };
            Ok(playground::Request { at_ms, cost })
        })
        .collect()
}

/// `sample_ms` and `until_ms`.
fn sampling(
    object: &Map<String, Value>,
    requests: &[playground::Request],
) -> Result<Option<Sampling>, String> {
    let field = |name: &str| -> Result<Option<u64>, String> {
        match object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => whole(v)
                .map(Some)
                .ok_or_else(|| format!("{name}: expected a whole number of milliseconds, found {v}")),
        }
    };
    let (every, until) = (field("sample_ms")?, field("until_ms")?);
    match (every, until) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err("until_ms: applies with sample_ms only".into()),
        (Some(every_ms), until) => {
            let until_ms = until.unwrap_or_else(|| requests.iter().map(|r| r.at_ms).max().unwrap_or(0));
            Ok(Some(Sampling { every_ms, until_ms }))
        }
    }
}

/// A JSON number that is a whole number from 0 to 2^64 - 1, however it is written (`2.0` too).
fn whole(value: &Value) -> Option<u64> {
    floodgate_http::wire::whole_number(value)
}
