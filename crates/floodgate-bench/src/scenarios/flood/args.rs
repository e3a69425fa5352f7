//! `flood`'s flags: the store and its fields, the policy, the users, the flood, the limited users
//! and the peer.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::args::{Algorithm, Output, parse_duration, parse_pair};

/// The store of a `flood` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FloodStore {
    /// The in-process server's memory store, capped at `--max-keys`.
    Memory,
    /// A `redis-server` this run starts.
    Redis,
}

impl FloodStore {
    /// The store's `kind` in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            FloodStore::Memory => "memory",
            FloodStore::Redis => "redis",
        }
    }
}

/// The limiter a `flood` run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FloodPeer {
    /// An in-process `floodgate` server on `--store`.
    Floodgate,
    /// A `limitador-server` this run starts (`--limitador-server`): its memory storage, with a
    /// cache of `--max-keys` counters, driven over Envoy RLS.
    Limitador,
}

impl FloodPeer {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FloodPeer::Floodgate => "floodgate",
            FloodPeer::Limitador => "limitador",
        }
    }
}

/// How a `flood` run's requests reach the limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FloodTransport {
    /// Floodgate's `POST /v1/check` (HTTP/1.1 keep-alive).
    Http,
    /// Envoy RLS v3 `ShouldRateLimit` (gRPC, a few HTTP/2 connections).
    Grpc,
}

impl FloodTransport {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FloodTransport::Http => "http",
            FloodTransport::Grpc => "grpc",
        }
    }
}

/// `flood`.
#[derive(Debug, Clone, Args)]
pub struct FloodArgs {
    /// The store: `memory` (`max_keys: --max-keys`, `on_full: aggregate`) or `redis` (a
    /// `redis-server` this run starts).
    #[arg(long, value_enum, default_value_t = FloodStore::Memory)]
    pub store: FloodStore,
    /// The memory store's `max_keys`, or limitador's `--cache` (default 10 000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_keys: Option<u64>,
    /// A field of the store section, `NAME=VALUE`, written `NAME: VALUE` (repeatable): a field the
    /// run writes (`max_keys`, `on_full`, `url`) is replaced, any other appended, e.g.
    /// `--store-field on_full=reject`, `--store-field sweep_interval=1s`.
    #[arg(long = "store-field", value_name = "NAME=VALUE", value_parser = parse_pair)]
    pub store_fields: Vec<(String, String)>,
    /// The policy (native or envoyproxy/ratelimit YAML): its rules; the store is the run's. Its
    /// rules must key normal users by --key-descriptor and leave them under their limits.
    /// Default: one rule, --algorithm, --limit per --window per user.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The algorithm of the built-in rule.
    #[arg(long, value_parser = Algorithm::parse, default_value = "fixed_window", conflicts_with = "config")]
    pub algorithm: Algorithm,
    /// The built-in rule's limit per window, per user.
    #[arg(long, default_value_t = 100, conflicts_with = "config", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub limit: u64,
    /// The built-in rule's window.
    #[arg(long, value_name = "DURATION", default_value = "1m", conflicts_with = "config", value_parser = parse_duration)]
    pub window: Duration,
    /// The descriptor whose value is the user id.
    #[arg(long, value_name = "NAME", default_value = "user")]
    pub key_descriptor: String,
    /// Normal users: the first half are known (they send from the start), the others newcomers
    /// (they join one by one during the flood, evenly spread over it).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(2..=10_000_000))]
    pub users: u64,
    /// Normal requests per second once every user sends, open loop: each user sends
    /// --normal-rate / --users per second, evenly spaced, the known users from the start and each
    /// newcomer from when it joins (so the total reaches --normal-rate at the flood's end).
    #[arg(long, value_name = "PER_SEC", default_value_t = 2_000.0)]
    pub normal_rate: f64,
    /// Flood requests per second, open loop, each from a user id never seen before
    /// (`flood-<n>`).
    #[arg(long, value_name = "PER_SEC", default_value_t = 20_000.0)]
    pub flood_rate: f64,
    /// A closed-loop flood instead: this many callers, each with one request in flight.
    #[arg(long, value_name = "N", conflicts_with = "flood_rate", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub flood_concurrency: Option<u64>,
    /// The open-loop flood's requests in flight beyond this are not sent and count as `dropped`
    /// flood errors (each request in flight holds a connection of the bench's client: past the
    /// machine's ceiling, a higher bound measures the client's connection churn, not the store).
    /// Normal users' requests are always sent.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub flood_max_in_flight: u64,
    /// How long the known users send alone, before the flood.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub before: Duration,
    /// How long the flood lasts, beside every normal user.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub during: Duration,
    /// Limited users: before the run, each sends --limit requests (all must be admitted) and one
    /// more (it must be denied); then each sends --limited-probe-rate probes a second through both
    /// phases. A probe admitted before the limit legitimately resets is a **freed** limited user:
    /// a counter lost or reset. Default: 100 with the built-in rule on `fixed_window` or
    /// `sliding_log`; 0 otherwise (other algorithms refill within the run, and the limits of
    /// --config are not the bench's to know).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub limited_users: Option<u64>,
    /// Probes per second of each limited user, evenly spaced, open loop.
    #[arg(long, value_name = "PER_SEC", default_value_t = 1.0)]
    pub limited_probe_rate: f64,
    /// The limiter measured: `floodgate` (in-process, on --store) or `limitador` (a
    /// limitador-server this run starts: memory storage, `--cache` = --max-keys, the built-in rule
    /// as its limit, over Envoy RLS; `fixed_window` only).
    #[arg(long, value_enum, default_value_t = FloodPeer::Floodgate)]
    pub peer: FloodPeer,
    /// `--peer limitador`: the `limitador-server` to run (relative to the working directory).
    #[arg(
        long,
        value_name = "PATH",
        env = "LIMITADOR_SERVER",
        default_value = "../shared/peers/limitador-server"
    )]
    pub limitador_server: PathBuf,
    /// How requests reach the limiter: `http` (Floodgate's `/v1/check`; the default on Floodgate)
    /// or `grpc` (Envoy RLS; the default, and the only one, on limitador).
    #[arg(long, value_enum)]
    pub transport: Option<FloodTransport>,
    /// `--store redis`: the `redis-server` to run (default: the one on PATH).
    #[arg(long, value_name = "PATH", default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Per-request timeout of the bench's HTTP and gRPC clients.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl FloodArgs {
    /// The transport: `--transport`, else `grpc` on limitador and `http` on Floodgate.
    pub fn transport(&self) -> FloodTransport {
        self.transport.unwrap_or(match self.peer {
            FloodPeer::Floodgate => FloodTransport::Http,
            FloodPeer::Limitador => FloodTransport::Grpc,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Scenario};

    #[test]
    fn flood_takes_a_store_its_fields_and_an_open_or_closed_flood() {
        let cli = Cli::try_parse_from([
            "floodgate-bench",
            "flood",
            "--store-field",
            "on_full=reject",
            "--store-field",
            "sweep_interval=1s",
            "--flood-concurrency",
            "8",
        ])
        .unwrap();
        let Scenario::Flood(f) = cli.scenario else { panic!() };
        assert_eq!((f.store, f.max_keys, f.flood_concurrency), (FloodStore::Memory, None, Some(8)));
        assert_eq!(
            f.store_fields,
            [("on_full".into(), "reject".into()), ("sweep_interval".into(), "1s".into())]
        );
        assert_eq!((f.before, f.during), (Duration::from_secs(5), Duration::from_secs(10)));
        assert_eq!((f.algorithm, f.limit, f.window), (Algorithm::FIXED_WINDOW, 100, Duration::from_secs(60)));
        let both = ["floodgate-bench", "flood", "--flood-rate", "10", "--flood-concurrency", "2"];
        assert!(Cli::try_parse_from(both).is_err());
        assert!(
            Cli::try_parse_from(["floodgate-bench", "flood", "--config", "x.yaml", "--limit", "5"]).is_err()
        );
        assert!(Cli::try_parse_from(["floodgate-bench", "flood", "--store-field", "no-equals"]).is_err());
        assert_eq!(
            (f.peer, f.transport(), f.limited_users, f.limited_probe_rate),
            (FloodPeer::Floodgate, FloodTransport::Http, None, 1.0)
        );
    }

    #[test]
    fn flood_takes_a_peer_a_transport_and_limited_users() {
        let argv = ["floodgate-bench", "flood", "--peer", "limitador", "--limited-users", "7"];
        let cli = Cli::try_parse_from([&argv[..], &["--limitador-server", "/opt/limitador-server"]].concat())
            .unwrap();
        let Scenario::Flood(f) = cli.scenario else { panic!() };
        assert_eq!(
            (f.peer, f.transport(), f.limited_users),
            (FloodPeer::Limitador, FloodTransport::Grpc, Some(7))
        );
        assert_eq!(f.limitador_server, PathBuf::from("/opt/limitador-server"));
        let cli = Cli::try_parse_from(["floodgate-bench", "flood", "--transport", "grpc"]).unwrap();
        let Scenario::Flood(f) = cli.scenario else { panic!() };
        assert_eq!((f.peer, f.transport()), (FloodPeer::Floodgate, FloodTransport::Grpc));
        assert!(Cli::try_parse_from(["floodgate-bench", "flood", "--peer", "governor"]).is_err());
        assert!(Cli::try_parse_from(["floodgate-bench", "flood", "--limited-users", "100001"]).is_err());
    }
}
