//! Store failures: each rule's `on_store_error` decides. A memory store with `max_keys: 0` and
//! `OnFull::Reject` refuses every new key, so every request meets a store error.

use std::time::Duration;

use floodgate::{Action, MemoryConfig, OnFull, OnStoreError, Outcome, Rule, StoreError};

use super::{TestEngine, engine_with, per_minute, request};

fn failing_engine(rules: impl IntoIterator<Item = Rule>) -> TestEngine {
    engine_with(MemoryConfig { max_keys: 0, on_full: OnFull::Reject, ..MemoryConfig::default() }, rules).0
}

#[tokio::test]
async fn a_failing_store_lets_requests_through_by_default() {
    let engine = failing_engine([Rule::new("per-user", per_minute(1)).key(["user"])]);
    let u1 = request(&[("user", "u1")]);
    for _ in 0..3 {
        let verdict = engine.check(&u1, 1).await.unwrap();
        assert!(verdict.allowed, "fail open is the default");
        assert_eq!(verdict.limits[0].outcome, Outcome::ErrorAllowed);
        assert!(
            verdict.store_error.as_deref().is_some_and(|e| e.to_string().contains("full")),
            "{:?}",
            verdict.store_error
        );
        assert_eq!(verdict.retry_after(), None);
    }
}

#[tokio::test]
async fn a_fail_closed_rule_denies_while_the_store_fails() {
    let engine = failing_engine([Rule::new("per-user", per_minute(100))
        .key(["user"])
        .on_store_error(OnStoreError::FailClosed)]);
    let verdict = engine.check(&request(&[("user", "u1")]), 1).await.unwrap();
    assert!(!verdict.allowed);
    assert_eq!(verdict.limits[0].outcome, Outcome::ErrorDenied);
    assert!(verdict.store_error.is_some());
    let retry = verdict.retry_after().expect("a denied client is told when to retry");
    assert!(retry >= Duration::from_secs(1), "{retry:?}");
    assert_eq!(verdict.limits[0].decision.retry_after_secs(), Some(1));
}

/// Each rule of the request answers for itself: one fail-closed enforced rule denies the request;
/// a fail-closed rule that does not enforce (shadow) never does.
#[tokio::test]
async fn each_rule_applies_its_own_store_failure_policy() {
    let engine = failing_engine([
        Rule::new("open", per_minute(10)).key(["user"]),
        Rule::new("closed-shadow", per_minute(10))
            .key(["user"])
            .action(Action::Shadow)
            .on_store_error(OnStoreError::FailClosed),
        Rule::new("closed", per_minute(10)).key(["tenant"]).on_store_error(OnStoreError::FailClosed),
    ]);
    let both = engine.check(&request(&[("user", "u1"), ("tenant", "t1")]), 1).await.unwrap();
    let outcomes: Vec<Outcome> = both.limits.iter().map(|l| l.outcome).collect();
    assert_eq!(outcomes, [Outcome::ErrorAllowed, Outcome::ErrorAllowed, Outcome::ErrorDenied]);
    assert!(!both.allowed, "the fail-closed rule denies the request");

    let user_only = engine.check(&request(&[("user", "u1")]), 1).await.unwrap();
    assert!(user_only.allowed, "without the tenant rule, only fail-open and shadow rules apply");
}

/// The store's error reaches the verdict typed: a fallback or a breaker can tell a full store
/// (permanent until keys expire) from a timeout (transient), and read its source.
#[tokio::test]
async fn the_store_error_in_a_verdict_keeps_its_type() {
    let engine = failing_engine([Rule::new("per-user", per_minute(1)).key(["user"])]);
    let verdict = engine.check(&request(&[("user", "u1")]), 1).await.unwrap();
    let error = verdict.store_error.as_deref().expect("the store failed");
    assert!(matches!(error, StoreError::Full { max_keys: 0 }), "{error:?}");
    assert!(!error.is_transient(), "a full store does not heal by retrying");
}
