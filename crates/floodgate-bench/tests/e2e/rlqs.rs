//! `rlqs` with a short run (4 Envoys, 200 requests a second, phases of 2 s, 2 instances on a Redis
//! the scenario starts itself). Asserted: what holds whatever the timing — every variant reports its
//! figures; the static split gives the hot Envoy its fixed share; on one instance the Envoys' local
//! buckets, refilled no faster than their shares, admit at most the limit (and its burst) in every
//! window after the first; RLS makes one call per decision. Convergence times are measured, not
//! asserted.

use super::{bench, f, u};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_variant_reports_and_shares_never_exceed_the_limit_on_one_instance() {
    let v = bench(&["rlqs", "--envoys", "4", "--limit", "200", "--phase", "2s", "--instances", "2"]).await;
    assert_eq!(v["scenario"], "rlqs");
    assert_eq!((u(&v, "envoys"), u(&v, "limit_per_s")), (4, 200));
    assert!(f(&v, "core_cpu_us_per_report") > 0.0);
    let variants = v["variants"].as_array().expect("variants");
    let names: Vec<&str> = variants.iter().map(|x| x["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "static equal split",
            "rlqs, 1 instance (memory)",
            "rlqs, 1 instance (redis)",
            "rlqs, 2 instances (redis)",
            "rls, a call per request"
        ]
    );
    for x in variants {
        assert_eq!(x["per_envoy"].as_array().unwrap().len(), 4, "{x}");
        assert!(u(x, "admitted") <= u(x, "decisions"), "{x}");
    }
    // The static split: 50 a second for a demand of 180.
    let hot = f(&variants[0], "hot_share_of_demand");
    assert!((hot - 50.0 / 180.0).abs() < 0.02, "{hot}");
    for x in &variants[1..3] {
        assert!(f(x, "max_window_ratio") <= 1.02, "{x}");
        assert!(u(x, "reports") > 0, "{x}");
    }
    assert_eq!(f(&variants[4], "calls_per_decision"), 1.0);
}
