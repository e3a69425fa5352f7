//! `floodgate serve` of a `soak` run: its configuration, its process under the testkit's
//! watchdog, and what a sample reads of it.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::Full;

use super::SoakArgs;
use super::samples::Figures;
use crate::harness::client::{self, Connections};
use crate::harness::metrics;
use crate::harness::process::{OUTPUT, Watched, free_port, holdings, scratch_dir, serve, watch};
use crate::harness::redis::{self, RedisServer};
use crate::harness::server::METRIC_KEYS;

/// How long the server may take to answer `/readyz` and accept on the gateway.
const STARTUP: Duration = Duration::from_secs(20);
/// The Redis store's deadline: far above a stall of the machine, so that a store error is a
/// fault, not a slow moment.
pub(super) const REDIS_DEADLINE: Duration = Duration::from_secs(1);

// === the configuration ===

/// A limit no share of the offered load can reach in a window of `window_s` seconds: ten times
/// the whole rate over it, so that a stall caught up with stays under it too. (On Redis a sliding
/// window's `limit × window µs` must stay below 2^53, or the configuration is refused at load: the
/// sliding windows here are of one second, at most 10^9 tokens.)
fn far(rate: f64, window_s: f64) -> u64 {
    ((rate * window_s * 10.0).ceil() as u64).max(1000)
}

/// The server's configuration: `store` (a `store:` section), the rules, and the gateway in front
/// of `upstream`.
pub(super) fn config_yaml(args: &SoakArgs, store: &str, upstream: SocketAddr) -> String {
    use super::traffic::{CHECK_ROUTE, GATEWAY_PATH, HOT_PREFIX, MAX_ESTIMATE, RESERVE_ROUTE, USER_HEADER};
    let rate = args.rate;
    let (second, ten) = (far(rate, 1.0), far(rate, 10.0));
    format!(
        "{store}rules:
  # Hot users: a budget for the run, shared by their checks and gateway requests.
  - name: hot-budget
    match: {{ user: {{ like: \"{HOT_PREFIX}*\" }} }}
    key: [user]
    algorithm: budget
    limit: {hot_limit}
    ttl: 24h
  # Checks: three rules, far above the load.
  - name: check-per-user
    match: {{ route: \"{CHECK_ROUTE}\" }}
    key: [user]
    algorithm: sliding_window
    limit: {second}
    window: 1s
  - name: check-per-tenant
    match: {{ route: \"{CHECK_ROUTE}\" }}
    key: [tenant]
    algorithm: fixed_window
    limit: {ten}
    window: 10s
  - name: check-all
    match: {{ route: \"{CHECK_ROUTE}\" }}
    algorithm: token_bucket
    rate: {second}/s
    burst: {second}
  # Reservations: tokens and permits per tenant.
  - name: reserve-tokens
    match: {{ route: \"{RESERVE_ROUTE}\" }}
    key: [tenant]
    algorithm: sliding_window
    limit: {tokens}
    window: 1s
    cost: tokens
  - name: {PERMITS}
    match: {{ route: \"{RESERVE_ROUTE}\" }}
    key: [tenant]
    algorithm: concurrency
    limit: {permits}
    lease: 1m
  # The gateway: per user (from the identity header) and per address.
  - name: gateway-per-user
    match: {{ method: GET }}
    key: [user]
    algorithm: gcra
    rate: {second}/s
    burst: {second}
  - name: gateway-per-ip
    match: {{ method: GET }}
    key: [ip]
    algorithm: sliding_window
    limit: {second}
    window: 1s
gateway:
  identity:
    headers: {{ user: {USER_HEADER} }}
  routes:
    - name: soak
      match: {{ path: \"{GATEWAY_PATH}\" }}
      upstream: http://{upstream}
",
        hot_limit = args.hot_limit,
        tokens = second * MAX_ESTIMATE,
        permits = args.max_in_flight.saturating_mul(2),
    )
}

/// The concurrency rule of reservations: no permit may be left after the run.
pub(super) const PERMITS: &str = "reserve-in-flight";

// === the server ===

/// `floodgate serve` of this run, under the testkit's watchdog (killed however the run ends).
#[derive(Debug)]
pub(super) struct Server {
    pub(super) watched: Watched,
    pub(super) http: SocketAddr,
    pub(super) gateway: SocketAddr,
}

impl Server {
    /// Starts `binary` on `yaml` with free ports for the API and the gateway, and waits until it
    /// is ready (another pair of ports when they were taken meanwhile).
    pub(super) async fn start(binary: &Path, yaml: &str) -> anyhow::Result<Server> {
        let mut last = None;
        for _ in 0..3 {
            match Server::launch(binary, yaml).await {
                Ok(server) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("floodgate did not start")))
    }

    async fn launch(binary: &Path, yaml: &str) -> anyhow::Result<Server> {
        let (http_port, gateway_port) = (free_port()?, free_port()?);
        let dir = scratch_dir("soak", http_port)?;
        let config = dir.join("floodgate.yaml");
        std::fs::write(&config, yaml).with_context(|| format!("writing {}", config.display()))?;
        let mut command = serve(binary, &config, &format!("127.0.0.1:{http_port}"));
        command.arg("--gateway").arg(format!("127.0.0.1:{gateway_port}"));
        let watched = watch(&command, &dir).with_context(|| format!("starting {}", binary.display()))?;
        let server = Server {
            watched,
            http: SocketAddr::from(([127, 0, 0, 1], http_port)),
            gateway: SocketAddr::from(([127, 0, 0, 1], gateway_port)),
        };
        let ready = format!("http://{}/readyz", server.http);
        let deadline = std::time::Instant::now() + STARTUP;
        loop {
            let api = client::get(&ready, Duration::from_secs(1)).await;
            if matches!(api, Some((http::StatusCode::OK, _)))
                && tokio::net::TcpStream::connect(server.gateway).await.is_ok()
                && server.watched.running()
            {
                return Ok(server);
            }
            if !server.watched.running() || std::time::Instant::now() > deadline {
                let output = std::fs::read_to_string(dir.join(OUTPUT)).unwrap_or_default();
                let last = output.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
                bail!(
                    "{} on ports {http_port} and {gateway_port} did not become ready: {last}",
                    binary.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Where a sample's figures are read: the server process, and the store's keys.
pub(super) struct Probe<'a> {
    pub(super) pid: u32,
    pub(super) api: &'a Connections,
    pub(super) redis: Option<&'a RedisServer>,
}

impl Probe<'_> {
    pub(super) async fn read(&self) -> Figures {
        let holdings = holdings(self.pid);
        let keys = match self.redis {
            Some(node) => redis::query(node, &["DBSIZE"]).and_then(|n| n.trim().parse().ok()),
            None => {
                let request = http::Request::get("/metrics").body(Full::new(Bytes::new()));
                match request {
                    Ok(request) => match self.api.exchange(request, Duration::from_secs(2)).await {
                        Ok((http::StatusCode::OK, page)) => {
                            metrics::total(&String::from_utf8_lossy(&page), METRIC_KEYS).map(|k| k as u64)
                        }
                        _ => None,
                    },
                    Err(_) => None,
                }
            }
        };
        Figures { holdings, keys }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::soak::tests::args;

    #[test]
    fn the_configuration_is_one_the_server_loads() {
        let upstream = SocketAddr::from(([127, 0, 0, 1], 9));
        for store in [
            "store:\n  kind: memory\n".to_owned(),
            redis::store_yaml("redis://127.0.0.1:6379", Some(REDIS_DEADLINE)),
        ] {
            let yaml = config_yaml(&args(&["--rate", "200", "--hot-limit", "7"]), &store, upstream);
            let config =
                floodgate_config::parse("soak.yaml", &yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
            assert_eq!(config.fingerprints.len(), 8, "{yaml}");
            assert!(config.fingerprints.contains_key(PERMITS));
            assert!(
                yaml.contains("limit: 7\n")
                    && yaml.contains("limit: 2000\n")
                    && yaml.contains("upstream: http://127.0.0.1:9")
            );
        }
    }

    /// On Redis a sliding window whose `limit × window µs` reaches 2^53 is refused at load (its Lua
    /// arithmetic is exact in doubles only below it): at the highest rate too, none of these does.
    #[test]
    fn the_sliding_windows_stay_exact_on_redis_at_the_highest_rate() {
        let store = redis::store_yaml("redis://127.0.0.1:6379", None);
        let yaml = config_yaml(&args(&["--rate", "100000"]), &store, SocketAddr::from(([127, 0, 0, 1], 9)));
        let field = |rule: &str, name: &str| {
            let line = rule.lines().find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(": "));
            line.unwrap_or_else(|| panic!("no {name} in {rule}")).to_owned()
        };
        let mut windows = 0;
        for rule in yaml.split("\n  - name: ").filter(|r| r.contains("algorithm: sliding_window")) {
            let limit: u128 = field(rule, "limit").parse().unwrap();
            let window = floodgate_config::duration::parse(&field(rule, "window")).unwrap();
            assert!(limit * window.as_micros() < 1 << 53, "{rule}");
            windows += 1;
        }
        assert_eq!(windows, 3, "{yaml}");
    }
}
