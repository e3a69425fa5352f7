//! The command line: `floodgate serve` and `floodgate check-config`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The exit code for a configuration or usage error (`EX_USAGE`): a bad config file, an admin API
/// exposed without a token, a store configuration the Redis client refuses.
pub const EXIT_CONFIG: i32 = 64;
/// The exit code when a listener cannot be bound or the server fails while running.
pub const EXIT_RUNTIME: i32 = 1;

/// Floodgate: a rate-limit service. One engine; an HTTP check API, Envoy's RLS v3 gRPC, and an
/// admin API.
#[derive(Debug, Parser)]
#[command(name = "floodgate", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs the service (HTTP API and admin on --http, Envoy RLS gRPC on --grpc).
    Serve(ServeArgs),
    /// Validates a configuration file or directory: exits 0, or 64 with the error (file, line,
    /// column, field).
    CheckConfig(CheckConfigArgs),
}

/// `floodgate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Configuration: a native YAML file, an envoyproxy/ratelimit YAML file, or a directory of
    /// them. Without it, the built-in example policy runs on the memory store.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// HTTP listener: the check API, health, metrics and the admin API.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub http: SocketAddr,
    /// gRPC listener: Envoy's rate limit service (RLS v3).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    pub grpc: SocketAddr,
    /// Bearer token for the admin API; required when --http is not a loopback address.
    #[arg(long, value_name = "TOKEN", env = "FLOODGATE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Do not watch the configuration file for changes (reload with SIGHUP or the admin API).
    #[arg(long)]
    pub no_watch: bool,
}

/// `floodgate check-config`.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The configuration file or directory.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_defaults_to_loopback_ports_8080_and_8081() {
        let cli = Cli::try_parse_from(["floodgate", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else { panic!("serve") };
        assert_eq!(args.http, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(args.grpc, "127.0.0.1:8081".parse().unwrap());
        assert!(args.config.is_none() && !args.no_watch);
    }

    #[test]
    fn check_config_takes_a_path() {
        let cli = Cli::try_parse_from(["floodgate", "check-config", "x.yaml"]).unwrap();
        assert!(
            matches!(cli.command, Command::CheckConfig(CheckConfigArgs { path }) if path.as_os_str() == "x.yaml")
        );
    }
}
