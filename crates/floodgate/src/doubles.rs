//! Whether a limit's arithmetic stays exact in doubles (IEEE 754 binary64, Lua's numbers), whose
//! integers are exact only below 2^53: the range of a store that computes in them — the Redis
//! store's scripts — which its configuration checks at load and the store again on every call.
//!
//! A limit is exact in doubles when its counts (a window's limit, a bucket's burst), its lengths (a
//! window, a concurrency lease, a budget's ttl, a bucket's fill time) stay below 2^52 — headroom
//! for the sums of a count with a cost, or of a time with a length — and a sliding window's
//! `limit × window` (in µs) below 2^53.
//!
//! ```
//! use std::num::NonZeroU64;
//! use std::time::Duration;
//! use floodgate::Limit;
//! use floodgate::doubles::Inexact;
//! use floodgate_core::SlidingWindow;
//!
//! let hour = Duration::from_secs(3600);
//! let window = |n: u64| -> Limit { SlidingWindow::try_new(NonZeroU64::new(n).unwrap(), hour).unwrap().into() };
//! assert_eq!(window(2_501_999).exact_in_doubles(), Ok(()));
//! let Err(why) = window(2_502_000).exact_in_doubles() else { unreachable!() };
//! assert_eq!(why, Inexact::Product { limit: 2_502_000, window_us: 3_600_000_000 });
//! assert_eq!(why.largest(), 2_501_999);
//! ```

use std::fmt;

use crate::Limit;

/// Integers below this are exact in a double: 2^53.
pub const EXACT: u64 = 1 << 53;

/// A limit's counts and lengths stay below this, 2^52, so that their sums with a cost or a time
/// stay exact too.
pub const HEADROOM: u64 = 1 << 52;

/// Why a limit's arithmetic would not be exact in doubles: the first quantity out of range, and
/// its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inexact {
    /// A count (`parameter`: a window's `limit`, a bucket's `burst`) of [`HEADROOM`] or more.
    Count {
        /// The parameter, as configuration names it.
        parameter: &'static str,
        /// Its value.
        count: u64,
    },
    /// A length (`parameter`: a `window`, a concurrency `lease`, a budget's `ttl`) of [`HEADROOM`]
    /// µs or more (about 142.7 years).
    Length {
        /// The parameter, as configuration names it.
        parameter: &'static str,
        /// Its value, µs.
        micros: u64,
    },
    /// A sliding window whose `limit × window` (µs) is [`EXACT`] or more.
    Product {
        /// The limit.
        limit: u64,
        /// The window, µs.
        window_us: u64,
    },
    /// A token bucket or GCRA whose fill time, `burst × interval` (the time one cell refills), is
    /// [`HEADROOM`] µs or more.
    FillTime {
        /// The burst.
        burst: u64,
        /// The time one cell refills, µs.
        interval_us: u64,
    },
}

impl Inexact {
    /// The parameter, as configuration names it, whose value is out of range: `limit`, `burst`,
    /// `window`, `lease` or `ttl` (`limit` for a sliding window's product, `burst` for a fill time).
    pub fn parameter(&self) -> &'static str {
        match self {
            Inexact::Count { parameter, .. } | Inexact::Length { parameter, .. } => parameter,
            Inexact::Product { .. } => "limit",
            Inexact::FillTime { .. } => "burst",
        }
    }

    /// The largest value of [`Inexact::parameter`] that is exact, all else equal: `2^52 − 1` for
    /// a count or a length, the largest limit for the window, the largest burst at the rate.
    pub fn largest(&self) -> u64 {
        match *self {
            Inexact::Count { .. } | Inexact::Length { .. } => HEADROOM - 1,
            Inexact::Product { window_us, .. } => (EXACT - 1) / window_us.max(1),
            Inexact::FillTime { interval_us, .. } => (HEADROOM - 1) / interval_us.max(1),
        }
    }
}

impl fmt::Display for Inexact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let largest = self.largest();
        match *self {
            Inexact::Count { parameter, count } => {
                write!(f, "{parameter} {count} is not below 2^52 ({HEADROOM}): at most {largest}")
            }
            Inexact::Length { parameter, micros } => write!(
                f,
                "{parameter} {micros} µs is not below 2^52 µs ({HEADROOM} µs, about 142 years): at most {largest} µs"
            ),
            Inexact::Product { limit, window_us } => write!(
                f,
                "limit × window is {limit} × {window_us} µs = {}, not below 2^53 ({EXACT}): a window of {window_us} µs \
                 takes a limit of at most {largest}",
                u128::from(limit) * u128::from(window_us)
            ),
            Inexact::FillTime { burst, interval_us } => write!(
                f,
                "the fill time, burst × refill interval, is {burst} × {interval_us} µs = {} µs, not below 2^52 µs \
                 ({HEADROOM} µs): at this rate the burst is at most {largest}",
                u128::from(burst) * u128::from(interval_us)
            ),
        }
    }
}

impl std::error::Error for Inexact {}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Limit {
    /// `Ok` when this limit's arithmetic stays exact in doubles (see the [module docs](self));
    /// otherwise the first quantity out of range: its count, then its length, then a sliding
    /// window's product or a bucket's fill time.
    pub fn exact_in_doubles(&self) -> Result<(), Inexact> {
        let count = self.capacity();
        if count >= HEADROOM {
            let parameter = match self {
                Limit::TokenBucket(_) | Limit::Gcra(_) => "burst",
                _ => "limit",
            };
            return Err(Inexact::Count { parameter, count });
        }
        let length = match self {
            Limit::FixedWindow(a) => Some(("window", micros(a.window()))),
            Limit::SlidingWindow(a) => Some(("window", micros(a.window()))),
            Limit::SlidingLog(a) => Some(("window", micros(a.window()))),
            Limit::Concurrency(a) => Some(("lease", micros(a.lease()))),
            Limit::Budget(a) => Some(("ttl", micros(a.ttl()))),
            Limit::TokenBucket(_) | Limit::Gcra(_) | Limit::Quota(_) => None,
        };
        if let Some((parameter, micros)) = length
            && micros >= HEADROOM
        {
            return Err(Inexact::Length { parameter, micros });
        }
        match self {
            Limit::SlidingWindow(a) => {
                let window_us = micros(a.window());
                if u128::from(count) * u128::from(window_us) >= u128::from(EXACT) {
                    return Err(Inexact::Product { limit: count, window_us });
                }
            }
            Limit::TokenBucket(a) if micros(a.fill_time()) >= HEADROOM => {
                return Err(Inexact::FillTime { burst: count, interval_us: a.rate().interval_us() });
            }
            Limit::Gcra(a) if micros(a.fill_time()) >= HEADROOM => {
                return Err(Inexact::FillTime { burst: count, interval_us: a.rate().interval_us() });
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;
    use std::time::Duration;

    use floodgate_core::calendar::Period;
    use floodgate_core::{Budget, Calendar, Concurrency, FixedWindow, Gcra, Quota, Rate, TokenBucket};

    use super::*;

    fn nz(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    #[test]
    fn each_bound_refuses_its_first_value_and_takes_the_one_before() {
        let hour = Duration::from_secs(3600);
        let fixed = |n: u64, w: Duration| -> Limit { FixedWindow::try_new(nz(n), w).unwrap().into() };
        assert_eq!(fixed(HEADROOM - 1, hour).exact_in_doubles(), Ok(()));
        assert_eq!(
            fixed(HEADROOM, hour).exact_in_doubles(),
            Err(Inexact::Count { parameter: "limit", count: HEADROOM })
        );
        let longest = Duration::from_micros(HEADROOM - 1);
        assert_eq!(fixed(1, longest).exact_in_doubles(), Ok(()));
        assert_eq!(
            fixed(1, longest + Duration::from_micros(1)).exact_in_doubles(),
            Err(Inexact::Length { parameter: "window", micros: HEADROOM })
        );
        let lease: Limit = Concurrency::try_new(nz(1), longest + Duration::from_micros(1)).unwrap().into();
        assert_eq!(lease.exact_in_doubles().unwrap_err().parameter(), "lease");
        let ttl: Limit = Budget::try_new(nz(1), longest + Duration::from_micros(1)).unwrap().into();
        assert_eq!(ttl.exact_in_doubles().unwrap_err().parameter(), "ttl");
        let quota = |n: u64| -> Limit { Quota::new(nz(n), Calendar::utc(Period::Day)).into() };
        assert_eq!(quota(HEADROOM - 1).exact_in_doubles(), Ok(()));
        assert_eq!(quota(HEADROOM).exact_in_doubles().unwrap_err().parameter(), "limit");

        // One cell an hour: 3.6 × 10^9 µs each.
        let per_hour = Rate::try_new(nz(1), hour).unwrap();
        let gcra = |burst: u64| -> Limit { Gcra::try_new(per_hour, nz(burst)).unwrap().into() };
        let largest = (HEADROOM - 1) / 3_600_000_000;
        assert_eq!(gcra(largest).exact_in_doubles(), Ok(()));
        let refused = gcra(largest + 1).exact_in_doubles().unwrap_err();
        assert_eq!(refused, Inexact::FillTime { burst: largest + 1, interval_us: 3_600_000_000 });
        assert_eq!((refused.parameter(), refused.largest()), ("burst", largest));
        let fast = Rate::try_new(nz(1_000_000), Duration::from_secs(1)).unwrap();
        let bucket: Limit = TokenBucket::try_new(fast, nz(HEADROOM)).unwrap().into();
        assert_eq!(bucket.exact_in_doubles(), Err(Inexact::Count { parameter: "burst", count: HEADROOM }));
    }

    #[test]
    fn the_message_says_the_bound_and_the_largest_value_taken() {
        let why = Inexact::Product { limit: 2_502_000, window_us: 3_600_000_000 };
        assert_eq!(
            why.to_string(),
            "limit × window is 2502000 × 3600000000 µs = 9007200000000000, not below 2^53 (9007199254740992): \
             a window of 3600000000 µs takes a limit of at most 2501999"
        );
        let why = Inexact::Count { parameter: "limit", count: HEADROOM };
        assert_eq!(
            why.to_string(),
            "limit 4503599627370496 is not below 2^52 (4503599627370496): at most 4503599627370495"
        );
    }
}
