//! The `flood` report: its JSON fields (docs/bench.md) and the phase table.

use std::collections::BTreeMap;

use serde::Serialize;

use super::load::{PhaseTally, Run, rejected};
use super::{Plan, store_line};
use crate::cli::FloodArgs;
use crate::math::{self, Percentiles};
use crate::plot::{Band, Overlay};
use crate::redis_node::RedisNode;
use crate::report::{Errors, Grid, Outcome, Report, Tally, human_us};
use crate::units::micros;

/// The scenario's own JSON fields (docs/bench.md).
#[derive(Debug, Serialize)]
struct Details {
    /// `memory` or `redis`.
    store: &'static str,
    /// The store section, on one line: `kind: memory, max_keys: 10000, on_full: aggregate`.
    store_section: String,
    /// The memory store's `max_keys`.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_keys: Option<u64>,
    /// `fixed_window 100 per 60000 ms per user`, or the `--config` file.
    policy: String,
    users: u64,
    known_users: u64,
    newcomers: u64,
    /// Requests per second of each normal user.
    per_user_rate: f64,
    /// Normal requests per second once every user sends.
    normal_rate: f64,
    /// `open` (`flood_rate`) or `closed` (`flood_concurrency`).
    flood_mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    flood_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flood_concurrency: Option<u64>,
    before_s: f64,
    during_s: f64,
    /// When the flood started, ms from the start: once every known user had had a decision (at
    /// most `--timeout` after `before`) and the store had been looked at.
    flood_start_ms: f64,
    /// Known users who had had a decision when the flood started (all of them, unless their
    /// requests failed): the store holds their keys.
    known_users_decided_before_flood: u64,
    /// Flood requests: each a key never seen before.
    flood_sent: u64,
    flood_allowed: u64,
    flood_denied: u64,
    /// Known users' rejections over all their requests, both phases: 0 when a full table spares
    /// the users it already holds.
    known_false_rejection_rate: f64,
    /// Newcomers' rejections over all their requests (all sent during the flood).
    newcomer_false_rejection_rate: f64,
    /// `floodgate_keys` (memory) or `dbsize` (Redis): where `keys_*` were read.
    keys_from: &'static str,
    /// The store's keys as the flood started, and after it (`null` if unread).
    keys_before_flood: Option<u64>,
    keys_after_flood: Option<u64>,
    /// This process's resident memory (the server runs in it), in bytes.
    rss_before_flood_bytes: Option<u64>,
    rss_after_flood_bytes: Option<u64>,
    /// Redis's `used_memory`, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_used_memory_before_flood: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_used_memory_after_flood: Option<u64>,
    /// Redis's `used_memory` growth over its key count growth.
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_bytes_per_key: Option<f64>,
    /// `floodgate_overflow_decisions_total` after the flood, all series together (0 when the
    /// server has no such series).
    overflow_decisions_total: u64,
    /// Each series of it, by its labels (`{}` when the server has none).
    overflow_decisions: BTreeMap<String, u64>,
    /// `before` and `during`.
    phases: Phases,
}

/// The two phases.
#[derive(Debug, Serialize)]
struct Phases {
    before: PhaseReport,
    during: PhaseReport,
}

/// What the requests scheduled in one phase came to. Normal users' counts come first, unprefixed
/// (`sent = allowed + denied + errors.total`), then the flood's.
#[derive(Debug, Serialize)]
struct PhaseReport {
    /// The phase, by scheduled send time, ms from the start.
    from_ms: f64,
    to_ms: f64,
    sent: u64,
    sent_per_sec: f64,
    allowed: u64,
    denied: u64,
    errors: Errors,
    /// Denied, or denied by `on_store_error: fail_closed` (`store_fail_closed`): normal users stay
    /// under their limits, so every one is false.
    false_rejections: u64,
    /// `false_rejections / sent`.
    false_rejection_rate: f64,
    known_sent: u64,
    known_false_rejections: u64,
    known_false_rejection_rate: f64,
    known_users_with_a_rejection: u64,
    newcomer_sent: u64,
    newcomer_false_rejections: u64,
    newcomer_false_rejection_rate: f64,
    newcomers_with_a_rejection: u64,
    /// The normal users' latency, from the scheduled send time.
    #[serde(flatten)]
    latency: Percentiles,
    flood_sent: u64,
    flood_sent_per_sec: f64,
    flood_allowed: u64,
    flood_denied: u64,
    flood_errors: Errors,
}

/// The false rejections among a tally's requests.
fn false_rejections(t: &Tally) -> u64 {
    t.denied + t.errors.iter().filter(|(k, _)| rejected(Outcome::Error(k))).map(|(_, v)| v).sum::<u64>()
}

fn rate(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

fn errors(t: &Tally) -> Errors {
    Errors { total: t.error_count(), by_kind: t.errors.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect() }
}

impl PhaseReport {
    fn new(phase: &PhaseTally, from_us: u64, to_us: u64) -> Self {
        let span_s = to_us.saturating_sub(from_us) as f64 / 1e6;
        let per_sec = |n: u64| if span_s > 0.0 { n as f64 / span_s } else { 0.0 };
        let normal = phase.normal();
        let (known, newcomers) = (&phase.known, &phase.newcomers);
        let users_rejected = |flags: &[bool]| flags.iter().filter(|r| **r).count() as u64;
        PhaseReport {
            from_ms: from_us as f64 / 1000.0,
            to_ms: to_us as f64 / 1000.0,
            sent: normal.sent(),
            sent_per_sec: per_sec(normal.sent()),
            allowed: normal.allowed,
            denied: normal.denied,
            errors: errors(&normal),
            false_rejections: false_rejections(&normal),
            false_rejection_rate: rate(false_rejections(&normal), normal.sent()),
            known_sent: known.sent(),
            known_false_rejections: false_rejections(known),
            known_false_rejection_rate: rate(false_rejections(known), known.sent()),
            known_users_with_a_rejection: users_rejected(&phase.known_rejected),
            newcomer_sent: newcomers.sent(),
            newcomer_false_rejections: false_rejections(newcomers),
            newcomer_false_rejection_rate: rate(false_rejections(newcomers), newcomers.sent()),
            newcomers_with_a_rejection: users_rejected(&phase.newcomers_rejected),
            latency: math::percentiles(&normal.latency),
            flood_sent: phase.flood.sent(),
            flood_sent_per_sec: per_sec(phase.flood.sent()),
            flood_allowed: phase.flood.allowed,
            flood_denied: phase.flood.denied,
            flood_errors: errors(&phase.flood),
        }
    }
}

/// The phases side by side, for the table.
fn phase_grid(phases: &Phases) -> Grid {
    let columns = [&phases.before, &phases.during];
    let row = |label: &str, cell: &dyn Fn(&PhaseReport) -> String| {
        (label.to_owned(), columns.iter().map(|p| cell(p)).collect::<Vec<_>>())
    };
    let percent = |r: f64| format!("{:.2} %", r * 100.0);
    let kinds = |errors: &dyn Fn(&PhaseReport) -> &Errors| {
        let mut kinds: Vec<String> = columns.iter().flat_map(|p| errors(p).by_kind.keys().cloned()).collect();
        kinds.sort();
        kinds.dedup();
        kinds
    };
    let mut rows = vec![
        row("span (s)", &|p| format!("{:.2}–{:.2}", p.from_ms / 1000.0, p.to_ms / 1000.0)),
        row("normal sent", &|p| p.sent.to_string()),
        row("normal sent/s", &|p| format!("{:.0}", p.sent_per_sec)),
        row("allowed", &|p| p.allowed.to_string()),
        row("denied", &|p| p.denied.to_string()),
        row("errors", &|p| p.errors.total.to_string()),
    ];
    for kind in kinds(&|p| &p.errors) {
        rows.push(row(&format!("  {kind}"), &|p| {
            p.errors.by_kind.get(&kind).copied().unwrap_or(0).to_string()
        }));
    }
    rows.extend([
        row("false rejections", &|p| format!("{} ({})", p.false_rejections, percent(p.false_rejection_rate))),
        row("  known users", &|p| {
            format!(
                "{} of {} ({})",
                p.known_false_rejections,
                p.known_sent,
                percent(p.known_false_rejection_rate)
            )
        }),
        row("  newcomers", &|p| {
            let r = percent(p.newcomer_false_rejection_rate);
            format!("{} of {} ({r})", p.newcomer_false_rejections, p.newcomer_sent)
        }),
        row("known users with a rejection", &|p| p.known_users_with_a_rejection.to_string()),
        row("newcomers with a rejection", &|p| p.newcomers_with_a_rejection.to_string()),
        row("latency p50", &|p| human_us(p.latency.p50_us)),
        row("latency p99", &|p| human_us(p.latency.p99_us)),
        row("latency max", &|p| human_us(p.latency.max_us)),
        row("flood sent", &|p| p.flood_sent.to_string()),
        row("flood sent/s", &|p| format!("{:.0}", p.flood_sent_per_sec)),
        row("flood allowed", &|p| p.flood_allowed.to_string()),
        row("flood denied", &|p| p.flood_denied.to_string()),
        row("flood errors", &|p| p.flood_errors.total.to_string()),
    ]);
    for kind in kinds(&|p| &p.flood_errors) {
        rows.push(row(&format!("  {kind}"), &|p| {
            p.flood_errors.by_kind.get(&kind).copied().unwrap_or(0).to_string()
        }));
    }
    Grid { head: "phase".into(), columns: vec!["before".into(), "during".into()], rows }
}

/// The report of a run.
pub(crate) fn report(
    args: &FloodArgs,
    plan: &Plan,
    section: &[(String, String)],
    node: Option<&RedisNode>,
    run: Run,
) -> Report {
    let (before_us, end_us) = (micros(plan.before), micros(plan.before + plan.during));
    let [before, during] = &run.phases;
    let phases = Phases {
        before: PhaseReport::new(before, 0, before_us),
        during: PhaseReport::new(during, before_us, end_us),
    };
    let mut normal = before.normal();
    normal.merge(&during.normal());
    let (mut known, mut newcomers, mut flood) =
        (before.known.clone(), before.newcomers.clone(), before.flood.clone());
    known.merge(&during.known);
    newcomers.merge(&during.newcomers);
    flood.merge(&during.flood);
    let (at, after) = (&run.at_flood, &run.after_flood);
    let redis_bytes_per_key = match (at.redis_used_memory, after.redis_used_memory, at.keys, after.keys) {
        (Some(m0), Some(m1), Some(k0), Some(k1)) if k1 > k0 => {
            Some((m1 as f64 - m0 as f64) / (k1 - k0) as f64)
        }
        _ => None,
    };
    let policy = match &args.config {
        Some(path) => path.display().to_string(),
        None => format!(
            "{} {} per {} ms per {}",
            args.algorithm.name(),
            args.limit,
            args.window.as_millis(),
            args.key_descriptor
        ),
    };
    let details = Details {
        store: args.store.name(),
        store_section: store_line(section),
        // As written in the section: a `--store-field max_keys=…` replaces `--max-keys`.
        max_keys: section
            .iter()
            .find(|(name, _)| name == "max_keys")
            .and_then(|(_, v)| v.trim().parse().ok()),
        policy,
        users: plan.users(),
        known_users: plan.known,
        newcomers: plan.newcomers,
        per_user_rate: plan.per_user_rate,
        normal_rate: args.normal_rate,
        flood_mode: if args.flood_concurrency.is_some() { "closed" } else { "open" },
        flood_rate: args.flood_concurrency.is_none().then_some(args.flood_rate),
        flood_concurrency: args.flood_concurrency,
        before_s: plan.before.as_secs_f64(),
        during_s: plan.during.as_secs_f64(),
        flood_start_ms: run.flood_started_us as f64 / 1000.0,
        known_users_decided_before_flood: run.known_decided_at_flood,
        flood_sent: flood.sent(),
        flood_allowed: flood.allowed,
        flood_denied: flood.denied,
        known_false_rejection_rate: rate(false_rejections(&known), known.sent()),
        newcomer_false_rejection_rate: rate(false_rejections(&newcomers), newcomers.sent()),
        keys_from: if node.is_some() { "dbsize" } else { "floodgate_keys" },
        keys_before_flood: at.keys,
        keys_after_flood: after.keys,
        rss_before_flood_bytes: at.rss_bytes,
        rss_after_flood_bytes: after.rss_bytes,
        redis_used_memory_before_flood: at.redis_used_memory,
        redis_used_memory_after_flood: after.redis_used_memory,
        redis_bytes_per_key,
        overflow_decisions_total: after.overflow_decisions.values().sum(),
        overflow_decisions: after.overflow_decisions.clone(),
        phases,
    };
    let target = match node {
        Some(node) => format!("1 in-process server on redis-server {}", node.addr()),
        None => "1 in-process server (memory store)".to_owned(),
    };
    let wall = run.wall.as_secs_f64();
    let grid = phase_grid(&details.phases);
    let label = match args.flood_concurrency {
        Some(c) => format!("flood: {c} callers, a new key each request"),
        None => format!("flood: {}/s, a new key each request", args.flood_rate),
    };
    let mut report = Report::new(normal.summary("flood", &target, wall, wall), details);
    report.grids.push(grid);
    report.overlay = Overlay {
        band: Some(Band { from_ms: before_us as f64 / 1000.0, to_ms: end_us as f64 / 1000.0, label }),
        errors: None,
    };
    report.latency = Some(normal.latency.clone());
    report.timeline = Some(normal.timeline);
    report
}
