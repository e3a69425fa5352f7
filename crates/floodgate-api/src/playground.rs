//! The playground: one limit, alone, over a list of request times and costs, on a simulated clock
//! (`POST /v1/simulate`, the dashboard's side-by-side algorithms).
//!
//! The decisions are the real algorithms' (`floodgate-core`, through the same [`Limit`] a rule
//! holds), checked in order against one state that nothing else sees: no store, no key, nothing
//! counted, deterministic. Simulated time is the Unix epoch plus `at_ms`, so that a fixed window or
//! a quota period begins at `at_ms = 0`. A test keeps the decisions equal to the memory store's on
//! a manual clock.

use std::time::Duration;

use floodgate::Limit;
use floodgate_core::{Algorithm, CostError, Decision, Timestamp};

/// The most requests one simulation takes.
pub const MAX_REQUESTS: usize = 10_000;
/// The most level samples one simulation gives.
pub const MAX_SAMPLES: usize = 10_000;

/// One simulated request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// When it arrives: milliseconds of simulated time (never earlier than the one before).
    pub at_ms: u64,
    /// Its cost (at least 1, at most the limit's capacity).
    pub cost: u64,
}

/// Where to sample the limit's level between requests: at `0, every, 2 × every, …` up to `until`
/// (milliseconds of simulated time).
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

/// Why a simulation cannot run: each names the request (its index) at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimulateError {
    /// More than [`MAX_REQUESTS`].
    #[error("{0} requests: at most {MAX_REQUESTS} are simulated at once")]
    TooManyRequests(usize),
    /// A request earlier than the one before it.
    #[error(
        "requests[{index}].at_ms: {at_ms} is earlier than the request before it ({before}): list requests in time order"
    )]
    OutOfOrder {
        /// The request's index.
        index: usize,
        /// Its time.
        at_ms: u64,
        /// The time of the request before it.
        before: u64,
    },
    /// A cost that can never be allowed (0, or above the capacity).
    #[error("requests[{index}].cost: {source}")]
    Cost {
        /// The request's index.
        index: usize,
        /// Why.
        source: CostError,
    },
    /// Sampling too often, or for too long.
    #[error(
        "sample_ms: {0} samples: at most {MAX_SAMPLES} (sample less often, or until an earlier until_ms)"
    )]
    TooManySamples(u64),
    /// A sampling interval of 0.
    #[error("sample_ms: must be at least 1")]
    ZeroSampling,
}

/// The simulated instant of `at_ms`.
pub fn instant(at_ms: u64) -> Timestamp {
    Timestamp::from_millis(at_ms)
}

/// Runs `requests` through `limit` from a fresh state, in order; samples its level when asked.
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
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn simulate(
    limit: &Limit,
    requests: &[Request],
    sampling: Option<Sampling>,
) -> Result<Simulation, SimulateError> {
    if requests.len() > MAX_REQUESTS {
        return Err(SimulateError::TooManyRequests(requests.len()));
    }
    for (index, pair) in requests.windows(2).enumerate() {
        if pair[1].at_ms < pair[0].at_ms {
            return Err(SimulateError::OutOfOrder {
                index: index + 1,
                at_ms: pair[1].at_ms,
                before: pair[0].at_ms,
            });
        }
    }
    let capacity = limit.capacity();
    for (index, r) in requests.iter().enumerate() {
        floodgate_core::validate_cost(r.cost, capacity)
            .map_err(|source| SimulateError::Cost { index, source })?;
    }
    if let Some(s) = sampling {
        if s.every_ms == 0 {
            return Err(SimulateError::ZeroSampling);
        }
        let samples = s.until_ms / s.every_ms + 1;
        if samples > MAX_SAMPLES as u64 {
            return Err(SimulateError::TooManySamples(samples));
        }
    }
    Ok(match limit {
        Limit::FixedWindow(a) => run(a, requests, sampling),
        Limit::SlidingWindow(a) => run(a, requests, sampling),
        Limit::SlidingLog(a) => run(a, requests, sampling),
        Limit::TokenBucket(a) => run(a, requests, sampling),
        Limit::Gcra(a) => run(a, requests, sampling),
        Limit::Concurrency(a) => run(a, requests, sampling),
        Limit::Quota(a) => run(a, requests, sampling),
        Limit::Budget(a) => run(a, requests, sampling),
    })
}

/// The simulation proper, on one algorithm's state; costs already validated.
fn run<A: Algorithm>(algorithm: &A, requests: &[Request], sampling: Option<Sampling>) -> Simulation {
    let mut state = A::State::default();
    let mut decisions = Vec::with_capacity(requests.len());
    let mut levels = Vec::new();
    let mut samples = sampling
        .map(|s| (0..=s.until_ms / s.every_ms).map(move |i| i * s.every_ms))
        .into_iter()
        .flatten()
        .peekable();
    for r in requests {
        // Samples strictly before this request see the state the requests before it left.
        while let Some(at_ms) = samples.next_if(|t| *t < r.at_ms) {
            levels.push(Level { at_ms, remaining: algorithm.status(&state, instant(at_ms)).0 });
        }
        let now = instant(r.at_ms);
        let decision = algorithm.decide(&state, now, r.cost);
        if decision.allowed {
            algorithm.consume(&mut state, now, r.cost);
        }
        decisions.push(decision);
    }
    for at_ms in samples {
        levels.push(Level { at_ms, remaining: algorithm.status(&state, instant(at_ms)).0 });
    }
    Simulation { decisions, levels }
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
    fn bad_requests_are_named_by_their_index() {
        let bucket: Limit = TokenBucket::try_new(Rate::per_second(nz(2)), nz(8)).unwrap().into();
        let unordered = at(&[0, 10, 5]);
        assert_eq!(
            simulate(&bucket, &unordered, None).unwrap_err(),
            SimulateError::OutOfOrder { index: 2, at_ms: 5, before: 10 }
        );
        let costly = [Request { at_ms: 0, cost: 1 }, Request { at_ms: 1, cost: 9 }];
        let error = simulate(&bucket, &costly, None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "requests[1].cost: cost 9 can never be allowed: the limit grants at most 8 at once"
        );
        let zero = [Request { at_ms: 0, cost: 0 }];
        assert!(matches!(simulate(&bucket, &zero, None), Err(SimulateError::Cost { index: 0, .. })));
        let many = at(&vec![0; MAX_REQUESTS + 1]);
        assert_eq!(
            simulate(&bucket, &many, None).unwrap_err(),
            SimulateError::TooManyRequests(MAX_REQUESTS + 1)
        );
        let dense = Some(Sampling { every_ms: 1, until_ms: MAX_SAMPLES as u64 });
        assert!(matches!(simulate(&bucket, &[], dense), Err(SimulateError::TooManySamples(_))));
        let zero_every = Some(Sampling { every_ms: 0, until_ms: 10 });
        assert_eq!(simulate(&bucket, &[], zero_every).unwrap_err(), SimulateError::ZeroSampling);
    }
}
