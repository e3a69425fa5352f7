//! The gateway's state ([`GatewayState`]: its route table, upstream clients, stale cache, accepted
//! writes, waiting room and metrics, over the app), and what a request's handler is given
//! ([`Context`]). Below the handlers: nothing here knows them.

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::response::Response;
use floodgate::delay::{DelayQueues, InTurn, Room, Waiting, decide_in_turn, makes_wait};
use floodgate::{Descriptors, EngineError, Hit, Verdict};
use floodgate_app::App;
use floodgate_app::control::{Domain, Running};
use floodgate_app::metrics::{Api, Metrics};
use floodgate_config::gateway::Switches;
use floodgate_core::SystemClock;
use http::Method;

use super::metrics::GatewayMetrics;
use super::queue::{Queue, QueueError};
use super::respond;
use super::routes::RouteTable;
use super::stale::StaleCache;
use super::upstream::Clients;

/// The path prefix of the gateway's own endpoints on its listener.
const OWN_PREFIX: &str = "/_floodgate/accepted/";

/// What a request's handler needs.
#[derive(Clone)]
pub(super) struct Context {
    pub(super) gateway: Arc<GatewayState>,
    pub(super) table: Arc<RouteTable>,
    pub(super) peer: SocketAddr,
}

/// Builds the route table of a configuration (see [`RouteTable::build`]), with the handler every
/// route's requests go to: given by whoever opens the gateway, so that the state needs no handler.
pub(crate) type TableBuilder = fn(
    Arc<Running>,
    Option<&RouteTable>,
    &Clients,
    &GatewayMetrics,
    &Metrics,
    &SystemClock,
) -> Option<RouteTable>;

/// The gateway's state.
pub(crate) struct GatewayState {
    pub(super) app: App,
    table: ArcSwap<RouteTable>,
    rebuild: parking_lot::Mutex<()>,
    build: TableBuilder,
    clients: Clients,
    pub(super) stale: Arc<StaleCache>,
    pub(super) queue: Option<Queue>,
    waiting: Waiting,
    queues: DelayQueues,
    pub(super) metrics: GatewayMetrics,
    pub(super) clock: SystemClock,
}

impl GatewayState {
    /// The gateway of `app`'s running configuration, if it has one.
    pub(super) fn open(app: App, build: TableBuilder) -> Result<Option<GatewayState>, QueueError> {
        let running = app.control().current();
        let Some(config) = running.gateway.clone() else { return Ok(None) };
        let queue = match &config.state_dir {
            Some(dir) if config.routes.iter().any(|r| r.degrade.accept_async) => Some(Queue::open(dir)?),
            _ => None,
        };
        let clients = Clients::default();
        let metrics = GatewayMetrics::new(app.metrics());
        let clock = SystemClock::new();
        let Some(table) = build(running, None, &clients, &metrics, app.metrics(), &clock) else {
            return Ok(None);
        };
        if let Some(queue) = &queue {
            metrics.accepted_pending.set(queue.pending() as f64);
        }
        Ok(Some(GatewayState {
            stale: Arc::new(StaleCache::new(config.stale_cache.max_bytes, config.stale_cache.max_entry)),
            waiting: Waiting::new(config.max_waiting),
            queues: DelayQueues::new(config.delay_queue.clone(), clock.clone()),
            table: ArcSwap::from_pointee(table),
            rebuild: parking_lot::Mutex::new(()),
            build,
            app,
            clients,
            queue,
            metrics,
            clock,
        }))
    }

    /// The route table of the configuration in force (rebuilt once after each applied change).
    pub(super) fn table(&self) -> Arc<RouteTable> {
        let table = self.table.load_full();
        let version = self.app.control().load().version;
        if table.version == version {
            return table;
        }
        let _one_at_a_time = self.rebuild.lock();
        let table = self.table.load_full();
        let running = self.app.control().current();
        if table.version == running.version {
            return table;
        }
        match (self.build)(
            running,
            Some(&table),
            &self.clients,
            &self.metrics,
            self.app.metrics(),
            &self.clock,
        ) {
            Some(new) => {
                let new = Arc::new(new);
                self.table.store(Arc::clone(&new));
                new
            }
            None => table,
        }
    }

    /// The answer to a request for the gateway's own endpoints (an accepted write's status), if
    /// it is one.
    pub(super) fn own<B>(&self, request: &http::Request<B>) -> Option<Response> {
        let id = request.uri().path().strip_prefix(OWN_PREFIX).filter(|_| request.method() == Method::GET)?;
        Some(match &self.queue {
            Some(queue) => queue.status(id),
            None => respond::no_route(false),
        })
    }

    pub(super) fn switches(&self, table: &RouteTable) -> Switches {
        self.app.switches().effective(table.config.switches)
    }

    /// [`GatewayState::gate`] at once where it can be: a domain with no rules, or a store that
    /// answers without waiting (the memory store) with nobody waiting in turn and a verdict no
    /// delay rule makes wait. A verdict returned from plain calls is written in place; through
    /// each `async` layer it would be copied whole. [`Gated::Later`]: `gate` must be awaited,
    /// with the verdict already decided, if any.
    pub(super) fn gate_now(&self, domain: &Domain, descriptors: &Descriptors) -> Gated {
        if domain.policy.rules().next().is_none() {
            return Gated::Now(Ok(Verdict { allowed: true, ..Verdict::default() }));
        }
        if !self.queues.is_empty() {
            return Gated::Later(None);
        }
        let hits = [Hit::new(descriptors, 1)];
        let Some(decided) = self.app.decisions().decide_now(domain, Api::Gateway, &hits) else {
            return Gated::Later(None);
        };
        match refusal(decided) {
            Ok(verdict) if makes_wait(&domain.policy, &verdict) => Gated::Later(Some(verdict)),
            answered => Gated::Now(answered),
        }
    }

    /// What [`GatewayState::gate_now`] left for later ([`Gated::Later`]): decides `descriptors` on
    /// `domain`, waiting for capacity when a delay rule denied (up to its `max_wait`, among at
    /// most `max_waiting` waiting requests), in turn with the requests waiting for the same delay
    /// key, by priority `tier` ([`floodgate::delay`]); `first`, the verdict `gate_now` already
    /// decided, if any. The verdict: allowed, or denied; or the answer to a request whose
    /// descriptors a rule cannot use (a quota's time zone header that names no zone).
    pub(super) async fn gate(
        &self,
        domain: &Domain,
        descriptors: &Descriptors,
        tier: u8,
        first: Option<Verdict>,
    ) -> Result<Verdict, Response> {
        let decide = || async {
            refusal(self.app.decisions().decide(domain, Api::Gateway, &[Hit::new(descriptors, 1)]).await)
        };
        self.in_turn(domain, descriptors, tier, first, decide).await
    }

    /// Decides with `decide` in turn ([`decide_in_turn`] in this gateway's waiting room): waiting
    /// while a delay rule of `domain` denies, behind the requests waiting for the same delay key,
    /// by priority `tier`; counted in the waiting gauge and the delayed counters. What `decide`
    /// last answered: allowed, denied, or its error.
    pub(super) async fn in_turn<E, F, Fut>(
        &self,
        domain: &Domain,
        descriptors: &Descriptors,
        tier: u8,
        first: Option<Verdict>,
        mut decide: F,
    ) -> Result<Verdict, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Verdict, E>>,
    {
        // With nobody waiting, decided here once; the waiting room (its future several kilobytes,
        // which every request in flight would carry) only for a request a delay rule makes wait.
        let first = match (first, self.queues.is_empty()) {
            (Some(verdict), _) => Some(verdict),
            (None, true) => {
                let verdict = decide().await?;
                if !makes_wait(&domain.policy, &verdict) {
                    return Ok(verdict);
                }
                Some(verdict)
            }
            (None, false) => None,
        };
        let room = Room { waiting: &self.waiting, queues: &self.queues, sleep: tokio::time::sleep };
        let on_wait = || self.metrics.waiting.set(self.waiting.waiting() as f64);
        let InTurn { result, waited } =
            Box::pin(decide_in_turn(room, &domain.policy, descriptors, tier, first, decide, on_wait)).await;
        if waited {
            self.metrics.waiting.set(self.waiting.waiting() as f64);
            if let Ok(verdict) = &result {
                let counter =
                    if verdict.allowed { &self.metrics.delayed_passed } else { &self.metrics.delayed_denied };
                counter.increment(1);
            }
        }
        result
    }
}

/// What [`GatewayState::gate_now`] found.
pub(super) enum Gated {
    /// Decided: the verdict, or the refusal of descriptors a rule cannot use.
    Now(Result<Verdict, Response>),
    /// To be decided in turn with [`GatewayState::gate`], from this verdict if one was decided.
    Later(Option<Verdict>),
}

/// A decision as the gateway answers it: the verdict, or the refusal of a request whose
/// descriptors a rule cannot use.
#[allow(clippy::result_large_err)] // the verdict is the larger; a refusal is answered at once
fn refusal(decided: Result<Verdict, EngineError>) -> Result<Verdict, Response> {
    match decided {
        Ok(verdict) => Ok(verdict),
        // Never let a value the client sends pass the limits unchecked: refused, naming it.
        Err(EngineError::Descriptor { descriptor, value, expected, .. }) => Err(respond::malformed(format!(
            "The request's {descriptor} descriptor is {value:?}, which is not {expected}."
        ))),
        Err(EngineError::MissingDescriptor { descriptor, .. }) => Err(respond::malformed(format!(
            "The request has no {descriptor} descriptor, which a limit needs."
        ))),
        // A cost of 1 is always possible.
        Err(EngineError::Cost { .. }) => Ok(Verdict { allowed: true, ..Verdict::default() }),
        // A rule that needs a stated limit, which the gateway never states.
        Err(error @ (EngineError::Stated { .. } | EngineError::Unclaimed { .. })) => {
            Err(respond::malformed(format!("{error}.")))
        }
    }
}

impl std::fmt::Debug for GatewayState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayState")
            .field("table", &self.table)
            .field("clients", &self.clients)
            .field("queue", &self.queue)
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}
