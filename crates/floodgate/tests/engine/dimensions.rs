//! Cost dimensions: each rule counts its own (`requests` by default, or a name such as `tokens`),
//! a call costs per dimension, and the rules of one call decide together, all-or-nothing.

use floodgate::{Costs, EngineError, Hit, Mode, Rule, RuleError};
use floodgate_core::CostError;

use super::{engine, per_minute, request};

/// 3 requests and 1000 tokens a minute per tenant.
fn rpm_and_tpm() -> [Rule; 2] {
    [
        Rule::new("rpm", per_minute(3)).key(["tenant"]),
        Rule::new("tpm", per_minute(1000)).key(["tenant"]).cost("tokens"),
    ]
}

fn remaining(verdict: &floodgate::Verdict, rule: &str) -> u64 {
    verdict.limits.iter().find(|l| &*l.rule == rule).expect("the rule applied").decision.remaining
}

#[tokio::test]
async fn each_rule_takes_the_cost_of_its_own_dimension() {
    let (engine, _clock) = engine(rpm_and_tpm());
    let t1 = request(&[("tenant", "t1")]);
    let costs = Costs::new().with("requests", 1).with("tokens", 400);
    let verdict = engine.decide(Mode::Check, Hit::with_costs(&t1, &costs)).await.unwrap();
    assert!(verdict.allowed);
    assert_eq!((remaining(&verdict, "rpm"), remaining(&verdict, "tpm")), (2, 600));
}

#[tokio::test]
async fn a_denial_by_tokens_consumes_no_request_and_no_token() {
    let (engine, _clock) = engine(rpm_and_tpm());
    let t1 = request(&[("tenant", "t1")]);
    let big = Costs::new().with("requests", 1).with("tokens", 700);
    assert!(engine.decide(Mode::Check, Hit::with_costs(&t1, &big)).await.unwrap().allowed);
    let denied = engine.decide(Mode::Check, Hit::with_costs(&t1, &big)).await.unwrap();
    assert!(!denied.allowed, "700 more tokens do not fit in the 300 left");
    let tpm = denied.limits.iter().find(|l| &*l.rule == "tpm").unwrap();
    assert!(!tpm.decision.allowed && tpm.decision.retry_after.is_some());
    let rpm = denied.limits.iter().find(|l| &*l.rule == "rpm").unwrap();
    assert!(rpm.decision.allowed && rpm.grant.is_none(), "rpm allowed but took nothing");
    let peek = engine
        .decide(Mode::Peek, Hit::with_costs(&t1, &Costs::new().with("requests", 1).with("tokens", 1)))
        .await;
    let peek = peek.unwrap();
    assert_eq!((remaining(&peek, "rpm"), remaining(&peek, "tpm")), (1, 299), "the denial took nothing");
}

#[tokio::test]
async fn a_plain_cost_is_requests_and_token_rules_do_not_apply_to_it() {
    let (engine, _clock) = engine(rpm_and_tpm());
    let t1 = request(&[("tenant", "t1")]);
    let verdict = engine.check(&t1, 2).await.unwrap();
    assert_eq!(verdict.limits.len(), 1, "only rpm applies: {verdict:?}");
    assert_eq!(remaining(&verdict, "rpm"), 1);
}

#[tokio::test]
async fn a_rule_whose_dimension_the_call_leaves_out_does_not_apply() {
    let (engine, _clock) = engine(rpm_and_tpm());
    let t1 = request(&[("tenant", "t1")]);
    // A report of the tokens a response used, after its check counted the request.
    let tokens = Costs::new().with("tokens", 250);
    let reported = engine.decide(Mode::Report, Hit::with_costs(&t1, &tokens)).await.unwrap();
    assert_eq!(reported.limits.len(), 1);
    assert_eq!(remaining(&reported, "tpm"), 750);
    let zero_requests = Costs::new().with("requests", 0).with("tokens", 50);
    let verdict = engine.decide(Mode::Check, Hit::with_costs(&t1, &zero_requests)).await.unwrap();
    assert_eq!(verdict.limits.len(), 1, "0 requests: rpm does not apply");
    let peek = engine.peek(&t1, 1).await.unwrap();
    assert_eq!(
        remaining(&peek, "rpm"),
        2,
        "no request was counted (a peek shows what would remain after it)"
    );
}

#[tokio::test]
async fn costs_of_nothing_are_an_error_and_a_cost_above_capacity_names_the_rule() {
    let (engine, _clock) = engine(rpm_and_tpm());
    let t1 = request(&[("tenant", "t1")]);
    for costs in [Costs::new(), Costs::new().with("tokens", 0)] {
        let result = engine.decide(Mode::Check, Hit::with_costs(&t1, &costs)).await;
        assert!(matches!(result, Err(EngineError::Cost { source: CostError::Zero, .. })), "{result:?}");
    }
    let huge = Costs::new().with("requests", 1).with("tokens", 1001);
    match engine.decide(Mode::Check, Hit::with_costs(&t1, &huge)).await {
        Err(EngineError::Cost {
            rule,
            source: CostError::ExceedsCapacity { cost: 1001, capacity: 1000 },
        }) => {
            assert_eq!(&*rule, "tpm");
        }
        other => panic!("1001 tokens against 1000: {other:?}"),
    }
    assert_eq!(remaining(&engine.peek(&t1, 1).await.unwrap(), "rpm"), 2, "nothing consumed");
}

#[test]
fn a_rule_must_count_a_valid_dimension() {
    let refused = floodgate::Policy::new([Rule::new("tpm", per_minute(10)).cost("Tokens")]).unwrap_err();
    assert_eq!(refused, RuleError::CostDimension { rule: "tpm".into(), dimension: "Tokens".into() });
}
