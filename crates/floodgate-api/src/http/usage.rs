//! `GET /v1/usage?rule=…&<descriptor>=…`: what one rule's counter holds for a key, from the
//! store, consuming nothing.

use axum::extract::{Query, State};
use axum::response::Response;
use floodgate::Descriptors;
use floodgate::usage::UsageError;
use floodgate_http::Problem;
use floodgate_http::ceil_ms;
use floodgate_http::openapi::with_keywords;
use floodgate_http::problem::NOT_FOUND_TYPE;
use http::StatusCode;
use serde::Serialize;
use serde_json::json;
use utoipa::openapi::Required;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn, ParameterStyle};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::{IntoParams, PartialSchema, ToSchema};

use super::api::{authorized, pin};
use super::responses::{TAG_DECISIONS, UsageProblems};
use super::{invalid, json, problem};
use floodgate_app::App;
use floodgate_config::auth::Scope;

/// The query: the rule, and the descriptors that make its key. Read as pairs; this type says in
/// the document what the pairs may be.
#[derive(Debug)]
pub(super) struct UsageQuery;

impl IntoParams for UsageQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        // Each name once, and no descriptor named `rule`: the server reads one value per name.
        let name = with_keywords(
            ObjectBuilder::new().schema_type(Type::String),
            [("not", json!({"const": "rule"}))],
        );
        let descriptors = ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String)))
            .property_names(Some(name))
            .examples([json!({"user": "u1"})]);
        vec![
            ParameterBuilder::new()
                .name("rule")
                .parameter_in(ParameterIn::Query)
                .required(Required::True)
                .description(Some("The rule's name."))
                .schema(Some(String::schema()))
                .example(Some(json!("per-user")))
                .build(),
            ParameterBuilder::new()
                .name("descriptors")
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .style(Some(ParameterStyle::Form))
                .explode(Some(true))
                .description(Some(
                    "Every other parameter is a descriptor (`tenant=t1`, `user=u1`): those of the rule's \
                     key, the one its limit varies by, and those its quota's time zone or anchor come from, \
                     if they do. Each name once, and none named `rule`: the server reads one value per name \
                     (a name given twice is a 422).",
                ))
                .schema(Some(descriptors))
                .build(),
        ]
    }
}

/// A counter's usage now.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct UsageBody {
    /// The rule.
    rule: String,
    /// The limit for this key (its plan's, for a limit that varies).
    limit: u64,
    /// What counts now: the current window's or period's count, a bucket's deficit, the permits
    /// held.
    used: u64,
    /// What is left.
    remaining: u64,
    /// Start of the current window or calendar period, ms since the Unix epoch (the store's
    /// clock); for a sliding window or log, the trailing window's start. `null` for buckets and
    /// concurrency.
    period_start: Option<u64>,
    /// Its end (exclusive); now for a sliding window or log. `null` for buckets and concurrency.
    period_end: Option<u64>,
    /// Until the counter is fully replenished with no further traffic, ms (rounded up).
    reset_after_ms: u64,
    /// For a quota: what the key counted in the calendar period before the current one (last
    /// month's spend, for a monthly `usd_micros` quota). Periods before that one are not kept.
    /// `null` for the other algorithms, which keep no past.
    previous: Option<PreviousPeriod>,
}

/// What a quota's key counted in the calendar period before the current one.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PreviousPeriod {
    /// The count, exactly as kept (a sharded rule's shards summed): unlike the current `used`, not
    /// capped at the limit. 0 when the key counted nothing then.
    used: u64,
    /// Start of that period, ms since the Unix epoch.
    period_start: u64,
    /// Its end (exclusive): the current period's start.
    period_end: u64,
}

impl From<floodgate::Previous> for PreviousPeriod {
    fn from(p: floodgate::Previous) -> Self {
        PreviousPeriod {
            used: p.used,
            period_start: p.period.0.as_micros() / 1000,
            period_end: p.period.1.as_micros() / 1000,
        }
    }
}

/// What one rule's counter holds for a key: limit, used, remaining and the period — and for a quota,
/// the previous period's count — from the store, consuming nothing.
#[utoipa::path(
    get,
    path = "/v1/usage",
    tag = TAG_DECISIONS,
    operation_id = "usage",
    security((), ("clientToken" = [])),
    params(UsageQuery),
    responses(
        (status = 200, description = "The counter's usage.", body = UsageBody),
        UsageProblems,
    ),
)]
pub(super) async fn usage(
    State(app): State<App>,
    headers: http::HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let running = app.control().load();
    let client = match authorized(&running, &headers, Scope::Check) {
        Ok(client) => client,
        Err(refusal) => return refusal,
    };
    let mut rule = None;
    let mut descriptors = Descriptors::new();
    for (name, value) in params {
        if name == "rule" {
            if rule.replace(value).is_some() {
                return invalid("Query parameter \"rule\" is given twice.");
            }
        } else if descriptors.get(&name).is_some() {
            return invalid(format!("Descriptor {name:?} is given twice."));
        } else {
            descriptors.insert(name, value);
        }
    }
    let Some(rule) = rule else {
        return invalid("Missing query parameter \"rule\": the name of the rule whose usage to read.");
    };
    if let Err(refusal) = pin(&running, client, None, &mut descriptors) {
        return refusal;
    }
    let policy = &running.domain(None).policy;
    match policy.usage(app.control().store(), &rule, &descriptors).await {
        Ok(u) => json(
            StatusCode::OK,
            &UsageBody {
                rule,
                limit: u.limit,
                used: u.used,
                remaining: u.remaining,
                period_start: u.period.map(|(s, _)| s.as_micros() / 1000),
                period_end: u.period.map(|(_, e)| e.as_micros() / 1000),
                reset_after_ms: ceil_ms(u.reset_after),
                previous: u.previous.map(PreviousPeriod::from),
            },
        ),
        Err(UsageError::UnknownRule(_)) => problem(Problem::new(
            StatusCode::NOT_FOUND,
            NOT_FOUND_TYPE,
            "Not Found",
            format!("No rule named {rule:?}."),
        )),
        Err(UsageError::Store(error)) => {
            problem(Problem::store_unavailable(format!("The usage could not be read: {error}.")))
        }
        Err(error) => invalid(format!("{error}.")),
    }
}
