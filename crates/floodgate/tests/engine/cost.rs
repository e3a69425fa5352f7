//! Costs, reports, refunds and permit releases.

use std::time::Duration;

use floodgate::{Action, EngineError, Outcome, Rule};
use floodgate_core::{Concurrency, CostError};

use super::{engine, nz, per_minute, request, sliding};

#[tokio::test]
async fn a_zero_cost_is_an_error_for_check_peek_and_report() {
    let (engine, _clock) = engine([Rule::new("per-user", per_minute(5)).key(["user"])]);
    let u1 = request(&[("user", "u1")]);
    for result in [engine.check(&u1, 0).await, engine.peek(&u1, 0).await, engine.report(&u1, 0).await] {
        assert!(matches!(result, Err(EngineError::Cost { source: CostError::Zero, .. })), "{result:?}");
    }
    assert_eq!(engine.peek(&u1, 5).await.unwrap().limits[0].decision.remaining, 0, "nothing consumed");
}

/// A cost that an enforced rule can never grant is an error, not a denial, and nothing is
/// consumed from any rule, also from those listed before it.
#[tokio::test]
async fn a_cost_above_an_enforced_rules_capacity_is_an_error_and_consumes_nothing() {
    let (engine, _clock) = engine([
        Rule::new("per-tenant", per_minute(100)).key(["tenant"]),
        Rule::new("per-user", per_minute(5)).key(["user"]),
    ]);
    let req = request(&[("tenant", "t1"), ("user", "u1")]);
    for result in [engine.check(&req, 6).await, engine.peek(&req, 6).await] {
        match result {
            Err(EngineError::Cost { rule, source: CostError::ExceedsCapacity { cost: 6, capacity: 5 } }) => {
                assert_eq!(&*rule, "per-user", "the error names the rule");
            }
            other => panic!("a cost of 6 against a limit of 5: {other:?}"),
        }
    }
    let tenant = engine.peek(&request(&[("tenant", "t1")]), 100).await.unwrap();
    assert!(tenant.allowed, "the tenant was not charged for the impossible request");
    assert!(engine.check(&req, 5).await.unwrap().allowed, "the user was not charged either");
}

/// A rule that does not enforce (shadow, tag, or outside its rollout) turns an impossible cost into
/// a would-deny; the request goes on and the enforced rules count it.
#[tokio::test]
async fn a_cost_above_a_non_enforced_rules_capacity_is_no_error() {
    let (engine, _clock) = engine([
        Rule::new("shadowed", per_minute(5)).key(["user"]).action(Action::Shadow),
        Rule::new("tagging", per_minute(5)).key(["user"]).action(Action::Tag),
        Rule::new("not-rolled-out", per_minute(5)).key(["user"]).rollout(0.0),
        Rule::new("per-tenant", per_minute(100)).key(["tenant"]),
    ]);
    let req = request(&[("tenant", "t1"), ("user", "u1")]);
    let verdict = engine.check(&req, 6).await.unwrap();
    assert!(verdict.allowed);
    let outcomes: Vec<Outcome> = verdict.limits.iter().map(|l| l.outcome).collect();
    assert_eq!(outcomes, [Outcome::ShadowDenied, Outcome::Tagged, Outcome::ShadowDenied, Outcome::Allowed]);
    assert!(verdict.limits[..3].iter().all(|l| l.grant.is_none()), "nothing taken from the would-deny rules");
    let tenant = engine.peek(&request(&[("tenant", "t1")]), 1).await.unwrap();
    assert_eq!(tenant.limits[0].decision.remaining, 100 - 6 - 1, "the tenant counted the cost of 6");
}

#[tokio::test]
async fn a_report_past_the_limit_never_denies_and_the_next_check_is_denied() {
    let (engine, _clock) = engine([Rule::new("tokens", per_minute(5)).key(["user"])]);
    let u1 = request(&[("user", "u1")]);
    let reported = engine.report(&u1, 8).await.unwrap();
    assert!(reported.allowed, "a report never denies, whatever the cost");
    assert_eq!(reported.limits[0].outcome, Outcome::Allowed);
    assert_eq!(reported.limits[0].decision.remaining, 0);
    assert!(engine.report(&u1, 1).await.unwrap().allowed, "nor past the limit");
    let verdict = engine.check(&u1, 1).await.unwrap();
    assert!(!verdict.allowed, "the reported cost counts");
    assert_eq!(verdict.limits[0].outcome, Outcome::Denied);
}

/// `report` accepts any cost, also above a limit's capacity, when several rules apply: every one
/// of them is charged in full and none denies.
#[tokio::test]
async fn a_report_of_any_cost_over_several_rules_is_charged_to_all_of_them() {
    let (engine, _clock) = engine([
        Rule::new("per-user", sliding(5, Duration::from_secs(60))).key(["user"]),
        Rule::new("per-tenant", per_minute(100)).key(["tenant"]),
    ]);
    let req = request(&[("tenant", "t1"), ("user", "u1")]);
    let reported = engine.report(&req, 8).await.unwrap();
    assert!(reported.allowed, "a report never denies");
    assert_eq!(reported.limits[0].decision.remaining, 0, "8 reported against a limit of 5");
    assert_eq!(reported.limits[1].decision.remaining, 100 - 8);
    assert!(!engine.check(&req, 1).await.unwrap().allowed, "the user limit counted all 8");
}

#[tokio::test]
async fn a_refund_restores_what_the_check_took_from_every_rule() {
    let (engine, _clock) = engine([
        Rule::new("per-user", per_minute(5)).key(["user"]),
        Rule::new("per-tenant", per_minute(8)).key(["tenant"]),
    ]);
    let req = request(&[("tenant", "t1"), ("user", "u1")]);
    let reservation = engine.check(&req, 4).await.unwrap();
    assert!(reservation.allowed);
    assert!(!engine.peek(&req, 5).await.unwrap().allowed, "the reservation holds 4 of the user's 5");
    engine.refund(&req, &reservation).await.unwrap();
    let after = engine.peek(&req, 5).await.unwrap();
    assert!(after.allowed, "refunded: the user has 5 again");
    assert_eq!(after.limits[1].decision.remaining, 8 - 5, "and the tenant 8");
}

/// `release` gives back concurrency permits and nothing else: the other limits of the request
/// keep what it consumed.
#[tokio::test]
async fn release_frees_the_concurrency_permit_and_nothing_else() {
    let in_flight = Concurrency::try_new(nz(1), Duration::from_secs(30)).unwrap();
    let (engine, _clock) = engine([
        Rule::new("in-flight", in_flight).key(["user"]),
        Rule::new("per-user", per_minute(5)).key(["user"]),
    ]);
    let u1 = request(&[("user", "u1")]);
    let first = engine.check(&u1, 1).await.unwrap();
    assert!(first.allowed && first.holds_permits());
    let busy = engine.check(&u1, 1).await.unwrap();
    assert!(!busy.allowed, "one request in flight at a time");
    assert_eq!(busy.limits[0].decision.retry_after, Some(Duration::from_secs(30)), "until the lease ends");
    assert!(!busy.holds_permits());

    engine.release(&u1, &first).await.unwrap();
    let second = engine.check(&u1, 1).await.unwrap();
    assert!(second.allowed, "the released permit is free again");
    assert_eq!(second.limits[1].decision.remaining, 5 - 2, "the release refunded nothing from per-user");
    engine.release(&u1, &first).await.unwrap();
    assert!(!engine.check(&u1, 1).await.unwrap().allowed, "releasing a verdict twice frees nothing more");
}
