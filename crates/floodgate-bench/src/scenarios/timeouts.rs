//! `floodgate-bench timeouts`: how close to its value each of the gateway's timeout budgets fires —
//! `connect`, `first_byte` and `total` — beside nginx's `proxy_connect_timeout` and
//! `proxy_read_timeout` in the same run.
//!
//! Two upstreams that never answer: one that accepts connections and never replies (for
//! `first_byte` and `total`), and one whose accept queue is full and never drained, so that the
//! kernel drops new connection attempts (for `connect`). Each budget gets a route of its own whose
//! other budgets are far longer, so that only the one measured can fire. `--requests` requests per
//! budget, `-c` at a time, each on a connection of its own, are timed from their send to the end of
//! the `504`; the report gives each budget's configured value, the time to the `504` (median, 99th
//! percentile, most) and by how much it overshot, and counts answers that were not a `504` naming
//! that budget (`wrong`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Empty};
use serde::Serialize;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::Usage;
use crate::args::{Output, parse_duration};
use crate::harness::process::{self, Process, ScratchDir, floodgate_binary};
use crate::report::math::{Percentiles, latency_histogram, percentiles};
use crate::report::{Grid, Report, Summary};
use crate::scenarios::Run;

/// `timeouts`.
#[derive(Debug, Clone, Args)]
pub struct TimeoutsArgs {
    /// The `floodgate` binary (default: beside `floodgate-bench`).
    #[arg(long, value_name = "PATH")]
    pub floodgate: Option<std::path::PathBuf>,
    /// The `nginx` binary (Debian: `apt-get install -y nginx`); `--no-nginx` leaves it out.
    #[arg(long, value_name = "PATH", default_value = "/usr/sbin/nginx")]
    pub nginx: std::path::PathBuf,
    /// Measure Floodgate only.
    #[arg(long)]
    pub no_nginx: bool,
    /// The value of every budget measured (whole milliseconds: nginx's resolution).
    #[arg(long, value_name = "DURATION", default_value = "300ms", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Requests per budget.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub requests: u64,
    /// Requests in flight at once.
    #[arg(long, short = 'c', default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub concurrency: u64,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for TimeoutsArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// One budget of one proxy, measured.
#[derive(Debug, Clone, Serialize)]
struct Measured {
    proxy: &'static str,
    budget: &'static str,
    configured_ms: f64,
    requests: u64,
    /// Answers that were not a `504` (naming this budget, for Floodgate).
    wrong: u64,
    /// From the send to the end of the `504`.
    #[serde(flatten)]
    to_504: Percentiles,
    /// How much later than its value the budget fired: the median and the most, in ms.
    overshoot_p50_ms: f64,
    overshoot_max_ms: f64,
}

#[derive(Debug, Serialize)]
struct Details {
    timeout_ms: f64,
    requests: u64,
    concurrency: u64,
    budgets: Vec<Measured>,
}

/// Longer than anything measured: the budgets not measured on a route.
const LONG: &str = "60s";

/// An upstream that accepts every connection and never answers; the connections are held open.
async fn silent_upstream() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    Ok(addr)
}

/// An upstream whose accept queue is full and never drained: new connection attempts get no
/// answer at all (the kernel drops their SYNs), so only a connect timeout ends them.
async fn unreachable_upstream() -> anyhow::Result<(SocketAddr, TcpListener, Vec<TcpStream>)> {
    let socket = TcpSocket::new_v4()?;
    socket.bind("127.0.0.1:0".parse()?)?;
    let listener = socket.listen(1)?;
    let addr = listener.local_addr()?;
    let mut fillers = Vec::new();
    for _ in 0..8 {
        let s = TcpSocket::new_v4()?;
        if let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_millis(200), s.connect(addr)).await {
            fillers.push(stream);
        }
    }
    Ok((addr, listener, fillers))
}

fn ms_text(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// `floodgate serve` with one gateway route per budget.
async fn floodgate(
    binary: &Path,
    dir: &Path,
    silent: SocketAddr,
    unreachable: SocketAddr,
    timeout: Duration,
) -> anyhow::Result<(Process, SocketAddr)> {
    let t = ms_text(timeout);
    let route = |name: &str, path: &str, upstream: SocketAddr, timeouts: String| {
        format!(
            "    - name: {name}\n      match: {{ path: \"/{path}\" }}\n      upstream: http://{upstream}\n      timeouts: {{ {timeouts} }}\n"
        )
    };
    let yaml = format!(
        "rules: []\ngateway:\n  routes:\n{}{}{}",
        route("connect", "connect", unreachable, format!("connect: {t}, first_byte: {LONG}, total: {LONG}")),
        route("first-byte", "first_byte", silent, format!("connect: {LONG}, first_byte: {t}, total: {LONG}")),
        route("total", "total", silent, format!("connect: {t}, first_byte: {LONG}, total: {t}")),
    );
    process::gateway(binary, dir, &yaml).await
}

/// nginx with one location per budget it has: `proxy_connect_timeout` and `proxy_read_timeout`
/// (the time to the response's first byte when nothing is read).
async fn nginx(
    binary: &Path,
    dir: &Path,
    silent: SocketAddr,
    unreachable: SocketAddr,
    timeout: Duration,
) -> anyhow::Result<(Process, SocketAddr)> {
    let t = ms_text(timeout);
    process::nginx(binary, dir, |port| {
        format!(
            "  server {{\n    listen 127.0.0.1:{port};\n\
             \x20   location = /connect {{ proxy_pass http://{unreachable}; proxy_connect_timeout {t}; proxy_read_timeout {LONG}; }}\n\
             \x20   location = /first_byte {{ proxy_pass http://{silent}; proxy_connect_timeout {LONG}; proxy_read_timeout {t}; }}\n\
             \x20 }}\n"
        )
    })
    .await
}

/// One GET of `path` on a connection of its own: the time to the end of the answer, and whether it
/// was a `504` (naming `budget` in its detail, when `named`).
async fn one(addr: SocketAddr, path: &str, budget: &str, named: bool) -> (Duration, bool) {
    let started = Instant::now();
    let answer = async {
        let tcp = TcpStream::connect(addr).await.ok()?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.ok()?;
        tokio::spawn(connection);
        let request =
            http::Request::get(path).header("host", addr.to_string()).body(Empty::<Bytes>::new()).ok()?;
        let response = sender.send_request(request).await.ok()?;
        let status = response.status();
        let body = response.into_body().collect().await.ok()?.to_bytes();
        Some((status, body))
    };
    let right = match answer.await {
        Some((status, body)) if status == http::StatusCode::GATEWAY_TIMEOUT => {
            !named || String::from_utf8_lossy(&body).contains(&format!("`{budget}`"))
        }
        _ => false,
    };
    (started.elapsed(), right)
}

/// `requests` GETs of `/budget`, `concurrency` at a time.
async fn measure(
    proxy: &'static str,
    addr: SocketAddr,
    budget: &'static str,
    args: &TimeoutsArgs,
) -> anyhow::Result<Measured> {
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let named = proxy == "floodgate";
    let path = format!("/{budget}");
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (next, path, requests) = (Arc::clone(&next), path.clone(), args.requests);
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < requests {
                seen.push(one(addr, &path, budget, named).await);
            }
            seen
        }));
    }
    let mut histogram = latency_histogram();
    let (mut wrong, mut overshoots) = (0u64, Vec::new());
    let configured = args.timeout;
    for task in tasks {
        for (took, right) in task.await? {
            wrong += u64::from(!right);
            histogram.record(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1))?;
            overshoots.push(took.as_secs_f64() * 1000.0 - configured.as_secs_f64() * 1000.0);
        }
    }
    overshoots.sort_by(f64::total_cmp);
    let median = overshoots.get(overshoots.len() / 2).copied().unwrap_or(0.0);
    Ok(Measured {
        proxy,
        budget,
        configured_ms: configured.as_secs_f64() * 1000.0,
        requests: args.requests,
        wrong,
        to_504: percentiles(&histogram),
        overshoot_p50_ms: median,
        overshoot_max_ms: overshoots.last().copied().unwrap_or(0.0),
    })
}

/// Runs the scenario.
pub async fn run(args: &TimeoutsArgs) -> anyhow::Result<Report> {
    if !args.timeout.subsec_nanos().is_multiple_of(1_000_000) || args.timeout < Duration::from_millis(1) {
        return Err(
            Usage("--timeout must be whole milliseconds, at least 1ms (nginx's resolution)".into()).into()
        );
    }
    let binary = floodgate_binary(args.floodgate.as_deref())?;
    let scratch = ScratchDir::new("timeouts")?;
    let silent = silent_upstream().await?;
    let (unreachable, _listener, _fillers) = unreachable_upstream().await?;
    let started = Instant::now();
    let mut budgets = Vec::new();
    {
        let (_process, addr) = floodgate(&binary, scratch.path(), silent, unreachable, args.timeout).await?;
        for budget in ["connect", "first_byte", "total"] {
            budgets.push(measure("floodgate", addr, budget, args).await?);
        }
    }
    if !args.no_nginx {
        let (_process, addr) = nginx(&args.nginx, scratch.path(), silent, unreachable, args.timeout).await?;
        for budget in ["connect", "first_byte"] {
            budgets.push(measure("nginx", addr, budget, args).await?);
        }
    }
    let wall = started.elapsed().as_secs_f64();

    let mut grid = Grid {
        head: format!("{} ms budgets", args.timeout.as_millis()),
        columns: ["504 p50", "504 p99", "504 max", "over p50", "over max", "wrong"]
            .map(String::from)
            .to_vec(),
        rows: Vec::new(),
    };
    for m in &budgets {
        grid.rows.push((
            format!("{} {}", m.proxy, m.budget),
            vec![
                crate::report::human_us(m.to_504.p50_us),
                crate::report::human_us(m.to_504.p99_us),
                crate::report::human_us(m.to_504.max_us),
                format!("{:.1} ms", m.overshoot_p50_ms),
                format!("{:.1} ms", m.overshoot_max_ms),
                m.wrong.to_string(),
            ],
        ));
    }
    let sent = budgets.iter().map(|m| m.requests).sum();
    // Every answer is an error here: a 504 as expected, or a wrong one.
    let wrong: u64 = budgets.iter().map(|m| m.wrong).sum();
    let mut errors = crate::report::Errors { total: sent, by_kind: Default::default() };
    errors.by_kind.insert("http_504".into(), sent - wrong);
    if wrong > 0 {
        errors.by_kind.insert("wrong".into(), wrong);
    }
    let summary = Summary {
        scenario: "timeouts".into(),
        target: if args.no_nginx { "floodgate gateway".into() } else { "floodgate gateway vs nginx".into() },
        duration_s: wall,
        sent,
        decisions_per_sec: sent as f64 / wall,
        allowed: 0,
        denied: 0,
        errors,
        latency: budgets.first().map(|m| m.to_504).unwrap_or_default(),
    };
    let details = Details {
        timeout_ms: args.timeout.as_secs_f64() * 1000.0,
        requests: args.requests,
        concurrency: args.concurrency,
        budgets,
    };
    let mut report = Report::new(summary, details);
    report.grids = vec![grid];
    Ok(report)
}
