//! End to end: every scenario against a server this test starts (in-process `floodgate` on
//! port 0), checking that the JSON report's fields are present and consistent; `outage` on a
//! `redis-server` of its own ([`outage`]); `flood` on the memory store ([`flood`]); `reserve` on
//! `floodgate` processes ([`reserve`]); `timeouts` on a `floodgate` process and nginx
//! ([`timeouts`]); `latency` on a `floodgate` process, nginx and an upstream ([`latency`]); a short
//! `soak` on a `floodgate` process ([`soak`]); `cross-slot` on a Redis
//! Cluster of its own ([`cross_slot`]); `llm` on `floodgate` processes sharing a Redis ([`llm`]);
//! `upstreams` on a `floodgate` process per upstream protocol ([`upstreams`]).

mod cross_slot;
mod flood;
mod gateway;
mod latency;
mod llm;
mod outage;
mod reserve;
mod rlqs;
mod soak;
mod terminate;
mod timeouts;
mod upstreams;

use std::path::PathBuf;

use clap::Parser;
use floodgate_bench::cli::Cli;
use floodgate_bench::harness::LocalServer;
use serde_json::Value;

const POLICY: &str = "
store:
  kind: memory
rules:
  - name: fw
    match: { route: fw }
    key: [user]
    algorithm: fixed_window
    limit: 5
    window: 500ms
  - name: sl
    match: { route: sl }
    key: [user]
    algorithm: sliding_log
    limit: 5
    window: 500ms
  - name: load
    match: { route: load }
    key: [user]
    algorithm: sliding_window
    limit: 50
    window: 1s
";

/// Runs `args` through the library as the binary would, writing `--json`, and returns the JSON.
async fn bench(args: &[&str]) -> Value {
    let json = std::env::temp_dir().join(format!(
        "floodgate-bench-e2e-{}-{}.json",
        std::process::id(),
        args.join("_").len() ^ args.len() << 12 ^ fastrand()
    ));
    let mut argv = vec!["floodgate-bench"];
    argv.extend_from_slice(args);
    let json_arg = json.to_string_lossy().into_owned();
    argv.extend_from_slice(&["--quiet", "--json", &json_arg]);
    let cli = Cli::try_parse_from(&argv).expect("arguments");
    let report = floodgate_bench::run(&cli.scenario).await.expect("run");
    floodgate_bench::emit(&report, floodgate_bench::output(&cli.scenario)).expect("emit");
    let text = std::fs::read_to_string(&json).expect("json written");
    let _ = std::fs::remove_file(&json);
    serde_json::from_str(&text).expect("valid JSON")
}

/// The `floodgate` binary of this build, beside the test's directory (`cargo build -p
/// floodgate-server` makes it; the test fails saying so when it is missing).
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

fn fastrand() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn u(v: &Value, field: &str) -> u64 {
    v[field].as_u64().unwrap_or_else(|| panic!("{field} missing or not an integer in {v}"))
}

fn f(v: &Value, field: &str) -> f64 {
    v[field].as_f64().unwrap_or_else(|| panic!("{field} missing or not a number in {v}"))
}

/// The fields every report has, and `allowed + denied + errors = sent`.
fn assert_common(v: &Value, scenario: &str) {
    assert_eq!(v["scenario"], scenario);
    assert!(v["target"].is_string());
    assert!(f(v, "duration_s") > 0.0 && f(v, "decisions_per_sec") > 0.0, "{v}");
    let errors = u(&v["errors"], "total");
    assert!(v["errors"]["by_kind"].is_object());
    assert_eq!(u(v, "allowed") + u(v, "denied") + errors, u(v, "sent"), "{v}");
    let p: Vec<f64> = ["p50_us", "p90_us", "p99_us", "p999_us", "max_us"].iter().map(|k| f(v, k)).collect();
    assert!(p[0] > 0.0 && p.windows(2).all(|w| w[0] <= w[1]), "percentiles out of order: {p:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_reports_consistent_json_against_a_live_server() {
    let server = LocalServer::start(POLICY).await.expect("server");
    let url = server.url();
    let grpc = server.grpc_addr.to_string();

    // throughput over HTTP, closed loop: one hot key at 50/s, so both paths show (on a loaded
    // machine too: past the first 50 in each second every request is denied).
    let http = bench(&[
        "throughput",
        "--target",
        &url,
        "--with",
        "route=load",
        "--keys",
        "1",
        "-c",
        "4",
        "-d",
        "1s",
    ])
    .await;
    assert_common(&http, "throughput");
    assert_eq!(http["mode"], "closed");
    assert!(u(&http, "allowed") > 0 && u(&http, "denied") > 0, "{http}");
    assert_eq!(u(&http["errors"], "total"), 0, "{http}");

    // throughput over gRPC, open loop at a fixed rate.
    let rls =
        bench(&["throughput", "--grpc", &grpc, "--with", "route=load", "--rate", "400", "-d", "500ms"]).await;
    assert_common(&rls, "throughput");
    assert_eq!((rls["mode"].as_str(), u(&rls, "sent")), (Some("open"), 200), "{rls}");
    assert_eq!(rls["latency_from"], "scheduled");

    // boundary in real time against the server: fixed window over-admits, the sliding log never.
    let boundary = |route: &'static str, algorithm: &'static str| {
        let url = url.clone();
        async move {
            let with = format!("route={route}");
            let args = ["boundary", "--target", &url, "--with", &with, "--algorithm", algorithm];
            bench(&[&args[..], &["--limit", "5", "--window", "500ms", "--cycles", "1"]].concat()).await
        }
    };
    let (fixed, log) = tokio::join!(boundary("fw", "fixed_window"), boundary("sl", "sliding_log"));
    for (v, algorithm) in [(&fixed, "fixed_window"), (&log, "sliding_log")] {
        assert_common(v, "boundary");
        assert_eq!(v["algorithm"], algorithm);
        assert_eq!((u(v, "limit"), f(v, "window_ms")), (5, 500.0));
        assert_eq!(f(v, "over_admission_ratio"), u(v, "max_admitted_in_any_window") as f64 / 5.0);
    }
    assert!(f(&fixed, "over_admission_ratio") > 1.0, "{fixed}");
    assert!(f(&log, "over_admission_ratio") <= 1.0, "{log}");

    // instances: two in-process servers, each with its own memory store, admit the limit twice.
    let fleet = bench(&["instances", "-m", "2", "--limit", "20", "-c", "4", "-d", "500ms"]).await;
    assert_common(&fleet, "instances");
    assert_eq!((u(&fleet, "instances"), u(&fleet, "limit")), (2, 20));
    assert_eq!(u(&fleet, "admitted"), u(&fleet, "allowed"));
    assert_eq!(f(&fleet, "over_admission"), 2.0, "{fleet}");

    // fairness on a simulated clock: bots are rejected far more than humans.
    let fair =
        bench(&["fairness", "--normal-users", "50", "--nat-users", "10", "--bots", "2", "-d", "120s"]).await;
    assert_common(&fair, "fairness");
    assert_eq!((u(&fair, "normal_users"), u(&fair, "bots")), (60, 2));
    let (normal, bots) = (f(&fair, "false_rejection_rate"), f(&fair, "bot_rejection_rate"));
    assert!((0.0..=1.0).contains(&normal) && bots > 0.5 && bots > normal, "{fair}");

    server.stop().await;
}

#[tokio::test]
async fn simulated_boundaries_are_exact() {
    let fixed = bench(&["boundary", "--algorithm", "fixed_window", "--limit", "10", "--window", "1s"]).await;
    assert_common(&fixed, "boundary");
    assert_eq!((u(&fixed, "max_admitted_in_any_window"), f(&fixed, "over_admission_ratio")), (20, 2.0));
    assert_eq!(fixed["target"], "simulated");
    let log = bench(&["boundary", "--algorithm", "sliding_log", "--limit", "10", "--window", "1s"]).await;
    assert_eq!((u(&log, "max_admitted_in_any_window"), f(&log, "over_admission_ratio")), (10, 1.0));
}
