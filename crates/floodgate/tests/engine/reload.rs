//! `set_policy`: counters carry over by rule name and key; a new algorithm starts afresh.

use std::time::Duration;

use floodgate::{Limit, Policy, Rule};
use floodgate_core::calendar::Period;
use floodgate_core::{Calendar, FixedWindow, Gcra, Quota, Rate, SlidingLog, TokenBucket};

use super::{TestEngine, engine, nz, per_minute, request, sliding};

fn per_user(limit: impl Into<Limit>) -> Policy {
    Policy::new([Rule::new("per-user", limit).key(["user"])]).unwrap()
}

/// How many checks of 1 from `user` pass, trying up to 20.
async fn admitted(engine: &TestEngine, user: &str) -> usize {
    let user = request(&[("user", user)]);
    let mut n = 0;
    for _ in 0..20 {
        n += usize::from(engine.check(&user, 1).await.unwrap().allowed);
    }
    n
}

#[tokio::test]
async fn set_policy_keeps_the_counters_of_unchanged_rules() {
    let (engine, _clock) = engine([Rule::new("per-user", per_minute(3)).key(["user"])]);
    let u1 = request(&[("user", "u1")]);
    for _ in 0..2 {
        assert!(engine.check(&u1, 1).await.unwrap().allowed);
    }
    engine.set_policy(per_user(per_minute(3)));
    assert_eq!(admitted(&engine, "u1").await, 1, "2 of 3 were used before the reload");
    assert_eq!(admitted(&engine, "u2").await, 3);
}

#[tokio::test]
async fn set_policy_applies_a_new_limit_to_the_existing_counters() {
    let (engine, _clock) = engine([Rule::new("per-user", per_minute(3)).key(["user"])]);
    assert_eq!(admitted(&engine, "u1").await, 3);
    engine.set_policy(per_user(per_minute(5)));
    assert_eq!(admitted(&engine, "u1").await, 2, "raised to 5, with 3 already used");
    engine.set_policy(per_user(per_minute(4)));
    assert_eq!(admitted(&engine, "u1").await, 0, "lowered to 4, with 5 used");
}

/// A rule that keeps its name and key but changes algorithm starts afresh: the old state means
/// something else under the new algorithm.
async fn assert_algorithm_change_starts_afresh(before: Limit, after: Limit) {
    let (from, to) = (before.algorithm_name(), after.algorithm_name());
    let (engine, _clock) = engine([Rule::new("per-user", before).key(["user"])]);
    assert_eq!(admitted(&engine, "u1").await, 3, "{from}: 3 of 3");
    engine.set_policy(per_user(after));
    assert_eq!(admitted(&engine, "u1").await, 3, "{from} → {to}: the rule starts afresh");
}

#[tokio::test]
async fn changing_a_rules_algorithm_starts_it_afresh() {
    let minute = Duration::from_secs(60);
    let bucket = TokenBucket::try_new(Rate::per_minute(nz(3)), nz(3)).unwrap();
    let log = SlidingLog::try_new(nz(3), minute).unwrap();
    assert_algorithm_change_starts_afresh(sliding(3, minute), per_minute(3)).await;
    assert_algorithm_change_starts_afresh(per_minute(3), log.into()).await;
    assert_algorithm_change_starts_afresh(log.into(), bucket.into()).await;
    assert_algorithm_change_starts_afresh(bucket.into(), sliding(3, minute)).await;
}

/// Token bucket and GCRA keep the same kind of state (a theoretical arrival time) in the memory
/// store; switching one for the other must still start the rule afresh.
#[tokio::test]
async fn changing_token_bucket_to_gcra_starts_the_rule_afresh() {
    let rate = Rate::per_minute(nz(3));
    let bucket = TokenBucket::try_new(rate, nz(3)).unwrap();
    let gcra = Gcra::try_new(rate, nz(3)).unwrap();
    assert_algorithm_change_starts_afresh(bucket.into(), gcra.into()).await;
}

/// Fixed window and quota keep the same kind of state (a period start and a count) in the memory
/// store; a daily fixed window replaced by a daily quota must still start the rule afresh.
#[tokio::test]
async fn changing_fixed_window_to_quota_starts_the_rule_afresh() {
    let daily_window = FixedWindow::try_new(nz(3), Duration::from_secs(86_400)).unwrap();
    let daily_quota = Quota::new(nz(3), Calendar::utc(Period::Day));
    assert_algorithm_change_starts_afresh(daily_window.into(), daily_quota.into()).await;
}
