//! Caller-stated limits: a rule that takes its limit, its window or its block duration from the
//! request, within bounds the operator sets ([`Rule::statable`](crate::Rule::statable)).
//!
//! A library or a proxy that already knows each route's limit (NestJS's `@Throttle()`, Envoy's
//! per-route `RateLimitDescriptor.limit`) states it with each call ([`Hit::stating`](crate::Hit::stating))
//! against one template rule, instead of repeating it in one server rule per route. What makes
//! that safe:
//!
//! - **Bounds.** Each statable value has an upper bound; a value above it, a limit of 0 or a window
//!   of 0 fails the request ([`EngineError::Stated`](crate::EngineError::Stated)), never a silent
//!   default. Each rule takes what it lets requests state and leaves the rest to the request's
//!   other rules; a value that no rule applying to the request takes fails it too
//!   ([`EngineError::Unclaimed`](crate::EngineError::Unclaimed)).
//! - **A counter per statement.** A request that states a (limit, window) other than the rule's
//!   own counts on a key that ends with them: callers that state different limits for one key
//!   never share a counter they disagree on, and a caller stating the rule's own values shares the
//!   rule's own counter. The block duration is not part of the key.
//! - **Defaults.** What a request does not state is the rule's own (its limit, window and
//!   [`block_for`](crate::Rule::block_for)), unless the rule requires it to be stated.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate_core::{
    Algorithm, Budget, Concurrency, FixedWindow, Gcra, Quota, Rate, SlidingLog, SlidingWindow, TokenBucket,
};

use crate::key::push_field;
use crate::{Limit, LimitKind};

/// The field that marks the end of a key with the stated (limit, window) it counts under: it
/// begins with a NUL, which no descriptor name does.
pub const STATED_MARK: &[u8] = b"\0stated";

/// What a request states for the rules that take it: each `None` leaves the rule's own value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Stated {
    /// The limit: a window's count, a bucket's rate count (and a token bucket's burst), a
    /// concurrency limit, a quota's or a budget's count.
    pub limit: Option<u64>,
    /// The window: a window's length, a bucket's rate period, a budget's ttl.
    pub window: Option<Duration>,
    /// How long a key is refused after a denial (0: not at all); see
    /// [`Rule::block_for`](crate::Rule::block_for).
    pub block_for: Option<Duration>,
}

impl Stated {
    /// Whether nothing is stated.
    pub fn is_empty(&self) -> bool {
        self.limit.is_none() && self.window.is_none() && self.block_for.is_none()
    }
}

/// One value a rule lets its callers state: the largest they may, and whether they must.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bound<T> {
    /// The largest value a request may state.
    pub max: T,
    /// Whether a request must state it (the rule has no value of its own); otherwise a request
    /// that states nothing gets the rule's own.
    pub required: bool,
}

/// What a rule lets its callers state, each with its bound (see the [module docs](self)).
///
/// ```
/// use std::num::NonZeroU64;
/// use std::time::Duration;
/// use floodgate::Statable;
///
/// let statable = Statable::new()
///     .limit(NonZeroU64::new(10_000).unwrap())
///     .window(Duration::from_secs(86_400))
///     .block_for(Duration::from_secs(3_600));
/// assert_eq!(statable.limit_bound().map(|b| b.max.get()), Some(10_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Statable {
    pub(crate) limit: Option<Bound<NonZeroU64>>,
    pub(crate) window: Option<Bound<Duration>>,
    pub(crate) block_for: Option<Bound<Duration>>,
}

impl Statable {
    /// Nothing statable yet.
    pub fn new() -> Self {
        Statable::default()
    }

    /// Requests may state the limit, up to `max`; one that does not gets the rule's.
    pub fn limit(mut self, max: NonZeroU64) -> Self {
        self.limit = Some(Bound { max, required: false });
        self
    }

    /// Requests may state the window, up to `max`; one that does not gets the rule's.
    pub fn window(mut self, max: Duration) -> Self {
        self.window = Some(Bound { max, required: false });
        self
    }

    /// Requests may state the block duration, up to `max`; one that does not gets the rule's
    /// ([`Rule::block_for`](crate::Rule::block_for), or none).
    pub fn block_for(mut self, max: Duration) -> Self {
        self.block_for = Some(Bound { max, required: false });
        self
    }

    /// Requests must state the limit (the rule's own is a placeholder).
    pub fn require_limit(mut self) -> Self {
        if let Some(b) = &mut self.limit {
            b.required = true;
        }
        self
    }

    /// Requests must state the window (the rule's own is a placeholder).
    pub fn require_window(mut self) -> Self {
        if let Some(b) = &mut self.window {
            b.required = true;
        }
        self
    }

    /// The bound on a stated limit, if the limit is statable.
    pub fn limit_bound(&self) -> Option<Bound<NonZeroU64>> {
        self.limit
    }

    /// The bound on a stated window, if the window is statable.
    pub fn window_bound(&self) -> Option<Bound<Duration>> {
        self.window
    }

    /// The bound on a stated block duration, if it is statable.
    pub fn block_for_bound(&self) -> Option<Bound<Duration>> {
        self.block_for
    }

    /// Why `kind` cannot take what this states, if it cannot: a concurrency limit and a quota
    /// have a limit but no window.
    pub(crate) fn refusal(&self, kind: LimitKind) -> Option<String> {
        if self.window.is_some() && matches!(kind, LimitKind::Concurrency | LimitKind::Quota) {
            return Some(format!(
                "a {} limit has no window a request could state (only its limit)",
                kind.name()
            ));
        }
        None
    }
}

/// A stated value that is not allowed, as [`EngineError::Stated`](crate::EngineError::Stated)
/// reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatedError {
    /// A value above its bound.
    #[error("the stated {field} {value} is above the rule's bound {max}")]
    AboveBound {
        /// `limit`, `window` or `block_for`.
        field: &'static str,
        /// The value stated, as written in a request (a number or a duration).
        value: String,
        /// The bound.
        max: String,
    },
    /// A limit or window of 0.
    #[error("the stated {field} is 0; it must be at least {least}")]
    Zero {
        /// `limit` or `window`.
        field: &'static str,
        /// The least value allowed.
        least: &'static str,
    },
    /// A value the rule needs, not stated.
    #[error("the rule takes its {field} from the request (at most {max}), and the request states none")]
    Missing {
        /// `limit` or `window`.
        field: &'static str,
        /// The bound.
        max: String,
    },
    /// The stated values make no limit of the rule's algorithm (a rate faster than one per
    /// microsecond, say).
    #[error("the stated limit and window make no {algorithm} limit: {reason}")]
    Unbuildable {
        /// The rule's algorithm.
        algorithm: &'static str,
        /// Why not.
        reason: String,
    },
}

/// A duration as a request writes it: whole milliseconds when it has no finer part.
pub(crate) fn show(d: Duration) -> String {
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}µs", d.as_micros())
    }
}

/// What a rule applies to one request: its limit with what the request stated, the block duration
/// in force, and the (limit, window) that end its key.
pub(crate) struct Applied {
    pub(crate) limit: Option<Limit>,
    pub(crate) block_for: Option<Duration>,
    pub(crate) key: Option<(u64, u64)>,
}

/// Applies `stated` to `limit` (the rule's own, as selected for the request), within `statable`;
/// `block_for` is the rule's own block duration.
pub(crate) fn apply(
    limit: &Limit,
    statable: Option<&Statable>,
    block_for: Option<Duration>,
    stated: Option<&Stated>,
) -> Result<Applied, StatedError> {
    let stated = stated.copied().unwrap_or_default();
    // A rule takes what it lets requests state and leaves the rest (another rule of the request
    // may take it; [`unclaimed`] finds what none does).
    let Some(statable) = statable else { return Ok(Applied { limit: None, block_for, key: None }) };
    let count = match (stated.limit, statable.limit) {
        (Some(0), Some(_)) => return Err(StatedError::Zero { field: "limit", least: "1" }),
        (Some(n), Some(b)) if n > b.max.get() => {
            return Err(StatedError::AboveBound {
                field: "limit",
                value: n.to_string(),
                max: b.max.to_string(),
            });
        }
        (Some(n), Some(_)) => NonZeroU64::new(n),
        (None, Some(b)) if b.required => {
            return Err(StatedError::Missing { field: "limit", max: b.max.to_string() });
        }
        (_, _) => None,
    };
    let window = match (stated.window, statable.window) {
        (Some(w), Some(_)) if w.is_zero() => {
            return Err(StatedError::Zero { field: "window", least: "1ms" });
        }
        (Some(w), Some(b)) if w > b.max => {
            return Err(StatedError::AboveBound { field: "window", value: show(w), max: show(b.max) });
        }
        (Some(w), Some(_)) => Some(w),
        (None, Some(b)) if b.required => {
            return Err(StatedError::Missing { field: "window", max: show(b.max) });
        }
        (_, _) => None,
    };
    let block_for = match (stated.block_for, statable.block_for) {
        (Some(d), Some(b)) if d > b.max => {
            return Err(StatedError::AboveBound { field: "block_for", value: show(d), max: show(b.max) });
        }
        (Some(d), Some(_)) => Some(d).filter(|d| !d.is_zero()),
        (_, _) => block_for,
    };
    let restated = match (count, window) {
        (None, None) => None,
        _ => Some(restate(limit, count, window)?),
    };
    // The rule's own (limit, window) keep the rule's own key; any other gets its own counter.
    let key = restated
        .as_ref()
        .map(|r| (r.capacity_count(), micros(r.stated_window())))
        .filter(|k| *k != (limit.capacity_count(), micros(limit.stated_window())));
    Ok(Applied { limit: restated, block_for, key })
}

/// What `stated` states that `statable` takes: one flag per field (limit, window, block_for).
pub(crate) fn claims(statable: Option<&Statable>) -> [bool; 3] {
    statable.map_or([false; 3], |s| [s.limit.is_some(), s.window.is_some(), s.block_for.is_some()])
}

/// The first field `stated` states that no rule of the request took (`claimed`, as [`claims`]
/// gives them, or-ed over the rules).
pub(crate) fn unclaimed(stated: &Stated, claimed: [bool; 3]) -> Option<&'static str> {
    [
        ("limit", stated.limit.is_some(), claimed[0]),
        ("window", stated.window.is_some(), claimed[1]),
        ("block_for", stated.block_for.is_some(), claimed[2]),
    ]
    .into_iter()
    .find_map(|(field, given, taken)| (given && !taken).then_some(field))
}

/// Ends a key with the (limit, window µs) it counts under: `<count>/<window µs>`, without
/// allocating.
pub(crate) fn push_key(buf: &mut impl Extend<u8>, (count, window_us): (u64, u64)) {
    push_field(buf, STATED_MARK);
    let mut text = [0u8; 41];
    let mut at = text.len();
    for (i, mut n) in [window_us, count].into_iter().enumerate() {
        if i == 1 {
            at -= 1;
            text[at] = b'/';
        }
        loop {
            at -= 1;
            text[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
    }
    push_field(buf, &text[at..]);
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `limit` with `count` and `window` in place of its own where given.
fn restate(limit: &Limit, count: Option<NonZeroU64>, window: Option<Duration>) -> Result<Limit, StatedError> {
    let unbuildable = |reason: String| StatedError::Unbuildable { algorithm: limit.algorithm_name(), reason };
    let n = |own: u64| count.unwrap_or(NonZeroU64::new(own).unwrap_or(NonZeroU64::MIN));
    let rate = |own: Rate| {
        Rate::try_new(n(own.count()), window.unwrap_or(own.period())).map_err(|e| unbuildable(e.to_string()))
    };
    let built = match limit {
        Limit::FixedWindow(a) => {
            FixedWindow::try_new(n(a.capacity()), window.unwrap_or(a.window())).map(Limit::from)
        }
        Limit::SlidingWindow(a) => {
            SlidingWindow::try_new(n(a.capacity()), window.unwrap_or(a.window())).map(Limit::from)
        }
        Limit::SlidingLog(a) => {
            SlidingLog::try_new(n(a.capacity()), window.unwrap_or(a.window())).map(Limit::from)
        }
        Limit::Budget(a) => Budget::try_new(n(a.capacity()), window.unwrap_or(a.ttl())).map(Limit::from),
        Limit::Concurrency(a) => Concurrency::try_new(n(a.capacity()), a.lease()).map(Limit::from),
        Limit::Quota(a) => Ok(Quota::new(n(a.limit()), a.calendar().clone()).into()),
        // A stated limit is the rate's count and, for a token bucket, its burst: a bucket that
        // starts full with the stated count, refilled over the stated window.
        Limit::TokenBucket(a) => {
            let burst = count.unwrap_or(NonZeroU64::new(a.burst()).unwrap_or(NonZeroU64::MIN));
            return TokenBucket::try_new(rate(a.rate())?, burst)
                .map(Limit::from)
                .map_err(|e| unbuildable(e.to_string()));
        }
        Limit::Gcra(a) => {
            let burst = NonZeroU64::new(a.burst()).unwrap_or(NonZeroU64::MIN);
            return Gcra::try_new(rate(a.rate())?, burst)
                .map(Limit::from)
                .map_err(|e| unbuildable(e.to_string()));
        }
    };
    built.map_err(|e| unbuildable(e.to_string()))
}

impl Limit {
    /// The count a request may state: a window's, a bucket's rate count, a concurrency limit's, a
    /// quota's or a budget's.
    pub(crate) fn capacity_count(&self) -> u64 {
        match self {
            Limit::TokenBucket(a) => a.rate().count(),
            Limit::Gcra(a) => a.rate().count(),
            Limit::Quota(a) => a.limit(),
            other => other.capacity(),
        }
    }

    /// The window a request may state (zero where there is none: a concurrency limit, a quota).
    pub(crate) fn stated_window(&self) -> Duration {
        match self {
            Limit::FixedWindow(a) => a.window(),
            Limit::SlidingWindow(a) => a.window(),
            Limit::SlidingLog(a) => a.window(),
            Limit::TokenBucket(a) => a.rate().period(),
            Limit::Gcra(a) => a.rate().period(),
            Limit::Budget(a) => a.ttl(),
            Limit::Concurrency(_) | Limit::Quota(_) => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(n: u64, secs: u64) -> Limit {
        FixedWindow::try_new(NonZeroU64::new(n).unwrap(), Duration::from_secs(secs)).unwrap().into()
    }

    fn statable() -> Statable {
        Statable::new()
            .limit(NonZeroU64::new(100).unwrap())
            .window(Duration::from_secs(3600))
            .block_for(Duration::from_secs(600))
    }

    #[test]
    fn a_stated_limit_and_window_replace_the_rules_and_end_the_key() {
        let s = Stated { limit: Some(7), window: Some(Duration::from_secs(30)), block_for: None };
        let applied = apply(&window(10, 60), Some(&statable()), None, Some(&s)).unwrap();
        assert_eq!(applied.limit, Some(window(7, 30)));
        assert_eq!(applied.key, Some((7, 30_000_000)));
        // Nothing stated, or the rule's own stated: the rule's own key.
        let own = apply(&window(10, 60), Some(&statable()), None, None).unwrap();
        assert_eq!((own.limit, own.key), (None, None));
        let same = Stated { limit: Some(10), window: Some(Duration::from_secs(60)), block_for: None };
        assert_eq!(apply(&window(10, 60), Some(&statable()), None, Some(&same)).unwrap().key, None);
    }

    #[test]
    fn bad_statements_name_the_field_and_the_bound() {
        let limit = window(10, 60);
        let err = |s: Stated| apply(&limit, Some(&statable()), None, Some(&s)).err().map(|e| e.to_string());
        assert_eq!(
            err(Stated { limit: Some(101), ..Stated::default() }).as_deref(),
            Some("the stated limit 101 is above the rule's bound 100")
        );
        assert_eq!(
            err(Stated { limit: Some(0), ..Stated::default() }).as_deref(),
            Some("the stated limit is 0; it must be at least 1")
        );
        assert_eq!(
            err(Stated { window: Some(Duration::from_secs(7200)), ..Stated::default() }).as_deref(),
            Some("the stated window 7200000ms is above the rule's bound 3600000ms")
        );
        assert_eq!(
            err(Stated { block_for: Some(Duration::from_secs(601)), ..Stated::default() }).as_deref(),
            Some("the stated block_for 601000ms is above the rule's bound 600000ms")
        );
        let five = Stated { limit: Some(5), ..Stated::default() };
        assert!(
            apply(&limit, None, None, Some(&five)).is_ok_and(|a| a.limit.is_none()),
            "left to other rules"
        );
        assert_eq!(unclaimed(&five, claims(None)), Some("limit"));
        assert_eq!(unclaimed(&five, claims(Some(&statable()))), None);
        let required = statable().require_limit();
        assert_eq!(
            apply(&limit, Some(&required), None, None).err(),
            Some(StatedError::Missing { field: "limit", max: "100".into() })
        );
    }

    #[test]
    fn the_key_ends_with_the_mark_then_count_slash_window() {
        let mut buf = Vec::new();
        push_key(&mut buf, (7, 30_000_000));
        assert_eq!(buf, b"7:\0stated10:7/30000000");
    }

    #[test]
    fn a_stated_block_of_zero_is_none_and_an_unstated_one_is_the_rules() {
        let rule_block = Some(Duration::from_secs(5));
        let zero = Stated { block_for: Some(Duration::ZERO), ..Stated::default() };
        assert_eq!(
            apply(&window(10, 60), Some(&statable()), rule_block, Some(&zero)).unwrap().block_for,
            None
        );
        assert_eq!(
            apply(&window(10, 60), Some(&statable()), rule_block, None).unwrap().block_for,
            rule_block
        );
    }

    #[test]
    fn every_algorithm_with_a_limit_and_window_can_be_restated() {
        let n = NonZeroU64::new(4).unwrap();
        let w = Duration::from_secs(2);
        let rate = Rate::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(1)).unwrap();
        let limits: [Limit; 6] = [
            window(10, 1),
            SlidingWindow::try_new(n, w).unwrap().into(),
            SlidingLog::try_new(n, w).unwrap().into(),
            TokenBucket::try_new(rate, NonZeroU64::new(10).unwrap()).unwrap().into(),
            Gcra::try_new(rate, NonZeroU64::MIN).unwrap().into(),
            Budget::try_new(n, w).unwrap().into(),
        ];
        for limit in limits {
            let restated = restate(&limit, NonZeroU64::new(3), Some(Duration::from_secs(9))).unwrap();
            assert_eq!(restated.kind(), limit.kind());
            assert_eq!((restated.capacity_count(), restated.stated_window()), (3, Duration::from_secs(9)));
        }
        assert!(statable().refusal(LimitKind::Concurrency).is_some());
        assert!(Statable::new().limit(n).refusal(LimitKind::Quota).is_none());
    }
}
