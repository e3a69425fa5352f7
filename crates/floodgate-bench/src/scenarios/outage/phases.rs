//! An `outage` run's decisions, each counted in the phase of its send time (before, during and
//! after the fault); how the store came back; the most admitted per key and window; and the
//! phases' report and table.

use std::collections::HashMap;

use serde::Serialize;

use super::STORE_ERRORS;
use crate::report::math::{self, Percentiles};
use crate::report::{Grid, Outcome, PhaseCounts, Tally, human_us};

// === the report ===

/// The scenario's own JSON fields (docs/bench.md).
#[derive(Debug, Serialize)]
pub(super) struct Details {
    /// `pause` or `kill`.
    pub(super) fault: &'static str,
    /// The rule's `on_store_error`.
    pub(super) on_store_error: &'static str,
    pub(super) algorithm: &'static str,
    pub(super) limit: u64,
    pub(super) window_ms: f64,
    pub(super) keys: u64,
    pub(super) instances: u64,
    pub(super) concurrency: u64,
    /// The store deadline.
    pub(super) deadline_ms: f64,
    /// `slow`: how long the proxy held each request.
    pub(super) delay_ms: Option<f64>,
    /// `local`: each server's share, ceil(limit × local_factor / instances).
    pub(super) local_share: Option<u64>,
    /// `local`: the most one server admitted locally (`store_local_allowed`) for one key within one
    /// fixed window: at most `local_share` when the share held.
    pub(super) max_local_admitted_per_instance_key_window: Option<u64>,
    /// From the fault's start to the first sample with a server's breaker open; `null` if none
    /// opened.
    pub(super) breaker_opened_after_ms: Option<f64>,
    /// From the fault's end to the first sample with every server's breaker closed again (after
    /// it had opened); `null` if it never opened, or had not closed by the end of the run.
    pub(super) breaker_closed_after_ms: Option<f64>,
    /// The fault, from its signal to the resume or restart (ms from the start of the load).
    pub(super) fault_start_ms: f64,
    pub(super) fault_end_ms: f64,
    /// Whether the store lost its counters (`kill`: the new node starts empty).
    pub(super) counters_reset: bool,
    /// `--until-settled`: whether the store decided every request for two windows after the fault
    /// before `--duration` (`null` without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) settled: Option<bool>,
    /// From the fault's end to the send of the first decision the store made after it; `null` if
    /// none did.
    pub(super) recovered_after_ms: Option<f64>,
    /// Store errors sent after that decision: 0 when the recovery held, else a flapping store or
    /// deadline misses under load (compare with `before`'s store errors, the baseline).
    pub(super) errors_after_recovery: u64,
    /// From the fault's start to the send of the last request after it that the store did not
    /// decide (a failure policy's verdict or an error): for `master-kill`, how long the failover took
    /// as callers saw it; `null` if there was none.
    pub(super) last_store_error_after_ms: Option<f64>,
    /// The most one key was allowed within one fixed, epoch-aligned window (counting admissions
    /// whose send and answer both fall in it).
    pub(super) max_admitted_per_key_window: u64,
    /// `before`, `during`, `after`.
    pub(super) phases: Phases,
}

/// The three phases.
#[derive(Debug, Serialize)]
pub(super) struct Phases {
    pub(super) before: PhaseReport,
    pub(super) during: PhaseReport,
    pub(super) after: PhaseReport,
}

/// What the decisions sent in one phase came to.
#[derive(Debug, Serialize)]
pub(super) struct PhaseReport {
    #[serde(flatten)]
    pub(super) counts: PhaseCounts,
    /// `store_fail_open` errors: requests that passed, uncounted, because the store failed.
    pub(super) passed_by_fail_open: u64,
    /// `store_fail_closed` errors: requests denied because the store failed.
    pub(super) denied_by_fail_closed: u64,
    /// `store_local_allowed` errors: requests a server's local share admitted.
    pub(super) admitted_locally: u64,
    /// `store_local_denied` errors: requests a server's local share denied.
    pub(super) denied_locally: u64,
    /// HTTP 5xx answers (the goal is none, whatever the fault).
    pub(super) http_5xx: u64,
    #[serde(flatten)]
    pub(super) latency: Percentiles,
}

impl PhaseReport {
    pub(super) fn new(tally: &Tally, from_us: u64, to_us: u64) -> Self {
        let kind = |k: &str| tally.errors.get(k).copied().unwrap_or(0);
        PhaseReport {
            counts: tally.phase(from_us, to_us),
            passed_by_fail_open: kind(STORE_ERRORS[0]),
            denied_by_fail_closed: kind(STORE_ERRORS[1]),
            admitted_locally: kind(STORE_ERRORS[2]),
            denied_locally: kind(STORE_ERRORS[3]),
            http_5xx: kind("http_5xx"),
            latency: math::percentiles(&tally.latency),
        }
    }
}

/// The phases side by side, for the table.
pub(super) fn phase_grid(phases: &Phases) -> Grid {
    let columns = [&phases.before, &phases.during, &phases.after];
    let row = |label: &str, cell: &dyn Fn(&PhaseReport) -> String| {
        (label.to_owned(), columns.iter().map(|p| cell(p)).collect::<Vec<_>>())
    };
    let mut rows = vec![
        row("span (s)", &|p| format!("{:.2}–{:.2}", p.counts.from_ms / 1000.0, p.counts.to_ms / 1000.0)),
        row("sent", &|p| p.counts.sent.to_string()),
        row("sent/s", &|p| format!("{:.0}", p.counts.sent_per_sec)),
        row("allowed", &|p| p.counts.allowed.to_string()),
        row("denied", &|p| p.counts.denied.to_string()),
        row("errors", &|p| p.counts.errors.total.to_string()),
    ];
    rows.extend(Grid::error_rows(&columns.map(|p| &p.counts.errors)));
    rows.push(row("latency p50", &|p| human_us(p.latency.p50_us)));
    rows.push(row("latency p99", &|p| human_us(p.latency.p99_us)));
    rows.push(row("latency max", &|p| human_us(p.latency.max_us)));
    Grid { head: "phase".into(), columns: vec!["before".into(), "during".into(), "after".into()], rows }
}

// === the bookkeeping ===

/// One decision of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Event {
    /// When it was sent, µs from the start of the load.
    pub(super) sent_us: u64,
    pub(super) latency_ns: u64,
    /// The key's index.
    pub(super) key: u32,
    /// The server it was sent to.
    pub(super) instance: u16,
    pub(super) outcome: Outcome,
}

impl Event {
    /// Whether the store made this decision (not an error, not a failure policy's verdict).
    pub(super) fn decided(&self) -> bool {
        matches!(self.outcome, Outcome::Allowed | Outcome::Denied)
    }

    /// Whether this is a verdict made by `on_store_error`.
    fn store_error(&self) -> bool {
        matches!(self.outcome, Outcome::Error(kind) if STORE_ERRORS.contains(&kind))
    }
}

/// When the fault was in effect, µs from the start of the load: `[start_us, end_us)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start_us: u64,
    pub(super) end_us: u64,
}

/// `[before, during, after]`, each decision by its send time.
pub(super) fn split(events: &[Event], span: Span) -> [Tally; 3] {
    let mut phases: [Tally; 3] = Default::default();
    for e in events {
        let phase = if e.sent_us < span.start_us {
            0
        } else if e.sent_us < span.end_us {
            1
        } else {
            2
        };
        phases[phase].record(e.outcome, e.latency_ns, e.sent_us / 1000);
    }
    phases
}

/// How the store came back after the fault's end (µs after it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Recovery {
    /// The send of the first decision the store made after the end.
    pub(super) first_decision_us: Option<u64>,
    /// Store errors sent after the first decision.
    pub(super) errors_after: u64,
}

pub(super) fn recovery(events: &[Event], end_us: u64) -> Recovery {
    let after = || events.iter().filter(move |e| e.sent_us >= end_us);
    let Some(first) = after().filter(|e| e.decided()).map(|e| e.sent_us).min() else {
        return Recovery::default();
    };
    let errors_after = after().filter(|e| e.store_error() && e.sent_us > first).count() as u64;
    Recovery { first_decision_us: Some(first - end_us), errors_after }
}

/// The most admissions of one key within one fixed window (aligned to the Unix epoch, as the
/// store's fixed windows are), counting only admissions whose whole exchange — from send to
/// answer, wall-clock µs from `wall0_us` — falls inside the window: the store decided each of
/// them within it. Admissions that straddle a boundary are left out, so this never overstates.
pub(super) fn max_admitted_per_key_window(events: &[Event], wall0_us: u64, window_us: u64) -> u64 {
    max_per_window(events, Outcome::Allowed, |_| 0, wall0_us, window_us)
}

/// The most admissions by one server's local share (`store_local_allowed`) of one key within one
/// fixed window, counted as [`max_admitted_per_key_window`] counts.
pub(super) fn max_local_admitted(events: &[Event], wall0_us: u64, window_us: u64) -> u64 {
    max_per_window(events, Outcome::Error(STORE_ERRORS[2]), |e| e.instance, wall0_us, window_us)
}

/// The most events with `outcome` of one key (and one `group`) within one fixed window, counting
/// only those whose send and answer both fall inside it.
fn max_per_window(
    events: &[Event],
    outcome: Outcome,
    group: impl Fn(&Event) -> u16,
    wall0_us: u64,
    window_us: u64,
) -> u64 {
    let mut counts: HashMap<(u16, u32, u64), u64> = HashMap::new();
    for e in events.iter().filter(|e| e.outcome == outcome) {
        let sent = wall0_us + e.sent_us;
        let answered = sent + e.latency_ns.div_ceil(1000);
        let window = sent / window_us;
        if answered < (window + 1) * window_us {
            *counts.entry((group(e), e.key, window)).or_default() += 1;
        }
    }
    counts.into_values().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sent_ms: u64, outcome: Outcome) -> Event {
        Event { sent_us: sent_ms * 1000, latency_ns: 1_000_000, key: 0, instance: 0, outcome }
    }

    const OPEN: Outcome = Outcome::Error("store_fail_open");
    const CLOSED: Outcome = Outcome::Error("store_fail_closed");
    const SPAN: Span = Span { start_us: 1_000_000, end_us: 2_000_000 };

    #[test]
    fn a_kept_decision_takes_48_bytes_at_most() {
        // As MAX_OUTAGE_DURATION and docs/bench.md say.
        assert!(std::mem::size_of::<Event>() <= 48, "{}", std::mem::size_of::<Event>());
    }

    #[test]
    fn decisions_fall_in_the_phase_of_their_send_time() {
        let events = [
            event(0, Outcome::Allowed),
            event(999, Outcome::Denied),
            // Sent at the fault's start, answered long after its end: still `during`.
            Event { latency_ns: 5_000_000_000, ..event(1000, OPEN) },
            event(1999, Outcome::Allowed),
            event(2000, CLOSED),
            event(2500, Outcome::Error("timeout")),
        ];
        let [before, during, after] = split(&events, SPAN);
        assert_eq!((before.allowed, before.denied, before.error_count()), (1, 1, 0));
        assert_eq!((during.allowed, during.errors["store_fail_open"]), (1, 1));
        assert_eq!((after.errors["store_fail_closed"], after.errors["timeout"]), (1, 1));
        let sent: u64 = [&before, &during, &after].iter().map(|t| t.sent()).sum();
        assert_eq!(sent, events.len() as u64);
        let during = PhaseReport::new(&during, SPAN.start_us, SPAN.end_us);
        assert_eq!(
            (during.counts.from_ms, during.counts.to_ms, during.counts.sent_per_sec),
            (1000.0, 2000.0, 2.0)
        );
        assert_eq!((during.passed_by_fail_open, during.denied_by_fail_closed), (1, 0));
        assert!(during.latency.max_us >= 4_990_000.0, "{:?}", during.latency);
    }

    #[test]
    fn recovery_is_the_first_store_decision_sent_after_the_fault() {
        let events = [
            event(1500, Outcome::Allowed), // during: not a recovery
            event(2000, OPEN),
            event(2040, Outcome::Error("timeout")), // not a store error, not a decision
            event(2030, OPEN),
            event(2050, Outcome::Denied),
            event(2060, Outcome::Allowed),
        ];
        let r = recovery(&events, SPAN.end_us);
        assert_eq!(r, Recovery { first_decision_us: Some(50_000), errors_after: 0 });
    }

    #[test]
    fn store_errors_after_the_first_decision_are_counted() {
        // Two instances: one reconnected at 2010 ms, the other still failing until 2080 ms.
        let events = [
            event(2080, OPEN),
            event(2010, Outcome::Allowed),
            event(2040, OPEN),
            event(2090, Outcome::Denied),
            event(2100, Outcome::Allowed),
        ];
        let r = recovery(&events, SPAN.end_us);
        assert_eq!(r, Recovery { first_decision_us: Some(10_000), errors_after: 2 });
    }

    #[test]
    fn a_store_that_never_decides_again_has_no_recovery() {
        let events = [event(500, Outcome::Allowed), event(2500, CLOSED), event(3000, OPEN)];
        assert_eq!(recovery(&events, SPAN.end_us), Recovery::default());
    }

    #[test]
    fn the_phase_table_has_a_column_per_phase_and_a_row_per_error_kind() {
        let events = [event(10, Outcome::Allowed), event(1500, OPEN), event(2500, Outcome::Denied)];
        let [before, during, after] = split(&events, SPAN);
        let phases = Phases {
            before: PhaseReport::new(&before, 0, SPAN.start_us),
            during: PhaseReport::new(&during, SPAN.start_us, SPAN.end_us),
            after: PhaseReport::new(&after, SPAN.end_us, 3_000_000),
        };
        let grid = phase_grid(&phases);
        assert_eq!(grid.columns, ["before", "during", "after"]);
        let row = |label: &str| grid.rows.iter().find(|(l, _)| l == label).map(|(_, c)| c.clone()).unwrap();
        assert_eq!(row("span (s)"), ["0.00–1.00", "1.00–2.00", "2.00–3.00"]);
        assert_eq!(row("allowed"), ["1", "0", "0"]);
        assert_eq!(row("  store_fail_open"), ["0", "1", "0"]);
        assert_eq!(row("latency p50")[1], "1.00 ms");
    }

    #[test]
    fn admissions_count_in_the_window_they_were_decided_in_and_straddlers_are_left_out() {
        let allowed = |key: u32, sent_us: u64, latency_us: u64| Event {
            sent_us,
            latency_ns: latency_us * 1000,
            key,
            instance: 0,
            outcome: Outcome::Allowed,
        };
        // wall0 = 10.5 s, 1 s windows: run µs 0..500 000 are in window 10, 500 000.. in window 11.
        let wall0 = 10_500_000;
        let mut events = vec![allowed(0, 0, 100); 3];
        events.push(allowed(0, 499_950, 100)); // straddles 11.0 s: left out
        events.extend(vec![allowed(0, 500_000, 100); 4]); // window 11: 4
        events.extend(vec![allowed(1, 600_000, 100); 2]); // another key
        events.push(Event { outcome: Outcome::Denied, ..allowed(0, 600_000, 100) });
        events.push(Event { outcome: OPEN, ..allowed(0, 600_000, 100) });
        assert_eq!(max_admitted_per_key_window(&events, wall0, 1_000_000), 4);
        assert_eq!(max_admitted_per_key_window(&[], wall0, 1_000_000), 0);
    }

    #[test]
    fn local_admissions_are_counted_per_server_key_and_window() {
        let local = |instance: u16, key: u32, sent_us: u64| Event {
            sent_us,
            latency_ns: 100_000,
            key,
            instance,
            outcome: Outcome::Error("store_local_allowed"),
        };
        let mut events = vec![local(0, 7, 1_000); 3];
        events.extend(vec![local(1, 7, 2_000); 5]); // another server: its own share
        events.extend(vec![local(0, 7, 1_001_000); 4]); // the next window
        events.push(Event { outcome: Outcome::Allowed, ..local(1, 7, 3_000) }); // the store's
        events.push(Event { outcome: Outcome::Error("store_local_denied"), ..local(1, 7, 3_000) });
        assert_eq!(max_local_admitted(&events, 0, 1_000_000), 5);
        assert_eq!(max_local_admitted(&events[..3], 0, 1_000_000), 3);
    }
}
