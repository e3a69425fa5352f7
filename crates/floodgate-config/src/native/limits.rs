//! A rule's limit: its algorithm's parameters (as the [registry](crate::algorithm) lists them)
//! read into a [`Limit`], or into several when the limit varies by a descriptor.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Action, ByDescriptor, Limit, LimitKind};
use floodgate_core::calendar::Period;
use floodgate_core::{
    Budget, Calendar, Concurrency, FixedWindow, Gcra, Quota, Rate, SlidingLog, SlidingWindow, TokenBucket,
};
use jiff::civil::Weekday;

use super::descriptors::Vocabulary;
use super::rules::action_name;
use super::store::positive_duration;
use crate::duration;
use crate::error::Invalid;
use crate::fingerprint::Canonical;
use crate::yaml::{Fields, Item, did_you_mean};

/// The default concurrency lease.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

pub(crate) enum Shape {
    Window(LimitKind, Duration),
    Concurrency(Duration),
    Quota(Calendar),
    Budget(Duration),
}

impl Shape {
    pub(crate) fn limit(&self, count: NonZeroU64, at: &Item<'_>) -> Result<Limit, Invalid> {
        let limit: Limit = match self {
            Shape::Window(LimitKind::FixedWindow, w) => FixedWindow::try_new(count, *w).map(Limit::from),
            Shape::Window(LimitKind::SlidingLog, w) => SlidingLog::try_new(count, *w).map(Limit::from),
            Shape::Window(_, w) => SlidingWindow::try_new(count, *w).map(Limit::from),
            Shape::Concurrency(lease) => Concurrency::try_new(count, *lease).map(Limit::from),
            Shape::Quota(calendar) => Ok(Quota::new(count, calendar.clone()).into()),
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

/// A token bucket or GCRA rule: `rate` and `burst`.
pub(crate) fn bucket(
    fields: &Fields<'_>,
    kind: LimitKind,
    canonical: &mut Canonical,
) -> Result<Limit, Invalid> {
    let rate_item = fields.require("rate", "e.g. rate: 10/s")?;
    let rate = rate(&rate_item)?;
    let burst_item = fields.get("burst");
    let burst = match &burst_item {
        Some(b) => b.u64_at_least("burst", 1)?,
        None if kind == LimitKind::Gcra => 1,
        None => rate.count(),
    };
    let burst = NonZeroU64::new(burst).unwrap_or(NonZeroU64::MIN);
    canonical.field("rate", (rate.count(), rate.period().as_micros())).field("burst", burst.get());
    let at = burst_item.as_ref().unwrap_or(&rate_item);
    let limit: Limit = if kind == LimitKind::Gcra {
        Gcra::try_new(rate, burst).map(Limit::from)
    } else {
        TokenBucket::try_new(rate, burst).map(Limit::from)
    }
    .map_err(|e| at.error(e.to_string()))?;
    Ok(limit)
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
    canonical: &mut Canonical,
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
            let ttl = positive_duration(ttl_item, "ttl")?;
            canonical.field("ttl", duration::format(ttl));
            Ok(Shape::Budget(ttl))
        }
        LimitKind::Quota => {
            let period_item = fields.require("period", "day, week or month")?;
            let period_name = period_item.str("a period")?;
            let anchor = fields.get("anchor");
            let period = match period_name {
                "day" => {
                    if let Some(a) = &anchor {
                        return Err(
                            a.error("anchor does not apply to period day (days begin at local midnight)")
                        );
                    }
                    Period::Day
                }
                "week" => Period::Week {
                    starts_on: match &anchor {
                        Some(a) => weekday(a)?,
                        None => Weekday::Monday,
                    },
                },
                "month" => Period::Month {
                    anchor_day: match &anchor {
                        Some(a) => {
                            let day = a.u64_at_least("anchor", 1)?;
                            u8::try_from(day).ok().filter(|d| *d <= 31).ok_or_else(|| {
                                a.error(format!("invalid anchor {day}: a day of the month is 1 to 31"))
                            })?
                        }
                        None => 1,
                    },
                },
                other => {
                    return Err(period_item.error(format!(
                        "unknown period {other:?}: expected day, week or month{}",
                        did_you_mean(other, ["day", "week", "month"])
                    )));
                }
            };
            let zone_item = fields.get("time_zone");
            let zone = match &zone_item {
                Some(z) => z.str("an IANA time zone such as Europe/Berlin")?,
                None => "UTC",
            };
            let calendar = Calendar::try_new(period, zone).map_err(|e| {
                zone_item.as_ref().or(anchor.as_ref()).unwrap_or(&period_item).error(e.to_string())
            })?;
            let period_text = match period {
                Period::Day => "day".to_owned(),
                Period::Week { starts_on } => format!("week from {}", starts_on.to_monday_one_offset()),
                Period::Month { anchor_day } => format!("month from {anchor_day}"),
            };
            canonical.field("period", period_text).field("time_zone", calendar.time_zone_name());
            Ok(Shape::Quota(calendar))
        }
        _ => {
            let window_item = fields.require("window", "e.g. window: 60s")?;
            let window = positive_duration(window_item, "window")?;
            canonical.field("window", duration::format(window));
            Ok(Shape::Window(kind, window))
        }
    }
}

fn weekday(item: &Item<'_>) -> Result<Weekday, Invalid> {
    let text = item.text("a weekday")?.to_ascii_lowercase();
    let days = [
        ("monday", Weekday::Monday),
        ("tuesday", Weekday::Tuesday),
        ("wednesday", Weekday::Wednesday),
        ("thursday", Weekday::Thursday),
        ("friday", Weekday::Friday),
        ("saturday", Weekday::Saturday),
        ("sunday", Weekday::Sunday),
    ];
    days.iter()
        .find(|(name, _)| *name == text || (text.len() == 3 && name.starts_with(text.as_str())))
        .map(|(_, day)| *day)
        .ok_or_else(|| {
            item.error(format!(
                "invalid anchor {}: a week starts on a weekday, monday to sunday",
                item.node.describe()
            ))
        })
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

pub(crate) const OVERAGE_WITHOUT_BY: &str =
    "overage applies only to a limit that varies by a descriptor (limit: {by: plan, values: {...}})";

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
            let mut actions = match overage {
                Some(o) => overage_actions(&o, values)?,
                None => Vec::new(),
            };
            let mut by = ByDescriptor::new(descriptor.as_str());
            for (value, n, at) in values {
                let action = actions.iter().find(|(v, _)| v == value).map(|(_, a)| *a);
                by = by.variant(value.as_str(), shape.limit(*n, at)?, action);
            }
            let base = match default {
                Some((n, at)) => shape.limit(*n, at)?,
                None => {
                    // Values not listed are not subject to the rule; the rule's own limit is never
                    // used but must exist: take the first variant's.
                    by = by.only_listed();
                    let (_, n, at) = &values[0];
                    shape.limit(*n, at)?
                }
            };
            let mut counts: Vec<(&str, u64)> = values.iter().map(|(v, n, _)| (v.as_str(), n.get())).collect();
            counts.sort_unstable();
            actions.sort_by(|a, b| a.0.cmp(&b.0));
            let actions: Vec<(&str, &str)> =
                actions.iter().map(|(v, a)| (v.as_str(), action_name(*a))).collect();
            canonical
                .field("limit.by", descriptor)
                .field("limit.values", counts)
                .field("limit.default", default.as_ref().map(|(n, _)| n.get()))
                .field("overage", &actions);
            Ok((base, Some(by)))
        }
    }
}

/// `overage: {free: degrade, enterprise: deny}`: the action per value when the limit is exceeded.
fn overage_actions(
    item: &Item<'_>,
    values: &[(String, NonZeroU64, Item<'_>)],
) -> Result<Vec<(String, Action)>, Invalid> {
    let fields = item.fields("actions by value", None)?;
    let mut actions = Vec::new();
    for (value, key, action_item) in fields.iter() {
        if !values.iter().any(|(v, ..)| v == value) {
            let listed: Vec<&str> = values.iter().map(|(v, ..)| v.as_str()).collect();
            return Err(key.error(format!(
                "overage for {value:?}, which has no limit in limit.values (values: {})",
                listed.join(", ")
            )));
        }
        let action = match action_item.str("deny or degrade")? {
            "deny" => Action::Deny,
            "degrade" | "tag" => Action::Tag,
            "shadow" => Action::Shadow,
            other => {
                return Err(action_item.error(format!(
                    "unknown overage {other:?}: expected deny, degrade (allow and tag) or shadow{}",
                    did_you_mean(other, ["deny", "degrade", "shadow", "tag"])
                )));
            }
        };
        actions.push((value.to_owned(), action));
    }
    Ok(actions)
}
