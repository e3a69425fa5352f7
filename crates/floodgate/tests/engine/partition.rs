//! Partition keys: a rule that advertises them gives each enforced limit the keyed hash of its
//! key, the same for one key, different for two, never the key.

use floodgate::{Action, Descriptors, Limit, PartitionKey, PartitionKeys, Policy, Rule};

use super::{engine, per_minute, request};

fn keys() -> PartitionKeys {
    PartitionKeys::new(b"a test secret of thirty-two bytes!").unwrap()
}

fn user(id: &str) -> Descriptors {
    request(&[("user", id)])
}

async fn pk_of(engine: &super::TestEngine, descriptors: &Descriptors) -> Option<PartitionKey> {
    engine.check(descriptors, 1).await.unwrap().limits[0].partition
}

#[tokio::test]
async fn one_key_has_one_partition_key_and_two_keys_two() {
    let (engine, _) = engine([Rule::new("per-user", per_minute(100)).key(["user"]).partition_key(keys())]);
    let u1 = pk_of(&engine, &user("u1")).await.expect("advertised");
    assert_eq!(pk_of(&engine, &user("u1")).await, Some(u1));
    assert_ne!(pk_of(&engine, &user("u2")).await, Some(u1));
    // The hash of the key as the store sees it, under the rule's secret: `keys().of(key)`.
    assert_eq!(u1, keys().of(b"8:per-user4:user2:u1"));
    let again = PartitionKeys::new(b"a test secret of thirty-two bytes!").unwrap();
    let (other_instance, _) =
        super::engine([Rule::new("per-user", per_minute(100)).key(["user"]).partition_key(again)]);
    assert_eq!(pk_of(&other_instance, &user("u1")).await, Some(u1), "another engine with the same secret");
}

#[tokio::test]
async fn a_rule_that_does_not_advertise_and_a_shadowed_one_carry_none() {
    let (engine, _) = engine([
        Rule::new("plain", per_minute(100)).key(["user"]),
        Rule::new("shadow", per_minute(100)).key(["user"]).action(Action::Shadow).partition_key(keys()),
        Rule::new("half", per_minute(100)).key(["user"]).rollout(0.0).partition_key(keys()),
    ]);
    let verdict = engine.check(&user("u1"), 1).await.unwrap();
    assert_eq!(verdict.limits.len(), 3);
    assert!(verdict.limits.iter().all(|l| l.partition.is_none()), "{verdict:?}");
}

#[tokio::test]
async fn a_sharded_rule_names_its_key_alike_whichever_shard_serves() {
    let rule = Rule::new("hot", per_minute(100)).partition_key(keys()).shards(4);
    let (engine, _) = engine([rule]);
    let mut seen = std::collections::BTreeSet::new();
    let mut shards = std::collections::BTreeSet::new();
    for _ in 0..8 {
        let verdict = engine.check(&Descriptors::new(), 1).await.unwrap();
        seen.insert(format!("{:?}", verdict.limits[0].partition.expect("advertised")));
        shards.insert(verdict.limits[0].shard);
    }
    assert_eq!(shards.len(), 4, "every shard served");
    assert_eq!(seen.len(), 1, "one partition key: {seen:?}");
}

#[tokio::test]
async fn namespaces_and_rules_name_the_same_user_differently() {
    let rule = |name: &str| Rule::new(name.to_owned(), per_minute(100)).key(["user"]).partition_key(keys());
    let (engine, _) = engine([rule("a"), rule("b")]);
    let verdict = engine.check(&user("u1"), 1).await.unwrap();
    assert_ne!(verdict.limits[0].partition, verdict.limits[1].partition);
    let domain = floodgate::Engine::in_memory(Policy::in_namespace("edge", [rule("a")]).unwrap());
    let namespaced = domain.check(&user("u1"), 1).await.unwrap();
    assert_ne!(namespaced.limits[0].partition, verdict.limits[0].partition);
}

#[test]
fn rules_with_other_secrets_differ_and_the_secret_is_not_shown() {
    let limit: Limit = per_minute(1);
    let a = Rule::new("r", limit.clone()).partition_key(keys());
    let b = Rule::new("r", limit).partition_key(PartitionKeys::new(&[9u8; 32]).unwrap());
    assert_ne!(a, b);
    assert_eq!(a.partition_keys(), Some(&keys()));
    assert!(!format!("{a:?}").contains("thirty-two"));
}
