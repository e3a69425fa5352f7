//! `upstreams`: Floodgate's gateway in front of the same upstream over each protocol it speaks to
//! upstreams, in one run — what HTTP/2 (one connection carrying many requests) costs or saves
//! beside HTTP/1.1 keep-alive (a connection per request in flight).
//!
//! - `http1`: `upstream: http://127.0.0.1:PORT`, the gateway's inline HTTP/1.1 path;
//! - `h2c`: `{url: http://127.0.0.1:PORT, http2: true}`, HTTP/2 with prior knowledge;
//! - `https1`: `{url: https://127.0.0.1:PORT, tls: {ca}}`, HTTP/1.1 over TLS;
//! - `https2`: `{url: https://127.0.0.1:PORT, http2: true, tls: {ca}}`, HTTP/2 over TLS by ALPN.
//!
//! Each configuration gets an upstream of its own (the harness's: `200 ok` on a thread of its own;
//! HTTP/1.1 and h2c on one port for the cleartext ones, TLS with ALPN `h2` and `http/1.1` and a
//! certificate of a CA this run makes for the others) and a `floodgate serve --gateway` process of
//! its own, whose per-IP limit never denies (every request is checked, none refused). Then a closed
//! loop on `--connections` keep-alive connections to the gateway, warmed up for 1 s, is measured for
//! `--duration`: requests per second, p50/p99/p99.9, errors, the requests that reached the upstream
//! (and over which HTTP version), and the upstream connections the gateway used — those open when
//! the measurement started and those it opened during it. A fresh gateway per configuration makes
//! those connections its own. Throughput is also given as a ratio to `http1`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use floodgate_testkit::tls::TestCerts;
use serde::Serialize;

use crate::Usage;
use crate::args::{MAX_DURATION, Output, parse_duration};
use crate::harness::keys::KeyDistribution;
use crate::harness::process::{self, ScratchDir, floodgate_binary, wait_for_port};
use crate::harness::target::{Shape, Target};
use crate::harness::upstream::{CountsNow, MAX_STREAMS, Protocols, Upstream};
use crate::report::math::{Percentiles, percentiles};
use crate::report::progress::Progress;
use crate::report::{Grid, Report, Tally};
use crate::scenarios::Run;
use crate::scenarios::throughput::{Load, closed_loop};

/// How the gateway reaches the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Plain HTTP/1.1 keep-alive (`upstream: http://…`): the gateway's inline path.
    Http1,
    /// HTTP/2 with prior knowledge over cleartext (`{url: http://…, http2: true}`).
    H2c,
    /// HTTP/1.1 over TLS (`{url: https://…, tls: {ca: …}}`).
    Https1,
    /// HTTP/2 over TLS, negotiated by ALPN (`{url: https://…, http2: true, tls: {ca: …}}`).
    Https2,
}

impl Protocol {
    /// Its name on the command line and in the report.
    fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "http1",
            Protocol::H2c => "h2c",
            Protocol::Https1 => "https1",
            Protocol::Https2 => "https2",
        }
    }

    /// Whether the upstream is reached over TLS.
    fn tls(self) -> bool {
        matches!(self, Protocol::Https1 | Protocol::Https2)
    }

    /// The route's `upstream` value for an upstream on `port`, its certificate checked against
    /// the CA bundle `ca` (TLS only). By address, as `http1`'s: no name to resolve, and the test
    /// certificate names `127.0.0.1`.
    fn upstream_yaml(self, port: u16, ca: &Path) -> String {
        let url =
            if self.tls() { format!("https://127.0.0.1:{port}") } else { format!("http://127.0.0.1:{port}") };
        match self {
            Protocol::Http1 => url,
            Protocol::H2c => format!("{{ url: \"{url}\", http2: true }}"),
            Protocol::Https1 => format!("{{ url: \"{url}\", tls: {{ ca: \"{}\" }} }}", ca.display()),
            Protocol::Https2 => {
                format!("{{ url: \"{url}\", http2: true, tls: {{ ca: \"{}\" }} }}", ca.display())
            }
        }
    }
}

/// `upstreams`.
#[derive(Debug, Clone, Args)]
pub struct UpstreamsArgs {
    /// The configurations to measure, in this order (default: all four).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Protocol::Http1, Protocol::H2c, Protocol::Https1, Protocol::Https2])]
    pub protocols: Vec<Protocol>,
    /// Keep-alive connections to the gateway, each with one request in flight (closed loop).
    #[arg(long, short = 'c', default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub connections: u64,
    /// How long each measurement lasts (after 1 s of warm-up).
    #[arg(long, short, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// The `floodgate` binary (default: beside `floodgate-bench`).
    #[arg(long, value_name = "PATH")]
    pub floodgate: Option<PathBuf>,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for UpstreamsArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// One configuration, measured.
#[derive(Debug, Clone, Serialize)]
struct Point {
    protocol: Protocol,
    /// The route's `upstream`, as configured.
    upstream: String,
    /// Answers (allowed and denied) per second of the measurement.
    requests_per_sec: f64,
    /// Requests answered 2xx: let through and answered by the upstream.
    allowed: u64,
    /// Requests the gateway refused (429; its limit never denies).
    denied: u64,
    /// Requests without an answer, or with a status other than 2xx and 429.
    errors: u64,
    /// The errors per kind (`timeout`, `http_5xx`, …).
    errors_by_kind: BTreeMap<String, u64>,
    /// Latency through the gateway, from send to the whole answer.
    #[serde(flatten)]
    latency: Percentiles,
    /// Upstream connections the gateway used in the measurement: open when it started, or opened
    /// during it.
    upstream_connections: u64,
    /// Of those, the ones opened during the measurement.
    upstream_connections_opened: u64,
    /// Requests that reached the upstream during the measurement.
    upstream_requests: u64,
    /// Of those, the ones over HTTP/2.
    upstream_http2_requests: u64,
    /// `requests_per_sec` ÷ `http1`'s (`null` when `http1` is not measured).
    ratio_to_http1: Option<f64>,
}

/// The scenario's own fields (`duration_s` is the summary's).
#[derive(Debug, Serialize)]
struct Details {
    /// Connections to each gateway.
    connections: u64,
    /// The upstream's `SETTINGS_MAX_CONCURRENT_STREAMS` on its HTTP/2 connections.
    upstream_max_streams: u32,
    /// Each configuration, in the order measured.
    points: Vec<Point>,
}

/// How long the upstream may take to accept connections.
const STARTUP: Duration = Duration::from_secs(10);
/// Per-request timeout.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Warm-up before each measurement: the gateway's connections to the upstream are opened in it.
const WARMUP: Duration = Duration::from_secs(1);
/// Distinct keys of the load (the limit is per IP: they only vary the requests).
const KEYS: u64 = 10_000;
/// The gateway's limit: per IP, far above any load, so none is refused.
const ROOMY: &str = "rules:\n  - name: per-ip\n    key: [ip]\n    algorithm: token_bucket\n    rate: 1000000/s\n    burst: 1000000\n";

/// Runs `upstreams`.
pub async fn run(args: &UpstreamsArgs) -> anyhow::Result<Report> {
    if args.duration.is_zero() || args.duration > MAX_DURATION {
        return Err(Usage("--duration must be between 1ms and 1h".into()).into());
    }
    if args.protocols.is_empty() {
        return Err(Usage("--protocols: at least one of http1, h2c, https1, https2".into()).into());
    }
    for (i, p) in args.protocols.iter().enumerate() {
        if args.protocols[..i].contains(p) {
            return Err(Usage(format!("--protocols: {} is given twice", p.name())).into());
        }
    }
    let floodgate = floodgate_binary(args.floodgate.as_deref())?;
    let scratch = ScratchDir::new("upstreams")?;
    let certs = if args.protocols.iter().any(|p| p.tls()) {
        // The testkit's certificates panic rather than fail; the run says what could not be made.
        Some(std::panic::catch_unwind(TestCerts::generate).map_err(|_| {
            anyhow::anyhow!(
                "cannot make the upstream's test certificates in {}",
                std::env::temp_dir().display()
            )
        })?)
    } else {
        None
    };
    let mut points = Vec::new();
    for &protocol in &args.protocols {
        let point = measure(args, protocol, &floodgate, scratch.path(), certs.as_ref())
            .await
            .with_context(|| format!("upstreams: {}", protocol.name()))?;
        points.push(point);
    }
    let http1 = points.iter().find(|p| p.protocol == Protocol::Http1).map(|p| p.requests_per_sec);
    for p in &mut points {
        p.ratio_to_http1 = http1.filter(|r| *r > 0.0).map(|r| p.requests_per_sec / r);
    }
    Ok(report(args, points))
}

/// One configuration: its upstream and gateway started, warmed up, measured, stopped.
async fn measure(
    args: &UpstreamsArgs,
    protocol: Protocol,
    floodgate: &Path,
    dir: &Path,
    certs: Option<&TestCerts>,
) -> anyhow::Result<Point> {
    let (serving, ca) = match (protocol.tls(), certs) {
        (true, Some(certs)) => {
            (Protocols::Tls { cert: certs.server_cert(), key: certs.server_key() }, certs.ca())
        }
        (true, None) => anyhow::bail!("no certificate for the TLS upstream"),
        (false, _) => (Protocols::Cleartext, PathBuf::new()),
    };
    let upstream = Upstream::serving(&serving).context("starting the upstream")?;
    wait_for_port(upstream.addr(), STARTUP).await?;
    let upstream_yaml = protocol.upstream_yaml(upstream.addr().port(), &ca);
    let yaml = format!(
        "{ROOMY}gateway:\n  routes:\n    - name: app\n      match: {{ path: \"/{{*rest}}\" }}\n      upstream: {upstream_yaml}\n"
    );
    let (_gateway, addr) = process::gateway(floodgate, dir, &yaml)
        .await
        .with_context(|| format!("starting the gateway in front of {upstream_yaml}"))?;
    let target = Target::route(&format!("http://{addr}/bench"), "GET", "x-user-id", TIMEOUT, false)?
        .on_connections(usize::try_from(args.connections).unwrap_or(usize::MAX))
        .await
        .with_context(|| format!("opening {} connections to the gateway on {addr}", args.connections))?;
    let load = Load {
        target,
        shape: Arc::new(Shape::default()),
        keys: KeyDistribution::uniform(KEYS),
        cost: 1,
        seed: 7,
    };
    let hidden = Progress::new("warm-up", 0, true);
    let _ = closed_loop(&load, args.connections, WARMUP, u64::MAX, &hidden).await;
    let counts = upstream.counts();
    let before = counts.now();
    let progress = Progress::new(protocol.name(), 0, args.output.quiet);
    let (tally, wall) = closed_loop(&load, args.connections, args.duration, u64::MAX, &progress).await;
    progress.finish();
    let after = counts.now();
    Ok(point(protocol, upstream_yaml, &tally, wall, before, after))
}

/// The point of `protocol` from its measurement's `tally` over `wall`, and the upstream's counts
/// `before` and `after` it.
fn point(
    protocol: Protocol,
    upstream: String,
    tally: &Tally,
    wall: Duration,
    before: CountsNow,
    after: CountsNow,
) -> Point {
    let secs = wall.as_secs_f64();
    let opened = after.accepted.saturating_sub(before.accepted);
    let http1 = after.http1_requests.saturating_sub(before.http1_requests);
    let http2 = after.http2_requests.saturating_sub(before.http2_requests);
    Point {
        protocol,
        upstream,
        requests_per_sec: if secs > 0.0 { (tally.allowed + tally.denied) as f64 / secs } else { 0.0 },
        allowed: tally.allowed,
        denied: tally.denied,
        errors: tally.error_count(),
        errors_by_kind: tally.errors.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        latency: percentiles(&tally.latency),
        upstream_connections: before.open + opened,
        upstream_connections_opened: opened,
        upstream_requests: http1 + http2,
        upstream_http2_requests: http2,
        ratio_to_http1: None,
    }
}

fn report(args: &UpstreamsArgs, points: Vec<Point>) -> Report {
    let us = crate::report::human_us;
    let mut grid = Grid {
        head: format!("upstream, {} connections", args.connections),
        columns: ["req/s", "÷ http1", "p50", "p99", "p99.9", "errors", "upstream conns", "opened", "over h2"]
            .map(String::from)
            .to_vec(),
        rows: Vec::new(),
    };
    for p in &points {
        grid.rows.push((
            p.protocol.name().to_owned(),
            vec![
                format!("{:.0}", p.requests_per_sec),
                p.ratio_to_http1.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x")),
                us(p.latency.p50_us),
                us(p.latency.p99_us),
                us(p.latency.p999_us),
                p.errors.to_string(),
                p.upstream_connections.to_string(),
                p.upstream_connections_opened.to_string(),
                format!("{}/{}", p.upstream_http2_requests, p.upstream_requests),
            ],
        ));
    }
    // The common fields are the first configuration's (`http1` by default).
    let first = points.first();
    let summary = crate::report::Summary {
        scenario: "upstreams".into(),
        target: "floodgate gateway to its upstream over http1, h2c, https1, https2".into(),
        duration_s: args.duration.as_secs_f64(),
        sent: first.map_or(0, |p| p.allowed + p.denied + p.errors),
        decisions_per_sec: first.map_or(0.0, |p| p.requests_per_sec),
        allowed: first.map_or(0, |p| p.allowed),
        denied: first.map_or(0, |p| p.denied),
        errors: crate::report::Errors {
            total: first.map_or(0, |p| p.errors),
            by_kind: first.map(|p| p.errors_by_kind.clone()).unwrap_or_default(),
        },
        latency: first.map(|p| p.latency).unwrap_or_default(),
    };
    let details = Details { connections: args.connections, upstream_max_streams: MAX_STREAMS, points };
    let mut report = Report::new(summary, details);
    report.grids = vec![grid];
    report
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Scenario};

    fn parse(args: &[&str]) -> Result<UpstreamsArgs, clap::Error> {
        let cli = Cli::try_parse_from([&["floodgate-bench", "upstreams"], args].concat())?;
        match cli.scenario {
            Scenario::Upstreams(args) => Ok(args),
            other => panic!("not upstreams: {other:?}"),
        }
    }

    #[test]
    fn every_protocol_is_measured_by_default_and_named_alike_on_the_command_line_and_in_json() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.protocols, [Protocol::Http1, Protocol::H2c, Protocol::Https1, Protocol::Https2]);
        assert_eq!((args.connections, args.duration), (64, Duration::from_secs(10)));
        for p in args.protocols {
            assert_eq!(serde_json::to_value(p).unwrap(), p.name());
            assert_eq!(parse(&["--protocols", p.name()]).unwrap().protocols, [p]);
        }
        assert!(parse(&["--protocols", "http3"]).is_err());
    }

    #[tokio::test]
    async fn a_protocol_given_twice_or_a_zero_duration_is_a_usage_error() {
        for argv in [&["--protocols", "h2c,http1,h2c"][..], &["-d", "0s"]] {
            let error = run(&parse(argv).unwrap()).await.unwrap_err();
            assert!(error.downcast_ref::<Usage>().is_some(), "{argv:?}: {error}");
        }
    }

    #[test]
    fn each_configuration_reaches_the_upstream_as_the_gateway_documents() {
        let ca = Path::new("/etc/ca.pem");
        assert_eq!(Protocol::Http1.upstream_yaml(8080, ca), "http://127.0.0.1:8080");
        assert_eq!(Protocol::H2c.upstream_yaml(8080, ca), "{ url: \"http://127.0.0.1:8080\", http2: true }");
        assert_eq!(
            Protocol::Https1.upstream_yaml(8443, ca),
            "{ url: \"https://127.0.0.1:8443\", tls: { ca: \"/etc/ca.pem\" } }"
        );
        assert_eq!(
            Protocol::Https2.upstream_yaml(8443, ca),
            "{ url: \"https://127.0.0.1:8443\", http2: true, tls: { ca: \"/etc/ca.pem\" } }"
        );
    }

    #[test]
    fn the_connections_used_are_those_open_at_the_start_and_those_opened_since() {
        let mut tally = Tally::default();
        tally.record(crate::report::Outcome::Allowed, 1_000, 0);
        tally.record(crate::report::Outcome::Allowed, 3_000, 500);
        let before = CountsNow { accepted: 9, open: 2, http1_requests: 100, http2_requests: 40 };
        let after = CountsNow { accepted: 10, open: 3, http1_requests: 100, http2_requests: 42 };
        let p = point(Protocol::H2c, "x".into(), &tally, Duration::from_secs(2), before, after);
        assert_eq!((p.upstream_connections, p.upstream_connections_opened), (3, 1));
        assert_eq!((p.upstream_requests, p.upstream_http2_requests), (2, 2));
        assert_eq!(p.requests_per_sec, 1.0);
    }
}
