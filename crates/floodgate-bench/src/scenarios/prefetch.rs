//! `prefetch`: one hot key hammered through M in-process engines sharing one Redis, once without
//! and once with batch leases (`prefetch: { batch, ttl }`): store calls per decision, and the most
//! admitted in any window versus the limit.
//!
//! Each engine runs on the store the server runs on ([`AnyStore::open`]: the Redis store inside its
//! breaker, fallback and prefetch wrapper), with its own connection, and returns ended leases every
//! 100 ms as the server does. Store calls are counted by the prefetch wrapper: every call it makes
//! to the store below (one Lua call on a Redis node). A decision's window is taken from the store's
//! time in its verdict. The store's deadline is `--deadline` (default 1 s: the scenario counts
//! calls and admissions, not latency, and a busy machine must not open the breaker).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use floodgate::{Descriptors, Engine};
use floodgate_app::store::AnyStore;
use serde::Serialize;

use crate::Usage;
use crate::args::{Algorithm, MAX_DURATION, Output, parse_duration};
use crate::report::units::{millis, nanos};
use crate::report::{Outcome, Report, Tally};
use crate::scenarios::Run;

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

impl Run for PrefetchArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// One pass: with or without prefetch.
#[derive(Debug, Serialize)]
struct Pass {
    /// `none` or `batch N, ttl D`.
    prefetch: String,
    decisions: u64,
    admitted: u64,
    /// Requests the store did not decide (errors, deadline, breaker open): not decisions.
    errors: u64,
    /// Calls the engines made to the Redis store, all instances together.
    store_calls: u64,
    /// `store_calls / decisions`.
    calls_per_decision: f64,
    /// `store_calls / admitted`: what a decision costs when traffic stays under the limit.
    calls_per_admitted: f64,
    /// Decisions served from leases or remembered denials, without a store call.
    local_decisions: u64,
    /// Windows the run touched.
    windows: usize,
    /// The most admitted in one window, all instances together (never above `limit`).
    max_admitted_per_window: u64,
    /// The fewest admitted in a whole window (first and last windows left out; 0 if none):
    /// below `limit` by what other instances' leases held.
    min_admitted_per_full_window: u64,
    /// Unspent units refunded to the store.
    returned_units: u64,
}

/// The scenario's own JSON fields.
#[derive(Debug, Serialize)]
struct Details {
    instances: u64,
    algorithm: &'static str,
    limit: u64,
    window_ms: f64,
    batch: u64,
    ttl_ms: f64,
    without_prefetch: Pass,
    with_prefetch: Pass,
}

/// Runs `prefetch`.
pub async fn run(args: &PrefetchArgs) -> anyhow::Result<Report> {
    if args.duration.is_zero() || args.duration > MAX_DURATION {
        return Err(Usage("--duration must be between 1ms and 1h".into()).into());
    }
    crate::harness::target::check_redis_loopback(&args.redis, args.allow_remote)
        .map_err(|e| Usage(e.to_string()))?;
    let (without, _) = pass(args, None).await?;
    let (with, tally) = pass(args, Some((args.batch, args.ttl))).await?;
    let details = Details {
        instances: args.instances,
        algorithm: args.algorithm.name(),
        limit: args.limit,
        window_ms: args.window.as_secs_f64() * 1000.0,
        batch: args.batch,
        ttl_ms: args.ttl.as_secs_f64() * 1000.0,
        without_prefetch: without,
        with_prefetch: with,
    };
    let wall = args.duration.as_secs_f64();
    let target = format!("{} in-process engines on redis {}", args.instances, args.redis);
    let mut report = Report::new(tally.summary("prefetch", &target, wall, wall), details);
    report.timeline = Some(tally.timeline);
    Ok(report)
}

async fn pass(args: &PrefetchArgs, prefetch: Option<(u64, Duration)>) -> anyhow::Result<(Pass, Tally)> {
    let name = format!(
        "prefetch-{}-{}-{}",
        if prefetch.is_some() { "on" } else { "off" },
        std::process::id(),
        crate::harness::keys::unique_key()
    );
    let mut rule = args.algorithm.rule_yaml(&name, "user", args.limit, args.window).map_err(Usage)?;
    if let Some((batch, ttl)) = prefetch {
        rule.push_str(&format!("    prefetch: {{ batch: {batch}, ttl: {}us }}\n", ttl.as_micros().max(1)));
    }
    let yaml =
        format!("{}rules:\n{rule}", crate::harness::redis::store_yaml(&args.redis, Some(args.deadline)));
    let mut engines = Vec::new();
    for _ in 0..args.instances {
        let config = floodgate_config::parse("floodgate-bench", &yaml).map_err(|e| Usage(e.to_string()))?;
        let store = AnyStore::open(&config.store, &config.survival)?;
        if !store.ready().await.is_ready() {
            anyhow::bail!("redis at {} does not answer", args.redis);
        }
        let engine = Engine::new(config.policy, store);
        // Connects (the store connects on first use), on a key of its own: not counted.
        engine.peek(&Descriptors::new().with("user", "warm-up"), 1).await?;
        engines.push(Arc::new(engine));
    }
    let calls_before: u64 =
        engines.iter().filter_map(|e| e.store().prefetch()).map(|p| p.stats().store_calls).sum();
    let stop = Arc::new(AtomicBool::new(false));
    let mut returning = Vec::new();
    for engine in &engines {
        let (engine, stop) = (Arc::clone(engine), Arc::clone(&stop));
        returning.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Some(p) = engine.store().prefetch() {
                    p.return_due().await;
                }
            }
        }));
    }
    let request = Descriptors::new().with("user", "hot");
    let window_us = u64::try_from(args.window.as_micros()).unwrap_or(u64::MAX).max(1);
    let started = Instant::now();
    let deadline = started + args.duration;
    let mut workers = Vec::new();
    for w in 0..args.concurrency {
        let engine = Arc::clone(&engines[(w % args.instances) as usize]);
        let request = request.clone();
        workers.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let mut per_window: BTreeMap<u64, u64> = BTreeMap::new();
            loop {
                let sent = Instant::now();
                if sent >= deadline {
                    break;
                }
                let outcome = match engine.check(&request, 1).await {
                    Ok(v) if v.store_error.is_some() => Outcome::Error("store_error"),
                    Ok(v) if v.allowed => {
                        *per_window.entry(v.at.as_micros() / window_us).or_default() += 1;
                        Outcome::Allowed
                    }
                    Ok(_) => Outcome::Denied,
                    Err(_) => Outcome::Error("engine"),
                };
                tally.record(outcome, nanos(sent.elapsed()), millis(sent - started));
            }
            (tally, per_window)
        }));
    }
    let mut total = Tally::default();
    let mut per_window: BTreeMap<u64, u64> = BTreeMap::new();
    for worker in workers {
        let (tally, windows) = worker.await?;
        total.merge(&tally);
        for (w, n) in windows {
            *per_window.entry(w).or_default() += n;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for task in returning {
        let _ = task.await;
    }
    let (mut store_calls, mut local_decisions, mut returned_units) = (0, 0, 0);
    for engine in &engines {
        if let Some(p) = engine.store().prefetch() {
            p.flush().await;
            let stats = p.stats();
            store_calls += stats.store_calls;
            local_decisions += stats.local_decisions;
            returned_units += stats.returned_units;
        }
    }
    store_calls -= calls_before;
    let decisions = total.allowed + total.denied;
    let full: Vec<u64> = per_window.values().copied().skip(1).collect();
    let full = &full[..full.len().saturating_sub(1)];
    let pass = Pass {
        prefetch: prefetch.map_or("none".into(), |(b, t)| format!("batch {b}, ttl {t:?}")),
        decisions,
        admitted: total.allowed,
        errors: total.errors.values().sum(),
        store_calls,
        calls_per_decision: if decisions > 0 { store_calls as f64 / decisions as f64 } else { 0.0 },
        calls_per_admitted: if total.allowed > 0 { store_calls as f64 / total.allowed as f64 } else { 0.0 },
        local_decisions,
        windows: per_window.len(),
        max_admitted_per_window: per_window.values().copied().max().unwrap_or(0),
        min_admitted_per_full_window: full.iter().copied().min().unwrap_or(0),
        returned_units,
    };
    Ok((pass, total))
}
