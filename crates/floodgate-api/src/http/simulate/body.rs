//! The body of `POST /v1/simulate` as the document states it: one schema per algorithm of the
//! configuration's registry (a quota's, one per period), each naming exactly the parameters that
//! algorithm takes with the grammar the configuration's parser reads them by, beside the
//! simulation's own fields — a `oneOf` discriminated by `algorithm`. A schema-valid body is a
//! simulation the handler runs; what it refuses is what these schemas refuse.

use std::borrow::Cow;
use std::collections::BTreeMap;

use floodgate_config::algorithm::{ALGORITHMS, Algorithm, Kind, MAX_BURST_AT_ANY_RATE, PERIODS, Parameter};
use floodgate_config::{duration, pattern};
use floodgate_core::Calendar;
use floodgate_http::openapi::{reference, with_keywords};
use serde_json::{Value, json};
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, Discriminator, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::playground::{MAX_AT_MS, MAX_REQUESTS};

/// The body of `/v1/simulate`: one of the algorithms' schemas.
#[derive(Debug)]
pub(super) struct SimulateBody;

/// One simulated request: `at_ms`, and `cost`.
#[derive(Debug)]
pub(super) struct SimulatedRequest;

/// A duration above 0, as the configuration reads it.
struct DurationText;

/// A rate, as the configuration reads it.
struct RateText;

/// A time zone name.
struct TimeZone;

/// A weekday, as a week's anchor names it.
struct Weekday;

/// A component schema of its own, referenced where used (`#/components/schemas/<name>`).
trait Component {
    const NAME: &'static str;
    fn schema() -> Schema;
}

fn component<C: Component>() -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(C::NAME))
}

impl Component for DurationText {
    const NAME: &'static str = "Duration";
    fn schema() -> Schema {
        string()
            .pattern(Some(duration::positive_pattern()))
            .description(Some(
                "A duration above 0 (docs/configuration.md, \"Durations and rates\"): whole numbers with a unit, \
                 `us` (or `µs`), `ms`, `s`, `m`, `h` or `d`, largest first, each once (`250us`, `60s`, `1h30m`); \
                 at most 8 digits of days, 9 of hours, 10 of minutes, 12 of seconds, 15 of milliseconds, 18 of \
                 microseconds (leading zeros aside); whitespace around it is ignored.",
            ))
            .examples([json!("60s")])
            .into()
    }
}

impl Component for RateText {
    const NAME: &'static str = "Rate";
    fn schema() -> Schema {
        string()
            .pattern(Some(pattern::rate()))
            .description(Some(
                "A rate, `N/unit` (docs/configuration.md, \"Durations and rates\"): unit `ms`, `s` (`sec`, \
                 `second`), `m` (`min`, `minute`), `h` (`hour`) or `d` (`day`); `N` from 1 to one per \
                 microsecond of the unit (`1000/ms`, `86400000000/d`); whitespace around each part is ignored.",
            ))
            .examples([json!("10/s")])
            .into()
    }
}

/// A name for each time zone that code generators can use as an identifier (`x-enum-varnames`):
/// `Etc/GMT+1` is `ETC_GMT_PLUS_1`, `Etc/GMT-1` is `ETC_GMT_MINUS_1`, so that no two are one.
fn time_zone_identifiers(names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|name| {
            let mut identifier = String::new();
            let mut chars = name.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '+' => identifier.push_str("_PLUS_"),
                    '-' if chars.peek().is_some_and(char::is_ascii_digit) => identifier.push_str("_MINUS_"),
                    c if c.is_ascii_alphanumeric() => identifier.push(c.to_ascii_uppercase()),
                    _ => identifier.push('_'),
                }
            }
            identifier
        })
        .collect()
}

impl Component for TimeZone {
    const NAME: &'static str = "TimeZone";
    fn schema() -> Schema {
        let names = Calendar::time_zone_names();
        let identifiers = time_zone_identifiers(&names);
        with_keywords(string(), [("x-enum-varnames", json!(identifiers))])
            .enum_values(Some(names))
            .description(Some(
                "An IANA time zone name, as the time zone database bundled with the server names it (the \
                 server also takes it in another case).",
            ))
            .into()
    }
}

impl Component for Weekday {
    const NAME: &'static str = "Weekday";
    fn schema() -> Schema {
        string()
            .pattern(Some(pattern::weekday()))
            .description(Some("A weekday, `monday` to `sunday`, or its first three letters, in any case."))
            .into()
    }
}

fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(SchemaType::new(Type::String))
}

fn whole(minimum: u64, maximum: u64) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::new(Type::Integer))
        .minimum(Some(minimum))
        .maximum(Some(maximum))
}

fn nullable_whole(minimum: u64) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
        .minimum(Some(minimum))
        .maximum(Some(u64::MAX))
}

/// The schema name of an algorithm's body (`SimulateTokenBucket`).
fn variant_name(algorithm: &Algorithm) -> String {
    let words = algorithm.name().split('_').map(|w| w[..1].to_uppercase() + &w[1..]);
    format!("Simulate{}", words.collect::<String>())
}

/// What a parameter is, for its description.
fn parameter_description(algorithm: &Algorithm, parameter: &Parameter) -> String {
    let what = match (algorithm.name(), parameter.name) {
        ("concurrency", "limit") => "The permits held at once at most",
        ("quota", "limit") => "What one period grants",
        ("budget", "limit") => "What the budget grants",
        (_, "limit") => "What one window grants",
        (_, "window") => "The window",
        (_, "rate") => "The rate",
        (_, "burst") => "The most the bucket holds",
        (_, "lease") => "How long a permit lasts unless released",
        (_, "time_zone") => "The time zone the periods are cut in",
        (_, "ttl") => "How long the budget lasts from its first use",
        (_, "period") => "The calendar period one limit covers",
        (_, "anchor") => "The day a period starts",
        _ => "As in a rule",
    };
    let default = parameter.default.map(|d| format!(" (default: {d})")).unwrap_or_default();
    format!("{what}{default}: `{}` as a rule writes it.", parameter.example)
}

/// The schema of one parameter's value; `None` for those a variant states itself (`period`,
/// `anchor`).
fn parameter_schema(parameter: &Parameter) -> Option<RefOr<Schema>> {
    Some(match parameter.kind {
        Kind::Count => whole(1, u64::MAX).into(),
        Kind::Burst => whole(1, MAX_BURST_AT_ANY_RATE)
            .description(Some(format!(
                "At most {MAX_BURST_AT_ANY_RATE} here: the largest burst every rate takes (a rule with a faster \
                 rate may have a larger one)."
            )))
            .into(),
        Kind::Duration => component::<DurationText>(),
        Kind::Rate => component::<RateText>(),
        Kind::TimeZone => component::<TimeZone>(),
        Kind::Period | Kind::Anchor => return None,
    })
}

/// A parameter's value in an example, from the registry's (`limit: 100` is `100`).
fn example_value(parameter: &Parameter) -> Value {
    let text = parameter.example.split_once(": ").map_or(parameter.example, |(_, v)| v);
    match parameter.kind {
        Kind::Count | Kind::Burst => text.parse::<u64>().map_or_else(|_| json!(text), |n| json!(n)),
        _ => json!(text),
    }
}

/// An object with the simulation's own fields and `algorithm` naming `algorithm`; its parameters
/// are added by the caller.
fn simulation(algorithm: &Algorithm) -> ObjectBuilder {
    // `until_ms` (not null) without `sample_ms` (absent or null) is refused.
    let until_alone = json!({
        "required": ["until_ms"],
        "properties": {"until_ms": {"type": "integer"}, "sample_ms": {"type": "null"}}
    });
    with_keywords(ObjectBuilder::new(), [("not", until_alone)])
        .property(
            "algorithm",
            string().enum_values(Some([algorithm.name()])).description(Some("The algorithm, as a rule names it.")),
        )
        .required("algorithm")
        .property(
            "requests",
            ArrayBuilder::new().items(reference::<SimulatedRequest>()).max_items(Some(MAX_REQUESTS)).description(
                Some(format!(
                    "The requests, at most {MAX_REQUESTS}, in any order: simulated in time order (those at one \
                     instant in the order given), answered in the order given."
                )),
            ),
        )
        .required("requests")
        .property(
            "sample_ms",
            nullable_whole(1).description(Some(
                "Sample the level (what a request of 1 would find left) every this many milliseconds, from 0 to \
                 `until_ms`; when that is more than 10 000 samples, every smallest multiple of it that gives at \
                 most 10 000. Absent or `null`: no `levels` in the answer.",
            )),
        )
        .property(
            "until_ms",
            nullable_whole(0).maximum(Some(MAX_AT_MS)).description(Some(
                "The last instant sampled (default: the latest request's `at_ms`); only with `sample_ms` (the \
                 schema's `not`).",
            )),
        )
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
}

/// The schema of `algorithm`'s body, and its example, with `period` fixed for a quota (whose
/// `anchor` depends on it).
fn variant(algorithm: &Algorithm, period: Option<&str>) -> (Schema, Value) {
    let mut object = simulation(algorithm);
    let mut example = json!({"algorithm": algorithm.name()});
    let mut takes = Vec::new();
    for parameter in algorithm.parameters {
        let schema = match (parameter.kind, period) {
            (Kind::Period, Some(period)) => Some(string().enum_values(Some([period])).into()),
            (Kind::Anchor, Some("day")) => None,
            (Kind::Anchor, Some("week")) => Some(component::<Weekday>()),
            (Kind::Anchor, Some(_)) => {
                Some(whole(1, 31).description(Some("The day of the month, 1 to 31.")).into())
            }
            _ => parameter_schema(parameter),
        };
        let Some(schema) = schema else { continue };
        let schema = match schema {
            RefOr::T(Schema::Object(mut o)) => {
                let own = o.description.take();
                let described = parameter_description(algorithm, parameter);
                o.description =
                    Some(own.map_or_else(|| described.clone(), |own| format!("{described} {own}")));
                RefOr::T(Schema::Object(o))
            }
            RefOr::Ref(mut r) => {
                r.description = parameter_description(algorithm, parameter);
                RefOr::Ref(r)
            }
            other => other,
        };
        object = object.property(parameter.name, schema);
        takes.push(parameter.name);
        if parameter.required() {
            object = object.required(parameter.name);
            example[parameter.name] = match (parameter.kind, period) {
                (Kind::Period, Some(period)) => json!(period),
                _ => example_value(parameter),
            };
        }
    }
    if algorithm.kind != floodgate::LimitKind::Concurrency {
        let block_for = OneOfBuilder::new()
            .item(component::<DurationText>())
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .description(Some(
                "A penalty box (`block_for` of a rule): after a denial the limit refuses everything for this long, \
                 then starts afresh. Absent or `null`: none.",
            ));
        object = object.property("block_for", block_for);
        takes.push("block_for");
    }
    example["requests"] = json!([{"at_ms": 0}, {"at_ms": 0, "cost": 2}, {"at_ms": 1000}]);
    let what = match period {
        Some(period) => format!("`{}` with `period: {period}`", algorithm.name()),
        None => format!("`{}`", algorithm.name()),
    };
    // A title names a quota's schema of one period, as generated clients name it.
    let title = period
        .map(|period| format!("{}{}", variant_name(algorithm), period[..1].to_uppercase() + &period[1..]));
    let object = object.title(title).description(Some(format!(
        "{what}: its parameters ({}) exactly as a rule writes them, and the requests. No other field.",
        takes.join(", ")
    )));
    (object.examples([example.clone()]).into(), example)
}

/// The component schemas of the body: one per algorithm (for a quota, a `oneOf` of one per
/// period), and those they refer to.
fn components() -> Vec<(String, RefOr<Schema>)> {
    let mut out = Vec::new();
    for algorithm in &ALGORITHMS {
        let schema: Schema = if algorithm.parameters.iter().any(|p| p.kind == Kind::Period) {
            let mut periods = OneOfBuilder::new().description(Some(format!(
                "`{}`: one schema per period, as the anchor each takes differs (`day` none, `week` a weekday, \
                 `month` a day of the month).",
                algorithm.name()
            )));
            for period in PERIODS {
                periods = periods.item(variant(algorithm, Some(period)).0);
            }
            periods.into()
        } else {
            variant(algorithm, None).0
        };
        out.push((variant_name(algorithm), schema.into()));
    }
    out.push((DurationText::NAME.into(), DurationText::schema().into()));
    out.push((RateText::NAME.into(), RateText::schema().into()));
    out.push((TimeZone::NAME.into(), TimeZone::schema().into()));
    out.push((Weekday::NAME.into(), Weekday::schema().into()));
    out.push((SimulatedRequest::name().into(), SimulatedRequest::schema()));
    out
}

impl PartialSchema for SimulateBody {
    fn schema() -> RefOr<Schema> {
        let mapping: BTreeMap<String, String> = ALGORITHMS
            .iter()
            .map(|a| (a.name().to_owned(), format!("#/components/schemas/{}", variant_name(a))))
            .collect();
        let mut discriminator = Discriminator::new("algorithm");
        discriminator.mapping = mapping.into_iter().collect();
        let mut body = OneOfBuilder::new()
            .description(Some(
                "One limit — an algorithm with its parameters exactly as a rule of the configuration writes them \
                 (docs/configuration.md), with the same defaults — and the requests to run through it: one schema \
                 per algorithm, chosen by `algorithm`, each naming exactly the parameters it takes. One count only \
                 (no `limit: {by: …}`), one time zone and anchor (no `{by: …}`): they need descriptors.",
            ))
            .discriminator(Some(discriminator))
            .examples([json!({
                "algorithm": "token_bucket", "rate": "2/s", "burst": 8,
                "requests": [{"at_ms": 0, "cost": 1}, {"at_ms": 0}, {"at_ms": 250, "cost": 2}]
            })]);
        for algorithm in &ALGORITHMS {
            body = body.item(RefOr::Ref(Ref::from_schema_name(variant_name(algorithm))));
        }
        RefOr::T(body.into())
    }
}

impl ToSchema for SimulateBody {
    fn name() -> Cow<'static, str> {
        "Simulate".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.extend(components());
    }
}

impl PartialSchema for SimulatedRequest {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some("One simulated request."))
            .property(
                "at_ms",
                whole(0, MAX_AT_MS).description(Some(format!(
                    "When it arrives, in milliseconds of simulated time: the Unix epoch plus `at_ms`, so that a \
                     fixed window or a quota period begins at 0; at most {MAX_AT_MS} (about 317 years)."
                ))),
            )
            .required("at_ms")
            .property(
                "cost",
                nullable_whole(1).description(Some(
                    "Its cost (default 1; `null` is the default). One above what the limit grants at once is \
                     refused, never to pass: `retry_after_ms` is `null`.",
                )),
            )
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .into()
    }
}

impl ToSchema for SimulatedRequest {
    fn name() -> Cow<'static, str> {
        "SimulatedRequest".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_time_zone_has_an_identifier_of_its_own() {
        let names = Calendar::time_zone_names();
        let identifiers = time_zone_identifiers(&names);
        let distinct: std::collections::BTreeSet<&String> = identifiers.iter().collect();
        assert_eq!(distinct.len(), names.len());
        let of = |name: &str| identifiers[names.iter().position(|n| n == name).unwrap()].clone();
        assert_eq!(
            (of("Etc/GMT+1"), of("Etc/GMT-1"), of("GMT0")),
            ("ETC_GMT_PLUS_1".into(), "ETC_GMT_MINUS_1".into(), "GMT0".into())
        );
        assert_eq!(of("America/Port-au-Prince"), "AMERICA_PORT_AU_PRINCE");
    }

    #[test]
    fn every_algorithm_has_a_schema_named_after_it() {
        let names: Vec<String> = ALGORITHMS.iter().map(variant_name).collect();
        assert!(
            names.contains(&"SimulateTokenBucket".to_owned()) && names.contains(&"SimulateGcra".to_owned())
        );
        let components = components();
        for name in names {
            assert!(components.iter().any(|(n, _)| *n == name), "{name}");
        }
    }
}
