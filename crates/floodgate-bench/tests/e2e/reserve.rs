//! `reserve` against real `floodgate serve` processes (the binary of this build, beside the
//! test's directory: `cargo build -p floodgate-server` makes it; the test fails saying so when it
//! is missing): on the memory store, and three processes sharing a `redis-server` of the
//! scenario's own with two of them killed and restarted during the run. The limit is set so that
//! the last calls meet it; the checks are the scenario's: the ledger exactly what the callers and
//! the in-doubt calls' witnesses account for, the limit never passed, no permit left.

use std::path::PathBuf;

use serde_json::Value;

use super::{assert_common, bench, u};

fn floodgate_binary() -> String {
    // target/debug/deps/e2e-… → target/debug/floodgate
    let exe = std::env::current_exe().expect("the test's path");
    let binary: PathBuf = exe.parent().and_then(|d| d.parent()).expect("target dir").join("floodgate");
    assert!(
        binary.exists(),
        "{} not found: build it with `cargo build -p floodgate-server`",
        binary.display()
    );
    binary.to_string_lossy().into_owned()
}

async fn reserve(extra: &[&str]) -> Value {
    let binary = floodgate_binary();
    let args = [
        "reserve",
        "--floodgate",
        &binary,
        "--calls",
        "1500",
        "-c",
        "16",
        "--max-estimate",
        "1000",
        "--limit",
        "250000",
        "--permits",
        "64",
        "--ttl",
        "1s",
        "--lease",
        "1s",
    ];
    bench(&[&args[..], extra].concat()).await
}

/// The three checks passed, and every kind of call happened.
fn assert_exact(v: &Value) {
    assert_common(v, "reserve");
    assert_eq!(u(v, "calls"), 1500, "{v}");
    assert_eq!(v["ledger_diff"], 0, "{v}");
    assert_eq!(u(v, "per_call_mismatches"), 0, "{v}");
    assert_eq!(u(v, "witnesses_sum"), u(v, "ledger"), "{v}");
    assert_eq!(u(v, "ledger"), u(v, "known") + u(v, "in_doubt_charged"), "{v}");
    assert!(u(v, "sampled_max_used") <= 250_000 && u(v, "samples") > 0, "{v}");
    assert!(u(v, "sampled_max_permits") <= 64, "{v}");
    assert_eq!((u(v, "samples_over_limit"), u(v, "callers_over_limit")), (0, 0), "{v}");
    assert_eq!(u(v, "permits_held_at_end"), 0, "{v}");
    assert_eq!(u(v, "unexpected_answers"), 0, "{v}");
    assert_eq!(v["passed"], true, "{v}");
    for field in ["committed", "released", "crashed", "denied"] {
        assert!(u(v, field) > 0, "no {field}: {v}");
    }
    // The limit was met: the ledger ends near it (short of it by what the last calls gave back).
    assert!(u(v, "ledger") > 250_000 - 30_000, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_ledger_is_exact() {
    let v = reserve(&["--store", "memory"]).await;
    assert_exact(&v);
    assert_eq!((u(&v, "instances"), u(&v, "instance_kills")), (1, 0), "{v}");
    assert_eq!(u(&v, "in_doubt_reserves") + u(&v, "in_doubt_settlements"), 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_ledger_is_exact_across_instances() {
    let v = reserve(&["--store", "redis", "--kills", "0"]).await;
    assert_exact(&v);
    assert_eq!((u(&v, "instances"), u(&v, "instance_kills")), (3, 0), "{v}");
}

/// With instances killed, the only loss the check may find is the known gap of settlements (the
/// record marked settled, then the refunds: an instance killed between them leaves the call
/// charged its estimate, never less): every mismatch is such a call, the ledger is never under
/// what the callers and the witnesses account for, and over it by at most those refunds. The
/// limit and the permits hold regardless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_redis_instances_lose_at_most_the_refunds_of_settlements_in_progress() {
    let v = reserve(&["--store", "redis", "--kills", "2", "--down", "100ms"]).await;
    assert_common(&v, "reserve");
    assert_eq!((u(&v, "instances"), u(&v, "instance_kills"), u(&v, "calls")), (3, 2, 1500), "{v}");
    assert_eq!(u(&v, "per_call_mismatches"), u(&v, "refunds_lost"), "{v}");
    let diff = v["ledger_diff"].as_i64().expect("ledger_diff");
    assert!(diff >= 0 && diff as u64 <= u(&v, "refunds_lost_tokens"), "{v}");
    assert_eq!((u(&v, "samples_over_limit"), u(&v, "callers_over_limit")), (0, 0), "{v}");
    assert!(u(&v, "sampled_max_permits") <= 64, "{v}");
    assert_eq!((u(&v, "permits_held_at_end"), u(&v, "unexpected_answers")), (0, 0), "{v}");
    assert_eq!(
        v["passed"],
        diff == 0 && u(&v, "refunds_lost") == 0 && u(&v, "witnesses_sum") == u(&v, "ledger")
    );
}
