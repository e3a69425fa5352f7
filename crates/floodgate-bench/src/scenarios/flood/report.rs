//! The `flood` report: its JSON fields (docs/bench.md) and the phase table.

use std::collections::BTreeMap;

use serde::Serialize;

use super::FloodArgs;
use super::limited::Exhausted;
use super::load::{PhaseTally, Run, rejected};
use super::plan::Plan;
use super::{Setup, store_line};
use crate::report::math::{self, Percentiles};
use crate::report::plot::{Band, Overlay};
use crate::report::units::micros;
use crate::report::{Errors, Grid, Outcome, PhaseCounts, Report, Tally, human_us};

/// The scenario's own JSON fields (docs/bench.md).
#[derive(Debug, Serialize)]
struct Details {
    /// The limiter measured: `floodgate` or `limitador`.
    peer: &'static str,
    /// `limitador-server --version`.
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_version: Option<String>,
    /// How requests reached it: `http` (`/v1/check`) or `grpc` (Envoy RLS).
    transport: &'static str,
    /// `memory` or `redis`.
    store: &'static str,
    /// The store section, on one line: `kind: memory, max_keys: 10000, on_full: aggregate`; on
    /// limitador `storage: memory, cache: 10000`.
    store_section: String,
    /// The memory store's `max_keys`, or limitador's `--cache`.
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
    /// Limited users: each spent its limit before the run, then probes it.
    limited_users: u64,
    /// Probes per second of each.
    limited_probe_rate: f64,
    /// Those whose `limit` requests were all admitted and the next denied: the ones who probe.
    limited_users_exhausted: u64,
    /// Those denied before their limit was spent (their counter already held requests).
    limited_users_denied_before_limit: u64,
    /// Those admitted past their limit: the limiter did not hold it even before the flood.
    limited_users_admitted_past_limit: u64,
    /// Those with a failed request (timeout, transport): not known.
    limited_users_failed: u64,
    /// The exhaustion's requests, before the run.
    limited_exhaust_sent: u64,
    limited_exhaust_allowed: u64,
    limited_exhaust_denied: u64,
    limited_exhaust_errors: Errors,
    limited_exhaust_ms: f64,
    /// How long the run waited before it, for a window holding the whole run (windows aligned
    /// to the epoch).
    limited_window_wait_ms: f64,
    /// When the limited users' limits reset by the rule itself, ms from the start (after the
    /// run unless the exhaustion ran late); `null` without limited users.
    limited_reset_at_ms: Option<f64>,
    /// Probes sent before that, both phases, and those admitted (0 if no counter is lost).
    limited_probes_sent: u64,
    limited_probes_admitted: u64,
    /// Probes sent at or after it: not counted.
    limited_probes_after_reset: u64,
    /// Exhausted limited users with at least one admitted probe: counters lost or reset.
    limited_users_freed: u64,
    /// `limited_users_freed / limited_users_exhausted`.
    limited_users_freed_share: f64,
    /// `floodgate_keys` (memory), `dbsize` (Redis) or `limitador_counters` (`GET
    /// /counters/{namespace}`): where `keys_*` were read.
    keys_from: &'static str,
    /// The store's keys as the flood started, and after it (`null` if unread).
    keys_before_flood: Option<u64>,
    keys_after_flood: Option<u64>,
    /// Whose resident memory `rss_*` is: `bench_process` (the in-process server runs in it) or
    /// `limitador_server`.
    rss_from: &'static str,
    /// Its resident memory, in bytes.
    rss_before_flood_bytes: Option<u64>,
    rss_after_flood_bytes: Option<u64>,
    /// The memory store's own estimate of its bytes as the flood started and after it, its
    /// overflow counters after it, and its configured bound (`max_keys` and every rule's overflow
    /// counters, 120 bytes each: docs/configuration.md); on the memory store only.
    #[serde(skip_serializing_if = "Option::is_none")]
    store_bytes_before_flood: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    store_bytes_after_flood: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    overflow_counters_after_flood: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_bound_bytes: Option<u64>,
    /// Whether the store's estimate stayed within the bound, after the flood.
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_within_bound: Option<bool>,
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
    /// The normal users' requests, by scheduled send time.
    #[serde(flatten)]
    normal: PhaseCounts,
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
    /// The limited users' probes (before their limits reset by the rule): every admission is a
    /// counter lost.
    limited_probes_sent: u64,
    limited_probes_admitted: u64,
    limited_probes_denied: u64,
    limited_probe_errors: Errors,
    /// Exhausted limited users with an admitted probe in the phase, and their share.
    limited_users_freed: u64,
    limited_users_freed_share: f64,
}

/// The false rejections among a tally's requests.
fn false_rejections(t: &Tally) -> u64 {
    t.denied + t.errors.iter().filter(|(k, _)| rejected(Outcome::Error(k))).map(|(_, v)| v).sum::<u64>()
}

fn rate(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

impl PhaseReport {
    fn new(phase: &PhaseTally, from_us: u64, to_us: u64, exhausted: u64) -> Self {
        let span_s = to_us.saturating_sub(from_us) as f64 / 1e6;
        let per_sec = |n: u64| if span_s > 0.0 { n as f64 / span_s } else { 0.0 };
        let normal = phase.normal();
        let (known, newcomers) = (&phase.known, &phase.newcomers);
        let users_flagged = |flags: &[bool]| flags.iter().filter(|r| **r).count() as u64;
        PhaseReport {
            normal: normal.phase(from_us, to_us),
            false_rejections: false_rejections(&normal),
            false_rejection_rate: rate(false_rejections(&normal), normal.sent()),
            known_sent: known.sent(),
            known_false_rejections: false_rejections(known),
            known_false_rejection_rate: rate(false_rejections(known), known.sent()),
            known_users_with_a_rejection: users_flagged(&phase.known_rejected),
            newcomer_sent: newcomers.sent(),
            newcomer_false_rejections: false_rejections(newcomers),
            newcomer_false_rejection_rate: rate(false_rejections(newcomers), newcomers.sent()),
            newcomers_with_a_rejection: users_flagged(&phase.newcomers_rejected),
            latency: math::percentiles(&normal.latency),
            flood_sent: phase.flood.sent(),
            flood_sent_per_sec: per_sec(phase.flood.sent()),
            flood_allowed: phase.flood.allowed,
            flood_denied: phase.flood.denied,
            flood_errors: phase.flood.errors_report(),
            limited_probes_sent: phase.limited.sent(),
            limited_probes_admitted: phase.limited.allowed,
            limited_probes_denied: phase.limited.denied,
            limited_probe_errors: phase.limited.errors_report(),
            limited_users_freed: users_flagged(&phase.limited_admitted),
            limited_users_freed_share: rate(users_flagged(&phase.limited_admitted), exhausted),
        }
    }
}

/// The phases side by side, for the table, under `head` (`floodgate memory, http`).
fn phase_grid(head: String, phases: &Phases, exhausted: u64) -> Grid {
    let columns = [&phases.before, &phases.during];
    let row = |label: &str, cell: &dyn Fn(&PhaseReport) -> String| {
        (label.to_owned(), columns.iter().map(|p| cell(p)).collect::<Vec<_>>())
    };
    let percent = |r: f64| format!("{:.2} %", r * 100.0);
    let mut rows = vec![
        row("span (s)", &|p| format!("{:.2}–{:.2}", p.normal.from_ms / 1000.0, p.normal.to_ms / 1000.0)),
        row("normal sent", &|p| p.normal.sent.to_string()),
        row("normal sent/s", &|p| format!("{:.0}", p.normal.sent_per_sec)),
        row("allowed", &|p| p.normal.allowed.to_string()),
        row("denied", &|p| p.normal.denied.to_string()),
        row("errors", &|p| p.normal.errors.total.to_string()),
    ];
    rows.extend(Grid::error_rows(&columns.map(|p| &p.normal.errors)));
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
    rows.extend(Grid::error_rows(&columns.map(|p| &p.flood_errors)));
    rows.extend([
        row("limited probes sent", &|p| p.limited_probes_sent.to_string()),
        row("limited probes admitted", &|p| p.limited_probes_admitted.to_string()),
        row("limited probe errors", &|p| p.limited_probe_errors.total.to_string()),
        row("limited users freed", &|p| {
            format!("{} of {exhausted} ({})", p.limited_users_freed, percent(p.limited_users_freed_share))
        }),
    ]);
    Grid { head, columns: vec!["before".into(), "during".into()], rows }
}

/// The report of a run.
pub(crate) fn report(args: &FloodArgs, plan: &Plan, setup: &Setup, run: Run) -> Report {
    let (before_us, end_us) = (micros(plan.before), micros(plan.before + plan.during));
    let [before, during] = &run.phases;
    let exhaustion = &run.exhaustion;
    let exhausted = exhaustion.count(|u| u == Exhausted::Yes);
    let phases = Phases {
        before: PhaseReport::new(before, 0, before_us, exhausted),
        during: PhaseReport::new(during, before_us, end_us, exhausted),
    };
    let mut probes = before.limited.clone();
    probes.merge(&during.limited);
    let freed =
        before.limited_admitted.iter().zip(&during.limited_admitted).filter(|(a, b)| **a || **b).count()
            as u64;
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
        peer: setup.peer.name(),
        peer_version: setup.peer_version.clone(),
        transport: setup.transport.name(),
        store: args.store.name(),
        store_section: store_line(&setup.section),
        // As written in the section: a `--store-field max_keys=…` replaces `--max-keys`.
        max_keys: setup
            .section
            .iter()
            .find(|(name, _)| name == "max_keys" || name == "cache")
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
        limited_users: plan.limited,
        limited_probe_rate: plan.probe_rate,
        limited_users_exhausted: exhausted,
        limited_users_denied_before_limit: exhaustion.count(|u| matches!(u, Exhausted::DeniedEarly(_))),
        limited_users_admitted_past_limit: exhaustion.count(|u| u == Exhausted::AdmittedPastLimit),
        limited_users_failed: exhaustion.count(|u| matches!(u, Exhausted::Failed(_))),
        limited_exhaust_sent: exhaustion.tally.sent(),
        limited_exhaust_allowed: exhaustion.tally.allowed,
        limited_exhaust_denied: exhaustion.tally.denied,
        limited_exhaust_errors: exhaustion.tally.errors_report(),
        limited_exhaust_ms: millis_f(exhaustion.took),
        limited_window_wait_ms: millis_f(exhaustion.waited),
        limited_reset_at_ms: (run.limited_reset_us != u64::MAX).then(|| run.limited_reset_us as f64 / 1000.0),
        limited_probes_sent: probes.sent(),
        limited_probes_admitted: probes.allowed,
        limited_probes_after_reset: run.probes_after_reset.sent(),
        limited_users_freed: freed,
        limited_users_freed_share: rate(freed, exhausted),
        keys_from: setup.keys_from,
        keys_before_flood: at.keys,
        keys_after_flood: after.keys,
        rss_from: setup.rss_from,
        rss_before_flood_bytes: at.rss_bytes,
        rss_after_flood_bytes: after.rss_bytes,
        store_bytes_before_flood: at.store_bytes,
        store_bytes_after_flood: after.store_bytes,
        overflow_counters_after_flood: after.overflow_counters,
        memory_bound_bytes: setup.memory_bound_bytes,
        memory_within_bound: after.store_bytes.zip(setup.memory_bound_bytes).map(|(b, bound)| b <= bound),
        redis_used_memory_before_flood: at.redis_used_memory,
        redis_used_memory_after_flood: after.redis_used_memory,
        redis_bytes_per_key,
        overflow_decisions_total: after.overflow_decisions.values().sum(),
        overflow_decisions: after.overflow_decisions.clone(),
        phases,
    };
    let wall = run.wall.as_secs_f64();
    let head = format!("{} {}, {}", details.peer, details.store, details.transport);
    let grid = phase_grid(head, &details.phases, exhausted);
    let label = match args.flood_concurrency {
        Some(c) => format!("flood: {c} callers, a new key each request"),
        None => format!("flood: {}/s, a new key each request", args.flood_rate),
    };
    let mut report = Report::new(normal.summary("flood", &setup.target, wall, wall), details);
    report.grids.push(grid);
    report.overlay = Overlay {
        band: Some(Band { from_ms: before_us as f64 / 1000.0, to_ms: end_us as f64 / 1000.0, label }),
        errors: None,
    };
    report.latency = Some(normal.latency.clone());
    report.timeline = Some(normal.timeline);
    report
}

/// Milliseconds, with their fraction.
fn millis_f(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
