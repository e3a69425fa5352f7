//! `reserve` against real `floodgate serve` processes (the binary of this build, beside the
//! test's directory: `cargo build -p floodgate-server` makes it; the test fails saying so when it
//! is missing): on the memory store (and on it persisted, its one process killed and restarted
//! twice), and three processes sharing a `redis-server` of the scenario's own (and with two of
//! them killed and restarted during the run). The limit is set so that
//! the last calls meet it; the checks are the scenario's: the ledger exactly what the callers and
//! the in-doubt calls' witnesses account for, the limit never passed, no permit left.

use serde_json::Value;

use super::{assert_common, bench, floodgate_binary, u};

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

/// With instances killed mid-run, the ledger is still exact: a settlement cut off by a kill is
/// finished by its retry on another instance, each step made once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_ledger_is_exact_with_instances_killed() {
    let v = reserve(&["--store", "redis", "--kills", "2", "--down", "100ms"]).await;
    assert_exact(&v);
    assert_eq!((u(&v, "instances"), u(&v, "instance_kills")), (3, 2), "{v}");
    assert_eq!(u(&v, "refunds_lost"), 0, "{v}");
}

/// The one memory instance, persisted with `fsync: always`, killed and restarted from its log:
/// the ledger is exact, what was acknowledged before each kill kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_persisted_memory_ledger_is_exact_with_its_instance_killed() {
    let v = reserve(&["--store", "memory", "--persist", "--kills", "2", "--down", "100ms"]).await;
    assert_exact(&v);
    assert_eq!((u(&v, "instances"), u(&v, "instance_kills")), (1, 2), "{v}");
    assert_eq!(u(&v, "refunds_lost"), 0, "{v}");
}
