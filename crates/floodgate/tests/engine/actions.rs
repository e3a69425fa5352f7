//! Rule actions: shadow, tag and rollout.

use std::collections::HashSet;

use floodgate::{Action, Outcome, Rule};

use super::{engine, per_minute, request};

#[tokio::test]
async fn a_shadow_rule_never_denies_but_reports_shadow_denied() {
    let (engine, _clock) = engine([
        Rule::new("new-limit", per_minute(1)).key(["user"]).action(Action::Shadow),
        Rule::new("per-user", per_minute(10)).key(["user"]),
    ]);
    let u1 = request(&[("user", "u1")]);
    let mut shadow_outcomes = Vec::new();
    for _ in 0..3 {
        let verdict = engine.check(&u1, 1).await.unwrap();
        assert!(verdict.allowed, "a shadow rule never denies");
        assert_eq!(verdict.retry_after(), None);
        shadow_outcomes.push(verdict.limits[0].outcome);
    }
    assert_eq!(shadow_outcomes, [Outcome::Allowed, Outcome::ShadowDenied, Outcome::ShadowDenied]);
    let enforced = engine.peek(&u1, 1).await.unwrap();
    assert_eq!(enforced.limits[1].decision.remaining, 10 - 3 - 1, "the requests passed and were counted");
}

/// A rule that does not enforce (shadow, tag, outside its rollout) is never one of the verdict's
/// enforced limits, also while its limit still allows; so it is never advertised to the client as
/// the most restrictive limit (`RateLimit` headers), which would reveal a limit not in force.
#[tokio::test]
async fn a_non_enforced_rule_that_allows_is_not_listed_as_enforced() {
    let (engine, _clock) = engine([
        Rule::new("shadowed", per_minute(1)).key(["user"]).action(Action::Shadow),
        Rule::new("tagging", per_minute(1)).key(["user"]).action(Action::Tag),
        Rule::new("not-rolled-out", per_minute(1)).key(["user"]).rollout(0.0),
        Rule::new("per-user", per_minute(10)).key(["user"]),
    ]);
    let verdict = engine.check(&request(&[("user", "u1")]), 1).await.unwrap();
    assert!(
        verdict.limits.iter().all(|l| l.outcome == Outcome::Allowed),
        "every limit allows the first request"
    );
    assert_eq!(verdict.enforced().map(|l| &*l.rule).collect::<Vec<_>>(), ["per-user"]);
    assert_eq!(verdict.most_restrictive().map(|l| &*l.rule), Some("per-user"));
}

#[tokio::test]
async fn a_tag_rule_allows_and_tags_the_request() {
    let (engine, _clock) = engine([Rule::new("risky", per_minute(2)).key(["ip"]).action(Action::Tag)]);
    let ip = request(&[("ip", "192.0.2.1")]);
    for _ in 0..2 {
        let verdict = engine.check(&ip, 1).await.unwrap();
        assert_eq!(verdict.limits[0].outcome, Outcome::Allowed);
        assert_eq!(verdict.tags().count(), 0, "within the limit: no tag");
    }
    let verdict = engine.check(&ip, 1).await.unwrap();
    assert!(verdict.allowed, "a tag rule never denies");
    assert_eq!(verdict.limits[0].outcome, Outcome::Tagged);
    assert_eq!(verdict.tags().collect::<Vec<_>>(), ["risky"]);
}

/// For each of `users` users, a first and a second request to a rule of limit 1 rolled out to
/// `percent` %: the users whose second request was denied (enforced), checked twice for stability.
async fn enforced_users(percent: f64, users: usize) -> HashSet<usize> {
    let (engine, _clock) = engine([Rule::new("rolling-out", per_minute(1)).key(["user"]).rollout(percent)]);
    let mut enforced = HashSet::new();
    for u in 0..users {
        let user = request(&[("user", &format!("user-{u}"))]);
        assert!(engine.check(&user, 1).await.unwrap().allowed, "{percent}%: the first request passes");
        let second = engine.check(&user, 1).await.unwrap();
        let third = engine.check(&user, 1).await.unwrap();
        assert_eq!(second.limits[0].outcome, third.limits[0].outcome, "{percent}%: user-{u} switched sides");
        match second.limits[0].outcome {
            Outcome::Denied => assert!(enforced.insert(u)),
            Outcome::ShadowDenied => assert!(second.allowed, "{percent}%: a shadowed key passes"),
            other => panic!("{percent}%: user-{u}'s second request: {other:?}"),
        }
    }
    enforced
}

#[tokio::test]
async fn rollout_enforces_a_stable_share_of_keys() {
    const USERS: usize = 400;
    assert!(enforced_users(0.0, USERS).await.is_empty(), "0%: no key is enforced");
    assert_eq!(enforced_users(100.0, USERS).await.len(), USERS, "100%: every key is enforced");
    let half = enforced_users(50.0, USERS).await;
    assert!(
        (150..=250).contains(&half.len()),
        "50%: about half of {USERS} keys enforced, not {}",
        half.len()
    );
    assert_eq!(
        enforced_users(50.0, USERS).await,
        half,
        "the same keys on another engine: the hash is stable"
    );
}
