//! Who sends what in a `flood` run, worked out from the flags, and the plans that cannot be run
//! (exit 64, with the reason).

use std::time::Duration;

use super::{FloodArgs, FloodPeer, FloodStore, FloodTransport};
use crate::Usage;
use crate::args::{Algorithm, MAX_DURATION};
use crate::report::units::micros;

/// Who sent a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A known user, `known-<i>`: sends from the start.
    Known(u32),
    /// A newcomer, `new-<i>`: sends from the flood's start.
    Newcomer(u32),
    /// The flood's `n`th request, `flood-<n>`: a key of its own.
    Flood(u64),
    /// A limited user, `limited-<i>`: exhausted its limit before the run, then probes it.
    Limited(u32),
}

impl Caller {
    /// The user id it sends.
    pub(crate) fn key(self) -> String {
        match self {
            Caller::Known(i) => format!("known-{i}"),
            Caller::Newcomer(i) => format!("new-{i}"),
            Caller::Flood(n) => format!("flood-{n}"),
            Caller::Limited(i) => format!("limited-{i}"),
        }
    }
}

/// Limited users unless `--limited-users` says otherwise (with a rule they can be held to).
pub const DEFAULT_LIMITED_USERS: u64 = 100;

/// The most requests the limited users may send to exhaust their limits.
const MOST_EXHAUST_REQUESTS: u64 = 2_000_000;

/// The pace the limited users' exhaustion is planned at (requests a second, all users
/// together): slower than the machines it runs on, so that a window holds it.
const EXHAUST_PACE: u64 = 2_000;

/// Who sends what.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    /// Normal users sending from the start: `known-0` … (the first half).
    pub(crate) known: u64,
    /// Normal users whose first request is sent during the flood: `new-0` ….
    pub(crate) newcomers: u64,
    /// Requests per second of each normal user.
    pub(crate) per_user_rate: f64,
    /// The `before` phase.
    pub(crate) before: Duration,
    /// The `during` phase.
    pub(crate) during: Duration,
    /// Limited users, `limited-0` …: each exhausts its limit before the run, then probes.
    pub(crate) limited: u64,
    /// Probes per second of each limited user.
    pub(crate) probe_rate: f64,
    /// The limit each limited user exhausts (the built-in rule's).
    pub(crate) limit: u64,
    /// When a limited user's limit resets by the rule itself.
    pub(crate) reset: Reset,
}

/// When a limit exhausted at some instant resets by the rule itself (after which an admission is
/// no sign of a lost counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reset {
    /// At the end of the window holding that instant, windows aligned to the Unix epoch:
    /// Floodgate's `fixed_window`.
    WindowEnd(Duration),
    /// A window after the first request counted: Floodgate's `sliding_log` (its oldest entry
    /// expires), limitador (a counter's window starts with its first hit).
    After(Duration),
}

impl Reset {
    /// The wall-clock instant (µs since the epoch) at which a limit whose first request was sent
    /// at `first_us` resets: never earlier than it does.
    pub(crate) fn at(self, first_us: u64) -> u64 {
        match self {
            Reset::WindowEnd(w) => {
                let w = micros(w).max(1);
                first_us - first_us % w + w
            }
            Reset::After(w) => first_us.saturating_add(micros(w)),
        }
    }

    /// How long to wait from `now_us` before exhausting limits that must hold for `span`: until
    /// the next window when the current one ends sooner (`WindowEnd`), else not at all.
    pub(crate) fn wait(self, now_us: u64, span: Duration) -> Duration {
        let left = self.at(now_us) - now_us;
        match self {
            Reset::WindowEnd(_) if left < micros(span) => Duration::from_micros(left) + RESET_MARGIN,
            _ => Duration::ZERO,
        }
    }
}

/// Past a window's start, so that the clock of whoever decides is in it too.
const RESET_MARGIN: Duration = Duration::from_millis(20);

impl Plan {
    /// The plan of `args`, or why it cannot be run.
    pub(crate) fn new(args: &FloodArgs) -> Result<Plan, Usage> {
        if args.before.is_zero() || args.during.is_zero() || args.before + args.during > MAX_DURATION {
            return Err(Usage("--before and --during must be above zero and at most 1h together".into()));
        }
        for (flag, rate) in [("--normal-rate", args.normal_rate), ("--flood-rate", args.flood_rate)] {
            if !(rate.is_finite() && rate > 0.0 && rate <= 10_000_000.0) {
                return Err(Usage(format!("{flag} must be between 0 and 10 000 000 per second")));
            }
        }
        if args.timeout.is_zero() {
            return Err(Usage("--timeout must be above zero".into()));
        }
        if args.store == FloodStore::Redis && args.max_keys.is_some() {
            return Err(Usage("--max-keys is a memory store setting; Redis holds every key".into()));
        }
        check_peer(args)?;
        let known = args.users / 2;
        let per_user_rate = args.normal_rate / args.users as f64;
        // Known users send in each phase (newcomers send once they join, whatever the rate).
        for (flag, phase) in [("--before", args.before), ("--during", args.during)] {
            if per_user_rate * phase.as_secs_f64() < 1.0 {
                return Err(Usage(format!(
                    "each user sends --normal-rate / --users = {per_user_rate:.3} requests a second: not \
                     one within {flag} ({phase:?}); raise --normal-rate or {flag}, or lower --users"
                )));
            }
        }
        let reset = match args.peer {
            FloodPeer::Floodgate if args.algorithm == Algorithm::FIXED_WINDOW => {
                Reset::WindowEnd(args.window)
            }
            _ => Reset::After(args.window),
        };
        let plan = Plan {
            known,
            newcomers: args.users - known,
            per_user_rate,
            before: args.before,
            during: args.during,
            limited: limited_users(args)?,
            probe_rate: args.limited_probe_rate,
            limit: args.limit,
            reset,
        };
        if args.config.is_none() {
            let most = plan.most_per_user_in(args.window);
            if most > args.limit {
                return Err(Usage(format!(
                    "a normal user may send {most} requests within a --window of {:?}, over the --limit \
                     of {}: their denials would not be false rejections; lower --normal-rate or raise \
                     --users or --limit",
                    args.window, args.limit
                )));
            }
        }
        if plan.limited > 0 {
            plan.check_limited(args)?;
        }
        Ok(plan)
    }

    /// Every normal user.
    pub(crate) fn users(&self) -> u64 {
        self.known + self.newcomers
    }

    /// The most requests one normal user can send within any span of `window` (one every
    /// `1 / per_user_rate`; a known user sends over the whole run).
    pub(crate) fn most_per_user_in(&self, window: Duration) -> u64 {
        let r = self.per_user_rate;
        let in_window = (r * window.as_secs_f64()).ceil() as u64 + 1;
        in_window.min(self.known_requests_each())
    }

    /// The requests of one known user over the run (at most).
    pub(crate) fn known_requests_each(&self) -> u64 {
        (self.per_user_rate * (self.before + self.during).as_secs_f64()).ceil() as u64
    }

    /// The requests that exhaust the limited users' limits: `limit` each, and one more.
    pub(crate) fn exhaust_requests(&self) -> u64 {
        self.limited * (self.limit + 1)
    }

    /// How long the limited users' limits must hold from the exhaustion's start: the exhaustion
    /// at a modest pace, a second more, both phases, and a request timeout for the last probes.
    pub(crate) fn limited_span(&self, timeout: Duration) -> Duration {
        let exhaust = Duration::from_secs_f64(self.exhaust_requests() as f64 / EXHAUST_PACE as f64);
        exhaust + Duration::from_secs(1) + self.before + self.during + timeout
    }

    fn check_limited(&self, args: &FloodArgs) -> Result<(), Usage> {
        let rate = self.probe_rate;
        if !(rate.is_finite() && rate > 0.0 && rate <= 1_000.0) {
            return Err(Usage("--limited-probe-rate must be between 0 and 1 000 per second".into()));
        }
        for (flag, phase) in [("--before", args.before), ("--during", args.during)] {
            if rate * phase.as_secs_f64() < 1.0 {
                return Err(Usage(format!(
                    "each limited user probes {rate} times a second: not once within {flag} ({phase:?}); \
                     raise --limited-probe-rate or {flag}"
                )));
            }
        }
        if self.exhaust_requests() > MOST_EXHAUST_REQUESTS {
            return Err(Usage(format!(
                "exhausting {} limited users at a --limit of {} takes {} requests, over {MOST_EXHAUST_REQUESTS}; \
                 lower --limited-users or --limit",
                self.limited,
                self.limit,
                self.exhaust_requests()
            )));
        }
        let span = self.limited_span(args.timeout);
        if span >= args.window {
            return Err(Usage(format!(
                "the limited users' limits would reset by the rule within the run: exhausting them, \
                 --before, --during and a --timeout take up to {span:?}, not under the --window of {:?}; \
                 raise --window, shorten the run, or pass --limited-users 0",
                args.window
            )));
        }
        Ok(())
    }
}

/// The limited users of `args`: `--limited-users`, or [`DEFAULT_LIMITED_USERS`] when the built-in
/// rule holds an exhausted limit until its window ends (`fixed_window`, `sliding_log`), else none.
fn limited_users(args: &FloodArgs) -> Result<u64, Usage> {
    let holds =
        args.config.is_none() && [Algorithm::FIXED_WINDOW, Algorithm::SLIDING_LOG].contains(&args.algorithm);
    match args.limited_users {
        None => Ok(if holds { DEFAULT_LIMITED_USERS } else { 0 }),
        Some(0) => Ok(0),
        Some(_) if args.config.is_some() => Err(Usage(
            "--limited-users exhaust the built-in rule's --limit: not with --config (pass --limited-users 0)"
                .into(),
        )),
        Some(_) if !holds => Err(Usage(format!(
            "--limited-users need a rule that holds an exhausted limit until its window ends \
             (fixed_window, sliding_log): {} refills within the run; pass --limited-users 0",
            args.algorithm.name()
        ))),
        Some(n) => Ok(n),
    }
}

/// What the peer refuses: limitador runs the built-in rule, as a fixed window, on its memory
/// storage, over Envoy RLS.
fn check_peer(args: &FloodArgs) -> Result<(), Usage> {
    if args.peer != FloodPeer::Limitador {
        return Ok(());
    }
    let refuse = |why: &str| Err(Usage(format!("--peer limitador: {why}")));
    if args.store != FloodStore::Memory {
        return refuse("its memory storage only (--store memory; --max-keys is its --cache)");
    }
    if args.config.is_some() {
        return refuse("its limit is the built-in rule (--limit per --window), not --config");
    }
    if !args.store_fields.is_empty() {
        return refuse("--store-field sets Floodgate's store section");
    }
    if args.algorithm != Algorithm::FIXED_WINDOW {
        return refuse(&format!(
            "limitador's one algorithm is a fixed window: --algorithm fixed_window, not {}",
            args.algorithm.name()
        ));
    }
    if args.transport() != FloodTransport::Grpc {
        return refuse("driven over Envoy RLS (--transport grpc)");
    }
    super::limitador::limits_yaml(&args.key_descriptor, args.limit, args.window).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::super::test_args as args;
    use super::*;

    #[test]
    fn the_default_plan_sends_each_user_one_request_a_second() {
        let plan = Plan::new(&args(&[])).unwrap();
        assert_eq!((plan.known, plan.newcomers, plan.users()), (1000, 1000, 2000));
        assert_eq!(plan.per_user_rate, 1.0);
        // A minute's window holds the whole run of 15 s: at most 15 requests of a user.
        assert_eq!((plan.known_requests_each(), plan.most_per_user_in(Duration::from_secs(60))), (15, 15));
        assert_eq!(plan.most_per_user_in(Duration::from_secs(5)), 6);
        let odd = Plan::new(&args(&["--users", "5", "--normal-rate", "5"])).unwrap();
        assert_eq!((odd.known, odd.newcomers), (2, 3));
    }

    #[test]
    fn a_plan_where_normal_users_could_reach_their_limit_or_send_nothing_is_refused() {
        let e = Plan::new(&args(&["--limit", "10"])).unwrap_err();
        assert!(e.0.contains("may send 15 requests") && e.0.contains("false rejections"), "{e}");
        assert!(Plan::new(&args(&["--limit", "15"])).is_ok());
        // With a policy file, what its rules allow is the caller's to know.
        assert!(Plan::new(&args(&["--config", "policy.yaml"])).is_ok());
        let e = Plan::new(&args(&["--normal-rate", "100"])).unwrap_err();
        assert!(e.0.contains("not one within --before"), "{e}");
        assert!(Plan::new(&args(&["--before", "0s"])).is_err());
        assert!(Plan::new(&args(&["--flood-rate", "0"])).is_err());
        assert!(Plan::new(&args(&["--before", "50m", "--during", "20m"])).is_err());
        let e = Plan::new(&args(&["--store", "redis", "--max-keys", "5"])).unwrap_err();
        assert!(e.0.contains("memory store setting"), "{e}");
    }

    #[test]
    fn limited_users_are_there_by_default_when_the_rule_holds_an_exhausted_limit() {
        let plan = Plan::new(&args(&[])).unwrap();
        assert_eq!((plan.limited, plan.probe_rate, plan.limit), (100, 1.0, 100));
        assert_eq!(plan.exhaust_requests(), 10_100);
        assert_eq!(plan.reset, Reset::WindowEnd(Duration::from_secs(60)));
        // 10 100 requests at 2 000 a second, a second, 15 s of run and a 2 s timeout.
        assert_eq!(plan.limited_span(Duration::from_secs(2)), Duration::from_millis(23_050));
        let log = Plan::new(&args(&["--algorithm", "sliding_log"])).unwrap();
        assert_eq!((log.limited, log.reset), (100, Reset::After(Duration::from_secs(60))));
        // Refilling algorithms, and rules the bench does not know, have none unless asked.
        for other in
            [&["--algorithm", "gcra"][..], &["--algorithm", "sliding_window"], &["--config", "p.yaml"]]
        {
            assert_eq!(Plan::new(&args(other)).unwrap().limited, 0, "{other:?}");
        }
        assert_eq!(
            Plan::new(&args(&["--limited-users", "0", "--algorithm", "token_bucket"])).unwrap().limited,
            0
        );
    }

    #[test]
    fn limited_users_that_could_be_freed_by_the_rule_itself_are_refused() {
        let e = Plan::new(&args(&["--limited-users", "5", "--algorithm", "token_bucket"])).unwrap_err();
        assert!(e.0.contains("refills within the run"), "{e}");
        let e = Plan::new(&args(&["--limited-users", "5", "--config", "p.yaml"])).unwrap_err();
        assert!(e.0.contains("not with --config"), "{e}");
        // 23 s of exhaustion and run do not fit a 20 s window.
        let e = Plan::new(&args(&["--window", "20s", "--limit", "100"])).unwrap_err();
        assert!(e.0.contains("reset by the rule within the run") && e.0.contains("--limited-users 0"), "{e}");
        assert!(Plan::new(&args(&["--window", "20s", "--limited-users", "0"])).is_ok());
        let e = Plan::new(&args(&["--limited-users", "100000", "--limit", "100"])).unwrap_err();
        assert!(e.0.contains("10100000 requests"), "{e}");
        let e = Plan::new(&args(&["--limited-probe-rate", "0.1"])).unwrap_err();
        assert!(e.0.contains("not once within --before"), "{e}");
        assert!(Plan::new(&args(&["--limited-probe-rate", "0"])).is_err());
    }

    #[test]
    fn limitador_runs_the_built_in_rule_as_a_fixed_window_on_its_memory_storage_over_rls() {
        let plan = Plan::new(&args(&["--peer", "limitador", "--max-keys", "500"])).unwrap();
        // Its counters' windows start with their first hit.
        assert_eq!(plan.reset, Reset::After(Duration::from_secs(60)));
        let refused = |extra: &[&str], says: &str| {
            let e = Plan::new(&args(&[&["--peer", "limitador"][..], extra].concat())).unwrap_err();
            assert!(e.0.starts_with("--peer limitador: ") && e.0.contains(says), "{extra:?}: {e}");
        };
        refused(&["--store", "redis"], "memory storage only");
        refused(&["--config", "p.yaml"], "not --config");
        refused(&["--store-field", "on_full=reject"], "--store-field");
        refused(&["--algorithm", "sliding_log"], "fixed_window, not sliding_log");
        refused(&["--transport", "http"], "Envoy RLS");
        refused(&["--window", "1m500ms"], "whole seconds");
        refused(&["--key-descriptor", "a'b"], "--key-descriptor");
    }

    #[test]
    fn a_limit_resets_at_its_window_end_or_a_window_after_its_first_request() {
        let minute = Duration::from_secs(60);
        let (fixed, after) = (Reset::WindowEnd(minute), Reset::After(minute));
        // 10 s into a minute.
        let t = 1_700_000_000_000_000 - 1_700_000_000_000_000 % 60_000_000 + 10_000_000;
        assert_eq!(fixed.at(t), t + 50_000_000);
        assert_eq!(after.at(t), t + 60_000_000);
        // 50 s left: enough for 23 s, not for 55 s (then wait for the next window, and a margin).
        assert_eq!(fixed.wait(t, Duration::from_secs(23)), Duration::ZERO);
        assert_eq!(fixed.wait(t, Duration::from_secs(55)), Duration::from_millis(50_020));
        assert_eq!(after.wait(t, Duration::from_secs(55)), Duration::ZERO);
    }
}
