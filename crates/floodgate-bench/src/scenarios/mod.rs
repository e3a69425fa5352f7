//! The scenarios: each a file, or a folder when it is more than one subject, owning its flags
//! (`<Name>Args`) and what runs them (`Run`). `cli.rs` lists them as subcommands.

pub mod boundary;
pub mod durability;
pub mod fairness;
pub mod flood;
pub mod gateway;
pub mod instances;
pub mod outage;
pub mod prefetch;
pub mod replay;
pub mod reserve;
pub mod slowloris;
pub mod throughput;

use crate::args::Output;
use crate::report::Report;

/// What a scenario's arguments do: run it.
pub(crate) trait Run {
    /// The output flags.
    fn output(&self) -> &Output;

    /// Runs the scenario and returns its report (nothing written yet).
    async fn run(&self) -> anyhow::Result<Report>;

    /// Runs the scenario and writes its report where the output flags ask: the table on stdout,
    /// `--json`, `--plot`.
    async fn execute(&self) -> anyhow::Result<()> {
        crate::emit(&self.run().await?, self.output())
    }
}
