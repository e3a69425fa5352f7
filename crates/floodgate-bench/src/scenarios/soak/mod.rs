//! `soak`: steady mixed traffic against one real `floodgate serve` process for a long time
//! (`--duration`, 1 h by default) — does anything grow or slow down?
//!
//! The run starts the `floodgate` binary (beside this one, or `--floodgate`) with its HTTP API and
//! a gateway, on the memory store or on a `redis-server` the run starts, in front of an upstream
//! on a thread of this process (`harness::upstream`). A dispatcher sends a fixed offered rate of
//! operations (`--rate`, open loop: on schedule whatever the answers take, latency from the
//! scheduled time), split by `--mix` among checks (`POST /v1/check` on several rules and many
//! keys), reserve/commit pairs (`/v1/reserve`, then `/v1/commit` of an actual below the
//! estimate) and gateway requests (`GET` through `--gateway` to the upstream), on `--connections`
//! keep-alive connections to each of the API and the gateway, opened at the start and kept
//! (`harness::client::Connections`): the server's descriptors are not the load's concurrency.
//!
//! Every `--sample`, the server process's resident memory (`VmRSS`), open descriptors (the
//! entries of `/proc/PID/fd`), threads (`Threads`: the server exports no gauge of its runtime's
//! tasks) and store keys, with each kind's p99 over the interval (`samples`). After `--warmup`,
//! memory and descriptors are judged against their first sample (flat within ±5 %), and each
//! kind's p99 over whole windows of `--p99-window` against the first window (within ±20 %).
//! Errors (no answer, a 5xx, a verdict by `on_store_error`) and wrong answers (`traffic`: a
//! request under every limit denied, a body that contradicts its status, a commit that charged
//! otherwise, a hot user admitted past its budget or short of it) are counted; after the run no
//! concurrency permit may be left.
//!
//! The server (under the testkit's watchdog), Redis (the testkit's launcher) and the upstream
//! are stopped however the run ends. Ctrl-C ends the load early, and the run reports what it
//! measured (`interrupted`); a second Ctrl-C quits at once.

mod report;
mod samples;
mod server;
mod traffic;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use clap::Args;
use http_body_util::Full;
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::report::{Ran, report, sample_line};
use self::samples::Collector;
use self::server::{PERMITS, Probe, REDIS_DEADLINE, Server, config_yaml};
use self::traffic::{Answer, Draw, Population, Sending};
pub use self::traffic::{Mix, parse_mix};
use crate::Usage;
use crate::args::{MAX_DURATION, Output, StoreKind, parse_duration, parse_percent};
use crate::harness::client::Connections;
use crate::harness::process::floodgate_binary;
use crate::harness::redis::{self, RedisServer};
use crate::harness::upstream::Upstream;
use crate::report::Report;
use crate::report::progress::{Batch, Live, Progress};
use crate::report::units::micros;
use crate::scenarios::Run;

/// `soak`.
#[derive(Debug, Clone, Args)]
pub struct SoakArgs {
    /// The store: `memory`, or `redis` (a `redis-server` this run starts).
    #[arg(long, value_enum, default_value_t = StoreKind::Memory)]
    pub store: StoreKind,
    /// The `floodgate` binary (default: beside `floodgate-bench`).
    #[arg(long, value_name = "PATH")]
    pub floodgate: Option<PathBuf>,
    /// `--store redis`: the `redis-server` to run (default: the one on PATH).
    #[arg(long, value_name = "PATH", default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// How long the load lasts (at most 1 h).
    #[arg(long, short, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub duration: Duration,
    /// After it, memory and descriptors are judged against their first sample, and p99 against
    /// its first window.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    pub warmup: Duration,
    /// How often the server is sampled (memory, descriptors, threads, keys, each kind's p99).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub sample: Duration,
    /// The windows each kind's p99 is judged over (rounded up to whole samples).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    pub p99_window: Duration,
    /// Operations per second, sent on schedule (a pair is one operation of two requests).
    #[arg(long, value_name = "PER_SEC", default_value_t = 500.0)]
    pub rate: f64,
    /// How the operations are split, in percent.
    #[arg(long, value_name = "KIND=PERCENT,…", default_value = "check=60,reserve=20,gateway=20", value_parser = parse_mix)]
    pub mix: Mix,
    /// Cold users (`u-<i>`), under every limit.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub users: u64,
    /// Tenants (`t-<i>`): a check's is its user's; a pair's is drawn.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub tenants: u64,
    /// Hot users (`hot-<i>`), each with a budget of `--hot-limit` for the run, then denied.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub hot_users: u32,
    /// A hot user's budget (checks and gateway requests together).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub hot_limit: u64,
    /// The share of checks and gateway requests sent by hot users.
    #[arg(long, value_name = "PERCENT", default_value = "5%", value_parser = parse_percent)]
    pub hot: f64,
    /// Keep-alive connections to each of the API and the gateway.
    #[arg(long, short = 'c', default_value_t = 16, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub connections: usize,
    /// Operations in flight beyond this are not sent and count as `dropped` errors.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_in_flight: u64,
    /// Per request, waiting for a connection included.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// The seed of the operations drawn.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for SoakArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// The run's shape, from the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    /// Samples in each p99 window.
    pub(super) window_samples: usize,
}

fn validate(args: &SoakArgs) -> Result<Plan, Usage> {
    if args.duration.is_zero() || args.duration > MAX_DURATION {
        return Err(Usage("--duration must be above 0 and at most 1h".into()));
    }
    if args.sample < Duration::from_millis(100) || args.sample > args.duration {
        return Err(Usage("--sample must be at least 100ms and at most --duration".into()));
    }
    if args.warmup >= args.duration {
        return Err(Usage("--warmup must end before --duration".into()));
    }
    if !(args.rate > 0.0 && args.rate <= 100_000.0) {
        return Err(Usage("--rate must be above 0 and at most 100000".into()));
    }
    if args.p99_window.is_zero() {
        return Err(Usage("--p99-window must be above 0".into()));
    }
    let window_samples = args.p99_window.as_nanos().div_ceil(args.sample.as_nanos()).max(1);
    Ok(Plan { window_samples: usize::try_from(window_samples).unwrap_or(usize::MAX) })
}

// === the run ===

/// Runs `soak`.
pub async fn run(args: &SoakArgs) -> anyhow::Result<Report> {
    let plan = validate(args)?;
    let binary = floodgate_binary(args.floodgate.as_deref())?;
    let redis = match args.store {
        StoreKind::Redis => Some(redis::start(&args.redis_server)?),
        StoreKind::Memory => None,
    };
    let store = match &redis {
        Some(node) => redis::store_yaml(&node.url(), Some(REDIS_DEADLINE)),
        None => "store:\n  kind: memory\n".to_owned(),
    };
    let upstream = Upstream::start().context("starting the upstream")?;
    let server = Server::start(&binary, &config_yaml(args, &store, upstream.addr())).await?;
    let result = soak(args, plan, &server, redis.as_ref()).await;
    drop(server);
    drop(redis);
    drop(upstream);
    result
}

/// Ends the load on Ctrl-C (`interrupted`); a second one quits at once (the watchdogs stop the
/// server and Redis as the process ends).
fn on_ctrl_c(stop: Arc<AtomicBool>, interrupted: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        interrupted.store(true, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        eprintln!("floodgate-bench soak: interrupted, ending the load (Ctrl-C again to quit at once)");
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(130);
        }
    })
}

/// Sends the operations of `draw` at `rate` a second for `duration` from a thread of its own,
/// until `stop`; returns how many were scheduled (sent or dropped).
fn dispatch(
    sending: Sending,
    mut draw: Draw,
    rate: f64,
    duration: Duration,
    max_in_flight: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let runtime = tokio::runtime::Handle::current();
    let started = sending.started.into_std();
    std::thread::spawn(move || {
        let total = (rate * duration.as_secs_f64()).floor() as u64;
        let interval = Duration::from_secs_f64(1.0 / rate);
        let in_flight = Arc::new(AtomicU64::new(0));
        let mut scheduled_ops = 0;
        for i in 0..total {
            let scheduled = started + interval.mul_f64(i as f64);
            let now = std::time::Instant::now();
            if scheduled > now + Duration::from_micros(50) {
                std::thread::sleep(scheduled - now);
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let (op, scheduled) = (draw.next_op(), Instant::from_std(scheduled));
            scheduled_ops += 1;
            if in_flight.load(Ordering::Relaxed) >= max_in_flight {
                sending.dropped(op, scheduled);
                continue;
            }
            in_flight.fetch_add(1, Ordering::Relaxed);
            let (sending, in_flight) = (sending.clone(), Arc::clone(&in_flight));
            runtime.spawn(async move {
                sending.send(op, scheduled).await;
                in_flight.fetch_sub(1, Ordering::Relaxed);
            });
        }
        scheduled_ops
    })
}

async fn soak(
    args: &SoakArgs,
    plan: Plan,
    server: &Server,
    redis: Option<&RedisServer>,
) -> anyhow::Result<Report> {
    let api = Connections::open(server.http, args.connections).await.context("connecting to the API")?;
    let gateway =
        Connections::open(server.gateway, args.connections).await.context("connecting to the gateway")?;
    let probe = Probe { pid: server.watched.pid(), api: &api, redis };
    let (answers, mut received) = mpsc::unbounded_channel::<Answer>();
    let started = Instant::now();
    // The connections stay open until the last sample is taken: the server's descriptors count them.
    let sending =
        Sending { api: api.clone(), gateway: gateway.clone(), timeout: args.timeout, answers, started };
    let (stop, interrupted) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let ctrl_c = on_ctrl_c(Arc::clone(&stop), Arc::clone(&interrupted));
    let population = Population {
        mix: args.mix,
        users: args.users,
        tenants: args.tenants,
        hot_users: args.hot_users,
        hot_share: args.hot / 100.0,
    };
    let dispatcher = dispatch(
        sending,
        Draw::new(args.seed, population),
        args.rate,
        args.duration,
        args.max_in_flight,
        Arc::clone(&stop),
    );

    let title = format!("soak ({}, {}/s)", args.store.name(), args.rate);
    let progress = Progress::new(&title, micros(args.duration) / 1000, args.output.quiet);
    let live = Arc::new(Live::default());
    let stop_ticker = Arc::new(AtomicBool::new(false));
    let ticker = progress.tick_timed(started.into_std(), Arc::clone(&live), Arc::clone(&stop_ticker));
    let mut collector = Collector::new(
        micros(args.sample),
        micros(args.warmup),
        micros(args.duration),
        plan.window_samples,
        args.hot_users,
    );
    let mut batch = Batch::default();
    // Every operation is answered within its timeouts; the channel closes once the dispatcher and
    // the last operation are done.
    loop {
        let next = collector.next_sample_us();
        let at = started + Duration::from_micros(next.unwrap_or(0));
        tokio::select! {
            answer = received.recv() => match answer {
                Some(answer) => {
                    batch.count(answer.outcome, &live);
                    collector.record(answer);
                }
                None => break,
            },
            () = tokio::time::sleep_until(at), if next.is_some() => {
                while let Ok(answer) = received.try_recv() {
                    batch.count(answer.outcome, &live);
                    collector.record(answer);
                }
                let figures = probe.read().await;
                progress.println(&sample_line(collector.close(micros(at - started), figures)));
            }
        }
    }
    batch.flush(&live);
    let end = started.elapsed();
    collector.close(micros(end), probe.read().await);
    drop(gateway);
    stop_ticker.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    progress.finish();
    let operations = dispatcher.join().map_err(|_| anyhow::anyhow!("the dispatcher panicked"))?;
    ctrl_c.abort();
    let permits = if args.mix.reserve > 0.0 { permits_held(&api, args.tenants).await } else { Some(0) };

    let collected = collector.finish(args.hot_limit);
    let interrupted = interrupted.load(Ordering::Relaxed);
    Ok(report(args, plan, server, collected, Ran { operations, wall: end, permits, interrupted }))
}

/// Permits of [`PERMITS`] still held, over every tenant (`None` if one could not be read).
async fn permits_held(api: &Connections, tenants: u64) -> Option<u64> {
    let mut held = 0;
    for tenant in 0..tenants {
        let uri = format!("/v1/usage?rule={PERMITS}&tenant=t-{tenant}");
        let request = http::Request::get(uri).body(Full::new(Bytes::new())).ok()?;
        let (status, body) = api.exchange(request, Duration::from_secs(2)).await.ok()?;
        if status != http::StatusCode::OK {
            return None;
        }
        held += serde_json::from_slice::<serde_json::Value>(&body).ok()?["used"].as_u64()?;
    }
    Some(held)
}

#[cfg(test)]
pub(super) mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Scenario};

    pub(super) fn args(extra: &[&str]) -> SoakArgs {
        let argv = [&["floodgate-bench", "soak"][..], extra].concat();
        match Cli::try_parse_from(argv).expect("arguments").scenario {
            Scenario::Soak(a) => a,
            other => panic!("not soak: {other:?}"),
        }
    }

    #[test]
    fn the_defaults_are_an_hour_at_500_a_second_judged_after_a_minute() {
        let a = args(&[]);
        assert_eq!(
            (a.duration, a.warmup, a.sample),
            (MAX_DURATION, Duration::from_secs(60), Duration::from_secs(10))
        );
        assert_eq!(
            (a.rate, a.store, a.mix.check, a.mix.reserve, a.mix.gateway),
            (500.0, StoreKind::Memory, 60.0, 20.0, 20.0)
        );
        assert_eq!(validate(&a).unwrap(), Plan { window_samples: 6 });
        assert_eq!(validate(&args(&["--p99-window", "25s"])).unwrap().window_samples, 3, "rounded up");
    }

    #[test]
    fn impossible_runs_are_refused() {
        let refused = |extra: &[&str], says: &str| {
            let e = validate(&args(extra)).unwrap_err().to_string();
            assert!(e.contains(says), "{extra:?}: {e}");
        };
        refused(&["--duration", "2h"], "--duration");
        refused(&["--duration", "30s", "--warmup", "30s"], "--warmup");
        refused(&["--duration", "5s", "--sample", "10s"], "--sample");
        refused(&["--sample", "10ms"], "--sample");
        refused(&["--rate", "0"], "--rate");
        assert!(Cli::try_parse_from(["floodgate-bench", "soak", "--mix", "check=50"]).is_err());
    }
}
