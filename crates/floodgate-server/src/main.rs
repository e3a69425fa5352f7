//! `floodgate`: the standalone rate-limit service. See `floodgate --help`.

use std::process::ExitCode;

use clap::Parser;
use floodgate_server::cli::{CheckConfigArgs, Cli, Command, EXIT_CONFIG, EXIT_RUNTIME, ServeArgs};
use floodgate_server::{App, ServeOptions, Server, app::check_admin_exposure, config};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::CheckConfig(args) => check_config(&args),
        Command::Serve(args) => serve(args),
    }
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn check_config(args: &CheckConfigArgs) -> ExitCode {
    match config::load(&args.path) {
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

fn serve(args: ServeArgs) -> ExitCode {
    // Everything that can be wrong with the configuration is reported before binding anything.
    let config = match &args.config {
        Some(path) => config::load(path),
        None => Ok(config::builtin()),
    };
    let config = match config {
        Ok(config) => config,
        Err(e) => {
            eprintln!("floodgate: invalid configuration: {e}");
            return exit(EXIT_CONFIG);
        }
    };
    if let Err(e) =
        check_admin_exposure(args.http, args.admin_token.as_deref().is_some_and(|t| !t.is_empty()))
    {
        eprintln!("floodgate: {e}");
        return exit(EXIT_CONFIG);
    }
    let mut options = ServeOptions::default().sighup(true).watch(args.config.is_some() && !args.no_watch);
    options.config_path = args.config.clone();
    options.admin_token = args.admin_token.clone();

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
        if !matches!(store, floodgate_server::store::ServerStore::Memory(_)) && !store.ready().await {
            tracing::warn!(
                store = store.kind(),
                "the store does not answer yet: serving anyway, not ready until it does"
            );
        }
        if let Err(e) = app.metrics().install_global() {
            tracing::warn!(error = %e, "metrics recorder already installed");
        }
        let bound = async {
            let http = tokio::net::TcpListener::bind(args.http).await.map_err(|e| (args.http, e))?;
            let grpc = tokio::net::TcpListener::bind(args.grpc).await.map_err(|e| (args.grpc, e))?;
            Ok::<_, (std::net::SocketAddr, std::io::Error)>((http, grpc))
        };
        let (http, grpc) = match bound.await {
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
        let grpc = server.grpc_addr().map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(http = %server.http_addr(), grpc = %grpc, "floodgate serving");
        match server.run(floodgate_server::shutdown_signal()).await {
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
