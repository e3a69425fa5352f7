//! The report: what every scenario measures ([`Tally`]), its JSON form ([`Report`], field names
//! documented in `docs/bench.md` and stable) and the human table; with what it is made of — the
//! math of spans, percentiles and timelines ([`math`]), the SVG ([`plot`]), the progress bar
//! ([`progress`]) and whole units of time (`units`).

pub mod math;
pub mod plot;
pub mod progress;
pub(crate) mod units;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use self::math::{Percentiles, Timeline};

/// The error of a request an open-loop driver dropped without sending it (too many in flight).
pub const DROPPED: &str = "dropped";

/// What one decision came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed (HTTP 200, gRPC `OK`, `Verdict::allowed`).
    Allowed,
    /// Denied (HTTP 429, gRPC `OVER_LIMIT`).
    Denied,
    /// No decision: the kind of error (`connect`, `timeout`, `http_500`, `grpc_unavailable`,
    /// `dropped` for open-loop requests over `--max-in-flight`, ...).
    Error(&'static str),
}

/// Counts, latencies and a timeline, accumulated by one worker and merged.
#[derive(Debug, Clone)]
pub struct Tally {
    /// Allowed decisions.
    pub allowed: u64,
    /// Denied decisions.
    pub denied: u64,
    /// Errors by kind.
    pub errors: BTreeMap<&'static str, u64>,
    /// Latency in nanoseconds.
    pub latency: Histogram<u64>,
    /// Admitted/denied per 100 ms.
    pub timeline: Timeline,
}

/// The timeline bucket width, 100 ms.
pub const BUCKET_MS: u64 = 100;

impl Default for Tally {
    fn default() -> Self {
        Tally {
            allowed: 0,
            denied: 0,
            errors: BTreeMap::new(),
            latency: math::latency_histogram(),
            timeline: Timeline::new(BUCKET_MS),
        }
    }
}

impl Tally {
    /// Records one request: what it came to, how long it took, when it was sent (ms from start).
    pub fn record(&mut self, outcome: Outcome, latency_ns: u64, at_ms: u64) {
        match outcome {
            Outcome::Allowed => {
                self.allowed += 1;
                self.timeline.record(at_ms, true);
            }
            Outcome::Denied => {
                self.denied += 1;
                self.timeline.record(at_ms, false);
            }
            Outcome::Error(kind) => *self.errors.entry(kind).or_default() += 1,
        }
        // A request the driver dropped (too many in flight) was never sent: it has no latency, and
        // counting one would pull the percentiles down. It counts as an error.
        if outcome == Outcome::Error(DROPPED) {
            return;
        }
        // Saturates at the histogram's top (60 s) rather than losing the sample.
        let _ = self.latency.record(latency_ns.clamp(1, self.latency.high()));
    }

    /// How many requests have a recorded time (every one but those dropped unsent).
    pub fn timed(&self) -> u64 {
        self.latency.len()
    }

    /// Adds `other` into this tally.
    pub fn merge(&mut self, other: &Tally) {
        self.allowed += other.allowed;
        self.denied += other.denied;
        for (k, v) in &other.errors {
            *self.errors.entry(k).or_default() += v;
        }
        let _ = self.latency.add(&other.latency);
        self.timeline.merge(&other.timeline);
    }

    /// Errors in total.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Requests sent: allowed + denied + errors.
    pub fn sent(&self) -> u64 {
        self.allowed + self.denied + self.error_count()
    }

    /// The common part of a report for this tally over `duration_s` (decisions/s over `wall_s`).
    pub fn summary(&self, scenario: &str, target: &str, duration_s: f64, wall_s: f64) -> Summary {
        Summary {
            scenario: scenario.to_owned(),
            target: target.to_owned(),
            duration_s,
            sent: self.sent(),
            decisions_per_sec: if wall_s > 0.0 { (self.allowed + self.denied) as f64 / wall_s } else { 0.0 },
            allowed: self.allowed,
            denied: self.denied,
            errors: self.errors_report(),
            latency: math::percentiles(&self.latency),
        }
    }

    /// The errors, for a report.
    pub fn errors_report(&self) -> Errors {
        Errors {
            total: self.error_count(),
            by_kind: self.errors.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    /// The counts of a report's phase: this tally, sent from `from_us` to `to_us` (µs from the
    /// start of the load).
    pub fn phase(&self, from_us: u64, to_us: u64) -> PhaseCounts {
        let span_s = to_us.saturating_sub(from_us) as f64 / 1e6;
        PhaseCounts {
            from_ms: from_us as f64 / 1000.0,
            to_ms: to_us as f64 / 1000.0,
            sent: self.sent(),
            sent_per_sec: if span_s > 0.0 { self.sent() as f64 / span_s } else { 0.0 },
            allowed: self.allowed,
            denied: self.denied,
            errors: self.errors_report(),
        }
    }
}

/// What the requests of one phase of a run came to (flattened into a scenario's phase report).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseCounts {
    /// The phase, by send time, in ms from the start of the load.
    pub from_ms: f64,
    /// Its end.
    pub to_ms: f64,
    /// Requests sent in it.
    pub sent: u64,
    /// Sent per second of the phase.
    pub sent_per_sec: f64,
    /// Allowed.
    pub allowed: u64,
    /// Denied.
    pub denied: u64,
    /// Errors.
    pub errors: Errors,
}

/// Errors: the total and the count per kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Errors {
    /// All errors.
    pub total: u64,
    /// Per kind (`connect`, `timeout`, `http_<status>`, `grpc_<code>`, `dropped`, `engine`).
    pub by_kind: BTreeMap<String, u64>,
}

/// The fields every report has.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// `throughput`, `boundary`, `fairness`, `instances` or `outage`.
    pub scenario: String,
    /// What was driven: `http://127.0.0.1:8080`, `grpc://127.0.0.1:8081`, `in-process`,
    /// `simulated` (in-process engine on a simulated clock), or a list for `instances`.
    pub target: String,
    /// The measured span in seconds (simulated seconds for simulated runs).
    pub duration_s: f64,
    /// Requests sent: `allowed + denied + errors.total`.
    pub sent: u64,
    /// Decisions (allowed + denied) per wall-clock second.
    pub decisions_per_sec: f64,
    /// Allowed.
    pub allowed: u64,
    /// Denied.
    pub denied: u64,
    /// Errors by kind.
    pub errors: Errors,
    /// Latency percentiles (`p50_us`, `p90_us`, `p99_us`, `p999_us`, `max_us`).
    #[serde(flatten)]
    pub latency: Percentiles,
}

/// A full report: the summary and the scenario's own fields, flattened into one JSON object.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The common fields.
    #[serde(flatten)]
    pub summary: Summary,
    /// The scenario's fields.
    #[serde(flatten)]
    pub details: serde_json::Map<String, serde_json::Value>,
    /// Admitted/denied per 100 ms (not in the JSON: it goes to `--plot`).
    #[serde(skip)]
    pub timeline: Option<Timeline>,
    /// Latency (not in the JSON: it goes to `--plot`).
    #[serde(skip)]
    pub latency: Option<Histogram<u64>>,
    /// What the scenario adds to the plot's timeline (a fault interval, errors per bucket).
    #[serde(skip)]
    pub overlay: plot::Overlay,
    /// Tables printed under the summary (the table leaves out details that are JSON objects, lists
    /// of them, or empty lists).
    #[serde(skip)]
    pub grids: Vec<Grid>,
}

impl Report {
    /// A report of `summary` and `details` (a serializable struct of the scenario's fields).
    pub fn new(summary: Summary, details: impl Serialize) -> Self {
        let details = match serde_json::to_value(details) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        Report {
            summary,
            details,
            timeline: None,
            latency: None,
            overlay: plot::Overlay::default(),
            grids: Vec::new(),
        }
    }

    /// The JSON report.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The human summary: one `name  value` line per field.
    pub fn table(&self) -> String {
        let s = &self.summary;
        let mut rows: Vec<(String, String)> = vec![
            ("scenario".into(), s.scenario.clone()),
            ("target".into(), s.target.clone()),
            ("duration".into(), format!("{:.2} s", s.duration_s)),
            ("sent".into(), s.sent.to_string()),
            ("decisions/s".into(), format!("{:.0}", s.decisions_per_sec)),
            ("allowed".into(), s.allowed.to_string()),
            ("denied".into(), s.denied.to_string()),
        ];
        let errors = if s.errors.by_kind.is_empty() {
            "0".to_owned()
        } else {
            let kinds: Vec<String> = s.errors.by_kind.iter().map(|(k, v)| format!("{k} {v}")).collect();
            format!("{} ({})", s.errors.total, kinds.join(", "))
        };
        rows.push(("errors".into(), errors));
        let l = &s.latency;
        rows.push((
            "latency p50/p90/p99/p99.9/max".into(),
            format!(
                "{} / {} / {} / {} / {}",
                human_us(l.p50_us),
                human_us(l.p90_us),
                human_us(l.p99_us),
                human_us(l.p999_us),
                human_us(l.max_us)
            ),
        ));
        for (k, v) in &self.details {
            let v = match v {
                // Objects, lists of them and empty lists are left to the scenario's grids.
                serde_json::Value::Object(_) => continue,
                serde_json::Value::Array(items)
                    if items.is_empty() || items.iter().any(serde_json::Value::is_object) =>
                {
                    continue;
                }
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => match n.as_f64() {
                    Some(f) if n.is_f64() => format!("{f:.4}"),
                    _ => n.to_string(),
                },
                other => other.to_string(),
            };
            rows.push((k.replace('_', " "), v));
        }
        let width = rows.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
        let mut out = String::new();
        for (k, v) in rows {
            let _ = writeln!(out, "  {k:<width$}  {v}");
        }
        for grid in &self.grids {
            out.push('\n');
            out.push_str(&grid.render());
        }
        out
    }
}

/// A table with a column per part of a run (`outage`'s phases), printed under the summary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grid {
    /// The heading of the first column (`phase`).
    pub head: String,
    /// The columns' titles.
    pub columns: Vec<String>,
    /// Each row: its label and one cell per column.
    pub rows: Vec<(String, Vec<String>)>,
}

impl Grid {
    /// One row per error kind any of `columns` has (`  timeout`, …, in name order), with each
    /// column's count.
    pub fn error_rows(columns: &[&Errors]) -> Vec<(String, Vec<String>)> {
        let mut kinds: Vec<&String> = columns.iter().flat_map(|e| e.by_kind.keys()).collect();
        kinds.sort();
        kinds.dedup();
        kinds
            .into_iter()
            .map(|kind| {
                let cells = columns.iter().map(|e| e.by_kind.get(kind).copied().unwrap_or(0).to_string());
                (format!("  {kind}"), cells.collect())
            })
            .collect()
    }

    /// The grid, aligned: labels left, cells right.
    pub fn render(&self) -> String {
        let first = self.rows.iter().map(|(l, _)| l.chars().count()).chain([self.head.chars().count()]);
        let first = first.max().unwrap_or(0);
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| {
                let cells = self.rows.iter().filter_map(|(_, c)| c.get(i)).map(|c| c.chars().count());
                cells.chain([self.columns[i].chars().count()]).max().unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let mut line = |label: &str, cells: &mut dyn Iterator<Item = &str>| {
            let _ = write!(out, "  {label:<first$}");
            for (cell, w) in cells.zip(&widths) {
                let _ = write!(out, "  {cell:>w$}");
            }
            out.push('\n');
        };
        line(&self.head, &mut self.columns.iter().map(String::as_str));
        for (label, cells) in &self.rows {
            line(label, &mut cells.iter().map(String::as_str));
        }
        out
    }
}

/// Microseconds for humans: `850 ns`, `12.3 µs`, `4.56 ms`; a difference below zero (a peer's
/// latency under its upstream's, in a noisy run) with its sign: `-56.92 ms`.
pub fn human_us(us: f64) -> String {
    if us < 0.0 {
        format!("-{}", human_us(-us))
    } else if us < 1.0 {
        format!("{:.0} ns", us * 1000.0)
    } else if us < 1000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sent_is_allowed_plus_denied_plus_errors_and_merges_add_up() {
        let mut a = Tally::default();
        a.record(Outcome::Allowed, 1_000, 0);
        a.record(Outcome::Denied, 2_000, 150);
        let mut b = Tally::default();
        b.record(Outcome::Error("timeout"), 5_000_000, 10);
        b.record(Outcome::Error("timeout"), 5_000_000, 10);
        b.record(Outcome::Error("connect"), 100, 10);
        a.merge(&b);
        let s = a.summary("throughput", "in-process", 1.0, 2.0);
        assert_eq!((s.sent, s.allowed, s.denied, s.errors.total), (5, 1, 1, 3));
        assert_eq!(s.errors.by_kind["timeout"], 2);
        assert_eq!(s.decisions_per_sec, 1.0);
        assert_eq!(a.timeline.totals(), (1, 1));
    }

    #[test]
    fn a_dropped_request_counts_as_an_error_without_a_latency() {
        let mut t = Tally::default();
        t.record(Outcome::Allowed, 2_000_000, 0);
        for _ in 0..9 {
            t.record(Outcome::Error(DROPPED), 1, 0);
        }
        let s = t.summary("latency", "open loop", 1.0, 1.0);
        assert_eq!((s.sent, s.errors.by_kind[DROPPED]), (10, 9));
        assert_eq!(t.timed(), 1, "only the request that was sent is timed");
    }

    #[test]
    fn the_json_has_the_documented_flat_fields() {
        let mut t = Tally::default();
        t.record(Outcome::Allowed, 1_500, 0);
        #[derive(Serialize)]
        struct Boundary {
            limit: u64,
            over_admission_ratio: f64,
        }
        let r = Report::new(
            t.summary("boundary", "simulated", 1.0, 1.0),
            Boundary { limit: 10, over_admission_ratio: 2.0 },
        );
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        for field in [
            "scenario",
            "target",
            "duration_s",
            "sent",
            "decisions_per_sec",
            "allowed",
            "denied",
            "errors",
            "p50_us",
            "p90_us",
            "p99_us",
            "p999_us",
            "max_us",
            "limit",
            "over_admission_ratio",
        ] {
            assert!(v.get(field).is_some(), "{field} missing in {v}");
        }
        assert_eq!(v["errors"]["total"], 0);
        let table = r.table();
        let row = table.lines().find(|l| l.trim_start().starts_with("over admission ratio")).unwrap();
        assert!(row.ends_with(" 2.0000"), "{table}");
    }

    #[test]
    fn grids_print_under_the_summary_and_objects_stay_out_of_it() {
        let mut r = Report::new(
            Tally::default().summary("outage", "x", 1.0, 1.0),
            serde_json::json!({
                "recovered_after_ms": 12.5,
                "phases": {"before": {"sent": 10}},
                "samples": [{"t_s": 1.0}],
                "windows": [],
                "names": ["a", "b"],
            }),
        );
        r.grids.push(Grid {
            head: "phase".into(),
            columns: vec!["before".into(), "during".into()],
            rows: vec![
                ("sent".into(), vec!["10".into(), "4".into()]),
                ("p99".into(), vec!["1.50 ms".into(), "5.10 ms".into()]),
            ],
        });
        let table = r.table();
        assert!(!["phases", "samples", "windows"].iter().any(|f| table.contains(f)), "{table}");
        let names = table.lines().find(|l| l.trim_start().starts_with("names")).unwrap();
        assert!(names.ends_with(" [\"a\",\"b\"]"), "lists of plain values stay: {table}");
        let row = table.lines().find(|l| l.trim_start().starts_with("recovered after ms")).unwrap();
        assert!(row.ends_with(" 12.5000"), "{table}");
        assert!(
            table.ends_with(
                "\n  phase   before   during\n  sent        10        4\n  p99    1.50 ms  5.10 ms\n"
            ),
            "{table}"
        );
    }

    #[test]
    fn microseconds_read_well() {
        assert_eq!(human_us(0.25), "250 ns");
        assert_eq!(human_us(12.34), "12.3 µs");
        assert_eq!(human_us(4560.0), "4.56 ms");
        assert_eq!(human_us(-56_918.016), "-56.92 ms");
        assert_eq!(human_us(-0.5), "-500 ns");
    }
}
