//! The traffic of a `flood` run: the normal users' schedule and the flood, sent at the same time
//! to the same server, and their answers tallied per phase.
//!
//! Open-loop streams are sent by a dispatcher thread each (as `throughput --rate` sends): it
//! sleeps to the next scheduled send, catches up in a batch when late, and spawns the request on
//! the runtime; latency counts from the scheduled time. The normal users' stream sends every
//! request; the flood's, with `--flood-max-in-flight` requests in flight, does not send more:
//! those count as `dropped` errors. The limited users exhaust their limits first
//! ([`limited::exhaust`]), before the run's clock starts; their probes go with the normal users'
//! stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::FloodArgs;
use super::limited::{self, Exhaustion};
use super::plan::Caller;
use super::plan::Plan;
use super::probe::{self, Holder, Snapshot};
use crate::harness::target::{Shape, Target};
use crate::report::progress::{Batch, Live, Progress};
use crate::report::units::{micros, millis, nanos, wall_micros};
use crate::report::{Outcome, Tally};

/// One answered (or dropped) request.
#[derive(Debug, Clone, Copy)]
struct Answer {
    caller: Caller,
    outcome: Outcome,
    latency_ns: u64,
    /// When it was scheduled (open loop) or sent (closed loop), µs from the start of the run.
    at_us: u64,
}

/// Whether a normal user's request was refused: denied by the limiter, or by a rule's
/// `on_store_error: fail_closed` (`on_full: reject` makes a new key a store error).
pub(crate) fn rejected(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Denied | Outcome::Error("store_fail_closed"))
}

/// What the requests scheduled in one phase came to.
#[derive(Debug, Clone)]
pub(crate) struct PhaseTally {
    /// The known users' requests.
    pub(crate) known: Tally,
    /// The newcomers' requests.
    pub(crate) newcomers: Tally,
    /// The flood's (their latency is not reported).
    pub(crate) flood: Tally,
    /// The limited users' probes (their latency is not reported).
    pub(crate) limited: Tally,
    /// Per known user, whether one of their requests was rejected.
    pub(crate) known_rejected: Vec<bool>,
    /// Per newcomer, whether one of their requests was rejected.
    pub(crate) newcomers_rejected: Vec<bool>,
    /// Per limited user, whether one of their probes was admitted: freed.
    pub(crate) limited_admitted: Vec<bool>,
}

impl PhaseTally {
    pub(crate) fn new(plan: &Plan) -> Self {
        PhaseTally {
            known: Tally::default(),
            newcomers: Tally::default(),
            flood: Tally::default(),
            limited: Tally::default(),
            known_rejected: vec![false; plan.known as usize],
            newcomers_rejected: vec![false; plan.newcomers as usize],
            limited_admitted: vec![false; plan.limited as usize],
        }
    }

    fn record(&mut self, a: &Answer) {
        let at_ms = a.at_us / 1000;
        let (tally, rejected_users, user) = match a.caller {
            Caller::Known(i) => (&mut self.known, &mut self.known_rejected, i),
            Caller::Newcomer(i) => (&mut self.newcomers, &mut self.newcomers_rejected, i),
            Caller::Flood(_) => {
                self.flood.record(a.outcome, a.latency_ns, at_ms);
                return;
            }
            Caller::Limited(i) => {
                self.limited.record(a.outcome, a.latency_ns, at_ms);
                if a.outcome == Outcome::Allowed
                    && let Some(freed) = self.limited_admitted.get_mut(i as usize)
                {
                    *freed = true;
                }
                return;
            }
        };
        tally.record(a.outcome, a.latency_ns, at_ms);
        if rejected(a.outcome)
            && let Some(flag) = rejected_users.get_mut(user as usize)
        {
            *flag = true;
        }
    }

    /// The normal users' requests, known and newcomers together.
    pub(crate) fn normal(&self) -> Tally {
        let mut normal = self.known.clone();
        normal.merge(&self.newcomers);
        normal
    }
}

/// What a run came to.
#[derive(Debug)]
pub(crate) struct Run {
    /// `before` and `during`, by scheduled (or, closed loop, actual) send time.
    pub(crate) phases: [PhaseTally; 2],
    /// Taken as the flood starts (it waits for it).
    pub(crate) at_flood: Snapshot,
    /// Taken once every request has been answered.
    pub(crate) after_flood: Snapshot,
    /// When the flood's first request could leave, µs from the start (just after the snapshot).
    pub(crate) flood_started_us: u64,
    /// Known users who had had a decision (allowed or denied) when the flood started.
    pub(crate) known_decided_at_flood: u64,
    /// From the start to the last answer.
    pub(crate) wall: Duration,
    /// The limited users' exhaustion, before the start.
    pub(crate) exhaustion: Exhaustion,
    /// When the limited users' limits reset by the rule itself, µs from the start (`u64::MAX`
    /// without limited users).
    pub(crate) limited_reset_us: u64,
    /// Probes sent at or after that: not in the phases.
    pub(crate) probes_after_reset: Tally,
}

// === the schedules ===

/// The normal users' requests, in order: when each is due (from the start of the run) and who
/// sends it. Each user sends one request every `1 / per_user_rate`: the known users from the
/// start, in turn, and each newcomer from its join time on ([`newcomer_schedule`]).
pub(crate) fn normal_schedule(plan: &Plan) -> impl Iterator<Item = (Duration, Caller)> + Send + 'static {
    let known = plan.known;
    let rate = plan.per_user_rate * known as f64;
    let count = (rate * (plan.before + plan.during).as_secs_f64()).floor() as u64;
    let known_users = (0..count)
        .map(move |i| (Duration::from_secs_f64(i as f64 / rate), Caller::Known((i % known) as u32)));
    in_time_order(known_users, newcomer_schedule(plan))
}

/// The newcomers' requests, in order: newcomer `i` of `n` joins at `before + during × i / n` and
/// sends from then on, one request every `1 / per_user_rate`, until the run ends.
fn newcomer_schedule(plan: &Plan) -> impl Iterator<Item = (Duration, Caller)> + Send + 'static {
    use std::cmp::Reverse;
    let n = plan.newcomers;
    let (before_ns, during_ns) = (nanos(plan.before), nanos(plan.during));
    let end_ns = before_ns + during_ns;
    let period_ns = 1e9 / plan.per_user_rate;
    let join_ns = move |i: u64| before_ns + (u128::from(during_ns) * u128::from(i) / u128::from(n)) as u64;
    // The next request of each newcomer: when, who, and how many it sent before.
    let mut next: std::collections::BinaryHeap<Reverse<(u64, u32, u64)>> =
        (0..n).map(|i| Reverse((join_ns(i), i as u32, 0))).collect();
    std::iter::from_fn(move || {
        let Reverse((at_ns, i, sent)) = next.pop()?;
        if at_ns >= end_ns {
            // The earliest is past the end: so is every other.
            next.clear();
            return None;
        }
        let again = join_ns(u64::from(i)) + ((sent + 1) as f64 * period_ns) as u64;
        next.push(Reverse((again, i, sent + 1)));
        Some((Duration::from_nanos(at_ns), Caller::Newcomer(i)))
    })
}

/// Two schedules merged in time order (`a` first on a tie).
fn in_time_order<T>(
    a: impl Iterator<Item = (Duration, T)>,
    b: impl Iterator<Item = (Duration, T)>,
) -> impl Iterator<Item = (Duration, T)> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if y.0 < x.0 => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

/// The open-loop flood: `rate` a second over the `during` phase, each from a new user id.
fn flood_schedule(plan: &Plan, rate: f64) -> impl Iterator<Item = (Duration, Caller)> + Send + 'static {
    let before = plan.before;
    let count = (rate * plan.during.as_secs_f64()).floor() as u64;
    (0..count).map(move |n| (before + Duration::from_secs_f64(n as f64 / rate), Caller::Flood(n)))
}

// === sending ===

/// What sending a request needs. Cheap to clone.
#[derive(Debug, Clone)]
struct Sending {
    target: Target,
    shape: Arc<Shape>,
    answers: mpsc::UnboundedSender<Answer>,
    /// Requests in flight beyond which the stream drops (`u64::MAX`: never).
    max_in_flight: u64,
}

/// Sends `schedule` from a dispatcher thread; the thread ends once the last request is sent.
fn open_loop(
    sending: Sending,
    started: Instant,
    schedule: impl Iterator<Item = (Duration, Caller)> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let handle = tokio::runtime::Handle::current();
    std::thread::spawn(move || {
        let in_flight = Arc::new(AtomicU64::new(0));
        for (offset, caller) in schedule {
            let scheduled = started + offset;
            let now = Instant::now();
            if scheduled > now + Duration::from_micros(50) {
                std::thread::sleep(scheduled - now);
            }
            let at_us = micros(offset);
            if in_flight.load(Ordering::Relaxed) >= sending.max_in_flight {
                let dropped =
                    Answer { caller, outcome: Outcome::Error(crate::report::DROPPED), latency_ns: 1, at_us };
                let _ = sending.answers.send(dropped);
                continue;
            }
            in_flight.fetch_add(1, Ordering::Relaxed);
            let (sending, in_flight) = (sending.clone(), Arc::clone(&in_flight));
            handle.spawn(async move {
                let outcome = sending.target.check(&sending.shape, &caller.key(), 1).await;
                let latency_ns = nanos(scheduled.elapsed());
                in_flight.fetch_sub(1, Ordering::Relaxed);
                let _ = sending.answers.send(Answer { caller, outcome, latency_ns, at_us });
            });
        }
    })
}

/// The closed-loop flood: `callers` tasks, each sending the next new user id as soon as its last
/// request is answered, until `until` (latency from the send).
fn closed_loop(sending: Sending, started: Instant, until: Instant, callers: u64) {
    let next = Arc::new(AtomicU64::new(0));
    for _ in 0..callers {
        let (sending, next) = (sending.clone(), Arc::clone(&next));
        tokio::spawn(async move {
            loop {
                let sent = Instant::now();
                if sent >= until {
                    break;
                }
                let caller = Caller::Flood(next.fetch_add(1, Ordering::Relaxed));
                let outcome = sending.target.check(&sending.shape, &caller.key(), 1).await;
                let answer = Answer {
                    caller,
                    outcome,
                    latency_ns: nanos(sent.elapsed()),
                    at_us: micros(sent - started),
                };
                let _ = sending.answers.send(answer);
            }
        });
    }
}

/// Exhausts the limited users' limits, then runs the normal users, the limited users' probes and
/// the flood against `target` (the limiter `holder` holds the counters), and takes the snapshots.
pub(crate) async fn run(
    args: &FloodArgs,
    plan: &Plan,
    target: &Target,
    shape: Shape,
    holder: Holder<'_>,
) -> Run {
    let shape = Arc::new(shape);
    let exhaustion = limited::exhaust(plan, target, &shape, args.timeout, args.output.quiet).await;
    let flood = match args.flood_concurrency {
        Some(c) => format!("{c} callers"),
        None => format!("{}/s", args.flood_rate),
    };
    let progress = Progress::new(
        &format!("flood ({}, {flood} from {:?}; normal users)", holder.name(), plan.before),
        millis(plan.before + plan.during),
        args.output.quiet,
    );
    let live = Arc::new(Live::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = mpsc::unbounded_channel::<Answer>();
    let sending = Sending { target: target.clone(), shape, answers: tx, max_in_flight: u64::MAX };
    let (started, started_wall_us) = (Instant::now(), wall_micros());
    let limited_reset_us = if exhaustion.users.is_empty() {
        u64::MAX
    } else {
        plan.reset.at(exhaustion.started_wall_us).saturating_sub(started_wall_us)
    };
    let ticker = progress.tick_timed(started, Arc::clone(&live), Arc::clone(&stop));
    let schedule = in_time_order(normal_schedule(plan), limited::probe_schedule(plan, exhaustion.limited()));
    let normal = open_loop(sending.clone(), started, schedule);
    let sending = Sending { max_in_flight: args.flood_max_in_flight, ..sending };

    // Known users are the ones the store holds when the flood starts: it waits until each has had
    // a decision (at most a request timeout more), then for the first snapshot, so that it sees
    // the store without the flood. An open-loop flood then catches up with its schedule.
    let known_decided = Arc::new(AtomicU64::new(0));
    let flood = {
        let known_decided = Arc::clone(&known_decided);
        async move {
            tokio::time::sleep_until((started + plan.before).into()).await;
            let waited = Instant::now() + args.timeout;
            while known_decided.load(Ordering::Relaxed) < plan.known && Instant::now() < waited {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let known_decided_at_flood = known_decided.load(Ordering::Relaxed);
            let at_flood = probe::take(holder).await;
            let flood_started_us = micros(started.elapsed());
            let dispatcher = match args.flood_concurrency {
                None => Some(open_loop(sending, started, flood_schedule(plan, args.flood_rate))),
                Some(callers) => {
                    closed_loop(sending, started, started + plan.before + plan.during, callers);
                    None
                }
            };
            (at_flood, flood_started_us, known_decided_at_flood, dispatcher)
        }
    };
    let before_us = micros(plan.before);
    let collect = async {
        let mut phases = [PhaseTally::new(plan), PhaseTally::new(plan)];
        let mut probes_after_reset = Tally::default();
        let mut batch = Batch::default();
        let mut decided = vec![false; plan.known as usize];
        // Every request is answered within its timeout; the channel closes when the last one is.
        while let Some(a) = rx.recv().await {
            if matches!(a.caller, Caller::Limited(_)) && a.at_us >= limited_reset_us {
                probes_after_reset.record(a.outcome, a.latency_ns, a.at_us / 1000);
                continue;
            }
            phases[usize::from(a.at_us >= before_us)].record(&a);
            if let (Caller::Known(i), Outcome::Allowed | Outcome::Denied) = (a.caller, a.outcome)
                && let Some(seen) = decided.get_mut(i as usize)
                && !*seen
            {
                *seen = true;
                known_decided.fetch_add(1, Ordering::Relaxed);
            }
            if matches!(a.caller, Caller::Known(_) | Caller::Newcomer(_)) {
                batch.count(a.outcome, &live);
            }
        }
        batch.flush(&live);
        (phases, probes_after_reset)
    };
    let ((at_flood, flood_started_us, known_decided_at_flood, dispatcher), (phases, probes_after_reset)) =
        tokio::join!(flood, collect);
    let wall = started.elapsed();
    // Both have sent everything by now: the channel closed when they ended.
    let _ = normal.join();
    if let Some(dispatcher) = dispatcher {
        let _ = dispatcher.join();
    }
    stop.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    progress.finish();
    let after_flood = probe::take(holder).await;
    Run {
        phases,
        at_flood,
        after_flood,
        flood_started_us,
        known_decided_at_flood,
        wall,
        exhaustion,
        limited_reset_us,
        probes_after_reset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(users: u64, rate: f64, before_s: u64, during_s: u64) -> Plan {
        let (users, rate) = (users.to_string(), rate.to_string());
        let (before, during) = (format!("{before_s}s"), format!("{during_s}s"));
        let args = super::super::test_args(&[
            "--users",
            &users,
            "--normal-rate",
            &rate,
            "--before",
            &before,
            "--during",
            &during,
        ]);
        Plan::new(&args).unwrap()
    }

    #[test]
    fn known_users_send_from_the_start_and_newcomers_join_one_by_one_during_the_flood() {
        // 5 users (2 known, 3 newcomers) at 1 request a second each; 2 s before, 3 s during.
        let p = plan(5, 5.0, 2, 3);
        let schedule: Vec<(u64, Caller)> =
            normal_schedule(&p).map(|(at, c)| (at.as_millis() as u64, c)).collect();
        use Caller::{Known as K, Newcomer as N};
        let before: Vec<(u64, Caller)> = schedule.iter().copied().take_while(|(at, _)| *at < 2000).collect();
        assert_eq!(before, [(0, K(0)), (500, K(1)), (1000, K(0)), (1500, K(1))]);
        // Newcomers join at 2 s, 3 s and 4 s, then send once a second; known users go on.
        assert_eq!(
            schedule[before.len()..],
            [
                (2000, K(0)),
                (2000, N(0)),
                (2500, K(1)),
                (3000, K(0)),
                (3000, N(0)),
                (3000, N(1)),
                (3500, K(1)),
                (4000, K(0)),
                (4000, N(0)),
                (4000, N(1)),
                (4000, N(2)),
                (4500, K(1)),
            ]
        );
        assert!(schedule.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
        for user in [K(0), K(1), N(0)] {
            let sent = schedule.iter().filter(|(_, c)| *c == user).count() as u64;
            assert!(sent <= p.known_requests_each(), "{user:?}: {sent}");
        }
    }

    #[test]
    fn every_newcomer_sends_at_least_once_however_slow_the_users() {
        // One request every 2 s each; 100 newcomers join over 2 s, the last 20 ms before the end.
        let p = plan(200, 100.0, 2, 2);
        let mut first = vec![None; 100];
        for (at, caller) in newcomer_schedule(&p) {
            if let Caller::Newcomer(i) = caller {
                first[i as usize].get_or_insert(at);
            }
        }
        assert!(first.iter().all(|f| f.is_some_and(|at| at >= p.before && at < p.before + p.during)));
        assert_eq!(first[99], Some(Duration::from_millis(3980)));
    }

    #[test]
    fn the_open_loop_flood_sends_a_new_key_each_time_during_the_flood_only() {
        let p = plan(2, 2.0, 1, 2);
        let flood: Vec<(Duration, Caller)> = flood_schedule(&p, 4.0).collect();
        assert_eq!(flood.len(), 8);
        assert_eq!(flood[0], (Duration::from_secs(1), Caller::Flood(0)));
        assert_eq!(flood[7], (Duration::from_millis(2750), Caller::Flood(7)));
        assert_eq!(Caller::Flood(7).key(), "flood-7");
        assert_eq!((Caller::Known(3).key(), Caller::Newcomer(0).key()), ("known-3".into(), "new-0".into()));
    }

    #[test]
    fn a_phase_counts_callers_apart_and_rejections_per_user() {
        let p = plan(4, 4.0, 1, 1);
        let mut phase = PhaseTally::new(&p);
        let answer = |caller, outcome| Answer { caller, outcome, latency_ns: 1_000, at_us: 1_500_000 };
        phase.record(&answer(Caller::Known(0), Outcome::Allowed));
        phase.record(&answer(Caller::Newcomer(1), Outcome::Denied));
        phase.record(&answer(Caller::Newcomer(1), Outcome::Error("store_fail_closed")));
        phase.record(&answer(Caller::Newcomer(0), Outcome::Error("timeout")));
        phase.record(&answer(Caller::Flood(9), Outcome::Denied));
        phase.record(&answer(Caller::Limited(0), Outcome::Denied));
        phase.record(&answer(Caller::Limited(1), Outcome::Allowed));
        phase.record(&answer(Caller::Limited(2), Outcome::Error("timeout")));
        assert_eq!((phase.known.sent(), phase.newcomers.sent(), phase.flood.sent()), (1, 3, 1));
        assert_eq!((phase.limited.sent(), phase.limited.allowed), (3, 1));
        assert_eq!(phase.limited_admitted[..3], [false, true, false]);
        assert_eq!(phase.known_rejected, [false, false]);
        assert_eq!(phase.newcomers_rejected, [false, true]);
        assert_eq!(phase.normal().sent(), 4);
        assert!(!rejected(Outcome::Error("store_fail_open")) && !rejected(Outcome::Error("timeout")));
    }
}
