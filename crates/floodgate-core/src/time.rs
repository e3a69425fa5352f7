//! Timestamps and clocks.
//!
//! Every algorithm takes `now` as an argument; nothing in Floodgate's algorithm or store code reads the
//! system time directly. Stores get their time from a [`Clock`]: [`SystemClock`] in production,
//! [`ManualClock`] in tests, so that every decision can be replayed deterministically.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A point in time: whole microseconds since the Unix epoch.
///
/// Microseconds keep every timestamp exact in a 64-bit integer (and in a Lua double, for the Redis
/// store) while resolving rates up to a million cells per second.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// A timestamp `micros` microseconds after the Unix epoch.
    pub const fn from_micros(micros: u64) -> Self {
        Timestamp(micros)
    }

    /// A timestamp `millis` milliseconds after the Unix epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis.saturating_mul(1_000))
    }

    /// A timestamp `secs` seconds after the Unix epoch.
    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(1_000_000))
    }

    /// Microseconds since the Unix epoch.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// Whole seconds since the Unix epoch, rounded down.
    pub const fn as_secs(self) -> u64 {
        self.0 / 1_000_000
    }

    /// This timestamp moved `d` later, saturating at the end of time.
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(micros(d)))
    }

    /// This timestamp moved `d` earlier, saturating at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(micros(d)))
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

/// `d` in whole microseconds, saturating (sub-microsecond parts are dropped).
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A source of the current time.
///
/// Implementations must be monotonic: `now` never goes backwards.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// The process clock: wall-clock time read once at construction, advanced by the monotonic clock.
///
/// It never jumps when the system time is adjusted, yet its timestamps line up with the Unix epoch, so
/// fixed windows start on the minute and quotas on local midnight.
#[derive(Debug, Clone)]
pub struct SystemClock {
    base: Timestamp,
    started: Instant,
}

impl SystemClock {
    /// A clock anchored at the current wall-clock time.
    #[allow(clippy::disallowed_methods)] // the one place that reads the system clocks
    pub fn new() -> Self {
        let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        SystemClock { base: Timestamp(micros(since_epoch)), started: Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        self.base.saturating_add(self.started.elapsed())
    }
}

/// A clock that moves only when told to; for tests and simulations.
///
/// Cloning shares the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock { now: Arc::new(AtomicU64::new(start.as_micros())) }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now.fetch_add(micros(d), Ordering::SeqCst);
    }

    /// Sets the clock to `t`. Going backwards is refused, as no real clock does it.
    ///
    /// # Panics
    /// When `t` is earlier than the current time.
    pub fn set(&self, t: Timestamp) {
        let prev = self.now.swap(t.as_micros(), Ordering::SeqCst);
        assert!(prev <= t.as_micros(), "ManualClock::set would move time backwards");
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_anchored_to_the_unix_epoch_and_monotonic() {
        let clock = SystemClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        // 2020-01-01 < now < 2100-01-01
        assert!(a.as_secs() > 1_577_836_800 && a.as_secs() < 4_102_444_800);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp::from_secs(10));
        let shared = clock.clone();
        assert_eq!(clock.now(), Timestamp::from_secs(10));
        shared.advance(Duration::from_millis(1500));
        assert_eq!(clock.now(), Timestamp::from_micros(11_500_000));
    }
}
