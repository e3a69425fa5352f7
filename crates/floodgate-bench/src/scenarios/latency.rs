//! `latency`: tail latency at **equal offered load**, open loop, Floodgate beside its peer.
//!
//! A closed loop (N callers, each waiting for its answer) queues more behind a faster server, so
//! two servers at N connections are measured at different loads and their tails cannot be
//! compared. Here each comparison first finds the peer's closed-loop maximum (`--connections`
//! callers for `--duration`), then offers the same fixed rates — `--fractions` of that maximum,
//! 25 %, 50 % and 80 % by default — to each system in turn, on a schedule kept whatever the
//! answers take (the `throughput --rate` dispatcher: latency counts from each request's
//! *scheduled* time, so a stall shows in the percentiles; no coordinated omission). As wrk2 does,
//! the requests go out on `--connections` keep-alive connections opened before the load and kept
//! through it: a burst waits for a connection (and that wait counts) rather than making the system
//! under test accept new ones, which would measure connection setup instead of the system.
//!
//! The systems take turns: each rate is measured in `--rounds` slots per system, the systems in a
//! rotating order (A B C, then B C A, …), and each system's slots are pooled into one histogram. A
//! shared host's noise comes and goes over seconds (on one 2-core machine the upstream alone's p99
//! at one rate moved 1.2–3.3 ms between consecutive runs), so one slot per system would charge a
//! stretch of noise to whichever system ran during it; spread across rounds it falls on all of
//! them. Each row also gives its slots' p99s, lowest to highest, so that the spread is seen.
//!
//! Each row also says what the system's own threads spent per answered request over its slots,
//! from the kernel's scheduler statistics ([`crate::harness::cpu`]): the time they ran on a CPU
//! (`cpu/req`: the system's cost at that rate, whatever the host did meanwhile) and the time they
//! waited runnable for one (`waited/req`: how much of its latency the host's other work imposed).
//! The upstream alone is its thread in this process; Floodgate is its process; nginx is its
//! master and workers; limitador-server is its process.
//!
//! - `gateway`: the upstream alone, Floodgate's gateway and nginx `limit_req` + `proxy_pass` in
//!   front of it (limits that never deny): p50/p99/p99.9 of each, and what each adds over the
//!   upstream at the same rate.
//! - `check`: Floodgate's `POST /v1/check` (`headers: both`, as users run it) beside
//!   limitador-server's `POST /check_and_report`, one limit per user that never denies, both on
//!   their memory storage.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::Usage;
use crate::args::{Output, parse_duration};
use crate::harness::cpu::{Cpu, Tasks};
use crate::harness::keys::KeyDistribution;
use crate::harness::process::{self, Process, ScratchDir, Stop, floodgate_binary, free_port, wait_for_port};
use crate::harness::target::{Shape, Target};
use crate::harness::upstream::Upstream;
use crate::report::math::{Percentiles, percentiles};
use crate::report::progress::Progress;
use crate::report::{Grid, Report, Tally};
use crate::scenarios::Run;
use crate::scenarios::flood::limitador::Limitador;
use crate::scenarios::throughput::{Load, closed_loop, open_loop};

/// What is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Comparison {
    /// Floodgate's gateway beside nginx `limit_req` + `proxy_pass`, over the upstream alone.
    Gateway,
    /// Floodgate's check API beside limitador-server's.
    Check,
}

/// `latency`.
#[derive(Debug, Clone, Args)]
pub struct LatencyArgs {
    /// The comparisons to run (default: both).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Comparison::Gateway, Comparison::Check])]
    pub compare: Vec<Comparison>,
    /// The offered rates, as fractions of the peer's closed-loop maximum (each above 0, at most 1).
    #[arg(long, value_delimiter = ',', default_values_t = [0.25, 0.5, 0.8])]
    pub fractions: Vec<f64>,
    /// Callers of the closed loop that finds the peer's maximum, and the connections each open-loop
    /// measurement holds.
    #[arg(long, short = 'c', default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub connections: u64,
    /// How long each system is measured at each rate, in all (split evenly across the rounds;
    /// each slot after a warm-up at its rate: 1 s before the first, 200 ms before the others).
    #[arg(long, short, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// The slots each system's measurement at a rate is split into, the systems taking turns.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// The `floodgate` binary (default: beside `floodgate-bench`).
    #[arg(long, value_name = "PATH")]
    pub floodgate: Option<PathBuf>,
    /// The `nginx` binary (Debian: `apt-get install -y nginx`).
    #[arg(long, value_name = "PATH", default_value = "/usr/sbin/nginx")]
    pub nginx: PathBuf,
    /// The `limitador-server` binary (relative to the working directory).
    #[arg(
        long,
        value_name = "PATH",
        env = "LIMITADOR_SERVER",
        default_value = "../shared/peers/limitador-server"
    )]
    pub limitador_server: PathBuf,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for LatencyArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// One system at one offered rate.
#[derive(Debug, Clone, Serialize)]
struct Point {
    comparison: Comparison,
    system: String,
    /// The fraction of the peer's maximum offered.
    fraction: f64,
    /// Requests scheduled per second.
    offered_per_sec: f64,
    /// Answers per second (allowed, denied and errors) over the run.
    answered_per_sec: f64,
    allowed: u64,
    denied: u64,
    errors: u64,
    /// The errors per kind (`timeout`, `dropped`, `http_5xx`, …).
    errors_by_kind: std::collections::BTreeMap<String, u64>,
    #[serde(flatten)]
    latency: Percentiles,
    /// The p99 of each slot, lowest first.
    rounds_p99_us: Vec<f64>,
    /// What the system's threads ran on a CPU per answered request, in microseconds (`None` when
    /// its scheduler statistics could not be read).
    cpu_us_per_request: Option<f64>,
    /// What they waited, runnable, for a CPU per answered request, in microseconds.
    waited_us_per_request: Option<f64>,
    /// What it adds over the baseline at the same rate (the upstream alone; `gateway` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    added_p50_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    added_p99_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    added_p999_us: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Details {
    duration_s: f64,
    connections: u64,
    /// Each comparison's peer and its closed-loop maximum, per second.
    peak: Vec<(Comparison, String, f64)>,
    points: Vec<Point>,
}

/// One system measured: its name, where its requests go and whose threads do its work.
struct System {
    name: String,
    target: Target,
    tasks: Tasks,
}

/// The systems of one comparison: the peer, Floodgate and any baseline (measured, not compared).
struct Systems {
    peer: System,
    floodgate: System,
    baseline: Option<System>,
    /// The processes serving them, stopped when the comparison ends.
    _processes: Vec<Process>,
    _limitador: Option<Limitador>,
    _upstream: Option<Upstream>,
}

/// How long a server this run starts may take to answer.
const STARTUP: Duration = Duration::from_secs(10);
/// Per-request timeout.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Warm-up at each rate before a system's first slot at it is measured.
const WARMUP: Duration = Duration::from_secs(1);
/// Warm-up before each later slot (the system was idle for the others' slots).
const REWARM: Duration = Duration::from_millis(200);
/// The shortest slot a system is measured in.
const MIN_SLOT: Duration = Duration::from_millis(200);
/// Distinct keys of the load.
const KEYS: u64 = 10_000;
/// Requests in flight beyond this are not sent (and count as `dropped`).
const MAX_IN_FLIGHT: u64 = 20_000;

/// Runs `latency`.
pub async fn run(args: &LatencyArgs) -> anyhow::Result<Report> {
    if args.fractions.is_empty() || args.fractions.iter().any(|f| !(f.is_finite() && *f > 0.0 && *f <= 1.0)) {
        return Err(Usage("--fractions: each above 0 and at most 1, e.g. 0.25,0.5,0.8".into()).into());
    }
    if args.duration.is_zero() || args.duration > crate::args::MAX_DURATION {
        return Err(Usage("--duration must be between 1ms and 1h".into()).into());
    }
    if args.duration / args.rounds < MIN_SLOT {
        return Err(Usage(format!(
            "--duration {:?} split into --rounds {} leaves slots under {MIN_SLOT:?}: measure longer or in fewer rounds",
            args.duration, args.rounds
        ))
        .into());
    }
    let floodgate = floodgate_binary(args.floodgate.as_deref())?;
    let scratch = ScratchDir::new("latency")?;
    let quiet = args.output.quiet;
    let mut peak = Vec::new();
    let mut points = Vec::new();
    for &comparison in &args.compare {
        let systems = match comparison {
            Comparison::Gateway => gateway_systems(&floodgate, &args.nginx, scratch.path()).await?,
            Comparison::Check => check_systems(&floodgate, &args.limitador_server, scratch.path()).await?,
        };
        let load = |target: &Target| Load {
            target: target.clone(),
            shape: Arc::new(Shape::default()),
            keys: KeyDistribution::uniform(KEYS),
            cost: 1,
            seed: 7,
        };
        // The peer's closed-loop maximum at `connections` callers.
        let peer = load(&systems.peer.target);
        let hidden = Progress::new("warm-up", 0, true);
        let _ = closed_loop(&peer, args.connections, WARMUP, u64::MAX, &hidden).await;
        let progress = Progress::new(&format!("{comparison:?} peak"), 0, quiet);
        let (tally, wall) = closed_loop(&peer, args.connections, args.duration, u64::MAX, &progress).await;
        progress.finish();
        let max = tally.sent() as f64 / wall.as_secs_f64();
        anyhow::ensure!(max > 0.0, "{}: no answer in the closed loop", systems.peer.name);
        peak.push((comparison, systems.peer.name.clone(), max));

        let slot = args.duration / args.rounds;
        for &fraction in &args.fractions {
            let rate = (max * fraction).max(1.0);
            // Each system's connections, opened before the load and kept through every slot.
            let mut turns = Vec::new();
            for system in systems.baseline.iter().chain([&systems.floodgate, &systems.peer]) {
                let target = system
                    .target
                    .on_connections(usize::try_from(args.connections).unwrap_or(usize::MAX))
                    .await
                    .with_context(|| format!("{}: opening {} connections", system.name, args.connections))?;
                turns.push(Turn {
                    name: &system.name,
                    tasks: &system.tasks,
                    load: load(&target),
                    tally: Tally::default(),
                    wall: Duration::ZERO,
                    p99s: Vec::new(),
                    cpu: Some(Cpu::default()),
                });
            }
            for round in 0..args.rounds as usize {
                let count = turns.len();
                for i in 0..count {
                    let turn = &mut turns[(i + round) % count];
                    let warmup = if round == 0 { WARMUP } else { REWARM };
                    let _ = open_loop(&turn.load, rate, MAX_IN_FLIGHT, warmup, u64::MAX, &hidden).await;
                    let label =
                        format!("{} at {:.0}% ({}/{})", turn.name, fraction * 100.0, round + 1, args.rounds);
                    let progress = Progress::new(&label, 0, quiet);
                    let before = turn.tasks.now();
                    let (tally, wall) =
                        open_loop(&turn.load, rate, MAX_IN_FLIGHT, slot, u64::MAX, &progress).await;
                    let spent = before.zip(turn.tasks.now()).map(|(before, after)| after.since(before));
                    turn.cpu = turn.cpu.zip(spent).map(|(sum, spent)| sum.plus(spent));
                    progress.finish();
                    turn.p99s.push(percentiles(&tally.latency).p99_us);
                    turn.tally.merge(&tally);
                    turn.wall += wall;
                }
            }
            let mut measured: Vec<Point> =
                turns.into_iter().map(|turn| point(comparison, fraction, rate, turn)).collect();
            if systems.baseline.is_some() {
                let base = measured[0].latency;
                for p in &mut measured[1..] {
                    p.added_p50_us = Some(p.latency.p50_us - base.p50_us);
                    p.added_p99_us = Some(p.latency.p99_us - base.p99_us);
                    p.added_p999_us = Some(p.latency.p999_us - base.p999_us);
                }
            }
            points.extend(measured);
        }
    }
    Ok(report(args, peak, points))
}

/// One system's slots at one rate, pooled.
struct Turn<'a> {
    name: &'a str,
    tasks: &'a Tasks,
    load: Load,
    tally: Tally,
    /// The slots' time, in all.
    wall: Duration,
    /// Each slot's p99, in microseconds.
    p99s: Vec<f64>,
    /// What its threads spent over the slots (`None` once a reading failed).
    cpu: Option<Cpu>,
}

/// What `turn`'s pooled slots came to, at `rate` (`fraction` of the peer's maximum).
fn point(comparison: Comparison, fraction: f64, rate: f64, turn: Turn<'_>) -> Point {
    let Turn { name, tally, wall, mut p99s, cpu, .. } = turn;
    p99s.sort_by(f64::total_cmp);
    let answered = tally.sent();
    let per_request = |ns: u64| (answered > 0).then(|| ns as f64 / 1_000.0 / answered as f64);
    Point {
        comparison,
        system: name.to_owned(),
        fraction,
        offered_per_sec: rate,
        answered_per_sec: tally.sent() as f64 / wall.as_secs_f64(),
        allowed: tally.allowed,
        denied: tally.denied,
        errors: tally.error_count(),
        errors_by_kind: tally.errors.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        latency: percentiles(&tally.latency),
        rounds_p99_us: p99s,
        cpu_us_per_request: cpu.and_then(|c| per_request(c.ran_ns)),
        waited_us_per_request: cpu.and_then(|c| per_request(c.waited_ns)),
        added_p50_us: None,
        added_p99_us: None,
        added_p999_us: None,
    }
}

/// The upstream, Floodgate's gateway and nginx in front of it; limits that never deny.
async fn gateway_systems(floodgate: &Path, nginx: &Path, dir: &Path) -> anyhow::Result<Systems> {
    let upstream = Upstream::start()?;
    let up = upstream.addr();
    wait_for_port(up, STARTUP).await?;
    let yaml = format!(
        "rules:\n  - name: per-ip\n    key: [ip]\n    algorithm: token_bucket\n    rate: 1000000/s\n    burst: 1000000\n\
         gateway:\n  routes:\n    - name: app\n      match: {{ path: \"/{{*rest}}\" }}\n      upstream: http://{up}\n"
    );
    let (gateway, gateway_addr) = process::gateway(floodgate, dir, &yaml).await?;
    let (nginx, nginx_addr) = process::nginx(nginx, dir, |port| {
        format!(
            "  limit_req_zone $binary_remote_addr zone=ip:10m rate=10000000r/s;\n  limit_req_status 429;\n\
             \x20 upstream app {{ server {up}; keepalive 256; }}\n\
             \x20 server {{\n    listen 127.0.0.1:{port};\n    keepalive_requests 1000000000;\n    location / {{\n      limit_req zone=ip burst=10000000 nodelay;\n      proxy_pass http://app;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n"
        )
    })
    .await?;
    let route = |addr: std::net::SocketAddr| {
        Target::route(&format!("http://{addr}/bench"), "GET", "x-user-id", TIMEOUT, false)
    };
    let upstream_thread = upstream.thread().context("the upstream's thread id (/proc/thread-self)")?;
    Ok(Systems {
        peer: System {
            name: "nginx limit_req".into(),
            target: route(nginx_addr)?,
            tasks: Tasks::WithChildren(nginx.pid()),
        },
        floodgate: System {
            name: "floodgate gateway".into(),
            target: route(gateway_addr)?,
            tasks: Tasks::Process(gateway.pid()),
        },
        baseline: Some(System {
            name: "upstream alone".into(),
            target: route(up)?,
            tasks: Tasks::Thread(upstream_thread),
        }),
        _processes: vec![gateway, nginx],
        _limitador: None,
        _upstream: Some(upstream),
    })
}

/// `floodgate serve` and limitador-server, one limit per user that never denies, memory storage.
async fn check_systems(floodgate: &Path, limitador: &Path, dir: &Path) -> anyhow::Result<Systems> {
    let config = dir.join("check.yaml");
    std::fs::write(
        &config,
        "headers: both\nrules:\n  - name: per-user\n    key: [user]\n    algorithm: fixed_window\n    limit: 1000000000\n    window: 60s\n",
    )?;
    let port = free_port()?;
    let http = format!("127.0.0.1:{port}");
    let server = Process::spawn(&mut process::serve(floodgate, &config, &http), Stop::Terminate)?;
    wait_for_port(http.parse()?, STARTUP).await?;
    let limits =
        crate::scenarios::flood::limitador::limits_yaml("user", 1_000_000_000, Duration::from_secs(60))?;
    let peer = Limitador::start(limitador, &limits, 100_000).await?;
    let limitador_target = Target::limitador(
        &format!("http://127.0.0.1:{}", peer.http_port),
        crate::scenarios::flood::limitador::NAMESPACE,
        TIMEOUT,
    )?;
    Ok(Systems {
        peer: System {
            name: "limitador-server".into(),
            target: limitador_target,
            tasks: Tasks::Process(peer.pid()),
        },
        floodgate: System {
            name: "floodgate /v1/check".into(),
            target: Target::http(&format!("http://{http}"), TIMEOUT, false)?,
            tasks: Tasks::Process(server.pid()),
        },
        baseline: None,
        _processes: vec![server],
        _limitador: Some(peer),
        _upstream: None,
    })
}

fn report(args: &LatencyArgs, peak: Vec<(Comparison, String, f64)>, points: Vec<Point>) -> Report {
    let us = crate::report::human_us;
    // The lowest and highest of the slots' p99s.
    let slots = |p99s: &[f64]| match (p99s.first(), p99s.last()) {
        (Some(low), Some(high)) if p99s.len() > 1 => format!("{}–{}", us(*low), us(*high)),
        _ => "-".to_owned(),
    };
    let mut grids = Vec::new();
    for (comparison, peer, max) in &peak {
        let mut grid = Grid {
            head: format!(
                "{comparison:?}: {peer} peaks at {max:.0}/s (closed loop, {} callers)",
                args.connections
            )
            .to_lowercase(),
            columns: [
                "offered/s",
                "answered/s",
                "p50",
                "p99",
                "p99.9",
                "added p50",
                "added p99",
                "added p99.9",
                "p99 of slots",
                "cpu/req",
                "waited/req",
                "errors",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
        };
        for p in points.iter().filter(|p| p.comparison == *comparison) {
            let or_dash = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), us);
            grid.rows.push((
                format!("{} at {:.0}%", p.system, p.fraction * 100.0),
                vec![
                    format!("{:.0}", p.offered_per_sec),
                    format!("{:.0}", p.answered_per_sec),
                    us(p.latency.p50_us),
                    us(p.latency.p99_us),
                    us(p.latency.p999_us),
                    or_dash(p.added_p50_us),
                    or_dash(p.added_p99_us),
                    or_dash(p.added_p999_us),
                    slots(&p.rounds_p99_us),
                    or_dash(p.cpu_us_per_request),
                    or_dash(p.waited_us_per_request),
                    p.errors.to_string(),
                ],
            ));
        }
        grids.push(grid);
    }
    let floodgate_points: Vec<&Point> = points.iter().filter(|p| p.system.starts_with("floodgate")).collect();
    let first = floodgate_points.first();
    let summary = crate::report::Summary {
        scenario: "latency".into(),
        target: "open loop at equal offered rates: floodgate beside its peers".into(),
        duration_s: args.duration.as_secs_f64(),
        sent: first.map_or(0, |p| p.allowed + p.denied + p.errors),
        decisions_per_sec: first.map_or(0.0, |p| p.answered_per_sec),
        allowed: first.map_or(0, |p| p.allowed),
        denied: first.map_or(0, |p| p.denied),
        errors: crate::report::Errors {
            total: first.map_or(0, |p| p.errors),
            by_kind: first.map(|p| p.errors_by_kind.clone()).unwrap_or_default(),
        },
        latency: first.map(|p| p.latency).unwrap_or_default(),
    };
    let details =
        Details { duration_s: args.duration.as_secs_f64(), connections: args.connections, peak, points };
    let mut report = Report::new(summary, details);
    report.grids = grids;
    report
}
