//! `durability`: the persisted memory store (`store: {kind: memory, persist: {...}}`) — what a
//! `kill -9` loses, what persistence costs, and how long a restart with many keys takes.
//!
//! Three parts, in one run:
//! - **Throughput**: the same closed-loop load (`--connections` over HTTP `/v1/check`, a token
//!   bucket per user over 10 000 users) against in-process servers on the plain memory store, on
//!   `persist` with `fsync: always` and with `fsync: 50ms`; decisions/s and the ratio to the plain
//!   store.
//! - **Kill -9**: the real `floodgate` binary (`--floodgate`, default: beside this executable) on a
//!   persisted store, driven by 16 connections on one key (`POST /v1/check`), killed with SIGKILL
//!   at a random moment, `--rounds` times per `fsync` setting, restarted on the same directory each
//!   time. After each restart `/v1/usage` gives what the store counts; `lost` is what was
//!   acknowledged (answered 200) but is not counted. Also the acknowledged rate per 50 ms, the bound
//!   for `fsync: 50ms`.
//! - **Restart**: `--keys` keys written into a persisted store in this process, then the store
//!   reopened from its log alone, and from a checkpoint; the binary's start on that directory
//!   (spawn to its address logged); and the files' sizes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use floodgate::core::{Rate, SystemClock, TokenBucket};
use floodgate::store::{Fsync, Op, PersistConfig};
use floodgate::{Limit, MemoryConfig, MemoryStore, Mode, OnStoreError};
use serde::Serialize;

use crate::Usage;
use crate::args::{Output, parse_duration};
use crate::harness::LocalServer;
use crate::harness::client;
use crate::harness::process::{Process, ScratchDir, Stop, floodgate_binary, serve};
use crate::harness::target::{Shape, Target};
use crate::report::{Grid, Outcome, Report, Tally};
use crate::scenarios::Run;

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

impl Run for DurabilityArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

#[derive(Debug, Serialize)]
struct Throughput {
    memory_per_sec: f64,
    always_per_sec: f64,
    every_50ms_per_sec: f64,
    always_ratio: f64,
    every_50ms_ratio: f64,
    errors: u64,
}

#[derive(Debug, Serialize, Default)]
struct Kills {
    rounds: u32,
    acknowledged: u64,
    /// Acknowledged but not counted after the restart, summed over the rounds.
    lost: u64,
    /// The most lost in one round.
    max_lost_in_a_round: u64,
    /// Counted beyond what was sent (must be 0).
    over_counted: u64,
    /// Acknowledged per 50 ms under this load: what one 50 ms interval holds.
    acknowledged_per_50ms: f64,
    restart_ms_max: f64,
}

#[derive(Debug, Serialize)]
struct Restart {
    keys: u64,
    write_s: f64,
    log_bytes: u64,
    open_from_log_s: f64,
    snapshot_bytes: u64,
    checkpoint_s: f64,
    open_from_snapshot_s: f64,
    binary_start_s: f64,
}

#[derive(Debug, Serialize)]
struct Details {
    throughput: Throughput,
    kill_always: Kills,
    kill_50ms: Kills,
    restart: Restart,
}

/// Runs `durability`. The summary is the plain memory store's throughput run; the comparison,
/// the kill -9 rounds and the restart are in the details (and printed as tables).
pub async fn run(args: &DurabilityArgs) -> anyhow::Result<Report> {
    if args.duration.is_zero() || args.duration > Duration::from_secs(30) {
        return Err(Usage("--duration must be between 1ms and 30s".into()).into());
    }
    let binary = floodgate_binary(args.floodgate.as_deref())?;
    let scratch = ScratchDir::new("durability")?;

    let (throughput, tally) = throughput(args, scratch.path()).await?;
    let kill_always = kills(args, &binary, &scratch.path().join("kill-always"), "always").await?;
    let kill_50ms = kills(args, &binary, &scratch.path().join("kill-50ms"), "50ms").await?;
    let restart = restart(args, &binary, &scratch.path().join("restart")).await?;

    let mut grid =
        Grid { head: "kill -9".into(), columns: vec!["always".into(), "50ms".into()], rows: vec![] };
    for (label, f) in [
        ("rounds", (|k: &Kills| k.rounds.to_string()) as fn(&Kills) -> String),
        ("acknowledged", |k| k.acknowledged.to_string()),
        ("lost", |k| k.lost.to_string()),
        ("max lost in a round", |k| k.max_lost_in_a_round.to_string()),
        ("over counted", |k| k.over_counted.to_string()),
        ("acknowledged per 50 ms", |k| format!("{:.1}", k.acknowledged_per_50ms)),
        ("restart ms (max)", |k| format!("{:.1}", k.restart_ms_max)),
    ] {
        grid.rows.push((label.into(), vec![f(&kill_always), f(&kill_50ms)]));
    }
    let t = &throughput;
    let ratio = |r: f64| format!("{r:.2}×");
    let speed = Grid {
        head: "http /v1/check".into(),
        columns: vec!["memory".into(), "persist always".into(), "persist 50ms".into()],
        rows: vec![
            (
                "decisions/s".into(),
                vec![
                    format!("{:.0}", t.memory_per_sec),
                    format!("{:.0}", t.always_per_sec),
                    format!("{:.0}", t.every_50ms_per_sec),
                ],
            ),
            ("vs memory".into(), vec![ratio(1.0), ratio(t.always_ratio), ratio(t.every_50ms_ratio)]),
        ],
    };
    let r = &restart;
    let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
    let secs = |s: f64| format!("{s:.2} s");
    let reopen = Grid {
        head: format!("restart, {} keys", r.keys),
        columns: vec!["from the log".into(), "from a checkpoint".into()],
        rows: vec![
            ("files".into(), vec![mb(r.log_bytes), mb(r.snapshot_bytes)]),
            ("store open".into(), vec![secs(r.open_from_log_s), secs(r.open_from_snapshot_s)]),
            ("binary start".into(), vec!["".into(), secs(r.binary_start_s)]),
        ],
    };
    let details = Details { throughput, kill_always, kill_50ms, restart };
    // The summary is the plain memory store's throughput run.
    let wall = args.duration.as_secs_f64();
    let mut report =
        Report::new(tally.summary("durability", "in-process http + floodgate binary", wall, wall), details);
    report.grids.extend([speed, grid, reopen]);
    Ok(report)
}

fn rule_yaml() -> &'static str {
    "rules:\n  - name: per-user\n    key: [user]\n    algorithm: token_bucket\n    rate: 1000000/s\n    burst: 1000000\n"
}

fn persist_yaml(dir: &Path, fsync: &str) -> String {
    format!("store:\n  kind: memory\n  persist: {{path: {:?}, fsync: {fsync}}}\n", dir.display().to_string())
}

/// Closed loop at `--connections` for `--duration`: decisions per second.
async fn closed_loop(url: &str, connections: usize, duration: Duration) -> anyhow::Result<(f64, Tally)> {
    let target = Arc::new(Target::http(url, Duration::from_secs(5), false)?);
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|c| {
            let target = Arc::clone(&target);
            tokio::spawn(async move {
                let shape = Shape::default();
                let mut tally = Tally::default();
                let mut n = c as u64;
                while started.elapsed() < duration {
                    let sent = Instant::now();
                    let key = format!("u{}", n % 10_000);
                    n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) >> 1;
                    let outcome = target.check(&shape, &key, 1).await;
                    let at = started.elapsed().as_millis() as u64;
                    tally.record(outcome, sent.elapsed().as_nanos() as u64, at);
                }
                tally
            })
        })
        .collect();
    let mut total = Tally::default();
    for task in tasks {
        total.merge(&task.await?);
    }
    let wall = started.elapsed().as_secs_f64();
    Ok(((total.allowed + total.denied) as f64 / wall, total))
}

async fn throughput(args: &DurabilityArgs, scratch: &Path) -> anyhow::Result<(Throughput, Tally)> {
    let mut rates = Vec::new();
    let mut errors = 0;
    let mut first = None;
    for (name, store) in [
        ("memory", String::new()),
        ("always", persist_yaml(&scratch.join("tp-always"), "always")),
        ("50ms", persist_yaml(&scratch.join("tp-50ms"), "50ms")),
    ] {
        let server = LocalServer::start(&format!("{store}{}", rule_yaml())).await?;
        server.wait_deciding(Duration::from_secs(5)).await?;
        let (rate, tally) = closed_loop(&server.url(), args.connections, args.duration).await?;
        errors += tally.error_count();
        if !args.output.quiet {
            eprintln!("throughput {name}: {rate:.0}/s");
        }
        rates.push(rate);
        first.get_or_insert(tally);
        server.stop().await;
    }
    let ratio = |r: f64| if rates[0] > 0.0 { r / rates[0] } else { 0.0 };
    let throughput = Throughput {
        memory_per_sec: rates[0],
        always_per_sec: rates[1],
        every_50ms_per_sec: rates[2],
        always_ratio: ratio(rates[1]),
        every_50ms_ratio: ratio(rates[2]),
        errors,
    };
    Ok((throughput, first.unwrap_or_default()))
}

/// The real binary, started on `config` (killed, SIGKILL, when dropped, so that no error leaves
/// one running); its HTTP address once logged.
async fn spawn(binary: &Path, config: &Path) -> anyhow::Result<(Process, SocketAddr, Duration)> {
    let started = Instant::now();
    let mut command = serve(binary, config, "127.0.0.1:0");
    command.env("RUST_LOG", "info").stderr(Stdio::piped());
    let mut child = Process::spawn(&mut command, Stop::Kill)?;
    let stderr = child.take_stderr().ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| anyhow::anyhow!("floodgate logged no address: {log:?}"))?;
        if let Some(addr) = line.split("http=").nth(1).and_then(|t| t.split_whitespace().next()) {
            let addr = addr.parse()?;
            // Keep draining in the background (the thread owns the pipe).
            std::thread::spawn(move || for _ in rx {});
            return Ok((child, addr, started.elapsed()));
        }
        log.push(line);
    }
}

/// `used` of the kill test's rule for its one key.
async fn used(addr: SocketAddr) -> anyhow::Result<u64> {
    let url = format!("http://{addr}/v1/usage?rule=units&user=t");
    let (status, body) = client::get(&url, Duration::from_secs(5))
        .await
        .ok_or_else(|| anyhow::anyhow!("/v1/usage did not answer"))?;
    let body: serde_json::Value = serde_json::from_slice(&body)?;
    anyhow::ensure!(status == http::StatusCode::OK, "/v1/usage: {status} {body}");
    body["used"].as_u64().ok_or_else(|| anyhow::anyhow!("/v1/usage without used: {body}"))
}

async fn kills(args: &DurabilityArgs, binary: &Path, dir: &Path, fsync: &str) -> anyhow::Result<Kills> {
    std::fs::create_dir_all(dir)?;
    let config = dir.join("floodgate.yaml");
    std::fs::write(
        &config,
        format!(
            "{}rules:\n  - name: units\n    key: [user]\n    algorithm: budget\n    limit: 1000000000000\n    ttl: 24h\n",
            persist_yaml(&dir.join("state"), fsync)
        ),
    )?;
    let (mut child, mut addr, _) = spawn(binary, &config).await?;
    let mut kills = Kills::default();
    let (low, high) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut seed = u64::from(std::process::id()) ^ 0x9e37_79b9_7f4a_7c15;
    let mut loaded = Duration::ZERO;
    // What the store counted when the round began.
    let mut base = 0;
    for _ in 0..args.rounds {
        let dead = Arc::new(AtomicBool::new(false));
        let target = Arc::new(Target::http(&format!("http://{addr}"), Duration::from_secs(5), false)?);
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (target, low, high, dead) =
                    (Arc::clone(&target), Arc::clone(&low), Arc::clone(&high), Arc::clone(&dead));
                tokio::spawn(async move {
                    let shape = Shape::default();
                    while !dead.load(Ordering::Relaxed) {
                        high.fetch_add(1, Ordering::SeqCst);
                        match target.check(&shape, "t", 1).await {
                            Outcome::Allowed => {
                                low.fetch_add(1, Ordering::SeqCst);
                            }
                            _ => return,
                        }
                    }
                })
            })
            .collect();
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let wait = Duration::from_millis(200 + (seed >> 33) % 600);
        tokio::time::sleep(wait).await;
        loaded += wait;
        child.kill()?;
        dead.store(true, Ordering::Relaxed);
        for task in tasks {
            let _ = task.await;
        }
        let (next, next_addr, took) = spawn(binary, &config).await?;
        (child, addr) = (next, next_addr);
        kills.restart_ms_max = kills.restart_ms_max.max(took.as_secs_f64() * 1000.0);
        let used = used(addr).await?;
        let (acked, sent) = (low.load(Ordering::SeqCst), high.load(Ordering::SeqCst));
        let lost = acked.saturating_sub(used);
        kills.lost += lost;
        kills.max_lost_in_a_round = kills.max_lost_in_a_round.max(lost);
        kills.over_counted += used.saturating_sub(sent);
        kills.acknowledged += acked.saturating_sub(base);
        // What the restarted store counts is the base of the next round.
        low.store(used, Ordering::SeqCst);
        high.store(used, Ordering::SeqCst);
        base = used;
        kills.rounds += 1;
        if !args.output.quiet {
            eprintln!("kill -9 ({fsync}) round {}: acknowledged {acked}, counted {used}", kills.rounds);
        }
    }
    drop(child);
    kills.acknowledged_per_50ms = kills.acknowledged as f64 / (loaded.as_secs_f64() / 0.05).max(1.0);
    Ok(kills)
}

fn size_of(dir: &Path, prefix: &str) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

async fn restart(args: &DurabilityArgs, binary: &Path, dir: &Path) -> anyhow::Result<Restart> {
    let state = dir.join("state");
    let config = MemoryConfig {
        max_keys: usize::try_from(args.keys)?.max(1),
        persist: Some(PersistConfig { path: state.clone(), fsync: Fsync::Every(Duration::from_millis(50)) }),
        ..MemoryConfig::default()
    };
    let rate = Rate::try_new(std::num::NonZeroU64::MIN.saturating_add(99), Duration::from_secs(3600))?;
    let limit: Limit = TokenBucket::try_new(rate, std::num::NonZeroU64::MIN.saturating_add(99))?.into();
    let started = Instant::now();
    {
        let (store, _) = MemoryStore::open(config.clone(), SystemClock::new())?;
        let mut out = floodgate::store::Applied::default();
        let mut key = Vec::with_capacity(32);
        for i in 0..args.keys {
            key.clear();
            key.extend_from_slice(format!("per-user\0user-{i}").as_bytes());
            let op = Op {
                key: &key,
                scope_len: 9,
                limit: &limit,
                cost: 1,
                enforce: true,
                on_error: OnStoreError::FailOpen,
                prefetch: None,
                block_for: None,
            };
            store.apply_now(&[op], Mode::Check, &mut out)?;
        }
    }
    let write_s = started.elapsed().as_secs_f64();
    let log_bytes = size_of(&state, "wal-");
    let opened = Instant::now();
    let (store, recovered) = MemoryStore::open(config.clone(), SystemClock::new())?;
    let open_from_log_s = opened.elapsed().as_secs_f64();
    anyhow::ensure!(recovered.keys as u64 == args.keys, "restored {} keys of {}", recovered.keys, args.keys);
    let checkpointed = Instant::now();
    store.checkpoint()?;
    let checkpoint_s = checkpointed.elapsed().as_secs_f64();
    drop(store);
    let snapshot_bytes = size_of(&state, "snapshot");
    let opened = Instant::now();
    let (store, recovered) = MemoryStore::open(config, SystemClock::new())?;
    let open_from_snapshot_s = opened.elapsed().as_secs_f64();
    anyhow::ensure!(recovered.keys as u64 == args.keys, "restored {} keys of {}", recovered.keys, args.keys);
    drop(store);
    let yaml = dir.join("floodgate.yaml");
    std::fs::write(
        &yaml,
        format!(
            "store:\n  kind: memory\n  max_keys: {}\n  persist: {{path: {:?}, fsync: always}}\n{}",
            args.keys.max(1),
            state.display().to_string(),
            rule_yaml()
        ),
    )?;
    let (child, _, took) = spawn(binary, &yaml).await?;
    drop(child);
    if !args.output.quiet {
        eprintln!(
            "restart with {} keys: log {open_from_log_s:.2}s, snapshot {open_from_snapshot_s:.2}s, binary {:.2}s",
            args.keys,
            took.as_secs_f64()
        );
    }
    Ok(Restart {
        keys: args.keys,
        write_s,
        log_bytes,
        open_from_log_s,
        snapshot_bytes,
        checkpoint_s,
        open_from_snapshot_s,
        binary_start_s: took.as_secs_f64(),
    })
}
