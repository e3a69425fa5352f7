//! Floodgate's answer to a call, and the request it answers.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, FailureReason};

/// What a check decides when Floodgate gives no verdict in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailMode {
    /// Let the request pass (the default).
    #[default]
    Open,
    /// Deny it, with the client's fail-closed `Retry-After`.
    Closed,
}

/// A call's descriptors, cost and options, built like a request:
/// `Request::new().descriptor("user", "u1").cost(3)`.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub(crate) descriptors: Vec<(String, String)>,
    pub(crate) cost: Option<u64>,
    pub(crate) costs: Vec<(String, u64)>,
    pub(crate) ttl: Option<Duration>,
    pub(crate) domain: Option<String>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) fail_mode: Option<FailMode>,
}

impl Request {
    /// A request with no descriptors, cost 1.
    pub fn new() -> Request {
        Request::default()
    }

    /// Adds a descriptor (`user`, `tenant`, `route`, `session`…); a name given twice keeps the last.
    pub fn descriptor(mut self, name: impl Into<String>, value: impl Into<String>) -> Request {
        let name = name.into();
        self.descriptors.retain(|(n, _)| *n != name);
        self.descriptors.push((name, value.into()));
        self
    }

    /// The cost, a whole number ≥ 1 (default 1).
    pub fn cost(mut self, cost: u64) -> Request {
        self.cost = Some(cost);
        self
    }

    /// The cost in one dimension (`requests`, `tokens`…), a whole number; each rule counts its own
    /// (`cost: tokens`), e.g. `.costs("requests", 1).costs("tokens", 1200)`. A dimension given
    /// twice keeps the last. Not with [`cost`](Request::cost).
    pub fn costs(mut self, dimension: impl Into<String>, amount: u64) -> Request {
        let dimension = dimension.into();
        self.costs.retain(|(d, _)| *d != dimension);
        self.costs.push((dimension, amount));
        self
    }

    /// How long a [`reserve`](crate::Client::reserve) holds the reservation unsettled (server
    /// default 5 min, at most 24 h; whole milliseconds). Ignored by the other calls.
    pub fn ttl(mut self, ttl: Duration) -> Request {
        self.ttl = Some(ttl);
        self
    }

    /// Checks against the policy of an Envoy domain instead of the native rules.
    pub fn domain(mut self, domain: impl Into<String>) -> Request {
        self.domain = Some(domain.into());
        self
    }

    /// This call's deadline, instead of the client's.
    pub fn deadline(mut self, deadline: Duration) -> Request {
        self.deadline = Some(deadline);
        self
    }

    /// This call's fail mode, instead of the client's.
    pub fn fail_mode(mut self, mode: FailMode) -> Request {
        self.fail_mode = Some(mode);
        self
    }

    pub(crate) fn body(&self, with_ttl: bool) -> Result<Vec<u8>, Error> {
        if self.cost == Some(0) {
            return Err(Error::InvalidRequest("cost must be at least 1".into()));
        }
        if self.cost.is_some() && !self.costs.is_empty() {
            return Err(Error::InvalidRequest("give cost or costs, not both".into()));
        }
        let descriptors: serde_json::Map<String, serde_json::Value> =
            self.descriptors.iter().map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone()))).collect();
        let mut body = serde_json::Map::new();
        body.insert("descriptors".into(), descriptors.into());
        if let Some(cost) = self.cost {
            body.insert("cost".into(), cost.into());
        }
        if !self.costs.is_empty() {
            let costs: serde_json::Map<String, serde_json::Value> =
                self.costs.iter().map(|(d, n)| (d.clone(), (*n).into())).collect();
            body.insert("costs".into(), costs.into());
        }
        if let Some(domain) = &self.domain {
            body.insert("domain".into(), domain.clone().into());
        }
        if with_ttl && let Some(ttl) = self.ttl {
            let ms = ttl.as_millis();
            if ms == 0 {
                return Err(Error::InvalidRequest("ttl must be at least 1 ms".into()));
            }
            body.insert("ttl".into(), format!("{ms}ms").into());
        }
        serde_json::to_vec(&body).map_err(|e| Error::InvalidRequest(e.to_string()))
    }
}

/// One limit that applied.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LimitStatus {
    /// The rule's name.
    pub name: String,
    /// Its capacity.
    pub limit: u64,
    /// What is left after this request.
    pub remaining: u64,
    /// Until the limit is fully replenished, in ms.
    pub reset_after_ms: u64,
    /// When denied by this limit: until the same request can pass, in ms.
    pub retry_after_ms: Option<u64>,
    /// Whether this limit allowed.
    pub allowed: bool,
    /// `allowed`, `denied`, `shadow_denied`, `tagged`, `error_allowed` or `error_denied`.
    pub outcome: String,
}

/// Floodgate's answer to a check or a peek, or what the fail mode decided in its place.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Whether the request may pass.
    pub allowed: bool,
    /// 200 or 429 from the server; 0 when the fail mode decided.
    pub status: u16,
    /// When denied: until the same request can pass.
    pub retry_after: Option<Duration>,
    /// One entry per rule that applied.
    pub limits: Vec<LimitStatus>,
    /// The rate-limit headers the server sent (`RateLimit-Policy`, `RateLimit`, `X-RateLimit-*`,
    /// `Retry-After`, `floodgate-*`), to pass on to your own response.
    pub headers: http::HeaderMap,
    /// Set when the fail mode decided because the service gave no verdict.
    pub failure: Option<(FailureReason, FailMode)>,
    /// The reservation's id: of an allowed [`reserve`](crate::Client::reserve), or of a check that
    /// took concurrency permits (the `floodgate-reservation` header, which
    /// [`release`](crate::Client::release) frees them with). `None` otherwise.
    pub reservation: Option<String>,
    /// When an allowed reserve's reservation expires unsettled, ms since the Unix epoch.
    pub expires_at_ms: Option<u64>,
}

impl Decision {
    /// `Retry-After` in seconds (rounded up, at least 1) when denied.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(|d| d.as_millis().div_ceil(1000).max(1) as u64)
    }

    /// `Ok(self)` when allowed, [`Error::RateLimited`] when denied (for [`retry`](crate::retry)).
    pub fn into_result(self) -> Result<Decision, Error> {
        if self.allowed {
            Ok(self)
        } else {
            Err(Error::RateLimited { retry_after: self.retry_after.unwrap_or(Duration::from_secs(1)) })
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct WireVerdict {
    pub(crate) allowed: bool,
    #[serde(default)]
    pub(crate) reservation: Option<String>,
    #[serde(default)]
    pub(crate) expires_at_ms: Option<u64>,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) limits: Vec<LimitStatus>,
}

#[derive(Deserialize)]
pub(crate) struct WireProblem {
    #[serde(rename = "type", default)]
    pub(crate) type_uri: String,
    #[serde(default)]
    pub(crate) title: String,
    #[serde(default)]
    pub(crate) detail: String,
}

/// Whether a response header is one to pass on.
pub(crate) fn passed_header(name: &str) -> bool {
    matches!(name, "retry-after" | "ratelimit" | "ratelimit-policy")
        || name.starts_with("x-ratelimit-")
        || name.starts_with("floodgate-")
}

/// The error of an answer that is no result: a problem (4xx; typed for 404 and 409) or an outage.
pub(crate) fn failed(status: u16, body: &[u8]) -> Error {
    if (400..500).contains(&status)
        && status != 429
        && let Ok(problem) = serde_json::from_slice::<WireProblem>(body)
    {
        return match (status, problem.type_uri.as_str()) {
            (404, NOT_FOUND_TYPE) => Error::NotFound { detail: problem.detail },
            (409, SETTLED_TYPE) => Error::ReservationSettled { detail: problem.detail },
            _ => Error::Problem {
                status,
                type_uri: problem.type_uri,
                title: problem.title,
                detail: problem.detail,
            },
        };
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    Error::Unavailable {
        reason: FailureReason::ServerError,
        not_sent: false,
        message: format!("answered {status} without a verdict: {text}"),
        source: None,
    }
}

const NOT_FOUND_TYPE: &str = "https://floodgate.dev/problems/not-found";
const SETTLED_TYPE: &str = "https://floodgate.dev/problems/reservation-settled";
