//! The RLQS series (`floodgate_rlqs_*`): streams and buckets held, assignments sent, buckets
//! abandoned; and per rule (`<domain>/<rule>`), the demand this instance's streams report, the
//! rate assigned over the fleet and the rule's limit, set twice a reporting interval.
//!
//! | series | type | labels |
//! |---|---|---|
//! | `floodgate_rlqs_streams` | gauge: RLQS streams open on this instance | — |
//! | `floodgate_rlqs_buckets` | gauge: buckets its streams report (one per stream and bucket id) | — |
//! | `floodgate_rlqs_assignments_total` | counter: assignments sent (first ones, changes, renewals, and TTL 0 expiries) | — |
//! | `floodgate_rlqs_abandoned_total` | counter: buckets abandoned for being idle | — |
//! | `floodgate_rlqs_demand` | gauge: requests per second this instance's streams report, summed over the rule's groups | `rule` |
//! | `floodgate_rlqs_assigned` | gauge: requests per second assigned over the fleet, summed over the rule's groups | `rule` |
//! | `floodgate_rlqs_limit` | gauge: the rule's limit, requests per second, summed over its groups (what `assigned` stays under) | `rule` |

use std::collections::BTreeMap;
use std::sync::Arc;

use metrics::{Counter, Gauge, Key, KeyName, Label, Recorder, SharedString};
use metrics_exporter_prometheus::PrometheusRecorder;
use parking_lot::Mutex;

use super::METADATA;

/// `floodgate_rlqs_streams`.
pub const RLQS_STREAMS: &str = "floodgate_rlqs_streams";
/// `floodgate_rlqs_buckets`.
pub const RLQS_BUCKETS: &str = "floodgate_rlqs_buckets";
/// `floodgate_rlqs_assignments_total`.
pub const RLQS_ASSIGNMENTS_TOTAL: &str = "floodgate_rlqs_assignments_total";
/// `floodgate_rlqs_abandoned_total`.
pub const RLQS_ABANDONED_TOTAL: &str = "floodgate_rlqs_abandoned_total";
/// `floodgate_rlqs_demand`.
pub const RLQS_DEMAND: &str = "floodgate_rlqs_demand";
/// `floodgate_rlqs_assigned`.
pub const RLQS_ASSIGNED: &str = "floodgate_rlqs_assigned";
/// `floodgate_rlqs_limit`.
pub const RLQS_LIMIT: &str = "floodgate_rlqs_limit";

/// The RLQS series of one app. Cheap to clone.
#[derive(Clone)]
pub struct RlqsSeries {
    /// `floodgate_rlqs_streams`.
    pub streams: Gauge,
    /// `floodgate_rlqs_buckets`.
    pub buckets: Gauge,
    /// `floodgate_rlqs_assignments_total`.
    pub assignments: Counter,
    /// `floodgate_rlqs_abandoned_total`.
    pub abandoned: Counter,
    recorder: Option<Arc<PrometheusRecorder>>,
    /// The per-rule gauges registered so far (bounded by the rule names configured).
    rules: Arc<Mutex<BTreeMap<String, [Gauge; 3]>>>,
}

impl std::fmt::Debug for RlqsSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RlqsSeries").finish_non_exhaustive()
    }
}

impl Default for RlqsSeries {
    /// Series recorded nowhere (for a [`Quotas`](crate::rlqs::Quotas) outside an app).
    fn default() -> Self {
        RlqsSeries {
            streams: Gauge::noop(),
            buckets: Gauge::noop(),
            assignments: Counter::noop(),
            abandoned: Counter::noop(),
            recorder: None,
            rules: Arc::default(),
        }
    }
}

impl RlqsSeries {
    pub(super) fn register(recorder: &Arc<PrometheusRecorder>) -> Self {
        let r = &**recorder;
        let series = RlqsSeries {
            streams: r.register_gauge(&Key::from_static_name(RLQS_STREAMS), &METADATA),
            buckets: r.register_gauge(&Key::from_static_name(RLQS_BUCKETS), &METADATA),
            assignments: r.register_counter(&Key::from_static_name(RLQS_ASSIGNMENTS_TOTAL), &METADATA),
            abandoned: r.register_counter(&Key::from_static_name(RLQS_ABANDONED_TOTAL), &METADATA),
            recorder: Some(Arc::clone(recorder)),
            rules: Arc::default(),
        };
        series.assignments.increment(0);
        series.abandoned.increment(0);
        series
    }

    /// Sets the per-rule gauges: for each rule (`<domain>/<rule>`), this instance's streams'
    /// demand, the rate assigned over the fleet and the limit, each summed over the rule's groups;
    /// a rule not given reads 0.
    pub fn record_rules(&self, sums: std::collections::BTreeMap<String, [f64; 3]>) {
        let Some(recorder) = &self.recorder else { return };
        let mut rules = self.rules.lock();
        for gauges in rules.values() {
            for g in gauges {
                g.set(0.0);
            }
        }
        for (rule, values) in sums {
            let gauges = rules.entry(rule.clone()).or_insert_with(|| {
                [RLQS_DEMAND, RLQS_ASSIGNED, RLQS_LIMIT].map(|name| {
                    recorder.register_gauge(
                        &Key::from_parts(name, vec![Label::new("rule", rule.clone())]),
                        &METADATA,
                    )
                })
            });
            for (gauge, value) in gauges.iter().zip(values) {
                gauge.set(value);
            }
        }
    }
}

pub(super) fn describe(r: &PrometheusRecorder) {
    let g = |name: &'static str, help: &'static str| {
        r.describe_gauge(KeyName::from_const_str(name), None, SharedString::const_str(help));
    };
    g(RLQS_STREAMS, "RLQS streams open on this instance.");
    g(RLQS_BUCKETS, "Buckets reported by this instance's RLQS streams (one per stream and bucket id).");
    g(RLQS_DEMAND, "Requests per second this instance's RLQS streams report, per rule.");
    g(RLQS_ASSIGNED, "Requests per second assigned over the fleet, per RLQS rule.");
    g(RLQS_LIMIT, "The RLQS rule's global limit in requests per second, summed over its bucket groups.");
    let c = |name: &'static str, help: &'static str| {
        r.describe_counter(KeyName::from_const_str(name), None, SharedString::const_str(help));
    };
    c(RLQS_ASSIGNMENTS_TOTAL, "RLQS assignments sent: first ones, changes, renewals and TTL 0 expiries.");
    c(RLQS_ABANDONED_TOTAL, "RLQS buckets abandoned for being idle.");
}
