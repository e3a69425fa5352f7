//! Calendar periods for quotas: days, weeks and billing months in a time zone.
//!
//! A [`Calendar`] cuts time into periods that begin at local midnight: every day, every week on a
//! given weekday, or every month on an anchor day such as "the 15th". Periods follow the time zone's
//! rules, so a day can last 23 or 25 hours across a daylight-saving change. Time zones come from the
//! IANA database bundled with [`jiff`].
//!
//! ```
//! use floodgate_core::{Calendar, Timestamp, calendar::Period};
//!
//! let billing = Calendar::try_new(Period::Month { anchor_day: 15 }, "Europe/Berlin")?;
//! // 2025-01-10T12:00:00Z falls in the period from 15 December to 15 January, Berlin time (UTC+1).
//! let (start, end) = billing.bounds(Timestamp::from_secs(1_736_510_400));
//! assert_eq!(start, Timestamp::from_secs(1_734_217_200)); // 2024-12-14T23:00:00Z
//! assert_eq!(end, Timestamp::from_secs(1_736_895_600)); // 2025-01-14T23:00:00Z
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::ToSpan;
use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;

use crate::Timestamp;

/// How a [`Calendar`] cuts time: each period begins at local midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    /// From midnight to midnight.
    Day,
    /// Seven days from midnight on `starts_on`.
    Week {
        /// The first day of each week.
        starts_on: Weekday,
    },
    /// From midnight on the anchor day of one month to the anchor day of the next: a billing cycle.
    Month {
        /// The day of the month a period begins, `1..=31`. In months shorter than that, the period
        /// begins on the month's last day: with 31, on 28 or 29 February and on 30 April.
        anchor_day: u8,
    },
}

impl Period {
    /// This kind of period begun on the anchor `text`, written as a quota's `anchor` is: a day of
    /// the month `1` to `31` for a month, a weekday (`monday`, or its first three letters, in any
    /// case) for a week. A day has no anchor.
    ///
    /// ```
    /// use floodgate_core::calendar::Period;
    /// use jiff::civil::Weekday;
    ///
    /// let month = Period::Month { anchor_day: 1 };
    /// assert_eq!(month.anchored("15")?, Period::Month { anchor_day: 15 });
    /// assert!(month.anchored("32").is_err());
    /// let week = Period::Week { starts_on: Weekday::Monday };
    /// assert_eq!(week.anchored("Sun")?, Period::Week { starts_on: Weekday::Sunday });
    /// # Ok::<(), floodgate_core::calendar::CalendarError>(())
    /// ```
    pub fn anchored(self, text: &str) -> Result<Period, CalendarError> {
        let invalid = |expected| CalendarError::Anchor { anchor: text.to_owned(), expected };
        match self {
            Period::Day => Err(invalid("nothing: a day begins at local midnight")),
            Period::Month { .. } => {
                let day = (!text.is_empty() && text.len() <= 2 && text.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| text.parse::<u8>().ok())
                    .flatten()
                    .filter(|d| (1..=31).contains(d));
                day.map(|anchor_day| Period::Month { anchor_day })
                    .ok_or_else(|| invalid("a day of the month, 1 to 31"))
            }
            Period::Week { .. } => WEEKDAYS
                .iter()
                .find(|(name, _)| {
                    name.eq_ignore_ascii_case(text)
                        || (text.len() == 3 && name[..3].eq_ignore_ascii_case(text))
                })
                .map(|(_, starts_on)| Period::Week { starts_on: *starts_on })
                .ok_or_else(|| invalid("a weekday, monday to sunday")),
        }
    }
}

/// The weekdays a week's anchor names, Monday first: each in any case, or its first three
/// letters ([`Period::anchored`]).
pub fn weekday_names() -> impl Iterator<Item = &'static str> {
    WEEKDAYS.iter().map(|(name, _)| *name)
}

const WEEKDAYS: [(&str, Weekday); 7] = [
    ("monday", Weekday::Monday),
    ("tuesday", Weekday::Tuesday),
    ("wednesday", Weekday::Wednesday),
    ("thursday", Weekday::Thursday),
    ("friday", Weekday::Friday),
    ("saturday", Weekday::Saturday),
    ("sunday", Weekday::Sunday),
];

/// A calendar that cannot be built.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CalendarError {
    /// The name is not in the time zone database.
    #[error("unknown time zone {name:?}: expected an IANA name such as \"Europe/Berlin\" or \"UTC\"")]
    UnknownTimeZone {
        /// The name given.
        name: String,
        /// What the time zone database said, when it said anything.
        #[source]
        source: Option<jiff::Error>,
    },
    /// An anchor, written as text, that the kind of period does not take.
    #[error("invalid anchor {anchor:?}: expected {expected}")]
    Anchor {
        /// The anchor given.
        anchor: String,
        /// What the period takes.
        expected: &'static str,
    },
    /// A monthly anchor that is not a day of the month.
    #[error("anchor day {anchor_day} is not a day of the month: expected 1..=31")]
    AnchorDay {
        /// The anchor given.
        anchor_day: u8,
    },
}

/// Calendar periods in a time zone; [`bounds`](Calendar::bounds) says which period an instant is in.
///
/// Periods begin at 00:00 local time. Where a time zone skips midnight (Chile, Cuba, Lebanon and
/// others begin daylight saving time at 00:00), the period begins at the first instant after the
/// gap, as jiff's `compatible` disambiguation does; where midnight happens twice, it begins at the
/// first.
///
/// Quotas ask for the bounds on every decision, so the two latest periods computed are cached: an
/// instant inside either costs one or two atomic loads. Two, because a quota asks for the current
/// period and for the one after it (until whose end a key's count stays readable as the previous
/// period's): one entry would be evicted by the other on every decision. Clones start with the
/// same cache but do not share it.
pub struct Calendar {
    period: Period,
    time_zone: TimeZone,
    /// The latest period computed, packed by [`pack`]; 0 (an empty period) before the first.
    latest: AtomicU64,
    /// The latest period computed before [`Calendar::latest`]'s (an older one), packed; 0 before.
    earlier: AtomicU64,
}

// === impl Calendar ===

impl Calendar {
    /// Periods of `period` in the IANA time zone `time_zone` (`"Europe/Berlin"`, `"UTC"`; matched
    /// without regard to case).
    pub fn try_new(period: Period, time_zone: &str) -> Result<Calendar, CalendarError> {
        check_period(period)?;
        let unknown = |source| CalendarError::UnknownTimeZone { name: time_zone.to_owned(), source };
        let zone = TimeZone::get(time_zone).map_err(|e| unknown(Some(e)))?;
        // jiff resolves "Etc/Unknown" to a zone without a name that behaves as UTC: not a real zone.
        if zone.iana_name().is_none() {
            return Err(unknown(None));
        }
        Ok(Calendar::with_zone(period, zone))
    }

    /// Every time zone name [`Calendar::try_new`] takes when the database in use is the one
    /// bundled with this build (the system's, when there is one, has the same names unless one of
    /// them is older or newer), sorted: the list a document states.
    pub fn time_zone_names() -> Vec<String> {
        let db = jiff::tz::TimeZoneDatabase::bundled();
        let mut names: Vec<String> = db
            .available()
            .filter(|name| db.get(name.as_str()).is_ok_and(|zone| zone.iana_name().is_some()))
            .map(|name| name.as_str().to_owned())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Periods of `period` in UTC.
    ///
    /// # Panics
    /// When `period` is a [`Period::Month`] whose `anchor_day` is not in `1..=31`; use
    /// [`Calendar::try_new`] for anchors that come from input.
    pub fn utc(period: Period) -> Calendar {
        if let Err(e) = check_period(period) {
            panic!("{e}");
        }
        Calendar::with_zone(period, TimeZone::UTC)
    }

    fn with_zone(period: Period, time_zone: TimeZone) -> Calendar {
        Calendar { period, time_zone, latest: AtomicU64::new(0), earlier: AtomicU64::new(0) }
    }

    /// How this calendar cuts time.
    pub fn period(&self) -> Period {
        self.period
    }

    /// The canonical IANA name of the time zone, such as `"Europe/Berlin"`.
    pub fn time_zone_name(&self) -> &str {
        // Both constructors refuse zones without a name.
        self.time_zone.iana_name().unwrap_or("UTC")
    }

    /// The time zone.
    pub fn time_zone(&self) -> &TimeZone {
        &self.time_zone
    }

    /// The period containing `now`: `start <= now < end`, and the end of one period is the start of
    /// the next.
    ///
    /// Two saturations keep this total over every [`Timestamp`]: the period containing the Unix epoch
    /// starts no earlier than the epoch, and instants after the year 9999 (past what the time zone
    /// database can name) belong to the last period, which ends at `u64::MAX` µs.
    pub fn bounds(&self, now: Timestamp) -> (Timestamp, Timestamp) {
        let t = now.as_micros();
        let cached = self.latest.load(Ordering::Relaxed);
        let (start, end) = unpack(cached);
        if start <= t && t < end {
            return (Timestamp::from_micros(start), Timestamp::from_micros(end));
        }
        let (start, end) = unpack(self.earlier.load(Ordering::Relaxed));
        if start <= t && t < end {
            return (Timestamp::from_micros(start), Timestamp::from_micros(end));
        }
        let (start, end) = self.compute(t);
        if let Some(packed) = pack(start, end) {
            // A packed value orders by its start, so the cache keeps the two latest periods: looking
            // up an older one (for a refund, or the previous period's count) evicts neither, and the
            // period a newer one displaces becomes the earlier. Any value written is a complete
            // answer, so no ordering with other memory is needed; two threads racing may leave an
            // older period than the two latest in `earlier`, which only costs a lookup later.
            let displaced = self.latest.fetch_max(packed, Ordering::Relaxed).min(packed);
            self.earlier.fetch_max(displaced, Ordering::Relaxed);
        }
        (Timestamp::from_micros(start), Timestamp::from_micros(end))
    }

    /// `bounds` without the cache.
    fn compute(&self, t: u64) -> (u64, u64) {
        let instant = i64::try_from(t)
            .ok()
            .and_then(|us| jiff::Timestamp::from_microsecond(us).ok())
            .unwrap_or(jiff::Timestamp::MAX);
        let mut first = self.first_day(self.time_zone.to_datetime(instant).date());
        // The local date usually names the period, but not always: where clocks go back across
        // midnight (America/St_Johns went from 00:01 back to 23:01 until 2011), part of the previous
        // evening repeats after the new day has begun. Boundaries increase with the day, so step to
        // the period whose boundaries hold `t`.
        loop {
            let start = self.midnight(first).unwrap_or(0);
            if start > t {
                match self.step(first, -1) {
                    Some(previous) => {
                        first = previous;
                        continue;
                    }
                    None => return (0, start),
                }
            }
            let next = self.step(first, 1);
            match (next, next.and_then(|next| self.midnight(next))) {
                (Some(next), Some(end)) if end <= t => first = next,
                (_, Some(end)) => return (start, end),
                (_, None) => return (start, u64::MAX),
            }
        }
    }

    /// The first day of the period that contains the local date `day`.
    fn first_day(&self, day: Date) -> Date {
        match self.period {
            Period::Day => day,
            Period::Week { starts_on } => {
                let back = day.weekday().since(starts_on);
                day.checked_sub(i64::from(back).days()).unwrap_or(day)
            }
            Period::Month { anchor_day } => {
                let this_month = anchor_in(day.year(), day.month(), anchor_day);
                match this_month {
                    Some(anchor) if anchor <= day => anchor,
                    _ => month_after(day.year(), day.month(), -1)
                        .and_then(|(y, m)| anchor_in(y, m, anchor_day))
                        .unwrap_or(day),
                }
            }
        }
    }

    /// The first day of the period `by` periods after (or before) the one starting on `first`;
    /// `None` outside the years jiff can represent.
    fn step(&self, first: Date, by: i8) -> Option<Date> {
        match self.period {
            Period::Day => first.checked_add(i64::from(by).days()).ok(),
            Period::Week { .. } => first.checked_add((7 * i64::from(by)).days()).ok(),
            Period::Month { anchor_day } => {
                let (y, m) = month_after(first.year(), first.month(), by)?;
                anchor_in(y, m, anchor_day)
            }
        }
    }

    /// The instant local midnight begins `day`, in µs since the epoch (0 for days before the epoch);
    /// `None` past the end of jiff's range. A skipped midnight resolves to the end of the gap.
    fn midnight(&self, day: Date) -> Option<u64> {
        let local = day.to_datetime(Time::midnight());
        let instant = self.time_zone.to_ambiguous_timestamp(local).compatible().ok()?;
        Some(u64::try_from(instant.as_microsecond()).unwrap_or(0))
    }
}

impl Clone for Calendar {
    fn clone(&self) -> Self {
        Calendar {
            period: self.period,
            time_zone: self.time_zone.clone(),
            latest: AtomicU64::new(self.latest.load(Ordering::Relaxed)),
            earlier: AtomicU64::new(self.earlier.load(Ordering::Relaxed)),
        }
    }
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calendar")
            .field("period", &self.period)
            .field("time_zone", &self.time_zone_name())
            .finish()
    }
}

/// Equal when the periods and the time zones' names are: such calendars always agree.
impl PartialEq for Calendar {
    fn eq(&self, other: &Self) -> bool {
        self.period == other.period && self.time_zone_name() == other.time_zone_name()
    }
}

impl Eq for Calendar {}

impl Hash for Calendar {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.period.hash(state);
        self.time_zone_name().hash(state);
    }
}

fn check_period(period: Period) -> Result<(), CalendarError> {
    match period {
        Period::Month { anchor_day } if !(1..=31).contains(&anchor_day) => {
            Err(CalendarError::AnchorDay { anchor_day })
        }
        _ => Ok(()),
    }
}

/// The year and month `by` months after `year`-`month`; `None` past jiff's years.
fn month_after(year: i16, month: i8, by: i8) -> Option<(i16, i8)> {
    let index = i32::from(year) * 12 + i32::from(month) - 1 + i32::from(by);
    let year = i16::try_from(index.div_euclid(12)).ok()?;
    let month = i8::try_from(index.rem_euclid(12) + 1).ok()?;
    Some((year, month))
}

/// The anchor day in `year`-`month`, or the month's last day if the month is shorter.
fn anchor_in(year: i16, month: i8, anchor_day: u8) -> Option<Date> {
    let first = Date::new(year, month, 1).ok()?;
    let day = i8::try_from(anchor_day).unwrap_or(i8::MAX).min(first.days_in_month());
    Date::new(year, month, day).ok()
}

// === the cache ===

const MICROS_PER_SEC: u64 = 1_000_000;
/// Low bits of a packed period: its length in seconds (up to 194 days).
const LENGTH_BITS: u32 = 24;
const LENGTH_MASK: u64 = (1 << LENGTH_BITS) - 1;

/// `[start, end)` in one word: the start in seconds above the length in seconds. Local midnights fall
/// on whole seconds (time zone offsets are whole seconds), and the starts jiff can name (up to the
/// year 9999, 2^38 s) fit in the upper 40 bits. `None` for a period that does not fit: the last one,
/// ending at `u64::MAX`.
fn pack(start: u64, end: u64) -> Option<u64> {
    if !start.is_multiple_of(MICROS_PER_SEC) || !end.is_multiple_of(MICROS_PER_SEC) || end <= start {
        return None;
    }
    let start_secs = start / MICROS_PER_SEC;
    let length_secs = (end - start) / MICROS_PER_SEC;
    if start_secs >= 1 << (64 - LENGTH_BITS) || length_secs > LENGTH_MASK {
        return None;
    }
    Some(start_secs << LENGTH_BITS | length_secs)
}

fn unpack(packed: u64) -> (u64, u64) {
    let start = (packed >> LENGTH_BITS) * MICROS_PER_SEC;
    (start, start + (packed & LENGTH_MASK) * MICROS_PER_SEC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;
    use proptest::prelude::*;

    const HOUR: u64 = 3_600_000_000;

    /// An instant written in UTC, such as `"2024-03-31T01:00:00Z"`.
    fn utc(text: &str) -> Timestamp {
        let t: jiff::Timestamp = text.parse().unwrap();
        Timestamp::from_micros(u64::try_from(t.as_microsecond()).unwrap())
    }

    fn cal(period: Period, zone: &str) -> Calendar {
        Calendar::try_new(period, zone).unwrap()
    }

    #[test]
    fn the_bundled_time_zone_names_are_sorted_real_zones() {
        let names = Calendar::time_zone_names();
        assert!(names.len() > 300, "{}", names.len());
        assert!(names.windows(2).all(|w| w[0] < w[1]));
        for name in ["UTC", "Europe/Berlin", "America/New_York"] {
            assert!(names.iter().any(|n| n == name), "{name}");
        }
        assert!(!names.iter().any(|n| n == "Etc/Unknown"));
    }

    fn bounds(c: &Calendar, now: &str) -> (Timestamp, Timestamp) {
        c.bounds(utc(now))
    }

    fn span(text: (&str, &str)) -> (Timestamp, Timestamp) {
        (utc(text.0), utc(text.1))
    }

    fn length(b: (Timestamp, Timestamp)) -> u64 {
        b.1.as_micros() - b.0.as_micros()
    }

    #[test]
    fn a_utc_day_runs_from_midnight_to_midnight() {
        let c = Calendar::utc(Period::Day);
        let day = span(("2024-05-17T00:00:00Z", "2024-05-18T00:00:00Z"));
        assert_eq!(bounds(&c, "2024-05-17T00:00:00Z"), day);
        assert_eq!(bounds(&c, "2024-05-17T13:45:12.345678Z"), day);
        assert_eq!(c.bounds(Timestamp::from_micros(day.1.as_micros() - 1)), day);
        assert_eq!(bounds(&c, "2024-05-18T00:00:00Z").0, day.1);
    }

    #[test]
    fn berlin_spring_forward_day_lasts_23_hours() {
        let c = cal(Period::Day, "Europe/Berlin");
        let day = span(("2024-03-30T23:00:00Z", "2024-03-31T22:00:00Z"));
        assert_eq!(bounds(&c, "2024-03-31T00:59:59Z"), day); // 01:59:59 CET
        assert_eq!(bounds(&c, "2024-03-31T01:00:00Z"), day); // 03:00:00 CEST
        assert_eq!(length(day), 23 * HOUR);
    }

    #[test]
    fn berlin_fall_back_day_lasts_25_hours() {
        let c = cal(Period::Day, "Europe/Berlin");
        let day = span(("2024-10-26T22:00:00Z", "2024-10-27T23:00:00Z"));
        assert_eq!(bounds(&c, "2024-10-27T00:30:00Z"), day); // 02:30 CEST
        assert_eq!(bounds(&c, "2024-10-27T01:30:00Z"), day); // 02:30 CET, the second time
        assert_eq!(length(day), 25 * HOUR);
    }

    #[test]
    fn a_skipped_midnight_starts_the_day_when_the_gap_ends() {
        // Chile moves from -04 to -03 at 00:00 on 8 September 2024: the clocks show 01:00 instead.
        let c = cal(Period::Day, "America/Santiago");
        let day = span(("2024-09-08T04:00:00Z", "2024-09-09T03:00:00Z"));
        assert_eq!(bounds(&c, "2024-09-08T04:00:00Z"), day);
        assert_eq!(bounds(&c, "2024-09-08T12:00:00Z"), day);
        assert_eq!(bounds(&c, "2024-09-08T03:59:59.999999Z").1, day.0, "the evening before ends at the gap");
        assert_eq!(length(day), 23 * HOUR);

        // Lebanon's spring gap also swallows 00:00 (+02 to +03).
        let c = cal(Period::Day, "Asia/Beirut");
        let day = span(("2024-03-30T22:00:00Z", "2024-03-31T21:00:00Z"));
        assert_eq!(bounds(&c, "2024-03-31T05:00:00Z"), day);
    }

    #[test]
    fn a_repeated_midnight_starts_the_day_at_its_first_occurrence() {
        // Cuba goes from -04 back to -05 at 01:00 on 3 November 2024: 00:00 to 01:00 happens twice.
        let c = cal(Period::Day, "America/Havana");
        let day = span(("2024-11-03T04:00:00Z", "2024-11-04T05:00:00Z"));
        assert_eq!(bounds(&c, "2024-11-03T04:30:00Z"), day);
        assert_eq!(bounds(&c, "2024-11-03T05:30:00Z"), day);
        assert_eq!(length(day), 25 * HOUR);
    }

    #[test]
    fn an_evening_repeated_after_midnight_belongs_to_the_new_day() {
        // Newfoundland went from 00:01 NDT (-02:30) back to 23:01 NST (-03:30) on 31 October 1999:
        // 23:01 to 00:00 of the 30th came again after the 31st had begun at 02:30Z.
        let c = cal(Period::Day, "America/St_Johns");
        let day = span(("1999-10-31T02:30:00Z", "1999-11-01T03:30:00Z"));
        assert_eq!(bounds(&c, "1999-10-31T02:30:30Z"), day);
        assert_eq!(bounds(&c, "1999-10-31T03:00:00Z"), day, "23:30 on the 30th, the second time");
        assert_eq!(bounds(&c, "1999-10-31T02:29:59Z").1, day.0);
    }

    #[test]
    fn a_skipped_day_leaves_no_empty_period() {
        // Samoa skipped 30 December 2011, moving from -10 to +14 at the end of the 29th.
        let c = cal(Period::Day, "Pacific/Apia");
        let before = bounds(&c, "2011-12-30T09:59:59Z");
        let after = bounds(&c, "2011-12-30T10:00:00Z");
        assert_eq!(before.1, after.0);
        assert_eq!(after, span(("2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z")));
    }

    #[test]
    fn weeks_start_at_midnight_on_their_first_day() {
        // 2024-05-15 is a Wednesday.
        let monday = cal(Period::Week { starts_on: Weekday::Monday }, "Europe/Berlin");
        let week = span(("2024-05-12T22:00:00Z", "2024-05-19T22:00:00Z"));
        assert_eq!(bounds(&monday, "2024-05-15T12:00:00Z"), week);
        assert_eq!(bounds(&monday, "2024-05-12T22:00:00Z"), week, "Monday 00:00 local");
        assert_eq!(bounds(&monday, "2024-05-12T21:59:59Z").1, week.0, "Sunday 23:59:59 local");

        let sunday = Calendar::utc(Period::Week { starts_on: Weekday::Sunday });
        let week = span(("2024-05-12T00:00:00Z", "2024-05-19T00:00:00Z"));
        assert_eq!(bounds(&sunday, "2024-05-15T12:00:00Z"), week);
        assert_eq!(bounds(&sunday, "2024-05-18T23:59:59Z"), week);
        assert_eq!(bounds(&sunday, "2024-05-19T00:00:00Z").0, week.1);
    }

    #[test]
    fn a_week_across_a_clock_change_lasts_167_hours() {
        let c = cal(Period::Week { starts_on: Weekday::Monday }, "Europe/Berlin");
        let week = bounds(&c, "2024-03-31T12:00:00Z");
        assert_eq!(week, span(("2024-03-24T23:00:00Z", "2024-03-31T22:00:00Z")));
        assert_eq!(length(week), 167 * HOUR);
    }

    #[test]
    fn months_anchored_on_the_first_are_calendar_months() {
        let c = cal(Period::Month { anchor_day: 1 }, "UTC");
        let feb = span(("2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"));
        assert_eq!(bounds(&c, "2024-02-01T00:00:00Z"), feb);
        assert_eq!(bounds(&c, "2024-02-29T23:59:59Z"), feb);
        assert_eq!(
            bounds(&c, "2024-12-31T12:00:00Z"),
            span(("2024-12-01T00:00:00Z", "2025-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn a_billing_month_runs_from_anchor_to_anchor() {
        let c = cal(Period::Month { anchor_day: 15 }, "Europe/Berlin");
        // Before the 15th: the period began on 15 December.
        let dec_jan = span(("2024-12-14T23:00:00Z", "2025-01-14T23:00:00Z"));
        assert_eq!(bounds(&c, "2025-01-10T12:00:00Z"), dec_jan);
        assert_eq!(bounds(&c, "2025-01-14T22:59:59.999999Z"), dec_jan);
        // On the 15th: a new one.
        assert_eq!(
            bounds(&c, "2025-01-14T23:00:00Z"),
            span(("2025-01-14T23:00:00Z", "2025-02-14T23:00:00Z"))
        );
        // Across the spring change the end is in CEST.
        assert_eq!(
            bounds(&c, "2025-03-20T00:00:00Z"),
            span(("2025-03-14T23:00:00Z", "2025-04-14T22:00:00Z"))
        );
    }

    #[test]
    fn anchor_31_falls_back_to_the_last_day_of_short_months() {
        let c = Calendar::utc(Period::Month { anchor_day: 31 });
        // Leap year: 29 February.
        assert_eq!(
            bounds(&c, "2024-02-15T00:00:00Z"),
            span(("2024-01-31T00:00:00Z", "2024-02-29T00:00:00Z"))
        );
        assert_eq!(
            bounds(&c, "2024-02-29T00:00:00Z"),
            span(("2024-02-29T00:00:00Z", "2024-03-31T00:00:00Z"))
        );
        // Other years: 28 February.
        assert_eq!(
            bounds(&c, "2025-02-27T23:59:59Z"),
            span(("2025-01-31T00:00:00Z", "2025-02-28T00:00:00Z"))
        );
        assert_eq!(
            bounds(&c, "2025-03-01T00:00:00Z"),
            span(("2025-02-28T00:00:00Z", "2025-03-31T00:00:00Z"))
        );
        // A 30-day month.
        assert_eq!(
            bounds(&c, "2025-05-01T00:00:00Z"),
            span(("2025-04-30T00:00:00Z", "2025-05-31T00:00:00Z"))
        );
    }

    #[test]
    fn bad_zones_and_anchors_are_named_errors() {
        let e = Calendar::try_new(Period::Day, "Mars/Olympus_Mons").unwrap_err();
        assert!(matches!(e, CalendarError::UnknownTimeZone { .. }));
        assert!(e.to_string().starts_with("unknown time zone \"Mars/Olympus_Mons\""), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        assert!(Calendar::try_new(Period::Day, "Etc/Unknown").is_err());
        assert!(Calendar::try_new(Period::Day, "").is_err());
        for anchor_day in [0, 32, 255] {
            let e = Calendar::try_new(Period::Month { anchor_day }, "UTC").unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("anchor day {anchor_day} is not a day of the month: expected 1..=31")
            );
        }
    }

    #[test]
    #[should_panic(expected = "anchor day 0")]
    fn utc_panics_on_a_bad_anchor() {
        Calendar::utc(Period::Month { anchor_day: 0 });
    }

    #[test]
    fn equal_by_period_and_canonical_zone_name() {
        let a = cal(Period::Day, "europe/berlin");
        assert_eq!(a.time_zone_name(), "Europe/Berlin");
        assert_eq!(a, cal(Period::Day, "Europe/Berlin"));
        assert_ne!(a, cal(Period::Day, "Europe/Paris"));
        assert_ne!(a, cal(Period::Week { starts_on: Weekday::Monday }, "Europe/Berlin"));
        assert_eq!(Calendar::utc(Period::Day), cal(Period::Day, "UTC"));
        assert_eq!(a.period(), Period::Day);
        assert_eq!(format!("{a:?}"), "Calendar { period: Day, time_zone: \"Europe/Berlin\" }");
        fn shareable<T: Clone + fmt::Debug + Send + Sync>() {}
        shareable::<Calendar>();
    }

    #[test]
    fn the_ends_of_time_saturate() {
        let c = cal(Period::Day, "Asia/Tokyo");
        // The day containing the epoch began at 15:00Z the day before: clamped to the epoch.
        assert_eq!(c.bounds(Timestamp::EPOCH), (Timestamp::EPOCH, Timestamp::from_secs(15 * 3600)));
        // Past the year 9999 everything is in the last period, which never ends.
        let last = c.bounds(Timestamp::from_micros(u64::MAX));
        assert_eq!(last.1, Timestamp::from_micros(u64::MAX));
        assert_eq!(c.bounds(last.0), last);
        let jiff_max = u64::try_from(jiff::Timestamp::MAX.as_microsecond()).unwrap();
        assert_eq!(c.bounds(Timestamp::from_micros(jiff_max + 1)), last);
        assert_eq!(c.bounds(Timestamp::from_micros(last.0.as_micros() - 1)).1, last.0);
    }

    #[test]
    fn the_cache_keeps_the_latest_period() {
        let c = cal(Period::Day, "Europe/Berlin");
        let cached = |entry: &AtomicU64| {
            let (start, end) = unpack(entry.load(Ordering::Relaxed));
            (Timestamp::from_micros(start), Timestamp::from_micros(end))
        };
        let today = bounds(&c, "2024-05-17T12:00:00Z");
        assert_eq!(cached(&c.latest), today);
        bounds(&c, "2024-05-10T12:00:00Z"); // an older period does not evict it
        assert_eq!(cached(&c.latest), today);
        assert_eq!(bounds(&c, "2024-05-17T21:59:59Z"), today);
        assert_eq!(pack(0, u64::MAX), None);
        assert_eq!(pack(5, 1_000_000), None);
    }

    #[test]
    fn the_cache_keeps_the_current_period_beside_the_next() {
        // A quota asks for today and, for its key's expiry, for tomorrow: both stay cached.
        let c = cal(Period::Day, "Europe/Berlin");
        let cached = |entry: &AtomicU64| {
            let (start, end) = unpack(entry.load(Ordering::Relaxed));
            (Timestamp::from_micros(start), Timestamp::from_micros(end))
        };
        let today = bounds(&c, "2024-05-17T12:00:00Z");
        let tomorrow = c.bounds(today.1);
        assert_eq!((cached(&c.latest), cached(&c.earlier)), (tomorrow, today));
        bounds(&c, "2024-05-10T12:00:00Z"); // an older period evicts neither
        assert_eq!((cached(&c.latest), cached(&c.earlier)), (tomorrow, today));
        // The day after tomorrow displaces today; tomorrow becomes the earlier.
        let after = c.bounds(tomorrow.1);
        assert_eq!((cached(&c.latest), cached(&c.earlier)), (after, tomorrow));
        assert_eq!(c.clone().bounds(tomorrow.0), tomorrow);
    }

    const ZONES: [&str; 10] = [
        "UTC",
        "Europe/Berlin",
        "America/Santiago",
        "America/Havana",
        "America/St_Johns",
        "Asia/Beirut",
        "Australia/Lord_Howe",
        "Pacific/Apia",
        "Asia/Kolkata",
        "Pacific/Kiritimati",
    ];

    fn any_period() -> impl Strategy<Value = Period> {
        prop_oneof![
            Just(Period::Day),
            (0i8..7).prop_map(|d| Period::Week { starts_on: Weekday::from_monday_zero_offset(d).unwrap() }),
            (1u8..=31).prop_map(|anchor_day| Period::Month { anchor_day }),
        ]
    }

    fn any_instant() -> impl Strategy<Value = u64> {
        let jiff_max = u64::try_from(jiff::Timestamp::MAX.as_microsecond()).unwrap();
        prop_oneof![
            0..jiff_max,
            // 1970 to 2040, where the zones change most.
            0u64..2_200_000_000_000_000,
        ]
    }

    proptest! {
        #[test]
        fn periods_contain_now_and_tile_time(
            zone in prop::sample::select(&ZONES[..]),
            period in any_period(),
            instants in prop::collection::vec(any_instant(), 1..20),
        ) {
            let shared = cal(period, zone);
            for t in instants {
                let now = Timestamp::from_micros(t);
                let (start, end) = shared.bounds(now);
                prop_assert!(start <= now && now < end, "{now:?} not in [{start:?}, {end:?})");
                prop_assert_eq!((start, end), cal(period, zone).bounds(now), "the cache changed the answer");
                if end.as_micros() != u64::MAX {
                    prop_assert_eq!(shared.bounds(end).0, end, "the next period starts at the end");
                }
                if start > Timestamp::EPOCH {
                    let before = Timestamp::from_micros(start.as_micros() - 1);
                    prop_assert_eq!(shared.bounds(before).1, start, "the previous period ends at the start");
                    // A start is the local midnight of its own day (or the end of a gap over it).
                    let tz = shared.time_zone();
                    let instant = jiff::Timestamp::from_microsecond(i64::try_from(start.as_micros()).unwrap()).unwrap();
                    let local_day = tz.to_datetime(instant).date();
                    let midnight = tz.to_ambiguous_timestamp(local_day.to_datetime(Time::midnight())).compatible().unwrap();
                    prop_assert_eq!(midnight, instant);
                }
            }
        }
    }

    #[test]
    fn month_arithmetic_wraps_years() {
        assert_eq!(month_after(2024, 12, 1), Some((2025, 1)));
        assert_eq!(month_after(2024, 1, -1), Some((2023, 12)));
        assert_eq!(anchor_in(2023, 2, 30), Some(date(2023, 2, 28)));
    }
}
