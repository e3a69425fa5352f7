//! `instances`: M servers hammered on the same key; total admitted versus the limit.
//!
//! Without `--target`, M in-process `floodgate` servers start on `127.0.0.1:0`, **each with its
//! own memory store**: every instance enforces the limit on its own, so the cluster admits up to
//! `M × limit` (`over_admission` ≈ M). That is what the memory store means for a fleet. With
//! `--redis URL` the in-process servers share one Redis instead (exact: `over_admission` ≤ 1 for
//! the atomic algorithms); `--target` points at M running servers of any store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::Usage;
use crate::args::{Algorithm, MAX_DURATION, Output, parse_duration};
use crate::harness::LocalServer;
use crate::harness::keys::unique_key;
use crate::harness::redis::{cluster_store_yaml, store_yaml};
use crate::harness::target::{Shape, Target, check_redis_loopback};
use crate::report::math::over_admission_ratio;
use crate::report::progress::{Batch, Live, Progress};
use crate::report::units::{millis, nanos};
use crate::report::{Report, Tally};
use crate::scenarios::Run;

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

impl Run for InstancesArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// The scenario's own JSON fields.
#[derive(Debug, Serialize)]
struct Details {
    instances: u64,
    algorithm: &'static str,
    limit: u64,
    window_ms: f64,
    /// Allowed, all instances together.
    admitted: u64,
    /// `admitted / limit`: 1.0 is exact; M means each instance enforced the limit alone.
    over_admission: f64,
    per_instance_admitted: Vec<u64>,
    /// Requests that passed because the store failed and the rule fails open (`store_fail_open`
    /// errors): they passed without being counted.
    passed_by_fail_open: u64,
    /// `(admitted + passed_by_fail_open) / limit`: everything that got through.
    over_admission_with_fail_open: f64,
    /// `memory (one per instance)` or `redis (shared)` for in-process servers, `external` for
    /// --target.
    store: &'static str,
}

/// Runs `instances`.
pub async fn run(args: &InstancesArgs) -> anyhow::Result<Report> {
    if args.duration.is_zero() || args.duration > MAX_DURATION {
        return Err(Usage("--duration must be between 1ms and 1h".into()).into());
    }
    let mut servers = Vec::new();
    let urls: Vec<String> = if args.targets.is_empty() {
        let rule = args
            .algorithm
            .rule_yaml("shared", &args.key_descriptor, args.limit, args.window)
            .map_err(Usage)?;
        for url in args.redis.iter().chain(&args.redis_cluster) {
            check_redis_loopback(url, args.allow_remote).map_err(|e| Usage(e.to_string()))?;
        }
        let store = match (&args.redis, args.redis_cluster.as_slice()) {
            (Some(url), _) => store_yaml(url, args.deadline),
            (None, []) => "store:\n  kind: memory\n".to_owned(),
            (None, urls) => cluster_store_yaml(urls, args.deadline),
        };
        let yaml = format!("{store}rules:\n{rule}");
        for _ in 0..args.instances {
            let server = LocalServer::start(&yaml).await?;
            if !server.wait_ready(Duration::from_secs(10)).await {
                anyhow::bail!("the server on {} did not become ready (is the store reachable?)", server.addr);
            }
            servers.push(server);
        }
        servers.iter().map(LocalServer::url).collect()
    } else {
        args.targets.clone()
    };
    let mut targets = Vec::new();
    for url in &urls {
        targets.push(Target::http(url, args.timeout, args.allow_remote).map_err(|e| Usage(e.to_string()))?);
    }
    let shape =
        Arc::new(Shape { key_descriptor: args.key_descriptor.clone(), with: Vec::new(), domain: None });
    let key: Arc<str> = format!("instances-{}-{}", std::process::id(), unique_key()).into();

    let progress = Progress::new(
        "instances",
        u64::try_from(args.duration.as_millis()).unwrap_or(u64::MAX),
        args.output.quiet,
    );
    let live = Arc::new(Live::default());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let ticker = progress.tick_timed(started, Arc::clone(&live), Arc::clone(&stop));
    let deadline = started + args.duration;
    let quota = args.max_requests.div_ceil(args.concurrency).max(1);
    let mut workers = Vec::new();
    for w in 0..args.concurrency {
        let index = (w % targets.len() as u64) as usize;
        let (target, shape, key, live) = (targets[index].clone(), shape.clone(), key.clone(), live.clone());
        workers.push(tokio::spawn(async move {
            let (mut tally, mut batch) = (Tally::default(), Batch::default());
            for _ in 0..quota {
                let sent = Instant::now();
                if sent >= deadline {
                    break;
                }
                let outcome = target.check(&shape, &key, 1).await;
                tally.record(outcome, nanos(sent.elapsed()), millis(sent - started));
                batch.count(outcome, &live);
            }
            batch.flush(&live);
            (index, tally)
        }));
    }
    let mut total = Tally::default();
    let mut per_instance = vec![0u64; targets.len()];
    for worker in workers {
        if let Ok((index, tally)) = worker.await {
            per_instance[index] += tally.allowed;
            total.merge(&tally);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = ticker.await;
    progress.finish();
    for server in servers {
        server.stop().await;
    }

    let in_process = args.targets.is_empty();
    let fail_open = total.errors.get("store_fail_open").copied().unwrap_or(0);
    let details = Details {
        instances: targets.len() as u64,
        algorithm: args.algorithm.name(),
        limit: args.limit,
        window_ms: args.window.as_secs_f64() * 1000.0,
        admitted: total.allowed,
        over_admission: over_admission_ratio(total.allowed, args.limit),
        per_instance_admitted: per_instance,
        passed_by_fail_open: fail_open,
        over_admission_with_fail_open: over_admission_ratio(total.allowed + fail_open, args.limit),
        store: match (&args.redis, args.redis_cluster.is_empty(), in_process) {
            (_, _, false) => "external",
            (Some(_), _, true) => "redis (shared)",
            (None, false, true) => "redis_cluster (shared)",
            (None, true, true) => "memory (one per instance)",
        },
    };
    let target = if in_process { format!("{} in-process servers", targets.len()) } else { urls.join(",") };
    let mut report = Report::new(total.summary("instances", &target, wall, wall), details);
    report.timeline = Some(total.timeline);
    Ok(report)
}
