//! What can go wrong with a call.

use std::time::Duration;

/// Why a call got no verdict from Floodgate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// The service could not be reached (connection refused, reset, DNS).
    Unreachable,
    /// The service did not answer within the call's deadline.
    Deadline,
    /// The service answered with a 5xx or a body that is no verdict.
    ServerError,
    /// The circuit breaker is open: the service failed lately, so the call was not sent (see
    /// [`ClientBuilder::breaker`](crate::ClientBuilder::breaker)).
    BreakerOpen,
    /// The TLS handshake failed: a server certificate the CA bundle does not verify, or a client
    /// certificate the server requires and refused or did not get.
    Tls,
}

impl FailureReason {
    /// The reason's name as `stats` and logs write it: `unreachable`, `deadline`, `server_error`,
    /// `breaker_open`, `tls`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureReason::Unreachable => "unreachable",
            FailureReason::Deadline => "deadline",
            FailureReason::ServerError => "server_error",
            FailureReason::BreakerOpen => "breaker_open",
            FailureReason::Tls => "tls",
        }
    }
}

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Floodgate refused the request as malformed (400, 413, 422: a cost that can never be
    /// allowed, too many descriptors…). The caller's bug, not an outage: no fail mode hides it.
    #[error("floodgate refused the request ({status} {title}): {detail}")]
    Problem {
        /// The HTTP status.
        status: u16,
        /// The problem's `type` URI.
        type_uri: String,
        /// The problem's `title`.
        title: String,
        /// The problem's `detail`.
        detail: String,
    },
    /// `404 not-found`: the server does not know this reservation id (never given, or forgotten a
    /// while after it expired), or, from `usage`, this rule.
    #[error("floodgate does not know it (404): {detail}")]
    NotFound {
        /// The problem's `detail`.
        detail: String,
    },
    /// `409 reservation-settled`: the reservation was released, committed with other costs, or
    /// expired (it stays charged its estimate), or is a check's permits and was committed.
    #[error("the reservation is already settled (409): {detail}")]
    ReservationSettled {
        /// The problem's `detail`.
        detail: String,
    },
    /// No verdict: the service is down, late or failing, or the circuit breaker is open. Returned
    /// by `report`, `commit`, `release` and `usage`; checks, peeks and reserves are decided by the
    /// fail mode instead.
    #[error("floodgate gave no verdict ({}): {message}", reason.as_str())]
    Unavailable {
        /// Why.
        reason: FailureReason,
        /// Whether the request surely did not reach the service (the connection was never made),
        /// so that retrying it cannot run it twice.
        not_sent: bool,
        /// What happened.
        message: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The request could not be built (a cost of 0, an invalid header value…).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The client's configuration cannot be used (from [`ClientBuilder::build`](crate::ClientBuilder::build)):
    /// `field` names the setting (`url`, `deadline`, `breaker.consecutive_failures`,
    /// `retry_budget.ratio`, `tls_ca`…), `reason` says what is wrong with it.
    #[error("invalid client configuration: {field}: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A denial turned into an error (by [`Decision::into_result`](crate::Decision::into_result)):
    /// retried by [`retry`](crate::retry) after `retry_after`, since a denied request consumed
    /// nothing and did not run.
    #[error("rate limited; retry in {} ms", retry_after.as_millis())]
    RateLimited {
        /// How long until the same request can pass.
        retry_after: Duration,
    },
}
