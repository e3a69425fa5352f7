//! The Envoy RLS v3 front door: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//!
//! - `domain` selects the policy: that Envoy domain's (from an envoyproxy/ratelimit file), or the
//!   native policy when no file defines it (an envoyproxy-only configuration has no native rules:
//!   such a request is then not limited).
//! - Each request descriptor (a list of entries) becomes one [`Descriptors`] — see
//!   [`descriptors_of`] — checked with the cost `hits_addend` (0 means 1; a descriptor's own
//!   `hits_addend` overrides the request's).
//! - **All-or-nothing across descriptors.** Envoy checks every descriptor and answers `OVER_LIMIT`
//!   if any is over. Floodgate checks them in order and, when one is over limit, refunds what the
//!   others consumed, so a denied request consumes nothing — as for HTTP checks. Between a
//!   descriptor's check and its refund, another request may see that capacity taken (a transient
//!   under-admission of at most one request's cost per descriptor, never an over-admission).
//! - The response: `overall_code`; one status per descriptor with `code`, `current_limit` (the most
//!   restrictive enforced limit, else a shadowed one; set when its window is 1 s, 1 min, 1 h or
//!   1 d, left unset otherwise and for `unlimited` entries), `limit_remaining` and
//!   `duration_until_reset`; and
//!   `response_headers_to_add` with the rate-limit headers of the whole request (the header style
//!   of the configuration, `Retry-After` when over limit).
//! - A cost that a limit can never grant answers `OVER_LIMIT` for that descriptor. Descriptors with
//!   `is_negative_hits` are answered `OK` without consuming; `limit` overrides are ignored.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use floodgate::headers::rate_limit_headers;
use floodgate::{Descriptors, LimitOutcome, Verdict};
use smallvec::SmallVec;

use crate::app::Shared;
use crate::config;
use crate::metrics;

/// The tonic service to add to a `tonic::transport::Server`.
pub type RateLimitServer = RateLimitServiceServer<Rls>;

pub(crate) fn service(shared: Arc<Shared>) -> RateLimitServer {
    RateLimitServiceServer::new(Rls { shared })
}

/// The RLS implementation over the app's running configuration.
#[derive(Debug)]
pub struct Rls {
    shared: Arc<Shared>,
}

/// The descriptors of one Envoy descriptor, as the configuration maps them
/// ([`config::envoy_descriptors`]: each entry's key → value, repeated keys as `key#2`…, and
/// `envoy.keys` holding the ordered keys, so that imported rules match depth and order as
/// envoyproxy/ratelimit does).
pub fn descriptors_of(descriptor: &RateLimitDescriptor) -> Descriptors {
    config::envoy_descriptors(descriptor.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
}

/// What one descriptor's check came to.
// Kept inline in a small vector, one per descriptor of the request: boxing would allocate per descriptor.
#[allow(clippy::large_enum_variant)]
enum Checked {
    /// Not checked (`is_negative_hits`).
    Skipped,
    /// The cost can never be granted.
    Never,
    /// A verdict.
    Verdict(Descriptors, Verdict),
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let request = request.into_inner();
        let running = self.shared.control.current();
        let policy = running.domain(Some(&request.domain));
        let default_cost = u64::from(request.hits_addend.max(1));

        let mut checked: SmallVec<[Checked; 4]> = SmallVec::new();
        for descriptor in &request.descriptors {
            if descriptor.is_negative_hits {
                checked.push(Checked::Skipped);
                continue;
            }
            let cost = descriptor.hits_addend.map_or(default_cost, |h| h.value.max(1));
            let descriptors = descriptors_of(descriptor);
            let started = metrics::started();
            match policy.engine.check(&descriptors, cost).await {
                Ok(verdict) => {
                    policy.metrics.record(&verdict, started);
                    if verdict.store_error.is_some() {
                        self.shared.metrics.store_error();
                    }
                    checked.push(Checked::Verdict(descriptors, verdict));
                }
                Err(_) => {
                    policy.metrics.record_duration(started);
                    checked.push(Checked::Never);
                }
            }
        }

        let over = checked.iter().any(|c| match c {
            Checked::Never => true,
            Checked::Verdict(_, v) => !v.allowed,
            Checked::Skipped => false,
        });
        if over {
            // A denied request consumes nothing: give back what the admitted descriptors took.
            for c in &mut checked {
                if let Checked::Verdict(descriptors, verdict) = c
                    && verdict.allowed
                {
                    if let Err(e) = policy.engine.refund(descriptors, verdict).await {
                        tracing::warn!(error = %e, "refund after an over-limit descriptor failed");
                        self.shared.metrics.store_error();
                        continue;
                    }
                    refunded(verdict);
                }
            }
        }

        let statuses = checked.iter().map(status).collect();
        let mut combined = Verdict { allowed: !over, ..Verdict::default() };
        for c in &checked {
            if let Checked::Verdict(_, v) = c {
                if combined.limits.is_empty() {
                    combined.at = v.at;
                }
                combined.limits.extend(v.limits.iter().cloned());
            }
        }
        let mut headers = http::HeaderMap::new();
        rate_limit_headers(&combined, running.headers, &mut headers);
        let response_headers_to_add = headers
            .iter()
            .map(|(name, value)| HeaderValue {
                key: name.as_str().to_owned(),
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
                raw_value: Vec::new(),
            })
            .collect();

        let overall = if over { Code::OverLimit } else { Code::Ok };
        self.shared.metrics.request("grpc", if over { "OVER_LIMIT" } else { "OK" });
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add,
            ..RateLimitResponse::default()
        }))
    }
}

/// After a refund: what the admitted limits have left again.
fn refunded(verdict: &mut Verdict) {
    for l in &mut verdict.limits {
        if let Some(grant) = l.grant.take() {
            l.decision.remaining = l.decision.remaining.saturating_add(grant.cost).min(l.decision.limit);
        }
    }
}

fn status(checked: &Checked) -> DescriptorStatus {
    match checked {
        Checked::Skipped => DescriptorStatus { code: Code::Ok as i32, ..DescriptorStatus::default() },
        Checked::Never => DescriptorStatus { code: Code::OverLimit as i32, ..DescriptorStatus::default() },
        Checked::Verdict(_, verdict) => {
            let code = if verdict.allowed { Code::Ok } else { Code::OverLimit };
            let mut status = DescriptorStatus { code: code as i32, ..DescriptorStatus::default() };
            let shown = verdict
                .most_restrictive()
                .filter(|l| l.enforced)
                .or_else(|| verdict.limits.iter().find(|l| !l.enforced));
            if let Some(limit) = shown {
                status.current_limit = current_limit(limit);
                status.limit_remaining = u32::try_from(limit.decision.remaining).unwrap_or(u32::MAX);
                status.duration_until_reset = Some(proto_duration(limit.decision.reset_after));
            }
            status
        }
    }
}

/// The limit as Envoy's `RateLimit`, when its window is a whole second, minute, hour or day.
fn current_limit(limit: &LimitOutcome) -> Option<RateLimit> {
    let unit = match limit.window.as_secs() {
        _ if limit.window.subsec_nanos() != 0 => return None,
        1 => Unit::Second,
        60 => Unit::Minute,
        3600 => Unit::Hour,
        86_400 => Unit::Day,
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
