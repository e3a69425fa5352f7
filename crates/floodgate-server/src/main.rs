//! `floodgate`: the standalone rate-limit service. See `floodgate --help`.

use std::process::ExitCode;

use clap::Parser;
use floodgate_server::cli::{self, Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::init_logging();
    match cli.command {
        Command::CheckConfig(args) => cli::check_config(&args),
        Command::Serve(args) => match cli::load(&args) {
            Ok(config) => cli::serve(args, config),
            Err(code) => code,
        },
    }
}
