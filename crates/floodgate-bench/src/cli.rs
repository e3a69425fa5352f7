//! The command line: `floodgate-bench <scenario> [flags]`, a subcommand per scenario. Each
//! scenario owns its flags (`scenarios/<name>`); the list below is all that names them, so adding
//! one is its folder and one line here.

use clap::{Parser, Subcommand};

use crate::args::Output;
use crate::report::Report;
use crate::scenarios::{self, Run as _};

/// Exit code for a bad command line or configuration (`EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;
/// Exit code when a run fails (a target cannot be reached, a file cannot be written).
pub const EXIT_RUNTIME: i32 = 1;

/// Floodgate's load and accuracy bench: what a limiter really admits, and what it costs.
#[derive(Debug, Parser)]
#[command(name = "floodgate-bench", version, about)]
pub struct Cli {
    /// The scenario.
    #[command(subcommand)]
    pub scenario: Scenario,
}

/// The subcommands, each a scenario's arguments: the `Scenario` enum, and its dispatch to the
/// scenario's `Run`.
macro_rules! scenarios {
    ($($(#[$doc:meta])* $name:ident($args:ty),)*) => {
        /// The scenarios.
        #[derive(Debug, Subcommand)]
        pub enum Scenario {
            $($(#[$doc])* $name($args),)*
        }

        impl Scenario {
            /// Runs the scenario and returns its report (nothing written yet).
            pub async fn run(&self) -> anyhow::Result<Report> {
                match self {
                    $(Scenario::$name(args) => args.run().await,)*
                }
            }

            /// Runs the scenario and writes its report where its output flags ask.
            pub async fn execute(&self) -> anyhow::Result<()> {
                match self {
                    $(Scenario::$name(args) => args.execute(&args.output).await,)*
                }
            }

            /// The scenario's output flags.
            pub fn output(&self) -> &Output {
                match self {
                    $(Scenario::$name(args) => &args.output,)*
                }
            }
        }
    };
}

scenarios! {
    /// Decisions per second and latency percentiles against a target, closed-loop (fixed
    /// concurrency) or open-loop (fixed arrival rate).
    Throughput(scenarios::throughput::ThroughputArgs),
    /// Bursts just before and just after window boundaries: the most admitted in any window-length
    /// span versus the limit (the fixed-window 2× problem made visible).
    Boundary(scenarios::boundary::BoundaryArgs),
    /// Tail latency at equal offered load (open loop, no coordinated omission): Floodgate's gateway
    /// beside nginx and its check API beside limitador-server, at fractions of the peer's
    /// closed-loop maximum.
    Latency(scenarios::latency::LatencyArgs),
    /// Mixed traffic (human users, double-clicks, bursts, NAT, bots) on a simulated clock: the
    /// false-rejection rate of normal users and the rejection rate of bots.
    Fairness(scenarios::fairness::FairnessArgs),
    /// M servers (in-process, each with its own memory store, or M given targets) hammered on the
    /// same key: total admitted versus the limit.
    Instances(scenarios::instances::InstancesArgs),
    /// Redis paused or killed under load (a `redis-server` this run starts, shared by in-process
    /// servers): errors, decision latency and admissions before, during and after the fault, and
    /// how long the store took to decide again.
    Outage(scenarios::outage::OutageArgs),
    /// One hot key through M in-process engines sharing a Redis, without and with batch leases
    /// (`prefetch`): store calls per decision, and the most admitted in any window versus the limit.
    Prefetch(scenarios::prefetch::PrefetchArgs),
    /// On a 3-master Redis Cluster this run starts, requests their own limit denies beside
    /// requests that exactly fill a shared one: the fitting requests refused (under-admission per
    /// 10,000) for each cross-slot order, `at_once` and `denied_first`, beside keys in one slot.
    CrossSlot(scenarios::cross_slot::CrossSlotArgs),
    /// Simulated Envoys deciding locally from RLQS assignments against one global limit, on 1 and
    /// N Floodgate instances over one Redis, beside a static equal split and RLS (a call per
    /// request): fleet-wide admitted ÷ limit, the hot Envoy's share of its demand, re-convergence
    /// after a shift, calls per decision.
    Rlqs(scenarios::rlqs::RlqsArgs),
    /// Floodgate's gateway beside nginx (`limit_req` + `proxy_pass`) in front of the same upstream:
    /// the latency each adds over the upstream, throughput on the allowed path, and what each admits
    /// at the limit (a bursty client under it, a flood over it).
    Gateway(scenarios::gateway::GatewayArgs),
    /// Floodgate's gateway in front of the same upstream over HTTP/1.1, h2c, HTTPS with HTTP/1.1
    /// and HTTPS with HTTP/2 by ALPN: throughput (and its ratio to HTTP/1.1), p50/p99/p99.9,
    /// errors, and the upstream connections each used.
    Upstreams(scenarios::upstreams::UpstreamsArgs),
    /// A flood of distinct keys (a new user id per request) beside normal users who stay under
    /// their limit, on the memory store (capped at `max_keys`) or a Redis this run starts: the
    /// normal users' false rejections, known users and newcomers apart, their latency, and what
    /// the store holds.
    Flood(scenarios::flood::FloodArgs),
    /// Access logs (nginx/Apache combined, Envoy, JSON lines; gzip or not) replayed against a
    /// policy by the real engine on a clock the log's timestamps drive: what each rule would have
    /// denied, to whom, and when; `--compare` a second policy; `--suggest` limits from the log.
    Replay(scenarios::replay::ReplayArgs),
    /// Slow connections that send a request's headers one line at a time and never finish
    /// (slowloris), beside normal clients: the normal clients' latency without and with them, and
    /// how long the server takes to close each slow connection.
    Slowloris(scenarios::slowloris::SlowlorisArgs),
    /// Callers reserving an estimate, then committing an actual, cancelling or crashing, on the
    /// memory store or on `floodgate` processes sharing a Redis and killed at random: the token
    /// ledger against what the callers know, exactly, the limit at all times, and the permits left.
    Reserve(scenarios::reserve::ReserveArgs),
    /// The persisted memory store: acknowledged usage lost to `kill -9` of the real binary
    /// (`fsync: always` and `50ms`), throughput beside the plain memory store over HTTP, and the
    /// restart time and file sizes with many keys.
    Durability(scenarios::durability::DurabilityArgs),
    /// The gateway's timeout budgets (`connect`, `first_byte`, `total`) against upstreams that
    /// never answer, beside nginx's: how close to its value each fires.
    Timeouts(scenarios::timeouts::TimeoutsArgs),
    /// Steady mixed traffic — checks, reserve/commit pairs, gateway requests — against one
    /// `floodgate serve` process on the memory store or a Redis this run starts, for up to an hour:
    /// the server's memory, descriptors, threads and each kind's p99 sampled, their drift after a
    /// warm-up, errors and wrong answers.
    Soak(scenarios::soak::SoakArgs),
    /// The LLM gateway under 64 concurrent streaming clients of one tenant with a token budget,
    /// on 3 `floodgate` processes sharing a Redis, before the project's OpenAI-compatible upstream:
    /// tokens generated beyond the budget under `cut` and `finish`, throughput and the latency added
    /// over the upstream; `--peer litellm` beside LiteLLM's proxy.
    Llm(scenarios::llm::LlmArgs),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
