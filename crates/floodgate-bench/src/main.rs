//! `floodgate-bench`: parse the command line, run the scenario, write the report.

use clap::Parser;
use floodgate_bench::cli::{Cli, EXIT_RUNTIME, EXIT_USAGE};

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let result = floodgate_bench::execute(&cli.scenario).await;
    if let Err(e) = result {
        eprintln!("floodgate-bench: {e:#}");
        let usage = e.downcast_ref::<floodgate_bench::Usage>().is_some();
        std::process::exit(if usage { EXIT_USAGE } else { EXIT_RUNTIME });
    }
}
