//! The real engine on a simulated clock: each policy is an [`Engine`] over its own
//! [`MemoryStore`] whose [`ManualClock`] the log's timestamps move. Every algorithm and rule action
//! is the engine's own; what the replay adds is time:
//!
//! - the clock never goes back: a line logged earlier than the one before it (logs are written
//!   when requests end, not in start order) is decided at the latest time seen, and counted;
//! - the store's sweeper runs every `sweep_interval` of log time, as it would in a server;
//! - a `concurrency` permit is held for the request's logged duration (Envoy's `%DURATION%`, a
//!   JSON field), and released at once when the format does not log one (combined);
//! - a request an enforced `delay` rule denies, with a `retry_after` within `max_wait`, is
//!   checked again when that time comes (as the gateway's wait would), until it passes or its
//!   wait runs out.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use floodgate::{Action, Descriptors, Engine, MemoryConfig, MemoryStore, Policy, Verdict};
use floodgate_core::{ManualClock, Timestamp};

use crate::tally::Tally;

/// A future the memory store answers at once, run to completion without a runtime.
fn ready<F: Future>(future: F) -> Option<F::Output> {
    let mut future = pin!(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => Some(out),
        Poll::Pending => None,
    }
}

/// Something due later on a side's clock.
#[derive(Debug)]
enum Due {
    /// Release the concurrency permits a request holds.
    Release(Box<(Descriptors, Verdict)>),
    /// Check a delayed request again; it waits at most until `deadline_us`.
    Retry { descriptors: Box<Descriptors>, deadline_us: i64, seq: u64 },
}

#[derive(Debug)]
struct Pending {
    at_us: i64,
    order: u64,
    due: Due,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at_us, self.order) == (other.at_us, other.order)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_us, self.order).cmp(&(other.at_us, other.order))
    }
}

/// A request's fate on one side, known now or later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Allowed (possibly after a delay).
    Allowed,
    /// Refused.
    Refused,
    /// Held by a delay rule; told later through [`Side::settled`].
    Held,
}

/// One policy being replayed.
#[derive(Debug)]
pub struct Side {
    clock: ManualClock,
    engine: Engine<MemoryStore<ManualClock>>,
    /// The counts.
    pub tally: Tally,
    pending: BinaryHeap<Reverse<Pending>>,
    order: u64,
    sweep_every_us: i64,
    next_sweep_us: i64,
    /// The rules' `delay` waits, by rule position (`None`: not a delay rule).
    max_wait: Vec<Option<Duration>>,
    /// The first second of the log (µs), for per-second series.
    base_us: Option<i64>,
    /// Requests held by a delay that have now settled: `(seq, refused)`.
    settled: Vec<(u64, bool)>,
    /// Every request's fate in order, when asked for (the differential test).
    pub decisions: Option<Vec<bool>>,
}

impl Side {
    /// A side deciding with `policy` on a fresh memory store configured as `memory`.
    pub fn new(policy: Policy, memory: MemoryConfig, collect_times: bool) -> Self {
        let clock = ManualClock::new(Timestamp::from_micros(0));
        let sweep_every_us = i64::try_from(memory.sweep_interval.as_micros()).unwrap_or(i64::MAX).max(1);
        let max_wait = policy
            .rules()
            .map(|r| match r.action_kind() {
                Action::Delay { max_wait } => Some(max_wait),
                _ => None,
            })
            .collect();
        let tally = Tally::new(&policy, collect_times);
        let store = MemoryStore::with_config(memory, clock.clone());
        Side {
            clock,
            engine: Engine::from_shared(Arc::new(policy), store),
            tally,
            pending: BinaryHeap::new(),
            order: 0,
            sweep_every_us,
            next_sweep_us: 0,
            max_wait,
            base_us: None,
            settled: Vec::new(),
            decisions: None,
        }
    }

    /// The policy.
    pub fn policy(&self) -> Arc<Policy> {
        self.engine.policy()
    }

    fn second(&mut self, at_us: i64) -> usize {
        let base = *self.base_us.get_or_insert(at_us - at_us.rem_euclid(1_000_000));
        usize::try_from((at_us - base) / 1_000_000).unwrap_or(0)
    }

    fn set_clock(&mut self, at_us: i64) {
        let at = Timestamp::from_micros(u64::try_from(at_us).unwrap_or(0));
        if at > floodgate_core::Clock::now(&self.clock) {
            self.clock.set(at);
        }
        if at_us >= self.next_sweep_us {
            if self.next_sweep_us != 0 {
                self.engine.store().sweep();
            }
            self.next_sweep_us = at_us.saturating_add(self.sweep_every_us);
        }
    }

    fn schedule(&mut self, at_us: i64, due: Due) {
        self.order += 1;
        self.pending.push(Reverse(Pending { at_us, order: self.order, due }));
    }

    /// Runs what is due up to `until_us` (inclusive), in time order.
    pub fn run_due(&mut self, until_us: i64) {
        while self.pending.peek().is_some_and(|p| p.0.at_us <= until_us) {
            let Some(Reverse(p)) = self.pending.pop() else { break };
            self.set_clock(p.at_us);
            match p.due {
                Due::Release(held) => {
                    let (d, v) = *held;
                    let _ = ready(self.engine.release(&d, &v));
                }
                Due::Retry { descriptors, deadline_us, seq } => {
                    let second = self.second(p.at_us);
                    match self.engine.check_now(&descriptors, 1) {
                        Some(Ok(v)) if v.allowed => {
                            self.tally.delayed_then(&descriptors, second, false);
                            self.settled.push((seq, false));
                            self.hold_permits(p.at_us, None, &descriptors, v);
                        }
                        Some(Ok(v)) => match self.wait(&v, p.at_us, deadline_us) {
                            Some(at) => self.schedule(at, Due::Retry { descriptors, deadline_us, seq }),
                            None => {
                                self.tally.delayed_then(&descriptors, second, true);
                                self.settled.push((seq, true));
                            }
                        },
                        _ => {
                            self.tally.delayed_then(&descriptors, second, true);
                            self.settled.push((seq, true));
                        }
                    }
                }
            }
        }
    }

    /// When a denied request may be checked again: only enforced `delay` rules denied it, and
    /// their `retry_after` ends by `deadline_us`.
    fn wait(&self, v: &Verdict, now_us: i64, deadline_us: i64) -> Option<i64> {
        let mut retry = Duration::ZERO;
        for l in v.limits.iter().filter(|l| l.outcome.denies()) {
            self.max_wait.get(l.index).copied().flatten()?;
            retry = retry.max(l.decision.retry_after?);
        }
        let at = now_us.saturating_add(i64::try_from(retry.as_micros()).unwrap_or(i64::MAX));
        (at <= deadline_us && at > now_us).then_some(at)
    }

    fn hold_permits(&mut self, at_us: i64, duration_us: Option<u64>, d: &Descriptors, v: Verdict) {
        if !v.holds_permits() {
            return;
        }
        match duration_us.filter(|us| *us > 0) {
            Some(us) => {
                let end = at_us.saturating_add(i64::try_from(us).unwrap_or(i64::MAX));
                self.schedule(end, Due::Release(Box::new((d.clone(), v))));
            }
            None => {
                let _ = ready(self.engine.release(d, &v));
            }
        }
    }

    /// Decides request number `seq` with descriptors `d` at `at_us` (never earlier than the last
    /// one), holding its permits for `duration_us`.
    pub fn decide(&mut self, seq: u64, d: &Descriptors, at_us: i64, duration_us: Option<u64>) -> Fate {
        self.run_due(at_us);
        self.set_clock(at_us);
        let second = self.second(at_us);
        let fate = match self.engine.check_now(d, 1) {
            Some(Ok(v)) => {
                let fate = if v.allowed {
                    Fate::Allowed
                } else {
                    let deadline = self.deadline(&v, at_us);
                    match deadline.and_then(|dl| self.wait(&v, at_us, dl).map(|at| (at, dl))) {
                        Some((at, deadline_us)) => {
                            let descriptors = Box::new(d.clone());
                            self.schedule(at, Due::Retry { descriptors, deadline_us, seq });
                            Fate::Held
                        }
                        None => Fate::Refused,
                    }
                };
                let refused = match fate {
                    Fate::Allowed => Some(false),
                    Fate::Refused => Some(true),
                    Fate::Held => None,
                };
                self.tally.record(d, &v, second, at_us, refused);
                if fate == Fate::Allowed {
                    self.hold_permits(at_us, duration_us, d, v);
                }
                fate
            }
            _ => {
                self.tally.errors += 1;
                Fate::Allowed
            }
        };
        if let Some(decisions) = &mut self.decisions {
            decisions.push(fate == Fate::Allowed);
        }
        fate
    }

    /// The end of the longest wait the denying `delay` rules allow, from `at_us`.
    fn deadline(&self, v: &Verdict, at_us: i64) -> Option<i64> {
        let mut wait = None::<Duration>;
        for l in v.limits.iter().filter(|l| l.outcome.denies()) {
            let w = self.max_wait.get(l.index).copied().flatten()?;
            wait = Some(wait.map_or(w, |x| x.min(w)));
        }
        Some(at_us.saturating_add(i64::try_from(wait?.as_micros()).unwrap_or(i64::MAX)))
    }

    /// Held requests that have settled since the last call: `(seq, refused)`.
    pub fn settled(&mut self) -> std::vec::Drain<'_, (u64, bool)> {
        self.settled.drain(..)
    }

    /// Runs everything still pending (the log has ended).
    pub fn finish(&mut self) {
        self.run_due(i64::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;
    const T0: i64 = 1_796_202_000 * S;

    fn side(yaml: &str) -> Side {
        let config = floodgate_config::parse("test.yaml", yaml).expect("policy");
        Side::new(config.policy, MemoryConfig::default(), false)
    }

    fn user(name: &str) -> Descriptors {
        Descriptors::new().with("user", name).with("ip", "192.0.2.1")
    }

    #[test]
    fn a_delay_rule_holds_a_request_until_it_passes_or_its_wait_runs_out() {
        let mut s = side(
            "rules:\n  - name: slow-down\n    key: [user]\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n    action: delay\n    max_wait: 2s\n",
        );
        let d = user("u1");
        let fates: Vec<Fate> = [0, 100_000, 200_000, 300_000]
            .iter()
            .enumerate()
            .map(|(i, dt)| s.decide(i as u64, &d, T0 + dt, None))
            .collect();
        assert_eq!(fates, [Fate::Allowed, Fate::Held, Fate::Held, Fate::Held]);
        s.finish();
        // The second passes at 1 s, the third at 2 s; the fourth (waiting until 2.3 s) would need
        // 3 s: refused.
        let settled: Vec<_> = s.settled().collect();
        assert_eq!(settled, [(1, false), (2, false), (3, true)]);
        assert_eq!((s.tally.requests, s.tally.delayed, s.tally.denied), (4, 2, 1));
        // The rule's limit denied three first checks.
        assert_eq!(s.tally.rules[0].denied, 3);
    }

    #[test]
    fn a_concurrency_permit_is_held_for_the_logged_duration() {
        let mut s = side(
            "rules:\n  - name: one-at-a-time\n    key: [user]\n    algorithm: concurrency\n    limit: 1\n    lease: 30s\n",
        );
        let d = user("u1");
        // 0 → 500 ms; 200 ms overlaps it; 600 ms does not; without a duration, released at once.
        assert_eq!(s.decide(0, &d, T0, Some(500_000)), Fate::Allowed);
        assert_eq!(s.decide(1, &d, T0 + 200_000, Some(100_000)), Fate::Refused);
        assert_eq!(s.decide(2, &d, T0 + 600_000, None), Fate::Allowed);
        assert_eq!(s.decide(3, &d, T0 + 600_000, None), Fate::Allowed);
        assert_eq!((s.tally.requests, s.tally.denied), (4, 1));
    }

    #[test]
    fn a_line_logged_out_of_order_never_moves_the_clock_back() {
        let mut s = side(
            "rules:\n  - name: per-user\n    key: [user]\n    algorithm: sliding_log\n    limit: 2\n    window: 10s\n",
        );
        let d = user("u1");
        assert_eq!(s.decide(0, &d, T0 + 5 * S, None), Fate::Allowed);
        // The caller clamps times; the side itself never sets its clock backwards either.
        assert_eq!(s.decide(1, &d, T0, None), Fate::Allowed);
        assert_eq!(s.decide(2, &d, T0 + 5 * S, None), Fate::Refused);
    }
}
