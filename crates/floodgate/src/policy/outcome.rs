//! A request's verdict from what the store answered: each planned limit's outcome, by the store's
//! decision, by a fallback's local one, or — when the store failed — by its rule's failure policy.

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{Decision, Grant, Timestamp};

use super::plan::{Merged, Planned, Request};
use crate::store::{Applied, StoreError};
use crate::{Action, Limit, LimitOutcome, Limits, OnStoreError, Outcome, Verdict};

impl Request<'_> {
    /// The verdict from what the store answered.
    pub(super) fn verdict(&self, result: Result<(), StoreError>, applied: &Applied) -> Verdict {
        match result {
            Ok(()) => match &applied.degraded {
                None => verdict(&self.planned, &self.merged, applied),
                Some(error) => fallback_verdict(&self.planned, &self.merged, applied, Arc::clone(error)),
            },
            Err(error) => failure_verdict(&self.planned, error),
        }
    }
}

/// The verdict of a request from the store's results.
fn verdict(planned: &[Planned<'_>], merged: &[Merged<'_>], applied: &Applied) -> Verdict {
    let limits: Limits = planned
        .iter()
        .map(|p| {
            if p.impossible {
                return decided(p, never_allowed(&p.limit), None, applied.at, false);
            }
            let r = &applied.results[p.op];
            let mut outcome =
                decided(p, r.decision, if p.first_of_op { r.grant } else { None }, applied.at, false);
            outcome.shard = merged[p.op].shard.map(|(_, i)| i);
            outcome
        })
        .collect();
    let allowed = !limits.iter().any(|l| l.outcome.denies());
    Verdict { allowed, at: applied.at, limits, store_error: None }
}

/// A limit's outcome from its decision (by the store, or by a fallback's local share when
/// `local`).
fn decided(
    p: &Planned<'_>,
    decision: Decision,
    grant: Option<Grant>,
    at: Timestamp,
    local: bool,
) -> LimitOutcome {
    let outcome = match (decision.allowed, p.enforce, p.action) {
        (true, _, _) if local => Outcome::LocalAllowed,
        (true, _, _) => Outcome::Allowed,
        (false, true, _) if local => Outcome::LocalDenied,
        (false, true, _) => Outcome::Denied,
        (false, false, Action::Tag) => Outcome::Tagged,
        (false, false, _) => Outcome::ShadowDenied,
    };
    LimitOutcome {
        rule: p.rule.rule.name.clone(),
        index: p.index,
        hit: p.hit,
        decision,
        outcome,
        enforced: p.enforce,
        window: p.limit.policy_window(at),
        dimension: p.rule.rule.cost.clone(),
        quota: matches!(*p.limit, Limit::Quota(_)),
        degrade_to: if outcome == Outcome::Tagged { p.degrade_to.cloned() } else { None },
        grant,
        permit: p.limit.holds_permits(),
        shard: None,
        partition: p.partition,
    }
}

fn never_allowed(limit: &Limit) -> Decision {
    Decision {
        allowed: false,
        limit: limit.capacity(),
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: None,
    }
}

/// How long a client denied by a failing store is asked to wait.
const STORE_ERROR_RETRY: Duration = Duration::from_secs(1);

fn failure_verdict(planned: &[Planned<'_>], error: StoreError) -> Verdict {
    let limits: Limits = planned.iter().map(failed).collect();
    let allowed = !limits.iter().any(|l| l.outcome.denies());
    Verdict { allowed, at: Timestamp::EPOCH, limits, store_error: Some(Arc::new(error)) }
}

/// A limit the failing store could not decide: its rule's policy does (a rule that would fall back
/// locally fails open when no fallback decided it).
fn failed(p: &Planned<'_>) -> LimitOutcome {
    let rule = &p.rule.rule;
    let closed = p.enforce && rule.on_store_error == OnStoreError::FailClosed;
    let decision = Decision {
        allowed: !closed,
        limit: p.limit.capacity(),
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: closed.then_some(STORE_ERROR_RETRY),
    };
    LimitOutcome {
        rule: rule.name.clone(),
        index: p.index,
        hit: p.hit,
        decision,
        outcome: if closed { Outcome::ErrorDenied } else { Outcome::ErrorAllowed },
        enforced: p.enforce,
        window: Duration::ZERO,
        dimension: rule.cost.clone(),
        quota: false,
        degrade_to: None,
        grant: None,
        permit: p.limit.holds_permits(),
        shard: None,
        partition: p.partition,
    }
}

/// The verdict when the store failed and a fallback decided the ops that fall back locally
/// (see [`Applied::degraded`]): those limits by their local decision, the others by their rules'
/// policies. A local decision carries no grant: what it consumed is the fallback's to account for,
/// and nothing of it may be given back to the store.
fn fallback_verdict(
    planned: &[Planned<'_>],
    merged: &[Merged<'_>],
    applied: &Applied,
    error: Arc<StoreError>,
) -> Verdict {
    let limits: Limits = planned
        .iter()
        .map(|p| {
            if p.impossible {
                return decided(p, never_allowed(&p.limit), None, applied.at, false);
            }
            let local = merged[p.op].on_error == OnStoreError::Local && !p.limit.holds_permits();
            match applied.results.get(p.op) {
                Some(r) if local => decided(p, r.decision, None, applied.at, true),
                _ => failed(p),
            }
        })
        .collect();
    let allowed = !limits.iter().any(|l| l.outcome.denies());
    Verdict { allowed, at: applied.at, limits, store_error: Some(error) }
}
