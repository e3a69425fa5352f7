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
//! way — metrics, the sampled decision log, the dashboard's live feed and its heavy-hitter sketch
//! (`live/`) — is an [`Observer`] that sees each decision once, here, and never code inside a handler.
//!
//! Reservations go the same way: [`DecisionPath::reserve`] decides as a check (observed as one),
//! then keeps the reservation; [`DecisionPath::settle`] commits or releases it; observers see each
//! as a [`ReservationEvent`], and the memory store's sweeper reports, through the same observers,
//! every reservation that expired unsettled.

use std::cell::Cell;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::AnyStore;
use floodgate::reservation::Kind;
use floodgate::{
    Charges, Descriptors, EngineError, Hit, Impossible, Mode, Policy, ReserveError, Reserved, SettleError,
    Settled, Settlement, StoreError, Verdict,
};

use crate::control::Domain;
use crate::metrics::{Api, Metrics, ReservationResult};

/// One decision, as observers see it.
#[derive(Debug)]
pub struct Observed<'a> {
    /// Which front door asked.
    pub api: Api,
    /// The policy that decided (with its per-rule handles).
    pub domain: &'a Domain,
    /// What was asked.
    pub hits: &'a [Hit<'a>],
    /// What was answered.
    pub result: &'a Result<Verdict, EngineError>,
    /// How long the engine and the store took.
    pub took: Duration,
}

/// Something that happened to a reservation, as observers see it.
#[derive(Debug)]
pub enum ReservationEvent<'a> {
    /// A reserve, decided as a check on `domain`'s policy (and observed as one): `kept` when it was
    /// allowed and the store keeps the reservation (an allowed reserve the store could not keep
    /// holds nothing: what the check took was given back).
    Reserved {
        /// The policy that decided.
        domain: &'a Domain,
        /// What was asked.
        hit: &'a Hit<'a>,
        /// What was answered.
        verdict: &'a Verdict,
        /// Whether the reservation is held.
        kept: bool,
    },
    /// A commit or release on `domain`'s policy, or a retry of one answered again
    /// ([`Settled::replayed`]).
    Settled {
        /// The policy that settled it.
        domain: &'a Domain,
        /// What the settlement did.
        settled: &'a Settled,
    },
    /// A commit or release refused because the reservation had expired: what stays charged.
    Late {
        /// The policy asked to settle it.
        domain: &'a Domain,
        /// What the reservation holds, all still charged.
        charges: &'a Charges,
    },
    /// A reservation the store found expired unsettled (the memory store's sweeper reports each
    /// once; a Redis store reports none): what stays charged, by the rule names of the policy it
    /// was made on.
    Expired(&'a Charges),
}

/// Sees every decision of the decision path, once, after it is made and before it is rendered, and
/// every reservation event. Observers must be quick and must not block: they run on the request's
/// task (an expiry: on the memory store's sweeper thread).
pub trait Observer: Send + Sync + std::fmt::Debug + 'static {
    /// One decision.
    fn observe(&self, decision: &Observed<'_>);

    /// One reservation event. The default ignores it.
    fn observe_reservation(&self, event: &ReservationEvent<'_>) {
        let _ = event;
    }
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
pub struct DecisionPath {
    store: AnyStore,
    /// Shared with the memory store, which tells them of expired reservations.
    observers: Arc<[Box<dyn Observer>]>,
}

impl DecisionPath {
    /// The decision path on `store`, observed by `metrics`, by `others` (the dashboard's live
    /// view), and by the decision log when `decision_log_sample` (a share from 0 to 1) is above 0.
    /// A memory store tells these observers of the reservations it finds expired unsettled.
    pub fn new(
        store: AnyStore,
        metrics: Metrics,
        others: Vec<Box<dyn Observer>>,
        decision_log_sample: f64,
    ) -> Self {
        let mut observers: Vec<Box<dyn Observer>> = vec![Box::new(MetricsObserver(metrics))];
        observers.extend(others);
        if let Some(log) = DecisionLog::new(decision_log_sample) {
            observers.push(Box::new(log));
        }
        let observers: Arc<[Box<dyn Observer>]> = observers.into();
        if let AnyStore::Memory(memory) = &store {
            // The observers hold no store: no cycle.
            let told = Arc::clone(&observers);
            memory.on_expired_records(move |record| {
                if let Some(charges) = Charges::expired(record) {
                    notify(&told, &ReservationEvent::Expired(&charges));
                }
            });
        }
        DecisionPath { store, observers }
    }

    /// Decides `hits` for `api` on `domain`'s policy, in one store call, and shows the decision to
    /// every observer.
    pub async fn decide(&self, domain: &Domain, api: Api, hits: &[Hit<'_>]) -> Result<Verdict, EngineError> {
        // The memory store decides at once: the decision's working state stays on the stack.
        if let Some(result) = self.decide_now(domain, api, hits) {
            return result;
        }
        let (mode, impossible) = mode(api);
        let started = now();
        // The store's kind is told apart here, once, so that the policy runs on the store itself
        // (no call comes back up through this crate's `AnyStore`). Its future on the heap, so that
        // this one, which every front door holds for each request in flight, stays small.
        let result = match &self.store {
            AnyStore::Memory(memory) => {
                Box::pin(domain.policy.evaluate(memory, mode, hits, impossible)).await
            }
            AnyStore::Redis(redis) => Box::pin(domain.policy.evaluate(redis, mode, hits, impossible)).await,
        };
        self.observe(api, domain, hits, &result, started);
        result
    }

    /// [`DecisionPath::decide`] without waiting, where the store answers at once (the memory
    /// store, but one persisted with `fsync: always`): `None` when it must be awaited, and
    /// nothing was decided or prepared. A front door that decides in a plain call gets the verdict
    /// written in place, where each `async` layer it is returned through would copy it whole.
    pub fn decide_now(
        &self,
        domain: &Domain,
        api: Api,
        hits: &[Hit<'_>],
    ) -> Option<Result<Verdict, EngineError>> {
        let AnyStore::Memory(memory) = &self.store else { return None };
        if !memory.answers_at_once() {
            return None;
        }
        let (mode, impossible) = mode(api);
        let started = now();
        let result = domain.policy.evaluate_now(memory, mode, hits, impossible)?;
        self.observe(api, domain, hits, &result, started);
        Some(result)
    }

    /// Shows a decision made since `started` to every observer.
    fn observe(
        &self,
        api: Api,
        domain: &Domain,
        hits: &[Hit<'_>],
        result: &Result<Verdict, EngineError>,
        started: Instant,
    ) {
        let observed = Observed { api, domain, hits, result, took: started.elapsed() };
        for observer in self.observers.iter() {
            observer.observe(&observed);
        }
    }

    /// Reserves `hit` on `domain`'s policy for up to `ttl`: decided as a check
    /// ([`DecisionPath::decide`]), and when allowed, kept in the store until it is committed or
    /// released or its ttl ends (see `floodgate::reservation`). When the store cannot keep it, what
    /// the check took is given back and the store's error returned.
    pub async fn reserve(
        &self,
        domain: &Domain,
        hit: Hit<'_>,
        ttl: Duration,
    ) -> Result<Reserved, ReserveError> {
        let verdict = self.decide(domain, Api::Check, std::slice::from_ref(&hit)).await?;
        let kept = match verdict.allowed {
            true => {
                Some(domain.policy.record_reservation(&self.store, hit, &verdict, ttl, Kind::Reserve).await)
            }
            false => None,
        };
        let event = ReservationEvent::Reserved {
            domain,
            hit: &hit,
            verdict: &verdict,
            kept: matches!(kept, Some(Ok(_))),
        };
        notify(&self.observers, &event);
        let reservation = kept.transpose()?;
        Ok(Reserved { verdict, reservation })
    }

    /// Settles reservation `id` on `domain`'s policy: commits or releases it (see
    /// `floodgate::reservation`).
    pub async fn settle(
        &self,
        domain: &Domain,
        id: &str,
        settlement: Settlement<'_>,
    ) -> Result<Settled, SettleError> {
        let result = domain.policy.settle(&self.store, id, settlement).await;
        match &result {
            Ok(settled) => notify(&self.observers, &ReservationEvent::Settled { domain, settled }),
            Err(SettleError::Expired(charges)) => {
                notify(&self.observers, &ReservationEvent::Late { domain, charges });
            }
            Err(_) => {}
        }
        result
    }
}

/// Shows `event` to every observer.
fn notify(observers: &[Box<dyn Observer>], event: &ReservationEvent<'_>) {
    for observer in observers {
        observer.observe_reservation(event);
    }
}

impl DecisionPath {
    /// Frees the concurrency permits `verdict` holds: `policy`'s answer to one request with
    /// `descriptors` (a permit is otherwise freed when its lease expires).
    pub async fn release_permits(
        &self,
        policy: &Policy,
        descriptors: &Descriptors,
        verdict: &Verdict,
    ) -> Result<(), StoreError> {
        match &self.store {
            AnyStore::Memory(memory) => policy.release_permits(memory, descriptors, verdict).await,
            AnyStore::Redis(redis) => policy.release_permits(redis, descriptors, verdict).await,
        }
    }
}

/// The start of a decision, for the latency histogram: server-side timing of a request, not a
/// decision's time (which the store's clock gives), hence the monotonic clock read here.
#[allow(clippy::disallowed_methods)]
fn now() -> Instant {
    Instant::now()
}

/// Counts decisions into the Prometheus series: per rule and outcome (peeks are not decisions and
/// are not counted), the decision's duration, and store failures; and reservations, per rule and
/// result (see `metrics::reservations`).
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

    fn observe_reservation(&self, event: &ReservationEvent<'_>) {
        let (domain, charges, result) = match *event {
            ReservationEvent::Reserved { domain, hit, verdict, kept } => {
                for limit in &verdict.limits {
                    let Some(series) = domain.metrics.reservations(limit.index) else { continue };
                    match limit.grant {
                        Some(grant) if kept => series.count(ReservationResult::Granted, grant.cost),
                        _ if !verdict.allowed && limit.outcome.denies() => {
                            series.count(ReservationResult::Refused, hit.cost_in(&limit.dimension));
                        }
                        _ => {}
                    }
                }
                return;
            }
            // A retry answered again was counted when it was made.
            ReservationEvent::Settled { settled, .. } if settled.replayed => return,
            ReservationEvent::Settled { domain, settled } => {
                let result = if settled.committed {
                    ReservationResult::Committed
                } else {
                    ReservationResult::Released
                };
                (domain.name.as_deref(), &settled.charges, result)
            }
            ReservationEvent::Late { domain, charges } => {
                (domain.name.as_deref(), charges, ReservationResult::Late)
            }
            ReservationEvent::Expired(charges) => (None, charges, ReservationResult::Expired),
        };
        // A check's concurrency permits are not a reservation.
        if charges.kind != Kind::Reserve {
            return;
        }
        for charge in &charges.rules {
            let units = match result {
                ReservationResult::Released => charge.held - charge.charged,
                _ => charge.charged,
            };
            self.0.reservations(domain, &charge.rule).count(result, units);
        }
    }
}

/// Logs a sampled share of decisions, one `info` line each (`event = "decision"`): the front
/// door, the domain, whether the request was allowed, every rule that applied with its outcome,
/// the descriptors of each hit, and how long the decision took. A decision not sampled costs one
/// step of a per-thread random number generator: no lock, no allocation; only a sampled one
/// formats a line.
#[derive(Debug)]
pub struct DecisionLog {
    /// A decision is logged when a uniform random `u64` is below this (`u64::MAX`: all of them).
    threshold: u64,
}

impl DecisionLog {
    /// Logs about `share` of decisions (0 to 1); `None` for 0 (or less, or not a number).
    pub fn new(share: f64) -> Option<DecisionLog> {
        if share.is_nan() || share <= 0.0 {
            return None;
        }
        // `as` saturates: a share of 1 (or more) is every decision.
        let threshold = if share >= 1.0 { u64::MAX } else { (share * u64::MAX as f64) as u64 };
        Some(DecisionLog { threshold })
    }

    /// Whether this decision is one of the sample.
    fn sampled(&self) -> bool {
        self.threshold == u64::MAX || next_random() < self.threshold
    }
}

thread_local! {
    /// Each thread's xorshift64* state, seeded from the process's random hasher keys and the
    /// thread: never 0.
    static RANDOM: Cell<u64> = Cell::new({
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(0x9e37_79b9_7f4a_7c15);
        hasher.finish() | 1
    });
}

/// A uniform random `u64` (xorshift64*): enough for sampling, and free of locks.
fn next_random() -> u64 {
    RANDOM.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

impl Observer for DecisionLog {
    fn observe(&self, decision: &Observed<'_>) {
        if !self.sampled() {
            return;
        }
        let api = decision.api.label();
        let domain = decision.domain.name.as_deref();
        let descriptors = HitsDisplay(decision.hits);
        let took_us = u64::try_from(decision.took.as_micros()).unwrap_or(u64::MAX);
        match decision.result {
            Ok(verdict) => tracing::info!(
                event = "decision",
                api,
                domain,
                allowed = verdict.allowed,
                limits = %LimitsDisplay(verdict),
                descriptors = %descriptors,
                store_error = verdict.store_error.as_ref().map(tracing::field::display),
                took_us,
                "decision"
            ),
            Err(error) => tracing::info!(
                event = "decision",
                api,
                domain,
                error = %error,
                descriptors = %descriptors,
                took_us,
                "decision"
            ),
        }
    }
}

/// `rule:outcome` for every rule that applied, in order: `chat-per-user:denied tenant-hourly:allowed`.
struct LimitsDisplay<'a>(&'a Verdict);

impl fmt::Display for LimitsDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, limit) in self.0.limits.iter().enumerate() {
            let space = if i == 0 { "" } else { " " };
            write!(f, "{space}{}:{}", limit.rule, limit.outcome.as_str())?;
        }
        Ok(())
    }
}

/// Each hit's descriptors, `name=value` with the value quoted as a Rust string (so a value with
/// spaces or quotes reads back unambiguously), hits separated by ` | `, a cost other than 1 as
/// `cost=N` (costs per dimension as `cost.tokens=N`): `user="u1" route="POST /chat"`.
struct HitsDisplay<'a>(&'a [Hit<'a>]);

impl fmt::Display for HitsDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, hit) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            for (j, (name, value)) in hit.descriptors.iter().enumerate() {
                let space = if j == 0 { "" } else { " " };
                write!(f, "{space}{name}={value:?}")?;
            }
            match hit.costs {
                Some(costs) => {
                    for (dimension, cost) in costs.iter() {
                        write!(f, " cost.{dimension}={cost}")?;
                    }
                }
                None if hit.cost != 1 => write!(f, " cost={}", hit.cost)?,
                None => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_share_logs_nothing_and_a_whole_share_logs_everything() {
        for share in [0.0, -1.0, f64::NAN] {
            assert!(DecisionLog::new(share).is_none(), "{share}");
        }
        let all = DecisionLog::new(1.0).unwrap();
        assert!((0..10_000).all(|_| all.sampled()));
    }

    #[test]
    fn a_share_samples_about_that_share_of_decisions() {
        // 100 000 draws at p: the count is binomial, with a standard deviation of sqrt(n p (1-p));
        // 6 of them either side fails once in ~10^9 runs.
        let n = 100_000u32;
        for share in [0.001, 0.01, 0.5] {
            let log = DecisionLog::new(share).unwrap();
            let sampled = (0..n).filter(|_| log.sampled()).count() as f64;
            let expected = f64::from(n) * share;
            let sd = (expected * (1.0 - share)).sqrt();
            assert!(
                (sampled - expected).abs() <= 6.0 * sd,
                "share {share}: {sampled} of {n}, expected {expected} ± {}",
                6.0 * sd
            );
        }
    }

    #[test]
    fn descriptors_are_quoted_so_a_line_reads_back_unambiguously() {
        let a = floodgate::Descriptors::new().with("user", "u \"1\"").with("route", "POST /chat");
        let b = floodgate::Descriptors::new().with("tenant", "t1");
        let hits = [Hit::new(&a, 1), Hit::new(&b, 5)];
        assert_eq!(
            HitsDisplay(&hits).to_string(),
            r#"user="u \"1\"" route="POST /chat" | tenant="t1" cost=5"#
        );
    }
}
