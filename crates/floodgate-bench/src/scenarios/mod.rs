//! The scenarios: each a file, or a folder when it is more than one subject, owning its flags
//! (`<Name>Args`) and what runs them (`Run`). `cli.rs` lists them as subcommands.

pub mod boundary;
pub mod cross_slot;
pub mod durability;
pub mod fairness;
pub mod flood;
pub mod gateway;
pub mod instances;
pub mod latency;
pub mod llm;
pub mod outage;
pub mod prefetch;
pub mod replay;
pub mod reserve;
pub mod rlqs;
pub mod slowloris;
pub mod soak;
pub mod throughput;
pub mod timeouts;
pub mod upstreams;

use crate::args::Output;
use crate::report::Report;

/// What a scenario's arguments do: run it. (Every scenario's arguments also hold its output
/// flags, `output`.)
pub(crate) trait Run {
    /// Runs the scenario and returns its report (nothing written yet).
    async fn run(&self) -> anyhow::Result<Report>;

    /// Runs the scenario and writes its report where `output` (its output flags) asks: the table
    /// on stdout, `--json`, `--plot`.
    async fn execute(&self, output: &Output) -> anyhow::Result<()> {
        crate::emit(&self.run().await?, output)
    }
}
