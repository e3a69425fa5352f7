//! Admission by reservation: a request's estimate — its prompt tokens and its completion
//! allowance — reserved on every rule that counts tokens, all-or-nothing with the request rules of
//! the same phase, in one call to the store; the allowance capped to what is left (`cap`) or the
//! request refused with the exact wait (`deny`).

use std::time::Duration;

use axum::response::Response;
use floodgate::{Costs, Descriptors, EngineError, Hit, ReserveError, Verdict};
use floodgate_app::App;
use floodgate_app::control::Domain;
use floodgate_app::metrics::Api;
use floodgate_config::gateway::{Llm, WhenShort};
use floodgate_core::CostError;
use floodgate_http::HeaderStyle;

use super::respond::{self, invalid, never_affordable};

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

/// What a request is: its descriptors, prompt tokens and the completion allowance it wants.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Estimate<'a> {
    pub(crate) descriptors: &'a Descriptors,
    pub(crate) prompt: u64,
    pub(crate) wanted: u64,
    /// Whether the request generates text (an embedding has no allowance to cap).
    pub(crate) generates: bool,
}

fn costs(dimension: &str, tokens: u64) -> Costs {
    Costs::new().with(floodgate::cost::REQUESTS, 1).with(dimension, tokens)
}

/// Reserves `estimate` on `domain` (see the module docs); the answer to send instead when refused.
pub(crate) async fn admit(
    app: &App,
    domain: &Domain,
    llm: &Llm,
    estimate: Estimate<'_>,
    style: HeaderStyle,
) -> Result<Admitted, Response> {
    let dimension = llm.dimension.as_str();
    let cap = llm.allowance.when_short == WhenShort::Cap && estimate.generates;
    let least = if estimate.generates { llm.allowance.min_completion_tokens } else { 0 };
    let prompt = estimate.prompt;
    let mut allowance = estimate.wanted;
    for attempt in 1..=ATTEMPTS {
        let total = prompt.saturating_add(allowance);
        let costs = costs(dimension, total);
        let hit = Hit::with_costs(estimate.descriptors, &costs);
        let reserved = match app.decisions().reserve(domain, hit, llm.reservation_ttl).await {
            Ok(reserved) => reserved,
            Err(ReserveError::Engine(EngineError::Cost {
                rule,
                source: CostError::ExceedsCapacity { capacity, .. },
            })) => {
                if cap && attempt < ATTEMPTS && capacity >= prompt + least && capacity - prompt < allowance {
                    allowance = capacity - prompt;
                    continue;
                }
                return Err(never_affordable(total, &rule, capacity, dimension).into_response());
            }
            Err(ReserveError::Engine(error)) => return Err(engine_refusal(&error)),
            Err(ReserveError::Store(error)) => return Err(respond::unavailable(&error.to_string())),
        };
        let verdict = reserved.verdict;
        if let Some(reservation) = reserved.reservation {
            let capped_from = (allowance < estimate.wanted).then_some(estimate.wanted);
            return Ok(Admitted { verdict, reservation: Some(reservation.id), allowance, capped_from });
        }
        if verdict.allowed {
            // No rule applied: nothing was reserved, nothing to settle.
            return Ok(Admitted { verdict, reservation: None, allowance, capped_from: None });
        }
        if cap
            && attempt < ATTEMPTS
            && let Some(left) = left(&verdict, dimension, total)
            && left >= prompt + least
            && left - prompt < allowance
        {
            allowance = left - prompt;
            continue;
        }
        let wait = if cap {
            wait_for(app, domain, estimate.descriptors, dimension, prompt + least).await
        } else {
            None
        };
        return Err(respond::limited(&verdict, style, wait, dimension));
    }
    Err(respond::unavailable("the budgets changed under every capped attempt"))
}

/// What is left for the request in `dimension`, by a denied `verdict` for a request of `total`
/// there: the least any enforced limit of that dimension has left. `None` when a limit of another
/// dimension (requests) denied: no allowance would pass it.
fn left(verdict: &Verdict, dimension: &str, total: u64) -> Option<u64> {
    let mut least: Option<u64> = None;
    for l in verdict.limits.iter().filter(|l| l.enforced) {
        let denies = l.outcome.denies();
        if &*l.dimension != dimension {
            if denies {
                return None;
            }
            continue;
        }
        if denies && l.decision.retry_after.is_none() {
            // Failed closed on a store error: nothing is known to be left.
            return None;
        }
        // A denying limit says what it has; an allowing one what it would have had after.
        let has = if denies { l.decision.remaining } else { l.decision.remaining.saturating_add(total) };
        least = Some(least.map_or(has, |n| n.min(has)));
    }
    least
}

/// The exact wait until a request of `tokens` (its prompt and the least allowance) passes, by a
/// peek (nothing consumed).
async fn wait_for(
    app: &App,
    domain: &Domain,
    descriptors: &Descriptors,
    dimension: &str,
    tokens: u64,
) -> Option<Duration> {
    let costs = costs(dimension, tokens);
    let hit = Hit::with_costs(descriptors, &costs);
    match app.decisions().decide(domain, Api::Peek, &[hit]).await {
        Ok(verdict) if !verdict.allowed => verdict.retry_after(),
        _ => None,
    }
}

/// The answer to a request a rule cannot decide: a descriptor it needs is missing or malformed.
fn engine_refusal(error: &EngineError) -> Response {
    let message = match error {
        EngineError::Descriptor { descriptor, value, expected, .. } => {
            format!("The request's {descriptor} descriptor is {value:?}, which is not {expected}.")
        }
        EngineError::MissingDescriptor { descriptor, .. } => {
            format!("The request has no {descriptor} descriptor, which a limit needs.")
        }
        other => format!("{other}."),
    };
    invalid(message, None).into_response()
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

    #[test]
    fn what_is_left_is_the_least_of_the_token_limits() {
        let v = verdict(vec![
            limit("tokens", false, 300),
            limit("tokens", true, 100),
            limit("requests", true, 5),
        ]);
        // The allowing limit had 100 left after a request of 500: 600 before.
        assert_eq!(left(&v, "tokens", 500), Some(300));
        let v = verdict(vec![limit("tokens", false, 300), limit("tokens", true, 0)]);
        assert_eq!(left(&v, "tokens", 200), Some(200));
    }

    #[test]
    fn a_request_limit_that_denies_leaves_nothing_to_cap() {
        let v = verdict(vec![limit("tokens", false, 300), limit("requests", false, 0)]);
        assert_eq!(left(&v, "tokens", 500), None);
    }
}
