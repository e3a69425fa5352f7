//! The playground: one limit, alone, over a list of request times and costs, on a simulated clock
//! (`POST /v1/simulate`, the dashboard's side-by-side algorithms).
//!
//! The decisions are the real algorithms' (`floodgate-core`, through the same [`Limit`] a rule
//! holds), checked in time order against one state that nothing else sees: no store, no key,
//! nothing counted, deterministic. A request whose cost is above what the limit ever grants is a
//! decision too: refused, with no time at which it would pass. Simulated time is the Unix epoch plus `at_ms`, so that a fixed window or
//! a quota period begins at `at_ms = 0`. A test keeps the decisions equal to the memory store's on
//! a manual clock.

use std::time::Duration;

use floodgate::Limit;
use floodgate_core::{Algorithm, Decision, Timestamp};

/// The most requests one simulation takes.
pub const MAX_REQUESTS: usize = 10_000;
/// The most level samples one simulation gives.
pub const MAX_SAMPLES: usize = 10_000;
/// The latest simulated instant, a request's or a sample's: 10^13 ms, about 317 years after the
/// Unix epoch — late enough for any calendar, early enough that no algorithm's arithmetic
/// overflows with the longest duration a limit may have.
pub const MAX_AT_MS: u64 = 10_000_000_000_000;

/// One simulated request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// When it arrives: milliseconds of simulated time.
    pub at_ms: u64,
    /// Its cost, at least 1 (above the limit's capacity: refused, never to pass).
    pub cost: u64,
}

/// Where to sample the limit's level between requests: at `0, every, 2 × every, …` up to `until`
/// (milliseconds of simulated time) — or, when that is more than [`MAX_SAMPLES`] instants, at
/// the smallest multiple of `every` that gives at most that many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    /// The interval, at least 1 ms.
    pub every_ms: u64,
    /// The last instant sampled at most.
    pub until_ms: u64,
}

/// The limit's level at one instant, with no request at it: what a request of 1 would find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// The instant, milliseconds of simulated time.
    pub at_ms: u64,
    /// Capacity left (tokens in a bucket, the limit less a window's count).
    pub remaining: u64,
}

/// A simulation's result: one decision per request, in order, and the levels sampled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Simulation {
    /// The decisions, one per request, in the requests' order.
    pub decisions: Vec<Decision>,
    /// The levels sampled (empty without [`Sampling`]).
    pub levels: Vec<Level>,
}

/// Why a simulation cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimulateError {
    /// More than [`MAX_REQUESTS`].
    #[error("{0} requests: at most {MAX_REQUESTS} are simulated at once")]
    TooManyRequests(usize),
    /// A request of cost 0.
    #[error("requests[{0}].cost: cost must be at least 1")]
    ZeroCost(usize),
    /// A request later than [`MAX_AT_MS`].
    #[error("requests[{0}].at_ms: at most {MAX_AT_MS}")]
    TooLate(usize),
    /// Sampling until later than [`MAX_AT_MS`].
    #[error("until_ms: at most {MAX_AT_MS}")]
    SampledTooLate,
    /// A sampling interval of 0.
    #[error("sample_ms: must be at least 1")]
    ZeroSampling,
}

/// The simulated instant of `at_ms`.
pub fn instant(at_ms: u64) -> Timestamp {
    Timestamp::from_millis(at_ms)
}

/// Runs `requests` through `limit` from a fresh state, in time order (those at one instant in the
/// order given); samples its level when asked. The decisions are in the order of `requests`.
///
/// ```
/// use std::num::NonZeroU64;
/// use floodgate_core::{Rate, TokenBucket};
/// use floodgate_api::playground::{Request, simulate};
///
/// let bucket = TokenBucket::try_new(Rate::per_second(NonZeroU64::new(2).unwrap()), NonZeroU64::new(8).unwrap())?;
/// let burst = vec![Request { at_ms: 0, cost: 1 }; 10];
/// let run = simulate(&bucket.into(), &burst, None)?;
/// assert_eq!(run.decisions.iter().filter(|d| d.allowed).count(), 8);
/// // The ninth waits for one token: half a second at 2/s.
/// assert_eq!(run.decisions[8].retry_after, Some(std::time::Duration::from_millis(500)));
/// // A cost above the burst never passes: refused, with no time to retry at.
/// let never = simulate(&bucket.into(), &[Request { at_ms: 0, cost: 9 }], None)?;
/// assert!(!never.decisions[0].allowed && never.decisions[0].retry_after.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn simulate(
    limit: &Limit,
    requests: &[Request],
    sampling: Option<Sampling>,
) -> Result<Simulation, SimulateError> {
    simulate_boxed(limit, None, requests, sampling)
}

/// [`simulate`] with a penalty box ([`Rule::block_for`](floodgate::Rule::block_for)): after a
/// denial the limit refuses everything for `block_for` (retry exactly when it ends), nothing
/// counts meanwhile, and then it starts afresh — as the stores do. A cost the limit never grants
/// boxes nothing (the engine refuses it before any store).
///
/// ```
/// use std::num::NonZeroU64;
/// use std::time::Duration;
/// use floodgate_core::FixedWindow;
/// use floodgate_api::playground::{Request, simulate_boxed};
///
/// let window = FixedWindow::try_new(NonZeroU64::new(2).unwrap(), Duration::from_secs(60))?;
/// let tries: Vec<Request> = [0, 0, 0, 100_000, 900_000].map(|at_ms| Request { at_ms, cost: 1 }).to_vec();
/// let run = simulate_boxed(&window.into(), Some(Duration::from_secs(900)), &tries, None)?;
/// let allowed: Vec<bool> = run.decisions.iter().map(|d| d.allowed).collect();
/// assert_eq!(allowed, [true, true, false, false, true]); // boxed for 15 minutes, not the minute
/// assert_eq!(run.decisions[3].retry_after, Some(Duration::from_secs(800)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn simulate_boxed(
    limit: &Limit,
    block_for: Option<Duration>,
    requests: &[Request],
    sampling: Option<Sampling>,
) -> Result<Simulation, SimulateError> {
    let block_for = block_for.filter(|d| !d.is_zero());
    if requests.len() > MAX_REQUESTS {
        return Err(SimulateError::TooManyRequests(requests.len()));
    }
    if let Some(index) = requests.iter().position(|r| r.cost == 0) {
        return Err(SimulateError::ZeroCost(index));
    }
    if let Some(index) = requests.iter().position(|r| r.at_ms > MAX_AT_MS) {
        return Err(SimulateError::TooLate(index));
    }
    let sampling = match sampling {
        Some(Sampling { every_ms: 0, .. }) => return Err(SimulateError::ZeroSampling),
        Some(Sampling { until_ms, .. }) if until_ms > MAX_AT_MS => return Err(SimulateError::SampledTooLate),
        Some(Sampling { every_ms, until_ms }) => {
            // The smallest multiple of the interval that samples at most MAX_SAMPLES instants.
            let every_ms = every_ms.saturating_mul(until_ms / every_ms / MAX_SAMPLES as u64 + 1);
            Some(Sampling { every_ms, until_ms })
        }
        None => None,
    };
    Ok(match limit {
        Limit::FixedWindow(a) => run(a, block_for, requests, sampling),
        Limit::SlidingWindow(a) => run(a, block_for, requests, sampling),
        Limit::SlidingLog(a) => run(a, block_for, requests, sampling),
        Limit::TokenBucket(a) => run(a, block_for, requests, sampling),
        Limit::Gcra(a) => run(a, block_for, requests, sampling),
        Limit::Concurrency(a) => run(a, block_for, requests, sampling),
        Limit::Quota(a) => run(a, block_for, requests, sampling),
        Limit::Budget(a) => run(a, block_for, requests, sampling),
    })
}

/// The simulation proper, on one algorithm's state; costs at least 1, sampling at most
/// [`MAX_SAMPLES`] instants.
fn run<A: Algorithm>(
    algorithm: &A,
    block_for: Option<Duration>,
    requests: &[Request],
    sampling: Option<Sampling>,
) -> Simulation {
    let mut state = A::State::default();
    // The end of the penalty box, while the limit is in it.
    let mut boxed_until: Option<Timestamp> = None;
    let level = |state: &A::State, boxed_until: Option<Timestamp>, at: Timestamp| match boxed_until {
        Some(until) if until > at => 0,
        Some(_) => algorithm.status(&A::State::default(), at).0,
        None => algorithm.status(state, at).0,
    };
    let mut decisions = vec![None; requests.len()];
    let mut levels = Vec::new();
    let mut samples = sampling
        .map(|s| (0..=s.until_ms / s.every_ms).map(move |i| i * s.every_ms))
        .into_iter()
        .flatten()
        .peekable();
    // In time order; a stable sort keeps the requests of one instant in the order given.
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| requests[i].at_ms);
    let capacity = algorithm.capacity();
    for i in order {
        let r = requests[i];
        // Samples strictly before this request see the state the requests before it left.
        while let Some(at_ms) = samples.next_if(|t| *t < r.at_ms) {
            levels.push(Level { at_ms, remaining: level(&state, boxed_until, instant(at_ms)) });
        }
        let now = instant(r.at_ms);
        match boxed_until {
            Some(until) if until > now => {
                let left = until.saturating_since(now);
                decisions[i] = Some(Decision {
                    allowed: false,
                    limit: capacity,
                    remaining: 0,
                    reset_after: left,
                    retry_after: Some(left),
                });
                continue;
            }
            // Out of the box: afresh.
            Some(_) => {
                state = A::State::default();
                boxed_until = None;
            }
            None => {}
        }
        let decision = if r.cost > capacity {
            // Never allowed, however long it waits: refused with no time to retry at.
            let (remaining, reset_after_us) = algorithm.status(&state, now);
            Decision {
                allowed: false,
                limit: capacity,
                remaining,
                reset_after: Duration::from_micros(reset_after_us),
                retry_after: None,
            }
        } else {
            let mut decision = algorithm.decide(&state, now, r.cost);
            if let (false, Some(block_for)) = (decision.allowed, block_for) {
                boxed_until = Some(now.saturating_add(block_for));
                decision.remaining = 0;
                decision.reset_after = block_for;
                decision.retry_after = Some(block_for);
            }
            decision
        };
        if decision.allowed {
            algorithm.consume(&mut state, now, r.cost);
        }
        decisions[i] = Some(decision);
    }
    for at_ms in samples {
        levels.push(Level { at_ms, remaining: level(&state, boxed_until, instant(at_ms)) });
    }
    Simulation { decisions: decisions.into_iter().flatten().collect(), levels }
}

/// `d` in whole milliseconds, rounded up: a retry at `at_ms + retry_after_ms` passes.
pub fn ceil_ms(d: Duration) -> u64 {
    floodgate_http::ceil_ms(d)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use floodgate_core::{FixedWindow, Rate, SlidingLog, SlidingWindow, TokenBucket};

    use super::*;

    fn nz(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    fn at(times: &[u64]) -> Vec<Request> {
        times.iter().map(|&at_ms| Request { at_ms, cost: 1 }).collect()
    }

    fn allowed(run: &Simulation) -> Vec<bool> {
        run.decisions.iter().map(|d| d.allowed).collect()
    }

    #[test]
    fn a_fixed_window_admits_twice_its_limit_across_a_boundary_and_a_sliding_log_does_not() {
        // Five just before the boundary at 10 s, five just after.
        let times: Vec<u64> = (0..5).map(|i| 9_900 + i).chain((0..5).map(|i| 10_000 + i)).collect();
        let fixed: Limit = FixedWindow::try_new(nz(5), Duration::from_secs(10)).unwrap().into();
        let log: Limit = SlidingLog::try_new(nz(5), Duration::from_secs(10)).unwrap().into();
        assert_eq!(allowed(&simulate(&fixed, &at(&times), None).unwrap()), [true; 10]);
        let by_log = simulate(&log, &at(&times), None).unwrap();
        assert_eq!(allowed(&by_log), [[true; 5], [false; 5]].concat());
        // The first of them leaves the log 10 s after it came in.
        assert_eq!(by_log.decisions[5].retry_after, Some(Duration::from_millis(9_900)));
    }

    #[test]
    fn a_bucket_refills_between_requests_and_its_level_is_sampled() {
        let bucket: Limit = TokenBucket::try_new(Rate::per_second(nz(2)), nz(8)).unwrap().into();
        let run = simulate(&bucket, &at(&[0; 8]), Some(Sampling { every_ms: 500, until_ms: 2_000 })).unwrap();
        assert_eq!(allowed(&run), [true; 8]);
        let levels: Vec<(u64, u64)> = run.levels.iter().map(|l| (l.at_ms, l.remaining)).collect();
        // The burst at 0 precedes the sample at 0; then one token every 500 ms.
        assert_eq!(levels, [(0, 0), (500, 1), (1_000, 2), (1_500, 3), (2_000, 4)]);
    }

    #[test]
    fn a_sliding_window_weighs_the_previous_window() {
        let window: Limit = SlidingWindow::try_new(nz(5), Duration::from_secs(5)).unwrap().into();
        // Five at 4 s fill the first window; at 7.5 s half of it still counts: 2 more pass (2.5 → 2).
        let times = [4_000, 4_000, 4_000, 4_000, 4_000, 7_500, 7_500, 7_500];
        let run = simulate(&window, &at(&times), None).unwrap();
        assert_eq!(allowed(&run), [true, true, true, true, true, true, true, false]);
    }

    #[test]
    fn requests_run_in_time_order_and_are_answered_in_the_order_given() {
        let window: Limit = FixedWindow::try_new(nz(2), Duration::from_secs(10)).unwrap().into();
        // The one at 5 ms comes first in time, then the two at 10 ms in the order given.
        let run = simulate(&window, &at(&[10, 5, 10]), None).unwrap();
        assert_eq!(allowed(&run), [true, true, false]);
        let sorted = simulate(&window, &at(&[5, 10, 10]), None).unwrap();
        assert_eq!(run.decisions[1], sorted.decisions[0]);
    }

    #[test]
    fn a_cost_above_the_capacity_is_refused_with_no_time_to_retry_and_takes_nothing() {
        let bucket: Limit = TokenBucket::try_new(Rate::per_second(nz(2)), nz(8)).unwrap().into();
        let costly =
            [Request { at_ms: 0, cost: 1 }, Request { at_ms: 1, cost: 9 }, Request { at_ms: 2, cost: 7 }];
        let run = simulate(&bucket, &costly, None).unwrap();
        assert_eq!(allowed(&run), [true, false, true]);
        assert_eq!(run.decisions[1].retry_after, None);
        assert_eq!((run.decisions[1].limit, run.decisions[1].remaining), (8, 7));
    }

    #[test]
    fn too_dense_a_sampling_is_made_coarser_to_at_most_the_most_samples() {
        let bucket: Limit = TokenBucket::try_new(Rate::per_second(nz(2)), nz(8)).unwrap().into();
        let exact = MAX_SAMPLES as u64 - 1;
        let run = simulate(&bucket, &[], Some(Sampling { every_ms: 1, until_ms: exact })).unwrap();
        assert_eq!((run.levels.len(), run.levels[1].at_ms), (MAX_SAMPLES, 1));
        let run = simulate(&bucket, &[], Some(Sampling { every_ms: 3, until_ms: 100_000 })).unwrap();
        assert_eq!(run.levels[1].at_ms, 12, "every 4 × 3 ms: the first multiple with at most 10 000 samples");
        assert!(run.levels.len() <= MAX_SAMPLES && run.levels.last().unwrap().at_ms > 99_000);
        let run = simulate(&bucket, &[], Some(Sampling { every_ms: u64::MAX, until_ms: MAX_AT_MS })).unwrap();
        assert_eq!(run.levels.len(), 1);
    }

    #[test]
    fn what_cannot_be_simulated_is_named() {
        let bucket: Limit = TokenBucket::try_new(Rate::per_second(nz(2)), nz(8)).unwrap().into();
        let zero = [Request { at_ms: 0, cost: 1 }, Request { at_ms: 0, cost: 0 }];
        assert_eq!(simulate(&bucket, &zero, None).unwrap_err(), SimulateError::ZeroCost(1));
        assert_eq!(SimulateError::ZeroCost(1).to_string(), "requests[1].cost: cost must be at least 1");
        let many = at(&vec![0; MAX_REQUESTS + 1]);
        assert_eq!(
            simulate(&bucket, &many, None).unwrap_err(),
            SimulateError::TooManyRequests(MAX_REQUESTS + 1)
        );
        let zero_every = Some(Sampling { every_ms: 0, until_ms: 10 });
        assert_eq!(simulate(&bucket, &[], zero_every).unwrap_err(), SimulateError::ZeroSampling);
        let late = [Request { at_ms: MAX_AT_MS, cost: 1 }, Request { at_ms: MAX_AT_MS + 1, cost: 1 }];
        assert_eq!(simulate(&bucket, &late, None).unwrap_err(), SimulateError::TooLate(1));
        let late = Some(Sampling { every_ms: 1, until_ms: MAX_AT_MS + 1 });
        assert_eq!(simulate(&bucket, &[], late).unwrap_err(), SimulateError::SampledTooLate);
    }
}
