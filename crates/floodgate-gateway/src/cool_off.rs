//! An upstream's cool-off: until when its provider asked not to be called (an LLM route's upstream,
//! after a `429` with `retry-after-ms` or `retry-after`), on this instance, on the injectable clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate_core::Clock;

/// The longest an upstream's 429 cools it off, whatever it asks: a provider that asks for more is
/// asked again after this.
pub(crate) const MAX_COOL_OFF: Duration = Duration::from_secs(3600);

/// Until when an upstream's provider asked not to be called, on this instance: set from its 429's
/// wait (`llm::failover::asked_wait`), read before each call. Another instance learns it from its
/// own first 429 (the upstream's quota rule, when it has one, is what the instances share).
pub(crate) struct CoolOff<C> {
    /// µs since the epoch on `clock`; 0: not cooling.
    until: AtomicU64,
    clock: C,
}

impl<C: Clock> CoolOff<C> {
    pub(crate) fn new(clock: C) -> Self {
        CoolOff { until: AtomicU64::new(0), clock }
    }

    /// The time left while cooling off.
    pub(crate) fn left(&self) -> Option<Duration> {
        let until = self.until.load(Ordering::Relaxed);
        let now = self.clock.now().as_micros();
        (until > now).then(|| Duration::from_micros(until - now))
    }

    /// Cools off for `wait` (at most [`MAX_COOL_OFF`]) from now; a later end already set stays.
    pub(crate) fn cool_for(&self, wait: Duration) {
        let wait = u64::try_from(wait.min(MAX_COOL_OFF).as_micros()).unwrap_or(u64::MAX);
        let until = self.clock.now().as_micros().saturating_add(wait);
        self.until.fetch_max(until, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::{ManualClock, Timestamp};

    #[test]
    fn a_cool_off_lasts_the_wait_asked_and_a_later_end_stays() {
        let clock = ManualClock::new(Timestamp::from_secs(100));
        let cool = CoolOff::new(clock.clone());
        assert_eq!(cool.left(), None);
        cool.cool_for(Duration::from_millis(1500));
        assert_eq!(cool.left(), Some(Duration::from_millis(1500)));
        clock.advance(Duration::from_secs(1));
        assert_eq!(cool.left(), Some(Duration::from_millis(500)));
        // A shorter wait asked meanwhile does not end it sooner.
        cool.cool_for(Duration::from_millis(100));
        assert_eq!(cool.left(), Some(Duration::from_millis(500)));
        clock.advance(Duration::from_millis(500));
        assert_eq!(cool.left(), None);
        // At most an hour, whatever is asked.
        cool.cool_for(Duration::from_secs(86_400));
        assert_eq!(cool.left(), Some(MAX_COOL_OFF));
    }
}
