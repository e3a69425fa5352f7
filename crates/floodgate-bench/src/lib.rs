//! `floodgate-bench`: prove the limits before production — what a limiter really admits, and
//! what it costs.
//!
//! Scenarios (each a subcommand of the `floodgate-bench` binary; see `docs/bench.md`), each in
//! [`scenarios`] with the flags it owns:
//! - [`throughput`](scenarios::throughput): decisions/s and latency percentiles against the HTTP
//!   API, Envoy RLS gRPC or the engine in-process; closed-loop (fixed concurrency) or open-loop
//!   (fixed arrival rate); uniform or Zipf keys; any cost.
//! - [`boundary`](scenarios::boundary): bursts just before and after window boundaries; the most
//!   admitted in any window-length span versus the limit (fixed window: 2×; sliding log: ≤ 1).
//! - [`fairness`](scenarios::fairness): humans, double-clicks, bursts, a NAT and bots on a
//!   simulated clock; the false-rejection rate of normal users and the rejection rate of bots.
//! - [`instances`](scenarios::instances): M servers on the same key; total admitted versus the
//!   limit.
//! - [`outage`](scenarios::outage): Redis paused or killed under load; errors, latency and
//!   admissions before, during and after the fault, and how long the store took to decide again.
//! - [`prefetch`](scenarios::prefetch): one hot key through M engines sharing a Redis, without and
//!   with batch leases; store calls per decision and the most admitted in any window versus the
//!   limit.
//! - [`cross_slot`](scenarios::cross_slot): on a Redis Cluster the run starts, requests their own
//!   limit denies beside requests that exactly fill a shared one; the fitting requests refused
//!   (under-admission per 10,000) for each cross-slot order, beside keys in one slot.
//! - [`replay`](scenarios::replay): access logs replayed against a policy (and a second one to
//!   compare) by the real engine on the log's clock; what each rule would have denied, and limits
//!   suggested from the keys' peaks. The command line of the `floodgate-replay` crate.
//! - [`flood`](scenarios::flood): a flood of distinct keys beside normal users under their
//!   limits, on the memory store (capped) or a Redis; the normal users' false rejections (known
//!   users and newcomers apart), their latency, and what the store holds.
//! - [`gateway`](scenarios::gateway): Floodgate's gateway beside nginx `limit_req` in front of the
//!   same upstream: the latency each adds, and what each admits at the limit.
//! - [`upstreams`](scenarios::upstreams): the gateway in front of the same upstream over
//!   HTTP/1.1, h2c, HTTPS/1.1 and HTTPS/2 (ALPN); throughput, its ratio to HTTP/1.1, latency,
//!   and the upstream connections each protocol used.
//! - [`slowloris`](scenarios::slowloris): slow connections dripping header lines beside normal
//!   clients; the normal clients' latency without and with them, and how long the server takes to
//!   close them.
//! - [`durability`](scenarios::durability): the persisted memory store: usage lost to `kill -9`,
//!   throughput beside the plain memory store, restart time with many keys.
//! - [`reserve`](scenarios::reserve): callers reserving, committing, cancelling and crashing, on
//!   `floodgate` processes killed at random; the token ledger against the callers' accounting,
//!   exactly.
//! - [`timeouts`](scenarios::timeouts): the gateway's `connect`, `first_byte` and `total`
//!   budgets against upstreams that never answer, beside nginx's: how close to its value each
//!   fires.
//! - [`soak`](scenarios::soak): steady mixed traffic — checks, reserve/commit pairs, gateway
//!   requests — against one `floodgate serve` process on memory or Redis for up to an hour; the
//!   server's memory, descriptors, threads and each kind's p99 sampled, their drift after a
//!   warm-up against its goal, errors and wrong answers.
//!
//! They run on the [`harness`] — the processes a run starts and stops (`floodgate serve`, nginx,
//! peers, `redis-server` nodes and clusters through `floodgate-testkit`'s launcher), free ports,
//! an in-process server, the upstream behind a gateway, the HTTP client and the targets — and
//! write a [`report`]. [`cli`] lists the subcommands; [`args`] holds the flags several scenarios
//! share. Adding a scenario is a file or folder in `scenarios/` and one line in [`cli`].
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

pub mod args;
pub mod cli;
pub mod harness;
pub mod report;
pub mod scenarios;

use anyhow::Context as _;

use crate::args::Output;
use crate::cli::Scenario;
use crate::report::Report;

/// A command-line or configuration error: the binary exits 64 with it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// Runs a scenario and returns its report (nothing written yet).
pub async fn run(scenario: &Scenario) -> anyhow::Result<Report> {
    scenario.run().await
}

/// Runs a scenario and writes its report where its output flags ask.
pub async fn execute(scenario: &Scenario) -> anyhow::Result<()> {
    scenario.execute().await
}

/// The output flags of a scenario.
pub fn output(scenario: &Scenario) -> &Output {
    scenario.output()
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
