//! [`ServeClock`]: the clock a server's store reads.

use floodgate::core::{Clock, ManualClock, SystemClock, Timestamp};

/// The clock a server's store reads: the process clock, or — with `floodgate serve
/// --manual-clock` — one that moves only when the admin API moves it (`POST /admin/clock`), so
/// that a test drives a real server through windows, blocks and expiries deterministically, on
/// the same clock as a reference it compares the server with. The manual clock is for the memory
/// store only (Redis keeps its own time).
#[derive(Debug, Clone)]
pub enum ServeClock {
    /// The process clock.
    System(SystemClock),
    /// A clock moved by the admin API.
    Manual(ManualClock),
}

impl ServeClock {
    /// The process clock.
    pub fn system() -> Self {
        ServeClock::System(SystemClock::new())
    }

    /// A manual clock stopped at `start`.
    pub fn manual(start: Timestamp) -> Self {
        ServeClock::Manual(ManualClock::new(start))
    }

    /// The manual clock, if this is one.
    pub fn as_manual(&self) -> Option<&ManualClock> {
        match self {
            ServeClock::Manual(clock) => Some(clock),
            ServeClock::System(_) => None,
        }
    }
}

impl Clock for ServeClock {
    #[inline]
    fn now(&self) -> Timestamp {
        match self {
            ServeClock::System(clock) => clock.now(),
            ServeClock::Manual(clock) => clock.now(),
        }
    }
}
