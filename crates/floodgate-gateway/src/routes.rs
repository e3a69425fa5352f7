//! The route table: the configuration's routes in a router of their templates ([`Router`]: the
//! matched template is the `route` descriptor's, `GET /api/orders/{id}`, as
//! `floodgate_tower::route_template` writes it), with each route's runtime — breaker, concurrency permits, retry budget, upstream client,
//! series. A table is built for each applied configuration; a route keeps its breaker and permits
//! across a reload when its settings for them are unchanged, and its retry budget always (the
//! requests in flight still count).

use std::collections::HashMap;
use std::sync::Arc;

use floodgate::breaker::{BreakerState, CircuitBreaker};
use floodgate_config::gateway::{ForwardedHeader, Route};
use floodgate_core::SystemClock;
use floodgate_tower::{ClientIp, ProxyHeader};
use http::{HeaderName, HeaderValue, Method};
use tokio::sync::Semaphore;

use super::budget::Budget;
use super::descriptors::header_descriptors;
use super::identity::Verifier;
use super::metrics::{GatewayMetrics, RouteMetrics};
use super::policies::GatewayPolicies;
use super::pool::Inline;
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
    pub(super) inline: Option<Inline>,
    pub(super) breaker: Option<Arc<CircuitBreaker<SystemClock>>>,
    pub(super) quota_rule: Option<String>,
    /// Until when the provider asked not to be called (its 429's `retry-after-ms` or
    /// `retry-after`), on this instance.
    pub(super) cool_off: Arc<crate::cool_off::CoolOff<SystemClock>>,
}

/// One route and its runtime.
pub(super) struct RouteState {
    pub(super) config: Route,
    pub(super) breaker: Option<Arc<CircuitBreaker<SystemClock>>>,
    pub(super) concurrency: Option<Arc<Semaphore>>,
    pub(super) budget: Arc<Budget>,
    pub(super) metrics: RouteMetrics,
    pub(super) client: Client,
    /// The upstream's inline HTTP/1.1 connections (`None` for h2c).
    pub(super) inline: Option<Inline>,
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
            let client = clients.get(route.timeouts.connect, &route.upstream);
            let inline = clients.inline(&route.upstream, route.timeouts.connect);
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
                    let cool_off = kept.map_or_else(
                        || Arc::new(crate::cool_off::CoolOff::new(clock.clone())),
                        |k| Arc::clone(&k.cool_off),
                    );
                    LlmUpstreamState {
                        cool_off,
                        uri: u.upstream.uri.clone(),
                        client: clients.get(route.timeouts.connect, &u.upstream),
                        inline: clients.inline(&u.upstream, route.timeouts.connect),
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
                inline,
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
            router: Router::new(&routes),
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

/// The routes that take one path template, and the `Allow` header of a 405 on it.
#[derive(Debug)]
pub(super) struct Template {
    /// The template as configured (`/api/orders/{id}`): the `route` descriptor's path.
    pub(super) path: String,
    /// Its routes with the methods each takes (`None`: every method).
    routes: Vec<(Option<Vec<Method>>, Arc<RouteState>)>,
    allow: Option<HeaderValue>,
}

/// How a request is routed.
pub(super) enum Routed<'a> {
    /// To `route`, through its `template`.
    To(&'a Arc<RouteState>, &'a Template),
    /// No route takes its path (404).
    NoPath,
    /// A route takes its path, none its method (405, with `Allow` when known).
    NoMethod(Option<HeaderValue>),
}

/// The route table's router: the templates in a matchit router (what axum's router is made of, so
/// a path matches the same template it did), each with the methods of its routes. A `GET` route
/// also takes `HEAD` when no route of its template lists `HEAD`, as axum's method routers did.
#[derive(Debug, Default)]
pub(super) struct Router {
    matcher: matchit::Router<usize>,
    templates: Vec<Template>,
}

impl Router {
    /// The router of `routes` (the configuration refused overlapping methods and conflicting
    /// templates; a template matchit refuses anyway is left out, never a panic).
    fn new(routes: &[Arc<RouteState>]) -> Router {
        let mut router = Router::default();
        for route in routes {
            let config = &route.config;
            let i = match router.templates.iter().position(|t| t.path == config.path) {
                Some(i) => i,
                None => {
                    if let Err(e) = router.matcher.insert(config.path.clone(), router.templates.len()) {
                        tracing::warn!(route = %config.name, error = %e, "gateway: route template refused");
                        continue;
                    }
                    router.templates.push(Template {
                        path: config.path.clone(),
                        routes: Vec::new(),
                        allow: None,
                    });
                    router.templates.len() - 1
                }
            };
            router.templates[i].routes.push((config.methods.clone(), Arc::clone(route)));
        }
        for template in &mut router.templates {
            template.allow = allow(&template.routes);
        }
        router
    }

    /// Where a request for `method path` goes.
    pub(super) fn route(&self, method: &Method, path: &str) -> Routed<'_> {
        let Some(template) = self.matcher.at(path).ok().and_then(|m| self.templates.get(*m.value)) else {
            return Routed::NoPath;
        };
        let listed = |m: &Method| {
            template.routes.iter().find(|(methods, _)| methods.as_ref().is_some_and(|list| list.contains(m)))
        };
        let found = listed(method)
            .or_else(|| (*method == Method::HEAD).then(|| listed(&Method::GET)).flatten())
            .or_else(|| template.routes.iter().find(|(methods, _)| methods.is_none()));
        match found {
            Some((_, route)) => Routed::To(route, template),
            None => Routed::NoMethod(template.allow.clone()),
        }
    }
}

/// The `Allow` header of a template's routes: every method they list (`HEAD` with `GET`); none
/// when one takes every method.
fn allow(routes: &[(Option<Vec<Method>>, Arc<RouteState>)]) -> Option<HeaderValue> {
    let mut methods: Vec<&str> = Vec::new();
    for (list, _) in routes {
        for method in list.as_ref()? {
            let also_head = *method == Method::GET;
            for m in std::iter::once(method.as_str()).chain(also_head.then_some("HEAD")) {
                if !methods.contains(&m) {
                    methods.push(m);
                }
            }
        }
    }
    HeaderValue::from_str(&methods.join(",")).ok()
}
