//! `floodgate-bench gateway`: Floodgate's gateway beside nginx (`limit_req` + `proxy_pass`), both in
//! front of the same upstream on the same machine, in one run.
//!
//! 1. **Overhead and throughput on the allowed path**: closed-loop GETs on `--connections`
//!    keep-alive connections for `--duration`, against the upstream directly, then through each
//!    proxy, whose per-IP limit is far above the load (every request is checked, none denied). The
//!    added latency is each proxy's percentile minus the direct one.
//! 2. **At the limit** (`--limit` per second per IP): a client that stays *under* the limit on
//!    average but sends in bursts (`--burst` requests at once every `burst / (limit / 2)` seconds),
//!    and a flood at full speed; what each admits. Floodgate runs `sliding_log` (exact: never more
//!    than `limit` in any second); nginx runs its leaky bucket as configured (`rate=LIMITr/s`, with
//!    `burst=0`, its default, and with `burst=LIMIT nodelay`).
//! 3. **The denied path**: the same closed loop as the allowed path, every request of one key
//!    that is over its limit (one request an hour: after the first, each is refused) — what a
//!    refusal costs beside a proxied request, as requests per second and as a ratio of each peer's
//!    own allowed path. A refusal should cost less than a request that goes to the upstream.
//!
//! The upstream is the harness's (`harness::upstream`): a minimal hyper server on a thread of its
//! own; `floodgate serve` and nginx run as processes this run starts and stops.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Empty};
use serde::Serialize;

use crate::args::{Output, parse_duration};
use crate::harness::process::{self, Process, ScratchDir, floodgate_binary, wait_for_port};
use crate::harness::upstream::Upstream;
use crate::report::math::Percentiles;
use crate::report::{Grid, Outcome, Report, Tally};
use crate::scenarios::Run;

/// `gateway`.
#[derive(Debug, Clone, Args)]
pub struct GatewayArgs {
    /// The `floodgate` binary (default: beside `floodgate-bench`).
    #[arg(long, value_name = "PATH")]
    pub floodgate: Option<PathBuf>,
    /// The `nginx` binary (Debian: `apt-get install -y nginx`).
    #[arg(long, value_name = "PATH", default_value = "/usr/sbin/nginx")]
    pub nginx: PathBuf,
    /// Keep-alive connections of the allowed-path load.
    #[arg(long, short = 'c', default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    pub connections: usize,
    /// How long each allowed-path measurement lasts (after 1 s of warm-up).
    #[arg(long, short, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: std::time::Duration,
    /// The per-IP limit of the at-the-limit phase, per second.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(2..=100_000))]
    pub limit: u64,
    /// Requests sent at once by the bursty client (which stays at half the limit on average).
    #[arg(long, default_value_t = 10, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub burst: usize,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for GatewayArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// One measured configuration.
#[derive(Debug, Clone, Serialize)]
struct Measured {
    name: String,
    requests_per_sec: f64,
    allowed: u64,
    denied: u64,
    errors: u64,
    #[serde(flatten)]
    latency: Percentiles,
}

/// What a peer admitted at the limit.
#[derive(Debug, Clone, Serialize)]
struct AtLimit {
    peer: String,
    /// The bursty client under the limit on average: sent, admitted.
    bursty_sent: u64,
    bursty_admitted: u64,
    /// The flood: sent, admitted, and the exact limit over the flood's length.
    flood_sent: u64,
    flood_admitted: u64,
    flood_limit: u64,
}

#[derive(Debug, Serialize)]
struct Details {
    connections: usize,
    duration_s: f64,
    allowed_path: Vec<Measured>,
    added_p50_us: Vec<(String, f64)>,
    added_p99_us: Vec<(String, f64)>,
    at_limit: Vec<AtLimit>,
    /// The flood of one key over its limit: each peer's refusals per second.
    denied_path: Vec<Measured>,
    /// Each peer's denied-path rate ÷ its allowed-path rate.
    denied_over_allowed: Vec<(String, f64)>,
}

/// How long the upstream may take to accept connections.
const STARTUP: Duration = Duration::from_secs(10);

/// `floodgate serve` with a gateway in front of `upstream`, limiting per IP with `rule`.
async fn floodgate(
    binary: &Path,
    dir: &Path,
    upstream: SocketAddr,
    rule: &str,
) -> anyhow::Result<(Process, SocketAddr)> {
    let yaml = format!(
        "rules:\n  - name: per-ip\n    key: [ip]\n{rule}\ngateway:\n  routes:\n    - name: app\n      match: {{ path: \"/{{*rest}}\" }}\n      upstream: http://{upstream}\n"
    );
    process::gateway(binary, dir, &yaml).await
}

/// nginx with `limit_req zone=ip` (`rate`, `burst`) and `proxy_pass` to `upstream` (keep-alive).
async fn nginx(
    binary: &Path,
    dir: &Path,
    upstream: SocketAddr,
    rate: &str,
    burst: &str,
) -> anyhow::Result<(Process, SocketAddr)> {
    // Client connections kept open for the whole run, as Floodgate keeps them (nginx closes one
    // after 1,000 requests by default, and the request in flight then fails).
    process::nginx(binary, dir, |port| {
        format!(
            "  limit_req_zone $binary_remote_addr zone=ip:10m rate={rate};\n  limit_req_status 429;\n\
             \x20 upstream app {{ server {upstream}; keepalive 256; }}\n\
             \x20 server {{\n    listen 127.0.0.1:{port};\n    keepalive_requests 1000000000;\n    location / {{\n      limit_req zone=ip{burst};\n      proxy_pass http://app;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n"
        )
    })
    .await
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(addr: SocketAddr) -> anyhow::Result<Sender> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One GET on `sender`, its outcome and latency.
async fn get(sender: &mut Sender, addr: SocketAddr) -> (Outcome, u64) {
    let started = Instant::now();
    let request = http::Request::get("/bench").header("host", addr.to_string()).body(Empty::new());
    let Ok(request) = request else { return (Outcome::Error("request"), 0) };
    if sender.ready().await.is_err() {
        return (Outcome::Error("connection"), 0);
    }
    let outcome = match sender.send_request(request).await {
        Ok(response) => {
            let status = response.status();
            let _ = response.into_body().collect().await;
            if status.is_success() {
                Outcome::Allowed
            } else if status.as_u16() == 429 {
                Outcome::Denied
            } else if status.is_server_error() {
                Outcome::Error("http_5xx")
            } else {
                Outcome::Error("http_other")
            }
        }
        Err(_) => Outcome::Error("connection"),
    };
    (outcome, started.elapsed().as_nanos() as u64)
}

/// Closed loop: `connections` connections sending GETs back to back for `duration`.
async fn closed_loop(
    addr: SocketAddr,
    connections: usize,
    duration: Duration,
) -> anyhow::Result<(Tally, f64)> {
    let started = Instant::now();
    let until = started + duration;
    let mut tasks = Vec::with_capacity(connections);
    for _ in 0..connections {
        let mut sender = connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let t0 = Instant::now();
            while Instant::now() < until {
                let (outcome, ns) = get(&mut sender, addr).await;
                if matches!(outcome, Outcome::Error("connection")) {
                    match connect(addr).await {
                        Ok(s) => sender = s,
                        Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                    }
                }
                tally.record(outcome, ns, t0.elapsed().as_millis() as u64);
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for task in tasks {
        total.merge(&task.await?);
    }
    Ok((total, started.elapsed().as_secs_f64()))
}

fn measured(name: &str, tally: &Tally, secs: f64) -> Measured {
    Measured {
        name: name.to_owned(),
        requests_per_sec: (tally.allowed + tally.denied) as f64 / secs,
        allowed: tally.allowed,
        denied: tally.denied,
        errors: tally.error_count(),
        latency: crate::report::math::percentiles(&tally.latency),
    }
}

/// The bursty client (under the limit on average) and the flood, against `addr`.
async fn at_limit(peer: &str, addr: SocketAddr, limit: u64, burst: usize) -> anyhow::Result<AtLimit> {
    // Bursts of `burst` at once, at half the limit on average, for 5 s.
    let period = Duration::from_secs_f64(burst as f64 / (limit as f64 / 2.0));
    let rounds = (5.0 / period.as_secs_f64()).ceil() as usize;
    let mut senders = Vec::with_capacity(burst);
    for _ in 0..burst {
        senders.push(connect(addr).await?);
    }
    let (mut bursty_sent, mut bursty_admitted) = (0, 0);
    let mut next = tokio::time::Instant::now();
    for _ in 0..rounds {
        tokio::time::sleep_until(next).await;
        next += period;
        let tasks: Vec<_> = senders
            .drain(..)
            .map(|mut s| {
                tokio::spawn(async move {
                    let (outcome, _) = get(&mut s, addr).await;
                    (s, outcome)
                })
            })
            .collect();
        for task in tasks {
            let (s, outcome) = task.await?;
            bursty_sent += 1;
            bursty_admitted += u64::from(outcome == Outcome::Allowed);
            senders.push(s);
        }
    }
    // Let the limit refill, then the flood: 4 connections at full speed for 5 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (flood, secs) = closed_loop(addr, 4, Duration::from_secs(5)).await?;
    Ok(AtLimit {
        peer: peer.to_owned(),
        bursty_sent,
        bursty_admitted,
        flood_sent: flood.sent(),
        flood_admitted: flood.allowed,
        flood_limit: (limit as f64 * secs).round() as u64,
    })
}

/// Runs the scenario.
pub async fn run(args: &GatewayArgs) -> anyhow::Result<Report> {
    let floodgate_bin = floodgate_binary(args.floodgate.as_deref())?;
    let nginx_bin = args.nginx.clone();
    let scratch = ScratchDir::new("gateway")?;
    let dir = scratch.path();
    let upstream = Upstream::start()?;
    let up = upstream.addr();
    wait_for_port(up, STARTUP).await?;
    let duration = args.duration;
    let connections = args.connections;
    let warm = Duration::from_secs(1);

    // 1. The allowed path.
    let mut allowed_path = Vec::new();
    closed_loop(up, connections, warm).await?;
    let (direct, secs) = closed_loop(up, connections, duration).await?;
    allowed_path.push(measured("upstream directly", &direct, secs));
    let roomy = "    algorithm: token_bucket\n    rate: 1000000/s\n    burst: 1000000";
    {
        let (_process, addr) = floodgate(&floodgate_bin, dir, up, roomy).await?;
        closed_loop(addr, connections, warm).await?;
        let (tally, secs) = closed_loop(addr, connections, duration).await?;
        allowed_path.push(measured("floodgate gateway", &tally, secs));
    }
    {
        let (_process, addr) = nginx(&nginx_bin, dir, up, "10000000r/s", " burst=10000000 nodelay").await?;
        closed_loop(addr, connections, warm).await?;
        let (tally, secs) = closed_loop(addr, connections, duration).await?;
        allowed_path.push(measured("nginx limit_req", &tally, secs));
    }
    let base = &allowed_path[0].latency;
    let added = |f: fn(&Percentiles) -> f64| -> Vec<(String, f64)> {
        allowed_path[1..].iter().map(|m| (m.name.clone(), f(&m.latency) - f(base))).collect()
    };
    let added_p50_us = added(|p| p.p50_us);
    let added_p99_us = added(|p| p.p99_us);

    // 2. At the limit.
    let limit = args.limit;
    let mut results = Vec::new();
    {
        let rule = format!("    algorithm: sliding_log\n    limit: {limit}\n    window: 1s");
        let (_process, addr) = floodgate(&floodgate_bin, dir, up, &rule).await?;
        results.push(at_limit("floodgate sliding_log", addr, limit, args.burst).await?);
    }
    {
        let (_process, addr) = nginx(&nginx_bin, dir, up, &format!("{limit}r/s"), "").await?;
        results.push(at_limit("nginx burst=0", addr, limit, args.burst).await?);
    }
    {
        let (_process, addr) =
            nginx(&nginx_bin, dir, up, &format!("{limit}r/s"), &format!(" burst={limit} nodelay")).await?;
        results.push(at_limit(&format!("nginx burst={limit} nodelay"), addr, limit, args.burst).await?);
    }

    // 3. The denied path: one key over its limit, flooded like the allowed path.
    let mut denied_path = Vec::new();
    {
        let rule = "    algorithm: fixed_window\n    limit: 1\n    window: 1h";
        let (_process, addr) = floodgate(&floodgate_bin, dir, up, rule).await?;
        closed_loop(addr, connections, warm).await?;
        let (tally, secs) = closed_loop(addr, connections, duration).await?;
        denied_path.push(measured("floodgate gateway", &tally, secs));
    }
    {
        // nginx's slowest rate: one request a minute.
        let (_process, addr) = nginx(&nginx_bin, dir, up, "1r/m", "").await?;
        closed_loop(addr, connections, warm).await?;
        let (tally, secs) = closed_loop(addr, connections, duration).await?;
        denied_path.push(measured("nginx limit_req", &tally, secs));
    }
    let denied_over_allowed: Vec<(String, f64)> = denied_path
        .iter()
        .zip(&allowed_path[1..])
        .map(|(d, a)| (d.name.clone(), d.requests_per_sec / a.requests_per_sec.max(f64::MIN_POSITIVE)))
        .collect();

    let floodgate_tally = &allowed_path[1];
    let mut grid = Grid {
        head: "allowed path".into(),
        columns: vec![
            "req/s".into(),
            "p50".into(),
            "p99".into(),
            "added p50".into(),
            "added p99".into(),
            "errors".into(),
        ],
        rows: Vec::new(),
    };
    for (i, m) in allowed_path.iter().enumerate() {
        let (a50, a99) = if i == 0 {
            ("-".to_owned(), "-".to_owned())
        } else {
            (crate::report::human_us(added_p50_us[i - 1].1), crate::report::human_us(added_p99_us[i - 1].1))
        };
        grid.rows.push((
            m.name.clone(),
            vec![
                format!("{:.0}", m.requests_per_sec),
                crate::report::human_us(m.latency.p50_us),
                crate::report::human_us(m.latency.p99_us),
                a50,
                a99,
                m.errors.to_string(),
            ],
        ));
    }
    let mut limits = Grid {
        head: format!("at {limit}/s per IP"),
        columns: vec![
            "bursty sent".into(),
            "bursty admitted".into(),
            "flood sent".into(),
            "flood admitted".into(),
            "limit × s".into(),
        ],
        rows: Vec::new(),
    };
    for r in &results {
        limits.rows.push((
            r.peer.clone(),
            vec![
                r.bursty_sent.to_string(),
                r.bursty_admitted.to_string(),
                r.flood_sent.to_string(),
                r.flood_admitted.to_string(),
                r.flood_limit.to_string(),
            ],
        ));
    }
    let mut refusals = Grid {
        head: "denied path".into(),
        columns: vec![
            "req/s".into(),
            "denied".into(),
            "allowed".into(),
            "p50".into(),
            "p99".into(),
            "÷ allowed path".into(),
        ],
        rows: Vec::new(),
    };
    for (m, (_, ratio)) in denied_path.iter().zip(&denied_over_allowed) {
        refusals.rows.push((
            m.name.clone(),
            vec![
                format!("{:.0}", m.requests_per_sec),
                m.denied.to_string(),
                m.allowed.to_string(),
                crate::report::human_us(m.latency.p50_us),
                crate::report::human_us(m.latency.p99_us),
                format!("{ratio:.2}x"),
            ],
        ));
    }
    let summary = crate::report::Summary {
        scenario: "gateway".into(),
        target: "floodgate gateway vs nginx limit_req".into(),
        duration_s: duration.as_secs_f64(),
        sent: floodgate_tally.allowed + floodgate_tally.denied + floodgate_tally.errors,
        decisions_per_sec: floodgate_tally.requests_per_sec,
        allowed: floodgate_tally.allowed,
        denied: floodgate_tally.denied,
        errors: Default::default(),
        latency: floodgate_tally.latency,
    };
    let details = Details {
        connections,
        duration_s: duration.as_secs_f64(),
        allowed_path: allowed_path.clone(),
        added_p50_us,
        added_p99_us,
        at_limit: results,
        denied_path,
        denied_over_allowed,
    };
    let mut report = Report::new(summary, details);
    report.grids = vec![grid, limits, refusals];
    Ok(report)
}
