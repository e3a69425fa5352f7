//! Which rules apply to a request, and under which key.

use floodgate::{Condition, Rule};

use super::{engine, per_minute, request};

/// One `(name, value)` descriptor.
type Descriptor = (&'static str, &'static str);

/// The names of the rules a verdict covers.
fn applied(verdict: &floodgate::Verdict) -> Vec<&str> {
    verdict.limits.iter().map(|l| &*l.rule).collect()
}

#[tokio::test]
async fn a_rule_applies_only_when_its_conditions_hold() {
    let (engine, _clock) = engine([
        Rule::new("chat", per_minute(1)).when("route", "POST /chat").key(["user"]),
        Rule::new("paid", per_minute(1))
            .when_condition("plan", Condition::OneOf(vec!["pro".into(), "enterprise".into()]))
            .key(["user"]),
        Rule::new("debugging", per_minute(1))
            .when_condition("header.x-debug", Condition::Present)
            .key(["user"]),
        Rule::new("chat-on-pro", per_minute(1)).when("route", "POST /chat").when("plan", "pro").key(["user"]),
    ]);
    let cases: [(&[Descriptor], &[&str]); 6] = [
        (&[("user", "u1")], &[]),
        (&[("user", "u1"), ("route", "GET /chat")], &[]),
        (&[("user", "u1"), ("route", "POST /chat")], &["chat"]),
        (&[("user", "u1"), ("plan", "free"), ("header.x-debug", "")], &["debugging"]),
        (&[("user", "u1"), ("plan", "enterprise")], &["paid"]),
        (&[("user", "u1"), ("plan", "pro"), ("route", "POST /chat")], &["chat", "paid", "chat-on-pro"]),
    ];
    for (descriptors, expected) in cases {
        let verdict = engine.peek(&request(descriptors), 1).await.unwrap();
        assert_eq!(applied(&verdict), expected, "rules applied to {descriptors:?}");
        assert!(verdict.allowed);
    }
}

/// A request lacking a descriptor of a rule's key is not subject to that rule: it is neither
/// limited nor counted by it. The other rules still apply.
#[tokio::test]
async fn a_request_missing_a_key_descriptor_is_not_subject_to_the_rule() {
    let (engine, _clock) = engine([
        Rule::new("per-user-and-route", per_minute(1)).key(["user", "route"]),
        Rule::new("per-tenant", per_minute(100)).key(["tenant"]),
    ]);
    let anonymous = request(&[("tenant", "t1"), ("route", "GET /")]);
    for _ in 0..5 {
        let verdict = engine.check(&anonymous, 1).await.unwrap();
        assert!(verdict.allowed, "no user: the per-user rule does not limit");
        assert_eq!(applied(&verdict), ["per-tenant"]);
    }
    let identified = request(&[("tenant", "t1"), ("route", "GET /"), ("user", "u1")]);
    let first = engine.check(&identified, 1).await.unwrap();
    assert!(first.allowed, "the anonymous requests were not counted under any user");
    assert_eq!(applied(&first), ["per-user-and-route", "per-tenant"]);
    assert!(!engine.check(&identified, 1).await.unwrap().allowed, "now the per-user rule limits");
    let other_route = request(&[("tenant", "t1"), ("route", "GET /other"), ("user", "u1")]);
    assert!(engine.check(&other_route, 1).await.unwrap().allowed, "a key of user and route: another counter");
}

/// A rule keyed by no descriptor (`[]`, or the name `global`) counts every request it matches
/// under one key, whoever sends it.
#[tokio::test]
async fn a_global_rule_counts_every_request_under_one_key() {
    for key in [&[][..], &["global"][..]] {
        let (engine, _clock) = engine([Rule::new("everyone", per_minute(3)).key(key.iter().copied())]);
        for user in ["u1", "u2", "u3"] {
            assert!(engine.check(&request(&[("user", user)]), 1).await.unwrap().allowed, "{key:?}: {user}");
        }
        let fourth = engine.check(&request(&[("user", "u4"), ("tenant", "t9")]), 1).await.unwrap();
        assert!(!fourth.allowed, "{key:?}: the fourth request, from anyone, is over the global limit");
        assert!(!engine.check(&request(&[]), 1).await.unwrap().allowed, "{key:?}: also with no descriptors");
    }
}
