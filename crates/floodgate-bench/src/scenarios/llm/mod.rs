//! `llm`: the LLM gateway under concurrent streaming clients of one tenant — is the budget exact,
//! and what does the gateway cost?
//!
//! The run starts the project's OpenAI-compatible upstream (`fake-openai`, in this process: words
//! streamed one token a chunk, `--delay` apart), a `redis-server`, and `--instances` real
//! `floodgate serve` processes sharing it, each with an `llm:` route in front of the upstream and
//! one tenant's budget of `--budget` tokens per `--window`. Then:
//!
//! - **Exactness**, once per policy (`cut`, `finish`): `--clients` concurrent clients of the tenant,
//!   spread over the instances, each streaming chat completions of `max_tokens: --tokens` until it
//!   is refused, all within one budget window (a phase starts in a window with half of it left, or
//!   waits for the next, and stops before that window ends: a refill would count twice). What the
//!   upstream generated for the tenant (its prompt and completion tokens, as the upstream itself
//!   counts what it sent) against the budget: `overshoot` = generated − budget
//!   when positive. `--overshoot N` makes the upstream generate N tokens past each request's
//!   `max_tokens` (one that ignores it): where `cut` and `finish` differ.
//! - **Throughput and added latency**: a budget no run reaches, the upstream without delay,
//!   `--calls` streamed calls by `--clients` closed-loop clients straight to the upstream, then the
//!   same through the gateways: calls per second, and each percentile's time to the last byte
//!   through the gateway beside the direct one (added = gateway − direct); then the same at a light
//!   load (`--latency-clients`, `--latency-calls`), where the added latency is the gateway's work
//!   rather than a queue.
//! - **`--peer litellm`**: the same two phases against LiteLLM's proxy (`--litellm`, the `litellm`
//!   executable of a venv), `--litellm-replicas` processes in front of the same upstream, the budget
//!   as its router's per-deployment `tpm` (its window is a minute: `--window 1m`), sharing a
//!   Redis when there are several (see `litellm.rs`).

mod litellm;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use fake_openai::{FakeOpenAi, Settings};
use http_body_util::{BodyExt as _, Full};
use serde::Serialize;

use crate::Usage;
use crate::args::{Output, parse_duration};
use crate::harness::client::{self, Client};
use crate::harness::process::{Process, ScratchDir, Stop, floodgate_binary, free_port, serve};
use crate::harness::redis;
use crate::report::{Grid, Outcome, Report, Tally};
use crate::scenarios::Run;

/// Who is measured beside Floodgate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LlmPeer {
    /// Floodgate alone.
    None,
    /// LiteLLM's proxy (`--litellm`).
    Litellm,
}

/// `llm`.
#[derive(Debug, Clone, Args)]
pub struct LlmArgs {
    /// `floodgate serve` processes sharing the `redis-server` this run starts.
    #[arg(long, default_value_t = 3, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=16))]
    pub instances: usize,
    /// Concurrent streaming clients of the one tenant.
    #[arg(long, short = 'c', default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub clients: usize,
    /// The tenant's budget, in tokens per `--window`.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub budget: u64,
    /// The budget's window (LiteLLM's `tpm` is per minute).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    pub window: Duration,
    /// Each call's `max_tokens`.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub tokens: u64,
    /// The upstream's wait before each streamed chunk in the exactness phase (streams overlap).
    #[arg(long, value_name = "DURATION", default_value = "2ms", value_parser = parse_duration)]
    pub delay: Duration,
    /// Tokens the upstream generates past each request's `max_tokens` in the exactness phase.
    #[arg(long, default_value_t = 0)]
    pub overshoot: u64,
    /// Streamed calls in the throughput phase.
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub calls: u64,
    /// Closed-loop clients of the latency phase: a load neither the upstream nor the gateway is
    /// saturated by, so that the added latency is the gateway's work, not a queue.
    #[arg(long, default_value_t = 4, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub latency_clients: usize,
    /// Streamed calls in the latency phase.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub latency_calls: u64,
    /// The peer measured beside Floodgate.
    #[arg(long, value_enum, default_value_t = LlmPeer::None)]
    pub peer: LlmPeer,
    /// `--peer litellm`: the `litellm` executable (a venv's `bin/litellm`).
    #[arg(long, value_name = "PATH", default_value = "litellm")]
    pub litellm: PathBuf,
    /// `--peer litellm`: its proxy processes (several share the run's Redis); a list (`1,3`)
    /// measures each count in turn, in the same run.
    #[arg(long, value_delimiter = ',', default_values_t = [1], value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=8))]
    pub litellm_replicas: Vec<usize>,
    /// The `floodgate` binary (default: beside `floodgate-bench`).
    #[arg(long, value_name = "PATH")]
    pub floodgate: Option<PathBuf>,
    /// The `redis-server` to run.
    #[arg(long, value_name = "PATH", default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Per-call timeout.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for LlmArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// The tenant every call is for.
const TENANT: &str = "bench-tenant";
/// How long a (re)started process may take to answer.
const STARTUP: Duration = Duration::from_secs(60);

/// One measured exactness run.
#[derive(Debug, Clone, Serialize)]
pub struct Exactness {
    /// `floodgate cut`, `floodgate finish`, `litellm`.
    pub target: String,
    /// The tenant's budget, in tokens.
    pub budget: u64,
    /// Calls answered 200.
    pub admitted: u64,
    /// Calls refused (429).
    pub refused: u64,
    /// Calls with another answer or none.
    pub failed: u64,
    /// Prompt + completion tokens the upstream generated for the tenant.
    pub generated: u64,
    /// `generated − budget`, when positive.
    pub overshoot: u64,
    /// `generated / budget`.
    pub ratio: f64,
    /// How long the phase ran.
    pub seconds: f64,
}

/// One measured throughput run.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    /// `direct`, `floodgate`, `litellm`.
    pub target: String,
    /// Calls sent.
    pub calls: u64,
    /// Calls answered 200.
    pub ok: u64,
    /// Calls answered 200 per second.
    pub calls_per_sec: f64,
    /// Time to the last byte, median.
    pub p50_us: u64,
    /// Time to the last byte, 99th percentile.
    pub p99_us: u64,
    /// Over the direct run's median (0 for `direct`).
    pub added_p50_us: i64,
    /// Over the direct run's 99th percentile (0 for `direct`).
    pub added_p99_us: i64,
}

#[derive(Debug, Serialize)]
struct Details {
    instances: usize,
    clients: usize,
    budget: u64,
    window_s: f64,
    tokens: u64,
    upstream_overshoot: u64,
    exactness: Vec<Exactness>,
    throughput: Vec<Throughput>,
    latency_clients: usize,
    latency: Vec<Throughput>,
    litellm_version: Option<String>,
}

/// `measured`'s percentiles over `direct`'s.
fn added(measured: &mut Throughput, direct: &Throughput) {
    measured.added_p50_us = measured.p50_us as i64 - direct.p50_us as i64;
    measured.added_p99_us = measured.p99_us as i64 - direct.p99_us as i64;
}

/// A target: base URLs (`http://127.0.0.1:PORT`) spread over the clients, and the headers each
/// call carries.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) urls: Vec<String>,
    pub(crate) headers: Vec<(String, String)>,
}

/// A streamed chat completion of `max_tokens`.
fn body(tokens: u64, i: u64) -> Bytes {
    let body = serde_json::json!({
        "model": "gpt-4o-mini",
        "stream": true,
        "max_tokens": tokens,
        "messages": [{"role": "user", "content": format!("Tell me a story, number {i}.")}],
    });
    Bytes::from(body.to_string())
}

/// One call: its status (0 without an answer) and time to the last byte.
async fn one_call(
    client: &Client,
    target: &Target,
    url: &str,
    body: Bytes,
    extra: &[(&str, String)],
    timeout: Duration,
) -> (u16, Duration) {
    let started = Instant::now();
    let mut request = http::Request::post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-bench");
    for (name, value) in &target.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    for (name, value) in extra {
        request = request.header(*name, value.as_str());
    }
    let Ok(request) = request.body(Full::new(body)) else { return (0, started.elapsed()) };
    let exchange = async {
        let response = client.request(request).await.ok()?;
        let status = response.status().as_u16();
        response.into_body().collect().await.ok()?;
        Some(status)
    };
    let status = tokio::time::timeout(timeout, exchange).await.ok().flatten().unwrap_or(0);
    (status, started.elapsed())
}

/// Past a window's start, the wait for it also lets the processes' clocks agree on which it is.
const WINDOW_MARGIN: Duration = Duration::from_millis(100);

/// How long is left of the current `window`, windows being aligned to the Unix epoch.
fn window_left(window: Duration) -> Duration {
    let window_ms = window.as_millis().max(1);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    let left_ms = window_ms - now_ms % window_ms;
    Duration::from_millis(u64::try_from(left_ms).unwrap_or(u64::MAX))
}

/// The exactness phase against `target` (see the module docs).
async fn exactness(
    args: &LlmArgs,
    name: &str,
    target: &Target,
    fake: &FakeOpenAi,
    overshoot: u64,
) -> anyhow::Result<Exactness> {
    // The budget is a fixed window aligned to the Unix epoch (Floodgate's `fixed_window`): a phase
    // that ran across a window's end would see the budget refilled, and count more than a window.
    // The phase starts in a window with at least half of it left (waiting for the next one
    // otherwise) and stops before that window ends.
    let left = window_left(args.window);
    let left = if left < args.window / 2 {
        tokio::time::sleep(left + WINDOW_MARGIN).await;
        window_left(args.window)
    } else {
        left
    };
    let (before, seen_before) = (fake.outcomes().len(), fake.seen().len());
    let admitted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + left.saturating_sub(args.window / 10).max(WINDOW_MARGIN);
    let mut clients = Vec::new();
    for c in 0..args.clients {
        let (target, admitted, refused, failed) =
            (target.clone(), Arc::clone(&admitted), Arc::clone(&refused), Arc::clone(&failed));
        let (tokens, timeout, delay) = (args.tokens, args.timeout, args.delay);
        clients.push(tokio::spawn(async move {
            let client = client::pooled();
            let url = target.urls[c % target.urls.len()].clone();
            let extra = [
                ("x-fake-delay-ms", delay.as_millis().to_string()),
                ("x-fake-overshoot", overshoot.to_string()),
                ("x-fake-tokens", (tokens + overshoot).to_string()),
            ];
            let mut i = c as u64;
            // Until refused, or the budget's window is nearly over (a refill would count twice).
            while Instant::now() < deadline {
                let (status, _) = one_call(&client, &target, &url, body(tokens, i), &extra, timeout).await;
                i += 4096;
                match status {
                    200 => admitted.fetch_add(1, Ordering::Relaxed),
                    429 => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    for c in clients {
        c.await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    // Every stream the upstream started has ended (the last chunks were read, or their client let go).
    let admitted_n = admitted.load(Ordering::Relaxed);
    let ended = |f: &FakeOpenAi| f.outcomes().len() - before >= f.seen().len() - seen_before;
    if !fake.wait(Duration::from_secs(60), ended).await {
        bail!("{name}: the upstream's streams did not all end within a minute of the last call");
    }
    let generated: u64 = fake.outcomes()[before..].iter().map(|o| o.prompt_tokens + o.sent).sum();
    Ok(Exactness {
        target: name.to_owned(),
        budget: args.budget,
        admitted: admitted_n,
        refused: refused.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        generated,
        overshoot: generated.saturating_sub(args.budget),
        ratio: generated as f64 / args.budget as f64,
        seconds,
    })
}

/// The throughput (or latency) phase against `target`: `load.1` calls by `load.0` closed-loop
/// clients.
async fn throughput(
    args: &LlmArgs,
    name: &str,
    target: &Target,
    load: (usize, u64),
) -> anyhow::Result<(Throughput, Tally, f64)> {
    let (concurrency, calls) = load;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..concurrency {
        let (target, next) = (target.clone(), Arc::clone(&next));
        let (tokens, timeout) = (args.tokens, args.timeout);
        clients.push(tokio::spawn(async move {
            let client = client::pooled();
            let url = target.urls[c % target.urls.len()].clone();
            let mut tally = Tally::default();
            let extra = [("x-fake-tokens", tokens.to_string())];
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= calls {
                    return tally;
                }
                let at = started.elapsed().as_millis() as u64;
                let (status, took) = one_call(&client, &target, &url, body(tokens, i), &extra, timeout).await;
                let outcome = match status {
                    200 => Outcome::Allowed,
                    429 => Outcome::Denied,
                    0 => Outcome::Error("timeout"),
                    _ => Outcome::Error("http_other"),
                };
                tally.record(outcome, took.as_nanos() as u64, at);
            }
        }));
    }
    let mut tally = Tally::default();
    for c in clients {
        tally.merge(&c.await?);
    }
    let seconds = started.elapsed().as_secs_f64();
    let p = |q: f64| tally.latency.value_at_quantile(q) / 1000;
    let measured = Throughput {
        target: name.to_owned(),
        calls: tally.sent(),
        ok: tally.allowed,
        calls_per_sec: tally.allowed as f64 / seconds,
        p50_us: p(0.5),
        p99_us: p(0.99),
        added_p50_us: 0,
        added_p99_us: 0,
    };
    Ok((measured, tally, seconds))
}

/// `floodgate serve` processes on a shared Redis, each on its own ports; killed when dropped.
struct Gateways {
    processes: Vec<Process>,
    urls: Vec<String>,
    admin: Vec<String>,
}

fn config_yaml(args: &LlmArgs, redis_url: &str, upstream: &str, policy: &str, budget: u64) -> String {
    format!(
        r#"{store}headers: [ietf, openai]
rules:
  - name: tenant-tokens
    key: [tenant]
    algorithm: fixed_window
    limit: {budget}
    window: {window}ms
    cost: tokens
gateway:
  identity:
    headers: {{ tenant: x-tenant-id }}
  routes:
    - name: openai
      match: {{ path: "/v1/{{*rest}}", methods: [POST] }}
      upstream: {upstream}
      timeouts: {{ connect: 2s, first_byte: 60s }}
      llm:
        api: openai
        allowance: {{ default_max_tokens: {tokens}, min_completion_tokens: 16, when_short: cap }}
        over_budget_mid_stream: {policy}
"#,
        store = redis::store_yaml(redis_url, Some(Duration::from_secs(2))),
        window = args.window.as_millis(),
        tokens = args.tokens,
    )
}

async fn start_gateways(
    args: &LlmArgs,
    dir: &ScratchDir,
    yaml: &str,
    name: &str,
    client: &Client,
) -> anyhow::Result<Gateways> {
    let binary = floodgate_binary(args.floodgate.as_deref())?;
    let config = dir.path().join(format!("{name}.yaml"));
    std::fs::write(&config, yaml)?;
    let mut gateways = Gateways { processes: Vec::new(), urls: Vec::new(), admin: Vec::new() };
    for _ in 0..args.instances {
        let (http, gateway) = (free_port()?, free_port()?);
        let mut command = serve(&binary, &config, &format!("127.0.0.1:{http}"));
        command.args(["--gateway", &format!("127.0.0.1:{gateway}")]);
        let process = Process::spawn(&mut command, Stop::Kill).context("starting floodgate")?;
        gateways.processes.push(process);
        gateways.urls.push(format!("http://127.0.0.1:{gateway}"));
        gateways.admin.push(format!("http://127.0.0.1:{http}"));
    }
    for (admin, process) in gateways.admin.iter().zip(gateways.processes.iter_mut()) {
        let url = format!("{admin}/readyz");
        let ready = wait_ready(client, &url);
        tokio::pin!(ready);
        loop {
            tokio::select! {
                ready = &mut ready => { ready?; break; }
                () = tokio::time::sleep(Duration::from_millis(100)) => {
                    if let Some(status) = process.exited() {
                        bail!("floodgate exited ({status}) on {}: its configuration is {}", admin, config.display());
                    }
                }
            }
        }
    }
    Ok(gateways)
}

/// Waits until `url` answers 200.
pub(crate) async fn wait_ready(client: &Client, url: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + STARTUP;
    loop {
        if matches!(client::get_on(client, url, Duration::from_secs(1)).await, Ok((s, _)) if s == 200) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{url} did not answer 200 within {STARTUP:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What `tenant-tokens` of the tenant used, by the first gateway's `/v1/usage`.
async fn charged(client: &Client, gateways: &Gateways) -> Option<u64> {
    let url = format!("{}/v1/usage?rule=tenant-tokens&tenant={TENANT}", gateways.admin[0]);
    let (_, body) = client::get_on(client, &url, Duration::from_secs(2)).await.ok()?;
    serde_json::from_slice::<serde_json::Value>(&body).ok()?["used"].as_u64()
}

/// Runs `llm` (see the module docs).
pub async fn run(args: &LlmArgs) -> anyhow::Result<Report> {
    if args.peer == LlmPeer::Litellm && args.window != Duration::from_secs(60) {
        return Err(Usage("--peer litellm: its tpm is per minute; use --window 1m".into()).into());
    }
    let redis = redis::start(&args.redis_server)?;
    let redis_url = format!("redis://{}", redis::addr(&redis));
    let dir = ScratchDir::new("llm").context("creating the run's directory")?;
    let fake = FakeOpenAi::start(Settings { tokens: args.tokens, ..Settings::default() }).await?;
    let client = client::pooled();
    let tenant = vec![("x-tenant-id".to_owned(), TENANT.to_owned())];
    let mut exact = Vec::new();
    for policy in ["cut", "finish"] {
        let yaml = config_yaml(args, &redis_url, &fake.url(), policy, args.budget);
        redis::query(&redis, &["FLUSHALL"]);
        let gateways = start_gateways(args, &dir, &yaml, policy, &client).await?;
        let target = Target { urls: gateways.urls.clone(), headers: tenant.clone() };
        let mut measured =
            exactness(args, &format!("floodgate {policy}"), &target, &fake, args.overshoot).await?;
        if let Some(used) = charged(&client, &gateways).await {
            // What the tenant was charged is what the upstream generated, when the budget is exact.
            measured.target = format!("floodgate {policy} (charged {used})");
        }
        exact.push(measured);
        drop(gateways);
    }

    // Throughput: a budget no run reaches, an upstream without delay.
    redis::query(&redis, &["FLUSHALL"]);
    // (Below 2^52: Redis's scripts compute in doubles.)
    let yaml = config_yaml(args, &redis_url, &fake.url(), "cut", 1 << 50);
    let gateways = start_gateways(args, &dir, &yaml, "throughput", &client).await?;
    let direct = Target { urls: vec![fake.url()], headers: Vec::new() };
    let target = Target { urls: gateways.urls.clone(), headers: tenant.clone() };
    let saturated = (args.clients, args.calls);
    let light = (args.latency_clients, args.latency_calls);
    let (direct_busy, ..) = throughput(args, "direct", &direct, saturated).await?;
    let (mut through, tally, seconds) = throughput(args, "floodgate", &target, saturated).await?;
    let (direct_light, ..) = throughput(args, "direct", &direct, light).await?;
    let (mut through_light, ..) = throughput(args, "floodgate", &target, light).await?;
    added(&mut through, &direct_busy);
    added(&mut through_light, &direct_light);
    drop(gateways);
    let mut throughputs = vec![direct_busy.clone(), through];
    let mut latencies = vec![direct_light.clone(), through_light];

    let mut litellm_version = None;
    let replicas = if args.peer == LlmPeer::Litellm { args.litellm_replicas.as_slice() } else { &[] };
    for &replicas in replicas {
        redis::query(&redis, &["FLUSHALL"]);
        let peer =
            litellm::Litellm::start(args, replicas, &dir, &fake.url(), &redis, args.budget, &client).await?;
        litellm_version = peer.version.clone();
        let target = peer.target();
        let name = format!("litellm ×{replicas}");
        exact.push(exactness(args, &name, &target, &fake, args.overshoot).await?);
        drop(peer);
        redis::query(&redis, &["FLUSHALL"]);
        let peer =
            litellm::Litellm::start(args, replicas, &dir, &fake.url(), &redis, u32::MAX as u64, &client)
                .await?;
        let (mut measured, ..) = throughput(args, &name, &peer.target(), saturated).await?;
        added(&mut measured, &direct_busy);
        throughputs.push(measured);
        let (mut measured, ..) = throughput(args, &name, &peer.target(), light).await?;
        added(&mut measured, &direct_light);
        latencies.push(measured);
    }

    let details = Details {
        instances: args.instances,
        clients: args.clients,
        budget: args.budget,
        window_s: args.window.as_secs_f64(),
        tokens: args.tokens,
        upstream_overshoot: args.overshoot,
        exactness: exact.clone(),
        throughput: throughputs.clone(),
        latency_clients: args.latency_clients,
        latency: latencies.clone(),
        litellm_version,
    };
    let mut report = Report::new(tally.summary("llm", "floodgate gateways", seconds, seconds), details);
    report.grids.push(Grid {
        head: "exactness".into(),
        columns: ["admitted", "refused", "failed", "generated", "budget", "overshoot", "× budget"]
            .map(String::from)
            .to_vec(),
        rows: exact
            .iter()
            .map(|e| {
                let cells = [e.admitted, e.refused, e.failed, e.generated, e.budget, e.overshoot]
                    .map(|n| n.to_string())
                    .into_iter()
                    .chain([format!("{:.3}", e.ratio)])
                    .collect();
                (e.target.clone(), cells)
            })
            .collect(),
    });
    for (head, rows) in [("throughput", &throughputs), ("latency", &latencies)] {
        report.grids.push(Grid {
            head: head.into(),
            columns: ["calls/s", "p50 µs", "p99 µs", "added p50 µs", "added p99 µs"]
                .map(String::from)
                .to_vec(),
            rows: rows
                .iter()
                .map(|t| {
                    let cells = vec![
                        format!("{:.0}", t.calls_per_sec),
                        t.p50_us.to_string(),
                        t.p99_us.to_string(),
                        t.added_p50_us.to_string(),
                        t.added_p99_us.to_string(),
                    ];
                    (t.target.clone(), cells)
                })
                .collect(),
        });
    }
    Ok(report)
}
