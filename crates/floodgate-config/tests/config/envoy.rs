//! An envoyproxy/ratelimit file compiled into a namespaced policy, and Envoy descriptors checked
//! against it the way the gRPC service does: one check per descriptor, built by
//! `floodgate_http::envoy::envoy_descriptors`.

use std::time::Duration;

use floodgate::{Descriptors, Outcome};
use floodgate_config as config;
use floodgate_http::envoy::envoy_descriptors;

use super::{TestEngine, engine, fixture, hammer};

fn edge_proxy() -> TestEngine {
    let mut config = config::load(&fixture("edge_proxy.yaml")).unwrap();
    assert!(config.policy.rules().next().is_none(), "an Envoy file has no native rules");
    let policy = config.domains.remove("edge_proxy_per_ip").expect("the file's domain");
    assert_eq!(policy.namespace(), Some("edge_proxy_per_ip"));
    engine(policy).0
}

fn envoy(entries: &[(&str, &str)]) -> Descriptors {
    envoy_descriptors(entries.iter().copied())
}

#[test]
fn every_limited_path_is_a_rule() {
    let config = config::load(&fixture("edge_proxy.yaml")).unwrap();
    let policy = &config.domains["edge_proxy_per_ip"];
    let rules: Vec<(&str, Vec<String>)> =
        policy.rules().map(|r| (r.name(), r.key_descriptors().to_vec())).collect();
    assert_eq!(
        rules,
        [
            ("remote_address", vec!["remote_address".to_owned()]),
            ("remote_address_50.0.0.6", vec![]),
            ("database_users", vec![]),
            ("users-per-user", vec!["user".to_owned()]),
            ("message_type_marketing.to_number", vec!["to_number".to_owned()]),
            ("per-number", vec!["to_number".to_owned()]),
        ]
    );
    let keys: Vec<&str> = config.fingerprints.keys().map(String::as_str).collect();
    assert!(keys.contains(&"edge_proxy_per_ip/remote_address"), "{keys:?}");
    assert_eq!(keys.len(), 6);
}

/// Specific values beside catch-all entries at two levels of one path: each specific value is
/// carved out of the catch-all at its own level, as envoyproxy/ratelimit's tree walk does.
#[tokio::test]
async fn values_carved_out_at_two_levels_escape_the_catch_all() {
    let config = config::parse(
        "two_levels.yaml",
        "domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: b
        value: y
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: a
    value: x
    rate_limit: {unlimited: true}
",
    )
    .unwrap();
    let mut domains = config.domains;
    let engine = engine(domains.remove("d").unwrap()).0;
    let count = |entries: &'static [(&'static str, &'static str)]| {
        let engine = &engine;
        async move { hammer(engine, &envoy(entries), 10).await.0 }
    };
    assert_eq!(count(&[("a", "1"), ("b", "2")]).await, 1, "the catch-all a → b");
    assert_eq!(count(&[("a", "1"), ("b", "y")]).await, 3, "b = y has its own limit, not the catch-all's too");
    assert_eq!(count(&[("a", "x"), ("b", "2")]).await, 10, "a = x is unlimited: nothing below it applies");
    assert_eq!(count(&[("a", "x"), ("b", "y")]).await, 10);
}

#[tokio::test]
async fn per_address_limit_applies_per_value_and_resets_each_second() {
    let engine = edge_proxy();
    let client = envoy(&[("remote_address", "192.0.2.7")]);
    let (allowed, last) = hammer(&engine, &client, 12).await;
    assert_eq!(allowed, 10);
    assert_eq!(last.limits.len(), 1);
    assert_eq!(&*last.limits[0].rule, "remote_address");
    assert_eq!(last.limits[0].decision.limit, 10);
    // Another address has its own counter.
    assert!(engine.check(&envoy(&[("remote_address", "192.0.2.8")]), 1).await.unwrap().allowed);
}

#[tokio::test]
async fn fixed_windows_follow_the_unit() {
    let (engine, clock) = {
        let mut config = config::load(&fixture("edge_proxy.yaml")).unwrap();
        engine(config.domains.remove("edge_proxy_per_ip").unwrap())
    };
    let client = envoy(&[("remote_address", "192.0.2.7")]);
    let (allowed, _) = hammer(&engine, &client, 11).await;
    assert_eq!(allowed, 10);
    clock.advance(Duration::from_millis(999));
    assert!(!engine.check(&client, 1).await.unwrap().allowed);
    clock.advance(Duration::from_millis(1));
    assert!(engine.check(&client, 1).await.unwrap().allowed, "a new one-second window");
}

#[tokio::test]
async fn unlimited_value_escapes_the_less_specific_limit() {
    let engine = edge_proxy();
    let office = envoy(&[("remote_address", "50.0.0.5")]);
    let (allowed, last) = hammer(&engine, &office, 1000).await;
    assert_eq!(allowed, 1000);
    // What the gRPC service sees: no rule applies, so the descriptor is OK with no limit.
    assert!(last.limits.is_empty(), "no rule applies to it: {:?}", last.limits);
}

#[tokio::test]
async fn specific_value_gets_its_own_limit_instead_of_the_default() {
    let engine = edge_proxy();
    let partner = envoy(&[("remote_address", "50.0.0.6")]);
    let (allowed, last) = hammer(&engine, &partner, 105).await;
    assert_eq!(allowed, 100);
    let enforced: Vec<&str> = last.enforced().map(|l| &*l.rule).collect();
    assert_eq!(enforced, ["remote_address_50.0.0.6"], "the per-address default does not apply as well");
}

#[tokio::test]
async fn depth_and_order_must_match_the_tree() {
    let engine = edge_proxy();
    // The users table as a whole: 500 a second.
    let table = envoy(&[("database", "users")]);
    let (allowed, _) = hammer(&engine, &table, 501).await;
    assert_eq!(allowed, 500);
    // Per user: 50 a minute, and the whole-table limit does not apply to this deeper descriptor.
    let per_user = envoy(&[("database", "users"), ("user", "alice")]);
    let (allowed, last) = hammer(&engine, &per_user, 51).await;
    assert_eq!(allowed, 50);
    assert_eq!(last.limits.iter().map(|l| &*l.rule).collect::<Vec<_>>(), ["users-per-user"]);
    // Another table has no limit; neither has the same entries in another order, nor a deeper
    // descriptor than the tree has.
    for unmatched in [
        envoy(&[("database", "orders")]),
        envoy(&[("database", "orders"), ("user", "alice")]),
        envoy(&[("user", "alice"), ("database", "users")]),
        envoy(&[("remote_address", "192.0.2.7"), ("path", "/")]),
        envoy(&[]),
    ] {
        let verdict = engine.check(&unmatched, 1).await.unwrap();
        assert!(verdict.allowed && verdict.limits.is_empty(), "{unmatched:?}: {:?}", verdict.limits);
    }
}

#[tokio::test]
async fn shadow_mode_counts_but_never_denies() {
    let engine = edge_proxy();
    let marketing = envoy(&[("message_type", "marketing"), ("to_number", "+15550100")]);
    let (allowed, last) = hammer(&engine, &marketing, 7).await;
    assert_eq!(allowed, 7);
    assert_eq!(last.limits[0].outcome, Outcome::ShadowDenied);
    // The plain per-number descriptor is separate: 100 a day.
    let any = envoy(&[("to_number", "+15550100")]);
    let (allowed, _) = hammer(&engine, &any, 101).await;
    assert_eq!(allowed, 100);
}
