//! The gateway's Prometheus series, registered on the app's recorder (labels bounded: route names
//! from the configuration, status codes, fixed words; never paths, users or addresses).
//!
//! | series | type | labels |
//! |---|---|---|
//! | `floodgate_gateway_requests_total` | counter: answers, by route and status code (`route="_none"`: no route matched) | `route`, `status` |
//! | `floodgate_gateway_upstream_duration_seconds` | histogram: each upstream attempt until its response head | `route` |
//! | `floodgate_gateway_breaker_state` | gauge: 0 closed, 1 open, 2 half-open (routes with a breaker) | `route` |
//! | `floodgate_gateway_retries_total` | counter: retries `sent`, or refused because the budget was spent (`budget_exhausted`) | `route`, `outcome` |
//! | `floodgate_gateway_shed_total` | counter: requests shed by priority | `route` |
//! | `floodgate_gateway_degraded_total` | counter: answers made without the upstream: `stale_cache`, `accept_async`, `fallback` | `route`, `mode` |
//! | `floodgate_gateway_delayed_total` | counter: requests that waited under `action: delay`, and then `passed` or were `denied` | `result` |
//! | `floodgate_gateway_waiting` | gauge: requests waiting for capacity now | — |
//! | `floodgate_gateway_accepted_pending` | gauge: accepted writes not yet delivered | — |
//! | `floodgate_llm_calls_total` | counter: LLM calls by admission: `admitted`, `capped` (admitted with a smaller allowance), `refused` (429: a budget), `invalid` (400, 413: the body, the model, no price), `unavailable` (503) | `route`, `outcome` |
//! | `floodgate_llm_tokens_total` | counter: tokens `reserved` at admission (prompt and allowance), and `prompt` and `completion` committed | `route`, `kind` |
//! | `floodgate_llm_spend_usd_micros_total` | counter: spend committed, micro-dollars (routes with prices) | `route` |
//! | `floodgate_llm_answers_total` | counter: metered answers by their end: `whole`, `cut` (at the budget), `broken` (the upstream broke it, or the client left); and `released` (not a success: nothing charged) | `route`, `end` |
//! | `floodgate_llm_estimated_total` | counter: answers without usage, charged the documented estimate | `route` |

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::PrometheusRecorder;

use floodgate_app::metrics::{GATEWAY_UPSTREAM_DURATION_SECONDS, Metrics};

const REQUESTS_TOTAL: &str = "floodgate_gateway_requests_total";
const BREAKER_STATE: &str = "floodgate_gateway_breaker_state";
const RETRIES_TOTAL: &str = "floodgate_gateway_retries_total";
const SHED_TOTAL: &str = "floodgate_gateway_shed_total";
const DEGRADED_TOTAL: &str = "floodgate_gateway_degraded_total";
const DELAYED_TOTAL: &str = "floodgate_gateway_delayed_total";
const WAITING: &str = "floodgate_gateway_waiting";
const ACCEPTED_PENDING: &str = "floodgate_gateway_accepted_pending";
const LLM_CALLS_TOTAL: &str = "floodgate_llm_calls_total";
const LLM_TOKENS_TOTAL: &str = "floodgate_llm_tokens_total";
const LLM_SPEND_TOTAL: &str = "floodgate_llm_spend_usd_micros_total";
const LLM_ANSWERS_TOTAL: &str = "floodgate_llm_answers_total";
const LLM_ESTIMATED_TOTAL: &str = "floodgate_llm_estimated_total";

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// Status codes 100..=599, one slot each.
const STATUSES: usize = 500;

/// The gateway-wide series.
#[derive(Debug)]
pub(super) struct GatewayMetrics {
    metrics: Metrics,
    pub(super) delayed_passed: Counter,
    pub(super) delayed_denied: Counter,
    pub(super) waiting: Gauge,
    pub(super) accepted_pending: Gauge,
    /// `route="_none"`: requests no route took.
    pub(super) unrouted: RouteMetrics,
}

/// One route's series.
pub(super) struct RouteMetrics {
    name: String,
    recorder: Metrics,
    statuses: Box<[OnceLock<Counter>]>,
    pub(super) upstream: Histogram,
    pub(super) breaker: Gauge,
    pub(super) retries_sent: Counter,
    pub(super) retries_refused: Counter,
    pub(super) shed: Counter,
    pub(super) stale: Counter,
    pub(super) accepted: Counter,
    pub(super) fallback: Counter,
    /// An LLM route's series, registered on its first call.
    llm: OnceLock<LlmMetrics>,
}

/// An LLM route's series (cheap to clone: each a handle).
#[derive(Clone)]
pub(crate) struct LlmMetrics {
    pub(crate) admitted: Counter,
    pub(crate) capped: Counter,
    pub(crate) refused: Counter,
    pub(crate) invalid: Counter,
    pub(crate) unavailable: Counter,
    pub(crate) reserved_tokens: Counter,
    pub(crate) prompt_tokens: Counter,
    pub(crate) completion_tokens: Counter,
    pub(crate) spend: Counter,
    pub(crate) whole: Counter,
    pub(crate) cut: Counter,
    pub(crate) broken: Counter,
    pub(crate) released: Counter,
    pub(crate) estimated: Counter,
}

impl std::fmt::Debug for LlmMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmMetrics").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for RouteMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteMetrics").field("route", &self.name).finish_non_exhaustive()
    }
}

fn recorder(metrics: &Metrics) -> &PrometheusRecorder {
    metrics.recorder()
}

fn counter(metrics: &Metrics, name: &'static str, labels: Vec<Label>) -> Counter {
    let counter = recorder(metrics).register_counter(&Key::from_parts(name, labels), &METADATA);
    counter.increment(0);
    counter
}

impl GatewayMetrics {
    pub(super) fn new(metrics: &Metrics) -> Self {
        describe(recorder(metrics));
        let r = recorder(metrics);
        let result = |value: &'static str| counter(metrics, DELAYED_TOTAL, vec![Label::new("result", value)]);
        GatewayMetrics {
            delayed_passed: result("passed"),
            delayed_denied: result("denied"),
            waiting: r.register_gauge(&Key::from_static_name(WAITING), &METADATA),
            accepted_pending: r.register_gauge(&Key::from_static_name(ACCEPTED_PENDING), &METADATA),
            unrouted: RouteMetrics::new(metrics, "_none", false),
            metrics: metrics.clone(),
        }
    }

    /// The series of route `name` (registered again on a reload: the same series).
    pub(super) fn route(&self, name: &str, breaker: bool) -> RouteMetrics {
        RouteMetrics::new(&self.metrics, name, breaker)
    }
}

impl RouteMetrics {
    fn new(metrics: &Metrics, name: &str, breaker: bool) -> Self {
        let route = || Label::new("route", name.to_owned());
        let r = recorder(metrics);
        let labelled = |series: &'static str, label: &'static str, value: &'static str| {
            counter(metrics, series, vec![route(), Label::new(label, value)])
        };
        let breaker_gauge = r.register_gauge(&Key::from_parts(BREAKER_STATE, vec![route()]), &METADATA);
        if breaker {
            breaker_gauge.set(0.0);
        }
        RouteMetrics {
            statuses: (0..STATUSES).map(|_| OnceLock::new()).collect(),
            upstream: r.register_histogram(
                &Key::from_parts(GATEWAY_UPSTREAM_DURATION_SECONDS, vec![route()]),
                &METADATA,
            ),
            breaker: breaker_gauge,
            retries_sent: labelled(RETRIES_TOTAL, "outcome", "sent"),
            retries_refused: labelled(RETRIES_TOTAL, "outcome", "budget_exhausted"),
            shed: counter(metrics, SHED_TOTAL, vec![route()]),
            stale: labelled(DEGRADED_TOTAL, "mode", "stale_cache"),
            accepted: labelled(DEGRADED_TOTAL, "mode", "accept_async"),
            fallback: labelled(DEGRADED_TOTAL, "mode", "fallback"),
            name: name.to_owned(),
            recorder: metrics.clone(),
            llm: OnceLock::new(),
        }
    }

    /// The route's LLM series (registered on first use: only LLM routes have them).
    pub(crate) fn llm(&self) -> &LlmMetrics {
        self.llm.get_or_init(|| {
            let metrics = &self.recorder;
            let route = || Label::new("route", self.name.clone());
            let labelled = |series: &'static str, label: &'static str, value: &'static str| {
                counter(metrics, series, vec![route(), Label::new(label, value)])
            };
            LlmMetrics {
                admitted: labelled(LLM_CALLS_TOTAL, "outcome", "admitted"),
                capped: labelled(LLM_CALLS_TOTAL, "outcome", "capped"),
                refused: labelled(LLM_CALLS_TOTAL, "outcome", "refused"),
                invalid: labelled(LLM_CALLS_TOTAL, "outcome", "invalid"),
                unavailable: labelled(LLM_CALLS_TOTAL, "outcome", "unavailable"),
                reserved_tokens: labelled(LLM_TOKENS_TOTAL, "kind", "reserved"),
                prompt_tokens: labelled(LLM_TOKENS_TOTAL, "kind", "prompt"),
                completion_tokens: labelled(LLM_TOKENS_TOTAL, "kind", "completion"),
                spend: counter(metrics, LLM_SPEND_TOTAL, vec![route()]),
                whole: labelled(LLM_ANSWERS_TOTAL, "end", "whole"),
                cut: labelled(LLM_ANSWERS_TOTAL, "end", "cut"),
                broken: labelled(LLM_ANSWERS_TOTAL, "end", "broken"),
                released: labelled(LLM_ANSWERS_TOTAL, "end", "released"),
                estimated: counter(metrics, LLM_ESTIMATED_TOTAL, vec![route()]),
            }
        })
    }

    /// Counts one answer with `status`.
    pub(super) fn answered(&self, status: http::StatusCode) {
        let code = status.as_u16();
        let Some(slot) = usize::from(code).checked_sub(100).and_then(|i| self.statuses.get(i)) else {
            return;
        };
        slot.get_or_init(|| {
            let labels = vec![Label::new("route", self.name.clone()), Label::new("status", code.to_string())];
            recorder(&self.recorder).register_counter(&Key::from_parts(REQUESTS_TOTAL, labels), &METADATA)
        })
        .increment(1);
    }

    /// Records one upstream attempt's time to its response head.
    pub(super) fn upstream_took(&self, took: Duration) {
        self.upstream.record(took.as_secs_f64());
    }
}

fn describe(r: &PrometheusRecorder) {
    let c = |name: &'static str, help: &'static str| {
        r.describe_counter(KeyName::from_const_str(name), None, SharedString::const_str(help));
    };
    c(REQUESTS_TOTAL, "Gateway answers by route and status code (route _none: no route matched).");
    c(RETRIES_TOTAL, "Gateway retries sent, and refused because the route's retry budget was spent.");
    c(SHED_TOTAL, "Gateway requests shed by priority.");
    c(DEGRADED_TOTAL, "Gateway answers made without the upstream: stale_cache, accept_async, fallback.");
    c(DELAYED_TOTAL, "Gateway requests that waited for capacity (action delay), then passed or were denied.");
    c(LLM_CALLS_TOTAL, "LLM calls by admission: admitted, capped, refused (a budget), invalid, unavailable.");
    c(LLM_TOKENS_TOTAL, "LLM tokens reserved at admission, and prompt and completion tokens committed.");
    c(LLM_SPEND_TOTAL, "LLM spend committed, in micro-dollars (routes with prices).");
    c(LLM_ANSWERS_TOTAL, "Metered LLM answers by their end: whole, cut, broken; released: not a success.");
    c(LLM_ESTIMATED_TOTAL, "LLM answers without usage, charged the documented estimate.");
    let g = |name: &'static str, help: &'static str| {
        r.describe_gauge(KeyName::from_const_str(name), None, SharedString::const_str(help));
    };
    g(BREAKER_STATE, "A route's circuit breaker: 0 closed, 1 open, 2 half-open.");
    g(WAITING, "Gateway requests waiting for capacity now (action delay).");
    g(ACCEPTED_PENDING, "Writes accepted asynchronously and not yet delivered to their upstream.");
    r.describe_histogram(
        KeyName::from_const_str(GATEWAY_UPSTREAM_DURATION_SECONDS),
        Some(Unit::Seconds),
        SharedString::const_str("Gateway upstream attempts, until the response head, in seconds."),
    );
}
