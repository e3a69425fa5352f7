//! Calling a route's upstream: each attempt within the route's timeouts and the request's
//! deadline, the breaker asked for every attempt, and retries within attempts and the route's
//! budget (see [`upstream`](super::upstream) for what is retried and when).

use std::sync::Arc;

use floodgate::breaker::{Admission, CircuitBreaker};
use floodgate_core::SystemClock;
use http::Response;
use tokio::time::Instant;

use super::budget::RetrySlot;
use super::h1::H1Error;
use super::pool::{ConnectFailed, Inline, InlineBody, Payload, Sending, Unanswered, exchange};
use super::routes::RouteState;
use super::upstream::{Attempt, Client, Failure, Outgoing, Prepared, UpstreamBody, idempotent};

/// The outcome of a call: the upstream's response (whatever its status), or a failure.
pub(super) type Outcome = Result<Response<UpstreamBody>, Failure>;

/// Where a call goes: an upstream's connections (inline HTTP/1.1 ones, and the pooled client for
/// h2c and upgrades) and its breaker.
#[derive(Clone, Copy)]
pub(super) struct Via<'a> {
    pub(super) client: &'a Client,
    pub(super) inline: Option<&'a Inline>,
    pub(super) breaker: Option<&'a CircuitBreaker<SystemClock>>,
}

/// Calls `route`'s upstream with `request`, retrying as the route allows, within `deadline`.
/// [`call_via`]'s own future, not one around it: a request's future moves it into place once.
pub(super) fn call(
    route: &RouteState,
    request: Prepared,
    deadline: Option<Instant>,
) -> impl Future<Output = Outcome> + '_ {
    let via = Via { client: &route.client, inline: route.inline.as_ref(), breaker: route.breaker.as_deref() };
    call_via(route, via, request, deadline)
}

/// Calls the upstream of `via` for `route` (one of an LLM route's upstreams), as [`call`] does.
pub(super) async fn call_via(
    route: &RouteState,
    via: Via<'_>,
    mut request: Prepared,
    deadline: Option<Instant>,
) -> Outcome {
    let retries = route.config.retries.as_ref().filter(|_| {
        idempotent(&request.method) && !request.upgrade && matches!(request.body, Outgoing::Kept(_))
    });
    let mut first = Some(route.budget.first_attempt());
    // The place this request holds in the retry budget, while it retries.
    let mut _retrying: Option<RetrySlot> = None;
    let mut attempt: u32 = 0;
    loop {
        let (sent, probe) = match via.breaker.map(CircuitBreaker::admit) {
            Some(Admission::Reject) => return Err(Failure::BreakerOpen),
            Some(Admission::Probe) => (None, Some(ProbeGuard(via.breaker))),
            Some(Admission::Call(sent)) => (Some(sent), None),
            None => (None, None),
        };
        let outcome = match via.inline {
            // Upgrades (and CONNECT) go through the pooled client, which hands the connection over.
            Some(inline) if !request.upgrade && request.method != http::Method::CONNECT => {
                attempt_inline(route, inline, &mut request, deadline).await
            }
            _ => attempt_once(route, via.client, &mut request, retries.is_none(), deadline).await,
        };
        let failed = counts_as_failure(&outcome);
        if let Some(mut probe) = probe {
            // A probe is one attempt: its outcome decides the breaker.
            probe.finish(!failed);
            return outcome;
        }
        if let (Some(sent), Some(breaker)) = (sent, via.breaker) {
            breaker.record(failed, sent);
        }
        let Some(settings) = retry_after(retries, &outcome, attempt) else { return outcome };
        first.take();
        _retrying = None;
        match route.budget.try_retry(settings) {
            Some(slot) => _retrying = Some(slot),
            None => {
                route.metrics.retries_refused.increment(1);
                return outcome;
            }
        }
        attempt += 1;
        route.metrics.retries_sent.increment(1);
        if !backoff(settings, attempt, deadline).await {
            return Err(Failure::TotalTimeout);
        }
    }
}

/// The probe of a half-open breaker; abandoned (half-open freed) if dropped unfinished.
struct ProbeGuard<'a>(Option<&'a CircuitBreaker<SystemClock>>);

impl ProbeGuard<'_> {
    fn finish(&mut self, succeeded: bool) {
        if let Some(b) = self.0.take() {
            b.finish_probe(succeeded);
        }
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            b.abandon_probe();
        }
    }
}

/// Whether the breaker counts `outcome` as a failure: no answer, or a 5xx.
fn counts_as_failure(outcome: &Outcome) -> bool {
    match outcome {
        Ok(response) => response.status().is_server_error(),
        Err(_) => true,
    }
}

/// The retry settings when `outcome` is retried (attempts left and a retriable failure).
fn retry_after<'a>(
    retries: Option<&'a floodgate_config::gateway::Retries>,
    outcome: &Outcome,
    attempt: u32,
) -> Option<&'a floodgate_config::gateway::Retries> {
    let settings = retries?;
    if attempt >= settings.attempts {
        return None;
    }
    let retriable = match outcome {
        Ok(response) => settings.statuses.contains(&response.status().as_u16()),
        Err(Failure::Connect | Failure::ConnectTimeout) => settings.on_connect_error,
        Err(_) => false,
    };
    retriable.then_some(settings)
}

/// Waits the backoff of retry `attempt` (full jitter); false when it would pass the deadline.
async fn backoff(
    settings: &floodgate_config::gateway::Retries,
    attempt: u32,
    deadline: Option<Instant>,
) -> bool {
    let cap = settings
        .backoff
        .saturating_mul(1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX))
        .min(settings.max_backoff);
    let wait = cap.mul_f64(fastrand::f64());
    let until = Instant::now() + wait;
    if deadline.is_some_and(|d| until >= d) {
        return false;
    }
    tokio::time::sleep_until(until).await;
    true
}

/// One attempt on an inline connection: a pooled one still open, else a new one; the request sent
/// and the response head awaited, within the route's timeouts and the request's deadline as
/// [`attempt_once`] (`connect` bounds a new connection; `first_byte` counts from its being made,
/// or from the attempt's start on a pooled one). The request's head is written from `request`
/// itself, borrowed: an attempt copies none of it.
async fn attempt_inline(
    route: &RouteState,
    inline: &Inline,
    request: &mut Prepared,
    deadline: Option<Instant>,
) -> Outcome {
    let Some(payload) = payload(request) else { return Err(Failure::Broken) };
    let first_byte = route.config.timeouts.first_byte;
    let started = Instant::now();
    let Prepared { method, uri, headers, .. } = &*request;
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
    let sending = Sending { method, path_and_query, host: inline.host(), headers };
    let result = inline_head(inline, sending, payload, started, first_byte, deadline).await;
    route.metrics.upstream_took(started.elapsed());
    match result {
        Ok(response) => Ok(response.map(UpstreamBody::Inline)),
        Err(Ok(failure)) => Err(failure),
        Err(Err(e)) => {
            tracing::debug!(route = %route.config.name, error = %e, "gateway: upstream call failed");
            Err(Failure::Broken)
        }
    }
}

/// The body of an attempt: a kept body again (shared, not copied), or the streamed one, once.
fn payload(request: &mut Prepared) -> Option<Payload> {
    match &mut request.body {
        Outgoing::Kept(bytes) if bytes.is_empty() => Some(Payload::Empty),
        Outgoing::Kept(bytes) => Some(Payload::Whole(bytes.clone())),
        Outgoing::Streamed(body) => {
            let body = body.take()?;
            if http_body::Body::is_end_stream(&body) {
                return Some(Payload::Empty);
            }
            let length = http_body::Body::size_hint(&body).exact();
            Some(Payload::Stream { body, length })
        }
    }
}

/// The response head of `request` on an inline connection; a request whose pooled connection
/// failed before any of it was written is sent on another connection. `Err(Ok(failure))`: a
/// timeout or a connection that could not be made; `Err(Err(e))`: the connection's error once the
/// request started going out (the caller's [`Failure::Broken`]).
async fn inline_head(
    inline: &Inline,
    request: Sending<'_>,
    mut payload: Payload,
    started: Instant,
    first_byte: std::time::Duration,
    deadline: Option<Instant>,
) -> Result<Response<InlineBody>, Result<Failure, H1Error>> {
    loop {
        let (lease, sent_at) = match inline.pooled() {
            Some(lease) => (lease, started),
            None => {
                let made = match deadline {
                    Some(d) => tokio::time::timeout_at(d, inline.connect())
                        .await
                        .map_err(|_| Ok(Failure::TotalTimeout))?,
                    None => inline.connect().await,
                };
                match made {
                    Ok(lease) => (lease, Instant::now()),
                    Err(ConnectFailed(e)) => {
                        return Err(Ok(if timed_out(&*e) {
                            Failure::ConnectTimeout
                        } else {
                            Failure::Connect
                        }));
                    }
                }
            }
        };
        let reused = lease.reused;
        let head_due = sent_at + first_byte;
        let (limit, on_timeout) = match deadline {
            Some(d) if d < head_due => (d, Failure::TotalTimeout),
            _ => (head_due, Failure::FirstByteTimeout),
        };
        match tokio::time::timeout_at(limit, exchange(lease, request, payload)).await {
            Err(_) => return Err(Ok(on_timeout)),
            Ok(Ok(response)) => return Ok(response),
            Ok(Err(Unanswered::Unsent(back))) if reused => payload = back,
            Ok(Err(Unanswered::Unsent(_))) => return Err(Ok(Failure::Broken)),
            Ok(Err(Unanswered::Failed(e))) => return Err(Err(e)),
        }
    }
}

/// One attempt through the pooled client: connect, send, and wait for the response head, within
/// the route's timeouts and the request's deadline. `connect` bounds a new connection (the
/// connector's timeout); `first_byte` counts from the moment the request goes out on its connection.
async fn attempt_once(
    route: &RouteState,
    client: &Client,
    request: &mut Prepared,
    last: bool,
    deadline: Option<Instant>,
) -> Outcome {
    let Some(outgoing) = request.build(last) else { return Err(Failure::Broken) };
    let first_byte = route.config.timeouts.first_byte;
    let started = Instant::now();
    let attempt = Arc::new(Attempt::default());
    let response = attempt.scope(client.request(outgoing));
    tokio::pin!(response);
    let result = loop {
        let changed = attempt.changed();
        tokio::pin!(changed);
        // Registered before the state is read, so that no change between the two is missed.
        changed.as_mut().enable();
        let head_due = attempt.head_due(started, first_byte);
        let (limit, on_timeout) = match (deadline, head_due) {
            (Some(d), Some(h)) if d < h => (Some(d), Failure::TotalTimeout),
            (_, Some(h)) => (Some(h), Failure::FirstByteTimeout),
            (d, None) => (d, Failure::TotalTimeout),
        };
        let expired = async {
            match limit {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            result = &mut response => break Ok(result),
            () = changed => {}
            () = expired => break Err(on_timeout),
        }
    };
    route.metrics.upstream_took(started.elapsed());
    match result {
        Err(on_timeout) => Err(on_timeout),
        Ok(Ok(response)) => Ok(response.map(UpstreamBody::Shared)),
        Ok(Err(e)) if e.is_connect() => {
            // Why (a refused connection, a TLS handshake the upstream's certificate failed): for the
            // operator's log, not the client's answer.
            tracing::debug!(route = %route.config.name, error = ?e, "gateway: no connection to the upstream");
            Err(if timed_out(&e) { Failure::ConnectTimeout } else { Failure::Connect })
        }
        Ok(Err(e)) => {
            tracing::debug!(route = %route.config.name, error = %e, "gateway: upstream call failed");
            Err(Failure::Broken)
        }
    }
}

/// Whether a connect error is the connect timeout (hyper-util reports it as an I/O timed-out error).
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        if e.to_string().contains("timeout") || e.to_string().contains("timed out") {
            return true;
        }
        source = e.source();
    }
    false
}
