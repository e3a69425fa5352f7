//! Fallback across an LLM route's upstreams (`llm.upstreams`), in order, the call's reservation
//! carried over — reserved once at admission, settled once when the answer ends, never charged
//! twice:
//!
//! - an upstream whose breaker is open is skipped;
//! - an upstream with a `quota_rule` is tried only when that rule has room for the call (the call's
//!   estimate is reserved there too, and committed with the call's cost on that upstream);
//! - an upstream that answers 429 or a 5xx, or cannot be reached in time, hands the call to the
//!   next; its 429 also spends all its quota rule has left, so that the next calls skip it until
//!   the rule refills (on every instance sharing the store), and cools it off on this instance for
//!   the wait it asked (`retry-after-ms`, else `retry-after` in seconds; at most
//!   [`MAX_COOL_OFF`]): until then the next calls skip it without asking, with or without a quota
//!   rule ([`CoolOff`](crate::cool_off::CoolOff));
//! - the last upstream's answer is the client's, whatever it is; when every upstream was skipped
//!   for its quota, the client gets a 429 with the soonest wait.

use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use bytes::Bytes;
use floodgate::{Costs, Hit, Verdict};
use floodgate_app::App;
use floodgate_app::metrics::Api;
use floodgate_config::gateway::Llm;
use floodgate_http::HeaderStyle;
use http::{HeaderMap, Method, StatusCode};
use tokio::time::Instant;

use super::Call;
use super::meter::Account;
use super::respond;
use crate::call::{Via, call_via};
use crate::cool_off::MAX_COOL_OFF;
use crate::routes::{LlmUpstreamState, RouteState, RouteTable};
use crate::upstream::{Failure, Outgoing, Prepared, UpstreamBody, target};

/// An upstream's quota reservation, held while the call runs there.
#[derive(Debug)]
pub(crate) struct Hold {
    rule: String,
    reservation: String,
    /// The rule's capacity and dimension: what its provider's 429 spends.
    limit: u64,
    dimension: String,
}

impl Hold {
    pub(crate) fn account(self, app: &App, table: &Arc<RouteTable>) -> Account {
        Account {
            app: app.clone(),
            table: Arc::clone(table),
            reservation: self.reservation,
            quota: Some(self.rule),
        }
    }
}

/// The wait a provider's 429 asks for: `retry-after-ms` (milliseconds, as OpenAI and Azure send
/// it), else `retry-after` in whole seconds. `None` when neither is a non-negative number (an
/// HTTP date is not read): the quota rule, if any, is then all the feedback.
pub(crate) fn asked_wait(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let ms =
        text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()).filter(|ms| ms.is_finite() && *ms >= 0.0);
    if let Some(ms) = ms {
        return Some(Duration::from_secs_f64(ms.min(MAX_COOL_OFF.as_secs_f64() * 1000.0) / 1000.0));
    }
    text(http::header::RETRY_AFTER.as_str()).and_then(|v| v.parse::<u64>().ok()).map(Duration::from_secs)
}

/// How trying the upstreams ended.
pub(crate) enum Tried {
    /// An upstream answered (the last one tried): the response, and its quota hold.
    Answered(http::Response<UpstreamBody>, Option<Hold>),
    /// The last upstream tried could not answer.
    Failed(Failure),
    /// Every upstream was skipped for its quota: the answer to send.
    Refused(Response),
}

/// What each attempt is sent.
pub(crate) struct Request<'a> {
    pub(crate) method: &'a Method,
    pub(crate) path_and_query: &'a http::uri::PathAndQuery,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) deadline: Option<Instant>,
}

/// Tries `route`'s upstreams in order for `call` (see the module docs).
pub(crate) async fn call_in_order(
    app: &App,
    table: &Arc<RouteTable>,
    route: &RouteState,
    llm: &Llm,
    call: &Call,
    request: Request<'_>,
    style: HeaderStyle,
) -> Tried {
    let costs = call.estimate();
    let mut last_failure = Failure::BreakerOpen;
    let mut refused: Option<Verdict> = None;
    let count = route.upstreams.len();
    for (i, upstream) in route.upstreams.iter().enumerate() {
        let last = i + 1 == count;
        if upstream.breaker.as_ref().is_some_and(|b| b.open_remaining().is_some_and(|r| !r.is_zero())) {
            last_failure = Failure::BreakerOpen;
            continue;
        }
        // The provider asked not to be called yet: skipped, unless it is the last to try (whose
        // answer, its 429 then, is the client's).
        if !last && upstream.cool_off.left().is_some() {
            continue;
        }
        let hold = match hold(app, table, llm, upstream, call, &costs).await {
            Ok(hold) => hold,
            Err(Some(verdict)) => {
                refused = Some(match refused {
                    Some(before) if before.retry_after() <= verdict.retry_after() => before,
                    _ => verdict,
                });
                continue;
            }
            // More than the quota can ever hold: this upstream never takes the call.
            Err(None) => continue,
        };
        let Some(uri) = target(&upstream.uri, request.path_and_query) else { continue };
        let prepared = Prepared {
            method: request.method.clone(),
            uri,
            headers: request.headers.clone(),
            body: Outgoing::Kept(request.body.clone()),
            upgrade: false,
        };
        let via = Via {
            client: &upstream.client,
            inline: upstream.inline.as_ref(),
            breaker: upstream.breaker.as_deref(),
        };
        match call_via(route, via, prepared, request.deadline).await {
            Ok(response) if last || !hands_over(response.status()) => return Tried::Answered(response, hold),
            Ok(response) => {
                let provider_429 = response.status() == StatusCode::TOO_MANY_REQUESTS;
                if provider_429 && let Some(wait) = asked_wait(response.headers()) {
                    upstream.cool_off.cool_for(wait);
                }
                drop(response);
                if let Some(hold) = hold {
                    if provider_429 {
                        spend(app, table, &hold, call).await;
                    }
                    hold.account(app, table).release();
                }
                route.metrics.fallback.increment(1);
            }
            Err(failure) => {
                if let Some(hold) = hold {
                    hold.account(app, table).release();
                }
                if last {
                    return Tried::Failed(failure);
                }
                last_failure = failure;
                route.metrics.fallback.increment(1);
            }
        }
    }
    match refused {
        Some(verdict) => {
            Tried::Refused(respond::limited(call.dialect, &verdict, style, None, &llm.dimension))
        }
        None => Tried::Failed(last_failure),
    }
}

/// Whether an upstream's answer of `status` hands the call to the next upstream.
fn hands_over(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// Reserves `costs` on `upstream`'s quota rule: `Ok(None)` without one, `Err` with the denial when
/// it has no room now, `Err(None)` when it never will (the call is larger than the rule). A store
/// failure lets the call go (the upstream itself will say).
async fn hold(
    app: &App,
    table: &RouteTable,
    llm: &Llm,
    upstream: &LlmUpstreamState,
    call: &Call,
    costs: &Costs,
) -> Result<Option<Hold>, Option<Verdict>> {
    let Some(rule) = upstream.quota_rule.as_deref() else { return Ok(None) };
    let Some(domain) = table.policies.quota(rule) else { return Ok(None) };
    let hit = Hit::with_costs(&call.descriptors, costs);
    match app.decisions().reserve(domain, hit, llm.reservation_ttl).await {
        Ok(reserved) => match reserved.reservation {
            Some(reservation) => {
                let held = reserved.verdict.limits.first();
                Ok(Some(Hold {
                    rule: rule.to_owned(),
                    reservation: reservation.id,
                    limit: held.map_or(0, |l| l.decision.limit),
                    dimension: held.map_or_else(String::new, |l| l.dimension.to_string()),
                }))
            }
            None if reserved.verdict.allowed => Ok(None),
            None => Err(Some(reserved.verdict)),
        },
        Err(floodgate::ReserveError::Engine(_)) => Err(None),
        Err(error) => {
            tracing::warn!(rule, error = %error, "gateway: an LLM upstream's quota could not be reserved");
            Ok(None)
        }
    }
}

/// The provider said 429: what its quota rule has left is spent, so that the next calls skip the
/// upstream until the rule refills (every instance sharing the store alike).
async fn spend(app: &App, table: &RouteTable, hold: &Hold, call: &Call) {
    let Some(domain) = table.policies.quota(&hold.rule) else { return };
    if hold.limit == 0 || hold.dimension.is_empty() {
        return;
    }
    let costs = Costs::new().with(hold.dimension.as_str(), hold.limit);
    let hit = Hit::with_costs(&call.descriptors, &costs);
    if let Err(error) = app.decisions().decide(domain, Api::Report, &[hit]).await {
        tracing::warn!(rule = %hold.rule, error = %error, "gateway: an LLM upstream's 429 could not be recorded");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_read_from_retry_after_ms_then_retry_after() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, http::HeaderValue::from_static(value));
            }
            map
        };
        let wait = |pairs: &[(&'static str, &'static str)]| asked_wait(&headers(pairs));
        assert_eq!(
            wait(&[("retry-after-ms", "1500"), ("retry-after", "2")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(wait(&[("retry-after-ms", "20.5")]), Some(Duration::from_micros(20_500)));
        assert_eq!(wait(&[("retry-after", "7")]), Some(Duration::from_secs(7)));
        assert_eq!(wait(&[("retry-after-ms", "soon"), ("retry-after", "3")]), Some(Duration::from_secs(3)));
        assert_eq!(wait(&[("retry-after-ms", "-5")]), None);
        assert_eq!(wait(&[("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT")]), None);
        assert_eq!(wait(&[("retry-after-ms", "1e300")]), Some(MAX_COOL_OFF));
        assert_eq!(wait(&[]), None);
    }
}
