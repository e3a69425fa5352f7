//! The Envoy RLS v3 front door: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//!
//! - `domain` selects the policy: that Envoy domain's (from an envoyproxy/ratelimit file), or the
//!   native policy when no file defines it (an envoyproxy-only configuration has no native rules:
//!   such a request is then not limited).
//! - Each request descriptor (a list of entries) becomes one hit: its [`Descriptors`] (see
//!   [`descriptors_of`]) and the cost `hits_addend` (0 means 1; a descriptor's own `hits_addend`
//!   overrides the request's).
//! - **All-or-nothing across descriptors, in one store call.** Envoy answers `OVER_LIMIT` when any
//!   descriptor is over its limit. Floodgate decides every descriptor of the request together
//!   ([`Policy::evaluate`](floodgate::Policy::evaluate)): when one is over, nothing is consumed for
//!   any of them — no check-then-refund, no transient under-admission, one round trip to the store
//!   (on a Redis Cluster, descriptors whose keys live in different slots are still one call of the
//!   store, which applies them slot by slot, given back on denial: see `floodgate-redis`).
//!   Descriptors of one request that make the same key (the same rule and values) are charged
//!   their summed cost once.
//! - The response: `overall_code`; one status per descriptor with `code` (`OVER_LIMIT` for a
//!   descriptor over its own limit), `current_limit` (the most restrictive enforced limit, else a
//!   shadowed one; set when its window is one of Envoy's units — 1 s, 1 min, 1 h, 1 d, a week of 7 d,
//!   a month of 30 d, a year of 365 d — left unset otherwise and for `unlimited` entries), `limit_remaining` and `duration_until_reset`; and
//!   `response_headers_to_add` with the rate-limit headers of the whole request (the header style
//!   of the configuration, `Retry-After` when over limit).
//! - A cost that a limit can never grant makes that descriptor, and so the request, `OVER_LIMIT`;
//!   the other descriptors are then reported as a peek would (nothing is consumed). Descriptors
//!   with `is_negative_hits` are answered `OK` without consuming.
//! - A descriptor's `limit` override (`requests_per_unit` per `unit`) is stated to the rules that
//!   apply to it, within the domain's bound (`limit_override` in its file; see
//!   `floodgate_config`'s Envoy docs): the decision and `current_limit` use it, on a counter of its
//!   own when it differs from the rule's. An override above the bound, of an unknown unit or of 0,
//!   or on a descriptor no rule applies to, is `INVALID_ARGUMENT` naming it; with `auth` clients
//!   it needs the `state_limits` scope besides `check` (`PERMISSION_DENIED` otherwise).

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use floodgate::{Descriptors, Hit, LimitOutcome, Stated, Verdict};
use floodgate_config::auth::Scope;
use floodgate_http::envoy::envoy_descriptors;
use floodgate_http::rate_limit_headers;
use smallvec::SmallVec;

use floodgate_app::auth::Refusal;
use floodgate_app::listener::grpc_incoming;
use floodgate_app::metrics::{Api, GrpcCode};
use floodgate_app::tls::Tls;
use floodgate_app::{App, stopped};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The tonic service to add to a `tonic::transport::Server`.
pub type RateLimitServer = RateLimitServiceServer<Rls>;

pub(crate) fn service(app: App) -> RateLimitServer {
    RateLimitServiceServer::new(Rls { app })
}

/// Serves the RLS and RLQS services ([`crate::rlqs`]) on `listener` until `stop` turns true, then shuts down gracefully. The
/// limits of `http:` apply to the gRPC listener's connections too (see
/// [`floodgate_app::listener`]); the header list's bound is the one in force at start.
pub async fn serve(
    app: App,
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let max_header_list = app.control().load().http.max_header_bytes;
    let builder = tonic::transport::Server::builder()
        .http2_max_header_list_size(u32::try_from(max_header_list).unwrap_or(u32::MAX))
        .add_service(service(app.clone()))
        .add_service(crate::rlqs::service(app.clone()));
    let quotas = app.clone();
    let incoming = grpc_incoming(listener, app, tls, stop.clone());
    let mut stop = stop;
    builder
        .serve_with_incoming_shutdown(incoming, async move {
            stopped(&mut stop).await;
            // RLQS streams last as long as their Envoy: expire their assignments and end them, so
            // that graceful shutdown does not wait for them.
            quotas.rlqs().shutdown();
        })
        .await
        .map_err(std::io::Error::other)
}

/// The RLS implementation over the app's running configuration.
#[derive(Debug)]
pub struct Rls {
    app: App,
}

/// The descriptors of one Envoy descriptor ([`envoy_descriptors`]: each entry's key → value,
/// repeated keys as `key#2`…, and `envoy.keys` holding the ordered keys, so that imported rules
/// match depth and order as envoyproxy/ratelimit does).
pub fn descriptors_of(descriptor: &RateLimitDescriptor) -> Descriptors {
    envoy_descriptors(descriptor.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let running = self.app.control().load();
        let authorization = request.metadata().get("authorization").map(|v| v.as_bytes());
        let client =
            running.authorize(authorization, Scope::Check).map_err(|refusal| self.refuse(&refusal))?;
        let request = request.into_inner();
        if let Some(client) = client {
            // A limit override states a limit: it takes the `state_limits` scope too.
            if request.descriptors.iter().any(|d| d.limit.is_some()) && !client.holds(Scope::StateLimits) {
                return Err(self.refuse(&Refusal::Scope(client, Scope::StateLimits)));
            }
            // Every descriptor must name the client's pinned descriptors, with their values.
            for descriptor in &request.descriptors {
                let entries = descriptor.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
                if let Err(refusal) = client.check_entries(entries) {
                    return Err(self.refuse(&refusal));
                }
            }
        }
        let requests = client.map(|c| &*c.requests);
        let policy = running.domain(Some(&request.domain));
        let default_cost = u64::from(request.hits_addend.max(1));

        // One hit per descriptor that counts (`is_negative_hits` ones are answered OK, untouched),
        // stating its limit override when it has one.
        let mut descriptors: SmallVec<[(usize, Descriptors, u64, Stated); 4]> = SmallVec::new();
        for (i, d) in request.descriptors.iter().enumerate().filter(|(_, d)| !d.is_negative_hits) {
            let stated = match &d.limit {
                Some(o) => override_of(i, o)?,
                None => Stated::default(),
            };
            let cost = d.hits_addend.as_ref().map_or(default_cost, |h| h.value.max(1));
            descriptors.push((i, descriptors_of(d), cost, stated));
        }
        let hits: SmallVec<[Hit<'_>; 4]> =
            descriptors.iter().map(|(_, d, cost, stated)| Hit::new(d, *cost).stating(stated)).collect();
        // With Impossible::Deny the engine errs on no cost (`max(1)` rules out a zero one), only on
        // a descriptor value a rule cannot key by.
        let verdict = match self.app.decisions().decide(policy, Api::Grpc, &hits).await {
            Ok(verdict) => verdict,
            Err(error) => return Err(tonic::Status::invalid_argument(error.to_string())),
        };

        let mut statuses = vec![
            DescriptorStatus { code: Code::Ok as i32, ..DescriptorStatus::default() };
            request.descriptors.len()
        ];
        for (hit, (index, _, _, _)) in descriptors.iter().enumerate() {
            statuses[*index] = status(&verdict, hit);
        }
        let mut headers = http::HeaderMap::new();
        rate_limit_headers(&verdict, running.headers, &mut headers);
        let response_headers_to_add = headers
            .iter()
            .map(|(name, value)| HeaderValue {
                key: name.as_str().to_owned(),
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
                raw_value: Vec::new(),
            })
            .collect();

        let over = !verdict.allowed;
        self.app.metrics().grpc_request(requests, if over { GrpcCode::OverLimit } else { GrpcCode::Ok });
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add,
            ..RateLimitResponse::default()
        }))
    }
}

impl Rls {
    /// `UNAUTHENTICATED` or `PERMISSION_DENIED`, counted.
    fn refuse(&self, refusal: &Refusal<'_>) -> tonic::Status {
        let requests = refusal.client().map(|c| &*c.requests);
        if refusal.unauthenticated() {
            self.app.metrics().grpc_request(requests, GrpcCode::Unauthenticated);
            tonic::Status::unauthenticated(refusal.detail())
        } else {
            self.app.metrics().grpc_request(requests, GrpcCode::PermissionDenied);
            tonic::Status::permission_denied(refusal.detail())
        }
    }
}

/// The status of hit `hit`: over limit when one of its own enforced limits denied, with the
/// numbers of its most restrictive enforced limit (or a shadowed one when it has none).
fn status(verdict: &Verdict, hit: usize) -> DescriptorStatus {
    let code = if verdict.hit_allowed(hit) { Code::Ok } else { Code::OverLimit };
    let mut status = DescriptorStatus { code: code as i32, ..DescriptorStatus::default() };
    let shown = verdict
        .most_restrictive_of_hit(hit)
        .filter(|l| l.enforced)
        .or_else(|| verdict.of_hit(hit).find(|l| !l.enforced));
    if let Some(limit) = shown {
        status.current_limit = current_limit(limit);
        status.limit_remaining = u32::try_from(limit.decision.remaining).unwrap_or(u32::MAX);
        status.duration_until_reset = Some(proto_duration(limit.decision.reset_after));
    }
    status
}

/// Descriptor `index`'s limit override as stated values: `requests_per_unit` per `unit` (a
/// month of 30 days and a year of 365, as envoyproxy/ratelimit counts them); INVALID_ARGUMENT for
/// an unknown unit or a limit of 0.
#[allow(clippy::result_large_err)] // a status is built only on the error path, and answered at once
fn override_of(index: usize, o: &RateLimitOverride) -> Result<Stated, tonic::Status> {
    const DAY: u64 = 86_400;
    let secs = match Unit::try_from(o.unit) {
        Ok(Unit::Second) => 1,
        Ok(Unit::Minute) => 60,
        Ok(Unit::Hour) => 3600,
        Ok(Unit::Day) => DAY,
        Ok(Unit::Week) => 7 * DAY,
        Ok(Unit::Month) => 30 * DAY,
        Ok(Unit::Year) => 365 * DAY,
        _ => {
            return Err(tonic::Status::invalid_argument(format!(
                "descriptors[{index}].limit: unit {} is not a unit (SECOND to YEAR)",
                o.unit
            )));
        }
    };
    if o.requests_per_unit == 0 {
        return Err(tonic::Status::invalid_argument(format!(
            "descriptors[{index}].limit: requests_per_unit is 0; it must be at least 1"
        )));
    }
    Ok(Stated {
        limit: Some(u64::from(o.requests_per_unit)),
        window: Some(Duration::from_secs(secs)),
        block_for: None,
    })
}

/// The limit as Envoy's `RateLimit`, when its window is one of Envoy's units: a second, minute,
/// hour, day, week (7 days), month (30 days) or year (365 days), as envoyproxy/ratelimit counts them.
fn current_limit(limit: &LimitOutcome) -> Option<RateLimit> {
    const DAY: u64 = 86_400;
    let unit = match limit.window.as_secs() {
        _ if limit.window.subsec_nanos() != 0 => return None,
        1 => Unit::Second,
        60 => Unit::Minute,
        3600 => Unit::Hour,
        DAY => Unit::Day,
        w if w == 7 * DAY => Unit::Week,
        w if w == 30 * DAY => Unit::Month,
        w if w == 365 * DAY => Unit::Year,
        _ => return None,
    };
    Some(RateLimit {
        name: limit.rule.to_string(),
        requests_per_unit: u32::try_from(limit.decision.limit).unwrap_or(u32::MAX),
        unit: unit as i32,
    })
}

fn proto_duration(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}
