//! `outage` on a real `redis-server` the scenario starts itself (the test fails, saying how to
//! install it, when there is none): a pause under fail-open, a kill under fail-closed and a pause
//! under fail-closed, each 4 s with a 1 s fault at 1 s, split into phases by send time.
//!
//! Two keys limited to 5 per second (fixed windows; token buckets of 50 per second for the
//! fail-closed pause), so every phase where the store decides has both admissions and denials
//! however slow the machine. The store deadline is 20 ms, well above the stalls of a busy machine,
//! so that decisions outside the fault rarely miss it.

use serde_json::Value;

use super::{assert_common, bench, f, u};

const DEADLINE_US: f64 = 20_000.0;

/// Runs `outage` with the shared parameters, `limit` per second per key, and `extra`.
async fn outage(limit: &str, extra: &[&str]) -> Value {
    let args = [
        "outage",
        "--at",
        "1s",
        "--for",
        "1s",
        "-d",
        "4s",
        "-c",
        "4",
        "--keys",
        "2",
        "--limit",
        limit,
        "--window",
        "1s",
        "--deadline",
        "20ms",
        // The breaker probes a recovered store soon after it is back, within the 2 s after it.
        "--open-for",
        "200ms",
    ];
    bench(&[&args[..], extra].concat()).await
}

/// Each phase adds up (`allowed + denied + errors = sent`), and the phases add up to the run.
fn assert_phases_add_up(v: &Value) {
    let mut sent = 0;
    for name in ["before", "during", "after"] {
        let p = &v["phases"][name];
        let errors = u(&p["errors"], "total");
        assert_eq!(u(p, "allowed") + u(p, "denied") + errors, u(p, "sent"), "{name}: {p}");
        let by_kind: u64 =
            p["errors"]["by_kind"].as_object().unwrap().values().filter_map(Value::as_u64).sum();
        assert_eq!(by_kind, errors, "{name}: {p}");
        sent += u(p, "sent");
    }
    assert_eq!(sent, u(v, "sent"), "{v}");
    let (start, end) = (f(v, "fault_start_ms"), f(v, "fault_end_ms"));
    assert!((990.0..1500.0).contains(&start) && end - start >= 999.0, "fault from {start} to {end} ms");
    assert_eq!((f(&v["phases"]["during"], "from_ms"), f(&v["phases"]["during"], "to_ms")), (start, end));
}

/// Before and after the fault the limiter works: both admissions and denials.
fn assert_store_decides(v: &Value, phase: &str) {
    let p = &v["phases"][phase];
    assert!(u(p, "allowed") > 0 && u(p, "denied") > 0, "{phase} should admit and deny: {p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_under_fail_open_passes_requests_once_the_breaker_opens_and_recovers() {
    let v = outage("5", &["--fault", "pause", "--on-store-error", "fail_open"]).await;
    assert_common(&v, "outage");
    assert_eq!((v["fault"].as_str(), v["on_store_error"].as_str()), (Some("pause"), Some("fail_open")));
    assert_eq!(v["counters_reset"], false);
    assert_phases_add_up(&v);
    assert_store_decides(&v, "before");
    assert_store_decides(&v, "after");

    let during = &v["phases"]["during"];
    let passed = u(&during["errors"]["by_kind"], "store_fail_open");
    assert!(passed > 0, "a paused store under fail_open passes requests: {during}");
    assert_eq!(u(during, "passed_by_fail_open"), passed);
    // The first requests to the frozen node wait out the deadline (a Tokio timeout never fires
    // early); ten timeouts in a row open the store's breaker, and from then on decisions are made
    // without a store call (but for one probe every 200 ms). How fast they then are is the bench's
    // figure (BENCHMARKS.md, "Outage: Redis paused or killed under load"); the test asserts that the breaker opened
    // within the fault, as the servers' `/metrics` say.
    assert!(
        f(during, "max_us") >= 0.75 * DEADLINE_US,
        "the first decisions wait the 20 ms deadline: {during}"
    );
    let opened =
        v["breaker_opened_after_ms"].as_f64().unwrap_or_else(|| panic!("the breaker never opened: {v}"));
    let fault = f(&v, "fault_end_ms") - f(&v, "fault_start_ms");
    assert!(opened < fault, "the breaker opened {opened} ms into a fault of {fault} ms: {v}");

    let recovered = v["recovered_after_ms"].as_f64().unwrap_or_else(|| panic!("never recovered: {v}"));
    assert!((0.0..2000.0).contains(&recovered), "recovered after {recovered} ms");
    assert!(u(&v, "errors_after_recovery") <= u(&v["phases"]["after"]["errors"], "total"), "{v}");
    assert_redis_gone(&v).await;
}

/// The run's `redis-server` (its address ends the target) is gone once the run is over.
async fn assert_redis_gone(v: &Value) {
    let target = v["target"].as_str().unwrap();
    let addr = target.rsplit(' ').next().unwrap().to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "{target}");
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(&addr).await.is_err() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the run's redis-server on {addr} still accepts connections after the run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_under_fail_closed_denies_until_a_new_one_decides_from_zero() {
    let v = outage("5", &["--fault", "kill", "--on-store-error", "fail_closed"]).await;
    assert_common(&v, "outage");
    assert_eq!((v["fault"].as_str(), v["on_store_error"].as_str()), (Some("kill"), Some("fail_closed")));
    assert_eq!(v["counters_reset"], true);
    assert_phases_add_up(&v);
    assert_store_decides(&v, "before");
    assert_store_decides(&v, "after");

    let during = &v["phases"]["during"];
    let denied = u(&during["errors"]["by_kind"], "store_fail_closed");
    assert!(denied > 0, "a dead store under fail_closed denies: {during}");
    assert_eq!(u(during, "denied_by_fail_closed"), denied);
    assert_eq!(u(during, "passed_by_fail_open"), 0);
    // The signal is sent as the fault starts; only requests sent in the instant before the server
    // dies can still be decided by it.
    let decided = u(during, "allowed") + u(during, "denied");
    assert!(decided * 10 <= u(during, "sent"), "the store decided {decided} requests while killed: {during}");

    let recovered = v["recovered_after_ms"].as_f64().unwrap_or_else(|| panic!("never recovered: {v}"));
    assert!((0.0..2000.0).contains(&recovered), "recovered after {recovered} ms");
    // Two keys, at most 5 each per window: whatever one key was admitted in one window stays
    // within the limit here (the 1 s window is over long before the new node starts).
    let max = u(&v, "max_admitted_per_key_window");
    assert!((1..=5).contains(&max), "max admitted per key and window: {max}");
    assert_redis_gone(&v).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_under_fail_closed_charges_nothing_for_the_requests_it_denied() {
    // Token buckets of 20 per second, burst 20: the load keeps them empty (it needs to outrun 40
    // requests a second on the two keys, which a sender starved of CPU still does), and the 1 s
    // pause fills them again. The requests denied during the pause are queued in the frozen Redis;
    // when it resumes it runs them past their deadline, so they must take nothing: the buckets are
    // still full for the requests sent after the resume.
    let (keys, limit) = (2.0, 20.0);
    let extra = ["--fault", "pause", "--on-store-error", "fail_closed", "--algorithm", "token_bucket"];
    let v = outage("20", &extra).await;
    assert_common(&v, "outage");
    assert_eq!((v["fault"].as_str(), v["on_store_error"].as_str()), (Some("pause"), Some("fail_closed")));
    assert_phases_add_up(&v);
    assert_store_decides(&v, "before");
    assert_store_decides(&v, "after");
    let during = &v["phases"]["during"];
    let denied = u(&during["errors"]["by_kind"], "store_fail_closed");
    assert!(denied > 0, "a paused store under fail_closed denies: {during}");

    // After the resume the callers, always ready, take what the buckets hold plus what refills:
    // full buckets at the resume, less the few requests Redis ran within a margin (50 ms) past their
    // deadline. Charged with the requests per key denied during the pause (far more than 20), the
    // buckets would hold nothing. (A store error after the resume may have taken a token too: counted.)
    let after = &v["phases"]["after"];
    let seconds = (f(after, "to_ms") - f(after, "from_ms")) / 1000.0;
    let refill = keys * limit * seconds;
    let taken = (u(after, "allowed") + u(&after["errors"], "total")) as f64;
    assert!(
        taken >= refill + keys * limit / 3.0,
        "after the pause: {taken} taken, {refill:.0} refilled — the buckets were charged for requests \
         denied during the pause: {after}"
    );
    assert_redis_gone(&v).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_redis_under_local_decides_on_each_servers_share_and_comes_back() {
    // Two servers, each with the share ceil(5 × 2 / 2) = 5 per key and window.
    let extra = ["--fault", "blackhole", "--on-store-error", "local", "-m", "2"];
    let v = outage("5", &extra).await;
    assert_common(&v, "outage");
    assert_eq!((v["fault"].as_str(), v["on_store_error"].as_str()), (Some("blackhole"), Some("local")));
    assert_phases_add_up(&v);
    assert_store_decides(&v, "before");
    assert_store_decides(&v, "after");
    let during = &v["phases"]["during"];
    assert!(
        u(during, "admitted_locally") > 0 && u(during, "denied_locally") > 0,
        "the share decides: {during}"
    );
    assert_eq!(u(during, "passed_by_fail_open") + u(during, "http_5xx"), 0, "{during}");
    assert_eq!(u(&v, "local_share"), 5);
    let local = u(&v, "max_local_admitted_per_instance_key_window");
    assert!((1..=5).contains(&local), "one server admitted {local} for one key in one window: {v}");
    // Nothing ever answers through the hole: the breaker opens (ten timeouts of 20 ms in a row per
    // server, 4 callers) within the fault, and closes after it, before the run ends. (How soon is
    // a figure of the bench, not of this test.)
    let opened = f(&v, "breaker_opened_after_ms");
    let fault = f(&v, "fault_end_ms") - f(&v, "fault_start_ms");
    assert!(opened < fault, "the breaker opened {opened} ms into a fault of {fault} ms: {v}");
    assert!(
        v["breaker_closed_after_ms"].as_f64().is_some(),
        "the breaker closed again before the run's end: {v}"
    );
    assert_redis_gone(&v).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowed_redis_past_the_deadline_is_a_failure_the_policy_decides() {
    // 100 ms on each request, five times the deadline: every call times out.
    let v = outage("5", &["--fault", "slow", "--delay", "100ms", "--on-store-error", "fail_closed"]).await;
    assert_common(&v, "outage");
    assert_eq!(f(&v, "delay_ms"), 100.0);
    assert_phases_add_up(&v);
    assert_store_decides(&v, "before");
    assert_store_decides(&v, "after");
    let during = &v["phases"]["during"];
    assert!(u(during, "denied_by_fail_closed") > 0, "{during}");
    assert_eq!(u(during, "passed_by_fail_open") + u(during, "http_5xx"), 0, "{during}");
    assert!(v["breaker_opened_after_ms"].as_f64().is_some(), "the breaker opened: {v}");
    let max = u(&v, "max_admitted_per_key_window");
    assert!((1..=5).contains(&max), "a slow store never over-admits: {max}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_killed_fails_over_to_its_replica_and_the_store_decides_again() {
    // A cluster of 3 masters with a replica each; one master is killed at 1 s and stays down. Its
    // replica is promoted after the 1 s node timeout; from then on the store decides every request
    // again, the lost master's keys included: the run goes on until the store has decided every
    // request for two seconds (`--until-settled`; `-d` only caps it). How long the failover took
    // is a figure of the bench (`last_store_error_after_ms`), not of this test.
    let v = bench(&[
        "outage",
        "--until-settled",
        "--fault",
        "master-kill",
        "--on-store-error",
        "fail_closed",
        "--at",
        "1s",
        "--for",
        "1s",
        "-d",
        "120s",
        "-c",
        "8",
        "--keys",
        "12",
        "--limit",
        "5",
        "--window",
        "1s",
        // A deadline no healthy call misses, even on a loaded machine: the only store errors are
        // the dead master's.
        "--deadline",
        "5s",
        "--timeout",
        "10s",
        "--open-for",
        "200ms",
    ])
    .await;
    assert_common(&v, "outage");
    assert_eq!(v["fault"].as_str(), Some("master-kill"));
    assert_store_decides(&v, "before");
    assert_store_decides(&v, "after");
    let during = &v["phases"]["during"];
    assert_eq!(u(during, "passed_by_fail_open") + u(during, "http_5xx"), 0, "{during}");
    assert_eq!(v["settled"], true, "the store decides every request again after the failover: {v}");
    assert!(v["last_store_error_after_ms"].as_f64().is_some(), "the kill was felt: {v}");
    let max = u(&v, "max_admitted_per_key_window");
    assert!((1..=5).contains(&max), "a failover never over-admits: {max}");
}
