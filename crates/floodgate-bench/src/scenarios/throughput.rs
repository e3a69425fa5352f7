//! `throughput`: decisions per second and latency, closed-loop or open-loop.
//!
//! - **Closed loop** (`--concurrency N`): N callers, each with one request in flight; latency is
//!   measured from send to answer. Simple, but a slow answer delays the next send, so stalls hide
//!   (coordinated omission).
//! - **Open loop** (`--rate R`): requests leave on a fixed schedule (a dispatcher thread, sub-ms
//!   sleeps, catching up in batches when late) whatever the answers take; latency counts from each
//!   request's *scheduled* time, so a stall shows in the percentiles. Requests beyond
//!   `--max-in-flight` are not sent and count as `dropped` errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::Usage;
use crate::args::{MAX_DURATION, Output, RequestArgs, TargetArgs, parse_duration};
use crate::harness::keys::{KeyDistribution, Rng};
use crate::harness::target::{Shape, Target};
use crate::report::progress::{Batch, Live, Progress};
use crate::report::units::{millis, nanos};
use crate::report::{Outcome, Report, Tally};
use crate::scenarios::Run;

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

impl Run for ThroughputArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// The scenario's own JSON fields.
#[derive(Debug, Serialize)]
struct Details {
    /// `closed` (fixed concurrency) or `open` (fixed arrival rate).
    mode: &'static str,
    /// Closed loop: callers.
    #[serde(skip_serializing_if = "Option::is_none")]
    concurrency: Option<u64>,
    /// Open loop: scheduled requests per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Option<f64>,
    /// `send` (closed loop) or `scheduled` (open loop: from the scheduled send time).
    latency_from: &'static str,
    keys: u64,
    distribution: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    zipf_exponent: Option<f64>,
    cost: u64,
    warmup_s: f64,
}

/// Runs `throughput`.
pub async fn run(args: &ThroughputArgs) -> anyhow::Result<Report> {
    if args.duration > MAX_DURATION || args.duration.is_zero() {
        return Err(Usage("--duration must be between 1ms and 1h".into()).into());
    }
    if let Some(rate) = args.rate
        && !(rate.is_finite() && rate > 0.0 && rate <= 10_000_000.0)
    {
        return Err(Usage("--rate must be between 0 and 10 000 000 per second".into()).into());
    }
    if args.target.route_target.is_some() && args.request.cost != 1 {
        return Err(Usage("a --route-target request costs 1 (--cost is not sent)".into()).into());
    }
    let target = args.target.build().await?;
    let shape = Arc::new(args.request.shape());
    let keys = match args.distribution {
        Distribution::Uniform => KeyDistribution::uniform(args.keys),
        Distribution::Zipf => KeyDistribution::zipf(args.keys, args.zipf_exponent),
    };
    let load =
        Load { target: target.clone(), shape, keys: keys.clone(), cost: args.request.cost, seed: args.seed };
    let quiet = args.output.quiet;

    if !args.warmup.is_zero() {
        let warmup = args.warmup.min(MAX_DURATION);
        let _ = closed_loop(
            &load,
            args.concurrency,
            warmup,
            args.max_requests,
            &Progress::new("warm-up", 0, true),
        )
        .await;
    }
    let progress =
        Progress::new("throughput", u64::try_from(args.duration.as_millis()).unwrap_or(u64::MAX), quiet);
    let (tally, wall) = match args.rate {
        None => closed_loop(&load, args.concurrency, args.duration, args.max_requests, &progress).await,
        Some(rate) => {
            open_loop(&load, rate, args.max_in_flight, args.duration, args.max_requests, &progress).await
        }
    };
    progress.finish();

    let details = Details {
        mode: if args.rate.is_some() { "open" } else { "closed" },
        concurrency: args.rate.is_none().then_some(args.concurrency),
        rate: args.rate,
        latency_from: if args.rate.is_some() { "scheduled" } else { "send" },
        keys: args.keys.max(1),
        distribution: keys.name(),
        zipf_exponent: (args.distribution == Distribution::Zipf).then_some(args.zipf_exponent),
        cost: args.request.cost,
        warmup_s: args.warmup.as_secs_f64(),
    };
    let wall_s = wall.as_secs_f64();
    let mut report = Report::new(tally.summary("throughput", &target.describe(), wall_s, wall_s), details);
    report.timeline = Some(tally.timeline);
    report.latency = Some(tally.latency);
    Ok(report)
}

/// What every request of a run has in common.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    pub(crate) target: Target,
    pub(crate) shape: Arc<Shape>,
    pub(crate) keys: KeyDistribution,
    pub(crate) cost: u64,
    pub(crate) seed: u64,
}

/// `concurrency` callers for `duration` or `max_requests` in total: the tally and the wall time.
pub(crate) async fn closed_loop(
    load: &Load,
    concurrency: u64,
    duration: Duration,
    max_requests: u64,
    progress: &Progress,
) -> (Tally, Duration) {
    let started = Instant::now();
    let deadline = started + duration;
    let live = Arc::new(Live::default());
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = progress.tick_timed(started, Arc::clone(&live), Arc::clone(&stop));
    let quota = max_requests.div_ceil(concurrency).max(1);
    let yields = matches!(load.target, Target::InProcess(_));
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let load = load.clone();
        let live = Arc::clone(&live);
        workers.push(tokio::spawn(async move {
            let mut rng = Rng::stream(load.seed, w);
            let mut tally = Tally::default();
            let mut batch = Batch::default();
            let mut key = String::with_capacity(24);
            for n in 0..quota {
                let sent = Instant::now();
                if sent >= deadline {
                    break;
                }
                key.clear();
                std::fmt::Write::write_fmt(&mut key, format_args!("k{}", load.keys.sample(&mut rng))).ok();
                let outcome = load.target.check(&load.shape, &key, load.cost).await;
                let latency = sent.elapsed();
                tally.record(outcome, nanos(latency), millis(sent - started));
                batch.count(outcome, &live);
                if yields && n % 256 == 255 {
                    // The in-process engine never waits: let the progress bar and others run.
                    tokio::task::yield_now().await;
                }
            }
            batch.flush(&live);
            tally
        }));
    }
    let mut total = Tally::default();
    for worker in workers {
        if let Ok(t) = worker.await {
            total.merge(&t);
        }
    }
    let wall = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    (total, wall)
}

/// One answered request of the open loop.
struct Answer {
    outcome: Outcome,
    latency_ns: u64,
    at_ms: u64,
}

/// Requests on a fixed schedule of `rate` per second for `duration` (at most `max_requests`).
pub(crate) async fn open_loop(
    load: &Load,
    rate: f64,
    max_in_flight: u64,
    duration: Duration,
    max_requests: u64,
    progress: &Progress,
) -> (Tally, Duration) {
    let total = ((rate * duration.as_secs_f64()).floor() as u64).min(max_requests);
    let interval = Duration::from_secs_f64(1.0 / rate);
    let live = Arc::new(Live::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Answer>();
    let in_flight = Arc::new(AtomicU64::new(0));
    let handle = tokio::runtime::Handle::current();
    let started = Instant::now();
    let ticker = progress.tick_timed(started, Arc::clone(&live), Arc::clone(&stop));

    let dispatcher = {
        let load = load.clone();
        let in_flight = Arc::clone(&in_flight);
        std::thread::spawn(move || {
            let mut rng = Rng::new(load.seed);
            for i in 0..total {
                let scheduled = started + interval.mul_f64(i as f64);
                let now = Instant::now();
                if scheduled > now + Duration::from_micros(50) {
                    std::thread::sleep(scheduled - now);
                }
                let at_ms = millis(scheduled - started);
                if in_flight.load(Ordering::Relaxed) >= max_in_flight {
                    let _ = tx.send(Answer {
                        outcome: Outcome::Error(crate::report::DROPPED),
                        latency_ns: 1,
                        at_ms,
                    });
                    continue;
                }
                in_flight.fetch_add(1, Ordering::Relaxed);
                let key = format!("k{}", load.keys.sample(&mut rng));
                let (load, tx, in_flight) = (load.clone(), tx.clone(), Arc::clone(&in_flight));
                handle.spawn(async move {
                    let outcome = load.target.check(&load.shape, &key, load.cost).await;
                    let latency_ns = nanos(scheduled.elapsed());
                    in_flight.fetch_sub(1, Ordering::Relaxed);
                    let _ = tx.send(Answer { outcome, latency_ns, at_ms });
                });
            }
        })
    };

    let mut tally = Tally::default();
    let mut batch = Batch::default();
    // Every request answers within its timeout; the channel closes when the last one has.
    while let Some(a) = rx.recv().await {
        tally.record(a.outcome, a.latency_ns, a.at_ms);
        batch.count(a.outcome, &live);
    }
    batch.flush(&live);
    let wall = started.elapsed();
    let _ = dispatcher.join();
    stop.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    (tally, wall)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use crate::cli::{Cli, Scenario};

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
}
