//! The clock of the breaker and the retry budget: the process clock, or one the caller gives
//! ([`ClientBuilder::clock`](crate::ClientBuilder::clock)) so that tests move time by hand.

use std::fmt;
use std::sync::Arc;

use floodgate_core::{Clock, Timestamp};

/// A clock shared by the breaker and the budget of one client.
#[derive(Clone)]
pub(crate) struct SharedClock(Arc<dyn Clock>);

impl SharedClock {
    pub(crate) fn new(clock: impl Clock) -> SharedClock {
        SharedClock(Arc::new(clock))
    }
}

impl fmt::Debug for SharedClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock")
    }
}

impl Clock for SharedClock {
    fn now(&self) -> Timestamp {
        self.0.now()
    }
}
