//! The command line: `floodgate-bench <scenario> [flags]`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use floodgate::LimitKind;

/// Exit code for a bad command line or configuration (`EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;
/// Exit code when a run fails (a target cannot be reached, a file cannot be written).
pub const EXIT_RUNTIME: i32 = 1;

/// Floodgate's load and accuracy bench: what a limiter really admits, and what it costs.
#[derive(Debug, Parser)]
#[command(name = "floodgate-bench", version, about)]
pub struct Cli {
    /// The scenario.
    #[command(subcommand)]
    pub scenario: Scenario,
}

/// The scenarios.
#[derive(Debug, Subcommand)]
pub enum Scenario {
    /// Decisions per second and latency percentiles against a target, closed-loop (fixed
    /// concurrency) or open-loop (fixed arrival rate).
    Throughput(ThroughputArgs),
    /// Bursts just before and just after window boundaries: the most admitted in any window-length
    /// span versus the limit (the fixed-window 2× problem made visible).
    Boundary(BoundaryArgs),
    /// Mixed traffic (human users, double-clicks, bursts, NAT, bots) on a simulated clock: the
    /// false-rejection rate of normal users and the rejection rate of bots.
    Fairness(FairnessArgs),
    /// M servers (in-process, each with its own memory store, or M given targets) hammered on the
    /// same key: total admitted versus the limit.
    Instances(InstancesArgs),
    /// Redis paused or killed under load (a `redis-server` this run starts, shared by in-process
    /// servers): errors, decision latency and admissions before, during and after the fault, and
    /// how long the store took to decide again.
    Outage(OutageArgs),
    /// One hot key through M in-process engines sharing a Redis, without and with batch leases
    /// (`prefetch`): store calls per decision, and the most admitted in any window versus the limit.
    Prefetch(PrefetchArgs),
    /// Floodgate's gateway beside nginx (`limit_req` + `proxy_pass`) in front of the same upstream:
    /// the latency each adds over the upstream, throughput on the allowed path, and what each admits
    /// at the limit (a bursty client under it, a flood over it).
    Gateway(GatewayArgs),
    /// A flood of distinct keys (a new user id per request) beside normal users who stay under
    /// their limit, on the memory store (capped at `max_keys`) or a Redis this run starts: the
    /// normal users' false rejections, known users and newcomers apart, their latency, and what
    /// the store holds.
    Flood(FloodArgs),
    /// Access logs (nginx/Apache combined, Envoy, JSON lines; gzip or not) replayed against a
    /// policy by the real engine on a clock the log's timestamps drive: what each rule would have
    /// denied, to whom, and when; `--compare` a second policy; `--suggest` limits from the log.
    Replay(crate::replay::ReplayArgs),
    /// Slow connections that send a request's headers one line at a time and never finish
    /// (slowloris), beside normal clients: the normal clients' latency without and with them, and
    /// how long the server takes to close each slow connection.
    Slowloris(SlowlorisArgs),
    /// Callers reserving an estimate, then committing an actual, cancelling or crashing, on the
    /// memory store or on `floodgate` processes sharing a Redis and killed at random: the token
    /// ledger against what the callers know, exactly, the limit at all times, and the permits left.
    Reserve(ReserveArgs),
    /// The persisted memory store: acknowledged usage lost to `kill -9` of the real binary
    /// (`fsync: always` and `50ms`), throughput beside the plain memory store over HTTP, and the
    /// restart time and file sizes with many keys.
    Durability(DurabilityArgs),
}

/// The store of a `reserve` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReserveStore {
    /// One `floodgate` process with its memory store.
    Memory,
    /// `--instances` `floodgate` processes sharing a `redis-server` this run starts.
    Redis,
}

impl ReserveStore {
    /// The store's `kind` in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            ReserveStore::Memory => "memory",
            ReserveStore::Redis => "redis",
        }
    }
}

/// `reserve`.
#[derive(Debug, Clone, Args)]
pub struct ReserveArgs {
    /// The store: `memory` (one instance) or `redis` (a `redis-server` this run starts, shared).
    #[arg(long, value_enum, default_value_t = ReserveStore::Memory)]
    pub store: ReserveStore,
    /// `floodgate serve` processes (default: 1 on memory, 3 on redis; memory takes only 1).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=16))]
    pub instances: Option<usize>,
    /// Instances killed (`SIGKILL`) at random moments and restarted (default: 6 on redis and on
    /// memory with `--persist`, else 0; memory needs `--persist`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub kills: Option<u64>,
    /// `--store memory`: persist the store (`persist: {fsync: always}`, in the run's directory),
    /// so that its instance can be killed and restarted with its ledger.
    #[arg(long)]
    pub persist: bool,
    /// How long a killed instance stays down before it is restarted.
    #[arg(long, value_name = "DURATION", default_value = "300ms", value_parser = parse_duration)]
    pub down: Duration,
    /// Calls: each one reserve, then a commit, a release or nothing.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub calls: u64,
    /// Concurrent callers.
    #[arg(long, short = 'c', default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub concurrency: usize,
    /// The tenant's token limit (a `budget`: never refilled during the run), so that the last
    /// calls meet it.
    #[arg(long, default_value_t = 8_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: u64,
    /// The tenant's concurrency limit (permits in flight).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub permits: u64,
    /// The largest estimate, in tokens (each is uniform in 1..=this).
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub max_estimate: u64,
    /// The share of granted calls released (cancelled).
    #[arg(long, default_value_t = 0.10, value_parser = parse_share)]
    pub cancel: f64,
    /// The share of granted calls that crash (never settle: charged their estimate at expiry).
    #[arg(long, default_value_t = 0.03, value_parser = parse_share)]
    pub crash: f64,
    /// Each reservation's `ttl`.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub ttl: Duration,
    /// The concurrency rule's `lease`.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub lease: Duration,
    /// The longest simulated call between a reserve and its settlement (uniform from 0).
    #[arg(long, value_name = "DURATION", default_value = "5ms", value_parser = parse_duration)]
    pub work: Duration,
    /// The `floodgate` binary (default: beside `floodgate-bench`).
    #[arg(long, value_name = "PATH")]
    pub floodgate: Option<PathBuf>,
    /// `--store redis`: the `redis-server` to run (default: the one on PATH).
    #[arg(long, value_name = "PATH", default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Per-request timeout of the bench's HTTP client.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// The seed of the callers' and the killer's choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{text:?} is not a share between 0 and 1")),
    }
}

/// `durability`.
#[derive(Debug, Clone, Args)]
pub struct DurabilityArgs {
    /// The `floodgate` binary for the kill -9 rounds and the restart; default: beside this
    /// executable.
    #[arg(long, value_name = "PATH")]
    pub floodgate: Option<PathBuf>,
    /// Kill -9 rounds per fsync setting.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Connections of the throughput comparison.
    #[arg(long, default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub connections: usize,
    /// The length of each throughput run.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Keys written for the restart measurement.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub keys: u64,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

/// `slowloris`.
#[derive(Debug, Clone, Args)]
pub struct SlowlorisArgs {
    /// A running server's HTTP API (`http://IP:PORT`); default: one in this process with
    /// `http.header_read_timeout` set to --header-timeout.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Slow connections held open during the attack (each reconnects once closed).
    #[arg(long, default_value_t = 500, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    pub slow: usize,
    /// How often each slow connection sends one more header line.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub drip: Duration,
    /// The in-process server's `http.header_read_timeout`.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration, conflicts_with = "target")]
    pub header_timeout: Duration,
    /// Normal requests per second (`POST /v1/check`), open loop, in each phase.
    #[arg(long, value_name = "PER_SEC", default_value_t = 500.0)]
    pub normal_rate: f64,
    /// The length of each phase (baseline, then under attack).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub phase: Duration,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

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

/// Key distributions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// Zipf: a few hot keys, a long tail (`--zipf-exponent`).
    Zipf,
}

/// `throughput`.
#[derive(Debug, Clone, Args)]
pub struct ThroughputArgs {
    /// The target.
    #[command(flatten)]
    pub target: TargetArgs,
    /// The requests.
    #[command(flatten)]
    pub request: RequestArgs,
    /// Closed loop: this many callers, each with one request in flight.
    #[arg(long, short = 'c', default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub concurrency: u64,
    /// Open loop: this many requests per second in total, sent on schedule whatever the answers
    /// take; latency counts from the scheduled time (no coordinated omission).
    #[arg(long, value_name = "PER_SEC", conflicts_with = "concurrency")]
    pub rate: Option<f64>,
    /// Open loop: requests in flight beyond this are not sent and count as `dropped` errors.
    #[arg(long, default_value_t = 10_000)]
    pub max_in_flight: u64,
    /// How long to send (at most 1 h).
    #[arg(long, short, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Warm-up before measuring (sent, not counted).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Stop after this many requests.
    #[arg(long, default_value_t = 100_000_000)]
    pub max_requests: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Key distribution.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    pub distribution: Distribution,
    /// The Zipf exponent `s` (probability of key k ∝ 1/k^s).
    #[arg(long, default_value_t = 1.0)]
    pub zipf_exponent: f64,
    /// Seed of the key sequence.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

/// The traffic of a `boundary` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// A burst just before and a burst just after each boundary.
    Flood,
    /// A burst just before a boundary, then one request per `window / limit` for one window.
    BurstThenSteady,
}

impl Pattern {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Flood => "flood",
            Pattern::BurstThenSteady => "burst-then-steady",
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

/// `boundary`.
#[derive(Debug, Clone, Args)]
pub struct BoundaryArgs {
    /// Where: no target flag = the engine on a simulated clock (exact, instant); `--target`,
    /// `--grpc` or `--route-target` = a running server, in real time (its rule must match
    /// --algorithm/--limit/--window).
    #[command(flatten)]
    pub target: TargetArgs,
    /// The requests (the key is unique per run unless --key is given).
    #[command(flatten)]
    pub request: RequestArgs,
    /// The algorithm.
    #[arg(long, value_parser = Algorithm::parse, default_value = "fixed_window")]
    pub algorithm: Algorithm,
    /// The limit per window.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub limit: u64,
    /// The window.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub window: Duration,
    /// Boundaries to attack (each cycle spans two windows).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub cycles: u64,
    /// How far before and after each boundary the bursts fire (default: 1 ms simulated, 50 ms
    /// against a server).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub offset: Option<Duration>,
    /// Attempts per burst (default: 2 × limit).
    #[arg(long)]
    pub burst: Option<u64>,
    /// The key value (default: unique per run, so a server's earlier state does not interfere).
    #[arg(long)]
    pub key: Option<String>,
    /// The traffic: `flood` (a burst just before and just after each boundary) or
    /// `burst-then-steady` (simulated only: a full burst just before a boundary, then one request
    /// per refill interval for a window — the worst case of the buckets and of fixed windows).
    #[arg(long, value_enum, default_value_t = Pattern::Flood)]
    pub pattern: Pattern,
    /// Real time: one request at the start of the window before each boundary, on a key of its
    /// own per cycle, so that limiters whose window starts at a key's first request (a per-key
    /// TTL, as `@nestjs/throttler`'s) have a boundary where the wall clock's is. Use with
    /// `--burst` ≤ limit − 1 to stay under the limit before the boundary (a careful client).
    #[arg(long)]
    pub prime: bool,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

/// `fairness`.
#[derive(Debug, Clone, Args)]
pub struct FairnessArgs {
    /// The policy to judge (native YAML; requests carry `user`, `ip` and `route` = "GET /api").
    /// Default: 30 per minute per user and 120 per minute per IP (sliding windows).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Normal users with their own address.
    #[arg(long, default_value_t = 200)]
    pub normal_users: u64,
    /// Further normal users who all share one address (a NAT, an office, a mobile carrier).
    #[arg(long, default_value_t = 10)]
    pub nat_users: u64,
    /// Scripted bots, each with its own user and address.
    #[arg(long, default_value_t = 3)]
    pub bots: u64,
    /// A bot's request interval.
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = parse_duration)]
    pub bot_interval: Duration,
    /// A human's mean think time between actions.
    #[arg(long, value_name = "DURATION", default_value = "6s", value_parser = parse_duration)]
    pub think: Duration,
    /// Chance that an action is a double-click (a second request 80–250 ms later).
    #[arg(long, default_value_t = 0.05)]
    pub double_click: f64,
    /// Chance that an action is a burst (a page load: 3–8 requests within ~1 s).
    #[arg(long, default_value_t = 0.03)]
    pub burst: f64,
    /// Simulated time.
    #[arg(long, short, value_name = "DURATION", default_value = "600s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Seed of the traffic model.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

/// `instances`.
#[derive(Debug, Clone, Args)]
pub struct InstancesArgs {
    /// In-process servers to start (each its own memory store), when no --target is given.
    #[arg(long, short = 'm', default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub instances: u64,
    /// Running servers' HTTP APIs instead (repeatable; their rule must match the flags below).
    #[arg(long = "target", value_name = "URL")]
    pub targets: Vec<String>,
    /// The in-process servers share this Redis (`redis://127.0.0.1:6379`) instead of each having
    /// its own memory store: the exactness test for a fleet.
    #[arg(long, value_name = "URL", conflicts_with = "targets")]
    pub redis: Option<String>,
    /// The in-process servers share this Redis Cluster instead (a seed node's URL, repeatable).
    #[arg(long = "redis-cluster", value_name = "URL", conflicts_with_all = ["targets", "redis"])]
    pub redis_cluster: Vec<String>,
    /// The in-process servers' `store.deadline` on Redis (default: the store's default).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub deadline: Option<Duration>,
    /// Accept targets that are not on loopback.
    #[arg(long)]
    pub allow_remote: bool,
    /// The algorithm.
    #[arg(long, value_parser = Algorithm::parse, default_value = "sliding_log")]
    pub algorithm: Algorithm,
    /// The limit per window.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub limit: u64,
    /// The window (long, so nothing refills during the run).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub window: Duration,
    /// Callers in total, spread over the instances.
    #[arg(long, short = 'c', default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// How long to send.
    #[arg(long, short, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Stop after this many requests.
    #[arg(long, default_value_t = 1_000_000)]
    pub max_requests: u64,
    /// The descriptor whose value is the key.
    #[arg(long, value_name = "NAME", default_value = "user")]
    pub key_descriptor: String,
    /// Per-request timeout.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

/// How `outage` breaks Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// `SIGSTOP`, then `SIGCONT`: a frozen node. The kernel still accepts connections and
    /// requests, nothing answers; the store deadline bounds each decision.
    Pause,
    /// `SIGKILL`, then a new, empty `redis-server` on the same port: connections are refused, and
    /// the counters are gone when it is back.
    Kill,
    /// A proxy between the servers and Redis holds each request for `--delay`: a slow link.
    Slow,
    /// A proxy between the servers and Redis accepts connections and forwards nothing: a dropped
    /// route. What it held is forwarded when the fault ends.
    Blackhole,
    /// On a cluster of 3 masters with one replica each, `SIGKILL` to a master: its replica is
    /// promoted after the cluster node timeout (1 s), and the killed node stays down.
    MasterKill,
}

impl Fault {
    /// `pause` or `kill`.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Pause => "pause",
            Fault::Kill => "kill",
            Fault::Slow => "slow",
            Fault::Blackhole => "blackhole",
            Fault::MasterKill => "master-kill",
        }
    }
}

/// A rule's `on_store_error`: what a decision is when the store fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum OnStoreError {
    /// Allow, uncounted (`error_allowed`).
    FailOpen,
    /// Deny (`error_denied`).
    FailClosed,
    /// Decide on this instance's share of the limit (`local_allowed`, `local_denied`).
    Local,
}

impl OnStoreError {
    /// The name in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            OnStoreError::FailOpen => "fail_open",
            OnStoreError::FailClosed => "fail_closed",
            OnStoreError::Local => "local",
        }
    }
}

/// `outage`.
#[derive(Debug, Clone, Args)]
pub struct OutageArgs {
    /// How Redis fails.
    #[arg(long, value_enum, default_value_t = Fault::Pause)]
    pub fault: Fault,
    /// When the fault starts, from the start of the load.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub at: Duration,
    /// How long Redis stays paused (or dead, before a new one starts).
    #[arg(long = "for", value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub fault_for: Duration,
    /// How long to send (at most 10 min: every decision is kept to split the phases exactly).
    #[arg(long, short, value_name = "DURATION", default_value = "8s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Callers in total, spread over the instances.
    #[arg(long, short = 'c', default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// In-process servers sharing the Redis.
    #[arg(long, short = 'm', default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub instances: u64,
    /// The algorithm.
    #[arg(long, value_parser = Algorithm::parse, default_value = "fixed_window")]
    pub algorithm: Algorithm,
    /// The limit per window, per key.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub limit: u64,
    /// The window.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub window: Duration,
    /// Distinct keys, drawn uniformly.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub keys: u64,
    /// The rule's `on_store_error`.
    #[arg(long, value_enum, default_value_t = OnStoreError::FailOpen)]
    pub on_store_error: OnStoreError,
    /// The store deadline (`store.deadline`; whole milliseconds).
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = parse_duration)]
    pub deadline: Duration,
    /// `--fault slow`: how long the proxy holds each request.
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = parse_duration)]
    pub delay: Duration,
    /// The servers' `store.instances`: the local share is ceil(limit × local_factor / instances)
    /// (default: --instances).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub share_of: Option<u64>,
    /// How long the store's circuit breaker stays open before its probe (`store.breaker.open_for`;
    /// whole milliseconds).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub open_for: Duration,
    /// The `redis-server` to run (default: the one on PATH).
    #[arg(long, value_name = "PATH", default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Per-request timeout of the bench's HTTP client.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Seed of the key sequence.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

/// `prefetch`.
#[derive(Debug, Clone, Args)]
pub struct PrefetchArgs {
    /// The Redis the engines share (`redis://127.0.0.1:6379`).
    #[arg(long, value_name = "URL")]
    pub redis: String,
    /// Accept a Redis that is not on loopback.
    #[arg(long)]
    pub allow_remote: bool,
    /// In-process engines, each with its own connection and leases.
    #[arg(long, short = 'm', default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub instances: u64,
    /// The algorithm.
    #[arg(long, value_parser = Algorithm::parse, default_value = "fixed_window")]
    pub algorithm: Algorithm,
    /// The limit per window.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub limit: u64,
    /// The window.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub window: Duration,
    /// The rule's `prefetch.batch` in the pass with prefetch.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(2..=1_000_000))]
    pub batch: u64,
    /// The rule's `prefetch.ttl` in the pass with prefetch.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub ttl: Duration,
    /// Callers in total, spread over the instances.
    #[arg(long, short = 'c', default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// How long each pass sends.
    #[arg(long, short, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
    /// The store deadline (`store.deadline`; whole milliseconds).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub deadline: Duration,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

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

/// `gateway`.
#[derive(Debug, Clone, Args)]
pub struct GatewayArgs {
    /// The `floodgate` binary (default: beside `floodgate-bench`).
    #[arg(long, value_name = "PATH")]
    pub floodgate: Option<PathBuf>,
    /// The `nginx` binary (Debian: `apt-get install -y nginx`).
    #[arg(long, value_name = "PATH", default_value = "/usr/sbin/nginx")]
    pub nginx: PathBuf,
    /// Keep-alive connections of the allowed-path load.
    #[arg(long, short = 'c', default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    pub connections: usize,
    /// How long each allowed-path measurement lasts (after 1 s of warm-up).
    #[arg(long, short, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: std::time::Duration,
    /// The per-IP limit of the at-the-limit phase, per second.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(2..=100_000))]
    pub limit: u64,
    /// Requests sent at once by the bursty client (which stays at half the limit on average).
    #[arg(long, default_value_t = 10, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub burst: usize,
    /// Output.
    #[command(flatten)]
    pub output: Output,
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
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

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

    #[test]
    fn throughput_takes_either_a_concurrency_or_a_rate() {
        let cli = Cli::try_parse_from(["floodgate-bench", "throughput", "--rate", "1000"]).unwrap();
        let Scenario::Throughput(t) = cli.scenario else { panic!() };
        assert_eq!(t.rate, Some(1000.0));
        assert!(Cli::try_parse_from(["floodgate-bench", "throughput", "--rate", "1", "-c", "2"]).is_err());
        assert!(
            Cli::try_parse_from(["floodgate-bench", "throughput", "--target", "http://x", "--in-process"])
                .is_err()
        );
    }

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

    #[test]
    fn outage_takes_a_fault_a_schedule_and_a_failure_policy() {
        let argv = ["floodgate-bench", "outage", "--fault", "kill", "--at", "1s", "--for", "500ms"];
        let cli = Cli::try_parse_from(
            [&argv[..], &["--on-store-error", "fail_closed", "--deadline", "20ms"]].concat(),
        )
        .unwrap();
        let Scenario::Outage(o) = cli.scenario else { panic!() };
        assert_eq!((o.fault, o.on_store_error), (Fault::Kill, OnStoreError::FailClosed));
        assert_eq!(
            (o.at, o.fault_for, o.deadline),
            (Duration::from_secs(1), Duration::from_millis(500), Duration::from_millis(20))
        );
        assert_eq!(
            (o.duration, o.instances, o.algorithm),
            (Duration::from_secs(8), 1, Algorithm::FIXED_WINDOW)
        );
        assert_eq!(o.redis_server, PathBuf::from("redis-server"));
        assert!(Cli::try_parse_from(["floodgate-bench", "outage", "--fault", "crash"]).is_err());
    }
}
