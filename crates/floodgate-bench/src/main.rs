//! `floodgate-bench`: parse the command line, run the scenario, write the report.

use clap::Parser;
use floodgate_bench::cli::{Cli, EXIT_RUNTIME, EXIT_USAGE};

/// The exit status after a `SIGTERM` (128 + 15, as a shell reports it).
const EXIT_TERMINATED: i32 = 143;

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    // A `SIGTERM` (`kill`, `pkill`, a CI's timeout) drops the scenario, and with it every server,
    // proxy and upstream it started, before exiting: none is left running behind it. (`Ctrl-C`
    // reaches the whole process group already; the soak scenario stops on it with a report.)
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(e) => {
            eprintln!("floodgate-bench: cannot watch for SIGTERM: {e}");
            std::process::exit(EXIT_RUNTIME);
        }
    };
    let result = tokio::select! {
        result = floodgate_bench::execute(&cli.scenario) => Some(result),
        _ = terminate.recv() => {
            eprintln!("floodgate-bench: terminated; the processes it started are stopped");
            None
        }
    };
    match result {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            eprintln!("floodgate-bench: {e:#}");
            let usage = e.downcast_ref::<floodgate_bench::Usage>().is_some();
            std::process::exit(if usage { EXIT_USAGE } else { EXIT_RUNTIME });
        }
        None => std::process::exit(EXIT_TERMINATED),
    }
}
