//! `floodgate_reservations_total` and `floodgate_reservation_units_total`: what became of
//! reservations (`POST /v1/reserve`, `/v1/commit`, `/v1/release`), per rule and `result`, counted
//! once each and in the units of the rule.
//!
//! | `result` | counts, per rule | units |
//! |---|---|---|
//! | `granted` | reserves allowed and kept, under each rule that holds a part of them | what the rule granted |
//! | `refused` | reserves refused (429), under each rule that denied them | what the rule was asked |
//! | `committed` | commits, under each rule the reservation held | what stays charged (a permit: 0) |
//! | `released` | releases, under each rule the reservation held | what was given back |
//! | `expired` | reservations the memory store's sweeper found expired unsettled (within `sweep_interval` after their ttl) | what stays charged |
//! | `late` | commits and releases refused (409) because the reservation had expired, every such call | what stays charged |
//!
//! A retried settlement answered again is not counted again; a reserve the store could not keep
//! (503) is counted in neither `granted` nor `refused`. The ids a check returns for its concurrency
//! permits are not reservations: releasing them is not counted. A Redis store does not report
//! expiries (its records vanish with their key's TTL, and finding them would mean scanning): there,
//! `expired` stays 0 and `late` is what can be known.
//!
//! A rule's series appear — all its results at once, at zero — with its first count; they are kept
//! by rule name across reloads, like the request counters of `auth` clients.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use metrics::{Counter, Key, KeyName, Label, Recorder, SharedString};
use metrics_exporter_prometheus::PrometheusRecorder;
use parking_lot::Mutex;

use super::METADATA;

/// `floodgate_reservations_total`.
pub const RESERVATIONS_TOTAL: &str = "floodgate_reservations_total";
/// `floodgate_reservation_units_total`.
pub const RESERVATION_UNITS_TOTAL: &str = "floodgate_reservation_units_total";

/// What happened to a reservation, or to a call about one: the `result` label (see the
/// [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservationResult {
    /// A reserve allowed, and kept in the store.
    Granted,
    /// A reserve denied.
    Refused,
    /// A commit.
    Committed,
    /// A release.
    Released,
    /// A reservation that expired unsettled, as the memory store's sweeper found it.
    Expired,
    /// A commit or release refused because the reservation had expired.
    Late,
}

/// The `result` labels, in the order of [`ReservationResult`].
const RESULTS: [&str; 6] = ["granted", "refused", "committed", "released", "expired", "late"];

impl ReservationResult {
    /// The `result` label.
    pub fn as_str(self) -> &'static str {
        RESULTS[self as usize]
    }
}

/// One rule's reservation series: registered on its first count.
pub struct RuleReservations {
    label: String,
    recorder: Arc<PrometheusRecorder>,
    /// Whether the store reports expiries (else `expired` has no series).
    expiries: bool,
    series: OnceLock<Series>,
}

/// `floodgate_reservations_total` and `floodgate_reservation_units_total` of one rule, per result
/// (`None`: a result the store does not report).
struct Series {
    count: [Option<Counter>; RESULTS.len()],
    units: [Option<Counter>; RESULTS.len()],
}

impl std::fmt::Debug for RuleReservations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleReservations").field("label", &self.label).finish_non_exhaustive()
    }
}

impl RuleReservations {
    /// Counts one `result` of `units` units.
    pub fn count(&self, result: ReservationResult, units: u64) {
        let series = self.series.get_or_init(|| {
            let register = |name: &'static str| {
                RESULTS.map(|label| {
                    if label == ReservationResult::Expired.as_str() && !self.expiries {
                        return None;
                    }
                    let labels = vec![Label::new("rule", self.label.clone()), Label::new("result", label)];
                    let counter = self.recorder.register_counter(&Key::from_parts(name, labels), &METADATA);
                    counter.increment(0);
                    Some(counter)
                })
            };
            Series { count: register(RESERVATIONS_TOTAL), units: register(RESERVATION_UNITS_TOTAL) }
        });
        if let (Some(count), Some(sum)) = (&series.count[result as usize], &series.units[result as usize]) {
            count.increment(1);
            sum.increment(units);
        }
    }
}

/// The reservation series of every rule named so far, by `rule` label.
pub(super) struct Reservations {
    recorder: Arc<PrometheusRecorder>,
    /// Whether the store reports expiries.
    expiries: bool,
    rules: Mutex<HashMap<String, Arc<RuleReservations>>>,
}

impl Reservations {
    /// No series yet, on a store that reports expiries or not.
    pub(super) fn new(recorder: Arc<PrometheusRecorder>, expiries: bool) -> Self {
        Reservations { recorder, expiries, rules: Mutex::new(HashMap::new()) }
    }

    /// The series of the rule labelled `label`: the same ones for the same label.
    pub(super) fn rule(&self, label: &str) -> Arc<RuleReservations> {
        let mut rules = self.rules.lock();
        if let Some(found) = rules.get(label) {
            return Arc::clone(found);
        }
        let series = Arc::new(RuleReservations {
            label: label.to_owned(),
            recorder: Arc::clone(&self.recorder),
            expiries: self.expiries,
            series: OnceLock::new(),
        });
        rules.insert(label.to_owned(), Arc::clone(&series));
        series
    }
}

/// Describes the series.
pub(super) fn describe(r: &PrometheusRecorder) {
    r.describe_counter(
        KeyName::from_const_str(RESERVATIONS_TOTAL),
        None,
        SharedString::const_str(
            "Reservations per rule: reserves granted and refused, commits, releases, reservations found expired unsettled (memory store), and settlements refused as late.",
        ),
    );
    r.describe_counter(
        KeyName::from_const_str(RESERVATION_UNITS_TOTAL),
        None,
        SharedString::const_str(
            "Units of the rule's cost (or permits) in floodgate_reservations_total: granted, refused, charged by commits, given back by releases, charged by expired and late reservations.",
        ),
    );
}
