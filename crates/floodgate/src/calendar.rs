//! Quota calendars per tenant: a quota rule's time zone and anchor read from a request's
//! descriptors, so that one rule serves tenants in many zones and billing days.

use std::sync::Arc;

use floodgate_core::calendar::Period;
use floodgate_core::{Calendar, Quota};
use smallvec::SmallVec;

use crate::{Descriptors, EngineError, Limit};

/// A calendar setting (a time zone or an anchor) read from a descriptor.
///
/// The setting is the descriptor's value itself (`Europe/Berlin`, `15`), or — with
/// [`FromDescriptor::value`] — what the value maps to (`eu` → `Europe/Berlin`). A request without
/// the descriptor gets the [`default`](FromDescriptor::default); one without it and no default, or
/// with a value that is not a valid setting (or not listed, when values are mapped), is refused
/// with [`EngineError::Descriptor`]: it never silently gets another calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FromDescriptor {
    pub(crate) descriptor: Arc<str>,
    /// `(descriptor value, setting)`; empty: the value is the setting.
    pub(crate) values: Vec<(String, String)>,
    pub(crate) default: Option<String>,
}

impl FromDescriptor {
    /// The setting is the value of `descriptor`.
    pub fn new(descriptor: impl Into<Arc<str>>) -> Self {
        FromDescriptor { descriptor: descriptor.into(), values: Vec::new(), default: None }
    }

    /// A request whose descriptor is `value` gets `setting`. Once one value is mapped, values not
    /// mapped are refused.
    pub fn value(mut self, value: impl Into<String>, setting: impl Into<String>) -> Self {
        self.values.push((value.into(), setting.into()));
        self
    }

    /// What a request without the descriptor gets.
    pub fn default(mut self, setting: impl Into<String>) -> Self {
        self.default = Some(setting.into());
        self
    }

    /// The descriptor read.
    pub fn descriptor(&self) -> &str {
        &self.descriptor
    }

    /// The setting for `descriptors`: the mapped or given value, or the default.
    fn setting<'a>(&'a self, rule: &Arc<str>, descriptors: &'a Descriptors) -> Result<&'a str, EngineError> {
        let Some(value) = descriptors.get(&self.descriptor) else {
            return self.default.as_deref().ok_or_else(|| EngineError::MissingDescriptor {
                rule: rule.clone(),
                descriptor: self.descriptor.clone(),
            });
        };
        if self.values.is_empty() {
            return Ok(value);
        }
        self.values.iter().find(|(v, _)| v == value).map(|(_, setting)| setting.as_str()).ok_or_else(|| {
            EngineError::Descriptor {
                rule: rule.clone(),
                descriptor: self.descriptor.clone(),
                value: value.to_owned(),
                expected: "one of the values the rule maps",
            }
        })
    }

    /// Every setting written in the rule: the mapped ones and the default.
    fn written(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(|(_, s)| s.as_str()).chain(self.default.as_deref())
    }
}

/// A quota rule's calendar read from descriptors: its time zone, its anchor, or both. See
/// [`Rule::calendar_by`](crate::Rule::calendar_by).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CalendarBy {
    pub(crate) time_zone: Option<FromDescriptor>,
    pub(crate) anchor: Option<FromDescriptor>,
}

impl CalendarBy {
    /// The rule's own calendar, until a setting is read from a descriptor.
    pub fn new() -> Self {
        CalendarBy::default()
    }

    /// The time zone (an IANA name such as `Europe/Berlin`, matched without regard to case) read
    /// from a descriptor.
    pub fn time_zone(mut self, from: FromDescriptor) -> Self {
        self.time_zone = Some(from);
        self
    }

    /// The anchor (a day of the month `1` to `31` for a monthly quota, a weekday for a weekly one;
    /// see [`Period::anchored`]) read from a descriptor.
    pub fn anchor(mut self, from: FromDescriptor) -> Self {
        self.anchor = Some(from);
        self
    }

    /// Where the time zone comes from, if from a descriptor.
    pub fn time_zone_source(&self) -> Option<&FromDescriptor> {
        self.time_zone.as_ref()
    }

    /// Where the anchor comes from, if from a descriptor.
    pub fn anchor_source(&self) -> Option<&FromDescriptor> {
        self.anchor.as_ref()
    }

    /// Why the settings written in the rule (mapped values, defaults) cannot make a calendar of
    /// `limit`'s periods, if they cannot.
    pub(crate) fn check(&self, limit: &Limit) -> Result<(), String> {
        let Limit::Quota(q) = limit else {
            return Err(format!(
                "a time zone or anchor from a descriptor is for the quota algorithm, not {}",
                limit.algorithm_name()
            ));
        };
        let period = q.calendar().period();
        if let Some(anchor) = &self.anchor {
            if period == Period::Day {
                return Err("anchor does not apply to period day (days begin at local midnight)".into());
            }
            for setting in anchor.written() {
                period.anchored(setting).map_err(|e| format!("anchor: {e}"))?;
            }
        }
        if let Some(zone) = &self.time_zone {
            for setting in zone.written() {
                Calendar::try_new(period, setting).map_err(|e| format!("time_zone: {e}"))?;
            }
        }
        Ok(())
    }
}

/// The most calendars a rule keeps; past it, the cache starts over. IANA names are about 600, and
/// anchors 31, so a rule's tenants use far fewer; the bound is for values that vary in case.
const CACHE_CAPACITY: usize = 1024;

/// A rule's [`CalendarBy`] with the calendars it has built, by setting.
#[derive(Debug)]
pub(crate) struct Calendars {
    by: CalendarBy,
    cache: papaya::HashMap<Box<[u8]>, Arc<Calendar>, foldhash::fast::RandomState>,
}

impl Calendars {
    pub(crate) fn new(by: CalendarBy) -> Self {
        Calendars { by, cache: papaya::HashMap::builder().hasher(Default::default()).build() }
    }

    /// `quota` in the calendar that `descriptors` choose. A calendar already built (the common case)
    /// costs a hash lookup and no allocation.
    pub(crate) fn quota(
        &self,
        rule: &Arc<str>,
        quota: &Quota,
        descriptors: &Descriptors,
    ) -> Result<Quota, EngineError> {
        let base = quota.calendar();
        let zone = match &self.by.time_zone {
            Some(from) => from.setting(rule, descriptors)?,
            None => base.time_zone_name(),
        };
        let anchor = match &self.by.anchor {
            Some(from) => Some(from.setting(rule, descriptors)?),
            None => None,
        };
        // The key: the rule's own period (its variants may differ), the zone, the anchor.
        let mut key: SmallVec<[u8; 64]> = SmallVec::new();
        key.extend_from_slice(&match base.period() {
            Period::Day => [b'd', 0],
            Period::Week { starts_on } => [b'w', starts_on.to_monday_one_offset() as u8],
            Period::Month { anchor_day } => [b'm', anchor_day],
        });
        key.extend_from_slice(zone.as_bytes());
        if let Some(anchor) = anchor {
            // A time zone name never holds a NUL: the key is unambiguous.
            key.push(0);
            key.extend_from_slice(anchor.as_bytes());
        }
        let cache = self.cache.pin();
        if let Some(calendar) = cache.get(&key[..]) {
            return Ok(quota.in_calendar(calendar.clone()));
        }
        let invalid = |from: &Option<FromDescriptor>, value: &str, expected| {
            let descriptor = from.as_ref().map(|f| f.descriptor.clone()).unwrap_or_default();
            EngineError::Descriptor { rule: rule.clone(), descriptor, value: value.to_owned(), expected }
        };
        let period = match anchor {
            Some(text) => base.period().anchored(text).map_err(|_| {
                invalid(
                    &self.by.anchor,
                    text,
                    match base.period() {
                        Period::Week { .. } => "a weekday, monday to sunday (the quota's anchor)",
                        _ => "a day of the month, 1 to 31 (the quota's anchor)",
                    },
                )
            })?,
            None => base.period(),
        };
        let calendar = Calendar::try_new(period, zone).map_err(|_| {
            invalid(
                &self.by.time_zone,
                zone,
                "an IANA time zone name such as Europe/Berlin (the quota's time zone)",
            )
        })?;
        let calendar = Arc::new(calendar);
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(key.to_vec().into_boxed_slice(), calendar.clone());
        Ok(quota.in_calendar(calendar))
    }
}
