//! [`Limit`]: one configured algorithm with its parameters.

use std::time::Duration;

use floodgate_core::{
    Algorithm, Concurrency, FixedWindow, Gcra, Quota, SlidingLog, SlidingWindow, Timestamp, TokenBucket,
};

/// One limit: an algorithm and its parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum Limit {
    /// See [`FixedWindow`].
    FixedWindow(FixedWindow),
    /// See [`SlidingWindow`].
    SlidingWindow(SlidingWindow),
    /// See [`SlidingLog`].
    SlidingLog(SlidingLog),
    /// See [`TokenBucket`].
    TokenBucket(TokenBucket),
    /// See [`Gcra`].
    Gcra(Gcra),
    /// See [`Concurrency`].
    Concurrency(Concurrency),
    /// See [`Quota`].
    Quota(Quota),
}

/// Runs `$body` with `$a` bound to the algorithm inside a [`Limit`].
macro_rules! with_algorithm {
    ($limit:expr, $a:ident => $body:expr) => {
        match $limit {
            $crate::Limit::FixedWindow($a) => $body,
            $crate::Limit::SlidingWindow($a) => $body,
            $crate::Limit::SlidingLog($a) => $body,
            $crate::Limit::TokenBucket($a) => $body,
            $crate::Limit::Gcra($a) => $body,
            $crate::Limit::Concurrency($a) => $body,
            $crate::Limit::Quota($a) => $body,
        }
    };
}
pub(crate) use with_algorithm;

impl Limit {
    /// The algorithm's name as written in configuration: `fixed_window`, `sliding_window`,
    /// `sliding_log`, `token_bucket`, `gcra`, `concurrency` or `quota`.
    pub fn algorithm_name(&self) -> &'static str {
        match self {
            Limit::FixedWindow(_) => "fixed_window",
            Limit::SlidingWindow(_) => "sliding_window",
            Limit::SlidingLog(_) => "sliding_log",
            Limit::TokenBucket(_) => "token_bucket",
            Limit::Gcra(_) => "gcra",
            Limit::Concurrency(_) => "concurrency",
            Limit::Quota(_) => "quota",
        }
    }

    /// The most one request may cost; more can never be allowed.
    pub fn capacity(&self) -> u64 {
        with_algorithm!(self, a => a.capacity())
    }

    /// The window advertised in the `RateLimit-Policy` header (`w=`): the window of window
    /// algorithms, the time to refill a bucket completely, the current calendar period of a quota,
    /// the lease of a concurrency limit.
    pub fn policy_window(&self, now: Timestamp) -> Duration {
        match self {
            Limit::FixedWindow(a) => a.window(),
            Limit::SlidingWindow(a) => a.window(),
            Limit::SlidingLog(a) => a.window(),
            Limit::TokenBucket(a) => a.fill_time(),
            Limit::Gcra(a) => a.fill_time(),
            Limit::Concurrency(a) => a.lease(),
            Limit::Quota(a) => {
                let (start, end) = a.calendar().bounds(now);
                end.saturating_since(start)
            }
        }
    }

    /// Whether admitted requests hold a permit that must be released ([`Limit::Concurrency`]).
    pub fn holds_permits(&self) -> bool {
        matches!(self, Limit::Concurrency(_))
    }
}

impl From<FixedWindow> for Limit {
    fn from(a: FixedWindow) -> Self {
        Limit::FixedWindow(a)
    }
}
impl From<SlidingWindow> for Limit {
    fn from(a: SlidingWindow) -> Self {
        Limit::SlidingWindow(a)
    }
}
impl From<SlidingLog> for Limit {
    fn from(a: SlidingLog) -> Self {
        Limit::SlidingLog(a)
    }
}
impl From<TokenBucket> for Limit {
    fn from(a: TokenBucket) -> Self {
        Limit::TokenBucket(a)
    }
}
impl From<Gcra> for Limit {
    fn from(a: Gcra) -> Self {
        Limit::Gcra(a)
    }
}
impl From<Concurrency> for Limit {
    fn from(a: Concurrency) -> Self {
        Limit::Concurrency(a)
    }
}
impl From<Quota> for Limit {
    fn from(a: Quota) -> Self {
        Limit::Quota(a)
    }
}
