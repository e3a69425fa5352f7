//! `reserve`: reservations under load and under crashes — is the token ledger exactly what the
//! callers were charged?
//!
//! The run starts `--instances` real `floodgate serve` processes (the binary beside this one, or
//! `--floodgate`): one on its memory store (persisted with `--persist`, `fsync: always`), or
//! several sharing a `redis-server` the run starts. One tenant has three rules:
//!
//! - `tokens`: a `budget` of `--limit` tokens (never refilled during the run: the ledger is
//!   everything charged), `cost: tokens`;
//! - `in-flight`: a `concurrency` rule of `--permits` permits, `lease: --lease`;
//! - `per-call`: a `budget` keyed by a descriptor unique to each call, far above any estimate — a
//!   witness: each call's own counter, taken and refunded together with `tokens` (all-or-nothing),
//!   so that after the run it says what that one call was charged.
//!
//! `-c` callers make `--calls` calls between them. Each reserves a random estimate E (1 ..=
//! `--max-estimate` tokens, and a permit) with `ttl: --ttl` on a random instance, waits up to
//! `--work`, then, on another instance when there are several: releases it (`--cancel` of the
//! calls), never settles it (`--crash`: it must expire and stay charged E), or commits a random
//! actual A ≤ E. A settlement whose answer is lost (its instance killed, a 5xx) is retried on the
//! next instance — settlements are idempotent, and a retry finishes what a killed instance left
//! undone — until one answers. With `--kills`, a killer `SIGKILL`s a random instance at random
//! moments (spread over the calls), waits `--down`, and restarts it on the same port (on memory,
//! from its persisted store); callers move on to the others, or wait for it when it is the only
//! one.
//!
//! **In-doubt calls.** A reserve whose answer was lost (the connection dropped after the request
//! was sent, a timeout, a 5xx or a verdict made by `on_store_error`) may or may not have been
//! applied by the store — charged E (with a record that expires, or without one) or nothing. A
//! settlement whose retries all failed is in doubt the same way. The callers cannot know; the
//! call's witness counter does: the check reads every call's witness after the run, requires an
//! in-doubt reserve's to be 0 or E (an in-doubt commit's A or E, an in-doubt release's 0 or E), and
//! counts it as it reads. Every call the callers know the end of must have exactly the witness
//! they expect. So the ledger check is exact, in-doubt calls included:
//!
//! `tokens used = Σ committed A + Σ expired E (crashed, or settled too late) + Σ witnesses of the
//! in-doubt calls`, ±0.
//!
//! **The limit.** Never more than `--limit` reserved + committed: `/v1/usage` of `tokens` (and of
//! `in-flight`, against `--permits`) is sampled every 10 ms through the run and the expiry wait;
//! and the callers' own accounting — adding E once a grant is received, taking back what a
//! settlement refunds before it is sent — is a lower bound of the ledger at every moment, so it
//! must stay at or under the limit too.
//!
//! **Permits.** After every reservation has expired (the run waits the longer of `--ttl` and
//! `--lease`, plus a second), `in-flight` must hold 0 permits.

mod calls;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use serde::Serialize;

use self::calls::{Fate, Shared, caller, get, sample, usage};
use crate::Usage;
use crate::args::{Output, parse_duration};
use crate::harness::client::{self, Client};
use crate::harness::keys::{Rng, unique_key};
use crate::harness::process::{Process, ScratchDir, Stop, floodgate_binary, free_port, serve};
use crate::harness::redis;
use crate::report::progress::{Live, Progress};
use crate::report::{Report, Tally};
use crate::scenarios::Run;

/// The store of a `reserve` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReserveStore {
    /// One `floodgate` process with its memory store.
    Memory,
    /// `--instances` `floodgate` processes sharing a `redis-server` this run starts.
    Redis,
}

impl ReserveStore {
    /// The store's `kind` in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            ReserveStore::Memory => "memory",
            ReserveStore::Redis => "redis",
        }
    }
}

/// `reserve`.
#[derive(Debug, Clone, Args)]
pub struct ReserveArgs {
    /// The store: `memory` (one instance) or `redis` (a `redis-server` this run starts, shared).
    #[arg(long, value_enum, default_value_t = ReserveStore::Memory)]
    pub store: ReserveStore,
    /// `floodgate serve` processes (default: 1 on memory, 3 on redis; memory takes only 1).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=16))]
    pub instances: Option<usize>,
    /// Instances killed (`SIGKILL`) at random moments and restarted (default: 6 on redis and on
    /// memory with `--persist`, else 0; memory needs `--persist`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub kills: Option<u64>,
    /// `--store memory`: persist the store (`persist: {fsync: always}`, in the run's directory),
    /// so that its instance can be killed and restarted with its ledger.
    #[arg(long)]
    pub persist: bool,
    /// How long a killed instance stays down before it is restarted.
    #[arg(long, value_name = "DURATION", default_value = "300ms", value_parser = parse_duration)]
    pub down: Duration,
    /// Calls: each one reserve, then a commit, a release or nothing.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub calls: u64,
    /// Concurrent callers.
    #[arg(long, short = 'c', default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub concurrency: usize,
    /// The tenant's token limit (a `budget`: never refilled during the run), so that the last
    /// calls meet it.
    #[arg(long, default_value_t = 8_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: u64,
    /// The tenant's concurrency limit (permits in flight).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub permits: u64,
    /// The largest estimate, in tokens (each is uniform in 1..=this).
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub max_estimate: u64,
    /// The share of granted calls released (cancelled).
    #[arg(long, default_value_t = 0.10, value_parser = parse_share)]
    pub cancel: f64,
    /// The share of granted calls that crash (never settle: charged their estimate at expiry).
    #[arg(long, default_value_t = 0.03, value_parser = parse_share)]
    pub crash: f64,
    /// Each reservation's `ttl`.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub ttl: Duration,
    /// The concurrency rule's `lease`.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub lease: Duration,
    /// The longest simulated call between a reserve and its settlement (uniform from 0).
    #[arg(long, value_name = "DURATION", default_value = "5ms", value_parser = parse_duration)]
    pub work: Duration,
    /// The `floodgate` binary (default: beside `floodgate-bench`).
    #[arg(long, value_name = "PATH")]
    pub floodgate: Option<PathBuf>,
    /// `--store redis`: the `redis-server` to run (default: the one on PATH).
    #[arg(long, value_name = "PATH", default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Per-request timeout of the bench's HTTP client.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// The seed of the callers' and the killer's choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for ReserveArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{text:?} is not a share between 0 and 1")),
    }
}

/// The rules' names.
const TOKENS: &str = "tokens";
const PERMITS: &str = "in-flight";
const WITNESS: &str = "per-call";

/// The witness rule's limit: far above any estimate, so that it never denies.
const WITNESS_LIMIT: u64 = 1_000_000_000_000;

/// How long a (re)started instance may take to answer `/readyz`.
const STARTUP: Duration = Duration::from_secs(20);

// === the processes ===

/// A `floodgate serve` process on a fixed loopback port; killed when dropped.
struct Instance {
    binary: PathBuf,
    config: PathBuf,
    port: u16,
    process: Option<Process>,
}

impl Instance {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let mut command = serve(&self.binary, &self.config, &format!("127.0.0.1:{}", self.port));
        let process = Process::spawn(&mut command, Stop::Kill)
            .with_context(|| format!("starting {}", self.binary.display()))?;
        self.process = Some(process);
        Ok(())
    }

    /// `SIGKILL`, and the process reaped.
    fn kill(&mut self) {
        drop(self.process.take());
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Starts `instance` and waits until it answers `/readyz` with 200.
async fn start(instance: &mut Instance, client: &Client) -> anyhow::Result<()> {
    instance.spawn()?;
    let deadline = Instant::now() + STARTUP;
    let url = format!("{}/readyz", instance.url());
    loop {
        if matches!(get(client, &url, Duration::from_secs(1)).await, Ok((200, _))) {
            return Ok(());
        }
        if let Some(status) = instance.process.as_mut().and_then(Process::exited) {
            bail!("{} exited ({status}) on port {}", instance.binary.display(), instance.port);
        }
        if Instant::now() > deadline {
            bail!("floodgate on port {} did not become ready within {STARTUP:?}", instance.port);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// === the report ===

#[derive(Debug, Serialize)]
struct Details {
    store: &'static str,
    instances: usize,
    calls: u64,
    calls_per_sec: f64,
    granted: u64,
    denied: u64,
    committed: u64,
    released: u64,
    crashed: u64,
    /// Settled after their ttl (409): charged their estimate.
    expired_before_settled: u64,
    instance_kills: u64,
    /// Reserves whose answer was lost; of them, those the store had applied (witness = E).
    in_doubt_reserves: u64,
    in_doubt_reserves_applied: u64,
    /// Commits and releases whose every attempt failed.
    in_doubt_settlements: u64,
    settle_retries: u64,
    reserves_refused_and_resent: u64,
    unexpected_answers: u64,
    limit: u64,
    /// `tokens` used after every reservation expired.
    ledger: u64,
    /// Σ committed actuals + Σ expired estimates (what the callers know).
    known: u64,
    /// Σ witnesses of the in-doubt calls.
    in_doubt_charged: u64,
    /// `ledger − (known + in_doubt_charged)`: 0 is exact.
    ledger_diff: i64,
    /// Calls whose witness is not what their caller knows (or, in doubt, neither value).
    per_call_mismatches: u64,
    /// Σ of all witnesses (must be the ledger: each call was charged with the tenant's tokens).
    witnesses_sum: u64,
    /// Of the mismatches: commits and releases answered 200 whose witness still holds the whole
    /// estimate — the settlement marked, its refunds never applied, not even by a retry — and the
    /// tokens they were over-charged (0 when settlements are exact).
    refunds_lost: u64,
    refunds_lost_tokens: u64,
    /// The first mismatched calls: `fate estimate actual witness`.
    mismatched: Vec<String>,
    /// The first in-doubt calls, as the witnesses resolved them: `fate index estimate actual witness`.
    in_doubt: Vec<String>,
    ledger_exact: bool,
    /// The most `/v1/usage` of `tokens` showed, over how many samples, and samples above the limit.
    sampled_max_used: u64,
    samples: u64,
    samples_over_limit: u64,
    /// The most the callers' own accounting reached, and how often it was above the limit.
    callers_max_reserved_plus_committed: i64,
    callers_over_limit: u64,
    limit_held: bool,
    permits: u64,
    sampled_max_permits: u64,
    permits_held_at_end: u64,
    permits_freed: bool,
    /// All three checks, and no unexpected answer.
    passed: bool,
}

fn validate(args: &ReserveArgs) -> Result<(usize, u64), Usage> {
    let instances = args.instances.unwrap_or(match args.store {
        ReserveStore::Memory => 1,
        ReserveStore::Redis => 3,
    });
    let kills = args.kills.unwrap_or(match args.store {
        ReserveStore::Memory if !args.persist => 0,
        _ => 6,
    });
    if args.store == ReserveStore::Memory && instances != 1 {
        return Err(Usage("--store memory runs one instance (each would have its own ledger)".into()));
    }
    if args.store == ReserveStore::Memory && !args.persist && kills != 0 {
        return Err(Usage(
            "--kills on --store memory needs --persist (a killed memory store loses its ledger)".into(),
        ));
    }
    if args.store == ReserveStore::Redis && args.persist {
        return Err(Usage("--persist is for --store memory (Redis keeps the ledger)".into()));
    }
    if args.cancel + args.crash > 1.0 {
        return Err(Usage("--cancel and --crash add up to more than 1".into()));
    }
    for (name, d) in [("--ttl", args.ttl), ("--lease", args.lease)] {
        if d < Duration::from_millis(100) || d > Duration::from_secs(600) {
            return Err(Usage(format!("{name} must be between 100ms and 10m")));
        }
    }
    Ok((instances, kills))
}

/// The configuration of every instance: on Redis at `redis`, else on the memory store, persisted
/// in `data` when given.
fn config_yaml(args: &ReserveArgs, redis: Option<&str>, data: Option<&Path>) -> String {
    let store = match (redis, data) {
        // A deadline far above the machine's stalls: a store call that misses it is a verdict the
        // store may still have applied, which would only add in-doubt calls.
        (Some(url), _) => format!("store:\n  kind: redis\n  url: {url:?}\n  deadline: 2s\n"),
        (None, Some(data)) => format!(
            "store:\n  kind: memory\n  persist:\n    path: {:?}\n    fsync: always\n",
            data.display().to_string()
        ),
        (None, None) => "store:\n  kind: memory\n".to_owned(),
    };
    format!(
        "{store}descriptors: [call]
rules:
  - name: {TOKENS}
    key: [tenant]
    algorithm: budget
    limit: {limit}
    ttl: 1h
    cost: tokens
    on_store_error: fail_closed
  - name: {PERMITS}
    key: [tenant]
    algorithm: concurrency
    limit: {permits}
    lease: {lease}ms
    on_store_error: fail_closed
  - name: {WITNESS}
    key: [call]
    algorithm: budget
    limit: {WITNESS_LIMIT}
    ttl: 1h
    cost: tokens
    on_store_error: fail_closed
",
        limit = args.limit,
        permits = args.permits,
        lease = args.lease.as_millis(),
    )
}

/// Runs `reserve`.
pub async fn run(args: &ReserveArgs) -> anyhow::Result<Report> {
    let (n, kills) = validate(args)?;
    let binary = floodgate_binary(args.floodgate.as_deref())?;
    let redis = match args.store {
        ReserveStore::Redis => Some(redis::start(&args.redis_server)?),
        ReserveStore::Memory => None,
    };
    // One directory per run (runs in one process, as tests are, must not share it).
    let dir = ScratchDir::new("reserve").context("creating the run's directory")?;
    let config = dir.path().join("floodgate.yaml");
    let data = args.persist.then(|| dir.path().join("data"));
    let url = redis.as_ref().map(|r| r.url());
    std::fs::write(&config, config_yaml(args, url.as_deref(), data.as_deref()))?;
    let result = run_on(args, n, kills, &binary, &config).await;
    drop(dir);
    drop(redis);
    result
}

async fn run_on(
    args: &ReserveArgs,
    n: usize,
    kills: u64,
    binary: &Path,
    config: &Path,
) -> anyhow::Result<Report> {
    let client = client::pooled();
    let mut instances = Vec::new();
    for _ in 0..n {
        // A port free now may be taken before the server binds it: then another one.
        let mut last = None;
        for _ in 0..3 {
            let mut instance = Instance {
                binary: binary.to_owned(),
                config: config.to_owned(),
                port: free_port()?,
                process: None,
            };
            match start(&mut instance, &client).await {
                Ok(()) => {
                    instances.push(instance);
                    last = None;
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if let Some(error) = last {
            return Err(error);
        }
    }
    let urls: Vec<String> = instances.iter().map(Instance::url).collect();
    let run_id = format!("{}-{}", std::process::id(), unique_key());
    let shared = Arc::new(Shared {
        client: client.clone(),
        urls: urls.clone(),
        tenant: format!("reserve-{run_id}"),
        run: run_id,
        calls: args.calls,
        max_estimate: args.max_estimate,
        cancel: args.cancel,
        crash: args.crash,
        ttl_ms: u64::try_from(args.ttl.as_millis()).unwrap_or(u64::MAX),
        work: args.work,
        timeout: args.timeout,
        limit: i64::try_from(args.limit).unwrap_or(i64::MAX),
        next: AtomicU64::new(0),
        done: AtomicU64::new(0),
        view: AtomicI64::new(0),
        view_max: AtomicI64::new(0),
        view_over: AtomicU64::new(0),
        settle_retries: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        patience: args.down + STARTUP,
    });

    let stop_sampling = Arc::new(AtomicBool::new(false));
    let samplers = [(TOKENS, args.limit), (PERMITS, args.permits)].map(|(rule, limit)| {
        tokio::spawn(sample(
            client.clone(),
            urls.clone(),
            shared.tenant.clone(),
            rule,
            limit,
            stop_sampling.clone(),
        ))
    });

    let progress = Progress::new("reserve", args.calls, args.output.quiet);
    let live = Arc::new(Live::default());
    let stop_ticker = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let ticker = {
        let (progress, shared, stop) = (progress.clone(), shared.clone(), stop_ticker.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                progress.set(shared.done.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // The killer: at random moments spread over the calls, one instance killed, then restarted.
    let killer = {
        let (shared, client) = (shared.clone(), client.clone());
        let (seed, down, calls) = (args.seed, args.down, args.calls);
        tokio::spawn(async move {
            let mut rng = Rng::stream(seed, u64::MAX);
            let mut at: Vec<u64> =
                (0..kills).map(|_| calls / 10 + rng.next_u64() % (calls * 8 / 10).max(1)).collect();
            at.sort_unstable();
            let mut killed = 0u64;
            for threshold in at {
                while shared.done.load(Ordering::Relaxed) < threshold {
                    if shared.next.load(Ordering::Relaxed) >= calls {
                        return Ok::<_, anyhow::Error>((instances, killed));
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                let victim = (rng.next_u64() % instances.len() as u64) as usize;
                instances[victim].kill();
                killed += 1;
                tokio::time::sleep(down).await;
                start(&mut instances[victim], &client).await?;
            }
            Ok((instances, killed))
        })
    };

    let workers: Vec<_> = (0..args.concurrency as u64)
        .map(|w| tokio::spawn(caller(shared.clone(), args.seed, w, live.clone(), started)))
        .collect();
    let mut calls = Vec::with_capacity(usize::try_from(args.calls).unwrap_or(0));
    let mut tally = Tally::default();
    for worker in workers {
        let (mine, t) = worker.await.context("a caller panicked")?;
        calls.extend(mine);
        tally.merge(&t);
    }
    let wall = started.elapsed().as_secs_f64();
    stop_ticker.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    progress.finish();
    let (instances, killed) = killer.await.context("the killer panicked")??;

    // Every reservation expires, and every permit's lease ends; the samplers keep watching.
    tokio::time::sleep(args.ttl.max(args.lease) + Duration::from_secs(1)).await;
    stop_sampling.store(true, Ordering::Relaxed);
    let [tokens_samples, permit_samples] = samplers;
    let tokens_samples = tokens_samples.await.unwrap_or_default();
    let permit_samples = permit_samples.await.unwrap_or_default();

    let read = |rule: &'static str, name: &'static str, value: String| {
        let (client, urls) = (client.clone(), urls.clone());
        async move {
            for attempt in 0..20 {
                if let Some(used) = usage(&client, &urls[attempt % urls.len()], rule, name, &value).await {
                    return Ok(used);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            bail!("/v1/usage of {rule} for {name}={value} did not answer")
        }
    };
    let ledger = read(TOKENS, "tenant", shared.tenant.clone()).await?;
    let permits_held = read(PERMITS, "tenant", shared.tenant.clone()).await?;

    // Every call's witness, 16 reads at a time.
    calls.sort_by_key(|c| c.index);
    let mut witnesses = vec![0u64; calls.len()];
    for (chunk_index, chunk) in calls.chunks(16).enumerate() {
        let reads: Vec<_> = chunk
            .iter()
            .map(|c| tokio::spawn(read(WITNESS, "call", format!("{}-{}", shared.run, c.index))))
            .collect();
        for (i, r) in reads.into_iter().enumerate() {
            witnesses[chunk_index * 16 + i] = r.await.context("a witness read panicked")??;
        }
    }
    drop(instances);

    let count = |fate: Fate| calls.iter().filter(|c| c.fate == fate).count() as u64;
    let (mut known, mut in_doubt_charged, mut mismatches, mut applied) = (0u64, 0u64, 0u64, 0u64);
    let mut mismatched = Vec::new();
    let mut in_doubt = Vec::new();
    let (mut refunds_lost, mut refunds_lost_tokens) = (0u64, 0u64);
    for (call, &witness) in calls.iter().zip(&witnesses) {
        let wrong = match call.charges() {
            (expected, None) => {
                known += expected;
                witness != expected
            }
            (either, Some(or)) => {
                in_doubt_charged += witness;
                witness != either && witness != or
            }
        };
        if wrong && matches!(call.fate, Fate::Committed | Fate::Released) && witness == call.estimate {
            refunds_lost += 1;
            refunds_lost_tokens += call.estimate - call.charges().0;
        }
        if wrong {
            mismatches += 1;
            if mismatched.len() < 20 {
                mismatched.push(format!("{:?} {} {} {witness}", call.fate, call.estimate, call.actual));
            }
        }
        if call.charges().1.is_some() && in_doubt.len() < 50 {
            in_doubt
                .push(format!("{:?} {} {} {} {witness}", call.fate, call.index, call.estimate, call.actual));
        }
        if call.fate == Fate::ReserveInDoubt && witness == call.estimate && witness != 0 {
            applied += 1;
        }
    }
    let witnesses_sum: u64 = witnesses.iter().sum();
    let ledger_diff = ledger as i64 - (known + in_doubt_charged) as i64;
    let unexpected = count(Fate::Unexpected);
    let ledger_exact = ledger_diff == 0 && mismatches == 0 && witnesses_sum == ledger;
    let callers_over = shared.view_over.load(Ordering::Relaxed);
    let limit_held = tokens_samples.over == 0 && callers_over == 0 && permit_samples.over == 0;
    let permits_freed = permits_held == 0;
    let details = Details {
        store: args.store.name(),
        instances: n,
        calls: calls.len() as u64,
        calls_per_sec: if wall > 0.0 { calls.len() as f64 / wall } else { 0.0 },
        granted: calls
            .iter()
            .filter(|c| !matches!(c.fate, Fate::Denied | Fate::ReserveInDoubt | Fate::Unexpected))
            .count() as u64,
        denied: count(Fate::Denied),
        committed: count(Fate::Committed),
        released: count(Fate::Released),
        crashed: count(Fate::Crashed),
        expired_before_settled: count(Fate::Expired),
        instance_kills: killed,
        in_doubt_reserves: count(Fate::ReserveInDoubt),
        in_doubt_reserves_applied: applied,
        in_doubt_settlements: calls.iter().filter(|c| c.in_doubt()).count() as u64
            - count(Fate::ReserveInDoubt),
        settle_retries: shared.settle_retries.load(Ordering::Relaxed),
        reserves_refused_and_resent: shared.refused.load(Ordering::Relaxed),
        unexpected_answers: unexpected,
        limit: args.limit,
        ledger,
        known,
        in_doubt_charged,
        ledger_diff,
        per_call_mismatches: mismatches,
        witnesses_sum,
        refunds_lost,
        refunds_lost_tokens,
        mismatched,
        in_doubt,
        ledger_exact,
        sampled_max_used: tokens_samples.max_used,
        samples: tokens_samples.count,
        samples_over_limit: tokens_samples.over,
        callers_max_reserved_plus_committed: shared.view_max.load(Ordering::Relaxed),
        callers_over_limit: callers_over,
        limit_held,
        permits: args.permits,
        sampled_max_permits: permit_samples.max_used,
        permits_held_at_end: permits_held,
        permits_freed,
        passed: ledger_exact && limit_held && permits_freed && unexpected == 0,
    };
    let target = format!("{n} floodgate process{} ({})", if n == 1 { "" } else { "es" }, args.store.name());
    let mut report = Report::new(tally.summary("reserve", &target, wall, wall), details);
    report.timeline = Some(tally.timeline);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Scenario};

    fn args(extra: &[&str]) -> ReserveArgs {
        let argv = [&["floodgate-bench", "reserve"][..], extra].concat();
        match Cli::try_parse_from(argv).expect("arguments").scenario {
            Scenario::Reserve(a) => a,
            other => panic!("not reserve: {other:?}"),
        }
    }

    #[test]
    fn defaults_follow_the_store_and_contradictions_are_refused() {
        assert_eq!(validate(&args(&[])).unwrap(), (1, 0));
        assert_eq!(validate(&args(&["--store", "redis"])).unwrap(), (3, 6));
        assert_eq!(
            validate(&args(&["--store", "redis", "--instances", "2", "--kills", "0"])).unwrap(),
            (2, 0)
        );
        let refused = |extra: &[&str], says: &str| {
            let e = validate(&args(extra)).unwrap_err().to_string();
            assert!(e.contains(says), "{extra:?}: {e}");
        };
        refused(&["--instances", "2"], "one instance");
        refused(&["--kills", "1"], "--kills on --store memory needs --persist");
        refused(&["--store", "redis", "--persist"], "--persist is for --store memory");
        assert_eq!(validate(&args(&["--persist"])).unwrap(), (1, 6));
        assert_eq!(validate(&args(&["--persist", "--kills", "2"])).unwrap(), (1, 2));
        refused(&["--cancel", "0.6", "--crash", "0.5"], "add up to more than 1");
        refused(&["--ttl", "50ms"], "--ttl must be");
        assert!(Cli::try_parse_from(["floodgate-bench", "reserve", "--cancel", "1.5"]).is_err());
    }

    #[test]
    fn the_configuration_is_one_the_server_loads() {
        let data = std::env::temp_dir().join("floodgate-bench-reserve-config-test");
        for (redis, data) in
            [(None, None), (None, Some(data.as_path())), (Some("redis://127.0.0.1:6379"), None)]
        {
            let yaml =
                config_yaml(&args(&["--limit", "1000", "--permits", "7", "--lease", "1500ms"]), redis, data);
            assert_eq!(yaml.contains("fsync: always"), data.is_some(), "{yaml}");
            let config =
                floodgate_config::parse("reserve.yaml", &yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
            let names: Vec<&str> = config.fingerprints.keys().map(String::as_str).collect();
            assert_eq!(names, [PERMITS, WITNESS, TOKENS], "{yaml}");
            assert!(
                yaml.contains("limit: 1000\n")
                    && yaml.contains("limit: 7\n")
                    && yaml.contains("lease: 1500ms")
            );
        }
    }
}
