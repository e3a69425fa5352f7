//! The engine over the memory store, against a model built from the bare algorithms: per-key
//! states kept in a map, and the all-or-nothing rule written out plainly.

use std::any::Any;
use std::collections::HashMap;
use std::time::Duration;

use floodgate::{Action, Descriptors, EngineError, Limit, Outcome, Rule, Verdict};
use floodgate_core::calendar::Period;
use floodgate_core::{
    Algorithm, Budget, Calendar, Clock, Concurrency, Decision, FixedWindow, Gcra, Quota, Rate, SlidingLog,
    SlidingWindow, Timestamp, TokenBucket,
};
use proptest::prelude::*;

use super::{engine, nz};

#[derive(Debug, Clone, Copy, PartialEq)]
enum KeyBy {
    User,
    Tenant,
    Everyone,
}

#[derive(Debug, Clone)]
struct RuleSpec {
    algorithm: usize,
    capacity: u64,
    window_s: u64,
    key: KeyBy,
    action: Action,
}

impl RuleSpec {
    fn limit(&self) -> Limit {
        let (cap, window) = (nz(self.capacity), Duration::from_secs(self.window_s));
        let rate = Rate::try_new(cap, window).unwrap();
        match self.algorithm {
            0 => FixedWindow::try_new(cap, window).unwrap().into(),
            1 => SlidingWindow::try_new(cap, window).unwrap().into(),
            2 => SlidingLog::try_new(cap, window).unwrap().into(),
            3 => TokenBucket::try_new(rate, cap).unwrap().into(),
            4 => Gcra::try_new(rate, cap).unwrap().into(),
            5 => Concurrency::try_new(cap, window).unwrap().into(),
            6 => Quota::new(cap, Calendar::utc(Period::Day)).into(),
            _ => Budget::try_new(cap, window).unwrap().into(),
        }
    }

    fn rule(&self, i: usize) -> Rule {
        let key: &[&str] = match self.key {
            KeyBy::User => &["user"],
            KeyBy::Tenant => &["tenant"],
            KeyBy::Everyone => &[],
        };
        Rule::new(format!("rule-{i}"), self.limit()).key(key.iter().copied()).action(self.action)
    }
}

fn any_rule() -> impl Strategy<Value = RuleSpec> {
    let key = prop_oneof![Just(KeyBy::User), Just(KeyBy::Tenant), Just(KeyBy::Everyone)];
    let action = prop_oneof![6 => Just(Action::Deny), 1 => Just(Action::Shadow), 1 => Just(Action::Tag)];
    (0usize..8, 1u64..6, 1u64..20, key, action).prop_map(|(algorithm, capacity, window_s, key, action)| {
        RuleSpec { algorithm, capacity, window_s, key, action }
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Call {
    Check,
    Peek,
    Report,
}

#[derive(Debug, Clone)]
struct Step {
    dt_us: u64,
    call: Call,
    user: Option<u8>,
    tenant: u8,
    cost: u64,
}

fn any_step() -> impl Strategy<Value = Step> {
    let dt_us = prop_oneof![
        3 => Just(0u64),
        6 => 0u64..3_000_000,
        1 => 0u64..(6 * 3_600_000_000),
    ];
    let call = prop_oneof![6 => Just(Call::Check), 2 => Just(Call::Peek), 1 => Just(Call::Report)];
    (dt_us, call, prop::option::weighted(0.8, 0u8..3), 0u8..2, 1u64..7)
        .prop_map(|(dt_us, call, user, tenant, cost)| Step { dt_us, call, user, tenant, cost })
}

/// The model's state of every key: the algorithm's own state type, behind `Any`.
type States = HashMap<(usize, String), Box<dyn Any>>;

/// Runs `f` on the state of `key` for algorithm `a`, created fresh on first use.
fn on_state<A: Algorithm, R>(
    states: &mut States,
    key: (usize, String),
    a: &A,
    f: impl FnOnce(&A, &mut A::State) -> R,
) -> R
where
    A::State: 'static,
{
    let state = states.entry(key).or_insert_with(|| Box::new(A::State::default()));
    f(a, state.downcast_mut::<A::State>().expect("one algorithm per key"))
}

macro_rules! on_limit {
    ($limit:expr, $a:ident => $body:expr) => {
        match $limit {
            Limit::FixedWindow($a) => $body,
            Limit::SlidingWindow($a) => $body,
            Limit::SlidingLog($a) => $body,
            Limit::TokenBucket($a) => $body,
            Limit::Gcra($a) => $body,
            Limit::Concurrency($a) => $body,
            Limit::Quota($a) => $body,
            Limit::Budget($a) => $body,
        }
    };
}

/// What the model expects for one limit: its decision (`None` when the cost can never be granted
/// by this non-enforced rule) and outcome.
type Expected = Vec<(String, Option<Decision>, Outcome)>;

fn model(
    specs: &[RuleSpec],
    limits: &[Limit],
    states: &mut States,
    step: &Step,
    now: Timestamp,
) -> Result<(bool, Expected), String> {
    // The rules that apply, with their keys.
    let applied: Vec<(usize, String)> = specs
        .iter()
        .enumerate()
        .filter_map(|(i, spec)| match (spec.key, step.user) {
            (KeyBy::User, None) => None,
            (KeyBy::User, Some(u)) => Some((i, format!("u{u}"))),
            (KeyBy::Tenant, _) => Some((i, format!("t{}", step.tenant))),
            (KeyBy::Everyone, _) => Some((i, String::new())),
        })
        .collect();
    let enforced = |i: usize| specs[i].action == Action::Deny;
    let impossible = |i: usize| step.call != Call::Report && step.cost > limits[i].capacity();
    if let Some((i, _)) = applied.iter().find(|(i, _)| enforced(*i) && impossible(*i)) {
        return Err(format!("rule-{i}"));
    }

    let mut decisions: Vec<Option<Decision>> = Vec::new();
    for (i, key) in &applied {
        let d = if impossible(*i) {
            None
        } else if step.call == Call::Report {
            Some(
                on_limit!(&limits[*i], a => on_state(states, (*i, key.clone()), a, |a, s| a.report(s, now, step.cost).0)),
            )
        } else {
            Some(
                on_limit!(&limits[*i], a => on_state(states, (*i, key.clone()), a, |a, s| a.decide(s, now, step.cost))),
            )
        };
        decisions.push(d);
    }
    let allowed =
        applied.iter().zip(&decisions).all(|((i, _), d)| !enforced(*i) || d.is_some_and(|d| d.allowed));
    if step.call != Call::Report && !allowed {
        // Limits that allow but are not taken because another denies report their state as it stays.
        for ((i, key), d) in applied.iter().zip(decisions.iter_mut()) {
            if let Some(d) = d.as_mut().filter(|d| d.allowed) {
                let (remaining, reset_us) = on_limit!(&limits[*i], a => on_state(states, (*i, key.clone()), a, |a, s| a.status(s, now)));
                d.remaining = remaining;
                d.reset_after = Duration::from_micros(reset_us);
            }
        }
    }
    if step.call == Call::Check && allowed {
        for ((i, key), d) in applied.iter().zip(&decisions) {
            if d.is_some_and(|d| d.allowed) {
                on_limit!(&limits[*i], a => on_state(states, (*i, key.clone()), a, |a, s| a.consume(s, now, step.cost)));
            }
        }
    }
    let expected = applied
        .iter()
        .zip(decisions)
        .map(|((i, _), d)| {
            let outcome = match (d.is_some_and(|d| d.allowed), specs[*i].action) {
                (true, _) => Outcome::Allowed,
                (false, Action::Deny | Action::Delay { .. }) => Outcome::Denied,
                (false, Action::Tag) => Outcome::Tagged,
                (false, Action::Shadow) => Outcome::ShadowDenied,
            };
            (format!("rule-{i}"), d, outcome)
        })
        .collect();
    Ok((allowed, expected))
}

fn compare(
    step: usize,
    got: Result<Verdict, EngineError>,
    want: Result<(bool, Expected), String>,
) -> Result<(), TestCaseError> {
    match (got, want) {
        (Err(EngineError::Cost { rule, .. }), Err(want_rule)) => {
            prop_assert_eq!(&*rule, want_rule.as_str(), "step {}: the rule named in the error", step);
        }
        (Ok(verdict), Ok((allowed, expected))) => {
            prop_assert_eq!(verdict.allowed, allowed, "step {}: allowed", step);
            prop_assert_eq!(verdict.limits.len(), expected.len(), "step {}: rules applied", step);
            for (l, (rule, decision, outcome)) in verdict.limits.iter().zip(expected) {
                prop_assert_eq!(&*l.rule, rule.as_str(), "step {}", step);
                prop_assert_eq!(l.outcome, outcome, "step {}: outcome of {}", step, rule);
                match decision {
                    Some(d) => prop_assert_eq!(l.decision, d, "step {}: decision of {}", step, rule),
                    None => prop_assert!(!l.decision.allowed, "step {}: {} can never grant it", step, rule),
                }
            }
        }
        (got, want) => prop_assert!(false, "step {}: engine {:?}, model {:?}", step, got, want),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_engine_decides_as_the_bare_algorithms_with_all_or_nothing(
        specs in prop::collection::vec(any_rule(), 2..=3),
        steps in prop::collection::vec(any_step(), 1..60),
    ) {
        let limits: Vec<Limit> = specs.iter().map(RuleSpec::limit).collect();
        let (engine, clock) = engine(specs.iter().enumerate().map(|(i, s)| s.rule(i)));
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut states = States::new();
        for (n, step) in steps.iter().enumerate() {
            clock.advance(Duration::from_micros(step.dt_us));
            let mut request = Descriptors::new().with("tenant", format!("t{}", step.tenant));
            if let Some(u) = step.user {
                request.insert("user", format!("u{u}"));
            }
            let got = runtime.block_on(async {
                match step.call {
                    Call::Check => engine.check(&request, step.cost).await,
                    Call::Peek => engine.peek(&request, step.cost).await,
                    Call::Report => engine.report(&request, step.cost).await,
                }
            });
            let want = model(&specs, &limits, &mut states, step, clock.now());
            compare(n, got, want)?;
        }
    }
}
