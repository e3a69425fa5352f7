//! The limited users of a `flood` run: users who spent their whole limit before the run, and
//! then probe it, once every `1 / probe_rate`, through both phases. The limiter must deny every
//! probe until the limit resets by the rule itself; a probe admitted sooner means the limiter lost
//! or reset the user's counter — a **freed** limited user.
//!
//! The exhaustion comes first, before the run's clock starts: each user sends `limit` requests,
//! one at a time, every one of which must be admitted, then one more, which must be denied.
//! Users whose limit did not come out that way are reported, and do not probe.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::plan::Caller;
use super::plan::Plan;
use crate::harness::target::{Shape, Target};
use crate::report::units::{nanos, wall_micros};
use crate::report::{Outcome, Tally};

/// Limited users exhausting their limits at once (each sends one request at a time).
const EXHAUST_CALLERS: u64 = 64;

/// How one limited user's exhaustion came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exhausted {
    /// `limit` admitted, then one denied: the user is limited.
    Yes,
    /// Denied after this many admissions, short of the limit.
    DeniedEarly(u64),
    /// The request past the limit was admitted too.
    AdmittedPastLimit,
    /// A request failed (its error's kind): the user's count is not known.
    Failed(&'static str),
}

/// What the exhaustion came to.
#[derive(Debug)]
pub(crate) struct Exhaustion {
    /// Per limited user.
    pub(crate) users: Vec<Exhausted>,
    /// Every request it sent.
    pub(crate) tally: Tally,
    /// When its first request was sent, µs since the epoch (wall clock).
    pub(crate) started_wall_us: u64,
    /// How long it took.
    pub(crate) took: Duration,
    /// How long it waited before, for a window that holds the run.
    pub(crate) waited: Duration,
}

impl Exhaustion {
    /// No limited users.
    pub(crate) fn none() -> Exhaustion {
        Exhaustion {
            users: Vec::new(),
            tally: Tally::default(),
            started_wall_us: wall_micros(),
            took: Duration::ZERO,
            waited: Duration::ZERO,
        }
    }

    /// The limited users who are limited: the ones who probe.
    pub(crate) fn limited(&self) -> Vec<u32> {
        (0..self.users.len() as u32).filter(|&i| self.users[i as usize] == Exhausted::Yes).collect()
    }

    /// How many came out `which`.
    pub(crate) fn count(&self, which: impl Fn(Exhausted) -> bool) -> u64 {
        self.users.iter().filter(|u| which(**u)).count() as u64
    }
}

/// Exhausts the limits of `plan.limited` users against `target`, waiting first, if the rule's
/// windows are aligned, for a window that holds the whole run (and saying so unless `quiet`).
pub(crate) async fn exhaust(
    plan: &Plan,
    target: &Target,
    shape: &Arc<Shape>,
    timeout: Duration,
    quiet: bool,
) -> Exhaustion {
    if plan.limited == 0 {
        return Exhaustion::none();
    }
    let waited = plan.reset.wait(wall_micros(), plan.limited_span(timeout));
    if !waited.is_zero() && !quiet {
        eprintln!(
            "flood: waiting {:.1} s for the rule's next window, so that the limited users' limits hold \
             through the run",
            waited.as_secs_f64()
        );
    }
    tokio::time::sleep(waited).await;
    let (start, started_wall_us) = (Instant::now(), wall_micros());
    let next = Arc::new(AtomicU64::new(0));
    let mut callers = Vec::new();
    for _ in 0..EXHAUST_CALLERS.min(plan.limited) {
        let (next, target, shape, plan) =
            (Arc::clone(&next), target.clone(), Arc::clone(shape), plan.clone());
        callers.push(tokio::spawn(async move {
            let (mut done, mut tally) = (Vec::new(), Tally::default());
            loop {
                let user = next.fetch_add(1, Ordering::Relaxed);
                if user >= plan.limited {
                    break (done, tally);
                }
                let key = Caller::Limited(user as u32).key();
                let mut send = async || {
                    let sent = Instant::now();
                    let outcome = target.check(&shape, &key, 1).await;
                    tally.record(outcome, nanos(sent.elapsed()), (sent - start).as_millis() as u64);
                    outcome
                };
                let mut verdict = Exhausted::Yes;
                for admitted in 0..plan.limit {
                    match send().await {
                        Outcome::Allowed => continue,
                        Outcome::Denied => verdict = Exhausted::DeniedEarly(admitted),
                        Outcome::Error(kind) => verdict = Exhausted::Failed(kind),
                    }
                    break;
                }
                if verdict == Exhausted::Yes {
                    verdict = match send().await {
                        Outcome::Denied => Exhausted::Yes,
                        Outcome::Allowed => Exhausted::AdmittedPastLimit,
                        Outcome::Error(kind) => Exhausted::Failed(kind),
                    };
                }
                done.push((user as usize, verdict));
            }
        }));
    }
    let mut exhaustion = Exhaustion {
        users: vec![Exhausted::Failed("not_sent"); plan.limited as usize],
        tally: Tally::default(),
        started_wall_us,
        took: Duration::ZERO,
        waited,
    };
    for caller in callers {
        if let Ok((done, tally)) = caller.await {
            for (user, verdict) in done {
                exhaustion.users[user] = verdict;
            }
            exhaustion.tally.merge(&tally);
        }
    }
    exhaustion.took = start.elapsed();
    exhaustion
}

/// The probes of the limited users `users`, in order, over both phases: each user one every
/// `1 / probe_rate`, the users' probes evenly staggered (user `j` of `m` first at
/// `j / (m × probe_rate)`).
pub(crate) fn probe_schedule(
    plan: &Plan,
    users: Vec<u32>,
) -> impl Iterator<Item = (Duration, Caller)> + Send + 'static {
    let m = users.len() as u64;
    let rate = plan.probe_rate * m as f64;
    let end = (plan.before + plan.during).as_secs_f64();
    let count = if m == 0 { 0 } else { (rate * end).ceil() as u64 };
    (0..count)
        .map(move |n| (n as f64 / rate, Caller::Limited(users[(n % m) as usize])))
        .take_while(move |(at, _)| *at < end)
        .map(|(at, caller)| (Duration::from_secs_f64(at), caller))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::flood::plan::Reset;

    fn plan(limited: u64, probe_rate: f64) -> Plan {
        Plan {
            known: 1,
            newcomers: 1,
            per_user_rate: 1.0,
            before: Duration::from_secs(1),
            during: Duration::from_secs(2),
            limited,
            probe_rate,
            limit: 3,
            reset: Reset::After(Duration::from_secs(60)),
        }
    }

    #[test]
    fn each_limited_user_probes_at_its_rate_staggered_over_both_phases() {
        let probes: Vec<(u64, Caller)> =
            probe_schedule(&plan(2, 2.0), vec![0, 5]).map(|(at, c)| (at.as_millis() as u64, c)).collect();
        use Caller::Limited as L;
        assert_eq!(
            probes,
            [
                (0, L(0)),
                (250, L(5)),
                (500, L(0)),
                (750, L(5)),
                (1000, L(0)),
                (1250, L(5)),
                (1500, L(0)),
                (1750, L(5)),
                (2000, L(0)),
                (2250, L(5)),
                (2500, L(0)),
                (2750, L(5)),
            ]
        );
        assert_eq!(probe_schedule(&plan(2, 2.0), Vec::new()).count(), 0);
        assert_eq!(Caller::Limited(5).key(), "limited-5");
    }

    #[test]
    fn only_the_users_whose_limit_came_out_exhausted_probe() {
        let mut exhaustion = Exhaustion::none();
        exhaustion.users = vec![
            Exhausted::Yes,
            Exhausted::DeniedEarly(2),
            Exhausted::Yes,
            Exhausted::AdmittedPastLimit,
            Exhausted::Failed("timeout"),
        ];
        assert_eq!(exhaustion.limited(), [0, 2]);
        assert_eq!(exhaustion.count(|u| matches!(u, Exhausted::Failed(_))), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_exhaustion_spends_each_limit_and_checks_the_denial_past_it() {
        let yaml = "store: { kind: memory }\nrules:\n  - name: r\n    key: [user]\n    algorithm: fixed_window\n    \
                    limit: 3\n    window: 1h\n";
        let server = crate::harness::LocalServer::start(yaml).await.unwrap();
        let target = Target::http(&server.url(), Duration::from_secs(2), false).unwrap();
        let shape = Arc::new(Shape::default());
        // Another caller spent one of limited-1's requests: its exhaustion is denied early.
        assert_eq!(target.check(&shape, "limited-1", 1).await, Outcome::Allowed);
        let mut p = plan(70, 1.0);
        p.reset = Reset::WindowEnd(Duration::from_secs(3600));
        let exhaustion = exhaust(&p, &target, &shape, Duration::from_secs(2), true).await;
        assert_eq!(exhaustion.users[1], Exhausted::DeniedEarly(2));
        assert_eq!(exhaustion.count(|u| u == Exhausted::Yes), 69);
        // 69 users × (3 + 1), and limited-1's 3.
        assert_eq!((exhaustion.tally.allowed, exhaustion.tally.denied), (69 * 3 + 2, 69 + 1));
        server.stop().await;
    }
}
