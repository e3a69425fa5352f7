//! `floodgate-bench`: prove the limits before production — what a limiter really admits, and
//! what it costs.
//!
//! Scenarios (each a subcommand of the `floodgate-bench` binary; see `docs/bench.md`):
//! - [`throughput`]: decisions/s and latency percentiles against the HTTP API, Envoy RLS gRPC or
//!   the engine in-process; closed-loop (fixed concurrency) or open-loop (fixed arrival rate);
//!   uniform or Zipf keys; any cost.
//! - [`boundary`]: bursts just before and after window boundaries; the most admitted in any
//!   window-length span versus the limit (fixed window: 2×; sliding log: ≤ 1).
//! - [`fairness`]: humans, double-clicks, bursts, a NAT and bots on a simulated clock; the
//!   false-rejection rate of normal users and the rejection rate of bots.
//! - [`instances`]: M servers on the same key; total admitted versus the limit.
//! - [`outage`]: Redis paused or killed under load; errors, latency and admissions before, during
//!   and after the fault, and how long the store took to decide again.
//! - [`prefetch`]: one hot key through M engines sharing a Redis, without and with batch leases;
//!   store calls per decision and the most admitted in any window versus the limit.
//! - [`replay`]: access logs replayed against a policy (and a second one to compare) by the
//!   real engine on the log's clock; what each rule would have denied, and limits suggested
//!   from the keys' peaks. The command line of the `floodgate-replay` crate.
//! - [`flood`]: a flood of distinct keys beside normal users under their limits, on the memory
//!   store (capped) or a Redis; the normal users' false rejections (known users and newcomers
//!   apart), their latency, and what the store holds.
//! - [`slowloris`]: slow connections dripping header lines beside normal clients; the normal
//!   clients' latency without and with them, and how long the server takes to close them.
//! - [`durability`]: the persisted memory store: usage lost to `kill -9`, throughput beside the
//!   plain memory store, restart time with many keys.
//!
//! - [`reserve`]: callers reserving, committing, cancelling and crashing, on `floodgate`
//!   processes killed at random; the token ledger against the callers' accounting, exactly.
//!
//! Every run shows an indicatif progress bar, prints a table, and writes `--json PATH` and
//! `--plot PATH.svg` on request. The report math lives in [`report::math`]:
//!
//! ```
//! use floodgate_bench::report::math::{max_admitted_in_any_window, over_admission_ratio};
//! // 10 admitted 1 ms before a 1 s boundary and 10 just after it: 20 within one window.
//! let mut admitted = vec![(999_000, 1); 10];
//! admitted.extend(vec![(1_001_000, 1); 10]);
//! let max = max_admitted_in_any_window(&admitted, 1_000_000);
//! assert_eq!(over_admission_ratio(max, 10), 2.0);
//! ```

pub mod boundary;
pub mod cli;
pub mod durability;
pub mod fairness;
pub mod flood;
pub mod gateway;
pub mod harness;
pub mod instances;
pub mod outage;
pub mod prefetch;
pub mod replay;
pub mod report;
pub mod reserve;
pub mod slowloris;
pub mod throughput;

use anyhow::Context as _;

use crate::cli::{Output, Scenario};
use crate::report::Report;

/// A command-line or configuration error: the binary exits 64 with it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// Runs a scenario and returns its report (nothing written yet).
pub async fn run(scenario: &Scenario) -> anyhow::Result<Report> {
    match scenario {
        Scenario::Throughput(a) => throughput::run(a).await,
        Scenario::Boundary(a) => boundary::run(a).await,
        Scenario::Fairness(a) => fairness::run(a).await,
        Scenario::Instances(a) => instances::run(a).await,
        Scenario::Outage(a) => outage::run(a).await,
        Scenario::Prefetch(a) => prefetch::run(a).await,
        Scenario::Flood(a) => flood::run(a).await,
        Scenario::Gateway(a) => gateway::run(a).await,
        Scenario::Slowloris(a) => slowloris::run(a).await,
        Scenario::Reserve(a) => reserve::run(a).await,
        Scenario::Durability(a) => durability::run(a).await,
        Scenario::Replay(_) => Err(Usage("replay writes its own report: see replay::run".into()).into()),
    }
}

/// Runs a scenario and writes its report where its output flags ask.
pub async fn execute(scenario: &Scenario) -> anyhow::Result<()> {
    match scenario {
        Scenario::Replay(a) => replay::run(a),
        s => emit(&run(s).await?, output(s)),
    }
}

/// The output flags of a scenario.
pub fn output(scenario: &Scenario) -> &Output {
    match scenario {
        Scenario::Throughput(a) => &a.output,
        Scenario::Boundary(a) => &a.output,
        Scenario::Fairness(a) => &a.output,
        Scenario::Instances(a) => &a.output,
        Scenario::Outage(a) => &a.output,
        Scenario::Prefetch(a) => &a.output,
        Scenario::Flood(a) => &a.output,
        Scenario::Gateway(a) => &a.output,
        Scenario::Replay(a) => &a.output,
        Scenario::Slowloris(a) => &a.output,
        Scenario::Reserve(a) => &a.output,
        Scenario::Durability(a) => &a.output,
    }
}

/// Writes the report where `output` asks: the table on stdout, `--json`, `--plot`.
pub fn emit(report: &Report, output: &Output) -> anyhow::Result<()> {
    if !output.quiet {
        println!("{}", report.table());
    }
    if let Some(path) = &output.json {
        std::fs::write(path, report.to_json() + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &output.plot {
        let s = &report.summary;
        let title = format!("floodgate-bench {} — {} ({} sent)", s.scenario, s.target, s.sent);
        let timeline =
            report.timeline.clone().unwrap_or_else(|| report::math::Timeline::new(report::BUCKET_MS));
        let svg = report::plot::svg(&title, &timeline, report.latency.as_ref(), &report.overlay);
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
