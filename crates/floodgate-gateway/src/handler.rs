//! One gateway request, gate by gate (see the [module docs](super)).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use floodgate::{Descriptors, Verdict};
use floodgate_core::{Clock, SystemClock};
use floodgate_http::{Answer, RateLimitLines, rate_limit_headers};
use http::uri::PathAndQuery;
use http::{HeaderName, HeaderValue, Method, StatusCode};
use http_body::Body as _;
use tokio::time::Instant;

use super::body::{GatewayBody, Held, Tee};
use super::call;
use super::identity::{Identity, describe_identity};
use super::llm;
use super::metrics::GatewayMetrics;
use super::queue::{self, Accepted};
use super::respond;
use super::routes::{RouteState, RouteTable, Routed};
use super::stale::{self, STALE_HEADER, StaleCache};
use super::state::{Context, Gated, GatewayState};
use super::upstream::{self, Clients, Failure, Outgoing, Prepared};
use floodgate_app::control::{Domain, Running};
use floodgate_app::metrics::Metrics;
use floodgate_tower::Permits;

/// The concurrency permits `verdict` (`domain`'s answer) holds, if any: freed down the decision
/// path when the response ends.
fn permits(
    gateway: &Arc<GatewayState>,
    domain: &Domain,
    descriptors: &Descriptors,
    verdict: &Verdict,
) -> Option<Permits> {
    verdict.holds_permits().then(|| {
        let (app, policy) = (gateway.app.clone(), Arc::clone(&domain.policy));
        let (descriptors, verdict) = (descriptors.clone(), verdict.clone());
        Permits::new(async move {
            let _ = app.decisions().release_permits(&policy, &descriptors, &verdict).await;
        })
    })
}

/// Both phases' verdicts as one, for the rate-limit headers: `after` merged into `before`.
fn merge(before: &mut Verdict, after: Verdict) {
    before.allowed &= after.allowed;
    before.at = before.at.max(after.at);
    before.limits.extend(after.limits);
    if before.store_error.is_none() {
        before.store_error = after.store_error;
    }
}

/// The route table of `running`: the gateway state's [`TableBuilder`](super::state::TableBuilder).
pub(super) fn build_table(
    running: Arc<Running>,
    previous: Option<&RouteTable>,
    clients: &Clients,
    metrics: &GatewayMetrics,
    rule_metrics: &Metrics,
    clock: &SystemClock,
) -> Option<RouteTable> {
    RouteTable::build(running, previous, clients, metrics, rule_metrics, clock)
}

/// One request from the listener: the gateway's own endpoints, else routed by the route table of
/// the configuration in force and taken through every gate of its route (see the module docs).
pub(super) async fn dispatch(
    gateway: Arc<GatewayState>,
    request: Request,
    peer: std::net::SocketAddr,
) -> Answer<Body> {
    if let Some(response) = gateway.own(&request) {
        return response.into();
    }
    let context = Context { table: gateway.table(), gateway, peer };
    let unrouted = match context.table.router.route(request.method(), request.uri().path()) {
        Routed::To(route, template) => {
            let answer = gates(&context, route, &template.path, request).await;
            route.metrics.answered(answer.response.status());
            return answer;
        }
        Routed::NoPath => respond::no_route(false),
        Routed::NoMethod(allow) => {
            let mut response = respond::no_route(true);
            if let Some(allow) = allow {
                response.headers_mut().insert(http::header::ALLOW, allow);
            }
            response
        }
    };
    context.gateway.metrics.unrouted.answered(unrouted.status());
    unrouted.into()
}

/// A request's priority tier on `route` (its `tier:` setting; the lowest tier without one); for a
/// header that names no tier, the detail of the 400 that answers it.
fn tier_of(
    route: &RouteState,
    table: &RouteTable,
    headers: &http::HeaderMap,
    descriptors: &Descriptors,
) -> Result<u8, String> {
    use floodgate_config::gateway::TierFrom;
    let tiers = table.config.delay_queue.tiers();
    let Some(tier) = &route.config.tier else { return Ok(tiers - 1) };
    match &tier.from {
        TierFrom::Header(name) => match headers.get(name) {
            None => Ok(tier.default),
            Some(value) => value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u8>().ok())
                .filter(|t| *t < tiers)
                .ok_or_else(|| {
                    format!(
                        "The {name} header is {:?}, which is not a priority tier: give 0 (the highest) to {}.",
                        String::from_utf8_lossy(value.as_bytes()),
                        tiers - 1
                    )
                }),
        },
        TierFrom::Plan(plans) => {
            Ok(descriptors.get("plan").and_then(|plan| plans.get(plan).copied()).unwrap_or(tier.default))
        }
    }
}

async fn gates(context: &Context, route: &RouteState, template: &str, request: Request) -> Answer<Body> {
    let Context { gateway, table, peer } = context;
    let arrived = Instant::now();
    let deadline = route.config.timeouts.total.map(|t| arrived + t);
    let style = table.running.headers;
    let switches = gateway.switches(table);

    // 1. Shedding: the cheapest refusal, before anything is counted.
    if switches.shed.sheds(route.config.priority) {
        route.metrics.shed.increment(1);
        return respond::shed(table.config.shed_retry_after).into();
    }

    // 2. Rules that need no identity: per ip, global, per route, per header.
    let (mut parts, body) = request.into_parts();
    let mut descriptors =
        super::descriptors::before_identity(&parts, template, *peer, &table.client_ip, &table.headers);
    // The priority tier among requests waiting under `action: delay` (a header that gives no tier
    // is refused here, before anything is counted).
    let tier = match tier_of(route, table, &parts.headers, &descriptors) {
        Ok(tier) => tier,
        Err(detail) => return respond::malformed(detail).into(),
    };
    // Both phases' verdicts, merged into this one as the second is decided (one verdict held
    // across the upstream call, not three).
    let decided = match gateway.gate_now(&table.policies.before, &descriptors) {
        Gated::Now(decided) => decided,
        Gated::Later(first) => gateway.gate(&table.policies.before, &descriptors, tier, first).await,
    };
    let mut verdict = match decided {
        Ok(verdict) => verdict,
        Err(refused) => return refused.into(),
    };
    if !verdict.allowed {
        return respond::limited(&verdict, style);
    }
    let mut held = Held::default();
    held.permits.extend(permits(gateway, &table.policies.before, &descriptors, &verdict));

    // 3. Identity: a token present but invalid is refused here, after the ip pool counted it.
    let identity_config = &table.config.identity;
    let identity = match &table.verifier {
        Some(verifier) => match verifier.identify(&parts.headers) {
            Ok(identity) => identity,
            Err(why) => return respond::unauthorized(&why).into(),
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

    // 4. Rules of the identity: per user, tenant, plan; the anonymous pool. On an LLM route's
    // metered endpoints, one reservation of the request's tokens on them and on every token rule
    // instead (its permits are freed when it is settled).
    let llm = route
        .config
        .llm
        .as_ref()
        .and_then(|llm| Some((llm, llm::Dialect::of(llm.api).endpoint(parts.uri.path())?)));
    let (mut call, body) = match llm {
        Some((llm, endpoint)) => {
            let tier = tier_of(route, table, &parts.headers, &descriptors).unwrap_or(tier);
            match Box::pin(llm::admit_call(
                gateway,
                table,
                tier,
                llm,
                endpoint,
                &descriptors,
                body,
                style,
                route.metrics.llm(),
            ))
            .await
            {
                Ok(call) => {
                    merge(&mut verdict, call.verdict.clone());
                    // Boxed: a call is a kilobyte, and the request's future holds it throughout.
                    (Some(Box::new(call)), Body::empty())
                }
                Err(refused) => return refused.into(),
            }
        }
        None => {
            let tier = tier_of(route, table, &parts.headers, &descriptors).unwrap_or(tier);
            let decided = match gateway.gate_now(&table.policies.after, &descriptors) {
                Gated::Now(decided) => decided,
                Gated::Later(first) => gateway.gate(&table.policies.after, &descriptors, tier, first).await,
            };
            let after = match decided {
                Ok(verdict) => verdict,
                Err(refused) => return refused.into(),
            };
            if after.allowed {
                held.permits.extend(permits(gateway, &table.policies.after, &descriptors, &after));
            }
            merge(&mut verdict, after);
            if !verdict.allowed {
                return respond::limited(&verdict, style);
            }
            (None, body)
        }
    };

    let path_and_query =
        parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
    let cache_key = (route.config.degrade.stale_cache && parts.method == Method::GET)
        .then(|| StaleCache::key(&route.config.name, path_and_query.as_str()));
    let breaker_open =
        route.breaker.as_ref().is_some_and(|b| b.open_remaining().is_some_and(|r| !r.is_zero()));

    // 5. Degradation: reads from the stale cache, writes accepted for later.
    if let Some(key) = &cache_key
        && (switches.stale_reads || breaker_open)
        && let Some(response) = serve_stale(gateway, route, key, &verdict, style)
    {
        return response.into();
    }
    let async_write = route.config.degrade.accept_async
        && !upstream::idempotent(&parts.method)
        && (switches.async_writes || breaker_open)
        && !upstream::is_upgrade(&parts.headers);
    if async_write {
        return Box::pin(accept_write(gateway, table, route, parts, body, &verdict, style)).await.into();
    }

    // 6. Concurrency: a place among the route's requests in flight.
    if let Some(semaphore) = &route.concurrency {
        match Arc::clone(semaphore).try_acquire_owned() {
            Ok(permit) => held.in_flight = Some(permit),
            Err(_) => return respond::overloaded().into(),
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
        return respond::malformed("the request's path cannot be sent to the upstream").into();
    };
    let outgoing = match &call {
        // The body as admission read it (its allowance bounded, a stream asked for its usage).
        Some(call) => {
            headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(call.body.len()));
            Outgoing::Kept(call.body.clone())
        }
        None => match replayable(route, &parts, body).await {
            Ok(outgoing) => outgoing,
            Err(response) => return response.into(),
        },
    };
    let llm = llm.map(|(llm, _)| llm);
    let mut hold = None;
    let outcome = match (&call, llm) {
        // An LLM route with upstreams in order: each tried until one answers.
        (Some(admitted), Some(llm)) if !route.upstreams.is_empty() => {
            let attempts = llm::Attempts {
                method: &parts.method,
                path_and_query: &path_and_query,
                headers: &headers,
                body: admitted.body.clone(),
                deadline,
            };
            match Box::pin(llm::call_in_order(&gateway.app, table, route, llm, admitted, attempts, style))
                .await
            {
                llm::Tried::Answered(response, held) => {
                    hold = held;
                    Ok(response)
                }
                llm::Tried::Failed(failure) => Err(failure),
                llm::Tried::Refused(response) => {
                    if let Some(call) = call.take() {
                        call.failed(&gateway.app, table, llm);
                    }
                    return response.into();
                }
            }
        }
        _ => {
            let prepared = Prepared { method: parts.method.clone(), uri, headers, body: outgoing, upgrade };
            call::call(route, prepared, deadline).await
        }
    };
    if outcome.is_err()
        && let (Some(call), Some(llm)) = (call.take(), llm)
    {
        call.failed(&gateway.app, table, llm);
    }
    let mut response = match outcome {
        Ok(response) => response,
        Err(Failure::BreakerOpen) => {
            if let Some(key) = &cache_key
                && let Some(response) = serve_stale(gateway, route, key, &verdict, style)
            {
                return response.into();
            }
            if route.config.fallback.is_some() {
                route.metrics.fallback.increment(1);
            }
            let retry =
                route.breaker.as_ref().and_then(|b| b.open_remaining()).unwrap_or(Duration::from_secs(1));
            return respond::breaker_open(route.config.fallback.as_ref(), retry).into();
        }
        Err(Failure::ConnectTimeout) => {
            return respond::timeout("accept the connection", "connect", route.config.timeouts.connect)
                .into();
        }
        Err(Failure::FirstByteTimeout) => {
            return respond::timeout("answer", "first_byte", route.config.timeouts.first_byte).into();
        }
        Err(Failure::TotalTimeout) => {
            let total = route.config.timeouts.total.unwrap_or_default();
            return respond::timeout("finish", "total", total).into();
        }
        Err(Failure::Connect) => return respond::bad_gateway("could not be reached").into(),
        Err(Failure::Broken) => {
            return respond::bad_gateway("answered with something that is not HTTP").into();
        }
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
            return Response::from_parts(parts, Body::empty()).into();
        }
        return respond::bad_gateway("switched protocols without being asked to").into();
    }
    let (mut head, incoming) = response.into_parts();
    upstream::strip_hop_by_hop(&mut head.headers, false);
    // Rendered once as header lines, which the listener writes into the head as they are (or
    // puts in the header map for hyper), replacing the upstream's own of the same names.
    let lines = RateLimitLines::render(&verdict, style);
    floodgate_http::degrade_header(&verdict, &mut head.headers);
    let meter = match (call, llm) {
        (Some(call), Some(llm)) => {
            call.allowance_header(&mut head.headers);
            call.answered(head.status, &gateway.app, table, llm, hold)
        }
        _ => None,
    };
    if meter.as_ref().is_some_and(llm::Meter::rewrites) {
        head.headers.remove(http::header::CONTENT_LENGTH);
    }
    let tee = cache_key.filter(|_| head.status == StatusCode::OK).map(|key| Tee {
        cache: Arc::clone(&gateway.stale),
        key,
        headers: head.headers.clone(),
        buf: BytesMut::new(),
        clock: gateway.clock.clone(),
    });
    let body = GatewayBody::new(incoming, deadline, tee, held, meter);
    Answer::with_lines(Response::from_parts(head, Body::new(body)), lines)
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
    gateway: &GatewayState,
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
    gateway: &GatewayState,
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
