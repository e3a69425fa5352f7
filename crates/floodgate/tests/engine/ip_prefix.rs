//! `ip_prefix`: the addresses of one network share one counter.

use std::time::Duration;

use floodgate::{Descriptors, EngineError, IpPrefix, Policy, Rule, RuleError};
use floodgate_core::FixedWindow;

use super::{engine, nz};

fn per_network() -> Rule {
    let limit = FixedWindow::try_new(nz(100), Duration::from_secs(60)).unwrap();
    Rule::new("per-ip", limit).key(["ip"]).ip_prefix(IpPrefix::new(24, 64).unwrap())
}

fn ip(address: &str) -> Descriptors {
    Descriptors::new().with("ip", address)
}

#[tokio::test]
async fn ten_thousand_addresses_of_one_v6_network_share_one_limit_and_two_networks_do_not() {
    let (engine, _) = engine([per_network()]);
    let mut admitted = 0;
    for i in 0..10_000u32 {
        // Addresses all over the host half of 2001:db8:0:1::/64.
        let address = format!("2001:db8:0:1:{:x}:{:x}::{:x}", i * 7 % 65536, i, i * 31 % 65536);
        admitted += usize::from(engine.check(&ip(&address), 1).await.unwrap().allowed);
    }
    assert_eq!(admitted, 100, "one /64 gets the limit once");
    let other = engine.check(&ip("2001:db8:0:2::1"), 1).await.unwrap();
    assert!(other.allowed && other.limits[0].decision.remaining == 99, "another /64 has its own: {other:?}");
    assert_eq!(engine.store().stats().keys, 2);
}

#[tokio::test]
async fn v4_addresses_group_by_their_own_prefix_however_written() {
    let (engine, _) = engine([per_network()]);
    for address in ["192.0.2.1", "192.0.2.254", "::ffff:192.0.2.9", " 192.0.2.3 "] {
        assert!(engine.check(&ip(address), 25).await.unwrap().allowed, "{address}");
    }
    assert!(!engine.check(&ip("192.0.2.77"), 1).await.unwrap().allowed, "four of 25 spent the /24's 100");
    assert!(engine.check(&ip("192.0.3.1"), 1).await.unwrap().allowed, "another /24");
}

#[tokio::test]
async fn a_value_that_is_not_an_address_is_an_error_naming_the_rule_and_the_value() {
    let (engine, _) = engine([per_network()]);
    match engine.check(&ip("not-an-ip"), 1).await {
        Err(e @ EngineError::Descriptor { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("\"per-ip\"") && text.contains("\"not-an-ip\"") && text.contains("IP address"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(engine.store().stats().keys, 0, "nothing was counted");
}

#[test]
fn a_rule_grouping_ip_must_key_by_ip() {
    let limit = FixedWindow::try_new(nz(1), Duration::from_secs(1)).unwrap();
    let rule = Rule::new("r", limit).key(["user"]).ip_prefix(IpPrefix::new(24, 64).unwrap());
    assert!(matches!(Policy::new([rule]), Err(RuleError::IpPrefixWithoutIp { .. })));
}
