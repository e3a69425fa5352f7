//! `slowloris`: many connections that send a request's headers one line at a time and never
//! finish, beside normal clients.
//!
//! Two phases of the same length against the same server: normal traffic alone (the baseline),
//! then the same normal traffic while `--slow` connections drip a header line every `--drip`
//! (each reconnects when the server closes it, so the attack keeps its size). Reported: the normal
//! clients' latency in each phase (open loop: measured from when each request was due, so a stalled
//! server cannot hide its stall), their errors, and how long the server took to close each slow
//! connection (from its connect to the server's close) — which `http.header_read_timeout` bounds.
//!
//! Without `--target`, a `floodgate` server starts in this process with
//! `http: {header_read_timeout: --header-timeout}`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Usage;
use crate::args::{Output, parse_duration};
use crate::harness::LocalServer;
use crate::harness::client::{self, Client};
use crate::report::math::{self, Percentiles};
use crate::report::{Outcome, Report, Tally};
use crate::scenarios::Run;

/// `slowloris`.
#[derive(Debug, Clone, Args)]
pub struct SlowlorisArgs {
    /// A running server's HTTP API (`http://IP:PORT`); default: one in this process with
    /// `http.header_read_timeout` set to --header-timeout.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Slow connections held open during the attack (each reconnects once closed).
    #[arg(long, default_value_t = 500, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    pub slow: usize,
    /// How often each slow connection sends one more header line.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub drip: Duration,
    /// The in-process server's `http.header_read_timeout`.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration, conflicts_with = "target")]
    pub header_timeout: Duration,
    /// Normal requests per second (`POST /v1/check`), open loop, in each phase.
    #[arg(long, value_name = "PER_SEC", default_value_t = 500.0)]
    pub normal_rate: f64,
    /// The length of each phase (baseline, then under attack).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub phase: Duration,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for SlowlorisArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// One phase's normal traffic.
#[derive(Debug, Serialize)]
struct Phase {
    sent: u64,
    answered: u64,
    errors: u64,
    #[serde(flatten)]
    latency: Percentiles,
}

/// How long the server took to close slow connections.
#[derive(Debug, Serialize)]
struct Closed {
    /// Slow connections the server closed during the attack.
    count: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Slow connections still open when the attack ended (connected less than the timeout before).
    open_at_end: usize,
}

#[derive(Debug, Serialize)]
struct Details {
    slow_connections: usize,
    drip_ms: f64,
    header_read_timeout_ms: Option<f64>,
    normal_rate: f64,
    phase_s: f64,
    baseline: Phase,
    under_attack: Phase,
    /// p99 under attack ÷ p99 of the baseline.
    p99_ratio: f64,
    slow_closed: Closed,
}

/// Runs `slowloris`.
pub async fn run(args: &SlowlorisArgs) -> anyhow::Result<Report> {
    if args.phase.is_zero() || args.phase > Duration::from_secs(120) {
        return Err(Usage("--phase must be between 1ms and 2m".into()).into());
    }
    if !(args.normal_rate > 0.0 && args.normal_rate <= 100_000.0) {
        return Err(Usage("--normal-rate must be above 0 and at most 100000".into()).into());
    }
    let local = match &args.target {
        Some(_) => None,
        None => {
            let timeout = format!("{}ms", args.header_timeout.as_millis());
            let yaml = format!(
                "http: {{header_read_timeout: {timeout}, max_connections: 100000}}\nrules:\n  - name: per-user\n    \
                 key: [user]\n    algorithm: token_bucket\n    rate: 1000000/s\n    burst: 1000000\n"
            );
            Some(LocalServer::start(&yaml).await?)
        }
    };
    let addr: SocketAddr = match (&args.target, &local) {
        (Some(t), _) => t
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .map_err(|_| Usage(format!("--target {t}: expected http://IP:PORT")))?,
        (None, Some(l)) => l.addr,
        (None, None) => unreachable!("a local server without a target"),
    };
    let client = client::pooled();

    let (baseline, _) = normal(&client, addr, args.normal_rate, args.phase).await;

    let stop = Arc::new(AtomicBool::new(false));
    let closes = Arc::new(Closes::default());
    let connected = Arc::new(AtomicUsize::new(0));
    let slow: Vec<_> = (0..args.slow)
        .map(|i| {
            tokio::spawn(slow_client(
                addr,
                i,
                args.drip,
                Arc::clone(&stop),
                Arc::clone(&closes),
                Arc::clone(&connected),
            ))
        })
        .collect();
    // Every slow connection open before the normal traffic starts.
    let ramp = Instant::now();
    while connected.load(Ordering::Relaxed) < args.slow && ramp.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (under_attack, tally) = normal(&client, addr, args.normal_rate, args.phase).await;
    stop.store(true, Ordering::Relaxed);
    let mut open_at_end = 0;
    for task in slow {
        if task.await.unwrap_or(false) {
            open_at_end += 1;
        }
    }
    let mut closed = closes.take();
    closed.sort_by(f64::total_cmp);
    let at = |q: f64| {
        closed.get(((closed.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0)
    };
    let details = Details {
        slow_connections: args.slow,
        drip_ms: args.drip.as_secs_f64() * 1000.0,
        header_read_timeout_ms: args.target.is_none().then_some(args.header_timeout.as_secs_f64() * 1000.0),
        normal_rate: args.normal_rate,
        phase_s: args.phase.as_secs_f64(),
        p99_ratio: if baseline.latency.p99_us > 0.0 {
            under_attack.latency.p99_us / baseline.latency.p99_us
        } else {
            0.0
        },
        baseline,
        under_attack,
        slow_closed: Closed {
            count: closed.len(),
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: at(1.0),
            open_at_end,
        },
    };
    let wall = args.phase.as_secs_f64();
    let target = args.target.clone().unwrap_or_else(|| format!("in-process http://{addr}"));
    Ok(Report::new(tally.summary("slowloris", &target, wall, wall), details))
}

/// Normal traffic for `phase`, open loop at `rate` per second: each request's latency counts from
/// when it was due.
async fn normal(client: &Client, addr: SocketAddr, rate: f64, phase: Duration) -> (Phase, Tally) {
    let interval = Duration::from_secs_f64(1.0 / rate);
    let started = Instant::now();
    let mut tasks = Vec::new();
    let mut n: u64 = 0;
    loop {
        let due = started + interval.mul_f64(n as f64);
        if due >= started + phase {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        let client = client.clone();
        let body = format!(r#"{{"descriptors": {{"user": "normal-{}"}}}}"#, n % 1000);
        tasks.push(tokio::spawn(async move {
            let request = http::Request::post(format!("http://{addr}/v1/check"))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)));
            let Ok(request) = request else { return (Outcome::Error("request"), due, due.elapsed()) };
            let answer = tokio::time::timeout(Duration::from_secs(5), client.request(request)).await;
            let outcome = match answer {
                Ok(Ok(response)) => {
                    let ok = response.status().is_success()
                        || response.status() == http::StatusCode::TOO_MANY_REQUESTS;
                    let _ = response.into_body().collect().await;
                    if ok { Outcome::Allowed } else { Outcome::Error("status") }
                }
                Ok(Err(_)) => Outcome::Error("connection"),
                Err(_) => Outcome::Error("timeout"),
            };
            (outcome, due, due.elapsed())
        }));
        n += 1;
    }
    let mut tally = Tally::default();
    for task in tasks {
        if let Ok((outcome, due, took)) = task.await {
            let latency = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
            let at_ms = u64::try_from(due.duration_since(started).as_millis()).unwrap_or(0);
            tally.record(outcome, latency, at_ms);
        }
    }
    let phase = Phase {
        sent: tally.sent(),
        answered: tally.allowed + tally.denied,
        errors: tally.error_count(),
        latency: math::percentiles(&tally.latency),
    };
    (phase, tally)
}

/// One slow client: connects, sends a request line, then a header line every `drip`, never the
/// blank line; when the server closes it, notes how long that took and connects again. Returns
/// whether its last connection was still open when told to stop.
async fn slow_client(
    addr: SocketAddr,
    i: usize,
    drip: Duration,
    stop: Arc<AtomicBool>,
    closes: Arc<Closes>,
    connected: Arc<AtomicUsize>,
) -> bool {
    let mut first = true;
    while !stop.load(Ordering::Relaxed) {
        let Ok(tcp) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let opened = Instant::now();
        if first {
            connected.fetch_add(1, Ordering::Relaxed);
            first = false;
        }
        let (mut read, mut write) = tcp.into_split();
        if write.write_all(b"GET /healthz HTTP/1.1\r\nHost: floodgate\r\n").await.is_err() {
            continue;
        }
        let drip_loop = async {
            let mut n = 0u64;
            loop {
                tokio::time::sleep(drip).await;
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                n += 1;
                if write.write_all(format!("X-Slow-{i}-{n}: 1\r\n").as_bytes()).await.is_err() {
                    // Closed: the read side sees it too.
                    std::future::pending::<()>().await;
                }
            }
        };
        let mut buf = [0u8; 1024];
        let closed = async {
            loop {
                match read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::select! {
            () = closed => closes.push(opened.elapsed().as_secs_f64() * 1000.0),
            () = drip_loop => return true,
        }
    }
    false
}

/// Close times in milliseconds, from many tasks.
#[derive(Debug, Default)]
struct Closes(std::sync::Mutex<Vec<f64>>);

impl Closes {
    fn push(&self, ms: f64) {
        if let Ok(mut v) = self.0.lock() {
            v.push(ms);
        }
    }

    fn take(&self) -> Vec<f64> {
        self.0.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default()
    }
}
