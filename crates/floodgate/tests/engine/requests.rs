//! Requests over several rules: all-or-nothing, the way the README's chat example counts.

use std::time::Duration;

use floodgate::{Outcome, Rule};

use super::{engine, per_minute, request, sliding};

/// The README's tour: per user 10 a minute, per tenant 1000 an hour, both sliding windows. Twelve
/// requests from one user: ten pass, two are denied by the user limit, and the tenant is charged
/// for exactly the ten that passed.
#[tokio::test]
async fn twelve_chat_requests_admit_ten_and_charge_the_tenant_for_ten() {
    let (engine, clock) = engine([
        Rule::new("chat-per-user", sliding(10, Duration::from_secs(60)))
            .when("route", "POST /chat")
            .key(["user"]),
        Rule::new("chat-per-tenant", sliding(1000, Duration::from_secs(3600))).key(["tenant"]),
    ]);
    let chat = request(&[("route", "POST /chat"), ("user", "u1"), ("tenant", "t1")]);
    let mut outcomes = Vec::new();
    for _ in 0..12 {
        clock.advance(Duration::from_secs(1));
        let verdict = engine.check(&chat, 1).await.unwrap();
        assert_eq!(verdict.limits.len(), 2, "both rules apply");
        outcomes.push((verdict.allowed, verdict.limits[0].outcome, verdict.limits[1].outcome));
        if !verdict.allowed {
            assert_eq!(
                verdict.retry_after(),
                verdict.limits[0].decision.retry_after,
                "the user limit's wait"
            );
            assert!(verdict.retry_after().is_some());
        }
    }
    let pass = (true, Outcome::Allowed, Outcome::Allowed);
    let user_denies = (false, Outcome::Denied, Outcome::Allowed);
    assert_eq!(outcomes, [[pass; 10].as_slice(), &[user_denies; 2]].concat());

    let tenant = engine.peek(&request(&[("tenant", "t1")]), 1).await.unwrap();
    assert_eq!(tenant.limits.len(), 1, "without route and user only the tenant rule applies");
    assert_eq!(&*tenant.limits[0].rule, "chat-per-tenant");
    assert_eq!(
        tenant.limits[0].decision.remaining,
        1000 - 10 - 1,
        "the tenant paid for the ten admitted only"
    );
}

/// A request denied by one rule consumes nothing from the others, whichever rule denies.
#[tokio::test]
async fn a_denied_request_consumes_nothing_from_any_rule() {
    let (engine, _clock) = engine([
        Rule::new("per-user", per_minute(2)).key(["user"]),
        Rule::new("per-tenant", per_minute(5)).key(["tenant"]),
    ]);
    let as_user = |user: &str, tenant: &str| request(&[("user", user), ("tenant", tenant)]);

    // The user limit denies: the tenant is not charged.
    for _ in 0..2 {
        assert!(engine.check(&as_user("u1", "t1"), 1).await.unwrap().allowed);
    }
    let denied = engine.check(&as_user("u1", "t1"), 1).await.unwrap();
    assert_eq!(
        denied.limits.iter().map(|l| l.outcome).collect::<Vec<_>>(),
        [Outcome::Denied, Outcome::Allowed]
    );
    assert!(denied.limits.iter().all(|l| l.grant.is_none()), "a denied request holds no grant");
    let t1 = engine.peek(&request(&[("tenant", "t1")]), 1).await.unwrap();
    assert_eq!(t1.limits[0].decision.remaining, 5 - 2 - 1, "t1 paid for two requests, not three");

    // The tenant limit denies: the user is not charged.
    for user in ["u2", "u2", "u3", "u3", "u4"] {
        assert!(engine.check(&as_user(user, "t2"), 1).await.unwrap().allowed, "{user}");
    }
    let denied = engine.check(&as_user("u4", "t2"), 1).await.unwrap();
    assert_eq!(
        denied.limits.iter().map(|l| l.outcome).collect::<Vec<_>>(),
        [Outcome::Allowed, Outcome::Denied]
    );
    let u4 = engine.peek(&request(&[("user", "u4")]), 1).await.unwrap();
    assert!(u4.allowed, "u4 paid for one request, not two");
    assert_eq!(u4.limits[0].decision.remaining, 0);
}
