//! One gateway request, gate by gate (see the [module docs](super)).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use floodgate::delay::{Waiting, next_wait};
use floodgate::{Descriptors, EngineError, Hit, Verdict};
use floodgate_config::gateway::Switches;
use floodgate_core::{Clock, SystemClock};
use floodgate_http::rate_limit_headers;
use http::{HeaderName, HeaderValue, Method, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::ServiceExt;

use super::body::{GatewayBody, Held, RulePermits, Tee};
use super::identity::{Identity, describe_identity};
use super::metrics::GatewayMetrics;
use super::queue::{self, Accepted, Queue, QueueError};
use super::respond;
use super::routes::{RouteState, RouteTable};
use super::stale::{self, STALE_HEADER, StaleCache};
use super::upstream::{self, Failure, Outgoing, Prepared};
use floodgate_app::App;
use floodgate_app::control::Domain;
use floodgate_app::metrics::Api;

/// The path prefix of the gateway's own endpoints on its listener.
const OWN_PREFIX: &str = "/_floodgate/accepted/";

/// What a request's handler needs, passed in its extensions.
#[derive(Clone)]
pub(super) struct Context {
    pub(super) gateway: Arc<Gateway>,
    pub(super) table: Arc<RouteTable>,
    pub(super) peer: SocketAddr,
}

/// The gateway's state.
#[derive(Debug)]
pub(crate) struct Gateway {
    pub(super) app: App,
    table: ArcSwap<RouteTable>,
    rebuild: parking_lot::Mutex<()>,
    clients: super::upstream::Clients,
    pub(super) stale: Arc<StaleCache>,
    pub(super) queue: Option<Queue>,
    waiting: Waiting,
    pub(super) metrics: GatewayMetrics,
    clock: SystemClock,
}

impl Gateway {
    /// The gateway of `app`'s running configuration, if it has one.
    pub(super) fn open(app: App) -> Result<Option<Gateway>, QueueError> {
        let running = app.control().current();
        let Some(config) = running.gateway.clone() else { return Ok(None) };
        let queue = match &config.state_dir {
            Some(dir) if config.routes.iter().any(|r| r.degrade.accept_async) => Some(Queue::open(dir)?),
            _ => None,
        };
        let clients = super::upstream::Clients::default();
        let metrics = GatewayMetrics::new(app.metrics());
        let clock = SystemClock::new();
        let Some(table) = RouteTable::build(running, None, &clients, &metrics, app.metrics(), &clock) else {
            return Ok(None);
        };
        if let Some(queue) = &queue {
            metrics.accepted_pending.set(queue.pending() as f64);
        }
        Ok(Some(Gateway {
            stale: Arc::new(StaleCache::new(config.stale_cache.max_bytes, config.stale_cache.max_entry)),
            waiting: Waiting::new(config.max_waiting),
            table: ArcSwap::from_pointee(table),
            rebuild: parking_lot::Mutex::new(()),
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
        match RouteTable::build(
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

    /// One request from the listener.
    pub(super) async fn dispatch(
        self: Arc<Self>,
        mut request: http::Request<Incoming>,
        peer: SocketAddr,
    ) -> Response {
        if request.method() == Method::GET
            && let Some(id) = request.uri().path().strip_prefix(OWN_PREFIX)
        {
            return match &self.queue {
                Some(queue) => queue.status(id),
                None => respond::no_route(false),
            };
        }
        let table = self.table();
        request.extensions_mut().insert(ConnectInfo(peer));
        request.extensions_mut().insert(Context {
            gateway: Arc::clone(&self),
            table: Arc::clone(&table),
            peer,
        });
        match table.router.clone().oneshot(request.map(Body::new)).await {
            Ok(response) => response,
            Err(infallible) => match infallible {},
        }
    }

    fn switches(&self, table: &RouteTable) -> Switches {
        self.app.switches().effective(table.config.switches)
    }

    /// Decides `descriptors` on `domain`, waiting for capacity when a delay rule denied (up to its
    /// `max_wait`, among at most `max_waiting` waiting requests). The verdict: allowed, or denied;
    /// or the answer to a request whose descriptors a rule cannot use (a quota's time zone header
    /// that names no zone).
    async fn gate(&self, domain: &Domain, descriptors: &Descriptors) -> Result<Verdict, Response> {
        if domain.policy.rules().next().is_none() {
            return Ok(Verdict { allowed: true, ..Verdict::default() });
        }
        let mut waited = Duration::ZERO;
        let mut slot = None;
        loop {
            let verdict =
                match self.app.decisions().decide(domain, Api::Gateway, &[Hit::new(descriptors, 1)]).await {
                    Ok(verdict) => verdict,
                    // Never let a value the client sends pass the limits unchecked: refused, naming it.
                    Err(EngineError::Descriptor { descriptor, value, expected, .. }) => {
                        return Err(respond::malformed(format!(
                            "The request's {descriptor} descriptor is {value:?}, which is not {expected}."
                        )));
                    }
                    Err(EngineError::MissingDescriptor { descriptor, .. }) => {
                        return Err(respond::malformed(format!(
                            "The request has no {descriptor} descriptor, which a limit needs."
                        )));
                    }
                    // A cost of 1 is always possible.
                    Err(EngineError::Cost { .. }) => {
                        return Ok(Verdict { allowed: true, ..Verdict::default() });
                    }
                };
            let wait = if verdict.allowed { None } else { next_wait(&domain.policy, &verdict, waited) };
            let Some(wait) = wait else {
                if let Some(slot) = slot.take() {
                    drop(slot);
                    self.metrics.waiting.set(self.waiting.waiting() as f64);
                    let counter = if verdict.allowed {
                        &self.metrics.delayed_passed
                    } else {
                        &self.metrics.delayed_denied
                    };
                    counter.increment(1);
                }
                return Ok(verdict);
            };
            if slot.is_none() {
                slot = self.waiting.enter();
                if slot.is_none() {
                    return Ok(verdict);
                }
                self.metrics.waiting.set(self.waiting.waiting() as f64);
            }
            tokio::time::sleep(wait).await;
            waited += wait;
        }
    }
}

/// Both phases' verdicts as one, for the rate-limit headers.
fn merged(before: Verdict, after: Verdict) -> Verdict {
    let mut limits = before.limits;
    limits.extend(after.limits);
    Verdict {
        allowed: before.allowed && after.allowed,
        at: before.at.max(after.at),
        limits,
        store_error: before.store_error.or(after.store_error),
    }
}

/// A request on `route`, through every gate (see the module docs).
pub(super) async fn route(context: Context, route: Arc<RouteState>, request: Request) -> Response {
    let response = gates(&context, &route, request).await;
    route.metrics.answered(response.status());
    response
}

async fn gates(context: &Context, route: &RouteState, request: Request) -> Response {
    let Context { gateway, table, peer } = context;
    let arrived = Instant::now();
    let deadline = route.config.timeouts.total.map(|t| arrived + t);
    let style = table.running.headers;
    let switches = gateway.switches(table);

    // 1. Shedding: the cheapest refusal, before anything is counted.
    if switches.shed.sheds(route.config.priority) {
        route.metrics.shed.increment(1);
        return respond::shed(table.config.shed_retry_after);
    }

    // 2. Rules that need no identity: per ip, global, per route, per header.
    let (mut parts, body) = request.into_parts();
    let mut descriptors =
        super::descriptors::before_identity(&parts, *peer, &table.client_ip, &table.headers);
    let before = match gateway.gate(&table.policies.before, &descriptors).await {
        Ok(verdict) => verdict,
        Err(refused) => return refused,
    };
    if !before.allowed {
        return respond::limited(&before, style);
    }
    let engine = gateway.app.control().engine();
    let mut held = Held::default();
    held.permits.extend(RulePermits::of(engine, &descriptors, &before));

    // 3. Identity: a token present but invalid is refused here, after the ip pool counted it.
    let identity_config = &table.config.identity;
    let identity = match &table.verifier {
        Some(verifier) => match verifier.identify(&parts.headers) {
            Ok(identity) => identity,
            Err(why) => return respond::unauthorized(&why),
        },
        None => Identity::Anonymous,
    };
    let verified = describe_identity(
        &identity,
        &identity_config.claims,
        &identity_config.headers,
        &parts.headers,
        &mut descriptors,
    );

    // 4. Rules of the identity: per user, tenant, plan; the anonymous pool.
    let after = match gateway.gate(&table.policies.after, &descriptors).await {
        Ok(verdict) => verdict,
        Err(refused) => return refused,
    };
    if !after.allowed {
        return respond::limited(&merged(before, after), style);
    }
    held.permits.extend(RulePermits::of(engine, &descriptors, &after));
    let verdict = merged(before, after);

    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let cache_key = (route.config.degrade.stale_cache && parts.method == Method::GET)
        .then(|| StaleCache::key(&route.config.name, &path_and_query));
    let breaker_open =
        route.breaker.as_ref().is_some_and(|b| b.open_remaining().is_some_and(|r| !r.is_zero()));

    // 5. Degradation: reads from the stale cache, writes accepted for later.
    if let Some(key) = &cache_key
        && (switches.stale_reads || breaker_open)
        && let Some(response) = serve_stale(gateway, route, key, &verdict, style)
    {
        return response;
    }
    let async_write = route.config.degrade.accept_async
        && !upstream::idempotent(&parts.method)
        && (switches.async_writes || breaker_open)
        && !upstream::is_upgrade(&parts.headers);
    if async_write {
        return accept_write(gateway, table, route, parts, body, &verdict, style).await;
    }

    // 6. Concurrency: a place among the route's requests in flight.
    if let Some(semaphore) = &route.concurrency {
        match Arc::clone(semaphore).try_acquire_owned() {
            Ok(permit) => held.in_flight = Some(permit),
            Err(_) => return respond::overloaded(),
        }
    }

    // 7 and 8. The breaker and the upstream (`upstream::call` asks the breaker for every attempt).
    let upgrade = upstream::is_upgrade(&parts.headers);
    let client_upgrade = if upgrade { parts.extensions.remove::<hyper::upgrade::OnUpgrade>() } else { None };
    let identity_headers: Vec<(HeaderName, Option<String>)> = match identity {
        Identity::Verified(_) => identity_config
            .headers
            .iter()
            .map(|(descriptor, header)| {
                let value = verified.iter().find(|(d, _)| *d == descriptor).map(|(_, v)| v.clone());
                (header.clone(), value)
            })
            .collect(),
        Identity::Anonymous => Vec::new(),
    };
    let mut headers = std::mem::take(&mut parts.headers);
    upstream::forward_headers(&mut headers, *peer, upgrade, &identity_headers);
    // The model a plan over its limit switches to, for the upstream (a forged one removed).
    floodgate_http::degrade_header(&verdict, &mut headers);
    let Some(uri) = upstream::target(&route.config.upstream.uri, &path_and_query) else {
        return respond::malformed("the request's path cannot be sent to the upstream");
    };
    let outgoing = match replayable(route, &parts, body).await {
        Ok(outgoing) => outgoing,
        Err(response) => return response,
    };
    let prepared = Prepared { method: parts.method.clone(), uri, headers, body: outgoing, upgrade };
    let outcome = upstream::call(route, prepared, deadline).await;
    let mut response = match outcome {
        Ok(response) => response,
        Err(Failure::BreakerOpen) => {
            if let Some(key) = &cache_key
                && let Some(response) = serve_stale(gateway, route, key, &verdict, style)
            {
                return response;
            }
            if route.config.fallback.is_some() {
                route.metrics.fallback.increment(1);
            }
            let retry =
                route.breaker.as_ref().and_then(|b| b.open_remaining()).unwrap_or(Duration::from_secs(1));
            return respond::breaker_open(route.config.fallback.as_ref(), retry);
        }
        Err(Failure::ConnectTimeout) => return respond::timeout("accept the connection"),
        Err(Failure::FirstByteTimeout) => return respond::timeout("answer"),
        Err(Failure::TotalTimeout) => return respond::timeout("finish within the route's total timeout"),
        Err(Failure::Connect) => return respond::bad_gateway("could not be reached"),
        Err(Failure::Broken) => return respond::bad_gateway("answered with something that is not HTTP"),
    };

    // The response, streamed back.
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client) = client_upgrade {
            let server = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                let (Ok(client), Ok(server)) = (client.await, server.await) else { return };
                let mut client = hyper_util::rt::TokioIo::new(client);
                let mut server = hyper_util::rt::TokioIo::new(server);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                drop(held);
            });
            let (mut parts, _) = response.into_parts();
            upstream::strip_hop_by_hop(&mut parts.headers, true);
            rate_limit_headers(&verdict, style, &mut parts.headers);
            return Response::from_parts(parts, Body::empty());
        }
        return respond::bad_gateway("switched protocols without being asked to");
    }
    let (mut head, incoming) = response.into_parts();
    upstream::strip_hop_by_hop(&mut head.headers, false);
    rate_limit_headers(&verdict, style, &mut head.headers);
    floodgate_http::degrade_header(&verdict, &mut head.headers);
    let tee = cache_key.filter(|_| head.status == StatusCode::OK).map(|key| Tee {
        cache: Arc::clone(&gateway.stale),
        key,
        headers: head.headers.clone(),
        buf: BytesMut::new(),
        clock: gateway.clock.clone(),
    });
    let body = GatewayBody::new(incoming, deadline, tee, held);
    Response::from_parts(head, Body::new(body))
}

/// The request body to send: kept whole when the route retries and it is small enough (so that it
/// can be sent again), else streamed as it arrives.
async fn replayable(
    route: &RouteState,
    parts: &http::request::Parts,
    body: Body,
) -> Result<Outgoing, Response> {
    let Some(retries) = route.config.retries.as_ref().filter(|_| upstream::idempotent(&parts.method)) else {
        return Ok(Outgoing::Streamed(Some(body)));
    };
    let hint = body.size_hint();
    if body.is_end_stream() {
        return Ok(Outgoing::Kept(Bytes::new()));
    }
    match hint.upper() {
        Some(n) if n <= retries.max_body as u64 => {
            let collected = http_body_util::BodyExt::collect(body)
                .await
                .map_err(|e| respond::malformed(format!("the request body could not be read: {e}")))?;
            Ok(Outgoing::Kept(collected.to_bytes()))
        }
        _ => Ok(Outgoing::Streamed(Some(body))),
    }
}

/// The stale copy of a GET, when there is one.
fn serve_stale(
    gateway: &Gateway,
    route: &RouteState,
    key: &str,
    verdict: &Verdict,
    style: floodgate_http::HeaderStyle,
) -> Option<Response> {
    let (entry, age) = gateway.stale.get(key, gateway.clock.now())?;
    route.metrics.stale.increment(1);
    let mut response = Response::new(Body::from(entry.body));
    *response.headers_mut() = entry.headers;
    response.headers_mut().insert(STALE_HEADER, HeaderValue::from_static("true"));
    response.headers_mut().insert(http::header::AGE, stale::age_header(age));
    rate_limit_headers(verdict, style, response.headers_mut());
    Some(response)
}

/// Accepts a write for later: on disk before the 202.
async fn accept_write(
    gateway: &Gateway,
    table: &RouteTable,
    route: &RouteState,
    parts: http::request::Parts,
    body: Body,
    verdict: &Verdict,
    style: floodgate_http::HeaderStyle,
) -> Response {
    let Some(queue) = &gateway.queue else { return respond::bad_gateway("cannot accept writes now") };
    let limit = table.config.max_accepted_body;
    let body = match http_body_util::BodyExt::collect(http_body_util::Limited::new(body, limit)).await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            return respond::too_large(limit);
        }
        Err(e) => return respond::malformed(format!("the request body could not be read: {e}")),
    };
    let mut headers = parts.headers.clone();
    upstream::strip_hop_by_hop(&mut headers, false);
    headers.remove(http::header::HOST);
    let accepted = Accepted {
        id: queue::new_id(),
        route: route.config.name.clone(),
        method: parts.method.as_str().to_owned(),
        path_and_query: parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
        headers: headers.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())).collect(),
        body,
    };
    let id = accepted.id.clone();
    if let Err(e) = queue.accept(accepted).await {
        tracing::error!(error = %e, "gateway: cannot keep an accepted write");
        return respond::bad_gateway("is unavailable, and the write could not be kept for later");
    }
    route.metrics.accepted.increment(1);
    gateway.metrics.accepted_pending.set(queue.pending() as f64);
    let mut response = queue::accepted_response(&id);
    rate_limit_headers(verdict, style, response.headers_mut());
    response
}
