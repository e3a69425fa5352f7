//! The route table: the configuration's routes as an axum router (so that the matched template is
//! axum's `MatchedPath`, and the `route` descriptor is what `floodgate_tower::route_template`
//! writes), with each route's runtime — breaker, concurrency permits, retry budget, upstream client,
//! series. A table is built for each applied configuration; a route keeps its breaker and permits
//! across a reload when its settings for them are unchanged, and its retry budget always (the
//! requests in flight still count).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::Request;
use axum::routing::{MethodFilter, MethodRouter, any, on};
use floodgate::breaker::{BreakerState, CircuitBreaker};
use floodgate_config::gateway::{ForwardedHeader, Retries, Route};
use floodgate_core::SystemClock;
use floodgate_tower::{ClientIp, ProxyHeader};
use http::HeaderName;
use tokio::sync::Semaphore;

use super::descriptors::header_descriptors;
use super::handler::{self, Context};
use super::identity::Verifier;
use super::metrics::{GatewayMetrics, RouteMetrics};
use super::policies::GatewayPolicies;
use super::respond;
use super::upstream::{Client, Clients};
use floodgate_app::control::Running;
use floodgate_app::metrics::Metrics;
use floodgate_config::gateway::GatewayConfig;

/// The routes of one applied configuration.
#[derive(Debug)]
pub(super) struct RouteTable {
    /// The configuration version it was built from.
    pub(super) version: u64,
    pub(super) running: Arc<Running>,
    /// The `gateway:` section it was built from.
    pub(super) config: Arc<GatewayConfig>,
    /// The native policy in its two phases.
    pub(super) policies: GatewayPolicies,
    pub(super) router: Router,
    pub(super) routes: Vec<Arc<RouteState>>,
    pub(super) client_ip: ClientIp,
    /// The `header.<name>` descriptors the rules use.
    pub(super) headers: Vec<(HeaderName, String)>,
    pub(super) verifier: Option<Verifier>,
}

/// One route and its runtime.
pub(super) struct RouteState {
    pub(super) config: Route,
    pub(super) breaker: Option<Arc<CircuitBreaker<SystemClock>>>,
    pub(super) concurrency: Option<Arc<Semaphore>>,
    pub(super) budget: Arc<Budget>,
    pub(super) metrics: RouteMetrics,
    pub(super) client: Client,
}

impl std::fmt::Debug for RouteState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteState")
            .field("route", &self.config.name)
            .field("breaker", &self.breaker.as_ref().map(|b| b.state()))
            .finish_non_exhaustive()
    }
}

impl RouteTable {
    /// The table of `running` (which has a gateway), reusing what `previous` kept for routes whose
    /// settings are unchanged.
    pub(super) fn build(
        running: Arc<Running>,
        previous: Option<&RouteTable>,
        clients: &Clients,
        metrics: &GatewayMetrics,
        rule_metrics: &Metrics,
        clock: &SystemClock,
    ) -> Option<RouteTable> {
        let config = Arc::clone(running.gateway.as_ref()?);
        let policies = GatewayPolicies::new(&running, rule_metrics);
        let old: HashMap<&str, &Arc<RouteState>> = previous
            .map(|t| t.routes.iter().map(|r| (r.config.name.as_str(), r)).collect())
            .unwrap_or_default();
        let mut routes = Vec::with_capacity(config.routes.len());
        for route in &config.routes {
            let before = old.get(route.name.as_str());
            let route_metrics = metrics.route(&route.name, route.breaker.is_some());
            let breaker = match (&route.breaker, before) {
                (Some(settings), Some(b)) if b.config.breaker.as_ref() == Some(settings) => b.breaker.clone(),
                (Some(settings), _) => {
                    let gauge = route_metrics.breaker.clone();
                    let name = route.name.clone();
                    Some(Arc::new(CircuitBreaker::with_on_change(
                        settings.clone(),
                        clock.clone(),
                        Arc::new(move |state: BreakerState| {
                            gauge.set(f64::from(state.gauge()));
                            match state {
                                BreakerState::Open => {
                                    tracing::warn!(route = %name, "gateway: route breaker open")
                                }
                                BreakerState::HalfOpen => {
                                    tracing::info!(route = %name, "gateway: route breaker half-open: one probe")
                                }
                                BreakerState::Closed => {
                                    tracing::info!(route = %name, "gateway: route breaker closed")
                                }
                            }
                        }),
                    )))
                }
                (None, _) => None,
            };
            if let Some(b) = &breaker {
                route_metrics.breaker.set(f64::from(b.state().gauge()));
            }
            let concurrency = match (route.concurrency, before) {
                (Some(n), Some(b)) if b.config.concurrency == Some(n) => b.concurrency.clone(),
                (Some(n), _) => Some(Arc::new(Semaphore::new(n as usize))),
                (None, _) => None,
            };
            let budget = before.map(|b| Arc::clone(&b.budget)).unwrap_or_default();
            let client = clients.get(route.timeouts.connect, route.upstream.http2);
            routes.push(Arc::new(RouteState {
                config: route.clone(),
                breaker,
                concurrency,
                budget,
                metrics: route_metrics,
                client,
            }));
        }
        let mut client_ip = ClientIp::new();
        for net in &config.trusted_proxies {
            client_ip = client_ip.trust(*net);
        }
        client_ip = client_ip.header(match config.forwarded_header {
            ForwardedHeader::XForwardedFor => ProxyHeader::XForwardedFor,
            ForwardedHeader::Forwarded => ProxyHeader::Forwarded,
        });
        let verifier = config.identity.jwt.as_ref().map(Verifier::new);
        let headers = header_descriptors(&running.native.policy);
        Some(RouteTable {
            version: running.version,
            router: router(&routes),
            routes,
            client_ip,
            headers,
            verifier,
            config,
            policies,
            running,
        })
    }

    /// The route named `name`.
    pub(super) fn route(&self, name: &str) -> Option<&Arc<RouteState>> {
        self.routes.iter().find(|r| r.config.name == name)
    }
}

/// The axum router of `routes`: one method router per template (the configuration refused
/// overlapping methods and conflicting templates, so building it cannot panic).
fn router(routes: &[Arc<RouteState>]) -> Router {
    let mut by_path: Vec<(String, MethodRouter)> = Vec::new();
    for route in routes {
        let state = Arc::clone(route);
        let handle = move |request: Request| {
            let state = Arc::clone(&state);
            async move {
                let context = request.extensions().get::<Context>().cloned();
                match context {
                    Some(context) => handler::route(context, state, request).await,
                    None => respond::malformed("the request reached a route outside the gateway"),
                }
            }
        };
        let methods = match &route.config.methods {
            None => any(handle),
            Some(list) => {
                let filter = list
                    .iter()
                    .filter_map(|m| MethodFilter::try_from(m.clone()).ok())
                    .reduce(MethodFilter::or)
                    .unwrap_or(MethodFilter::GET);
                on(filter, handle)
            }
        };
        match by_path.iter_mut().find(|(p, _)| *p == route.config.path) {
            Some((_, existing)) => {
                let merged = std::mem::take(existing).merge(methods);
                *existing = merged;
            }
            None => by_path.push((route.config.path.clone(), methods)),
        }
    }
    let mut router = Router::new();
    for (path, methods) in by_path {
        router = router.route(&path, methods);
    }
    router
        .fallback(|request: Request| async move { unrouted(&request, false) })
        .method_not_allowed_fallback(|request: Request| async move { unrouted(&request, true) })
}

fn unrouted(request: &Request, method_known: bool) -> axum::response::Response {
    let response = respond::no_route(method_known);
    if let Some(context) = request.extensions().get::<Context>() {
        context.gateway.metrics.unrouted.answered(response.status());
    }
    response
}

// === impl Budget ===

/// A route's retry budget, Envoy-style: retries in flight may reach `budget` × the route's first
/// attempts in flight (at least `min_concurrent`), so that retry traffic stays within `budget` of
/// new traffic however hard the upstream fails.
#[derive(Debug, Default)]
pub(super) struct Budget {
    first: AtomicU64,
    retries: AtomicU64,
}

/// A first attempt in flight; counted until dropped.
#[derive(Debug)]
pub(super) struct FirstAttempt(Arc<Budget>);

/// A retry in flight (its backoff and its attempt); counted until dropped.
#[derive(Debug)]
pub(super) struct RetrySlot(Arc<Budget>);

impl Budget {
    pub(super) fn first_attempt(self: &Arc<Self>) -> FirstAttempt {
        self.first.fetch_add(1, Ordering::AcqRel);
        FirstAttempt(Arc::clone(self))
    }

    /// A retry, if the budget allows one now.
    pub(super) fn try_retry(self: &Arc<Self>, settings: &Retries) -> Option<RetrySlot> {
        let first = self.first.load(Ordering::Acquire) as f64;
        let allowed = (settings.budget * first).max(f64::from(settings.min_concurrent));
        let mut current = self.retries.load(Ordering::Acquire);
        loop {
            if (current + 1) as f64 > allowed {
                return None;
            }
            match self.retries.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(RetrySlot(Arc::clone(self))),
                Err(seen) => current = seen,
            }
        }
    }

    /// `(first attempts, retries)` in flight.
    #[cfg(test)]
    fn in_flight(&self) -> (u64, u64) {
        (self.first.load(Ordering::Acquire), self.retries.load(Ordering::Acquire))
    }
}

impl Drop for FirstAttempt {
    fn drop(&mut self) {
        self.0.first.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for RetrySlot {
    fn drop(&mut self) {
        self.0.retries.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_in_flight_stay_within_the_budget_of_first_attempts() {
        let budget = Arc::new(Budget::default());
        let settings = Retries { budget: 0.2, min_concurrent: 0, ..Retries::default() };
        let firsts: Vec<_> = (0..10).map(|_| budget.first_attempt()).collect();
        let a = budget.try_retry(&settings).expect("0.2 × 10 = 2 retries");
        let b = budget.try_retry(&settings).expect("the second");
        assert!(budget.try_retry(&settings).is_none(), "a third would pass 20 %");
        drop(a);
        let c = budget.try_retry(&settings).expect("a place came back");
        assert_eq!(budget.in_flight(), (10, 2));
        drop((b, c, firsts));
        assert_eq!(budget.in_flight(), (0, 0));
        assert!(budget.try_retry(&settings).is_none(), "no traffic, no minimum: no retry");
        let floor = Retries { budget: 0.2, min_concurrent: 3, ..Retries::default() };
        let held: Vec<_> = (0..3).map(|_| budget.try_retry(&floor).expect("within the minimum")).collect();
        assert!(budget.try_retry(&floor).is_none());
        drop(held);
    }
}
