//! `outage`: Redis paused or killed under load — what the limiter decides while its store is
//! gone, what each decision costs, and how it comes back.
//!
//! The run starts its own `redis-server` (loopback, a free port, no persistence, in a directory of
//! its own), `--instances` in-process `floodgate` servers on it (one rule: `--algorithm`,
//! `--limit` per `--window` per key, `on_store_error`, and the store `deadline`), and `-c`
//! closed-loop callers over `--keys` uniform keys, spread over the servers. At `--at` it breaks
//! Redis for `--for`:
//!
//! - `pause`: `SIGSTOP`, then `SIGCONT` — a frozen node: the kernel still accepts connections and
//!   requests, nothing answers, so each decision waits out the store deadline;
//! - `kill`: `SIGKILL`, then a new `redis-server` on the same port — connections are refused, and
//!   the new node is empty: every counter starts again from zero;
//! - `slow`: a proxy between the servers and Redis holds each request for `--delay`;
//! - `blackhole`: that proxy accepts connections and forwards nothing, then forwards what it held.
//!
//! The servers' breaker is watched on their `/metrics` every 10 ms: the report gives how long after
//! the fault's start it opened and how long after its end every server's breaker was closed again.
//! With `--on-store-error local`, each server decides on its share, ceil(limit × 2 / instances)
//! (`--share-of` sets that `instances`), and the report gives the most one server admitted locally
//! for one key in one window.
//!
//! Every decision is kept (send time, latency, key, outcome) and split by its **send time** into
//! `before`, `during` (from the moment the fault's signal was sent to the moment the resume or
//! restart was) and `after`. Verdicts the servers made by `on_store_error` are errors
//! (`store_fail_open`, `store_fail_closed`, `store_local_allowed`, `store_local_denied`), not
//! decisions; the first decision the store made
//! again after the fault is the recovery.

mod breaker;
mod phases;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use floodgate::OnStoreError;

use self::breaker::{breaker_timing, watch_breakers};
use self::phases::{
    Details, Event, PhaseReport, Phases, Span, max_admitted_per_key_window, max_local_admitted, phase_grid,
    recovery, split,
};
use crate::Usage;
use crate::args::{Algorithm, Output, parse_duration};
use crate::harness::keys::{KeyDistribution, Rng};
use crate::harness::proxy::{FaultProxy, Link};
use crate::harness::redis::{self, RedisCluster, RedisServer, Signal, cluster_store_yaml, store_yaml};
use crate::harness::server::{LocalServer, STARTUP};
use crate::harness::target::{Shape, Target};
use crate::report::plot::{Band, Overlay};
use crate::report::progress::{Batch, Live, Progress};
use crate::report::units::{micros, millis, nanos, wall_micros};
use crate::report::{BUCKET_MS, Outcome, Report, Tally};
use crate::scenarios::Run;

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

/// `--on-store-error`: the policies by their names in configuration files
/// ([`OnStoreError::as_str`]), each with what it does here.
fn on_store_error() -> impl TypedValueParser<Value = OnStoreError> {
    let values = OnStoreError::ALL.map(|policy| {
        PossibleValue::new(policy.as_str()).help(match policy {
            OnStoreError::FailOpen => "Allow, uncounted (`error_allowed`)",
            OnStoreError::FailClosed => "Deny (`error_denied`)",
            OnStoreError::Local => {
                "Decide on this instance's share of the limit (`local_allowed`, `local_denied`)"
            }
        })
    });
    PossibleValuesParser::new(values).map(|name| OnStoreError::from_name(&name).unwrap_or_default())
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
    /// End the run once the store has decided every request for two windows (at least 1 s) after
    /// the fault, rather than at `--duration`, which then only caps the run: the report says
    /// whether it settled (`settled`).
    #[arg(long)]
    pub until_settled: bool,
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
    #[arg(long, default_value = "fail_open", value_parser = on_store_error())]
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

impl Run for OutageArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// The longest `outage` run: every decision is kept in memory (about 48 bytes each).
pub const MAX_OUTAGE_DURATION: Duration = Duration::from_secs(600);

/// The error kinds of verdicts a server made by a rule's `on_store_error`.
const STORE_ERRORS: [&str; 4] =
    ["store_fail_open", "store_fail_closed", "store_local_allowed", "store_local_denied"];

/// The servers' `local_factor` (the default).
const LOCAL_FACTOR: u64 = 2;

// === the run ===

/// Runs `outage`.
pub async fn run(args: &OutageArgs) -> anyhow::Result<Report> {
    validate(args)?;
    let rule = args.algorithm.rule_yaml("outage", "user", args.limit, args.window).map_err(Usage)?;
    let mut redis = match args.fault {
        Fault::MasterKill => start_cluster(&args.redis_server)?,
        _ => Redis::Node(redis::start(&args.redis_server)?),
    };
    let proxy = match args.fault {
        Fault::Slow | Fault::Blackhole => {
            let upstream =
                redis::addr(redis.victim()).parse().map_err(|e| anyhow::anyhow!("redis address: {e}"))?;
            Some(FaultProxy::start(upstream).await?)
        }
        Fault::Pause | Fault::Kill | Fault::MasterKill => None,
    };
    let store = match &redis {
        Redis::Node(node) => {
            let url = proxy.as_ref().map_or_else(|| node.url(), |p| format!("redis://{}", p.addr()));
            store_yaml(&url, Some(args.deadline))
        }
        Redis::Cluster { cluster, .. } => cluster_store_yaml(&cluster.urls(), Some(args.deadline)),
    };
    let yaml = format!(
        "{}  breaker: {{open_for: {}ms}}\n  instances: {}\nrules:\n{rule}    on_store_error: {}\n",
        store,
        args.open_for.as_millis().max(1),
        args.share_of.unwrap_or(args.instances),
        args.on_store_error.as_str()
    );
    let mut servers = Vec::new();
    let mut result = Ok(());
    for _ in 0..args.instances {
        match start_server(&yaml).await {
            Ok(server) => servers.push(server),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let report = match result {
        Ok(()) => drive(args, redis.victim(), proxy.as_ref(), &servers).await,
        Err(e) => Err(e),
    };
    for server in servers {
        server.stop().await;
    }
    drop(proxy);
    drop(redis);
    report
}

/// The Redis a run breaks.
enum Redis {
    /// One node (behind the fault proxy for `slow` and `blackhole`).
    Node(RedisServer),
    /// `master-kill`: a cluster of 3 masters with a replica each, and which node is the master the
    /// fault kills; the others stay up until the run ends.
    Cluster { cluster: RedisCluster, master: usize },
}

impl Redis {
    /// The node the fault hits.
    fn victim(&mut self) -> &mut RedisServer {
        match self {
            Redis::Node(node) => node,
            Redis::Cluster { cluster, master } => &mut cluster.nodes_mut()[*master],
        }
    }
}

/// The cluster node timeout of `master-kill` runs: how long until a master that stopped answering
/// is failed over to its replica.
const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// A cluster of 3 masters with one replica each, once every node says the cluster is `ok`, every
/// master has its replica and every replica has finished its first sync; the first master is the
/// one the fault kills.
fn start_cluster(program: &Path) -> anyhow::Result<Redis> {
    let cluster = redis::start_cluster(program, 1, CLUSTER_NODE_TIMEOUT)?;
    let master = cluster
        .nodes()
        .iter()
        .position(RedisServer::is_master)
        .ok_or_else(|| anyhow::anyhow!("the cluster has no master"))?;
    Ok(Redis::Cluster { cluster, master })
}

fn validate(args: &OutageArgs) -> Result<(), Usage> {
    if args.duration.is_zero() || args.duration > MAX_OUTAGE_DURATION {
        return Err(Usage(
            "--duration must be between 1ms and 10m (every decision is kept in memory)".into(),
        ));
    }
    if args.at.is_zero() || args.fault_for.is_zero() {
        return Err(Usage("--at and --for must be above zero".into()));
    }
    if args.at + args.fault_for >= args.duration {
        return Err(Usage(format!(
            "--at + --for ({:?}) must end before --duration ({:?}): the run must see the recovery",
            args.at + args.fault_for,
            args.duration
        )));
    }
    let whole_ms = args.deadline.subsec_nanos().is_multiple_of(1_000_000);
    if !whole_ms || args.deadline < Duration::from_millis(1) || args.deadline > Duration::from_secs(60) {
        return Err(Usage("--deadline must be whole milliseconds between 1ms and 60s".into()));
    }
    if args.timeout <= args.deadline {
        return Err(Usage("--timeout must be longer than --deadline".into()));
    }
    Ok(())
}

/// Starts one server and waits until it is ready and its store has made a decision (the Redis
/// store connects on the first one), so that the measured load starts on a working fleet.
async fn start_server(yaml: &str) -> anyhow::Result<LocalServer> {
    let server = LocalServer::start(yaml).await?;
    match server.wait_deciding(STARTUP).await {
        Ok(()) => Ok(server),
        Err(e) => {
            server.stop().await;
            Err(e)
        }
    }
}

/// The load, the fault and the report.
async fn drive(
    args: &OutageArgs,
    node: &mut RedisServer,
    proxy: Option<&FaultProxy>,
    servers: &[LocalServer],
) -> anyhow::Result<Report> {
    let mut targets = Vec::new();
    for server in servers {
        targets.push(Target::http(&server.url(), args.timeout, false)?);
    }
    let progress = Progress::new(
        &format!("outage ({} at {:?} for {:?})", args.fault.name(), args.at, args.fault_for),
        millis(args.duration),
        args.output.quiet,
    );
    let live = Arc::new(Live::default());
    let stop = Arc::new(AtomicBool::new(false));
    let shape = Arc::new(Shape::default());
    let keys = KeyDistribution::uniform(args.keys);
    let (started, wall0_us) = (Instant::now(), wall_micros());
    let ticker = progress.tick_timed(started, Arc::clone(&live), Arc::clone(&stop));
    let deadline = started + args.duration;
    // The send time of the latest request the store did not decide, µs from the start.
    let last_error_us = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    let urls = servers.iter().map(LocalServer::url).collect();
    let breakers = tokio::spawn(watch_breakers(urls, started, deadline, Arc::clone(&stop)));
    for w in 0..args.concurrency {
        let instance = (w % targets.len() as u64) as usize;
        let target = targets[instance].clone();
        let (shape, keys, live, stop) = (shape.clone(), keys.clone(), live.clone(), stop.clone());
        let last_error_us = Arc::clone(&last_error_us);
        let mut rng = Rng::stream(args.seed, w);
        workers.push(tokio::spawn(async move {
            let (mut events, mut batch, mut name) = (Vec::new(), Batch::default(), String::new());
            loop {
                let sent = Instant::now();
                if sent >= deadline || stop.load(Ordering::Relaxed) {
                    break;
                }
                let key = keys.sample(&mut rng);
                name.clear();
                std::fmt::Write::write_fmt(&mut name, format_args!("k{key}")).ok();
                let outcome = target.check(&shape, &name, 1).await;
                let latency_ns = nanos(sent.elapsed());
                let sent_us = micros(sent - started);
                if matches!(outcome, Outcome::Error(_)) {
                    last_error_us.fetch_max(sent_us, Ordering::Relaxed);
                }
                events.push(Event {
                    sent_us,
                    latency_ns,
                    key: u32::try_from(key).unwrap_or(u32::MAX),
                    instance: u16::try_from(instance).unwrap_or(u16::MAX),
                    outcome,
                });
                batch.count(outcome, &live);
            }
            batch.flush(&live);
            events
        }));
    }

    let fault = inject(args, node, proxy, started).await;
    let mut settled = false;
    match &fault {
        Err(_) => stop.store(true, Ordering::Relaxed),
        Ok(span) if args.until_settled => {
            settled = settle(args, span, started, deadline, &last_error_us).await;
            stop.store(true, Ordering::Relaxed);
        }
        Ok(_) => {}
    }
    let mut events = Vec::new();
    for worker in workers {
        if let Ok(mut e) = worker.await {
            events.append(&mut e);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    progress.finish();
    let span = fault?;
    let breaker_samples = breakers.await.unwrap_or_default();
    let breaker = breaker_timing(&breaker_samples, span);

    let load_us = if args.until_settled { micros(started.elapsed()) } else { micros(args.duration) };
    let [before, during, after] = split(&events, span);
    let mut total = Tally::default();
    for phase in [&before, &during, &after] {
        total.merge(phase);
    }
    let recovery = recovery(&events, span.end_us);
    let window_us = micros(args.window).max(1);
    let ms = |us: u64| us as f64 / 1000.0;
    let details = Details {
        fault: args.fault.name(),
        on_store_error: args.on_store_error.as_str(),
        algorithm: args.algorithm.name(),
        limit: args.limit,
        window_ms: ms(window_us),
        keys: args.keys,
        instances: args.instances,
        concurrency: args.concurrency,
        deadline_ms: ms(micros(args.deadline)),
        delay_ms: (args.fault == Fault::Slow).then(|| ms(micros(args.delay))),
        local_share: (args.on_store_error == OnStoreError::Local)
            .then(|| (args.limit * LOCAL_FACTOR).div_ceil(args.share_of.unwrap_or(args.instances))),
        max_local_admitted_per_instance_key_window: (args.on_store_error == OnStoreError::Local)
            .then(|| max_local_admitted(&events, wall0_us, window_us)),
        breaker_opened_after_ms: breaker.opened_after_us.map(ms),
        breaker_closed_after_ms: breaker.closed_after_us.map(ms),
        fault_start_ms: ms(span.start_us),
        fault_end_ms: ms(span.end_us),
        counters_reset: args.fault == Fault::Kill,
        settled: args.until_settled.then_some(settled),
        recovered_after_ms: recovery.first_decision_us.map(ms),
        errors_after_recovery: recovery.errors_after,
        last_store_error_after_ms: events
            .iter()
            .filter(|e| e.sent_us >= span.start_us && matches!(e.outcome, Outcome::Error(_)))
            .map(|e| e.sent_us - span.start_us)
            .max()
            .map(ms),
        max_admitted_per_key_window: max_admitted_per_key_window(&events, wall0_us, window_us),
        phases: Phases {
            before: PhaseReport::new(&before, 0, span.start_us),
            during: PhaseReport::new(&during, span.start_us, span.end_us),
            after: PhaseReport::new(&after, span.end_us, load_us.max(span.end_us)),
        },
    };
    let target = format!(
        "{} in-process server{} on redis-server {}",
        servers.len(),
        if servers.len() == 1 { "" } else { "s" },
        redis::addr(node)
    );
    let mut errors_per_bucket = Vec::new();
    for e in events.iter().filter(|e| matches!(e.outcome, Outcome::Error(_))) {
        let bucket = (e.sent_us / 1000 / BUCKET_MS) as usize;
        if errors_per_bucket.len() <= bucket {
            errors_per_bucket.resize(bucket + 1, 0);
        }
        errors_per_bucket[bucket] += 1;
    }
    let label = match args.fault {
        Fault::Pause => "Redis paused".to_owned(),
        Fault::Kill => "Redis killed (restarted empty)".to_owned(),
        Fault::Slow => format!("Redis {:?} slower", args.delay),
        Fault::Blackhole => "Redis black-holed".to_owned(),
        Fault::MasterKill => "a cluster master killed".to_owned(),
    };
    let grid = phase_grid(&details.phases);
    let mut report = Report::new(total.summary("outage", &target, wall, wall), details);
    report.grids.push(grid);
    report.timeline = Some(total.timeline);
    report.overlay = Overlay {
        band: Some(Band { from_ms: ms(span.start_us), to_ms: ms(span.end_us), label }),
        errors: Some(errors_per_bucket),
    };
    Ok(report)
}

/// Breaks Redis at `--at` for `--for` and mends it: from when the signal was sent to when the
/// resume or restart was.
/// `--until-settled`: waits until no request sent in the last two windows (at least 1 s) after
/// the fault went undecided by the store, or until `deadline`; true when it settled.
async fn settle(
    args: &OutageArgs,
    span: &Span,
    started: Instant,
    deadline: Instant,
    last_error_us: &AtomicU64,
) -> bool {
    let quiet = (2 * args.window).max(Duration::from_secs(1));
    loop {
        let since = last_error_us.load(Ordering::Relaxed).max(span.end_us);
        let settled_at = started + Duration::from_micros(since) + quiet;
        if settled_at >= deadline {
            // It cannot settle in time any more (the latest error only moves later): the run goes
            // on to its end, as without the flag.
            tokio::time::sleep_until(deadline.into()).await;
            return false;
        }
        if Instant::now() >= settled_at {
            return true;
        }
        tokio::time::sleep_until(settled_at.into()).await;
    }
}

async fn inject(
    args: &OutageArgs,
    node: &mut RedisServer,
    proxy: Option<&FaultProxy>,
    started: Instant,
) -> anyhow::Result<Span> {
    let link = |to: Link| match proxy {
        Some(proxy) => {
            proxy.set(to);
            Ok(())
        }
        None => Err(anyhow::anyhow!("--fault {} needs the proxy", args.fault.name())),
    };
    tokio::time::sleep_until((started + args.at).into()).await;
    // The fault starts when the signal is sent (the watchdog's `kill` builtin delivers it within
    // microseconds) and ends when the resume or restart is.
    let start = Instant::now();
    match args.fault {
        Fault::Pause => redis::signal(node, Signal::Stop)?,
        Fault::Kill => redis::signal(node, Signal::Kill)?,
        Fault::Slow => link(Link::Delay(args.delay))?,
        Fault::Blackhole => link(Link::Hole)?,
        Fault::MasterKill => redis::signal(node, Signal::Kill)?,
    }
    // `--for` from the actual start: a late timer delays the fault, it does not shorten it.
    tokio::time::sleep_until((start + args.fault_for).into()).await;
    let start_us = micros(start - started);
    let end_us = micros(started.elapsed());
    match args.fault {
        Fault::Pause => redis::signal(node, Signal::Cont)?,
        Fault::Kill => redis::restart(node)?,
        Fault::Slow | Fault::Blackhole => link(Link::Pass)?,
        // Its replica has taken over (or not): the killed master stays down.
        Fault::MasterKill => {}
    }
    Ok(Span { start_us, end_us })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Scenario};

    fn args(extra: &[&str]) -> OutageArgs {
        let cli = Cli::try_parse_from([&["floodgate-bench", "outage"], extra].concat()).unwrap();
        let Scenario::Outage(args) = cli.scenario else { panic!("not outage") };
        args
    }

    #[test]
    fn the_fault_must_end_before_the_run_and_the_deadline_be_whole_milliseconds() {
        assert!(validate(&args(&[])).is_ok());
        let e = validate(&args(&["--at", "3s", "--for", "5s", "-d", "8s"])).unwrap_err();
        assert!(e.0.contains("must end before --duration"), "{e}");
        assert!(validate(&args(&["--at", "0s"])).is_err());
        assert!(validate(&args(&["--for", "0s"])).is_err());
        assert!(validate(&args(&["-d", "11m", "--at", "1s", "--for", "1s"])).is_err());
        let e = validate(&args(&["--deadline", "1ms500us"])).unwrap_err();
        assert!(e.0.contains("whole milliseconds"), "{e}");
        assert!(validate(&args(&["--deadline", "500us"])).is_err());
        assert!(validate(&args(&["--deadline", "2s", "--timeout", "2s"])).is_err());
        assert!(validate(&args(&["--deadline", "20ms", "--timeout", "1s"])).is_ok());
    }

    #[tokio::test]
    async fn a_missing_redis_server_is_a_usage_error_that_says_how_to_get_one() {
        let e = run(&args(&["--redis-server", "/nonexistent/redis-server", "-q"])).await.unwrap_err();
        let usage = e.downcast_ref::<Usage>().unwrap_or_else(|| panic!("not a usage error: {e:#}"));
        assert!(usage.0.contains("not found: install it (apt-get install -y redis-server)"), "{usage}");
        assert!(usage.0.contains("--redis-server PATH"), "{usage}");
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
