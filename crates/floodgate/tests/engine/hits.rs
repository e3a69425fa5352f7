//! Requests of several hits (Envoy's descriptors): one store call, all-or-nothing, no refunds.

use floodgate::{Engine, Hit, MemoryConfig, MemoryStore, Outcome, Policy, Rule};
use floodgate_core::ManualClock;
use floodgate_testkit::{CountingStore, START};

use super::{per_minute, request};

fn counted(
    rules: impl IntoIterator<Item = Rule>,
) -> (Engine<CountingStore<MemoryStore<ManualClock>>>, CountingStore<MemoryStore<ManualClock>>) {
    let store =
        CountingStore::new(MemoryStore::with_config(MemoryConfig::default(), ManualClock::new(START)));
    (Engine::new(Policy::new(rules).expect("a valid policy"), store.clone()), store)
}

#[tokio::test]
async fn a_request_whose_second_hit_is_over_its_limit_takes_nothing_from_the_first_in_one_store_call() {
    let (engine, store) = counted([
        Rule::new("per-user", per_minute(5)).key(["user"]),
        Rule::new("per-path", per_minute(1)).key(["path"]),
    ]);
    let (user, path) = (request(&[("user", "u1")]), request(&[("path", "/expensive")]));
    let hits = [Hit::new(&user, 1), Hit::new(&path, 1)];

    let first = engine.check_hits(&hits).await.unwrap();
    assert!(first.allowed);
    assert_eq!(store.calls().applies, 1);

    for n in 2..=4 {
        let denied = engine.check_hits(&hits).await.unwrap();
        assert!(!denied.allowed);
        assert!(denied.hit_allowed(0), "the user hit was within its own limit");
        assert!(!denied.hit_allowed(1));
        let user_limit = denied.of_hit(0).next().unwrap();
        assert_eq!((&*user_limit.rule, user_limit.decision.remaining), ("per-user", 4), "nothing taken");
        assert_eq!(user_limit.grant, None);
        let calls = store.calls();
        assert_eq!((calls.applies, calls.refunds), (n, 0), "one store call per request, no refunds");
    }
    // The user's limit lost only the admitted request: a peek of 1 more leaves 5 - 1 - 1.
    let alone = engine.peek(&user, 1).await.unwrap();
    assert_eq!(alone.limits[0].decision.remaining, 3);
}

#[tokio::test]
async fn hits_sharing_a_key_are_one_op_of_their_summed_cost() {
    let (engine, store) = counted([Rule::new("per-user", per_minute(5)).key(["user"])]);
    let u1 = request(&[("user", "u1")]);
    let verdict = engine.check_hits(&[Hit::new(&u1, 2), Hit::new(&u1, 2)]).await.unwrap();
    assert!(verdict.allowed);
    assert_eq!(store.calls().ops, 1, "one key, one op");
    let hits: Vec<(usize, u64)> = verdict.limits.iter().map(|l| (l.hit, l.decision.remaining)).collect();
    assert_eq!(hits, [(0, 1), (1, 1)], "both hits report the key after the summed cost");
    assert!(verdict.limits[0].grant.is_some_and(|g| g.cost == 4), "the first carries the grant");
    assert_eq!(verdict.limits[1].grant, None, "given back once, not twice");

    // 1 left: two hits of 1 each are 2, over the limit; nothing is taken.
    let denied = engine.check_hits(&[Hit::new(&u1, 1), Hit::new(&u1, 1)]).await.unwrap();
    assert!(!denied.allowed);
    assert!(engine.check(&u1, 1).await.unwrap().allowed, "the last unit was still there");
}

#[tokio::test]
async fn a_cost_no_limit_can_grant_denies_a_request_of_hits_and_takes_nothing() {
    let (engine, store) = counted([
        Rule::new("per-user", per_minute(5)).key(["user"]),
        Rule::new("per-path", per_minute(10)).key(["path"]),
    ]);
    let (user, path) = (request(&[("user", "u1")]), request(&[("path", "/p")]));
    let verdict = engine.check_hits(&[Hit::new(&user, 1), Hit::new(&path, 11)]).await.unwrap();
    assert!(!verdict.allowed);
    let never = verdict.of_hit(1).next().unwrap();
    assert_eq!(never.outcome, Outcome::Denied);
    assert_eq!(never.decision.retry_after, None, "waiting would not help");
    assert!(verdict.hit_allowed(0));
    assert_eq!(store.calls().ops, 1, "only the user limit went to the store");
    assert_eq!(engine.peek(&user, 1).await.unwrap().limits[0].decision.remaining, 4, "nothing taken");

    // Two hits of one key whose summed cost no window grants: denied as well.
    let twice = engine.check_hits(&[Hit::new(&user, 3), Hit::new(&user, 3)]).await.unwrap();
    assert!(!twice.allowed);
    // One hit alone through `check`: an error, as for the HTTP API.
    assert!(engine.check(&path, 11).await.is_err());
}

#[tokio::test]
async fn limit_outcomes_name_their_rule_position_and_hit() {
    let (engine, _) = counted([
        Rule::new("per-tenant", per_minute(100)).key(["tenant"]),
        Rule::new("per-user", per_minute(5)).key(["user"]),
    ]);
    let (a, b) = (request(&[("user", "u1")]), request(&[("tenant", "t1"), ("user", "u2")]));
    let verdict = engine.check_hits(&[Hit::new(&a, 1), Hit::new(&b, 1)]).await.unwrap();
    let seen: Vec<(&str, usize, usize)> = verdict.limits.iter().map(|l| (&*l.rule, l.index, l.hit)).collect();
    assert_eq!(seen, [("per-user", 1, 0), ("per-tenant", 0, 1), ("per-user", 1, 1)]);
    assert_eq!(verdict.most_restrictive_of_hit(0).map(|l| &*l.rule), Some("per-user"));
}

/// envoyproxy/ratelimit's example 7: two descriptors of one request match a named limit and one
/// that replaces it; only the replacing one applies, and the replaced limit is not charged.
#[tokio::test]
async fn a_rule_replaced_by_another_rule_of_the_request_is_neither_checked_nor_charged() {
    let (engine, store) = counted([
        Rule::new("specific_limit", per_minute(5)).when("key_1", "value_1").key(["user"]),
        Rule::new("other", per_minute(10))
            .when("key_2", "value_2")
            .key(["user"])
            .replaces(["specific_limit"]),
    ]);
    let a = request(&[("key_1", "value_1"), ("user", "bkthomps")]);
    let b = request(&[("key_2", "value_2"), ("user", "bkthomps")]);
    let both = engine.check_hits(&[Hit::new(&a, 1), Hit::new(&b, 1)]).await.unwrap();
    let applied: Vec<&str> = both.limits.iter().map(|l| &*l.rule).collect();
    assert_eq!(applied, ["other"], "the replaced limit is not applied");
    assert_eq!(store.calls().ops, 1);
    // Alone, the named limit applies, untouched by the request that replaced it: 5 left before it.
    let alone = engine.check(&a, 1).await.unwrap();
    assert_eq!((&*alone.limits[0].rule, alone.limits[0].decision.remaining), ("specific_limit", 4));
}
