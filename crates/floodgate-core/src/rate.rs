//! Rates such as `10/s`, `600/m` or `5000/h`.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::time::Duration;

/// `count` cells per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: NonZeroU64,
    period_us: NonZeroU64,
}

/// A rate that cannot be represented.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// The period is shorter than one microsecond.
    #[error("the period must be at least 1µs")]
    ZeroPeriod,
    /// More than one cell per microsecond.
    #[error("{count} per {period_us}µs is faster than one per microsecond, the finest resolution")]
    TooFast {
        /// Cells per period.
        count: u64,
        /// The period in µs.
        period_us: u64,
    },
    /// Text that is not `N/unit`.
    #[error("invalid rate {text:?}: expected N/unit with unit one of ms, s, m, h, d (e.g. \"10/s\")")]
    Syntax {
        /// The text given.
        text: String,
    },
}

const SECOND: u64 = 1_000_000;

impl Rate {
    /// `count` per second.
    pub const fn per_second(count: NonZeroU64) -> Self {
        Rate { count, period_us: NonZeroU64::new(SECOND).unwrap() }
    }

    /// `count` per minute.
    pub const fn per_minute(count: NonZeroU64) -> Self {
        Rate { count, period_us: NonZeroU64::new(60 * SECOND).unwrap() }
    }

    /// `count` per hour.
    pub const fn per_hour(count: NonZeroU64) -> Self {
        Rate { count, period_us: NonZeroU64::new(3600 * SECOND).unwrap() }
    }

    /// `count` per `period`.
    pub fn try_new(count: NonZeroU64, period: Duration) -> Result<Self, RateError> {
        let period_us = NonZeroU64::new(crate::time::micros(period)).ok_or(RateError::ZeroPeriod)?;
        if count.get() > period_us.get() {
            return Err(RateError::TooFast { count: count.get(), period_us: period_us.get() });
        }
        Ok(Rate { count, period_us })
    }

    /// Cells per period.
    pub const fn count(&self) -> u64 {
        self.count.get()
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        Duration::from_micros(self.period_us.get())
    }

    /// The time between two cells, in whole microseconds, rounded up so that the effective rate never
    /// exceeds the configured one (by less than 1µs per cell when the period does not divide evenly).
    pub const fn interval_us(&self) -> u64 {
        self.period_us.get().div_ceil(self.count.get())
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let syntax = || RateError::Syntax { text: text.to_owned() };
        let (count, unit) = text.trim().split_once('/').ok_or_else(syntax)?;
        let count: NonZeroU64 = count.trim().parse().map_err(|_| syntax())?;
        let unit_us = match unit.trim() {
            "ms" => 1_000,
            "s" | "sec" | "second" => SECOND,
            "m" | "min" | "minute" => 60 * SECOND,
            "h" | "hour" => 3600 * SECOND,
            "d" | "day" => 86_400 * SECOND,
            _ => return Err(syntax()),
        };
        Rate::try_new(count, Duration::from_micros(unit_us))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.period_us.get();
        let unit = match p {
            1_000 => "ms",
            SECOND => "s",
            x if x == 60 * SECOND => "m",
            x if x == 3600 * SECOND => "h",
            x if x == 86_400 * SECOND => "d",
            _ => return write!(f, "{}/{}us", self.count, p),
        };
        write!(f, "{}/{}", self.count, unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_units() {
        assert_eq!("10/s".parse::<Rate>().unwrap().interval_us(), 100_000);
        assert_eq!("600/m".parse::<Rate>().unwrap().interval_us(), 100_000);
        assert_eq!("5000/h".parse::<Rate>().unwrap().interval_us(), 720_000);
        assert_eq!("10/s".parse::<Rate>().unwrap().to_string(), "10/s");
    }

    #[test]
    fn rejects_bad_rates_with_the_text() {
        let err = "ten/s".parse::<Rate>().unwrap_err();
        assert!(err.to_string().contains("\"ten/s\""), "{err}");
        assert!("0/s".parse::<Rate>().is_err());
        assert!("10/fortnight".parse::<Rate>().is_err());
        assert!(matches!("2000/ms".parse::<Rate>(), Err(RateError::TooFast { .. })));
    }

    #[test]
    fn uneven_intervals_round_up() {
        // 7 per minute: 8_571_428.57µs between cells, rounded up so the rate is never exceeded.
        let r = Rate::try_new(NonZeroU64::new(7).unwrap(), Duration::from_secs(60)).unwrap();
        assert_eq!(r.interval_us(), 8_571_429);
    }
}
