//! The report of a `soak` run: each kind's counts and latency, the wrong answers, the samples,
//! the p99 windows, and each figure's drift against its goal, as JSON and as tables.

use std::time::Duration;

use serde::Serialize;

use super::samples::{Collected, Drift, HotUsers, Sample, Window};
use super::server::Server;
use super::traffic::{Kind, PerKind};
use super::{Plan, SoakArgs};
use crate::args::StoreKind;
use crate::report::math::{Percentiles, percentiles};
use crate::report::{Errors, Grid, Report, Tally, human_us};

/// The goal of memory and descriptors: within 5 % of their first sample after the warm-up.
const HOLDINGS_GOAL: f64 = 0.05;
/// The goal of each kind's p99: within 20 % of its first window after the warm-up.
const P99_GOAL: f64 = 0.20;

// === the report ===

/// How the run went, besides what was collected.
pub(super) struct Ran {
    pub(super) operations: u64,
    pub(super) wall: Duration,
    pub(super) permits: Option<u64>,
    pub(super) interrupted: bool,
}

/// One kind of request over the run.
#[derive(Debug, Serialize)]
struct KindReport {
    sent: u64,
    allowed: u64,
    denied: u64,
    errors: Errors,
    wrong: u64,
    #[serde(flatten)]
    latency: Percentiles,
}

#[derive(Debug, Serialize)]
struct Details {
    store: &'static str,
    server_pid: u32,
    rate: f64,
    operations: u64,
    /// The mix, in percent.
    check_share: f64,
    reserve_share: f64,
    gateway_share: f64,
    users: u64,
    tenants: u64,
    connections: usize,
    warmup_s: f64,
    sample_s: f64,
    p99_window_s: f64,
    keys_from: &'static str,
    interrupted: bool,
    kinds: PerKind<KindReport>,
    wrong: Errors,
    #[serde(flatten)]
    hot: HotUsers,
    permits_held_at_end: Option<u64>,
    samples: Vec<Sample>,
    p99_windows: Vec<Window>,
    drift: Vec<Drift>,
    drift_held: Option<bool>,
    passed: bool,
}

/// Each figure's drift after the warm-up: memory and descriptors from the samples taken at or
/// after it, each kind's p99 from the windows.
fn drifts(collected: &Collected, warmup_s: f64) -> Vec<Drift> {
    let after: Vec<&Sample> = collected.samples.iter().filter(|s| s.t_s >= warmup_s).collect();
    let figure = |f: fn(&Sample) -> Option<u64>| {
        after.iter().map(move |s| (s.t_s, f(s).map(|v| v as f64))).collect::<Vec<_>>()
    };
    let mut drift = vec![
        Drift::of("rss_bytes".into(), HOLDINGS_GOAL, figure(|s| s.rss_bytes)),
        Drift::of("fds".into(), HOLDINGS_GOAL, figure(|s| s.fds)),
    ];
    for kind in Kind::ALL {
        let windows = collected.windows.iter().map(|w| (w.from_s, w.p99_us[kind]));
        drift.push(Drift::of(format!("{}_p99_us", kind.name()), P99_GOAL, windows));
    }
    drift
}

pub(super) fn report(args: &SoakArgs, plan: Plan, server: &Server, collected: Collected, ran: Ran) -> Report {
    let warmup_s = args.warmup.as_secs_f64();
    let drift = drifts(&collected, warmup_s);
    let judged: Vec<bool> = drift.iter().filter_map(|d| d.held).collect();
    let drift_held = (!judged.is_empty()).then(|| judged.iter().all(|&held| held));
    let mut all = Tally::default();
    for kind in Kind::ALL {
        all.merge(&collected.kinds[kind]);
    }
    let kinds = PerKind::from_fn(|kind| {
        let tally = &collected.kinds[kind];
        KindReport {
            sent: tally.sent(),
            allowed: tally.allowed,
            denied: tally.denied,
            errors: tally.errors_report(),
            wrong: collected.wrong_per_kind[kind],
            latency: percentiles(&tally.latency),
        }
    });
    let passed = all.error_count() == 0
        && collected.wrong.total == 0
        && ran.permits == Some(0)
        && drift_held != Some(false)
        && !ran.interrupted;
    let wall_s = ran.wall.as_secs_f64();
    let target = format!(
        "floodgate serve ({}): http://{}, gateway http://{}",
        args.store.name(),
        server.http,
        server.gateway
    );
    let grids = vec![
        kinds_grid(&kinds),
        wrong_grid(&collected.wrong),
        samples_grid(&collected.samples),
        windows_grid(&collected.windows),
        drift_grid(&drift),
    ];
    let details = Details {
        store: args.store.name(),
        server_pid: server.watched.pid(),
        rate: args.rate,
        operations: ran.operations,
        check_share: args.mix.check,
        reserve_share: args.mix.reserve,
        gateway_share: args.mix.gateway,
        users: args.users,
        tenants: args.tenants,
        connections: args.connections,
        warmup_s,
        sample_s: args.sample.as_secs_f64(),
        p99_window_s: args.sample.as_secs_f64() * plan.window_samples as f64,
        keys_from: match args.store {
            StoreKind::Memory => "floodgate_keys",
            StoreKind::Redis => "dbsize",
        },
        interrupted: ran.interrupted,
        kinds,
        wrong: collected.wrong,
        hot: collected.hot,
        permits_held_at_end: ran.permits,
        samples: collected.samples,
        p99_windows: collected.windows,
        drift,
        drift_held,
        passed,
    };
    let mut report = Report::new(all.summary("soak", &target, wall_s, wall_s), details);
    report.timeline = Some(all.timeline);
    report.grids = grids;
    report
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn or_dash<T>(value: Option<T>, f: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "-".to_owned(), f)
}

/// A sample on one line, as the progress bar prints it.
pub(super) fn sample_line(s: &Sample) -> String {
    let p99: Vec<String> = Kind::ALL
        .iter()
        .map(|&kind| format!("{} {}", kind.name(), or_dash(s.p99_us[kind], human_us)))
        .collect();
    format!(
        "{:>7.0} s  rss {}  fds {}  threads {}  keys {}  answered {}  errors {}  wrong {}  p99 {}",
        s.t_s,
        or_dash(s.rss_bytes, mib),
        or_dash(s.fds, |n| n.to_string()),
        or_dash(s.threads, |n| n.to_string()),
        or_dash(s.keys, |n| n.to_string()),
        s.answered,
        s.errors,
        s.wrong,
        p99.join(", ")
    )
}

fn kinds_grid(kinds: &PerKind<KindReport>) -> Grid {
    let row = |label: &str, f: &dyn Fn(&KindReport) -> String| {
        (label.to_owned(), Kind::ALL.iter().map(|&kind| f(&kinds[kind])).collect())
    };
    Grid {
        head: "kind".into(),
        columns: Kind::ALL.iter().map(|kind| kind.name().to_owned()).collect(),
        rows: vec![
            row("sent", &|k| k.sent.to_string()),
            row("allowed", &|k| k.allowed.to_string()),
            row("denied", &|k| k.denied.to_string()),
            row("errors", &|k| k.errors.total.to_string()),
            row("wrong", &|k| k.wrong.to_string()),
            row("p50", &|k| human_us(k.latency.p50_us)),
            row("p99", &|k| human_us(k.latency.p99_us)),
            row("max", &|k| human_us(k.latency.max_us)),
        ],
    }
}

fn wrong_grid(wrong: &Errors) -> Grid {
    let mut rows = vec![("total".to_owned(), vec![wrong.total.to_string()])];
    rows.extend(wrong.by_kind.iter().map(|(reason, n)| (format!("  {reason}"), vec![n.to_string()])));
    Grid { head: "wrong answers".into(), columns: vec!["count".into()], rows }
}

fn samples_grid(samples: &[Sample]) -> Grid {
    let mut columns: Vec<String> =
        ["rss", "fds", "threads", "keys", "answered", "errors", "wrong"].map(str::to_owned).to_vec();
    columns.extend(Kind::ALL.iter().map(|kind| format!("{} p99", kind.name())));
    let rows = samples
        .iter()
        .map(|s| {
            let mut cells = vec![
                or_dash(s.rss_bytes, mib),
                or_dash(s.fds, |n| n.to_string()),
                or_dash(s.threads, |n| n.to_string()),
                or_dash(s.keys, |n| n.to_string()),
                s.answered.to_string(),
                s.errors.to_string(),
                s.wrong.to_string(),
            ];
            cells.extend(Kind::ALL.iter().map(|&kind| or_dash(s.p99_us[kind], human_us)));
            (format!("{:.0} s", s.t_s), cells)
        })
        .collect();
    Grid { head: "sample".into(), columns, rows }
}

fn windows_grid(windows: &[Window]) -> Grid {
    let rows = windows
        .iter()
        .map(|w| {
            let cells = Kind::ALL.iter().map(|&kind| or_dash(w.p99_us[kind], human_us)).collect();
            (format!("{:.0}–{:.0} s", w.from_s, w.to_s), cells)
        })
        .collect();
    Grid {
        head: "p99 window".into(),
        columns: Kind::ALL.iter().map(|kind| format!("{} p99", kind.name())).collect(),
        rows,
    }
}

fn drift_grid(drift: &[Drift]) -> Grid {
    let rows = drift
        .iter()
        .map(|d| {
            let value = |v: f64| match d.figure.as_str() {
                "rss_bytes" => mib(v as u64),
                "fds" => format!("{v:.0}"),
                _ => human_us(v),
            };
            let percent = |p: f64| format!("{:+.1} %", p * 100.0);
            let held = match d.held {
                Some(true) => "held",
                Some(false) => "NOT HELD",
                None => "not judged",
            };
            let baseline = match (d.baseline, d.baseline_at_s) {
                (Some(v), Some(at)) => format!("{} at {at:.0} s", value(v)),
                _ => "-".to_owned(),
            };
            let cells = vec![
                baseline,
                or_dash(d.end, value),
                or_dash(d.end_drift, percent),
                or_dash(d.worst_drift, percent),
                format!("±{:.0} %", d.goal * 100.0),
                held.to_owned(),
            ];
            (d.figure.replace('_', " "), cells)
        })
        .collect();
    Grid {
        head: "drift after the warm-up".into(),
        columns: ["baseline", "end", "end drift", "worst drift", "goal", "verdict"]
            .map(str::to_owned)
            .to_vec(),
        rows,
    }
}
