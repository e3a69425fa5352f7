//! `llm` against real `floodgate serve` processes (the binary of this build) sharing a
//! `redis-server` of the scenario's own, before the project's OpenAI-compatible upstream: under
//! `cut` and `finish` alike, the streaming clients of the tenant got nothing past its budget, and
//! what the tenant was charged is what the upstream generated.

use serde_json::Value;

use super::{bench, floodgate_binary, u};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_clients_of_one_tenant_get_nothing_past_its_budget() {
    let binary = floodgate_binary();
    let v = bench(&[
        "llm",
        "--floodgate",
        &binary,
        "--instances",
        "2",
        "-c",
        "16",
        "--budget",
        "4000",
        "--window",
        "1m",
        "--tokens",
        "100",
        "--calls",
        "200",
    ])
    .await;
    assert_eq!(v["scenario"], "llm", "{v}");
    let exactness = v["exactness"].as_array().unwrap();
    assert_eq!(exactness.len(), 2, "{v}");
    for e in exactness {
        assert_eq!(u(e, "overshoot"), 0, "{e}");
        assert!(u(e, "generated") > 3000, "the budget was used: {e}");
        assert!(u(e, "refused") > 0 && u(e, "failed") == 0, "{e}");
        let target = e["target"].as_str().unwrap();
        assert!(target.ends_with(&format!("(charged {})", u(e, "generated"))), "{e}");
    }
    let throughput: &Vec<Value> = v["throughput"].as_array().unwrap();
    assert_eq!(throughput.len(), 2);
    assert!(throughput.iter().all(|t| u(t, "ok") == 200), "{v}");
}
