//! Envoy's rate limit service (RLS v3) over gRPC (feature `grpc`): the same deadline, fail mode
//! and counters as the HTTP [`Client`](crate::Client), for callers that already speak RLS.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::{Channel, Endpoint};

use crate::decision::FailMode;
use crate::error::{Error, FailureReason};
use crate::stats::{Counters, Stats};

/// A client of `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`. Cheap to clone
/// (one HTTP/2 channel, connected lazily).
#[derive(Debug, Clone)]
pub struct RlsClient {
    service: RateLimitServiceClient<Channel>,
    deadline: Duration,
    fail_mode: FailMode,
    fail_closed_retry_after: Duration,
    stats: Arc<Counters>,
}

/// The answer of `ShouldRateLimit`, or what the fail mode decided in its place.
#[derive(Debug, Clone)]
pub struct RlsDecision {
    /// `overall_code` is `OK`.
    pub allowed: bool,
    /// When denied: the `retry-after` header the server asked to add, or the fail-closed wait.
    pub retry_after: Option<Duration>,
    /// The server's response (statuses per descriptor, headers to add); `None` when the fail mode
    /// decided.
    pub response: Option<RateLimitResponse>,
    /// Set when the fail mode decided because the service gave no verdict.
    pub failure: Option<(FailureReason, FailMode)>,
}

impl RlsClient {
    /// A client of the RLS service at `url` (`http://host:port`), connecting on first use;
    /// deadline 50 ms, fail open.
    pub fn connect_lazy(url: impl Into<String>) -> Result<RlsClient, Error> {
        let url = url.into();
        let endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| Error::InvalidRequest(format!("url {url:?} is not a URL: {e}")))?;
        Ok(RlsClient {
            service: RateLimitServiceClient::new(endpoint.connect_lazy()),
            deadline: Duration::from_millis(50),
            fail_mode: FailMode::Open,
            fail_closed_retry_after: Duration::from_secs(1),
            stats: Arc::default(),
        })
    }

    /// How long a call may take before the fail mode decides.
    pub fn deadline(mut self, deadline: Duration) -> RlsClient {
        self.deadline = deadline;
        self
    }

    /// What to decide without a verdict.
    pub fn fail_mode(mut self, mode: FailMode) -> RlsClient {
        self.fail_mode = mode;
        self
    }

    /// Counters since the client was made.
    pub fn stats(&self) -> Stats {
        self.stats.snapshot()
    }

    /// Asks whether a request with these descriptors (each a list of `(key, value)` entries, as
    /// Envoy sends them) may pass, `hits` being its cost (0 means 1, as in Envoy).
    pub async fn should_rate_limit(
        &self,
        domain: &str,
        descriptors: &[&[(&str, &str)]],
        hits: u32,
    ) -> Result<RlsDecision, Error> {
        let request = RateLimitRequest {
            domain: domain.into(),
            descriptors: descriptors
                .iter()
                .map(|entries| RateLimitDescriptor {
                    entries: entries
                        .iter()
                        .map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() })
                        .collect(),
                    ..RateLimitDescriptor::default()
                })
                .collect(),
            hits_addend: hits,
        };
        self.stats.call();
        let mut service = self.service.clone();
        let reason = match tokio::time::timeout(self.deadline, service.should_rate_limit(request)).await {
            Ok(Ok(response)) => {
                let response = response.into_inner();
                let allowed = response.overall_code == Code::Ok as i32;
                let retry_after = response
                    .response_headers_to_add
                    .iter()
                    .find(|h| h.key.eq_ignore_ascii_case("retry-after"))
                    .and_then(|h| h.value.parse::<u64>().ok())
                    .map(Duration::from_secs);
                return Ok(RlsDecision { allowed, retry_after, response: Some(response), failure: None });
            }
            Ok(Err(status)) if status.code() == tonic::Code::InvalidArgument => {
                return Err(Error::Problem {
                    status: 400,
                    type_uri: "grpc:invalid-argument".into(),
                    title: "Invalid Argument".into(),
                    detail: status.message().into(),
                });
            }
            Ok(Err(status)) if status.code() == tonic::Code::Unavailable => FailureReason::Unreachable,
            Ok(Err(_)) => FailureReason::ServerError,
            Err(_) => FailureReason::Deadline,
        };
        self.stats.count(reason, Some(self.fail_mode));
        let allowed = self.fail_mode == FailMode::Open;
        Ok(RlsDecision {
            allowed,
            retry_after: (!allowed).then_some(self.fail_closed_retry_after),
            response: None,
            failure: Some((reason, self.fail_mode)),
        })
    }
}
