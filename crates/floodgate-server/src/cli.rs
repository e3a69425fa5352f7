//! The command line: `floodgate serve`, `floodgate check-config` and `floodgate openapi` — their
//! arguments, and what each does with a loaded configuration. `main.rs` only parses, loads and calls in here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use floodgate_config::Config;

use crate::Server;
use crate::server::check_admin_exposure;
use floodgate_app::{App, ServeOptions};

/// The exit code for a configuration or usage error (`EX_USAGE`): a bad config file, an admin API
/// exposed without a token, a store configuration the Redis client refuses.
pub const EXIT_CONFIG: i32 = 64;
/// The exit code when a listener cannot be bound or the server fails while running.
pub const EXIT_RUNTIME: i32 = 1;

/// The version `floodgate --version` prints: the package version and the git commit the binary
/// was built from (`unknown` for a build without git: see `build.rs`).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("FLOODGATE_COMMIT"), ")");

/// The git commit the binary was built from, or `unknown`.
pub const COMMIT: &str = env!("FLOODGATE_COMMIT");

/// Floodgate: a rate-limit service. One engine; an HTTP check API, Envoy's RLS v3 gRPC, and an
/// admin API.
#[derive(Debug, Parser)]
#[command(name = "floodgate", version = VERSION, about)]
pub struct Cli {
    /// How log lines are written to stderr: `text` (human-readable, the default) or `json` (one
    /// JSON object a line, every field at the top level, for log pipelines).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text, env = "FLOODGATE_LOG_FORMAT", global = true)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The format of log lines (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-12-02T07:00:00.000000Z  INFO floodgate_app::control: configuration applied version=2 …`
    Text,
    /// `{"timestamp":"…","level":"INFO","event":"config_applied","version":2,…,"message":"configuration applied"}`
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs the service (HTTP API and admin on --http, Envoy RLS gRPC on --grpc).
    Serve(ServeArgs),
    /// Validates a configuration file or directory: exits 0, or 64 with the error (file, line,
    /// column, field).
    CheckConfig(CheckConfigArgs),
    /// Prints the HTTP API's OpenAPI 3.1 document (what `GET /openapi.json` serves), e.g.
    /// `floodgate openapi > docs/openapi.json`.
    Openapi,
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
    /// Logs this share of decisions, one line each (`event=decision`: front door, rules and
    /// outcomes, descriptors): `0.001` logs about one in a thousand. 0 (the default) logs none;
    /// 1 logs every decision (for debugging: a line per request).
    #[arg(long, value_name = "SHARE", default_value_t = 0.0, value_parser = sample_share)]
    pub decision_log_sample: f64,
    /// Gateway listener, overriding the configuration's `gateway.listen` (only with a `gateway:`
    /// section).
    #[arg(long, value_name = "ADDR")]
    pub gateway: Option<SocketAddr>,
    /// Keep the admin state here: configuration versions, the audit log and the gateway's admin
    /// switches, on disk before each admin call is answered (the configuration's admin.state_dir
    /// says the same).
    #[arg(long, value_name = "DIR", env = "FLOODGATE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// For tests: the memory store's clock stands at this time (milliseconds since the Unix epoch)
    /// and moves only when `POST /admin/clock` moves it, so that a test drives windows, blocks and
    /// expiries deterministically. Never in production: time stands still without it. Memory
    /// store only.
    #[arg(long, value_name = "MS")]
    pub manual_clock: Option<u64>,
    /// Threads serving the HTTP and gateway listeners' connections, each a single-threaded runtime
    /// that keeps a connection from its accept to its close (thread per core). 0 serves them on one
    /// work-stealing runtime instead. Default: the number of cores.
    #[arg(long, value_name = "N", env = "FLOODGATE_WORKERS")]
    pub workers: Option<usize>,
}

/// A share of decisions to log: a number from 0 to 1.
fn sample_share(text: &str) -> Result<f64, String> {
    let share: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number from 0 to 1"))?;
    if !(0.0..=1.0).contains(&share) {
        return Err(format!("{text} is not a share from 0 to 1 (0.001 logs one decision in a thousand)"));
    }
    Ok(share)
}

/// `floodgate check-config`.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The configuration file or directory.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
}

/// Logs to stderr, at `RUST_LOG`'s levels (default `info`): text (in colour on a terminal), or
/// one JSON object a line with the event's fields at the top level.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
        LogFormat::Json => {
            builder.json().flatten_event(true).with_current_span(false).with_span_list(false).init()
        }
    }
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// `floodgate check-config PATH`: prints a summary and exits 0, or prints the error (file, line,
/// column, field) and exits 64.
pub fn check_config(args: &CheckConfigArgs) -> ExitCode {
    match floodgate_config::load(&args.path) {
        Ok(config) => {
            let rules = config.policy.rules().count();
            let domains: Vec<&str> = config.domains.keys().map(String::as_str).collect();
            println!(
                "{}: ok ({rules} native rules, domains: {domains:?}, hash {})",
                args.path.display(),
                config.source.hash
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            exit(EXIT_CONFIG)
        }
    }
}

/// `floodgate openapi`: prints the document `GET /openapi.json` serves.
pub fn openapi() -> ExitCode {
    print!("{}", floodgate_api::http::openapi::json());
    ExitCode::SUCCESS
}

/// The configuration `floodgate serve` runs: `--config`'s, or the built-in example. On an invalid
/// one, the error is printed and the exit code is 64 — before anything is bound.
pub fn load(args: &ServeArgs) -> Result<Config, ExitCode> {
    let config = match &args.config {
        Some(path) => floodgate_config::load(path),
        None => Ok(floodgate_config::builtin()),
    };
    config.map_err(|e| {
        eprintln!("floodgate: invalid configuration: {e}");
        exit(EXIT_CONFIG)
    })
}

/// `floodgate serve` with `config`: refuses an exposed admin API without a token (64), binds the
/// listeners (1 when one cannot be bound), serves until `SIGTERM`/`SIGINT`, then exits 0.
pub fn serve(args: ServeArgs, config: Config) -> ExitCode {
    let admin_clients = config
        .auth
        .as_ref()
        .is_some_and(|a| a.clients.iter().any(|c| c.scopes.contains(floodgate_config::auth::Scope::Admin)));
    if let Err(e) = check_admin_exposure(
        args.http,
        args.admin_token.as_deref().is_some_and(|t| !t.is_empty()) || admin_clients,
    ) {
        eprintln!("floodgate: {e}");
        return exit(EXIT_CONFIG);
    }
    let mut options = ServeOptions::default().sighup(true).watch(args.config.is_some() && !args.no_watch);
    options.config_path = args.config.clone();
    options.admin_token = args.admin_token.clone();
    options.decision_log_sample = args.decision_log_sample;
    options.state_dir = args.state_dir.clone();
    options.manual_clock = args.manual_clock.map(floodgate_core::Timestamp::from_millis);

    // Before anything is served: nothing has started the workers yet.
    if let Some(workers) = args.workers
        && let Err(running) = floodgate_app::workers::Workers::configure(workers)
    {
        eprintln!("floodgate: --workers {workers} comes too late: {running} workers already serve");
        return exit(EXIT_RUNTIME);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("floodgate: cannot start the runtime: {e}");
            return exit(EXIT_RUNTIME);
        }
    };
    runtime.block_on(async move {
        let app = match App::new(config, options) {
            Ok(app) => app,
            Err(e) => {
                eprintln!("floodgate: {e}");
                return exit(EXIT_CONFIG);
            }
        };
        // A Redis store is opened without connecting: the server starts and serves while Redis is
        // down (not ready, rules following `on_store_error`) and connects once it answers.
        let store = app.control().store();
        if store.kind() != "memory" && !store.ready().await.is_ready() {
            tracing::warn!(
                store = store.kind(),
                "the store does not answer yet: serving anyway, not ready until it does"
            );
        }
        if let Err(e) = app.metrics().install_global() {
            tracing::warn!(error = %e, "metrics recorder already installed");
        }
        let gateway_addr = app.control().current().gateway.as_ref().map(|g| args.gateway.unwrap_or(g.listen));
        if gateway_addr.is_none() && args.gateway.is_some() {
            eprintln!("floodgate: --gateway needs a configuration with a gateway section");
            return exit(EXIT_CONFIG);
        }
        let bound = async {
            let http = tokio::net::TcpListener::bind(args.http).await.map_err(|e| (args.http, e))?;
            let grpc = tokio::net::TcpListener::bind(args.grpc).await.map_err(|e| (args.grpc, e))?;
            let gateway = match gateway_addr {
                Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| (addr, e))?),
                None => None,
            };
            Ok::<_, (SocketAddr, std::io::Error)>((http, grpc, gateway))
        };
        let (http, grpc, gateway) = match bound.await {
            Ok(listeners) => listeners,
            Err((addr, e)) => {
                eprintln!("floodgate: cannot listen on {addr}: {e}");
                return exit(EXIT_RUNTIME);
            }
        };
        let server = match Server::new(app, http, Some(grpc)) {
            Ok(server) => server,
            Err(e) => {
                eprintln!("floodgate: {e}");
                return exit(EXIT_CONFIG);
            }
        };
        let server = match gateway {
            Some(listener) => match server.gateway(listener) {
                Ok(server) => server,
                Err(e) => {
                    eprintln!("floodgate: {e}");
                    return exit(EXIT_CONFIG);
                }
            },
            None => server,
        };
        if let Some(addr) = server.gateway_addr() {
            tracing::info!(event = "serving", gateway = %addr, "gateway serving");
        }
        let grpc = server.grpc_addr().map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(
            event = "serving",
            http = %server.http_addr(),
            grpc = %grpc,
            workers = floodgate_app::workers::Workers::get().map_or(0, floodgate_app::workers::Workers::count),
            version = env!("CARGO_PKG_VERSION"),
            commit = COMMIT,
            "floodgate serving"
        );
        match server.run(crate::shutdown_signal()).await {
            Ok(()) => {
                tracing::info!("stopped");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("floodgate: {e}");
                exit(EXIT_RUNTIME)
            }
        }
    })
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
        assert_eq!(args.decision_log_sample, 0.0, "no decision is logged unless asked");
        assert_eq!(cli.log_format, LogFormat::Text);
    }

    #[test]
    fn the_log_format_is_accepted_before_and_after_the_subcommand() {
        for args in [
            &["floodgate", "--log-format", "json", "serve"][..],
            &["floodgate", "serve", "--log-format", "json"],
        ] {
            assert_eq!(Cli::try_parse_from(args).unwrap().log_format, LogFormat::Json);
        }
        assert!(Cli::try_parse_from(["floodgate", "--log-format", "xml", "serve"]).is_err());
    }

    #[test]
    fn a_decision_log_share_outside_0_to_1_is_refused_with_the_reason() {
        let parse = |share: &str| {
            let flag = format!("--decision-log-sample={share}");
            Cli::try_parse_from(["floodgate", "serve", flag.as_str()]).map(|cli| match cli.command {
                Command::Serve(args) => args.decision_log_sample,
                _ => unreachable!("serve"),
            })
        };
        assert_eq!(parse("0.001").unwrap(), 0.001);
        assert_eq!(parse("1").unwrap(), 1.0);
        for bad in ["1.5", "-0.1", "NaN", "often"] {
            let error = parse(bad).unwrap_err().to_string();
            assert!(error.contains("from 0 to 1"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_version_names_the_package_version_and_a_commit() {
        assert!(VERSION.starts_with(env!("CARGO_PKG_VERSION")), "{VERSION}");
        assert!(COMMIT == "unknown" || COMMIT.bytes().all(|b| b.is_ascii_hexdigit()), "{COMMIT}");
        assert!(VERSION.ends_with(&format!("(commit {COMMIT})")), "{VERSION}");
    }

    #[test]
    fn check_config_takes_a_path() {
        let cli = Cli::try_parse_from(["floodgate", "check-config", "x.yaml"]).unwrap();
        assert!(
            matches!(cli.command, Command::CheckConfig(CheckConfigArgs { path }) if path.as_os_str() == "x.yaml")
        );
    }
}
