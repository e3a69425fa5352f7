//! `floodgate`: the standalone rate-limit service. See `floodgate --help`.

use std::process::ExitCode;

use clap::Parser;
use floodgate_server::cli::{self, Cli, Command};

/// mimalloc rather than the system allocator: a decision allocates little, but the HTTP and gRPC
/// stacks around it allocate per request, and glibc's malloc took ~13% of the server's CPU on
/// `/v1/check` (BENCHMARKS.md). The `system-allocator` feature keeps the system's, for tools that
/// watch `malloc` (a heap profile with `heaptrack`, as BENCHMARKS.md's soak section does).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::init_logging(cli.log_format);
    match cli.command {
        Command::CheckConfig(args) => cli::check_config(&args),
        Command::Openapi => cli::openapi(),
        Command::Serve(args) => match cli::load(&args) {
            Ok(config) => cli::serve(args, config),
            Err(code) => code,
        },
    }
}
