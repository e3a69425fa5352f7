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

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::Usage;
use crate::cli::{Fault, OnStoreError, OutageArgs};
use crate::harness::keys::{KeyDistribution, Rng};
use crate::harness::proxy::{FaultProxy, Link};
use crate::harness::redis::{self, RedisCluster, RedisServer, Signal, cluster_store_yaml, store_yaml};
use crate::harness::server::{LocalServer, STARTUP};
use crate::harness::target::{Shape, Target};
use crate::report::math::{self, Percentiles};
use crate::report::plot::{Band, Overlay};
use crate::report::progress::{Batch, Live, Progress};
use crate::report::units::{micros, millis, nanos, wall_micros};
use crate::report::{BUCKET_MS, Grid, Outcome, PhaseCounts, Report, Tally, human_us};
use serde::Serialize;

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
        args.on_store_error.name()
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
    let mut workers = Vec::new();
    let breakers =
        tokio::spawn(watch_breakers(servers.iter().map(LocalServer::url).collect(), started, deadline));
    for w in 0..args.concurrency {
        let instance = (w % targets.len() as u64) as usize;
        let target = targets[instance].clone();
        let (shape, keys, live, stop) = (shape.clone(), keys.clone(), live.clone(), stop.clone());
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
    if fault.is_err() {
        stop.store(true, Ordering::Relaxed);
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

    let load_us = micros(args.duration);
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
        on_store_error: args.on_store_error.name(),
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

// === the report ===

/// The scenario's own JSON fields (docs/bench.md).
#[derive(Debug, Serialize)]
struct Details {
    /// `pause` or `kill`.
    fault: &'static str,
    /// The rule's `on_store_error`.
    on_store_error: &'static str,
    algorithm: &'static str,
    limit: u64,
    window_ms: f64,
    keys: u64,
    instances: u64,
    concurrency: u64,
    /// The store deadline.
    deadline_ms: f64,
    /// `slow`: how long the proxy held each request.
    delay_ms: Option<f64>,
    /// `local`: each server's share, ceil(limit × local_factor / instances).
    local_share: Option<u64>,
    /// `local`: the most one server admitted locally (`store_local_allowed`) for one key within one
    /// fixed window: at most `local_share` when the share held.
    max_local_admitted_per_instance_key_window: Option<u64>,
    /// From the fault's start to the first sample with a server's breaker open; `null` if none
    /// opened.
    breaker_opened_after_ms: Option<f64>,
    /// From the fault's end to the first sample with every server's breaker closed again (after
    /// it had opened); `null` if it never opened, or had not closed by the end of the run.
    breaker_closed_after_ms: Option<f64>,
    /// The fault, from its signal to the resume or restart (ms from the start of the load).
    fault_start_ms: f64,
    fault_end_ms: f64,
    /// Whether the store lost its counters (`kill`: the new node starts empty).
    counters_reset: bool,
    /// From the fault's end to the send of the first decision the store made after it; `null` if
    /// none did.
    recovered_after_ms: Option<f64>,
    /// Store errors sent after that decision: 0 when the recovery held, else a flapping store or
    /// deadline misses under load (compare with `before`'s store errors, the baseline).
    errors_after_recovery: u64,
    /// From the fault's start to the send of the last request after it that the store did not
    /// decide (a failure policy's verdict or an error): for `master-kill`, how long the failover took
    /// as callers saw it; `null` if there was none.
    last_store_error_after_ms: Option<f64>,
    /// The most one key was allowed within one fixed, epoch-aligned window (counting admissions
    /// whose send and answer both fall in it).
    max_admitted_per_key_window: u64,
    /// `before`, `during`, `after`.
    phases: Phases,
}

/// The three phases.
#[derive(Debug, Serialize)]
struct Phases {
    before: PhaseReport,
    during: PhaseReport,
    after: PhaseReport,
}

/// What the decisions sent in one phase came to.
#[derive(Debug, Serialize)]
struct PhaseReport {
    #[serde(flatten)]
    counts: PhaseCounts,
    /// `store_fail_open` errors: requests that passed, uncounted, because the store failed.
    passed_by_fail_open: u64,
    /// `store_fail_closed` errors: requests denied because the store failed.
    denied_by_fail_closed: u64,
    /// `store_local_allowed` errors: requests a server's local share admitted.
    admitted_locally: u64,
    /// `store_local_denied` errors: requests a server's local share denied.
    denied_locally: u64,
    /// HTTP 5xx answers (the goal is none, whatever the fault).
    http_5xx: u64,
    #[serde(flatten)]
    latency: Percentiles,
}

impl PhaseReport {
    fn new(tally: &Tally, from_us: u64, to_us: u64) -> Self {
        let kind = |k: &str| tally.errors.get(k).copied().unwrap_or(0);
        PhaseReport {
            counts: tally.phase(from_us, to_us),
            passed_by_fail_open: kind(STORE_ERRORS[0]),
            denied_by_fail_closed: kind(STORE_ERRORS[1]),
            admitted_locally: kind(STORE_ERRORS[2]),
            denied_locally: kind(STORE_ERRORS[3]),
            http_5xx: kind("http_5xx"),
            latency: math::percentiles(&tally.latency),
        }
    }
}

/// The phases side by side, for the table.
fn phase_grid(phases: &Phases) -> Grid {
    let columns = [&phases.before, &phases.during, &phases.after];
    let row = |label: &str, cell: &dyn Fn(&PhaseReport) -> String| {
        (label.to_owned(), columns.iter().map(|p| cell(p)).collect::<Vec<_>>())
    };
    let mut rows = vec![
        row("span (s)", &|p| format!("{:.2}–{:.2}", p.counts.from_ms / 1000.0, p.counts.to_ms / 1000.0)),
        row("sent", &|p| p.counts.sent.to_string()),
        row("sent/s", &|p| format!("{:.0}", p.counts.sent_per_sec)),
        row("allowed", &|p| p.counts.allowed.to_string()),
        row("denied", &|p| p.counts.denied.to_string()),
        row("errors", &|p| p.counts.errors.total.to_string()),
    ];
    rows.extend(Grid::error_rows(&columns.map(|p| &p.counts.errors)));
    rows.push(row("latency p50", &|p| human_us(p.latency.p50_us)));
    rows.push(row("latency p99", &|p| human_us(p.latency.p99_us)));
    rows.push(row("latency max", &|p| human_us(p.latency.max_us)));
    Grid { head: "phase".into(), columns: vec!["before".into(), "during".into(), "after".into()], rows }
}

// === the bookkeeping ===

/// One decision of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Event {
    /// When it was sent, µs from the start of the load.
    sent_us: u64,
    latency_ns: u64,
    /// The key's index.
    key: u32,
    /// The server it was sent to.
    instance: u16,
    outcome: Outcome,
}

impl Event {
    /// Whether the store made this decision (not an error, not a failure policy's verdict).
    fn decided(&self) -> bool {
        matches!(self.outcome, Outcome::Allowed | Outcome::Denied)
    }

    /// Whether this is a verdict made by `on_store_error`.
    fn store_error(&self) -> bool {
        matches!(self.outcome, Outcome::Error(kind) if STORE_ERRORS.contains(&kind))
    }
}

/// When the fault was in effect, µs from the start of the load: `[start_us, end_us)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start_us: u64,
    end_us: u64,
}

/// `[before, during, after]`, each decision by its send time.
fn split(events: &[Event], span: Span) -> [Tally; 3] {
    let mut phases: [Tally; 3] = Default::default();
    for e in events {
        let phase = if e.sent_us < span.start_us {
            0
        } else if e.sent_us < span.end_us {
            1
        } else {
            2
        };
        phases[phase].record(e.outcome, e.latency_ns, e.sent_us / 1000);
    }
    phases
}

/// How the store came back after the fault's end (µs after it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Recovery {
    /// The send of the first decision the store made after the end.
    first_decision_us: Option<u64>,
    /// Store errors sent after the first decision.
    errors_after: u64,
}

fn recovery(events: &[Event], end_us: u64) -> Recovery {
    let after = || events.iter().filter(move |e| e.sent_us >= end_us);
    let Some(first) = after().filter(|e| e.decided()).map(|e| e.sent_us).min() else {
        return Recovery::default();
    };
    let errors_after = after().filter(|e| e.store_error() && e.sent_us > first).count() as u64;
    Recovery { first_decision_us: Some(first - end_us), errors_after }
}

/// The most admissions of one key within one fixed window (aligned to the Unix epoch, as the
/// store's fixed windows are), counting only admissions whose whole exchange — from send to
/// answer, wall-clock µs from `wall0_us` — falls inside the window: the store decided each of
/// them within it. Admissions that straddle a boundary are left out, so this never overstates.
fn max_admitted_per_key_window(events: &[Event], wall0_us: u64, window_us: u64) -> u64 {
    max_per_window(events, Outcome::Allowed, |_| 0, wall0_us, window_us)
}

/// The most admissions by one server's local share (`store_local_allowed`) of one key within one
/// fixed window, counted as [`max_admitted_per_key_window`] counts.
fn max_local_admitted(events: &[Event], wall0_us: u64, window_us: u64) -> u64 {
    max_per_window(events, Outcome::Error(STORE_ERRORS[2]), |e| e.instance, wall0_us, window_us)
}

/// The most events with `outcome` of one key (and one `group`) within one fixed window, counting
/// only those whose send and answer both fall inside it.
fn max_per_window(
    events: &[Event],
    outcome: Outcome,
    group: impl Fn(&Event) -> u16,
    wall0_us: u64,
    window_us: u64,
) -> u64 {
    let mut counts: HashMap<(u16, u32, u64), u64> = HashMap::new();
    for e in events.iter().filter(|e| e.outcome == outcome) {
        let sent = wall0_us + e.sent_us;
        let answered = sent + e.latency_ns.div_ceil(1000);
        let window = sent / window_us;
        if answered < (window + 1) * window_us {
            *counts.entry((group(e), e.key, window)).or_default() += 1;
        }
    }
    counts.into_values().max().unwrap_or(0)
}

/// One look at the servers' breakers: when (µs from the start of the load), and whether any was
/// not closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BreakerSample {
    at_us: u64,
    any_open: bool,
}

/// Reads `floodgate_store_breaker_state` from each server's `/metrics` every 10 ms until `until`.
async fn watch_breakers(urls: Vec<String>, started: Instant, until: Instant) -> Vec<BreakerSample> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let uris: Vec<http::Uri> = urls.iter().filter_map(|u| format!("{u}/metrics").parse().ok()).collect();
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while Instant::now() < until {
        tick.tick().await;
        let at_us = micros(started.elapsed());
        let mut any_open = false;
        for uri in &uris {
            let answer = tokio::time::timeout(Duration::from_millis(500), client.get(uri.clone())).await;
            let Ok(Ok(response)) = answer else { continue };
            let Ok(body) = http_body_util::BodyExt::collect(response.into_body()).await else { continue };
            any_open |= breaker_open(&body.to_bytes());
        }
        samples.push(BreakerSample { at_us, any_open });
    }
    samples
}

/// Whether a `/metrics` text says the store's breaker is open or half-open.
fn breaker_open(metrics: &[u8]) -> bool {
    let text = String::from_utf8_lossy(metrics);
    text.lines()
        .filter(|l| l.starts_with("floodgate_store_breaker_state{"))
        .filter_map(|l| l.rsplit_once(' '))
        .any(|(_, v)| v.trim().parse::<f64>().is_ok_and(|v| v > 0.0))
}

/// When the breaker opened after the fault's start, and closed everywhere after its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct BreakerTiming {
    opened_after_us: Option<u64>,
    closed_after_us: Option<u64>,
}

fn breaker_timing(samples: &[BreakerSample], span: Span) -> BreakerTiming {
    let Some(opened) = samples.iter().find(|s| s.at_us >= span.start_us && s.any_open) else {
        return BreakerTiming::default();
    };
    let closed = samples.iter().find(|s| s.at_us >= span.end_us.max(opened.at_us) && !s.any_open);
    BreakerTiming {
        opened_after_us: Some(opened.at_us - span.start_us),
        closed_after_us: closed.map(|s| s.at_us - span.end_us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sent_ms: u64, outcome: Outcome) -> Event {
        Event { sent_us: sent_ms * 1000, latency_ns: 1_000_000, key: 0, instance: 0, outcome }
    }

    const OPEN: Outcome = Outcome::Error("store_fail_open");
    const CLOSED: Outcome = Outcome::Error("store_fail_closed");
    const SPAN: Span = Span { start_us: 1_000_000, end_us: 2_000_000 };

    #[test]
    fn a_kept_decision_takes_48_bytes_at_most() {
        // As MAX_OUTAGE_DURATION and docs/bench.md say.
        assert!(std::mem::size_of::<Event>() <= 48, "{}", std::mem::size_of::<Event>());
    }

    #[test]
    fn decisions_fall_in_the_phase_of_their_send_time() {
        let events = [
            event(0, Outcome::Allowed),
            event(999, Outcome::Denied),
            // Sent at the fault's start, answered long after its end: still `during`.
            Event { latency_ns: 5_000_000_000, ..event(1000, OPEN) },
            event(1999, Outcome::Allowed),
            event(2000, CLOSED),
            event(2500, Outcome::Error("timeout")),
        ];
        let [before, during, after] = split(&events, SPAN);
        assert_eq!((before.allowed, before.denied, before.error_count()), (1, 1, 0));
        assert_eq!((during.allowed, during.errors["store_fail_open"]), (1, 1));
        assert_eq!((after.errors["store_fail_closed"], after.errors["timeout"]), (1, 1));
        let sent: u64 = [&before, &during, &after].iter().map(|t| t.sent()).sum();
        assert_eq!(sent, events.len() as u64);
        let during = PhaseReport::new(&during, SPAN.start_us, SPAN.end_us);
        assert_eq!(
            (during.counts.from_ms, during.counts.to_ms, during.counts.sent_per_sec),
            (1000.0, 2000.0, 2.0)
        );
        assert_eq!((during.passed_by_fail_open, during.denied_by_fail_closed), (1, 0));
        assert!(during.latency.max_us >= 4_990_000.0, "{:?}", during.latency);
    }

    #[test]
    fn recovery_is_the_first_store_decision_sent_after_the_fault() {
        let events = [
            event(1500, Outcome::Allowed), // during: not a recovery
            event(2000, OPEN),
            event(2040, Outcome::Error("timeout")), // not a store error, not a decision
            event(2030, OPEN),
            event(2050, Outcome::Denied),
            event(2060, Outcome::Allowed),
        ];
        let r = recovery(&events, SPAN.end_us);
        assert_eq!(r, Recovery { first_decision_us: Some(50_000), errors_after: 0 });
    }

    #[test]
    fn store_errors_after_the_first_decision_are_counted() {
        // Two instances: one reconnected at 2010 ms, the other still failing until 2080 ms.
        let events = [
            event(2080, OPEN),
            event(2010, Outcome::Allowed),
            event(2040, OPEN),
            event(2090, Outcome::Denied),
            event(2100, Outcome::Allowed),
        ];
        let r = recovery(&events, SPAN.end_us);
        assert_eq!(r, Recovery { first_decision_us: Some(10_000), errors_after: 2 });
    }

    #[test]
    fn a_store_that_never_decides_again_has_no_recovery() {
        let events = [event(500, Outcome::Allowed), event(2500, CLOSED), event(3000, OPEN)];
        assert_eq!(recovery(&events, SPAN.end_us), Recovery::default());
    }

    fn args(extra: &[&str]) -> OutageArgs {
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from([&["floodgate-bench", "outage"], extra].concat()).unwrap();
        let crate::cli::Scenario::Outage(args) = cli.scenario else { panic!("not outage") };
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
    fn the_phase_table_has_a_column_per_phase_and_a_row_per_error_kind() {
        let events = [event(10, Outcome::Allowed), event(1500, OPEN), event(2500, Outcome::Denied)];
        let [before, during, after] = split(&events, SPAN);
        let phases = Phases {
            before: PhaseReport::new(&before, 0, SPAN.start_us),
            during: PhaseReport::new(&during, SPAN.start_us, SPAN.end_us),
            after: PhaseReport::new(&after, SPAN.end_us, 3_000_000),
        };
        let grid = phase_grid(&phases);
        assert_eq!(grid.columns, ["before", "during", "after"]);
        let row = |label: &str| grid.rows.iter().find(|(l, _)| l == label).map(|(_, c)| c.clone()).unwrap();
        assert_eq!(row("span (s)"), ["0.00–1.00", "1.00–2.00", "2.00–3.00"]);
        assert_eq!(row("allowed"), ["1", "0", "0"]);
        assert_eq!(row("  store_fail_open"), ["0", "1", "0"]);
        assert_eq!(row("latency p50")[1], "1.00 ms");
    }

    #[test]
    fn admissions_count_in_the_window_they_were_decided_in_and_straddlers_are_left_out() {
        let allowed = |key: u32, sent_us: u64, latency_us: u64| Event {
            sent_us,
            latency_ns: latency_us * 1000,
            key,
            instance: 0,
            outcome: Outcome::Allowed,
        };
        // wall0 = 10.5 s, 1 s windows: run µs 0..500 000 are in window 10, 500 000.. in window 11.
        let wall0 = 10_500_000;
        let mut events = vec![allowed(0, 0, 100); 3];
        events.push(allowed(0, 499_950, 100)); // straddles 11.0 s: left out
        events.extend(vec![allowed(0, 500_000, 100); 4]); // window 11: 4
        events.extend(vec![allowed(1, 600_000, 100); 2]); // another key
        events.push(Event { outcome: Outcome::Denied, ..allowed(0, 600_000, 100) });
        events.push(Event { outcome: OPEN, ..allowed(0, 600_000, 100) });
        assert_eq!(max_admitted_per_key_window(&events, wall0, 1_000_000), 4);
        assert_eq!(max_admitted_per_key_window(&[], wall0, 1_000_000), 0);
    }

    #[test]
    fn local_admissions_are_counted_per_server_key_and_window() {
        let local = |instance: u16, key: u32, sent_us: u64| Event {
            sent_us,
            latency_ns: 100_000,
            key,
            instance,
            outcome: Outcome::Error("store_local_allowed"),
        };
        let mut events = vec![local(0, 7, 1_000); 3];
        events.extend(vec![local(1, 7, 2_000); 5]); // another server: its own share
        events.extend(vec![local(0, 7, 1_001_000); 4]); // the next window
        events.push(Event { outcome: Outcome::Allowed, ..local(1, 7, 3_000) }); // the store's
        events.push(Event { outcome: Outcome::Error("store_local_denied"), ..local(1, 7, 3_000) });
        assert_eq!(max_local_admitted(&events, 0, 1_000_000), 5);
        assert_eq!(max_local_admitted(&events[..3], 0, 1_000_000), 3);
    }

    #[test]
    fn the_breaker_opens_after_the_fault_starts_and_closes_after_it_ends() {
        let sample = |at_ms: u64, any_open: bool| BreakerSample { at_us: at_ms * 1000, any_open };
        let span = Span { start_us: 2_000_000, end_us: 4_000_000 };
        let samples = [
            sample(1_990, false),
            sample(2_000, false),
            sample(2_030, true),
            sample(3_000, true),
            sample(4_000, true),
            sample(4_210, false),
        ];
        let timing = breaker_timing(&samples, span);
        assert_eq!(timing, BreakerTiming { opened_after_us: Some(30_000), closed_after_us: Some(210_000) });
        assert_eq!(breaker_timing(&samples[..2], span), BreakerTiming::default(), "never opened");
        let still_open = breaker_timing(&samples[..5], span);
        assert_eq!((still_open.opened_after_us, still_open.closed_after_us), (Some(30_000), None));
        let metrics =
            b"# TYPE floodgate_store_breaker_state gauge\nfloodgate_store_breaker_state{store=\"redis\"} 2\n";
        assert!(breaker_open(metrics));
        assert!(!breaker_open(b"floodgate_store_breaker_state{store=\"redis\"} 0\n"));
    }
}
