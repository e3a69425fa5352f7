//! `POST /v1/reserve`, `/v1/commit`, `/v1/release`: hold an estimate across a call, then charge
//! what it really cost, or give it all back (see `floodgate::reservation`).
//!
//! A reserve is a check (the same body, plus `ttl`) whose grants the store remembers under an
//! opaque id; any instance sharing the store settles it. Commit and release answer the same to a
//! retry of the same settlement, 404 for an id the store does not know, 409 for a reservation
//! already settled otherwise or expired unsettled (it stays charged its estimate).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::Response;
use floodgate::cost::valid_dimension;
use floodgate::{Costs, ReserveError, SettleError, Settled, Settlement};
use floodgate_http::problem::{NOT_FOUND_TYPE, RESERVATION_SETTLED_TYPE};
use floodgate_http::wire::{CheckRequest, Cost, VerdictBody};
use floodgate_http::{Problem, rate_limit_headers, tag_header};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::{PartialSchema, ToSchema};

use super::api::{as_domain_sees_them, authorized, never_allowed, pin};
use super::responses::{ReserveProblems, SettleProblems, TAG_DECISIONS};
use super::{MAX_BODY, invalid, json, json_bytes, malformed, problem, read_body};
use floodgate_app::App;
use floodgate_config::auth::Scope;
use floodgate_config::duration;

/// A reservation's ttl when the body names none.
pub(super) const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// The longest ttl a reservation may have.
pub(super) const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The body of `/v1/reserve`: a check's, plus `ttl`; its schema is `CheckRequest`'s with `ttl`.
#[derive(Debug)]
pub(super) struct ReserveRequest;

impl PartialSchema for ReserveRequest {
    fn schema() -> RefOr<Schema> {
        let RefOr::T(Schema::Object(mut body)) = CheckRequest::schema() else {
            return CheckRequest::schema();
        };
        // What `parse_reserve` reads: a duration of at most 24h written as a clock reads.
        let ttl = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
            .pattern(Some(duration::clock_pattern(MAX_TTL)))
            .description(Some(
                "How long the reservation is held unsettled (default `5m`; `null` is the default): a duration \
                 of the configuration's grammar above 0 and at most `24h`, written as a clock reads — the \
                 first number from 1, each after it below the next larger unit: `30s`, `5m`, `90m`, `1h30m`, \
                 `24h`, not `1h90m` or `0h30m` (the pattern; else 422). Past it, it stays charged its estimate.",
            ))
            .examples([json!("5m")])
            .build();
        body.properties.insert("ttl".into(), ttl.into());
        // A reservation does not take stated values (see `parse_reserve`).
        body.properties.remove("stated");
        body.description = Some(
            "As `/v1/check`'s body (the costs are the estimate), plus `ttl`. Any other field is refused (422)."
                .into(),
        );
        body.examples = vec![
            json!({"descriptors": {"tenant": "t1"}, "costs": {"requests": 1, "tokens": 1200}, "ttl": "5m"}),
        ];
        RefOr::T(Schema::Object(body))
    }
}

impl ToSchema for ReserveRequest {
    fn name() -> Cow<'static, str> {
        "ReserveRequest".into()
    }
}

/// A reservation held: the verdict of the check, and its id and expiry.
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // written by hand beside the verdict; this type documents the body
pub(super) struct ReservedBody {
    /// `true`: a denied reserve answers as a check (429, the verdict).
    allowed: bool,
    /// The opaque id to commit or release it with.
    #[schema(example = "7f3a9c0e5b2d41e8a6c4f0b19d2e7a53")]
    reservation: String,
    /// When it expires unsettled, in milliseconds since the Unix epoch (the store's clock).
    expires_at_ms: u64,
    /// `null`.
    retry_after_ms: Option<u64>,
    /// One entry per rule that applied, as in a check's verdict.
    limits: Vec<Value>,
}

/// The body of `/v1/commit`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CommitRequest {
    /// The id `/v1/reserve` gave.
    reservation: String,
    /// What the call really cost, per dimension; a dimension left out stays as reserved.
    #[serde(default)]
    #[schema(schema_with = settled_costs)]
    costs: Option<BTreeMap<String, Cost>>,
}

/// The schema of a commit's `costs`: cost dimension names (as `/v1/check`'s `costs` has them) to
/// whole numbers.
fn settled_costs() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .description(Some(
            "What the call really cost, per dimension (`requests`, or a name such as `tokens`): a whole \
             number from 0; a dimension left out stays as reserved. `null` is the same as leaving it out.",
        ))
        .additional_properties(Some(
            ObjectBuilder::new()
                .schema_type(SchemaType::new(Type::Integer))
                .minimum(Some(0))
                .maximum(Some(u64::MAX)),
        ))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(SchemaType::new(Type::String))
                .pattern(Some("^[a-z][a-z0-9_]{0,63}$")),
        ))
        .examples([json!({"tokens": 812})])
}

/// The body of `/v1/release`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReleaseRequest {
    /// The id `/v1/reserve` gave.
    reservation: String,
}

/// What a settlement did: the same answer to a retry of it.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct SettledBody {
    /// The reservation.
    reservation: String,
    /// `committed` or `released`.
    #[schema(example = "committed")]
    state: &'static str,
    /// What was reserved, per dimension.
    reserved: BTreeMap<String, u64>,
    /// What stays charged, per dimension.
    charged: BTreeMap<String, u64>,
    /// What was given back, per dimension.
    refunded: BTreeMap<String, u64>,
    /// What the actual cost exceeded the reservation by, charged on top, per dimension.
    excess: BTreeMap<String, u64>,
}

fn map(costs: &Costs) -> BTreeMap<String, u64> {
    costs.iter().map(|(d, c)| (d.to_owned(), c)).collect()
}

/// Holds an estimate across a call: decided as `/v1/check`, and when allowed, kept in the store
/// under an id until it is committed or released, or its ttl ends.
#[utoipa::path(
    post,
    path = "/v1/reserve",
    tag = TAG_DECISIONS,
    operation_id = "reserve",
    security((), ("clientToken" = [])),
    request_body(content = ReserveRequest, description = "The call to reserve for, as `/v1/check`'s body, plus `ttl`. At most 64 KiB."),
    responses(
        (status = 200, description = "Allowed: the estimate is held.", body = ReservedBody),
        (status = 429, description = "Denied, as `/v1/check`: nothing is held.", body = VerdictBody),
        ReserveProblems,
    ),
)]
pub(super) async fn reserve(State(app): State<App>, request: Request) -> Response {
    let running = app.control().load();
    let client = match authorized(&running, request.headers(), Scope::Reserve) {
        Ok(client) => client,
        Err(refusal) => return refusal,
    };
    let body = match read_body(request, MAX_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let (request, ttl) = match parse_reserve(&body) {
        Ok(parsed) => parsed,
        Err(p) => return problem(p),
    };
    let mut request = request;
    let domain = request.domain.take();
    let mut descriptors = std::mem::take(&mut request.descriptors);
    if let Err(refusal) = pin(&running, client, domain.as_deref(), &mut descriptors) {
        return refusal;
    }
    let descriptors = as_domain_sees_them(&running, domain.as_deref(), descriptors);
    let policy = running.domain(domain.as_deref());
    let hit = request.hit(&descriptors);
    let reserved = match app.decisions().reserve(policy, hit, ttl).await {
        Ok(reserved) => reserved,
        Err(ReserveError::Engine(error)) => return never_allowed(&error),
        Err(ReserveError::Store(error)) => return unavailable(&error.to_string()),
    };
    let verdict = reserved.verdict;
    let Some(reservation) = reserved.reservation else {
        let mut response = json_bytes(StatusCode::TOO_MANY_REQUESTS, VerdictBody::from(&verdict).to_json());
        rate_limit_headers(&verdict, running.headers, response.headers_mut());
        return response;
    };
    // `{"allowed":true` then the reservation, then the rest of the verdict.
    let verdict_json = VerdictBody::from(&verdict).to_json();
    let mut out = Vec::with_capacity(verdict_json.len() + 96);
    out.extend_from_slice(b"{\"allowed\":true,\"reservation\":\"");
    out.extend_from_slice(reservation.id.as_bytes());
    out.extend_from_slice(b"\",\"expires_at_ms\":");
    out.extend_from_slice((reservation.expires_at.as_micros() / 1000).to_string().as_bytes());
    out.extend_from_slice(&verdict_json[b"{\"allowed\":true".len()..]);
    let mut response = json_bytes(StatusCode::OK, out);
    rate_limit_headers(&verdict, running.headers, response.headers_mut());
    tag_header(&verdict, response.headers_mut());
    response
}

/// A reserve body: the check request, and the ttl.
#[allow(clippy::result_large_err)] // a problem is built only on the error path, and sent once
fn parse_reserve(body: &[u8]) -> Result<(CheckRequest, Duration), Problem> {
    let mut value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        // Not JSON: the check API's parser says exactly why.
        Err(_) => {
            return Err(CheckRequest::parse(body).err().unwrap_or_else(|| Problem::malformed("Not JSON.")));
        }
    };
    let ttl = match value.as_object_mut().and_then(|o| o.remove("ttl")) {
        None | Some(Value::Null) => DEFAULT_TTL,
        Some(Value::String(text)) => match duration::parse(&text) {
            Ok(_) => duration::parse_clock(&text, MAX_TTL).map_err(|e| {
                Problem::invalid(format!("\"ttl\" {text:?} must be above 0 and at most 24h: {e}."))
            })?,
            Err(e) => return Err(Problem::invalid(format!("\"ttl\" {text:?} is not a duration: {e}."))),
        },
        Some(other) => {
            return Err(Problem::invalid(format!(
                "\"ttl\" must be a duration such as \"30s\" or \"5m\", not {other}."
            )));
        }
    };
    // A reservation is settled on the counters its record names, which hold no stated values.
    if value.as_object().is_some_and(|o| o.contains_key("stated")) {
        return Err(Problem::invalid(
            "Unknown field \"stated\": a reservation does not take stated values (state them with /v1/check); \
             expected \"descriptors\", \"cost\", \"costs\", \"domain\" or \"ttl\".",
        ));
    }
    let rest = serde_json::to_vec(&value).map_err(|e| Problem::malformed(e.to_string()))?;
    let request = CheckRequest::parse(&rest).map_err(|mut p| {
        if p.detail.contains("Unknown field") {
            p.detail = p.detail.replace("\"domain\" or \"stated\"", "\"domain\" or \"ttl\"");
        }
        p
    })?;
    Ok((request, ttl))
}

/// Charges what a reserved call really cost: refunds what was reserved beyond it, charges what it
/// exceeds the reservation by (never denies), frees its concurrency permits.
#[utoipa::path(
    post,
    path = "/v1/commit",
    tag = TAG_DECISIONS,
    operation_id = "commit",
    security((), ("clientToken" = [])),
    request_body(content = CommitRequest, description = "The reservation, and what the call cost."),
    responses(
        (status = 200, description = "Committed (or committed before with the same costs: the same answer, charged once).", body = SettledBody),
        SettleProblems,
    ),
)]
pub(super) async fn commit(State(app): State<App>, request: Request) -> Response {
    let request: CommitRequest = match settlement(&app, request).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    let mut costs = Costs::new();
    for (dimension, cost) in request.costs.iter().flatten() {
        if !valid_dimension(dimension) {
            return invalid(format!("costs.{dimension:?} is not a cost dimension."));
        }
        costs.set(dimension.as_str(), cost.0);
    }
    settle(&app, &request.reservation, Settlement::Commit(&costs)).await
}

/// Gives back everything a reservation holds, concurrency permits included: the call did not
/// happen.
#[utoipa::path(
    post,
    path = "/v1/release",
    tag = TAG_DECISIONS,
    operation_id = "release",
    security((), ("clientToken" = [])),
    request_body(content = ReleaseRequest, description = "The reservation."),
    responses(
        (status = 200, description = "Released (or released before: the same answer, given back once).", body = SettledBody),
        SettleProblems,
    ),
)]
pub(super) async fn release(State(app): State<App>, request: Request) -> Response {
    let request: ReleaseRequest = match settlement(&app, request).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    settle(&app, &request.reservation, Settlement::Release).await
}

/// A commit's or release's body, from a caller with the `reserve` scope; else the answer.
async fn settlement<T: serde::de::DeserializeOwned>(app: &App, request: Request) -> Result<T, Response> {
    authorized(&app.control().load(), request.headers(), Scope::Reserve)?;
    let body = read_body(request, MAX_BODY).await?;
    parse(&body)
}

// The error is the finished answer to the client, returned once per call.
#[allow(clippy::result_large_err)]
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Response> {
    serde_json::from_slice(body).map_err(|e| {
        if e.is_syntax() || e.is_eof() || e.is_io() {
            malformed(format!("The body is not valid JSON: {e}."))
        } else {
            invalid(format!("{e}."))
        }
    })
}

async fn settle(app: &App, id: &str, settlement: Settlement<'_>) -> Response {
    let running = app.control().load();
    let mut result = app.decisions().settle(running.domain(None), id, settlement).await;
    // Made under an Envoy domain: settled on that domain's policy, its rules and keys.
    if let Err(SettleError::OtherPolicy { namespace }) = &result {
        result = match running.policy_of(namespace.as_deref()) {
            Some(domain) => app.decisions().settle(domain, id, settlement).await,
            None => {
                return problem(Problem::new(
                    StatusCode::NOT_FOUND,
                    NOT_FOUND_TYPE,
                    "Not Found",
                    format!(
                        "Reservation {id:?} was made under domain {:?}, which is no longer configured: \
                         what it holds stays charged until its ttl ends.",
                        namespace.as_deref().unwrap_or_default()
                    ),
                ));
            }
        };
    }
    match result {
        Ok(settled) => json(StatusCode::OK, &body(id, &settled)),
        Err(SettleError::NotFound) => problem(Problem::new(
            StatusCode::NOT_FOUND,
            NOT_FOUND_TYPE,
            "Not Found",
            format!("No such reservation: {id:?}."),
        )),
        Err(SettleError::Store(error)) => unavailable(&error.to_string()),
        Err(
            error @ (SettleError::Expired(_)
            | SettleError::Conflict { .. }
            | SettleError::PermitsOnly
            | SettleError::OtherPolicy { .. }),
        ) => problem(Problem::new(
            StatusCode::CONFLICT,
            RESERVATION_SETTLED_TYPE,
            "Reservation Already Settled",
            format!("Reservation {id:?}: {error}."),
        )),
    }
}

fn body(id: &str, settled: &Settled) -> SettledBody {
    SettledBody {
        reservation: id.to_owned(),
        state: if settled.committed { "committed" } else { "released" },
        reserved: map(&settled.reserved),
        charged: map(&settled.charged),
        refunded: map(&settled.refunded),
        excess: map(&settled.excess),
    }
}

fn unavailable(detail: &str) -> Response {
    problem(Problem::store_unavailable(format!("The reservation could not be kept: {detail}.")))
}
