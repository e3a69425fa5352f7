//! `cross-slot` on a 3-master Redis Cluster the scenario starts itself (the test fails, saying how
//! to install it, when there is no `redis-server`): 2,000 requests in each variant, half of them
//! from 4 abusers whose own limit is spent and whose first denial is made before the load, half from
//! 4 normal users, 16 callers. The deadline is 10 s, so that no call of a busy machine fails.
//!
//! Asserted: what holds whatever the timing — the counts add up, no variant admits past the
//! tenant's room or leaves a unit charged for a request it did not admit, every give-back lands,
//! and the two orders that never charge the tenant for an abusive request (co-located: one atomic
//! call; `denied_first` with every abuser denied lately, in a run far shorter than the minute a
//! hint lasts) refuse no normal request. How many `at_once` refuses is measured, not asserted.
//!
//! `denied_first` knows its abusers by hints in a table of 4,096 entries by key hash, which an
//! admission clears: were a normal user's key to share an abuser's entry (about one run in 200 with
//! these 9 keys), that abuser's requests after the user's would go at once, and one in flight as
//! the tenant's last unit is taken would refuse it. The keys' names are new in every run.

use serde_json::Value;

use super::{assert_common, bench, f, u};

const VARIANTS: [&str; 3] = ["at_once", "denied_first", "co_located"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_order_accounts_for_the_tenants_room_and_only_at_once_charges_it_for_abusive_requests() {
    let v = bench(&[
        "cross-slot",
        "--requests",
        "2000",
        "--abusers",
        "4",
        "--users",
        "4",
        "-c",
        "16",
        "--deadline",
        "10s",
    ])
    .await;
    assert_common(&v, "cross-slot");
    assert_eq!((u(&v, "requests_per_variant"), u(&v, "abusive_requests"), u(&v, "room")), (2000, 1000, 1000));
    assert_eq!(v["pause_master_ms"], Value::Null);

    let mut sent = 0;
    for name in VARIANTS {
        let o = &v[name];
        for field in [
            "cross_slot",
            "hash_tag",
            "duration_s",
            "requests_per_sec",
            "tenant_taken",
            "tenant_admitted",
            "first_refusal_at_request",
            "abusive_denied",
            "admitted_p99_us",
            "denied_p99_us",
            "paused_at_ms",
        ] {
            assert!(o.get(field).is_some(), "{name}: {field} missing in {o}");
        }
        assert_eq!(
            (u(o, "sent"), u(o, "normal_sent"), u(o, "abusive_sent")),
            (2000, 1000, 1000),
            "{name}: {o}"
        );
        assert_eq!(u(&o["errors"], "total"), 0, "{name}: {o}");
        assert_eq!(u(o, "normal_admitted") + u(o, "normal_refused"), 1000, "{name}: {o}");
        assert_eq!(u(o, "abusive_admitted"), 0, "{name}: an abuser's own limit held: {o}");
        assert_eq!(u(o, "abusive_denied"), 1000, "{name}: {o}");

        // The tenant's room: never past it, and what is left is what the refused requests left.
        assert_eq!(o["never_over_admitted"], true, "{name}: {o}");
        assert_eq!(o["exact"], true, "{name}: {o}");
        assert_eq!(o["charged_not_admitted"], 0, "{name}: {o}");
        assert_eq!(u(o, "tenant_remaining"), u(o, "normal_refused"), "{name}: {o}");
        assert_eq!(u(o, "tenant_taken"), u(o, "normal_admitted"), "{name}: {o}");
        let refused = u(o, "normal_refused") as f64;
        assert_eq!(f(o, "under_admitted_per_10k_requests"), refused * 10_000.0 / 2000.0, "{name}: {o}");
        assert_eq!(f(o, "under_admitted_per_10k_normal"), refused * 10_000.0 / 1000.0, "{name}: {o}");
        assert_eq!(o["first_refusal_at_request"].is_null(), refused == 0.0, "{name}: {o}");

        let gb = &o["give_backs"];
        assert_eq!((u(gb, "landed"), u(gb, "lost")), (u(gb, "started"), 0), "{name}: {gb}");
        assert!(f(o, "admitted_p50_us") > 0.0 && f(o, "denied_p50_us") > 0.0, "{name}: {o}");
        assert!(u(o, "attempts") >= 1, "{name}: {o}");
        sent += u(o, "sent");
    }
    assert_eq!(sent, u(&v, "sent"), "the summary is the three variants'");

    // At once, an abusive request charges the tenant and gives back; co-located, never.
    assert!(u(&v["at_once"]["give_backs"], "started") > 0, "{}", v["at_once"]);
    assert_eq!(u(&v["co_located"]["give_backs"], "started"), 0, "{}", v["co_located"]);
    // Neither the baseline nor denied_first with hot abusers refuses a request that fits.
    assert_eq!(u(&v["co_located"], "normal_refused"), 0, "{}", v["co_located"]);
    assert_eq!(u(&v["denied_first"], "normal_refused"), 0, "{}", v["denied_first"]);
}
