//! Limits that vary with a descriptor (`by: plan`) and namespaced policies (Envoy domains).

use floodgate::{Action, ByDescriptor, Engine, MemoryConfig, MemoryStore, Outcome, Policy, Rule};
use floodgate_core::ManualClock;
use floodgate_testkit::START;

use super::{engine, per_minute, request};

fn plans() -> Rule {
    Rule::new("per-tenant", per_minute(1)).key(["tenant"]).vary_by(
        ByDescriptor::new("plan")
            .variant("free", per_minute(2), None)
            .variant("pro", per_minute(5), None)
            .variant("trial", per_minute(1), Some(Action::Tag)),
    )
}

#[tokio::test]
async fn each_plan_gets_its_own_limit_and_unlisted_plans_the_rules_own() {
    let (e, _) = engine([plans()]);
    let count = |plan: &'static str, tenant: &'static str| {
        let e = &e;
        async move {
            let mut n = 0;
            while e.check(&request(&[("tenant", tenant), ("plan", plan)]), 1).await.unwrap().allowed {
                n += 1;
                assert!(n < 100, "never denied");
            }
            n
        }
    };
    assert_eq!(count("free", "a").await, 2);
    assert_eq!(count("pro", "b").await, 5);
    assert_eq!(count("gold", "c").await, 1, "an unlisted plan gets the rule's own limit");
}

#[tokio::test]
async fn a_variant_may_change_the_action() {
    let (e, _) = engine([plans()]);
    let trial = request(&[("tenant", "t"), ("plan", "trial")]);
    assert!(e.check(&trial, 1).await.unwrap().allowed);
    let v = e.check(&trial, 1).await.unwrap();
    assert!(v.allowed, "the trial variant tags instead of denying");
    assert_eq!(v.limits[0].outcome, Outcome::Tagged);
}

#[tokio::test]
async fn a_degrading_variant_names_its_model_past_the_limit_only() {
    let rule = Rule::new("monthly", per_minute(1)).key(["tenant"]).vary_by(
        ByDescriptor::new("plan").degrading("free", per_minute(1), "gpt-4o-mini").variant(
            "enterprise",
            per_minute(1),
            Some(Action::Deny),
        ),
    );
    let (e, _) = engine([rule]);
    let free = request(&[("tenant", "f"), ("plan", "free")]);
    let within = e.check(&free, 1).await.unwrap();
    assert_eq!((within.allowed, within.degrade_to()), (true, None));
    let over = e.check(&free, 1).await.unwrap();
    assert!(over.allowed, "degrades instead of denying");
    assert_eq!(over.degrade_to(), Some("gpt-4o-mini"));
    assert_eq!(over.limits[0].outcome, Outcome::Tagged);
    assert_eq!(over.tags().collect::<Vec<_>>(), ["monthly"]);

    let enterprise = request(&[("tenant", "e"), ("plan", "enterprise")]);
    assert!(e.check(&enterprise, 1).await.unwrap().allowed);
    let refused = e.check(&enterprise, 1).await.unwrap();
    assert_eq!((refused.allowed, refused.degrade_to()), (false, None));
}

#[tokio::test]
async fn usage_carries_over_when_a_key_changes_plan() {
    let (e, _) = engine([plans()]);
    for _ in 0..2 {
        assert!(e.check(&request(&[("tenant", "t"), ("plan", "free")]), 1).await.unwrap().allowed);
    }
    let upgraded = e.check(&request(&[("tenant", "t"), ("plan", "pro")]), 1).await.unwrap();
    assert!(upgraded.allowed);
    assert_eq!(upgraded.limits[0].decision.remaining, 2, "5 minus the 2 used on free minus this one");
}

#[tokio::test]
async fn only_listed_excludes_other_values() {
    let rule = Rule::new("per-tenant", per_minute(1))
        .key(["tenant"])
        .vary_by(ByDescriptor::new("plan").variant("free", per_minute(2), None).only_listed());
    let (e, _) = engine([rule]);
    let v = e.check(&request(&[("tenant", "t"), ("plan", "enterprise")]), 1).await.unwrap();
    assert!(v.limits.is_empty(), "not subject to the rule");
    let v = e.check(&request(&[("tenant", "t")]), 1).await.unwrap();
    assert!(v.limits.is_empty(), "no plan: not subject to the rule");
}

#[tokio::test]
async fn namespaces_keep_equal_rule_names_apart_on_one_store() {
    let clock = ManualClock::new(START);
    let store = MemoryStore::with_config(MemoryConfig::default(), clock);
    let rule = || Rule::new("per-user", per_minute(1)).key(["user"]);
    let a = Engine::new(Policy::in_namespace("edge", [rule()]).unwrap(), store.clone());
    let b = Engine::new(Policy::in_namespace("internal", [rule()]).unwrap(), store.clone());
    let plain = Engine::new(Policy::new([rule()]).unwrap(), store);
    let u = request(&[("user", "u1")]);
    assert!(a.check(&u, 1).await.unwrap().allowed);
    assert!(!a.check(&u, 1).await.unwrap().allowed);
    assert!(b.check(&u, 1).await.unwrap().allowed, "another namespace has its own counter");
    assert!(plain.check(&u, 1).await.unwrap().allowed, "and so has the namespace-less policy");
}
