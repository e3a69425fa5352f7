//! What an assignment tells an Envoy to do ([`Strategy`]), and how a share of a rule's limit
//! becomes one.

use std::time::Duration;

use floodgate::Limit;

/// Envoy's `RateLimitStrategy`, as Floodgate sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// `token_bucket`: a local bucket of `max_tokens`, refilled with `tokens_per_fill` every
    /// `fill_interval`.
    TokenBucket {
        /// The bucket's size.
        max_tokens: u32,
        /// Tokens added each fill.
        tokens_per_fill: u32,
        /// How often it fills.
        fill_interval: Duration,
    },
    /// `requests_per_time_unit`.
    PerTimeUnit {
        /// Requests allowed per unit.
        requests: u64,
        /// The unit.
        unit: TimeUnit,
    },
    /// `blanket_rule: ALLOW_ALL`.
    AllowAll,
    /// `blanket_rule: DENY_ALL`.
    DenyAll,
}

/// Envoy's `RateLimitUnit`s that a window can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    /// A second.
    Second,
    /// A minute.
    Minute,
    /// An hour.
    Hour,
    /// A day.
    Day,
}

impl TimeUnit {
    /// The unit whose length is `window`, if one is.
    pub fn of(window: Duration) -> Option<TimeUnit> {
        match window.as_secs() {
            _ if window.subsec_nanos() != 0 => None,
            1 => Some(TimeUnit::Second),
            60 => Some(TimeUnit::Minute),
            3600 => Some(TimeUnit::Hour),
            86_400 => Some(TimeUnit::Day),
            _ => None,
        }
    }
}

/// A rule's limit as a rate and a burst: what is shared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shared {
    /// The global rate, requests per second.
    pub rate: f64,
    /// The global burst: what all the streams' buckets may hold together.
    pub burst: f64,
    /// The window of a window rule (for `requests_per_time_unit`).
    pub window: Option<Duration>,
}

impl Shared {
    /// What `limit` shares: a window rule's `limit / window` with a tenth of its limit as burst
    /// (a whole window's worth could be spent at once by every stream whose assignment changed,
    /// since Envoy starts a new assignment's bucket full); a bucket's rate and burst.
    pub fn of(limit: &Limit) -> Option<Shared> {
        let window = |count: u64, window: Duration| Shared {
            rate: count as f64 / window.as_secs_f64(),
            burst: (count as f64 / 10.0).max(1.0),
            window: Some(window),
        };
        match limit {
            Limit::FixedWindow(a) => Some(window(limit.capacity(), a.window())),
            Limit::SlidingWindow(a) => Some(window(limit.capacity(), a.window())),
            Limit::SlidingLog(a) => Some(window(limit.capacity(), a.window())),
            Limit::TokenBucket(a) => Some(Shared {
                rate: a.rate().count() as f64 / a.rate().period().as_secs_f64(),
                burst: a.burst() as f64,
                window: None,
            }),
            Limit::Gcra(a) => Some(Shared {
                rate: a.rate().count() as f64 / a.rate().period().as_secs_f64(),
                burst: a.burst() as f64,
                window: None,
            }),
            _ => None,
        }
    }

    /// The strategy for a share of `rate` requests per second (≤ [`Shared::rate`]): a token bucket
    /// refilling at no more than `rate`, holding its part of the burst (at least 1 token); or, with
    /// `per_time_unit`, `requests_per_time_unit` of the share of the window's count, rounded down.
    /// A share of nothing denies.
    pub fn strategy(&self, rate: f64, per_time_unit: bool) -> Strategy {
        if !rate.is_finite() || rate <= 0.0 {
            return Strategy::DenyAll;
        }
        if per_time_unit && let Some(unit) = self.window.and_then(TimeUnit::of) {
            let window = self.window.unwrap_or(Duration::from_secs(1));
            let requests = (rate * window.as_secs_f64()).floor() as u64;
            return if requests == 0 { Strategy::DenyAll } else { Strategy::PerTimeUnit { requests, unit } };
        }
        let tokens = (self.burst * rate / self.rate).floor().clamp(1.0, f64::from(u32::MAX)) as u32;
        // Refill `tokens` every `tokens / rate` seconds, rounded up to the microsecond: never faster
        // than the share.
        let micros = (f64::from(tokens) / rate * 1e6).ceil().clamp(1.0, 1e15) as u64;
        Strategy::TokenBucket {
            max_tokens: tokens,
            tokens_per_fill: tokens,
            fill_interval: Duration::from_micros(micros),
        }
    }
}

impl Strategy {
    /// The rate this strategy admits at most in the long run, requests per second (`None`: no
    /// limit).
    pub fn rate(&self) -> Option<f64> {
        match *self {
            Strategy::TokenBucket { tokens_per_fill, fill_interval, .. } => {
                Some(f64::from(tokens_per_fill) / fill_interval.as_secs_f64().max(1e-9))
            }
            Strategy::PerTimeUnit { requests, unit } => {
                let secs = match unit {
                    TimeUnit::Second => 1.0,
                    TimeUnit::Minute => 60.0,
                    TimeUnit::Hour => 3600.0,
                    TimeUnit::Day => 86_400.0,
                };
                Some(requests as f64 / secs)
            }
            Strategy::AllowAll => None,
            Strategy::DenyAll => Some(0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use floodgate_core::{FixedWindow, Rate, TokenBucket};
    use proptest::prelude::{prop_assert, proptest};

    use super::*;

    fn window(limit: u64, secs: u64) -> Shared {
        let limit: Limit =
            FixedWindow::try_new(NonZeroU64::new(limit).unwrap(), Duration::from_secs(secs)).unwrap().into();
        Shared::of(&limit).unwrap()
    }

    #[test]
    fn a_window_share_is_a_bucket_with_a_tenth_of_it_as_burst() {
        let shared = window(100, 1);
        assert_eq!(
            shared.strategy(50.0, false),
            Strategy::TokenBucket {
                max_tokens: 5,
                tokens_per_fill: 5,
                fill_interval: Duration::from_millis(100)
            }
        );
        assert_eq!(
            shared.strategy(50.0, true),
            Strategy::PerTimeUnit { requests: 50, unit: TimeUnit::Second }
        );
        assert_eq!(shared.strategy(0.0, false), Strategy::DenyAll);
        assert_eq!(shared.strategy(0.5, true), Strategy::DenyAll);
    }

    #[test]
    fn a_bucket_share_splits_the_burst() {
        let limit: Limit = TokenBucket::try_new(
            Rate::per_second(NonZeroU64::new(1000).unwrap()),
            NonZeroU64::new(20).unwrap(),
        )
        .unwrap()
        .into();
        let shared = Shared::of(&limit).unwrap();
        let Strategy::TokenBucket { max_tokens, .. } = shared.strategy(250.0, false) else { panic!() };
        assert_eq!(max_tokens, 5);
    }

    proptest! {
        #[test]
        fn a_strategy_never_admits_faster_than_its_share(limit in 1u64..1_000_000, secs in 1u64..100_000, share in 0.0f64..=1.0) {
            let shared = window(limit, secs);
            let rate = shared.rate * share;
            let strategy = shared.strategy(rate, false);
            prop_assert!(strategy.rate().unwrap() <= rate * (1.0 + 1e-12) + 1e-12, "{:?} for {}", strategy, rate);
        }
    }
}
