//! A rule's limit: its algorithm's parameters (as the [registry](crate::algorithm) lists them)
//! read into a [`Limit`], or into several when the limit varies by a descriptor.

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Action, ByDescriptor, CalendarBy, FromDescriptor, Limit, LimitKind};
use floodgate_core::calendar::Period;
use floodgate_core::{
    Budget, Calendar, Concurrency, FixedWindow, Gcra, Quota, Rate, SlidingLog, SlidingWindow, TokenBucket,
};
use jiff::civil::Weekday;

use super::descriptors::Vocabulary;
use super::positive_duration;
use super::stated::{self, Statements};
use crate::duration;
use crate::error::Invalid;
use crate::fingerprint::Canonical;
use crate::yaml::{Fields, Item, alternatives, did_you_mean};

/// The default concurrency lease.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

pub(crate) enum Shape {
    Window(LimitKind, Duration),
    Concurrency(Duration),
    /// A quota's calendar, and where its time zone or anchor come from when from descriptors.
    Quota(Calendar, Option<CalendarBy>),
    Budget(Duration),
}

impl Shape {
    pub(crate) fn limit(&self, count: NonZeroU64, at: &Item<'_>) -> Result<Limit, Invalid> {
        let limit: Limit = match self {
            Shape::Window(LimitKind::FixedWindow, w) => FixedWindow::try_new(count, *w).map(Limit::from),
            Shape::Window(LimitKind::SlidingLog, w) => SlidingLog::try_new(count, *w).map(Limit::from),
            Shape::Window(_, w) => SlidingWindow::try_new(count, *w).map(Limit::from),
            Shape::Concurrency(lease) => Concurrency::try_new(count, *lease).map(Limit::from),
            Shape::Quota(calendar, _) => Ok(Quota::new(count, calendar.clone()).into()),
            Shape::Budget(ttl) => Budget::try_new(count, *ttl).map(Limit::from),
        }
        .map_err(|e| at.error(e.to_string()))?;
        Ok(limit)
    }
}

/// A `limit`: one count, or counts that vary by a descriptor's value.
#[derive(Debug)]
pub(crate) enum Count<'a> {
    One(NonZeroU64),
    By {
        descriptor: String,
        /// `(value, count, where)` in document order.
        values: Vec<(String, NonZeroU64, Item<'a>)>,
        default: Option<(NonZeroU64, Item<'a>)>,
    },
}

/// A token bucket or GCRA rule: `rate` and `burst`; the rate may vary by a descriptor
/// (`rate: {by: plan, values: {free: 10/m, pro: 100/m}, default: 1/m}`), each value then with the
/// `burst` given or its own default.
pub(crate) fn bucket(
    fields: &Fields<'_>,
    kind: LimitKind,
    vocabulary: &Vocabulary,
    canonical: &mut Canonical,
) -> Result<(Limit, Option<ByDescriptor>), Invalid> {
    let rate_item = fields.require("rate", "e.g. rate: 10/s")?;
    let burst_item = fields.get("burst");
    let burst = match &burst_item {
        Some(b) => Some(NonZeroU64::new(b.u64_at_least("burst", 1)?).unwrap_or(NonZeroU64::MIN)),
        None => None,
    };
    let burst_of = |rate: Rate| match burst {
        Some(b) => b,
        None if kind == LimitKind::Gcra => NonZeroU64::MIN,
        None => NonZeroU64::new(rate.count()).unwrap_or(NonZeroU64::MIN),
    };
    let make = |rate: Rate, at: &Item<'_>| -> Result<Limit, Invalid> {
        let burst = burst_of(rate);
        let at = burst_item.as_ref().unwrap_or(at);
        if kind == LimitKind::Gcra {
            Gcra::try_new(rate, burst).map(Limit::from)
        } else {
            TokenBucket::try_new(rate, burst).map(Limit::from)
        }
        .map_err(|e| at.error(e.to_string()))
    };
    if !rate_item.is_map() {
        if let Some(overage) = fields.get("overage") {
            return Err(overage.error(OVERAGE_WITHOUT_BY));
        }
        let r = rate(&rate_item)?;
        canonical.field("rate", (r.count(), r.period().as_micros())).field("burst", burst_of(r).get());
        return Ok((make(r, &rate_item)?, None));
    }
    let by_fields =
        rate_item.fields("a rate that varies by a descriptor", Some(&["by", "values", "default"]))?;
    let by = by_fields.require("by", "the descriptor the rate varies with, e.g. by: plan")?;
    let descriptor = by.str("a descriptor name")?;
    vocabulary.check(descriptor, by)?;
    let values_item =
        by_fields.require("values", "the rate for each value, e.g. values: {free: 10/m, pro: 100/m}")?;
    let values_fields = values_item.fields("rates by value", None)?;
    if values_fields.len() == 0 {
        return Err(values_item.error("values is empty: give the rate for at least one value"));
    }
    let mut variants = Vec::new();
    let mut canonical_values = Vec::new();
    for (value, _, entry) in values_fields.iter() {
        let r = rate(&entry)?;
        canonical_values.push((value.to_owned(), r.count(), r.period().as_micros()));
        variants.push((value.to_owned(), make(r, &entry)?));
    }
    canonical_values.sort_unstable();
    let default = match by_fields.get("default") {
        Some(d) => {
            let r = rate(&d)?;
            canonical.field("rate.default", (r.count(), r.period().as_micros()));
            Some(make(r, &d)?)
        }
        None => None,
    };
    canonical
        .field("rate.by", descriptor)
        .field("rate.values", canonical_values)
        .field("burst", burst.map(NonZeroU64::get));
    let (base, by) = vary(fields, descriptor, variants, default, canonical)?;
    Ok((base, Some(by)))
}

/// The [`ByDescriptor`] of `variants` (one limit per value) with the rule's `overage`, and the
/// rule's own limit: `default`, or the first variant's when values not listed are not subject
/// to the rule.
fn vary(
    fields: &Fields<'_>,
    descriptor: &str,
    variants: Vec<(String, Limit)>,
    default: Option<Limit>,
    canonical: &mut Canonical,
) -> Result<(Limit, ByDescriptor), Invalid> {
    let listed: Vec<&str> = variants.iter().map(|(v, _)| v.as_str()).collect();
    let mut actions = match fields.get("overage") {
        Some(o) => overage_actions(&o, &listed)?,
        None => Vec::new(),
    };
    let mut by = ByDescriptor::new(descriptor);
    let first = variants[0].1.clone();
    for (value, limit) in variants {
        by = match actions.iter().find(|(v, _)| *v == value).map(|(_, a)| a) {
            Some(Overage::DegradeTo(model)) => by.degrading(value, limit, model.as_str()),
            Some(Overage::Act(action)) => by.variant(value, limit, Some(*action)),
            None => by.variant(value, limit, None),
        };
    }
    let base = match default {
        Some(limit) => limit,
        None => {
            // Values not listed are not subject to the rule; the rule's own limit is never used
            // but must exist: take the first variant's.
            by = by.only_listed();
            first
        }
    };
    actions.sort_by(|a, b| a.0.cmp(&b.0));
    let actions: Vec<(&str, String)> = actions
        .iter()
        .map(|(v, a)| {
            let action = match a {
                Overage::Act(action) => action.name().to_owned(),
                Overage::DegradeTo(model) => format!("degrade_to:{model}"),
            };
            (v.as_str(), action)
        })
        .collect();
    canonical.field("overage", &actions);
    Ok((base, by))
}

/// A rate such as `10/s`, `600/m`, `5000/h`.
fn rate(item: &Item<'_>) -> Result<Rate, Invalid> {
    if let Some(n) = item.number() {
        return Err(item.error(format!(
            "invalid rate {}: a unit is missing: write \"{n}/s\", \"{n}/m\" or \"{n}/h\"",
            item.node.describe()
        )));
    }
    let text = item.str("a rate such as 10/s")?;
    // RateError's message quotes the text and lists the units.
    text.parse::<Rate>().map_err(|e| item.error(e.to_string()))
}

/// The shape of a window, concurrency or quota limit.
pub(crate) fn shape(
    fields: &Fields<'_>,
    kind: LimitKind,
    vocabulary: &Vocabulary,
    canonical: &mut Canonical,
    statements: &mut Statements,
) -> Result<Shape, Invalid> {
    match kind {
        LimitKind::Concurrency => {
            let lease = match fields.get("lease") {
                Some(l) => positive_duration(l, "lease")?,
                None => DEFAULT_LEASE,
            };
            canonical.field("lease", duration::format(lease));
            Ok(Shape::Concurrency(lease))
        }
        LimitKind::Budget => {
            let ttl_item =
                fields.require("ttl", "how long a budget lasts from its first use, e.g. ttl: 24h")?;
            let ttl = if stated::is_from(&ttl_item) {
                let w = stated::window(&ttl_item, "ttl")?;
                let own = w.own();
                statements.window = Some(w);
                own
            } else {
                positive_duration(ttl_item, "ttl")?
            };
            canonical.field("ttl", duration::format(ttl));
            Ok(Shape::Budget(ttl))
        }
        LimitKind::Quota => {
            let period_item = fields.require("period", "day, week or month")?;
            let period_name = period_item.str("a period")?;
            let anchor = fields.get("anchor");
            // The period with its default anchor; a written anchor replaces it below.
            let unanchored = match period_name {
                "day" => Period::Day,
                "week" => Period::Week { starts_on: Weekday::Monday },
                "month" => Period::Month { anchor_day: 1 },
                other => {
                    return Err(period_item.error(format!(
                        "unknown period {other:?}: expected day, week or month{}",
                        did_you_mean(other, crate::algorithm::PERIODS)
                    )));
                }
            };
            if let (Some(a), Period::Day) = (&anchor, unanchored) {
                return Err(a.error("anchor does not apply to period day (days begin at local midnight)"));
            }
            let mut by = CalendarBy::new();
            let period = match &anchor {
                None => unanchored,
                Some(a) if a.is_map() => {
                    let (from, default) = from_descriptor(a, "anchor", vocabulary, canonical, |text| {
                        unanchored.anchored(text).map(|_| ()).map_err(|e| e.to_string())
                    })?;
                    by = by.anchor(from);
                    match default {
                        Some(text) => unanchored.anchored(&text).map_err(|e| a.error(e.to_string()))?,
                        None => unanchored,
                    }
                }
                Some(a) => match unanchored {
                    Period::Week { .. } => {
                        let text = a.text("a weekday")?;
                        unanchored.anchored(&text).map_err(|_| {
                            a.error(format!(
                                "invalid anchor {}: a week starts on a weekday, monday to sunday",
                                a.node.describe()
                            ))
                        })?
                    }
                    _ => {
                        let day = a.u64_at_least("anchor", 1)?;
                        let anchor_day = u8::try_from(day).ok().filter(|d| *d <= 31).ok_or_else(|| {
                            a.error(format!("invalid anchor {day}: a day of the month is 1 to 31"))
                        })?;
                        Period::Month { anchor_day }
                    }
                },
            };
            let zone_item = fields.get("time_zone");
            let zone = match &zone_item {
                Some(z) if z.is_map() => {
                    let (from, default) = from_descriptor(z, "time_zone", vocabulary, canonical, |text| {
                        Calendar::try_new(period, text).map(|_| ()).map_err(|e| e.to_string())
                    })?;
                    by = by.time_zone(from);
                    default.map_or(Cow::Borrowed("UTC"), Cow::Owned)
                }
                Some(z) => Cow::Borrowed(z.str("an IANA time zone such as Europe/Berlin")?),
                None => Cow::Borrowed("UTC"),
            };
            let calendar = Calendar::try_new(period, &zone).map_err(|e| {
                zone_item.as_ref().or(anchor.as_ref()).unwrap_or(&period_item).error(e.to_string())
            })?;
            let period_text = match period {
                Period::Day => "day".to_owned(),
                Period::Week { starts_on } => format!("week from {}", starts_on.to_monday_one_offset()),
                Period::Month { anchor_day } => format!("month from {anchor_day}"),
            };
            canonical.field("period", period_text).field("time_zone", calendar.time_zone_name());
            let by = (by.time_zone_source().is_some() || by.anchor_source().is_some()).then_some(by);
            Ok(Shape::Quota(calendar, by))
        }
        _ => {
            let window_item = fields.require("window", "e.g. window: 60s")?;
            let window = if stated::is_from(&window_item) {
                let w = stated::window(&window_item, "window")?;
                let own = w.own();
                statements.window = Some(w);
                own
            } else {
                positive_duration(window_item, "window")?
            };
            canonical.field("window", duration::format(window));
            Ok(Shape::Window(kind, window))
        }
    }
}

/// `{by: tz, values: {eu: Europe/Berlin}, default: UTC}`: a quota's `time_zone` or `anchor`
/// (`what`) read from a descriptor, each setting written checked by `check`. Returns it with its
/// default.
fn from_descriptor(
    item: &Item<'_>,
    what: &str,
    vocabulary: &Vocabulary,
    canonical: &mut Canonical,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<(FromDescriptor, Option<String>), Invalid> {
    let fields =
        item.fields(&format!("a {what} that comes from a descriptor"), Some(&["by", "values", "default"]))?;
    let by = fields.require("by", &format!("the descriptor whose value is the {what}, e.g. by: tz"))?;
    let descriptor = by.str("a descriptor name")?;
    vocabulary.check(descriptor, by)?;
    let setting = |at: &Item<'_>| -> Result<String, Invalid> {
        let text = at.text(&format!("a {what}"))?;
        check(&text).map_err(|e| at.error(e))?;
        Ok(text.into_owned())
    };
    let mut from = FromDescriptor::new(descriptor);
    let mut written = Vec::new();
    if let Some(values_item) = fields.get("values") {
        let values = values_item.fields(&format!("the {what} for each value"), None)?;
        if values.len() == 0 {
            return Err(values_item.error(format!(
                "values is empty: give the {what} for at least one value, or leave values out to read the {what} \
                 from the value itself"
            )));
        }
        for (value, _, entry) in values.iter() {
            let text = setting(&entry)?;
            written.push((value.to_owned(), text.clone()));
            from = from.value(value, text);
        }
    }
    let default = match fields.get("default") {
        Some(d) => {
            let text = setting(&d)?;
            from = from.default(text.clone());
            Some(text)
        }
        None => None,
    };
    written.sort_unstable();
    canonical
        .field(&format!("{what}.by"), descriptor)
        .field(&format!("{what}.values"), &written)
        .field(&format!("{what}.default"), &default);
    Ok((from, default))
}

/// `limit: 100` or `limit: {by: plan, values: {free: 100, pro: 10000}, default: 10}`.
pub(crate) fn count<'a>(item: Item<'a>, vocabulary: &Vocabulary) -> Result<Count<'a>, Invalid> {
    if !item.is_map() {
        let n = item.u64_at_least("limit", 1)?;
        return Ok(Count::One(NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN)));
    }
    let fields = item.fields("a limit that varies by a descriptor", Some(&["by", "values", "default"]))?;
    let by = fields.require("by", "the descriptor the limit varies with, e.g. by: plan")?;
    let descriptor = by.str("a descriptor name")?;
    vocabulary.check(descriptor, by)?;
    let values_item =
        fields.require("values", "the limit for each value, e.g. values: {free: 100, pro: 10000}")?;
    let values_fields = values_item.fields("limits by value", None)?;
    if values_fields.len() == 0 {
        return Err(values_item.error("values is empty: give the limit for at least one value"));
    }
    let mut values = Vec::new();
    for (value, _, entry) in values_fields.iter() {
        let n = entry.u64_at_least("limit", 1)?;
        values.push((value.to_owned(), NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN), entry));
    }
    let default = match fields.get("default") {
        Some(d) => {
            let n = d.u64_at_least("limit", 1)?;
            Some((NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN), d))
        }
        None => None,
    };
    Ok(Count::By { descriptor: descriptor.to_owned(), values, default })
}

pub(crate) const OVERAGE_WITHOUT_BY: &str = "overage applies only to a limit that varies by a descriptor (limit: {by: plan, values: {...}}, or rate: {by: plan, values: {...}} for a bucket)";

/// The limit (and its variants) of a window, concurrency or quota rule.
pub(crate) fn counted(
    fields: &Fields<'_>,
    shape: &Shape,
    count: &Count<'_>,
    limit_item: &Item<'_>,
    canonical: &mut Canonical,
) -> Result<(Limit, Option<ByDescriptor>), Invalid> {
    let overage = fields.get("overage");
    match count {
        Count::One(n) => {
            if let Some(o) = overage {
                return Err(o.error(OVERAGE_WITHOUT_BY));
            }
            canonical.field("limit", n.get());
            Ok((shape.limit(*n, limit_item)?, None))
        }
        Count::By { descriptor, values, default } => {
            let mut variants = Vec::new();
            for (value, n, at) in values {
                variants.push((value.clone(), shape.limit(*n, at)?));
            }
            let base = match default {
                Some((n, at)) => Some(shape.limit(*n, at)?),
                None => None,
            };
            let mut counts: Vec<(&str, u64)> = values.iter().map(|(v, n, _)| (v.as_str(), n.get())).collect();
            counts.sort_unstable();
            canonical
                .field("limit.by", descriptor)
                .field("limit.values", counts)
                .field("limit.default", default.as_ref().map(|(n, _)| n.get()));
            let (base, by) = vary(fields, descriptor, variants, base, canonical)?;
            Ok((base, Some(by)))
        }
    }
}

/// What happens past one value's limit: an action, or `{degrade_to: <model>}`.
#[derive(Debug, Clone)]
pub(crate) enum Overage {
    Act(Action),
    DegradeTo(String),
}

/// `degrade`: an overage's word for `tag` (allow, and tag the request).
const DEGRADE: &str = "degrade";

/// The actions an overage names, by name: every action that answers at once (all but `delay`,
/// which waits), and [`DEGRADE`] for `tag`.
fn overage_acts() -> impl Iterator<Item = (&'static str, Action)> + Clone {
    let immediate = Action::ALL.into_iter().filter(|a| !matches!(a, Action::Delay { .. }));
    immediate.map(|a| (a.name(), a)).chain([(DEGRADE, Action::Tag)])
}

/// `overage: {free: {degrade_to: gpt-4o-mini}, pro: degrade, enterprise: deny}`: what happens per
/// value when the limit is exceeded.
fn overage_actions(item: &Item<'_>, listed: &[&str]) -> Result<Vec<(String, Overage)>, Invalid> {
    let fields = item.fields("actions by value", None)?;
    let mut actions = Vec::new();
    for (value, key, action_item) in fields.iter() {
        if !listed.contains(&value) {
            return Err(key.error(format!(
                "overage for {value:?}, which has no limit in the values (values: {})",
                listed.join(", ")
            )));
        }
        if action_item.is_map() {
            let to =
                action_item.fields("a degrade (e.g. {degrade_to: gpt-4o-mini})", Some(&["degrade_to"]))?;
            let model_item = to.require(
                "degrade_to",
                "the model to switch to past the limit, e.g. degrade_to: gpt-4o-mini",
            )?;
            let model = model_item.text("a model name")?;
            if model.trim().is_empty() || !model.chars().all(|c| (' '..='~').contains(&c)) {
                return Err(model_item.error(format!(
                    "invalid model {}: degrade_to must be non-empty printable ASCII (it is sent in a header)",
                    model_item.node.describe()
                )));
            }
            actions.push((value.to_owned(), Overage::DegradeTo(model.into_owned())));
            continue;
        }
        let text = action_item.str("deny, degrade or {degrade_to: <model>}")?;
        let Some((_, action)) = overage_acts().find(|(name, _)| *name == text) else {
            let names = overage_acts().map(|(name, _)| name);
            return Err(action_item.error(format!(
                "unknown overage {text:?}: expected {} ({DEGRADE}: allow and tag){}",
                alternatives(names.clone().chain(["{degrade_to: <model>}"])),
                did_you_mean(text, names)
            )));
        };
        actions.push((value.to_owned(), Overage::Act(action)));
    }
    Ok(actions)
}
