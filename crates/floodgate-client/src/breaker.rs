//! The client's circuit breaker: Floodgate's own state machine
//! ([`floodgate::breaker::CircuitBreaker`], the store's and the gateway's), around every call the
//! client sends.
//!
//! - **Closed**: calls are sent. A call that gets no answer (refused, cut, TLS refused, past its
//!   deadline) or a 5xx is a failure; any other answer — a verdict, a 4xx problem — a success.
//!   `consecutive_failures` failures in a row open the breaker, as does a failure rate of
//!   `failure_rate` over `window` once `min_calls` were made in it.
//! - **Open** for `open_for`: calls are not sent; checks, peeks and reserves get the fail mode at
//!   once ([`FailureReason::BreakerOpen`]), the other calls [`Error::Unavailable`] with that reason.
//! - **Half-open**: exactly one call is sent as a probe while the others keep failing at once.
//!   Its success closes the breaker, its failure opens it for another `open_for`.
//!
//! Its transitions and refusals are counted in [`Stats`](crate::Stats).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use floodgate::breaker::{Admission, BreakerConfig, BreakerState, CircuitBreaker};

use crate::clock::SharedClock;
use crate::error::{Error, FailureReason};

/// The breaker of one client and the count of its transitions.
#[derive(Debug)]
pub(crate) struct Breaker {
    machine: CircuitBreaker<SharedClock>,
    transitions: Arc<Transitions>,
}

/// How often the breaker moved, by where it went.
#[derive(Debug, Default)]
pub(crate) struct Transitions {
    pub(crate) opened: AtomicU64,
    pub(crate) half_opened: AtomicU64,
    pub(crate) closed: AtomicU64,
}

/// Checks a breaker's settings; an error names the field.
pub(crate) fn validate(config: &BreakerConfig) -> Result<(), Error> {
    let error = |field: &'static str, reason: &str| Err(Error::Config { field, reason: reason.into() });
    if config.consecutive_failures == 0 {
        return error("breaker.consecutive_failures", "must be at least 1");
    }
    if config.min_calls == 0 {
        return error("breaker.min_calls", "must be at least 1");
    }
    if !(config.failure_rate > 0.0 && config.failure_rate <= 1.0) {
        return Err(Error::Config {
            field: "breaker.failure_rate",
            reason: format!(
                "must be above 0 and at most 1 (a share of the calls), not {}",
                config.failure_rate
            ),
        });
    }
    if config.window.is_zero() {
        return error("breaker.window", "must be longer than 0");
    }
    if config.open_for.is_zero() {
        return error("breaker.open_for", "must be longer than 0");
    }
    if config.probe_timeout.is_zero() {
        return error("breaker.probe_timeout", "must be longer than 0");
    }
    Ok(())
}

impl Breaker {
    /// A closed breaker of `config` (validated) on `clock`.
    pub(crate) fn new(config: BreakerConfig, clock: SharedClock) -> Breaker {
        let transitions = Arc::new(Transitions::default());
        let counted = Arc::clone(&transitions);
        let machine = CircuitBreaker::with_on_change(
            config,
            clock,
            Arc::new(move |to| {
                match to {
                    BreakerState::Open => &counted.opened,
                    BreakerState::HalfOpen => &counted.half_opened,
                    BreakerState::Closed => &counted.closed,
                }
                .fetch_add(1, Ordering::Relaxed);
            }),
        );
        Breaker { machine, transitions }
    }

    /// Where it is now.
    pub(crate) fn state(&self) -> BreakerState {
        self.machine.state()
    }

    pub(crate) fn transitions(&self) -> &Transitions {
        &self.transitions
    }

    /// Whether a call may be sent: a pass to report its outcome with, or the error of a call
    /// refused.
    pub(crate) fn pass(&self) -> Result<Pass<'_>, Error> {
        match self.machine.admit() {
            Admission::Call(sent) => Ok(Pass { machine: Some(&self.machine), sent: Some(sent) }),
            Admission::Probe => Ok(Pass { machine: Some(&self.machine), sent: None }),
            Admission::Reject => {
                let message = match self.machine.open_remaining() {
                    Some(left) => format!(
                        "the circuit breaker is open after failed calls; the next call probes in {} ms",
                        left.as_millis()
                    ),
                    None => "the circuit breaker is half-open and another call is its probe".to_owned(),
                };
                Err(Error::Unavailable {
                    reason: FailureReason::BreakerOpen,
                    not_sent: true,
                    message,
                    source: None,
                })
            }
        }
    }
}

/// A call the breaker let through; [`finish`](Pass::finish) reports its outcome. Dropped
/// unfinished (its caller gave up), a probe frees half-open for the next call.
#[derive(Debug)]
pub(crate) struct Pass<'a> {
    machine: Option<&'a CircuitBreaker<SharedClock>>,
    /// When a closed-state call was sent (from its admission); `None` for the probe.
    sent: Option<u64>,
}

impl Pass<'_> {
    /// A pass with no breaker: nothing to report to.
    pub(crate) fn free() -> Pass<'static> {
        Pass { machine: None, sent: None }
    }

    /// Reports whether the call failed.
    pub(crate) fn finish(mut self, failed: bool) {
        if let Some(machine) = self.machine.take() {
            match self.sent {
                Some(sent) => machine.record(failed, sent),
                None => machine.finish_probe(!failed),
            }
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if let (Some(machine), None) = (self.machine, self.sent) {
            machine.abandon_probe();
        }
    }
}

/// Whether a call's outcome tells of a failing service: no answer, or a 5xx.
pub(crate) fn failed<T>(outcome: &Result<(http::response::Parts, T), Error>) -> bool {
    match outcome {
        Ok((parts, _)) => parts.status.is_server_error(),
        Err(Error::Unavailable { .. }) => true,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use floodgate_core::{ManualClock, Timestamp};

    use super::*;

    fn breaker(consecutive_failures: u32) -> (Breaker, ManualClock) {
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let config = BreakerConfig {
            consecutive_failures,
            open_for: Duration::from_secs(5),
            ..BreakerConfig::default()
        };
        validate(&config).unwrap();
        (Breaker::new(config, SharedClock::new(clock.clone())), clock)
    }

    fn answered(status: u16) -> Result<(http::response::Parts, ()), Error> {
        let (parts, ()) = http::Response::builder().status(status).body(()).unwrap().into_parts();
        Ok((parts, ()))
    }

    fn unavailable(reason: FailureReason) -> Result<(http::response::Parts, ()), Error> {
        Err(Error::Unavailable { reason, not_sent: false, message: String::new(), source: None })
    }

    #[test]
    fn no_answer_and_5xx_are_failures_and_any_verdict_or_problem_is_not() {
        assert!(failed(&answered(500)));
        assert!(failed(&answered(503)));
        assert!(failed(&unavailable(FailureReason::Deadline)));
        assert!(failed(&unavailable(FailureReason::Unreachable)));
        assert!(failed(&unavailable(FailureReason::Tls)));
        for status in [200, 404, 409, 422, 429] {
            assert!(!failed(&answered(status)), "{status}");
        }
        assert!(!failed::<()>(&Err(Error::InvalidRequest("cost".into()))));
    }

    #[test]
    fn opens_after_consecutive_failures_then_refuses_until_one_probe_closes_it() {
        let (breaker, clock) = breaker(3);
        for _ in 0..2 {
            breaker.pass().unwrap().finish(true);
        }
        breaker.pass().unwrap().finish(false);
        assert_eq!(breaker.state(), BreakerState::Closed, "a success ends the streak");
        for _ in 0..3 {
            breaker.pass().unwrap().finish(true);
        }
        assert_eq!(breaker.state(), BreakerState::Open);
        let refused = breaker.pass().unwrap_err();
        assert!(matches!(
            refused,
            Error::Unavailable { reason: FailureReason::BreakerOpen, not_sent: true, ref message, .. }
                if message.contains("probes in 5000 ms")
        ));

        clock.advance(Duration::from_secs(5));
        let probe = breaker.pass().unwrap();
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        assert!(breaker.pass().is_err(), "one probe at a time");
        probe.finish(true);
        assert_eq!(breaker.state(), BreakerState::Open, "a failed probe opens it again");
        assert!(breaker.pass().is_err());

        clock.advance(Duration::from_secs(5));
        breaker.pass().unwrap().finish(false);
        assert_eq!(breaker.state(), BreakerState::Closed);
        let t = breaker.transitions();
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!((count(&t.opened), count(&t.half_opened), count(&t.closed)), (2, 2, 1));
    }

    #[test]
    fn a_probe_dropped_unfinished_frees_half_open_for_the_next_call() {
        let (breaker, clock) = breaker(1);
        breaker.pass().unwrap().finish(true);
        clock.advance(Duration::from_secs(5));
        drop(breaker.pass().unwrap());
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        breaker.pass().expect("the next call probes").finish(false);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn zero_thresholds_and_rates_outside_zero_to_one_are_refused_by_name() {
        let cases = [
            (
                BreakerConfig { consecutive_failures: 0, ..BreakerConfig::default() },
                "breaker.consecutive_failures",
            ),
            (BreakerConfig { min_calls: 0, ..BreakerConfig::default() }, "breaker.min_calls"),
            (BreakerConfig { failure_rate: 0.0, ..BreakerConfig::default() }, "breaker.failure_rate"),
            (BreakerConfig { failure_rate: 1.5, ..BreakerConfig::default() }, "breaker.failure_rate"),
            (BreakerConfig { window: Duration::ZERO, ..BreakerConfig::default() }, "breaker.window"),
            (BreakerConfig { open_for: Duration::ZERO, ..BreakerConfig::default() }, "breaker.open_for"),
            (
                BreakerConfig { probe_timeout: Duration::ZERO, ..BreakerConfig::default() },
                "breaker.probe_timeout",
            ),
        ];
        for (config, name) in cases {
            match validate(&config) {
                Err(Error::Config { field, .. }) => assert_eq!(field, name),
                other => panic!("{name}: {other:?}"),
            }
        }
        validate(&BreakerConfig::default()).unwrap();
    }
}
