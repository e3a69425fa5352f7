//! `soak` for 20 s against a real `floodgate serve` process (the binary of this build, beside the
//! test's directory: `cargo build -p floodgate-server` makes it; the test fails saying so when it
//! is missing), on the memory store and on a `redis-server` of the run's own (the two at once), at
//! a low rate, with two hot users whose budget the run spends:
//! the report's fields are present and consistent — the samples in order and adding up to the
//! run, every kind's counts adding up, every granted reserve committed, the hot users admitted
//! exactly their budget, no error, no wrong answer, no permit left. Whether the drift goals held
//! depends on the machine: only that each figure says it consistently is checked.

use serde_json::Value;

use super::{assert_common, bench, f, floodgate_binary, u};

const KINDS: [&str; 4] = ["check", "reserve", "commit", "gateway"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_on_the_memory_store_reports_consistent_samples_and_no_error() {
    short_soak("memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_on_redis_reports_consistent_samples_and_no_error() {
    short_soak("redis").await;
}

async fn short_soak(store: &str) {
    let binary = floodgate_binary();
    let v = bench(&[
        "soak",
        "--store",
        store,
        "--floodgate",
        &binary,
        "--duration",
        "20s",
        "--warmup",
        "5s",
        "--sample",
        "2s",
        "--p99-window",
        "6s",
        "--rate",
        "100",
        "--users",
        "1000",
        "--hot-users",
        "2",
        "--hot-limit",
        "5",
        "-c",
        "4",
    ])
    .await;
    assert_common(&v, "soak");
    assert_eq!((v["store"].as_str(), v["interrupted"].as_bool()), (Some(store), Some(false)), "{v}");
    let keys_from = if store == "redis" { "dbsize" } else { "floodgate_keys" };
    assert_eq!(v["keys_from"], keys_from);
    assert_eq!(u(&v, "operations"), 2000, "every operation of 20 s at 100/s scheduled: {v}");

    // Each kind adds up, and the kinds add up to the run.
    let kinds = &v["kinds"];
    let sum = |field: &str| KINDS.iter().map(|k| u(&kinds[*k], field)).sum::<u64>();
    for kind in KINDS {
        let k = &kinds[kind];
        assert_eq!(u(k, "allowed") + u(k, "denied") + u(&k["errors"], "total"), u(k, "sent"), "{kind}: {k}");
        // Each kind was sent and measured; what its p99 was is the run's figure, not asserted.
        assert!(u(k, "sent") > 0 && k["p99_us"].as_f64().is_some(), "{kind}: {k}");
    }
    assert_eq!(
        (sum("sent"), sum("allowed"), sum("denied")),
        (u(&v, "sent"), u(&v, "allowed"), u(&v, "denied"))
    );
    let operations = ["check", "reserve", "gateway"].iter().map(|k| u(&kinds[*k], "sent")).sum::<u64>();
    assert_eq!(operations, u(&v, "operations"), "a check, a pair's reserve or a gateway request each");
    assert_eq!(
        u(&kinds["commit"], "sent"),
        u(&kinds["reserve"], "allowed"),
        "every granted reserve committed"
    );

    // No error, no wrong answer, no permit left; the hot users admitted exactly their budget.
    assert_eq!(u(&v["errors"], "total"), 0, "{v}");
    assert_eq!(u(&v["wrong"], "total"), 0, "{}", v["wrong"]);
    assert_eq!(u(&v, "permits_held_at_end"), 0, "{v}");
    assert_eq!((u(&v, "hot_users"), u(&v, "hot_limit")), (2, 5));
    assert_eq!(u(&v, "hot_admitted"), 10, "{v}");
    let denied = u(&kinds["check"], "denied") + u(&kinds["gateway"], "denied");
    assert_eq!(denied, u(&v, "hot_sent") - 10, "only the hot users are denied, past their budget: {v}");

    // Samples every 2 s, the last one after the load's end; they add up to the run.
    let samples = v["samples"].as_array().unwrap_or_else(|| panic!("samples: {v}"));
    assert_eq!(samples.len(), 10, "{samples:?}");
    let times: Vec<f64> = samples.iter().map(|s| f(s, "t_s")).collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "samples in order: {times:?}");
    assert_eq!(&times[..9], [2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0]);
    assert!(times[9] >= 19.0, "{times:?}");
    let total = |field: &str| samples.iter().map(|s| u(s, field)).sum::<u64>();
    assert_eq!((total("answered"), total("errors"), total("wrong")), (u(&v, "sent"), 0, 0));
    for s in samples {
        for field in ["rss_bytes", "fds", "threads", "keys"] {
            assert!(u(s, field) > 0, "{field}: {s}");
        }
        assert!(KINDS.iter().all(|k| s["p99_us"].get(*k).is_some()), "{s}");
    }

    // p99 over windows of three samples from the first after the warm-up: [6, 12) and [12, 18).
    assert_eq!(f(&v, "p99_window_s"), 6.0);
    let windows = v["p99_windows"].as_array().unwrap_or_else(|| panic!("p99_windows: {v}"));
    let spans: Vec<(f64, f64)> = windows.iter().map(|w| (f(w, "from_s"), f(w, "to_s"))).collect();
    assert_eq!(spans, [(6.0, 12.0), (12.0, 18.0)]);

    // Each figure's drift says whether it held, and the run's verdict follows from them.
    let drift = v["drift"].as_array().unwrap_or_else(|| panic!("drift: {v}"));
    let figures: Vec<&str> = drift.iter().map(|d| d["figure"].as_str().unwrap()).collect();
    assert_eq!(
        figures,
        ["rss_bytes", "fds", "check_p99_us", "reserve_p99_us", "commit_p99_us", "gateway_p99_us"]
    );
    for d in drift {
        assert!(f(d, "baseline") > 0.0 && f(d, "baseline_at_s") >= 5.0, "{d}");
        let goal = if d["figure"].as_str().unwrap().ends_with("p99_us") { 0.20 } else { 0.05 };
        assert_eq!(f(d, "goal"), goal);
        assert_eq!(u(d, "compared"), if goal == 0.05 { 7 } else { 1 }, "{d}");
        let worst = f(d, "worst_drift");
        assert_eq!(d["held"].as_bool(), Some(worst.abs() <= goal), "{d}");
        assert!(f(d, "end_drift").abs() <= worst.abs(), "{d}");
    }
    let held = drift.iter().all(|d| d["held"] == Value::Bool(true));
    assert_eq!(v["drift_held"].as_bool(), Some(held));
    assert_eq!(v["passed"].as_bool(), Some(held), "no error, no wrong answer, no permit left: {v}");
}
