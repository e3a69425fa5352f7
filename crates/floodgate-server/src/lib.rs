//! The `floodgate` binary's library: the command line ([`cli`]), the [`Server`] that wires an app
//! (`floodgate-app`) to its front doors on bound listeners — the HTTP API and Envoy RLS
//! (`floodgate-api`), the gateway (`floodgate-gateway`) — and the process's signals.
//!
//! Everything a request meets lives in those crates; this one only assembles them.
//!
//! ```no_run
//! # async fn run() -> anyhow::Result<()> {
//! use floodgate_app::{App, ServeOptions};
//! use floodgate_server::Server;
//! use tokio::net::TcpListener;
//!
//! let app = App::new(floodgate_config::builtin(), ServeOptions::default())?;
//! let http = TcpListener::bind("127.0.0.1:0").await?;
//! let grpc = TcpListener::bind("127.0.0.1:0").await?;
//! let server = Server::new(app, http, Some(grpc))?;
//! println!("HTTP on {}", server.http_addr());
//! server.run(async { tokio::signal::ctrl_c().await.ok(); }).await?;
//! # Ok(()) }
//! ```

pub mod cli;
mod server;
mod signals;

pub use server::{Server, check_admin_exposure};
pub use signals::shutdown_signal;
