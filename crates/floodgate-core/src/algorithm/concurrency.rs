//! Concurrency: in-flight permits that expire.

use std::num::NonZeroU64;
use std::time::Duration;

use super::fixed_window::ZeroWindow;
use super::{Algorithm, Grant};
use crate::time::micros;
use crate::{Decision, Timestamp};

/// Up to `limit` in flight at once. Each admitted request holds a permit (a *lease*) until it is
/// released with [`Algorithm::refund`] — or until the lease runs out, so that a holder that crashed
/// or forgot cannot leak capacity forever. Set the lease longer than the slowest legitimate request.
///
/// A denied request's `retry_after` is the time until enough leases *expire*; a release can of course
/// free capacity sooner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Concurrency {
    limit: u64,
    lease: u64,
}

/// The live leases of one key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseState {
    /// `(lease id, expiry µs, cost)` of each permit held.
    pub leases: Vec<(u64, u64, u64)>,
    /// The id of the last lease granted.
    pub next_id: u64,
}

impl Concurrency {
    /// `limit` in flight, each permit valid for at most `lease`.
    pub fn try_new(limit: NonZeroU64, lease: Duration) -> Result<Self, ZeroWindow> {
        let lease = micros(lease);
        if lease == 0 {
            return Err(ZeroWindow);
        }
        Ok(Concurrency { limit: limit.get(), lease })
    }

    /// How long a permit lasts unless released.
    pub fn lease(&self) -> Duration {
        Duration::from_micros(self.lease)
    }

    fn in_flight(state: &LeaseState, now: u64) -> u64 {
        state
            .leases
            .iter()
            .filter(|(_, exp, _)| *exp > now)
            .map(|(_, _, c)| c)
            .fold(0, |a, c| a.saturating_add(*c))
    }

    fn reset_after(state: &LeaseState, now: u64) -> u64 {
        state.leases.iter().map(|(_, exp, _)| exp.saturating_sub(now)).max().unwrap_or(0)
    }
}

impl Algorithm for Concurrency {
    type State = LeaseState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn decide(&self, state: &LeaseState, now: Timestamp, cost: u64) -> Decision {
        let t = now.as_micros();
        let used = Self::in_flight(state, t);
        if let Some(after) = used.checked_add(cost).filter(|u| *u <= self.limit) {
            let reset = Self::reset_after(state, t).max(self.lease);
            return Decision::allow(self.limit, self.limit - after, reset);
        }
        // Leases expire in order of expiry; find the one after which the request fits.
        let mut live: Vec<(u64, u64)> =
            state.leases.iter().filter(|(_, exp, _)| *exp > t).map(|(_, exp, c)| (*exp, *c)).collect();
        live.sort_unstable();
        let mut left = used;
        let mut retry_at = t;
        for (exp, c) in live {
            left -= c;
            retry_at = exp;
            if left + cost <= self.limit {
                break;
            }
        }
        Decision::deny(self.limit, self.limit.saturating_sub(used), Self::reset_after(state, t), retry_at - t)
    }

    fn consume(&self, state: &mut LeaseState, now: Timestamp, cost: u64) -> Grant {
        let t = now.as_micros();
        state.leases.retain(|(_, exp, _)| *exp > t);
        // Ids grow with time, so a permit of a key that was forgotten (swept or reset) and made
        // afresh can never share an id with a new one: a late release frees nothing else.
        let id = state.next_id.saturating_add(1).max(t);
        state.next_id = id;
        state.leases.push((id, t.saturating_add(self.lease), cost));
        Grant { at: now, cost, lease: id }
    }

    /// Releases the permit of `grant`. Releasing twice, or after the lease expired, does nothing.
    fn refund(&self, state: &mut LeaseState, _now: Timestamp, grant: &Grant) {
        state.leases.retain(|(id, _, _)| *id != grant.lease);
    }

    fn status(&self, state: &LeaseState, now: Timestamp) -> (u64, u64) {
        let t = now.as_micros();
        (self.limit.saturating_sub(Self::in_flight(state, t)), Self::reset_after(state, t))
    }

    fn expires_at(&self, state: &LeaseState) -> Timestamp {
        Timestamp::from_micros(state.leases.iter().map(|(_, exp, _)| *exp).max().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::testing::assert_exact_retry;
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000;

    fn at(us: u64) -> Timestamp {
        Timestamp::from_micros(T0 + us)
    }

    fn conc(limit: u64, lease_us: u64) -> Concurrency {
        Concurrency::try_new(NonZeroU64::new(limit).unwrap(), Duration::from_micros(lease_us)).unwrap()
    }

    #[test]
    fn release_frees_a_permit_and_double_release_does_nothing() {
        let c = conc(2, 30_000_000);
        let mut s = LeaseState::default();
        let (_, a) = c.check(&mut s, at(0), 1).unwrap();
        let (_, b) = c.check(&mut s, at(1), 1).unwrap();
        assert!(!c.decide(&s, at(2), 1).allowed);
        c.refund(&mut s, at(3), &a.unwrap());
        c.refund(&mut s, at(3), &a.unwrap());
        assert_eq!(c.status(&s, at(3)).0, 1);
        assert!(c.check(&mut s, at(4), 1).unwrap().0.allowed);
        assert!(!c.decide(&s, at(5), 1).allowed);
        c.refund(&mut s, at(6), &b.unwrap());
        assert_eq!(c.status(&s, at(6)).0, 1);
    }

    #[test]
    fn leaked_permits_expire_at_exactly_the_lease() {
        let c = conc(3, 1_000);
        let mut s = LeaseState::default();
        c.check(&mut s, at(0), 2).unwrap();
        c.check(&mut s, at(100), 1).unwrap();
        let d = c.decide(&s, at(200), 2);
        assert_eq!(d.retry_after, Some(Duration::from_micros(800)));
        assert_exact_retry(&c, &s, at(200), 2);
        assert_exact_retry(&c, &s, at(200), 3);
        assert_exact_retry(&c, &s, at(999), 1);
    }

    proptest! {
        #[test]
        fn in_flight_never_exceeds_the_limit(
            limit in 1u64..10,
            lease in 1u64..500,
            steps in prop::collection::vec((0u64..100, 1u64..10, any::<bool>()), 1..200),
        ) {
            let c = conc(limit, lease);
            let mut s = LeaseState::default();
            let mut held: Vec<(Grant, u64)> = Vec::new(); // (grant, expiry)
            let mut now = T0;
            for (dt, cost, release) in steps {
                now += dt;
                let ts = Timestamp::from_micros(now);
                if release && !held.is_empty() {
                    let (g, _) = held.remove(0);
                    c.refund(&mut s, ts, &g);
                }
                held.retain(|(_, exp)| *exp > now);
                let cost = cost.min(limit);
                let in_flight: u64 = held.iter().map(|(g, _)| g.cost).sum();
                let (d, g) = c.check(&mut s, ts, cost).unwrap();
                prop_assert_eq!(d.allowed, in_flight + cost <= limit);
                match g {
                    Some(g) => held.push((g, now + lease)),
                    None => assert_exact_retry(&c, &s, ts, cost),
                }
            }
        }
    }
}
