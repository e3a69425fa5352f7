//! The decision path: one way from descriptors to a verdict, below every front door.
//!
//! ```text
//!  HTTP /v1/check ─┐
//!  Envoy RLS ──────┼─► DecisionPath::decide ─► Policy::evaluate (one store call) ─► observers ─► render
//!  gateway ────────┘      (hits, domain)           all-or-nothing                   (metrics, …)  (front door)
//! ```
//!
//! A front door turns its request into [`Hit`]s (one per descriptor set), finds the [`Domain`] in
//! the snapshot of the configuration it loaded once, and calls [`DecisionPath::decide`]; it then
//! renders the verdict its own way (JSON and headers, protobuf statuses). Whatever happens on the
//! way — metrics now; the dashboard's live feed and its heavy-hitter sketch later — is an
//! [`Observer`] that sees each decision once, here, and never code inside a handler.

use std::time::{Duration, Instant};

use floodgate::{EngineError, Hit, Impossible, Mode, Verdict};
use floodgate_config::store::AnyStore;

use crate::control::Domain;
use crate::metrics::{Api, Metrics};

/// One decision, as observers see it.
#[derive(Debug)]
pub(crate) struct Observed<'a> {
    /// Which front door asked.
    pub(crate) api: Api,
    /// The policy that decided (with its per-rule handles).
    pub(crate) domain: &'a Domain,
    /// What was asked.
    pub(crate) hits: &'a [Hit<'a>],
    /// What was answered.
    pub(crate) result: &'a Result<Verdict, EngineError>,
    /// How long the engine and the store took.
    pub(crate) took: Duration,
}

/// Sees every decision of the decision path, once, after it is made and before it is rendered.
/// Observers must be quick and must not block: they run on the request's task.
pub(crate) trait Observer: Send + Sync + std::fmt::Debug + 'static {
    /// One decision.
    fn observe(&self, decision: &Observed<'_>);
}

/// What each front door does with a verdict depends on the front door; what the engine is asked
/// depends on it too.
fn mode(api: Api) -> (Mode, Impossible) {
    match api {
        Api::Check => (Mode::Check, Impossible::Error),
        Api::Peek => (Mode::Peek, Impossible::Error),
        Api::Report => (Mode::Report, Impossible::Error),
        // Envoy can only say "over limit": a cost no limit can grant denies the request.
        Api::Grpc => (Mode::Check, Impossible::Deny),
        // The gateway's requests cost 1, which every limit can grant.
        Api::Gateway => (Mode::Check, Impossible::Deny),
    }
}

/// The decision path: the store, and the observers every decision goes through.
#[derive(Debug)]
pub(crate) struct DecisionPath {
    store: AnyStore,
    observers: Box<[Box<dyn Observer>]>,
}

impl DecisionPath {
    /// The decision path on `store`, observed by `metrics`.
    pub(crate) fn new(store: AnyStore, metrics: Metrics) -> Self {
        DecisionPath { store, observers: Box::new([Box::new(MetricsObserver(metrics))]) }
    }

    /// Decides `hits` for `api` on `domain`'s policy, in one store call, and shows the decision to
    /// every observer.
    pub(crate) async fn decide(
        &self,
        domain: &Domain,
        api: Api,
        hits: &[Hit<'_>],
    ) -> Result<Verdict, EngineError> {
        let (mode, impossible) = mode(api);
        let started = now();
        let result = match domain.policy.evaluate_now(&self.store, mode, hits, impossible) {
            // The memory store decides at once: the decision's working state stays on the stack.
            Some(result) => result,
            // A store that must be awaited (Redis): its future on the heap, so that this one, which
            // every front door holds for each request in flight, stays small.
            None => Box::pin(domain.policy.evaluate(&self.store, mode, hits, impossible)).await,
        };
        let observed = Observed { api, domain, hits, result: &result, took: started.elapsed() };
        for observer in &self.observers {
            observer.observe(&observed);
        }
        result
    }
}

/// The start of a decision, for the latency histogram: server-side timing of a request, not a
/// decision's time (which the store's clock gives), hence the monotonic clock read here.
#[allow(clippy::disallowed_methods)]
fn now() -> Instant {
    Instant::now()
}

/// Counts decisions into the Prometheus series: per rule and outcome (peeks are not decisions and
/// are not counted), the decision's duration, and store failures.
#[derive(Debug)]
struct MetricsObserver(Metrics);

impl Observer for MetricsObserver {
    fn observe(&self, decision: &Observed<'_>) {
        let rules = &decision.domain.metrics;
        match decision.result {
            Err(_) => rules.record_duration(decision.took),
            Ok(verdict) => {
                if decision.api != Api::Peek {
                    rules.record(verdict, decision.hits, decision.took);
                }
                if verdict.store_error.is_some() {
                    self.0.store_error();
                }
            }
        }
    }
}
