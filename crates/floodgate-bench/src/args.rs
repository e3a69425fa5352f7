//! Flags several scenarios share: the output flags, the target and what each request carries,
//! an algorithm with a limit per window, the store a run starts, and the parsers of durations,
//! percentages and pairs.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use floodgate::LimitKind;

use crate::Usage;
use crate::harness::target::{Shape, Target};

/// Output flags, on every scenario.
#[derive(Debug, Clone, Args)]
pub struct Output {
    /// Write the full report as JSON to PATH (field names: docs/bench.md).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Draw admitted/denied per 100 ms as SVG (throughput: also the latency distribution; outage:
    /// also errors, and the fault shaded).
    #[arg(long, value_name = "PATH.svg")]
    pub plot: Option<PathBuf>,
    /// No progress bar and no table (the JSON file is still written).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Which target a network scenario drives.
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// The HTTP check API: `http://HOST:PORT` (POST /v1/check).
    #[arg(long, value_name = "URL", group = "target_kind")]
    pub target: Option<String>,
    /// Envoy RLS v3 gRPC: `HOST:PORT` (ShouldRateLimit).
    #[arg(long, value_name = "HOST:PORT", group = "target_kind")]
    pub grpc: Option<String>,
    /// A rate-limited route of any application, not Floodgate's API: `http://HOST:PORT/PATH`.
    /// Each request carries its key in `--key-header`; 2xx counts as allowed, 429 as denied,
    /// any other status as an error (`http_404`, `http_5xx`, …). For peers (NestJS, …) and apps
    /// behind `floodgate-tower`.
    #[arg(long, value_name = "URL", group = "target_kind")]
    pub route_target: Option<String>,
    /// `--route-target`: the header carrying the key.
    #[arg(long, value_name = "NAME", default_value = "x-user-id")]
    pub key_header: String,
    /// `--route-target`: the method (a POST carries a small JSON body).
    #[arg(long, value_name = "METHOD", default_value = "POST")]
    pub method: String,
    /// The engine in this process, no HTTP or gRPC in between (the default), on the store of
    /// --config: memory, or a Redis node or cluster.
    #[arg(long, group = "target_kind")]
    pub in_process: bool,
    /// The policy and store of --in-process runs (native or envoyproxy/ratelimit YAML). Default: a
    /// built-in policy of 100 requests per second per user (sliding window, memory store).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Accept targets that are not on loopback.
    #[arg(long)]
    pub allow_remote: bool,
    /// Per-request timeout.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// What each request carries.
#[derive(Debug, Clone, Args)]
pub struct RequestArgs {
    /// The descriptor whose value is the key.
    #[arg(long, value_name = "NAME", default_value = "user")]
    pub key_descriptor: String,
    /// A descriptor sent with every request (repeatable), e.g. `--with "route=POST /chat"`.
    #[arg(long = "with", value_name = "NAME=VALUE", value_parser = parse_pair)]
    pub with: Vec<(String, String)>,
    /// The Envoy domain (gRPC) or the `domain` field (HTTP).
    #[arg(long, value_name = "DOMAIN")]
    pub domain: Option<String>,
    /// The cost of each request.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub cost: u64,
}

/// The built-in in-process policy (`policies/throughput.yaml`).
pub const DEFAULT_POLICY: &str = include_str!("../policies/throughput.yaml");

/// How long an in-process run waits for its configuration's store to answer.
const STORE_READY_WITHIN: Duration = Duration::from_secs(10);

impl TargetArgs {
    /// The target these flags name: a network one, or the engine in this process.
    pub async fn build(&self) -> anyhow::Result<Target> {
        if let Some(url) = &self.target {
            return Ok(Target::http(url, self.timeout, self.allow_remote).map_err(|e| Usage(e.to_string()))?);
        }
        if let Some(url) = &self.route_target {
            return Ok(Target::route(url, &self.method, &self.key_header, self.timeout, self.allow_remote)
                .map_err(|e| Usage(e.to_string()))?);
        }
        if let Some(addr) = &self.grpc {
            return Ok(Target::grpc(addr, self.timeout, self.allow_remote).await?);
        }
        let config = match &self.config {
            Some(path) => floodgate_config::load(path),
            None => floodgate_config::parse("built-in bench policy", DEFAULT_POLICY),
        }
        .map_err(|e| Usage(e.to_string()))?;
        Ok(Target::in_process(config, self.allow_remote, STORE_READY_WITHIN)
            .await
            .map_err(|e| Usage(e.to_string()))?)
    }
}

impl RequestArgs {
    /// The shape of the requests these flags describe.
    pub fn shape(&self) -> Shape {
        Shape {
            key_descriptor: self.key_descriptor.clone(),
            with: self.with.clone(),
            domain: self.domain.clone(),
        }
    }
}

/// An algorithm with a limit and a window: the [registry](floodgate_config::algorithm)'s
/// windowed ones (`fixed_window`, `sliding_window`, `sliding_log`, `token_bucket`, `gcra`), by their
/// configuration names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Algorithm(LimitKind);

impl Algorithm {
    /// `fixed_window`.
    pub const FIXED_WINDOW: Algorithm = Algorithm(LimitKind::FixedWindow);
    /// `sliding_log`.
    pub const SLIDING_LOG: Algorithm = Algorithm(LimitKind::SlidingLog);

    /// The windowed algorithm named `name` (as in configuration files), or why not.
    pub fn parse(name: &str) -> Result<Algorithm, String> {
        let windowed = || {
            floodgate_config::algorithm::ALGORITHMS
                .iter()
                .filter(|a| a.windowed)
                .map(|a| a.name())
                .collect::<Vec<_>>()
        };
        match floodgate_config::algorithm::by_name(name) {
            Some(a) if a.windowed => Ok(Algorithm(a.kind)),
            Some(a) => Err(format!(
                "{}: not a limit per window; expected one of {}",
                a.name(),
                windowed().join(", ")
            )),
            None => Err(format!("unknown algorithm {name:?}: expected one of {}", windowed().join(", "))),
        }
    }

    /// Which algorithm.
    pub fn kind(self) -> LimitKind {
        self.0
    }

    /// The name in configuration files.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// A native YAML rule `name` keyed by `key` with `limit` per `window`. Token bucket and GCRA
    /// (burst = limit, refilled at limit per window) need a window of 1ms, 1s, 1m, 1h or 1d, the
    /// units a configured rate is written in. The rule's fields are indented by four spaces, one a
    /// line, so a caller may append more (`    on_store_error: fail_closed\n`).
    pub fn rule_yaml(self, name: &str, key: &str, limit: u64, window: Duration) -> Result<String, String> {
        let ms = window.as_millis();
        let algorithm = self.name();
        Ok(match self.0 {
            LimitKind::TokenBucket | LimitKind::Gcra => {
                let unit = match ms {
                    1 => "ms",
                    1_000 => "s",
                    60_000 => "m",
                    3_600_000 => "h",
                    86_400_000 => "d",
                    _ => return Err(format!("{algorithm} needs a window of 1ms, 1s, 1m, 1h or 1d here")),
                };
                format!(
                    "  - name: {name}\n    key: [{key}]\n    algorithm: {algorithm}\n    rate: {limit}/{unit}\n    burst: {limit}\n"
                )
            }
            _ => format!(
                "  - name: {name}\n    key: [{key}]\n    algorithm: {algorithm}\n    limit: {limit}\n    window: {ms}ms\n"
            ),
        })
    }

    /// The limit itself, for the in-process engine (any window).
    pub fn limit(self, limit: u64, window: Duration) -> anyhow::Result<floodgate::Limit> {
        use floodgate_core::{FixedWindow, Gcra, Rate, SlidingLog, SlidingWindow, TokenBucket};
        let n = std::num::NonZeroU64::new(limit)
            .ok_or_else(|| anyhow::anyhow!("the limit must be at least 1"))?;
        Ok(match self.0 {
            LimitKind::FixedWindow => FixedWindow::try_new(n, window)?.into(),
            LimitKind::SlidingWindow => SlidingWindow::try_new(n, window)?.into(),
            LimitKind::SlidingLog => SlidingLog::try_new(n, window)?.into(),
            LimitKind::TokenBucket => TokenBucket::try_new(Rate::try_new(n, window)?, n)?.into(),
            LimitKind::Gcra => Gcra::try_new(Rate::try_new(n, window)?, n)?.into(),
            other => anyhow::bail!("{other} is not a limit per window"),
        })
    }
}

/// The store of a run that starts its own servers: their memory store, or a `redis-server` the
/// run starts (`harness::redis`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// The memory store.
    Memory,
    /// A `redis-server` this run starts.
    Redis,
}

impl StoreKind {
    /// The store's `kind` in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis => "redis",
        }
    }
}

/// The longest run a scenario accepts.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);

/// Parses a duration in the one grammar configuration files use too (`500ms`, `2s`, `1m`,
/// `1h30m`, `250us`; whole numbers with a unit): [`floodgate_config::duration`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    floodgate_config::duration::parse(text).map_err(|why| format!("{text:?}: {why}"))
}

/// Parses a percentage between 0 and 100 (a trailing `%` allowed).
pub fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("{text:?}: expected a percentage between 0 and 100")),
    }
}

/// Parses `NAME=VALUE`.
pub fn parse_pair(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{text:?}: expected NAME=VALUE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1s500ms"), Ok(Duration::from_millis(1500)));
        assert!(
            parse_duration("1.5s").unwrap_err().contains("1s500ms"),
            "fractions are written in whole units"
        );
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("ten s").is_err());
    }
}
