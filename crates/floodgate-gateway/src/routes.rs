//! The route table: the configuration's routes as an axum router (so that the matched template is
//! axum's `MatchedPath`, and the `route` descriptor is what `floodgate_tower::route_template`
//! writes), with each route's runtime — breaker, concurrency permits, retry budget, upstream client,
//! series. A table is built for each applied configuration; a route keeps its breaker and permits
//! across a reload when its settings for them are unchanged, and its retry budget always (the
//! requests in flight still count).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::routing::{MethodFilter, MethodRouter, any, on};
use floodgate::breaker::{BreakerState, CircuitBreaker};
use floodgate_config::gateway::{ForwardedHeader, Route};
use floodgate_core::SystemClock;
use floodgate_tower::{ClientIp, ProxyHeader};
use http::HeaderName;
use tokio::sync::Semaphore;

use super::budget::Budget;
use super::descriptors::header_descriptors;
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

/// One of an LLM route's upstreams (`llm.upstreams`), tried in order, with its own client and
/// breaker (the route's `breaker` settings), and the rule of its quota.
pub(super) struct LlmUpstreamState {
    pub(super) uri: http::Uri,
    pub(super) client: Client,
    pub(super) breaker: Option<Arc<CircuitBreaker<SystemClock>>>,
    pub(super) quota_rule: Option<String>,
}

/// One route and its runtime.
pub(super) struct RouteState {
    pub(super) config: Route,
    pub(super) breaker: Option<Arc<CircuitBreaker<SystemClock>>>,
    pub(super) concurrency: Option<Arc<Semaphore>>,
    pub(super) budget: Arc<Budget>,
    pub(super) metrics: RouteMetrics,
    pub(super) client: Client,
    /// An LLM route's upstreams, in order (empty: the route's upstream alone).
    pub(super) upstreams: Vec<LlmUpstreamState>,
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
    /// Every route's requests go to `handle` (with the route's state).
    pub(super) fn build<H, F>(
        running: Arc<Running>,
        previous: Option<&RouteTable>,
        clients: &Clients,
        metrics: &GatewayMetrics,
        rule_metrics: &Metrics,
        clock: &SystemClock,
        handle: H,
    ) -> Option<RouteTable>
    where
        H: Fn(Arc<RouteState>, Request) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = axum::response::Response> + Send + 'static,
    {
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
            let upstreams = route
                .llm
                .iter()
                .flat_map(|l| l.upstreams.iter())
                .enumerate()
                .map(|(i, u)| {
                    // Kept across a reload when the upstream and the breaker's settings are unchanged.
                    let kept = before.and_then(|b| b.upstreams.get(i)).filter(|b_u| {
                        b_u.uri == u.upstream.uri && before.is_some_and(|b| b.config.breaker == route.breaker)
                    });
                    let breaker = match (kept, &route.breaker) {
                        (Some(k), Some(_)) => k.breaker.clone(),
                        (_, Some(settings)) => {
                            Some(Arc::new(CircuitBreaker::new(settings.clone(), clock.clone())))
                        }
                        (_, None) => None,
                    };
                    LlmUpstreamState {
                        uri: u.upstream.uri.clone(),
                        client: clients.get(route.timeouts.connect, u.upstream.http2),
                        breaker,
                        quota_rule: u.quota_rule.clone(),
                    }
                })
                .collect();
            routes.push(Arc::new(RouteState {
                config: route.clone(),
                breaker,
                concurrency,
                budget,
                metrics: route_metrics,
                client,
                upstreams,
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
            router: router(&routes, handle),
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

/// The axum router of `routes`, each route's requests to `handle`: one method router per template
/// (the configuration refused overlapping methods and conflicting templates, so building it cannot
/// panic). What no route takes is answered here, marked [`Unrouted`].
fn router<H, F>(routes: &[Arc<RouteState>], handle: H) -> Router
where
    H: Fn(Arc<RouteState>, Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = axum::response::Response> + Send + 'static,
{
    let mut by_path: Vec<(String, MethodRouter)> = Vec::new();
    for route in routes {
        let state = Arc::clone(route);
        let handle = handle.clone();
        let endpoint = move |request: Request| handle(Arc::clone(&state), request);
        let methods = match &route.config.methods {
            None => any(endpoint),
            Some(list) => {
                let filter = list
                    .iter()
                    .filter_map(|m| MethodFilter::try_from(m.clone()).ok())
                    .reduce(MethodFilter::or)
                    .unwrap_or(MethodFilter::GET);
                on(filter, endpoint)
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
    router.fallback(|| async { unrouted(false) }).method_not_allowed_fallback(|| async { unrouted(true) })
}

/// Marks a response to a request that no route takes (for the `unrouted` metrics).
#[derive(Debug, Clone, Copy)]
pub(super) struct Unrouted;

fn unrouted(method_known: bool) -> axum::response::Response {
    let mut response = respond::no_route(method_known);
    response.extensions_mut().insert(Unrouted);
    response
}
