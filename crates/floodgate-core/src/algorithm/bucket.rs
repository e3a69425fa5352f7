//! Token bucket and GCRA: one arithmetic, two ways of stating it.
//!
//! Both keep a single number per key, the *theoretical arrival time* (TAT): the moment at which the
//! bucket is full again. A request of cost `c` moves it to `max(TAT, now) + c × T`, where `T` is the
//! time one cell takes to refill, and is allowed while that stays within `burst × T` of `now`.
//! This is exactly a token bucket of capacity `burst` refilled at one token per `T`, stored as a
//! time instead of a fractional token count, so it needs no floating point and no second field.

use std::num::NonZeroU64;

use super::{Algorithm, Grant};
use crate::{Decision, Rate, Timestamp};

/// The shared arithmetic of [`TokenBucket`] and [`Gcra`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Bucket {
    /// Refill time of one cell, µs (≥ 1).
    interval: u64,
    /// Capacity in cells (≥ 1).
    burst: u64,
    /// `burst × interval`: the most the TAT may run ahead of now.
    span: u64,
}

/// The largest span a bucket may have: a few thousand years, keeping all sums far from overflow.
const MAX_SPAN_US: u64 = 1 << 62;

/// A bucket whose capacity would take too long to refill to be represented.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("burst {burst} at rate {rate} takes too long to refill")]
pub struct BucketError {
    burst: u64,
    rate: Rate,
}

impl Bucket {
    fn try_new(rate: Rate, burst: NonZeroU64) -> Result<Self, BucketError> {
        let interval = rate.interval_us();
        let span = interval
            .checked_mul(burst.get())
            .filter(|s| *s <= MAX_SPAN_US)
            .ok_or(BucketError { burst: burst.get(), rate })?;
        Ok(Bucket { interval, burst: burst.get(), span })
    }

    #[inline]
    fn cost_span(&self, cost: u64) -> u64 {
        self.interval.saturating_mul(cost)
    }

    #[inline]
    fn decide(&self, tat: u64, now: Timestamp, cost: u64) -> Decision {
        let now = now.as_micros();
        let start = tat.max(now);
        let ahead = start - now;
        let new_ahead = ahead.saturating_add(self.cost_span(cost));
        if new_ahead <= self.span {
            Decision::allow(self.burst, (self.span - new_ahead) / self.interval, new_ahead)
        } else {
            let remaining = self.span.saturating_sub(ahead) / self.interval;
            Decision::deny(self.burst, remaining, ahead, new_ahead - self.span)
        }
    }

    #[inline]
    fn consume(&self, tat: &mut u64, now: Timestamp, cost: u64) -> Grant {
        *tat = (*tat).max(now.as_micros()).saturating_add(self.cost_span(cost));
        Grant { at: now, cost, lease: 0 }
    }

    fn refund(&self, tat: &mut u64, now: Timestamp, grant: &Grant) {
        let back = (*tat).saturating_sub(self.cost_span(grant.cost));
        *tat = if back <= now.as_micros() { 0 } else { back };
    }

    #[inline]
    fn status(&self, tat: u64, now: Timestamp) -> (u64, u64) {
        let ahead = tat.saturating_sub(now.as_micros());
        (self.span.saturating_sub(ahead) / self.interval, ahead)
    }
}

macro_rules! bucket_algorithm {
    ($name:ident) => {
        impl $name {
            /// The refill rate.
            pub fn rate(&self) -> Rate {
                self.rate
            }

            /// The capacity: the most granted at once.
            pub fn burst(&self) -> u64 {
                self.bucket.burst
            }

            /// The time an empty bucket takes to fill completely.
            pub fn fill_time(&self) -> std::time::Duration {
                std::time::Duration::from_micros(self.bucket.span)
            }
        }

        impl Algorithm for $name {
            type State = u64;

            #[inline]
            fn capacity(&self) -> u64 {
                self.bucket.burst
            }

            #[inline]
            fn decide(&self, tat: &u64, now: Timestamp, cost: u64) -> Decision {
                self.bucket.decide(*tat, now, cost)
            }

            #[inline]
            fn consume(&self, tat: &mut u64, now: Timestamp, cost: u64) -> Grant {
                self.bucket.consume(tat, now, cost)
            }

            fn refund(&self, tat: &mut u64, now: Timestamp, grant: &Grant) {
                self.bucket.refund(tat, now, grant)
            }

            #[inline]
            fn status(&self, tat: &u64, now: Timestamp) -> (u64, u64) {
                self.bucket.status(*tat, now)
            }

            fn expires_at(&self, tat: &u64) -> Timestamp {
                Timestamp::from_micros(*tat)
            }
        }
    };
}

/// A token bucket: holds up to `burst` tokens, refilled continuously at `rate`, starting full.
/// A request of cost `c` takes `c` tokens.
///
/// ```
/// use std::num::NonZeroU64;
/// use floodgate_core::{Algorithm, Rate, Timestamp, TokenBucket};
///
/// let bucket = TokenBucket::try_new("10/s".parse::<Rate>()?, NonZeroU64::new(20).unwrap())?;
/// let mut state = Default::default();
/// let now = Timestamp::from_secs(1_700_000_000);
/// for _ in 0..20 {
///     assert!(bucket.check(&mut state, now, 1)?.0.allowed);
/// }
/// let (denied, _) = bucket.check(&mut state, now, 1)?;
/// assert_eq!(denied.retry_after, Some(std::time::Duration::from_millis(100)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    rate: Rate,
    bucket: Bucket,
}

impl TokenBucket {
    /// A bucket of `burst` tokens refilled at `rate`.
    pub fn try_new(rate: Rate, burst: NonZeroU64) -> Result<Self, BucketError> {
        Ok(TokenBucket { rate, bucket: Bucket::try_new(rate, burst)? })
    }
}

bucket_algorithm!(TokenBucket);

/// The generic cell rate algorithm (leaky bucket as a meter): cells conform when they arrive no
/// earlier than one emission interval (`1 / rate`) after the previous one, with a tolerance of
/// `burst - 1` cells arriving early. `burst = 1` spaces requests evenly; it is the natural default.
///
/// It is the same arithmetic as [`TokenBucket`] — a GCRA with tolerance `burst` admits exactly what a
/// token bucket of capacity `burst` admits — so the two differ only in how they are configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gcra {
    rate: Rate,
    bucket: Bucket,
}

impl Gcra {
    /// Cells at `rate`, tolerating `burst` back to back.
    pub fn try_new(rate: Rate, burst: NonZeroU64) -> Result<Self, BucketError> {
        Ok(Gcra { rate, bucket: Bucket::try_new(rate, burst)? })
    }
}

bucket_algorithm!(Gcra);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::testing::assert_exact_retry;
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000;

    fn at(us: u64) -> Timestamp {
        Timestamp::from_micros(T0 + us)
    }

    fn nz(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    fn bucket(rate: &str, burst: u64) -> TokenBucket {
        TokenBucket::try_new(rate.parse().unwrap(), nz(burst)).unwrap()
    }

    #[test]
    fn starts_full_and_drains() {
        let b = bucket("10/s", 20);
        let mut s = 0;
        for i in 0..20 {
            let (d, _) = b.check(&mut s, at(0), 1).unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, 19 - i);
        }
        let (d, g) = b.check(&mut s, at(0), 1).unwrap();
        assert!(!d.allowed && g.is_none());
        assert_eq!(d.retry_after, Some(std::time::Duration::from_millis(100)));
        assert_eq!(d.reset_after, std::time::Duration::from_secs(2));
    }

    #[test]
    fn retry_after_is_exact_after_partial_refill_and_with_cost() {
        let b = bucket("10/s", 20);
        let mut s = 0;
        b.check(&mut s, at(0), 20).unwrap();
        // 250ms later 2.5 tokens are back; a cost of 5 needs 2.5 more: 250ms.
        let d = b.decide(&s, at(250_000), 5);
        assert_eq!(d.retry_after, Some(std::time::Duration::from_millis(250)));
        assert_exact_retry(&b, &s, at(250_000), 5);
        assert_exact_retry(&b, &s, at(1), 1);
        assert_exact_retry(&b, &s, at(99_999), 20);
    }

    #[test]
    fn cost_above_burst_is_an_error_not_a_denial() {
        let b = bucket("10/s", 20);
        let mut s = 0;
        assert!(b.check(&mut s, at(0), 21).is_err());
        assert!(b.check(&mut s, at(0), 0).is_err());
        assert_eq!(s, 0, "an error consumes nothing");
    }

    #[test]
    fn gcra_with_burst_one_spaces_requests() {
        let g = Gcra::try_new("2/s".parse().unwrap(), nz(1)).unwrap();
        let mut s = 0;
        assert!(g.check(&mut s, at(0), 1).unwrap().0.allowed);
        let (d, _) = g.check(&mut s, at(1), 1).unwrap();
        assert_eq!(d.retry_after, Some(std::time::Duration::from_micros(499_999)));
        assert!(g.check(&mut s, at(500_000), 1).unwrap().0.allowed);
    }

    #[test]
    fn report_goes_into_debt_and_refund_gives_back() {
        let b = bucket("10/s", 20);
        let mut s = 0;
        let (d, grant) = b.report(&mut s, at(0), 50);
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
        // 50 tokens owed: the bucket is full 5s later, one token is back after 3.1s.
        assert!(!b.decide(&s, at(3_000_000), 1).allowed);
        assert_exact_retry(&b, &s, at(0), 1);
        b.refund(&mut s, at(0), &grant);
        assert_eq!(b.status(&s, at(0)), (20, 0));
        assert_eq!(b.expires_at(&s), Timestamp::EPOCH);
    }

    /// A deliberately naive token bucket: fractional tokens as (numerator over interval).
    #[derive(Debug)]
    struct NaiveBucket {
        tokens_x_interval: u128,
        last: u64,
    }

    proptest! {
        #[test]
        fn matches_a_naive_token_counter(
            interval in 1u64..5_000,
            burst in 1u64..40,
            steps in prop::collection::vec((0u64..20_000, 1u64..40), 1..200),
        ) {
            let rate = Rate::try_new(nz(1), std::time::Duration::from_micros(interval)).unwrap();
            let b = TokenBucket::try_new(rate, nz(burst)).unwrap();
            let mut s = 0u64;
            let cap = u128::from(burst) * u128::from(interval);
            let mut naive = NaiveBucket { tokens_x_interval: cap, last: T0 };
            let mut now = T0;
            for (dt, cost) in steps {
                now += dt;
                let cost = cost.min(burst);
                naive.tokens_x_interval =
                    (naive.tokens_x_interval + u128::from(now - naive.last)).min(cap);
                naive.last = now;
                let need = u128::from(cost) * u128::from(interval);
                let naive_allowed = naive.tokens_x_interval >= need;
                let (d, _) = b.check(&mut s, Timestamp::from_micros(now), cost).unwrap();
                prop_assert_eq!(d.allowed, naive_allowed);
                if naive_allowed {
                    naive.tokens_x_interval -= need;
                    prop_assert_eq!(u128::from(d.remaining), naive.tokens_x_interval / u128::from(interval));
                } else {
                    // exact: the naive bucket has the tokens after exactly retry_after
                    let wait = u128::from(d.retry_after.unwrap().as_micros() as u64);
                    prop_assert_eq!(naive.tokens_x_interval + wait, need);
                    assert_exact_retry(&b, &s, Timestamp::from_micros(now), cost);
                }
            }
        }
    }
}
