//! `boundary`: bursts just before and just after window boundaries, and the most admitted in any
//! window-length span.
//!
//! Each cycle spans two windows: the window before boundary `b` is untouched until a burst at
//! `b − offset`, then a second burst fires at `b + offset`. A fixed window admits `limit` in each,
//! `2 × limit` within `2 × offset`; a sliding log admits `limit` in all. Cycles are two windows
//! apart so that every cycle starts fresh.
//!
//! With `--pattern burst-then-steady` (simulated only) each cycle is a full burst just before a
//! boundary, then one request per `window / limit` (the refill interval) for one window, on a key
//! of its own: a token bucket or GCRA admits its burst and then every refill, `2 × limit − 1`
//! within one window — their real worst case, which the flood does not reach.
//!
//! - **Simulated** (no target flag): the engine over a memory store on a
//!   [`floodgate_core::ManualClock`], bursts at exact instants — exact and instant.
//! - **Real time** (`--target` / `--grpc` / `--route-target`): against a running server whose
//!   rule matches `--algorithm/--limit/--window`; boundaries are computed from the wall clock (the
//!   server's windows are aligned to the Unix epoch), bursts fired concurrently, admissions timed
//!   at send. `--prime` sends one request a window before each boundary, on a fresh key per
//!   cycle, for limiters whose window starts at a key's first request.

use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use floodgate::{Descriptors, Engine, LimitKind, MemoryConfig, MemoryStore, Policy, Rule};
use floodgate_core::{ManualClock, Timestamp};
use serde::Serialize;

use crate::Usage;
use crate::args::{Algorithm, MAX_DURATION, Output, RequestArgs, TargetArgs, parse_duration};
use crate::harness::keys::unique_key;
use crate::report::math::{max_admitted_in_any_window, over_admission_ratio};
use crate::report::progress::Progress;
use crate::report::units::{micros, nanos, wall_micros};
use crate::report::{Outcome, Report, Tally};

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

impl crate::scenarios::Run for BoundaryArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// The scenario's own JSON fields.
#[derive(Debug, Serialize)]
struct Details {
    algorithm: &'static str,
    limit: u64,
    window_ms: f64,
    /// `simulated` or `real_time`.
    mode: &'static str,
    /// `flood` or `burst-then-steady`.
    pattern: &'static str,
    cycles: u64,
    burst: u64,
    offset_ms: f64,
    cost: u64,
    /// In cost units: the most admitted within any `[t, t + window)`.
    max_admitted_in_any_window: u64,
    /// `max_admitted_in_any_window / limit`.
    over_admission_ratio: f64,
    /// What the algorithm promises at most (DESIGN.md §5): 1.0 for sliding log, 2.0 for fixed
    /// window and the buckets (burst + refill over one window).
    #[serde(skip_serializing_if = "Option::is_none")]
    promised_at_most: Option<f64>,
}

/// The most attempts in one burst.
const MAX_BURST: u64 = 1_000_000;

/// Runs `boundary`.
pub async fn run(args: &BoundaryArgs) -> anyhow::Result<Report> {
    let burst = args.burst.unwrap_or(2 * args.limit).clamp(1, MAX_BURST);
    let real_time =
        args.target.target.is_some() || args.target.grpc.is_some() || args.target.route_target.is_some();
    if args.pattern == Pattern::BurstThenSteady && real_time {
        return Err(Usage(
            "--pattern burst-then-steady runs on the simulated clock only (no target flag)".into(),
        )
        .into());
    }
    if args.prime && !real_time {
        return Err(Usage("--prime is for real-time runs (--target, --grpc, --route-target)".into()).into());
    }
    if args.target.route_target.is_some() && args.request.cost != 1 {
        return Err(Usage("a --route-target request costs 1 (--cost is not sent)".into()).into());
    }
    let offset =
        args.offset.unwrap_or(if real_time { Duration::from_millis(50) } else { Duration::from_millis(1) });
    if offset.is_zero() || offset * 2 >= args.window {
        return Err(Usage("--offset must be above zero and under half the window".into()).into());
    }
    if real_time && args.window * 2 * u32::try_from(args.cycles).unwrap_or(u32::MAX) > MAX_DURATION {
        return Err(Usage("a real-time run (2 windows per cycle) must stay under 1 h".into()).into());
    }
    let plan = Plan { burst, offset, cost: args.request.cost };
    let (tally, admitted, duration_s, wall_s, target) =
        if real_time { real(args, &plan).await? } else { simulated(args, &plan).await? };

    let window_us = micros(args.window);
    let max = max_admitted_in_any_window(&admitted, window_us);
    let details = Details {
        algorithm: args.algorithm.name(),
        limit: args.limit,
        window_ms: args.window.as_secs_f64() * 1000.0,
        mode: if real_time { "real_time" } else { "simulated" },
        pattern: args.pattern.name(),
        cycles: args.cycles,
        burst,
        offset_ms: offset.as_secs_f64() * 1000.0,
        cost: plan.cost,
        max_admitted_in_any_window: max,
        over_admission_ratio: over_admission_ratio(max, args.limit),
        promised_at_most: match args.algorithm.kind() {
            LimitKind::SlidingLog => Some(1.0),
            // Fixed window, the buckets (burst + one window of refill), and the weighted sliding
            // window (its documented bound: limit + ⌊limit · d / window⌋ in any span d ≤ window).
            _ => Some(2.0),
        },
    };
    let mut report = Report::new(tally.summary("boundary", &target, duration_s, wall_s), details);
    report.timeline = Some(tally.timeline);
    Ok(report)
}

struct Plan {
    burst: u64,
    offset: Duration,
    cost: u64,
}

type Run = (Tally, Vec<(u64, u64)>, f64, f64, String);

/// The engine on a manual clock.
async fn simulated(args: &BoundaryArgs, plan: &Plan) -> anyhow::Result<Run> {
    let window_us = micros(args.window).max(1);
    // Any multiple of the window: fixed windows are aligned to the Unix epoch.
    let t0 = window_us * 1_000_000_000_000u64.div_ceil(window_us);
    let clock = ManualClock::new(Timestamp::from_micros(t0));
    let limit = args.algorithm.limit(args.limit, args.window).map_err(|e| Usage(e.to_string()))?;
    let rule = Rule::new("boundary", limit).key([args.request.key_descriptor.clone()]);
    let policy = Policy::new([rule]).map_err(|e| Usage(e.to_string()))?;
    let engine = Engine::new(policy, MemoryStore::with_config(MemoryConfig::default(), clock.clone()));
    let mut descriptors = Descriptors::new();
    for (k, v) in &args.request.with {
        descriptors.insert(k.clone(), v.clone());
    }
    descriptors
        .insert(args.request.key_descriptor.clone(), args.key.clone().unwrap_or_else(|| "attacker".into()));

    let progress = Progress::new("boundary (simulated)", args.cycles * 2, args.output.quiet);
    let started = Instant::now();
    let (mut tally, mut admitted) = (Tally::default(), Vec::new());
    let offset_us = micros(plan.offset);
    let base_key = args.key.clone().unwrap_or_else(|| "attacker".into());
    let cycle_windows = if args.pattern == Pattern::BurstThenSteady { 3 } else { 2 };
    for c in 0..args.cycles {
        let boundary = t0 + (cycle_windows * c + 1) * window_us;
        // (when, attempts) in this cycle, in time order.
        let plan_of_cycle: Vec<(u64, u64)> = match args.pattern {
            Pattern::Flood => vec![(boundary - offset_us, plan.burst), (boundary + offset_us, plan.burst)],
            Pattern::BurstThenSteady => {
                // A key of its own per cycle: the bucket is full at the burst.
                descriptors.insert(args.request.key_descriptor.clone(), format!("{base_key}-c{c}"));
                let burst_at = boundary - offset_us;
                let interval = (window_us / args.limit).max(1);
                let mut p = vec![(burst_at, plan.burst)];
                p.extend((1..=args.limit).map(|k| (burst_at + k * interval, 1)));
                p
            }
        };
        let half = plan_of_cycle.len().div_ceil(2);
        for (i, (at, attempts)) in plan_of_cycle.into_iter().enumerate() {
            clock.set(Timestamp::from_micros(at));
            for _ in 0..attempts {
                let sent = Instant::now();
                let outcome = match engine.check(&descriptors, plan.cost).await {
                    Ok(v) if v.allowed => Outcome::Allowed,
                    Ok(_) => Outcome::Denied,
                    Err(_) => Outcome::Error("engine"),
                };
                let since = at - t0;
                tally.record(outcome, nanos(sent.elapsed()), since / 1000);
                if outcome == Outcome::Allowed {
                    admitted.push((since, plan.cost));
                }
            }
            if i + 1 == half {
                progress.set(2 * c + 1);
            }
        }
        progress.set(2 * c + 2);
    }
    progress.finish();
    let duration_s = (args.cycles * cycle_windows * window_us) as f64 / 1e6;
    Ok((tally, admitted, duration_s, started.elapsed().as_secs_f64(), "simulated".into()))
}

/// A running server, in real time.
async fn real(args: &BoundaryArgs, plan: &Plan) -> anyhow::Result<Run> {
    let target = args.target.build().await?;
    let shape = std::sync::Arc::new(args.request.shape());
    let key = std::sync::Arc::new(args.key.clone().unwrap_or_else(unique_key));
    let window_us = micros(args.window).max(1);
    let offset_us = micros(plan.offset);
    // Wall-clock microseconds now, and the instant that corresponds to them.
    let (wall0, instant0) = (wall_micros(), Instant::now());
    let at = |wall_us: u64| instant0 + Duration::from_micros(wall_us.saturating_sub(wall0));
    // The first boundary at least offset + 20 ms away (and a window more with --prime), so the
    // first burst (and priming request) is on time.
    let lead = if args.prime { window_us } else { 0 };
    let first = (wall0 + lead + offset_us + 20_000).div_ceil(window_us) * window_us;
    let t0 = first - window_us;
    let progress = Progress::new("boundary", args.cycles * 2, args.output.quiet);
    let (mut tally, mut admitted) = (Tally::default(), Vec::new());
    for c in 0..args.cycles {
        let boundary = first + 2 * c * window_us;
        let key = if args.prime { std::sync::Arc::new(format!("{key}-c{c}")) } else { key.clone() };
        if args.prime {
            // One request at the start of the window before the boundary: a per-key window opened
            // here ends at the boundary.
            let fire = boundary - window_us;
            tokio::time::sleep_until(at(fire).into()).await;
            let sent = Instant::now();
            let outcome = target.check(&shape, &key, plan.cost).await;
            let since = (wall0 + micros(sent - instant0)).saturating_sub(t0);
            tally.record(outcome, nanos(sent.elapsed()), since / 1000);
            if outcome == Outcome::Allowed {
                admitted.push((since, plan.cost));
            }
        }
        for (i, fire) in [boundary - offset_us, boundary + offset_us].into_iter().enumerate() {
            tokio::time::sleep_until(at(fire).into()).await;
            let mut burst = tokio::task::JoinSet::new();
            for _ in 0..plan.burst {
                let (target, shape, key, cost) = (target.clone(), shape.clone(), key.clone(), plan.cost);
                burst.spawn(async move {
                    let sent = Instant::now();
                    let outcome = target.check(&shape, &key, cost).await;
                    (sent, sent.elapsed(), outcome)
                });
            }
            while let Some(done) = burst.join_next().await {
                let Ok((sent, latency, outcome)) = done else { continue };
                let since = (wall0 + micros(sent - instant0)).saturating_sub(t0);
                tally.record(outcome, nanos(latency), since / 1000);
                if outcome == Outcome::Allowed {
                    admitted.push((since, plan.cost));
                }
            }
            progress.set(2 * c + i as u64 + 1);
        }
    }
    progress.finish();
    admitted.sort_unstable();
    let wall_s = instant0.elapsed().as_secs_f64();
    Ok((tally, admitted, (args.cycles * 2 * window_us) as f64 / 1e6, wall_s, target.describe()))
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use crate::cli::{Cli, Scenario};

    async fn ratio(algorithm: &str, pattern: &str) -> (f64, u64) {
        let cli = Cli::try_parse_from([
            "floodgate-bench",
            "boundary",
            "--algorithm",
            algorithm,
            "--limit",
            "100",
            "--window",
            "1s",
            "--cycles",
            "3",
            "--pattern",
            pattern,
            "--quiet",
        ])
        .unwrap();
        let Scenario::Boundary(args) = cli.scenario else { unreachable!() };
        let report = super::run(&args).await.unwrap();
        let d = &report.details;
        (d["over_admission_ratio"].as_f64().unwrap(), d["max_admitted_in_any_window"].as_u64().unwrap())
    }

    #[tokio::test]
    async fn a_burst_then_steady_traffic_shows_the_buckets_worst_case() {
        // The burst (100), then every refill but the one at the window's end (99).
        for algorithm in ["token_bucket", "gcra", "fixed_window"] {
            assert_eq!(ratio(algorithm, "burst-then-steady").await, (1.99, 199), "{algorithm}");
            assert!(ratio(algorithm, "flood").await.0 <= 2.0, "{algorithm}");
        }
        // The flood does not reach it for the buckets.
        assert_eq!(ratio("gcra", "flood").await, (1.0, 100));
        // The sliding log is exact under both; the weighted sliding window stays within its bound.
        assert_eq!(ratio("sliding_log", "burst-then-steady").await, (1.0, 100));
        let (weighted, _) = ratio("sliding_window", "burst-then-steady").await;
        assert!((1.5..=2.0).contains(&weighted), "{weighted}");
    }

    #[tokio::test]
    async fn burst_then_steady_is_simulated_only() {
        let cli = Cli::try_parse_from([
            "floodgate-bench",
            "boundary",
            "--target",
            "http://127.0.0.1:9",
            "--pattern",
            "burst-then-steady",
        ])
        .unwrap();
        let Scenario::Boundary(args) = cli.scenario else { unreachable!() };
        let err = super::run(&args).await.unwrap_err().to_string();
        assert!(err.contains("simulated clock only"), "{err}");
    }
}
