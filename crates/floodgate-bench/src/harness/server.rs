//! A `floodgate` server in this process (`instances`, `outage`, `flood`, `slowloris`, `durability`,
//! the end-to-end tests): HTTP and gRPC on loopback ports, on the configuration it is given.
//!
//! This is the one file of the bench that starts a service: the app (`floodgate-app`) with the
//! API's doors (`floodgate-api`), as the `floodgate` binary wires them.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use floodgate_app::{App, ServeOptions};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::client;
use super::target::{Shape, Target};
use crate::Usage;
use crate::report::Outcome;

/// How long a server may take to be ready, and to have a decision from its store (a Redis store
/// connects on its first call).
pub(crate) const STARTUP: Duration = Duration::from_secs(10);

/// The memory store's key count on a server's `/metrics` (a gauge per store).
pub(crate) const METRIC_KEYS: &str = floodgate_app::metrics::KEYS;

/// A `floodgate` server running in this process on a loopback port.
#[derive(Debug)]
pub struct LocalServer {
    /// Its HTTP address.
    pub addr: SocketAddr,
    /// Its gRPC (Envoy RLS) address.
    pub grpc_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    app: App,
}

impl LocalServer {
    /// Starts a server with the configuration `yaml` (native format), HTTP and gRPC on
    /// `127.0.0.1:0`.
    pub async fn start(yaml: &str) -> anyhow::Result<LocalServer> {
        let config = floodgate_config::parse("floodgate-bench", yaml).map_err(|e| Usage(e.to_string()))?;
        LocalServer::start_config(config).await
    }

    /// Starts a server with a loaded `config`, HTTP and gRPC on `127.0.0.1:0`.
    pub async fn start_config(config: floodgate_config::Config) -> anyhow::Result<LocalServer> {
        let app = App::new(config, ServeOptions::default())?;
        let http = TcpListener::bind("127.0.0.1:0").await?;
        let grpc = TcpListener::bind("127.0.0.1:0").await?;
        let (addr, grpc_addr) = (http.local_addr()?, grpc.local_addr()?);
        let (tx, rx) = oneshot::channel::<()>();
        let running = app.clone();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = rx.await;
            };
            running
                .run(shutdown, |stop| {
                    Ok(vec![
                        tokio::spawn(floodgate_api::serve_http(running.clone(), http, None, stop.clone())),
                        tokio::spawn(floodgate_api::serve_grpc(running.clone(), grpc, None, stop.clone())),
                    ])
                })
                .await
        });
        Ok(LocalServer { addr, grpc_addr, stop: Some(tx), task, app })
    }

    /// The memory store's keys, overflow counters and memory estimate (`None` on another store),
    /// read in process: the same numbers `/metrics` gives as `floodgate_keys`, with the store's
    /// estimate of its bytes.
    pub fn memory_stats(&self) -> Option<floodgate::store::MemoryStats> {
        self.app.control().store().memory_stats()
    }

    /// Waits until `/readyz` answers 200 (a Redis store connects lazily; until it answers,
    /// decisions follow the rules' `on_store_error`, which would count as admissions), at most
    /// `limit`. Returns whether it became ready.
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        let url = format!("{}/readyz", self.url());
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some((http::StatusCode::OK, _)) = client::get(&url, Duration::from_secs(1)).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Waits until the server is ready and its store has made a decision (a check of the key
    /// `warm-up` of the descriptor `user`: a Redis store connects on its first call), at most
    /// `limit`; so that a measured load starts on a working store.
    pub async fn wait_deciding(&self, limit: Duration) -> anyhow::Result<()> {
        let addr = self.addr;
        if !self.wait_ready(limit).await {
            anyhow::bail!("the server on {addr} did not become ready (it cannot reach its store)");
        }
        let target = Target::http(&self.url(), Duration::from_secs(2), false)?;
        let shape = Shape::default();
        let deadline = Instant::now() + limit;
        loop {
            if matches!(target.check(&shape, "warm-up", 1).await, Outcome::Allowed | Outcome::Denied) {
                return Ok(());
            }
            if Instant::now() > deadline {
                anyhow::bail!("the server on {addr} did not get a decision from its store within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The server's `/metrics` page (Prometheus text), or `None` if it did not answer 200 within
    /// 2 s.
    pub async fn scrape_metrics(&self) -> Option<String> {
        let url = format!("{}/metrics", self.url());
        match client::get(&url, Duration::from_secs(2)).await? {
            (http::StatusCode::OK, body) => Some(String::from_utf8_lossy(&body).into_owned()),
            _ => None,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Shuts the server down gracefully.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}
