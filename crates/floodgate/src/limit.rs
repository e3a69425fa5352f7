//! [`Limit`]: one configured algorithm with its parameters.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate_core::{
    Algorithm, Budget, Concurrency, FixedWindow, Gcra, Quota, Rate, SlidingLog, SlidingWindow, Timestamp,
    TokenBucket,
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
    /// See [`Budget`].
    Budget(Budget),
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
            $crate::Limit::Budget($a) => $body,
        }
    };
}
pub(crate) use with_algorithm;

/// Which algorithm a [`Limit`] runs: the one list of algorithm names, as written in configuration.
/// The configuration's algorithm registry, the bench and the docs all read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitKind {
    /// [`FixedWindow`].
    FixedWindow,
    /// [`SlidingWindow`].
    SlidingWindow,
    /// [`SlidingLog`].
    SlidingLog,
    /// [`TokenBucket`].
    TokenBucket,
    /// [`Gcra`].
    Gcra,
    /// [`Concurrency`].
    Concurrency,
    /// [`Quota`].
    Quota,
    /// [`Budget`].
    Budget,
}

impl LimitKind {
    /// Every algorithm, in the order the docs list them.
    pub const ALL: [LimitKind; 8] = [
        LimitKind::FixedWindow,
        LimitKind::SlidingWindow,
        LimitKind::SlidingLog,
        LimitKind::TokenBucket,
        LimitKind::Gcra,
        LimitKind::Concurrency,
        LimitKind::Quota,
        LimitKind::Budget,
    ];

    /// The name as written in configuration: `fixed_window`, `sliding_window`, `sliding_log`,
    /// `token_bucket`, `gcra`, `concurrency`, `quota` or `budget`.
    ///
    /// ```
    /// use floodgate::LimitKind;
    /// assert_eq!(LimitKind::TokenBucket.name(), "token_bucket");
    /// assert_eq!(LimitKind::from_name("gcra"), Some(LimitKind::Gcra));
    /// assert_eq!(LimitKind::from_name("leaky"), None);
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            LimitKind::FixedWindow => "fixed_window",
            LimitKind::SlidingWindow => "sliding_window",
            LimitKind::SlidingLog => "sliding_log",
            LimitKind::TokenBucket => "token_bucket",
            LimitKind::Gcra => "gcra",
            LimitKind::Concurrency => "concurrency",
            LimitKind::Quota => "quota",
            LimitKind::Budget => "budget",
        }
    }

    /// Whether a rule of this algorithm may prefetch (batch leases, see
    /// [`Prefetch`](crate::store::Prefetch)): units taken from the store early must be worth the
    /// same when spent later. True for counts over windows that a lease never outlives
    /// (`fixed_window`, `sliding_window`, `quota`: a lease ends with the window it was taken in)
    /// and for `token_bucket` (tokens taken are tokens gone, and what is unspent is refunded; a
    /// burst may land up to the lease's ttl after the bucket granted it). False where
    /// [`LimitKind::prefetch_refusal`] says why not.
    ///
    /// ```
    /// use floodgate::LimitKind;
    /// assert!(LimitKind::SlidingWindow.prefetches());
    /// assert!(!LimitKind::Gcra.prefetches());
    /// ```
    pub const fn prefetches(self) -> bool {
        self.prefetch_refusal().is_none()
    }

    /// Why a rule of this algorithm may not prefetch; `None` when it may.
    pub const fn prefetch_refusal(self) -> Option<&'static str> {
        match self {
            LimitKind::FixedWindow | LimitKind::SlidingWindow | LimitKind::TokenBucket | LimitKind::Quota => {
                None
            }
            LimitKind::SlidingLog => Some(
                "a sliding log forgets each unit one window after it is taken, so a unit spent later would be \
                 forgotten too early",
            ),
            LimitKind::Gcra => Some(
                "a cell taken early and spent later passes after the bucket has refilled for it, so more than \
                 burst + rate × time could pass in some interval",
            ),
            LimitKind::Concurrency => Some(
                "a concurrency unit is a permit held by one request (its lifetime is `lease`), not a count to \
                 spend later",
            ),
            LimitKind::Budget => {
                Some("a budget's ttl runs from its first use, so units taken early would start it early")
            }
        }
    }

    /// The algorithms that may prefetch, as a sentence lists them: `fixed_window, sliding_window,
    /// token_bucket and quota`.
    pub fn prefetching() -> String {
        let names: Vec<&str> =
            LimitKind::ALL.into_iter().filter(|k| k.prefetches()).map(LimitKind::name).collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// The kind named `name` (exactly as [`LimitKind::name`] writes it).
    pub fn from_name(name: &str) -> Option<LimitKind> {
        LimitKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Limit {
    /// Which algorithm the limit runs.
    pub fn kind(&self) -> LimitKind {
        match self {
            Limit::FixedWindow(_) => LimitKind::FixedWindow,
            Limit::SlidingWindow(_) => LimitKind::SlidingWindow,
            Limit::SlidingLog(_) => LimitKind::SlidingLog,
            Limit::TokenBucket(_) => LimitKind::TokenBucket,
            Limit::Gcra(_) => LimitKind::Gcra,
            Limit::Concurrency(_) => LimitKind::Concurrency,
            Limit::Quota(_) => LimitKind::Quota,
            Limit::Budget(_) => LimitKind::Budget,
        }
    }

    /// The algorithm's name as written in configuration ([`LimitKind::name`]).
    pub fn algorithm_name(&self) -> &'static str {
        self.kind().name()
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
            Limit::Budget(a) => a.ttl(),
            Limit::Quota(a) => {
                let (start, end) = a.calendar().bounds(now);
                end.saturating_since(start)
            }
        }
    }

    /// This limit scaled to one instance's share of it: `ceil(n × factor / instances)` for every
    /// count `n` it has (a window's limit, a bucket's burst and the count of its rate), at least 1,
    /// same algorithm, same window or period. What a [`Fallback`](crate::store::Fallback) decides
    /// with while the store fails. A concurrency limit is returned as it is (it never falls back);
    /// so is a bucket whose scaled rate could not be represented (refilling faster than 1 µs per
    /// token).
    ///
    /// ```
    /// use std::num::NonZeroU64;
    /// use std::time::Duration;
    /// use floodgate::Limit;
    /// use floodgate_core::FixedWindow;
    ///
    /// let limit: Limit = FixedWindow::try_new(NonZeroU64::new(100).unwrap(), Duration::from_secs(60))?.into();
    /// assert_eq!(limit.share(2.0, 3).capacity(), 67); // ceil(100 × 2 / 3)
    /// assert_eq!(limit.share(2.0, 1).capacity(), 200);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn share(&self, factor: f64, instances: u32) -> Limit {
        let scale = |n: u64| -> NonZeroU64 {
            let scaled = (n as f64 * factor / f64::from(instances.max(1))).ceil();
            // `as` saturates: a share above u64::MAX is u64::MAX.
            NonZeroU64::new(scaled as u64).unwrap_or(NonZeroU64::MIN)
        };
        let bucket_rate = |rate: Rate| Rate::try_new(scale(rate.count()), rate.period()).ok();
        let shared = match self {
            Limit::FixedWindow(a) => {
                FixedWindow::try_new(scale(a.capacity()), a.window()).ok().map(Limit::from)
            }
            Limit::SlidingWindow(a) => {
                SlidingWindow::try_new(scale(a.capacity()), a.window()).ok().map(Limit::from)
            }
            Limit::SlidingLog(a) => {
                SlidingLog::try_new(scale(a.capacity()), a.window()).ok().map(Limit::from)
            }
            Limit::TokenBucket(a) => bucket_rate(a.rate())
                .and_then(|rate| TokenBucket::try_new(rate, scale(a.burst())).ok())
                .map(Limit::from),
            Limit::Gcra(a) => bucket_rate(a.rate())
                .and_then(|rate| Gcra::try_new(rate, scale(a.burst())).ok())
                .map(Limit::from),
            Limit::Quota(a) => Some(Quota::new(scale(a.limit()), a.calendar().clone()).into()),
            Limit::Budget(a) => Budget::try_new(scale(a.capacity()), a.ttl()).ok().map(Limit::from),
            Limit::Concurrency(_) => None,
        };
        shared.unwrap_or_else(|| self.clone())
    }

    /// This limit spread over `n` keys (a sharded global limit): `n` limits of the same algorithm
    /// and window whose counts sum to exactly this limit's — `⌊count / n⌋` each, the remainder one
    /// more to the first shards, never rounded up — for every count it has (a window's limit, a
    /// bucket's burst and the count of its rate). `None` when a shard would get nothing (a count
    /// below `n`) or for a concurrency limit (a permit is released by the key it was taken on).
    ///
    /// ```
    /// use std::num::NonZeroU64;
    /// use std::time::Duration;
    /// use floodgate::Limit;
    /// use floodgate_core::FixedWindow;
    ///
    /// let limit: Limit = FixedWindow::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(1))?.into();
    /// let shards = limit.split(4).unwrap();
    /// assert_eq!(shards.iter().map(Limit::capacity).collect::<Vec<_>>(), [3, 3, 2, 2]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn split(&self, n: u16) -> Option<Vec<Limit>> {
        let n64 = u64::from(n.max(1));
        let part = |count: u64, i: u64| NonZeroU64::new(count / n64 + u64::from(i < count % n64));
        (0..n64)
            .map(|i| match self {
                Limit::FixedWindow(a) => {
                    FixedWindow::try_new(part(a.capacity(), i)?, a.window()).ok().map(Limit::from)
                }
                Limit::SlidingWindow(a) => {
                    SlidingWindow::try_new(part(a.capacity(), i)?, a.window()).ok().map(Limit::from)
                }
                Limit::SlidingLog(a) => {
                    SlidingLog::try_new(part(a.capacity(), i)?, a.window()).ok().map(Limit::from)
                }
                Limit::TokenBucket(a) => {
                    let rate = Rate::try_new(part(a.rate().count(), i)?, a.rate().period()).ok()?;
                    TokenBucket::try_new(rate, part(a.burst(), i)?).ok().map(Limit::from)
                }
                Limit::Gcra(a) => {
                    let rate = Rate::try_new(part(a.rate().count(), i)?, a.rate().period()).ok()?;
                    Gcra::try_new(rate, part(a.burst(), i)?).ok().map(Limit::from)
                }
                Limit::Quota(a) => Some(Quota::new(part(a.limit(), i)?, a.calendar().clone()).into()),
                Limit::Budget(a) => Budget::try_new(part(a.capacity(), i)?, a.ttl()).ok().map(Limit::from),
                Limit::Concurrency(_) => None,
            })
            .collect()
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
impl From<Budget> for Limit {
    fn from(a: Budget) -> Self {
        Limit::Budget(a)
    }
}
