//! Admission by reservation: a request's estimate — its prompt tokens and its completion
//! allowance — reserved on every rule that counts tokens, all-or-nothing with the request rules of
//! the same phase, in one call to the store; the allowance capped to what is left (`cap`) or the
//! request refused with the exact wait (`deny`).
//!
//! A rule with `action: delay` that denies makes the call wait for capacity, as on the gateway's
//! other routes (`GatewayState::in_turn`, [`floodgate::delay`]): in turn with the calls waiting
//! for the same delay key, by priority tier, up to the rule's `max_wait`; each turn reserves
//! anew (capping again), so a waiter takes what is left when its turn comes.

use std::time::Duration;

use axum::response::Response;
use floodgate::{Descriptors, EngineError, Hit, ReserveError, Verdict};
use floodgate_app::App;
use floodgate_app::control::Domain;
use floodgate_app::metrics::Api;
use floodgate_config::gateway::{Llm, WhenShort};
use floodgate_core::CostError;
use floodgate_http::HeaderStyle;

use super::dialect::Dialect;
use super::respond::{self, invalid, never_affordable};
use super::tariff::{Tariff, Used};
use crate::state::GatewayState;

/// At most this many reserves per request: the first, and capped retries after a denial or a
/// capacity below the estimate (each lowers the allowance).
const ATTEMPTS: u32 = 4;

/// A request let through.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// The reservation's verdict (its limits, after what it took: the rate-limit headers).
    pub(crate) verdict: Verdict,
    /// The reservation to settle when the call ends (`None`: no rule applies, nothing to settle).
    pub(crate) reservation: Option<String>,
    /// The completion tokens reserved.
    pub(crate) allowance: u64,
    /// What the request wanted, when the allowance was capped below it.
    pub(crate) capped_from: Option<u64>,
}

/// What a request is: its descriptors, prompt tokens and the completion allowance it wants, and
/// what its model costs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Estimate<'a> {
    pub(crate) descriptors: &'a Descriptors,
    pub(crate) prompt: u64,
    pub(crate) wanted: u64,
    /// Whether the request generates text (an embedding has no allowance to cap).
    pub(crate) generates: bool,
    pub(crate) tariff: &'a Tariff,
    /// The dialect its refusals are written in.
    pub(crate) dialect: Dialect,
}

impl Estimate<'_> {
    fn used(&self, allowance: u64) -> Used {
        Used { prompt: self.prompt, completion: allowance, ..Used::default() }
    }
}

/// What one decision of [`admit`] came to.
enum Attempt {
    /// Reserved (or no rule applied).
    Admitted(Admitted),
    /// Denied: the last attempt's verdict (the allowance it asked for already as low as it goes).
    Denied(Verdict),
}

/// Reserves `estimate` on `domain` (see the module docs), in turn with the requests of the same
/// delay key by priority `tier` when a rule with `action: delay` denies; the answer to send
/// instead when refused.
pub(crate) async fn admit(
    gateway: &GatewayState,
    domain: &Domain,
    llm: &Llm,
    estimate: Estimate<'_>,
    style: HeaderStyle,
    tier: u8,
) -> Result<Admitted, Response> {
    let app = &gateway.app;
    // The reservation of the decision that passed (one lock per decision, never contended).
    let admitted = parking_lot::Mutex::new(None);
    let decide = || async {
        match attempt(app, domain, llm, estimate).await? {
            Attempt::Admitted(a) => {
                let verdict = a.verdict.clone();
                *admitted.lock() = Some(a);
                Ok(verdict)
            }
            Attempt::Denied(verdict) => Ok(verdict),
        }
    };
    let verdict = gateway.in_turn(domain, estimate.descriptors, tier, None, decide).await?;
    if verdict.allowed
        && let Some(admitted) = admitted.into_inner()
    {
        return Ok(admitted);
    }
    let tariff = estimate.tariff;
    let least = if estimate.generates { llm.allowance.min_completion_tokens } else { 0 };
    let wait = match llm.allowance.when_short == WhenShort::Cap && estimate.generates {
        true => wait_for(app, domain, estimate.descriptors, &tariff.costs(estimate.used(least), true)).await,
        false => None,
    };
    Err(respond::limited(estimate.dialect, &verdict, style, wait, tariff.tokens()))
}

/// One decision: the estimate reserved, its allowance capped (`cap`) and reserved again while a
/// smaller one fits; the call's refusal when it can never fit, or its input is refused.
async fn attempt(app: &App, domain: &Domain, llm: &Llm, estimate: Estimate<'_>) -> Result<Attempt, Response> {
    let tariff = estimate.tariff;
    let cap = llm.allowance.when_short == WhenShort::Cap && estimate.generates;
    let least = if estimate.generates { llm.allowance.min_completion_tokens } else { 0 };
    let prompt = estimate.prompt;
    let mut allowance = estimate.wanted;
    for attempt in 1..=ATTEMPTS {
        let costs = tariff.costs(estimate.used(allowance), true);
        let hit = Hit::with_costs(estimate.descriptors, &costs);
        let reserved = match app.decisions().reserve(domain, hit, llm.reservation_ttl).await {
            Ok(reserved) => reserved,
            Err(ReserveError::Engine(EngineError::Cost {
                rule,
                source: CostError::ExceedsCapacity { capacity, .. },
            })) => {
                let dimension =
                    domain.policy.rules().find(|r| r.name() == &*rule).map_or("", |r| r.cost_dimension());
                let room = tariff.affordable(dimension, capacity, prompt);
                if cap
                    && attempt < ATTEMPTS
                    && let Some(room) = room.filter(|n| *n >= least && *n < allowance)
                {
                    allowance = room;
                    continue;
                }
                let needed = tariff.cost_in(dimension, prompt, allowance);
                let refusal = never_affordable(estimate.dialect, needed, &rule, capacity, dimension);
                return Err(refusal.into_response());
            }
            Err(ReserveError::Engine(error)) => return Err(engine_refusal(estimate.dialect, &error)),
            Err(ReserveError::Store(error)) => {
                return Err(respond::unavailable(estimate.dialect, &error.to_string()));
            }
        };
        let verdict = reserved.verdict;
        if let Some(reservation) = reserved.reservation {
            let capped_from = (allowance < estimate.wanted).then_some(estimate.wanted);
            return Ok(Attempt::Admitted(Admitted {
                verdict,
                reservation: Some(reservation.id),
                allowance,
                capped_from,
            }));
        }
        if verdict.allowed {
            // No rule applied: nothing was reserved, nothing to settle.
            return Ok(Attempt::Admitted(Admitted {
                verdict,
                reservation: None,
                allowance,
                capped_from: None,
            }));
        }
        if cap
            && attempt < ATTEMPTS
            && let Some(fits) = fits(&verdict, tariff, prompt, allowance)
            && fits >= least
            && fits < allowance
        {
            allowance = fits;
            continue;
        }
        return Ok(Attempt::Denied(verdict));
    }
    Err(respond::unavailable(estimate.dialect, "the budgets changed under every capped attempt"))
}

/// The most a request of `prompt` tokens may generate by a denied `verdict` of a request with
/// `allowance`: the least that any enforced limit of a charged dimension leaves room for. `None`
/// when a limit of a dimension no allowance changes (requests) denied, or a limit failed closed.
fn fits(verdict: &Verdict, tariff: &Tariff, prompt: u64, allowance: u64) -> Option<u64> {
    let mut least: Option<u64> = None;
    for l in verdict.limits.iter().filter(|l| l.enforced) {
        let denies = l.outcome.denies();
        if denies && l.decision.retry_after.is_none() {
            // Failed closed on a store error: nothing is known to be left.
            return None;
        }
        // A denying limit says what it has; an allowing one what it would have had after.
        let has = match denies {
            true => l.decision.remaining,
            false => l.decision.remaining.saturating_add(tariff.cost_in(&l.dimension, prompt, allowance)),
        };
        match tariff.affordable(&l.dimension, has, prompt) {
            Some(n) => least = Some(least.map_or(n, |m| m.min(n))),
            None if denies => return None,
            None => {}
        }
    }
    least
}

/// The exact wait until a request costing `costs` (its prompt and the least allowance) passes, by
/// a peek (nothing consumed).
async fn wait_for(
    app: &App,
    domain: &Domain,
    descriptors: &Descriptors,
    costs: &floodgate::Costs,
) -> Option<Duration> {
    let hit = Hit::with_costs(descriptors, costs);
    match app.decisions().decide(domain, Api::Peek, &[hit]).await {
        Ok(verdict) if !verdict.allowed => verdict.retry_after(),
        _ => None,
    }
}

/// The answer to a request a rule cannot decide: a descriptor it needs is missing or malformed.
fn engine_refusal(dialect: Dialect, error: &EngineError) -> Response {
    let message = match error {
        EngineError::Descriptor { descriptor, value, expected, .. } => {
            format!("The request's {descriptor} descriptor is {value:?}, which is not {expected}.")
        }
        EngineError::MissingDescriptor { descriptor, .. } => {
            format!("The request has no {descriptor} descriptor, which a limit needs.")
        }
        other => format!("{other}."),
    };
    invalid(dialect, message, None).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::{LimitOutcome, Outcome};
    use floodgate_core::Decision;
    use std::sync::Arc;

    fn limit(dimension: &str, allowed: bool, remaining: u64) -> LimitOutcome {
        LimitOutcome {
            rule: Arc::from("r"),
            index: 0,
            hit: 0,
            decision: Decision {
                allowed,
                limit: 1000,
                remaining,
                reset_after: Duration::from_secs(1),
                retry_after: (!allowed).then_some(Duration::from_secs(1)),
            },
            outcome: if allowed { Outcome::Allowed } else { Outcome::Denied },
            enforced: true,
            window: Duration::from_secs(60),
            dimension: Arc::from(dimension),
            quota: false,
            degrade_to: None,
            grant: None,
            permit: false,
            shard: None,
            partition: None,
        }
    }

    fn verdict(limits: Vec<LimitOutcome>) -> Verdict {
        Verdict { allowed: false, limits: limits.into_iter().collect(), ..Verdict::default() }
    }

    fn tariff(prices: bool) -> Tariff {
        let mut llm = Llm::default();
        if prices {
            let price = floodgate_config::gateway::Price {
                input: 1.0,
                cached_input: 1.0,
                output: 2.0,
                cache_write: 1.0,
            };
            llm.prices.push(("m".into(), price));
        }
        Tariff::of(&llm, "m").unwrap()
    }

    #[test]
    fn what_fits_is_the_least_of_the_charged_limits() {
        let t = tariff(false);
        let v = verdict(vec![
            limit("tokens", false, 300),
            limit("tokens", true, 100),
            limit("requests", true, 5),
        ]);
        // A prompt of 100: the denying limit leaves 200; the allowing one had 100 left after a
        // request of 100 + 400, 600 before: 500.
        assert_eq!(fits(&v, &t, 100, 400), Some(200));
        let v = verdict(vec![limit("tokens", false, 300), limit("tokens", true, 0)]);
        assert_eq!(fits(&v, &t, 100, 100), Some(100));
    }

    #[test]
    fn spend_limits_what_fits_too() {
        let t = tariff(true);
        // 1000 µ$ left; a prompt of 100 costs 100 µ$; 900 µ$ buy 450 tokens at 2 µ$.
        let v = verdict(vec![limit("tokens", true, 10_000), limit("usd_micros", false, 1000)]);
        assert_eq!(fits(&v, &t, 100, 1000), Some(450));
    }

    #[test]
    fn a_request_limit_that_denies_leaves_nothing_to_cap() {
        let v = verdict(vec![limit("tokens", false, 300), limit("requests", false, 0)]);
        assert_eq!(fits(&v, &tariff(false), 100, 500), None);
    }
}
