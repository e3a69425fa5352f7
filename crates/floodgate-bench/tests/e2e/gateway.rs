//! `gateway` against a real `floodgate` process, nginx and the bench's upstream: every phase runs,
//! every system answers every request of the allowed and denied paths without an error (nginx, too,
//! keeps its client connections open through the run), and at the limit Floodgate never admits more
//! than its limit. How fast each is, is the bench's business, not this test's.

use super::{bench, floodgate_binary};

fn names(phase: &serde_json::Value) -> Vec<&str> {
    phase
        .as_array()
        .unwrap_or_else(|| panic!("a list: {phase}"))
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_phase_runs_without_errors_and_floodgate_admits_no_more_than_its_limit() {
    let binary = floodgate_binary();
    let v = bench(&["gateway", "--floodgate", &binary, "-c", "4", "-d", "1s"]).await;
    assert_eq!(v["scenario"], "gateway", "the report names its scenario");

    assert_eq!(names(&v["allowed_path"]), ["upstream directly", "floodgate gateway", "nginx limit_req"]);
    for m in v["allowed_path"].as_array().unwrap() {
        assert_eq!(m["errors"], 0, "{m}");
        assert_eq!(m["denied"], 0, "{m}");
        assert!(m["allowed"].as_u64().is_some_and(|n| n > 0), "{m}");
    }

    assert_eq!(names(&v["denied_path"]), ["floodgate gateway", "nginx limit_req"]);
    for m in v["denied_path"].as_array().unwrap() {
        assert_eq!(m["errors"], 0, "{m}");
        // The one request the key allows went in the warm-up.
        assert_eq!(m["allowed"], 0, "{m}");
        assert!(m["denied"].as_u64().is_some_and(|n| n > 0), "{m}");
    }

    let at_limit = v["at_limit"].as_array().unwrap_or_else(|| panic!("at_limit: {v}"));
    let floodgate =
        at_limit.iter().find(|r| r["peer"] == "floodgate sliding_log").unwrap_or_else(|| panic!("{v}"));
    let (admitted, limit) =
        (floodgate["flood_admitted"].as_u64().unwrap(), floodgate["flood_limit"].as_u64().unwrap());
    assert!(admitted > 0 && admitted <= limit, "the flood: {admitted} admitted, limit {limit}");
    assert!(floodgate["bursty_admitted"].as_u64() <= floodgate["bursty_sent"].as_u64(), "{floodgate}");
}
