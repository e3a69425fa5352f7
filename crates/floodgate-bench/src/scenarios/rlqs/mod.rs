//! `rlqs`: simulated Envoys (`floodgate_testkit::rlqs::Filter`, on Envoy's protos) each deciding
//! locally from its RLQS assignment, against one global limit, on 1 and on `--instances` Floodgate
//! instances sharing one Redis this run starts; beside a static equal split (what a static RLQS
//! server does) and RLS with one call per request, on the same demand, in the same run.
//!
//! Demand: `--envoys` Envoys (8); in the first phase Envoy 0 is hot (`--hot` of the limit, 90 %)
//! and the others idle (1 % of the limit each); then demand shifts: Envoy 0 goes idle and Envoy 1
//! hot. Each phase lasts `--phase` (10 s). Every 10 ms each Envoy sends the requests its demand
//! makes; it reports every `--interval` (1 s) and applies assignments as they come.
//!
//! Per window of one second: fleet-wide admitted ÷ limit (the largest is reported); each Envoy's
//! admitted ÷ its demand in the second half of each phase; the time after the shift until the new
//! hot Envoy gets 90 % of its demand over 250 ms (in reporting intervals); calls to Floodgate per
//! decision; and, once, the server's CPU per reported bucket without gRPC (the service core taking
//! reports on one thread, measured with the thread's own CPU clock). Requests are decided at their step's time, the run keeping
//! to the wall clock, so that a late step on a busy machine does not distort the local buckets.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit::rlqs::{Filter, Id, Limiter, Settings, id};
use serde::Serialize;

use super::Run;
use crate::args::{Output, parse_duration};
use crate::harness::server::LocalServer;
use crate::report::{Errors, Grid, Report, Summary};

/// `floodgate-bench rlqs`.
#[derive(Debug, Clone, Args)]
pub struct RlqsArgs {
    /// Simulated Envoys.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(2..=64))]
    pub envoys: u64,
    /// The global limit, requests per second.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    pub limit: u64,
    /// The hot Envoy's demand, as a fraction of the limit.
    #[arg(long, default_value_t = 0.9)]
    pub hot: f64,
    /// How long each phase lasts (skewed, then shifted).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub phase: Duration,
    /// The reporting interval.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Instances of the fleet run (beside one instance).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(2..=8))]
    pub instances: u64,
    /// The `redis-server` to start.
    #[arg(long, value_name = "PATH", default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Where the report goes.
    #[command(flatten)]
    pub output: Output,
}

impl Run for RlqsArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// One variant's figures.
#[derive(Debug, Clone, Serialize)]
struct Variant {
    name: String,
    /// The largest fleet-wide admitted ÷ limit over the one-second windows (after the first).
    max_window_ratio: f64,
    /// The hot Envoy's admitted ÷ demand in the second half of the first phase.
    hot_share_of_demand: f64,
    /// The new hot Envoy's, in the second half of the second phase.
    shifted_share_of_demand: f64,
    /// Each Envoy's admitted ÷ demand over the whole run.
    per_envoy: Vec<f64>,
    /// After the shift, how long until the new hot Envoy gets 90 % of its demand (over 250 ms), in
    /// reporting intervals (`null`: never in the phase).
    reconverge_intervals: Option<f64>,
    /// Calls to Floodgate (reports, or RLS requests) per decision.
    calls_per_decision: f64,
    /// Reports sent.
    reports: u64,
    decisions: u64,
    admitted: u64,
}

#[derive(Debug, Serialize)]
struct Details {
    envoys: u64,
    limit_per_s: u64,
    hot_fraction: f64,
    phase_s: f64,
    interval_s: f64,
    variants: Vec<Variant>,
    /// The server's CPU per reported bucket without gRPC (see `core_cost`), µs.
    core_cpu_us_per_report: Option<f64>,
}

const TICK: Duration = Duration::from_millis(10);

const CONFIG: &str = "rlqs:
  reporting_interval: {interval}
  domains:
    bench:
      - name: api
        match: {{ name: api }}
        algorithm: token_bucket
        rate: {limit}/s
        burst: {burst}
";

enum Decider {
    Static(Vec<Limiter>),
    Rlqs(Vec<Filter>),
    Rls(RateLimitServiceClient<tonic::transport::Channel>),
}

async fn run(args: &RlqsArgs) -> anyhow::Result<Report> {
    let started = Instant::now();
    let interval_ms = args.interval.as_millis();
    let burst = (args.limit / 100).max(1);
    let rlqs_yaml = CONFIG
        .replace("{interval}", &format!("{interval_ms}ms"))
        .replace("{limit}", &args.limit.to_string())
        .replace("{burst}", &burst.to_string())
        .replace("{{", "{")
        .replace("}}", "}");
    let mut variants = Vec::new();

    // A static equal split: each Envoy a bucket of limit / N.
    let n = args.envoys as usize;
    let share = args.limit as f64 / n as f64;
    let strategy = envoy_types::pb::envoy::r#type::v3::RateLimitStrategy {
        strategy: Some(envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy::TokenBucket(
            envoy_types::pb::envoy::r#type::v3::TokenBucket {
                max_tokens: (share / 100.0).max(1.0) as u32,
                tokens_per_fill: Some(envoy_types::pb::google::protobuf::UInt32Value { value: 1 }),
                fill_interval: Some(floodgate_testkit::rlqs::proto(Duration::from_secs_f64(1.0 / share))),
            },
        )),
    };
    let limiters = (0..n).map(|_| Limiter::new(Some(&strategy), Duration::ZERO)).collect();
    variants.push(simulate(args, "static equal split", Decider::Static(limiters), None).await?);

    // RLQS on one instance (memory store).
    {
        let server = LocalServer::start(&rlqs_yaml).await?;
        let mut filters = Vec::new();
        for _ in 0..n {
            filters.push(
                Filter::connect(format!("http://{}", server.grpc_addr), "bench", Settings::default()).await?,
            );
        }
        variants.push(simulate(args, "rlqs, 1 instance (memory)", Decider::Rlqs(filters), None).await?);
        server.stop().await;
    }

    // RLQS on 1 and on `--instances` instances over one Redis.
    let redis = crate::harness::redis::start(&args.redis_server)?;
    let url = format!("redis://{}", crate::harness::redis::addr(&redis));
    for count in [1, args.instances] {
        let yaml =
            format!("{}{rlqs_yaml}", crate::harness::redis::store_yaml(&url, Some(Duration::from_secs(1))));
        let mut servers = Vec::new();
        for _ in 0..count {
            servers.push(LocalServer::start(&yaml).await?);
        }
        let mut filters = Vec::new();
        for i in 0..n {
            let server = &servers[i % servers.len()];
            filters.push(
                Filter::connect(format!("http://{}", server.grpc_addr), "bench", Settings::default()).await?,
            );
        }
        let name = format!("rlqs, {count} instance{} (redis)", if count == 1 { "" } else { "s" });
        variants.push(simulate(args, &name, Decider::Rlqs(filters), None).await?);
        for s in servers {
            s.stop().await;
        }
    }
    drop(redis);

    // RLS: one call per request, the same limit as a token bucket.
    {
        let yaml = format!(
            "rules:\n  - name: api\n    match: {{ route: api }}\n    algorithm: token_bucket\n    rate: {}/s\n    burst: {burst}\n",
            args.limit
        );
        let server = LocalServer::start(&yaml).await?;
        let client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr)).await?;
        variants.push(simulate(args, "rls, a call per request", Decider::Rls(client), None).await?);
        server.stop().await;
    }

    let core_cpu_us_per_report = core_cost(args, &rlqs_yaml)?;
    let wall = started.elapsed().as_secs_f64();
    let decisions: u64 = variants.iter().map(|v| v.decisions).sum();
    let admitted: u64 = variants.iter().map(|v| v.admitted).sum();
    let summary = Summary {
        scenario: "rlqs".into(),
        target: "in-process".into(),
        duration_s: args.phase.as_secs_f64() * 2.0 * variants.len() as f64,
        sent: decisions,
        decisions_per_sec: decisions as f64 / wall,
        allowed: admitted,
        denied: decisions - admitted,
        errors: Errors::default(),
        latency: Default::default(),
    };
    let grid = Grid {
        head: "variant".into(),
        columns: [
            "max window ÷ limit",
            "hot got ÷ demand",
            "after shift",
            "re-converge (intervals)",
            "calls/decision",
        ]
        .map(String::from)
        .to_vec(),
        rows: variants
            .iter()
            .map(|v| {
                (
                    v.name.clone(),
                    vec![
                        format!("{:.3}", v.max_window_ratio),
                        format!("{:.3}", v.hot_share_of_demand),
                        format!("{:.3}", v.shifted_share_of_demand),
                        v.reconverge_intervals.map_or("never".into(), |r| format!("{r:.2}")),
                        format!("{:.4}", v.calls_per_decision),
                    ],
                )
            })
            .collect(),
    };
    let details = Details {
        envoys: args.envoys,
        limit_per_s: args.limit,
        hot_fraction: args.hot,
        phase_s: args.phase.as_secs_f64(),
        interval_s: args.interval.as_secs_f64(),
        variants,
        core_cpu_us_per_report,
    };
    let mut report = Report::new(summary, details);
    report.grids.push(grid);
    Ok(report)
}

/// This thread's CPU time so far, from `/proc/thread-self/schedstat` (nanoseconds on a CPU).
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(stat.split_whitespace().next()?.parse().ok()?))
}

/// The server's CPU per reported bucket, without gRPC: `floodgate_app::rlqs::Quotas` taking
/// 20,000 reports from `--envoys` streams of one group whose demand keeps moving (each settles the
/// group, and sends what changed), on one thread, µs.
fn core_cost(args: &RlqsArgs, yaml: &str) -> anyhow::Result<Option<f64>> {
    use floodgate_app::rlqs::{BucketId, Quotas, Report};
    use floodgate_core::{ManualClock, Timestamp};
    let config = std::sync::Arc::new(
        floodgate_config::parse("rlqs bench", yaml)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .rlqs
            .ok_or_else(|| anyhow::anyhow!("no rlqs section"))?,
    );
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let quotas = Quotas::new(clock.clone(), Default::default());
    let n = args.envoys as usize;
    let mut streams = Vec::with_capacity(n);
    for _ in 0..n {
        let (tx, rx) = floodgate_app::rlqs::outbox();
        streams.push((quotas.open("bench", Some(&config), tx)?, rx));
    }
    let bucket = BucketId::new([("name", "api")]);
    const REPORTS: u64 = 20_000;
    let step = args.interval / n as u32;
    let start = thread_cpu();
    for k in 0..REPORTS {
        let e = (k % n as u64) as usize;
        // The hot Envoy changes every 50 rounds.
        let hot = (k / (n as u64 * 50)) as usize % n;
        let count = if e == hot { (args.limit as f64 * args.hot) as u64 } else { args.limit / 100 };
        let report = Report { bucket: bucket.clone(), elapsed: args.interval, allowed: count, denied: 0 };
        quotas.report(streams[e].0, Some(&config), std::slice::from_ref(&report))?;
        clock.advance(step);
        while let Some(Some(_)) = streams[e].1.try_recv() {}
    }
    let end = thread_cpu();
    Ok(match (start, end) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64() * 1e6 / REPORTS as f64),
        _ => None,
    })
}

/// Runs the two phases with `decider`; returns its figures.
async fn simulate(
    args: &RlqsArgs,
    name: &str,
    mut decider: Decider,
    _: Option<()>,
) -> anyhow::Result<Variant> {
    let n = args.envoys as usize;
    let limit = args.limit as f64;
    let bucket: Id = id(&[("name", "api")]);
    let phase = args.phase;
    let total = phase * 2;
    let steps = (total.as_micros() / TICK.as_micros()) as usize;
    let demand = |envoy: usize, step: usize| -> f64 {
        let shifted = (step as u128) * TICK.as_micros() >= phase.as_micros();
        let hot = if shifted { 1 } else { 0 };
        if envoy == hot { limit * args.hot } else { limit * 0.01 }
    };
    // Per Envoy, per 10 ms step: (asked, admitted).
    let mut asked = vec![vec![0u32; steps]; n];
    let mut admitted = vec![vec![0u32; steps]; n];
    let mut carry = vec![0.0f64; n];
    let mut calls = 0u64;
    let mut reports = 0u64;
    let start = Instant::now();
    let mut next_report = args.interval;
    let descriptor = RateLimitDescriptor {
        entries: vec![Entry { key: "route".into(), value: "api".into() }],
        ..RateLimitDescriptor::default()
    };
    for step in 0..steps {
        let at = TICK * step as u32;
        // Keep to the wall clock (the server's shares follow it), but decide at the step's own
        // time: on a busy machine a late step must not find its Envoy's bucket short of the
        // refill that real, evenly spread traffic would have had.
        let wall = start.elapsed();
        if wall < at {
            tokio::time::sleep(at - wall).await;
        }
        let now = at;
        if let Decider::Rlqs(filters) = &mut decider {
            // Apply whatever the server pushed.
            for f in filters.iter_mut() {
                while let Ok(Some(Ok(r))) = tokio::time::timeout(Duration::ZERO, f.next()).await {
                    f.apply(&r, now);
                }
            }
            if now >= next_report {
                for f in filters.iter_mut() {
                    f.report(now).await;
                    reports += 1;
                    calls += 1;
                }
                next_report += args.interval;
            }
        }
        for envoy in 0..n {
            carry[envoy] += demand(envoy, step) * TICK.as_secs_f64();
            let count = carry[envoy].floor() as u32;
            carry[envoy] -= f64::from(count);
            for _ in 0..count {
                let ok = match &mut decider {
                    Decider::Static(limiters) => limiters[envoy].take(now),
                    Decider::Rlqs(filters) => {
                        let before = filters[envoy].reports_sent;
                        let ok = filters[envoy].request(&bucket, now).await;
                        calls += filters[envoy].reports_sent - before;
                        ok
                    }
                    Decider::Rls(client) => {
                        calls += 1;
                        let request = RateLimitRequest {
                            domain: "bench".into(),
                            descriptors: vec![descriptor.clone()],
                            hits_addend: 1,
                        };
                        match client.should_rate_limit(request).await {
                            Ok(r) => r.into_inner().overall_code == Code::Ok as i32,
                            Err(_) => false,
                        }
                    }
                };
                asked[envoy][step] += 1;
                if ok {
                    admitted[envoy][step] += 1;
                }
            }
        }
    }

    // Fleet-wide admitted per one-second window (the first left out: subscriptions).
    let per_second = (Duration::from_secs(1).as_micros() / TICK.as_micros()) as usize;
    let mut max_ratio: f64 = 0.0;
    for w in (per_second..steps).step_by(per_second) {
        let end = (w + per_second).min(steps);
        if end - w < per_second {
            break;
        }
        let sum: u64 = (0..n).map(|e| admitted[e][w..end].iter().map(|x| u64::from(*x)).sum::<u64>()).sum();
        max_ratio = max_ratio.max(sum as f64 / limit);
    }
    let ratio = |e: usize, from: usize, to: usize| -> f64 {
        let a: u64 = admitted[e][from..to].iter().map(|x| u64::from(*x)).sum();
        let d: u64 = asked[e][from..to].iter().map(|x| u64::from(*x)).sum();
        if d == 0 { 1.0 } else { a as f64 / d as f64 }
    };
    let half = steps / 2;
    let hot_share = ratio(0, half / 2, half);
    let shifted_share = ratio(1, half + half / 2, steps);
    let window = 25; // 250 ms
    let mut reconverge = None;
    let mut s = half;
    while s + window <= steps {
        if ratio(1, s, s + window) >= 0.9 {
            reconverge =
                Some(((s + window - half) as f64 * TICK.as_secs_f64()) / args.interval.as_secs_f64());
            break;
        }
        s += 5;
    }
    let decisions: u64 = asked.iter().flatten().map(|x| u64::from(*x)).sum();
    let total_admitted: u64 = admitted.iter().flatten().map(|x| u64::from(*x)).sum();
    Ok(Variant {
        name: name.to_owned(),
        max_window_ratio: max_ratio,
        hot_share_of_demand: hot_share,
        shifted_share_of_demand: shifted_share,
        per_envoy: (0..n).map(|e| ratio(e, 0, steps)).collect(),
        reconverge_intervals: reconverge,
        calls_per_decision: calls as f64 / decisions.max(1) as f64,
        reports,
        decisions,
        admitted: total_admitted,
    })
}
