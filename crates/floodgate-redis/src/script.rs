//! The Lua scripts, their arguments and their answers: the driver (any number of limits, every
//! algorithm, all-or-nothing) and the single-limit shortcuts of the common one-limit request.

use std::sync::LazyLock;

use floodgate::Limit;
use floodgate::StoreError;
use floodgate::doubles::Inexact;
use floodgate_core::Timestamp;
use redis::{Script, ScriptInvocation};
use smallvec::SmallVec;

/// The script's source: the contract is at the top of `lua/prelude.lua`.
pub(crate) const SOURCE: &str = concat!(
    include_str!("lua/prelude.lua"),
    "\n",
    include_str!("lua/bucket.lua"),
    "\n",
    include_str!("lua/window.lua"),
    "\n",
    include_str!("lua/sliding.lua"),
    "\n",
    include_str!("lua/log.lua"),
    "\n",
    include_str!("lua/lease.lua"),
    "\n",
    include_str!("lua/apply.lua"),
);

/// The script, hashed once.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCE));

/// A token bucket or GCRA alone in its request: `lua/one_prelude.lua`, then the
/// contract at the top of `lua/one_bucket.lua`.
pub(crate) const ONE_BUCKET_SOURCE: &str =
    concat!(include_str!("lua/one_prelude.lua"), include_str!("lua/one_bucket.lua"));
/// A fixed window alone in its request: `lua/one_prelude.lua`, then the
/// contract at the top of `lua/one_window.lua`.
pub(crate) const ONE_WINDOW_SOURCE: &str =
    concat!(include_str!("lua/one_prelude.lua"), include_str!("lua/one_window.lua"));

pub(crate) static ONE_BUCKET: LazyLock<Script> = LazyLock::new(|| Script::new(ONE_BUCKET_SOURCE));
pub(crate) static ONE_WINDOW: LazyLock<Script> = LazyLock::new(|| Script::new(ONE_WINDOW_SOURCE));

/// Values at or above this are not exact in a Lua double: 2^53.
pub(crate) const LUA_EXACT: u64 = floodgate::doubles::EXACT;
/// The single-limit scripts' `not_after` for calls that are never stale (2^53 µs, the year 2255).
const NEVER: u64 = LUA_EXACT;
/// Costs and lengths are clamped (costs) or limited (parameters, see `Limit::exact_in_doubles`) to
/// 2^52, leaving headroom for sums with timestamps.
pub(crate) const LUA_MAX: u64 = floodgate::doubles::HEADROOM;

/// What the script does with the ops (`ARGV[1]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScriptMode {
    Check,
    Peek,
    /// A peek whose request another slot denies: allowed ops report their status.
    PeekDenied,
    /// A check of a request taken as denied — another slot decides it, or this slot is asked again
    /// to consume: nothing is consumed, allowed ops report their status, and the ops that deny by
    /// their count go into their penalty box, as in the request's denial.
    CheckDenied,
    Report,
    /// Give grants back, report the status after.
    Undo,
    /// [`ScriptMode::Report`] made at most once: the call carries its note ([`Once`]).
    ReportOnce,
    /// [`ScriptMode::Undo`] made at most once: the call carries its note ([`Once`]).
    UndoOnce,
}

/// The note of a change made at most once: its key (in the ops' slot) and how long it is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Once<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) keep_ms: u64,
}

impl ScriptMode {
    fn arg(self) -> &'static str {
        match self {
            ScriptMode::Check => "c",
            ScriptMode::Peek => "p",
            ScriptMode::PeekDenied => "d",
            ScriptMode::CheckDenied => "e",
            ScriptMode::Report => "r",
            ScriptMode::Undo => "u",
            ScriptMode::ReportOnce => "R",
            ScriptMode::UndoOnce => "U",
        }
    }

    /// Whether the ops carry their grants (the undo modes).
    fn gives_back(self) -> bool {
        matches!(self, ScriptMode::Undo | ScriptMode::UndoOnce)
    }
}

/// How a call reads time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timing {
    /// The test clock's time (`None`: Redis's `TIME`).
    pub(crate) now: Option<Timestamp>,
    /// Slack added to every expiry, ms (0 on Redis's clock).
    pub(crate) slack_ms: u64,
    /// Past this time on the script's clock the call is stale: it writes nothing and answers
    /// [`Reply::Stale`] (`None`: never).
    pub(crate) not_after: Option<Timestamp>,
}

/// One op as the script takes it.
#[derive(Debug, Clone)]
pub(crate) struct ScriptOp<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) limit: &'a Limit,
    pub(crate) cost: u64,
    pub(crate) enforce: bool,
    /// For [`ScriptMode::Undo`]: the grant's time and lease id.
    pub(crate) grant: Option<(Timestamp, u64)>,
    /// The op's penalty box, if it has one.
    pub(crate) penalty: Option<PenaltyBox<'a>>,
}

/// An op's penalty box ([`Op::block_for`](floodgate::store::Op::block_for)) as the script takes
/// it: the box's key, in the op's slot, and for how long a denial keeps the key in it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PenaltyBox<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) block_for: std::time::Duration,
}

impl PenaltyBox<'_> {
    /// The block in µs: at least 1 (a box, however short, is one), at most [`LUA_MAX`] (142 years,
    /// so that `now` plus it stays exact).
    fn block_us(&self) -> u64 {
        micros(self.block_for).clamp(1, LUA_MAX)
    }
}

/// A limit whose arithmetic the script cannot do exactly (its configuration refuses it at load).
fn out_of_range(limit: &Limit, why: Inexact) -> StoreError {
    StoreError::Backend {
        message: format!(
            "{} limit out of the Redis store's range (its scripts compute in Lua doubles): {why}",
            limit.algorithm_name()
        ),
        transient: false,
        source: Some(Box::new(why)),
    }
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Builds the invocation of `ops` in `mode`, read at `timing`; `estimate` is the time quota periods
/// are computed for. `once` is the note of the modes made at most once (and only of them).
pub(crate) fn invocation<'a>(
    mode: ScriptMode,
    timing: Timing,
    estimate: Timestamp,
    ops: impl Iterator<Item = ScriptOp<'a>>,
    once: Option<Once<'_>>,
) -> Result<ScriptInvocation<'static>, StoreError> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.arg(mode.arg());
    match timing.now {
        Some(t) => inv.arg(t.as_micros()),
        None => inv.arg(""),
    };
    inv.arg(timing.slack_ms);
    // The boxes' keys follow the ops' keys.
    let mut boxes: SmallVec<[&[u8]; 4]> = SmallVec::new();
    for op in ops {
        inv.key(op.key);
        let (algo, p1, p2, p3) = params(op.limit, estimate)?;
        inv.arg(algo).arg(op.cost.min(LUA_MAX)).arg(if op.enforce { "1" } else { "0" }).arg(p1).arg(p2);
        match p3 {
            Some(p3) => inv.arg(p3),
            None => inv.arg(""),
        };
        match op.penalty {
            Some(penalty) => {
                boxes.push(penalty.key);
                inv.arg(penalty.block_us())
            }
            None => inv.arg(0),
        };
        if mode.gives_back() {
            let (at, lease) = op.grant.unwrap_or_default();
            // A quota's grant by the bounds of its period (the script has no calendar): the end
            // in place of the time, the start in place of the lease id.
            let (at, extra) = match op.limit {
                Limit::Quota(q) => {
                    let (start, end) = q.calendar().bounds(at);
                    (end.as_micros().min(LUA_EXACT), start.as_micros())
                }
                _ => (at.as_micros(), lease),
            };
            inv.arg(at).arg(extra);
        }
    }
    for key in boxes {
        inv.key(key);
    }
    // After the ops, so that a call without it keeps the layout of the contract.
    match (mode, once) {
        (ScriptMode::ReportOnce | ScriptMode::UndoOnce, Some(once)) => {
            inv.key(once.key).arg(once.keep_ms.saturating_add(timing.slack_ms).max(1));
        }
        (ScriptMode::ReportOnce | ScriptMode::UndoOnce, None) | (_, Some(_)) => {
            return Err(StoreError::Backend {
                message: format!("script mode {mode:?} called with note {once:?}"),
                transient: false,
                source: None,
            });
        }
        (_, None) => {
            if let Some(t) = timing.not_after {
                inv.arg(t.as_micros());
            }
        }
    }
    Ok(inv)
}

/// The invocation of one op alone in its request by its single-limit script, when its algorithm
/// has one, it has no penalty box and `mode` is a plain check, peek or report (`None`: the driver
/// takes it). The reply is read by [`parse_one`].
pub(crate) fn invocation_one(
    mode: ScriptMode,
    timing: Timing,
    op: &ScriptOp<'_>,
) -> Option<Result<ScriptInvocation<'static>, StoreError>> {
    let mode = match mode {
        ScriptMode::Check | ScriptMode::Peek | ScriptMode::Report => mode.arg(),
        ScriptMode::PeekDenied
        | ScriptMode::CheckDenied
        | ScriptMode::Undo
        | ScriptMode::ReportOnce
        | ScriptMode::UndoOnce => {
            return None;
        }
    };
    if op.penalty.is_some() {
        return None;
    }
    let script: &'static Script = match op.limit {
        Limit::TokenBucket(_) | Limit::Gcra(_) => &ONE_BUCKET,
        Limit::FixedWindow(_) => &ONE_WINDOW,
        _ => return None,
    };
    // The same parameters, and the same range checks, as the driver's.
    let (_, p1, p2, _) = match params(op.limit, Timestamp::default()) {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    let mut inv = script.prepare_invoke();
    inv.key(op.key).arg(mode);
    match op.limit {
        // interval, span = interval × burst (the fill time, below 2^52: checked by `params`)
        Limit::TokenBucket(_) | Limit::Gcra(_) => inv.arg(p1).arg(p1 * p2),
        // limit, window
        _ => inv.arg(p1).arg(p2),
    };
    inv.arg(op.cost.min(LUA_MAX));
    match (timing.now, timing.not_after) {
        (Some(t), not_after) => {
            inv.arg(not_after.map_or(NEVER, Timestamp::as_micros)).arg(t.as_micros()).arg(timing.slack_ms);
        }
        (None, Some(not_after)) => {
            inv.arg(not_after.as_micros());
        }
        (None, None) => {}
    }
    Some(Ok(inv))
}

/// `(algorithm, p1, p2, p3)` of a limit, as the script's contract names them; an error for a limit
/// whose arithmetic is not exact in doubles.
fn params(limit: &Limit, now: Timestamp) -> Result<(&'static str, u64, u64, Option<u64>), StoreError> {
    limit.exact_in_doubles().map_err(|why| out_of_range(limit, why))?;
    let capacity = limit.capacity();
    Ok(match limit {
        Limit::FixedWindow(a) => ("f", capacity, micros(a.window()), None),
        Limit::SlidingLog(a) => ("l", capacity, micros(a.window()), None),
        Limit::Concurrency(a) => ("c", capacity, micros(a.lease()), None),
        Limit::Budget(a) => ("n", capacity, micros(a.ttl()), None),
        Limit::SlidingWindow(a) => ("s", capacity, micros(a.window()), None),
        Limit::TokenBucket(a) => ("b", a.rate().interval_us(), capacity, None),
        Limit::Gcra(a) => ("b", a.rate().interval_us(), capacity, None),
        Limit::Quota(q) => {
            let (start, end) = q.calendar().bounds(now);
            ("q", capacity, start.as_micros(), Some(end.as_micros().min(LUA_EXACT)))
        }
    })
}

/// The script's answer.
#[derive(Debug)]
pub(crate) enum Reply {
    /// The decisions, at Redis's `now`: five numbers per op (see [`Row`]).
    Done { now: Timestamp, rows: Vec<i64> },
    /// A quota op's period does not contain Redis's `now`; nothing was written.
    Retry { now: Timestamp },
    /// Redis's `now` is past the call's `not_after`: its caller has given up; nothing was written.
    Stale { now: Timestamp },
    /// The change, made at most once, was made before; nothing was written.
    Made { now: Timestamp },
}

/// One op's numbers in a reply: allowed, remaining, reset_after µs, retry_after µs, lease id — or
/// [`NOTHING_TAKEN`] in place of the lease id, or, for a quota in a peek, the previous period's
/// count in its place.
pub(crate) type Row = [i64; 5];

/// The lease id of a row whose op consumed nothing in a mode that always consumes (a report on a
/// key in its penalty box): the op has no grant.
pub(crate) const NOTHING_TAKEN: i64 = -1;

pub(crate) fn parse(reply: Vec<i64>, ops: usize) -> Result<Reply, StoreError> {
    let bad = || StoreError::Backend {
        message: format!("unexpected script reply of {} numbers for {ops} ops", reply.len()),
        transient: false,
        source: None,
    };
    match reply.first() {
        Some(code @ -3..=-1) if reply.len() == 2 => {
            let now = reply.get(1).copied().ok_or_else(bad)?;
            let now = Timestamp::from_micros(u64::try_from(now).map_err(|_| bad())?);
            Ok(match code {
                -1 => Reply::Retry { now },
                -2 => Reply::Stale { now },
                _ => Reply::Made { now },
            })
        }
        Some(now) if reply.len() == 1 + 5 * ops => {
            let now = Timestamp::from_micros(u64::try_from(*now).map_err(|_| bad())?);
            let mut rows = reply;
            rows.remove(0);
            Ok(Reply::Done { now, rows })
        }
        _ => Err(bad()),
    }
}

/// The answer of a single-limit script: `{now, remaining, reset_after}` when allowed,
/// `{now, remaining, reset_after, retry_after}` when denied, `{-2, now}` when stale; one row, as
/// [`parse`] gives it.
pub(crate) fn parse_one(mut reply: Vec<i64>) -> Result<Reply, StoreError> {
    let bad = |len: usize| StoreError::Backend {
        message: format!("unexpected single-limit script reply of {len} numbers"),
        transient: false,
        source: None,
    };
    if let [-2, now] = reply[..] {
        let now = u64::try_from(now).map_err(|_| bad(2))?;
        return Ok(Reply::Stale { now: Timestamp::from_micros(now) });
    }
    let (now, remaining, reset, retry) = match reply[..] {
        [now, remaining, reset] => (now, remaining, reset, 0),
        [now, remaining, reset, retry] if retry > 0 => (now, remaining, reset, retry),
        _ => return Err(bad(reply.len())),
    };
    let now = Timestamp::from_micros(u64::try_from(now).map_err(|_| bad(reply.len()))?);
    reply.clear();
    reply.extend_from_slice(&[i64::from(retry == 0), remaining, reset, retry, 0]);
    Ok(Reply::Done { now, rows: reply })
}

/// Row `i` of `rows`.
pub(crate) fn row(rows: &[i64], i: usize) -> Row {
    let mut r = [0; 5];
    r.copy_from_slice(&rows[5 * i..5 * i + 5]);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(reply: Vec<i64>) -> (Timestamp, Vec<i64>) {
        match parse_one(reply).expect("a valid reply") {
            Reply::Done { now, rows } => (now, rows),
            other => panic!("not a decision: {other:?}"),
        }
    }

    #[test]
    fn a_single_limit_reply_reads_as_one_driver_row() {
        let (now, allowed) = rows(vec![7, 3, 40]);
        assert_eq!(now, Timestamp::from_micros(7));
        assert_eq!(allowed, [1, 3, 40, 0, 0]);
        let (_, denied) = rows(vec![7, 0, 40, 12]);
        assert_eq!(denied, [0, 0, 40, 12, 0]);
        // A denial always waits; a reply of another shape is refused, not misread.
        assert!(parse_one(vec![7, 0, 40, 0]).is_err());
        assert!(parse_one(vec![7, 0]).is_err());
        assert!(parse_one(vec![-1, 0, 40]).is_err());
    }

    #[test]
    fn a_stale_reply_is_told_apart_from_a_decision() {
        let stale = |reply| matches!(reply, Ok(Reply::Stale { now }) if now == Timestamp::from_micros(7));
        assert!(stale(parse_one(vec![-2, 7])));
        assert!(stale(parse(vec![-2, 7], 3)));
        assert!(matches!(parse(vec![-1, 7], 1), Ok(Reply::Retry { .. })));
        assert!(matches!(parse(vec![-3, 7], 2), Ok(Reply::Made { now }) if now == Timestamp::from_micros(7)));
        assert!(parse_one(vec![-2, -7]).is_err());
        assert!(parse(vec![-2], 1).is_err());
    }
}
