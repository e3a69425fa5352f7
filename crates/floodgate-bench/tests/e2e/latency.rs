//! `latency --compare gateway` against a real `floodgate` process, nginx and the bench's upstream:
//! the report has the peer's closed-loop peak and, at each offered rate, every system on the same
//! schedule, measured in the slots asked for, with what its threads spent; what the figures are is the bench's business, not
//! this test's.

use super::{bench, floodgate_binary};

/// The scenario under test, as its report names it.
const SCENARIO: &str = "latency";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_comparison_reports_every_system_at_every_offered_rate() {
    let binary = floodgate_binary();
    let v = bench(&[
        SCENARIO,
        "--compare",
        "gateway",
        "--floodgate",
        &binary,
        "--fractions",
        "0.1,0.2",
        "-c",
        "2",
        "-d",
        "400ms",
        "--rounds",
        "2",
    ])
    .await;
    assert_eq!(v["scenario"], SCENARIO, "the report names its scenario");
    let peak = v["peak"].as_array().unwrap_or_else(|| panic!("peak: {v}"));
    assert_eq!(peak.len(), 1, "{v}");
    assert_eq!(peak[0][0], "gateway");
    assert!(peak[0][2].as_f64().is_some_and(|p| p > 0.0), "{v}");
    let points = v["points"].as_array().unwrap();
    let rows: Vec<(&str, f64)> =
        points.iter().map(|p| (p["system"].as_str().unwrap(), p["fraction"].as_f64().unwrap())).collect();
    assert_eq!(
        rows,
        [
            ("upstream alone", 0.1),
            ("floodgate gateway", 0.1),
            ("nginx limit_req", 0.1),
            ("upstream alone", 0.2),
            ("floodgate gateway", 0.2),
            ("nginx limit_req", 0.2)
        ]
    );
    for p in points {
        assert_eq!(p["comparison"], "gateway", "{p}");
        // The same schedule for every system of one rate.
        let same_rate = points.iter().filter(|o| o["fraction"] == p["fraction"]);
        assert!(same_rate.clone().all(|o| o["offered_per_sec"] == p["offered_per_sec"]), "{v}");
        // Measured in two slots, whose p99s are given lowest first.
        let slots: Vec<f64> =
            p["rounds_p99_us"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(slots.len(), 2, "{p}");
        assert!(slots[0] > 0.0 && slots[0] <= slots[1], "{p}");
        // Every system ran to answer, and its threads' time is read (the upstream's thread, the
        // floodgate process, nginx's master and workers).
        assert!(p["cpu_us_per_request"].as_f64().is_some_and(|us| us > 0.0), "{p}");
        assert!(p["waited_us_per_request"].as_f64().is_some_and(|us| us >= 0.0), "{p}");
    }
}
