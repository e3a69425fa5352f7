//! The client: its calls, each within its deadline and through the breaker, and the fail mode
//! deciding a check without a verdict.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use floodgate::breaker::BreakerState;
use http::{HeaderMap, HeaderValue, Method, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;

use crate::breaker::{self, Breaker, Pass};
use crate::budget::RetryBudget;
use crate::decision::{Decision, FailMode, Request, WireVerdict, failed, passed_header};
use crate::error::{Error, FailureReason};
use crate::retry::{RetryPolicy, Retryable, retry_granted};
use crate::stats::{Counters, Stats};
use crate::tls::{Connector, Identity};

/// A client of Floodgate's HTTP API (`/v1/check`, `/v1/peek`, `/v1/report`…): keep-alive
/// connections (hyper) over TCP or TLS, a deadline on every call, a fail mode for checks without a
/// verdict, a circuit breaker, a retry budget, and counters of those. Cheap to clone (one pool,
/// one breaker, one budget).
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) endpoints: Endpoints,
    pub(crate) base: String,
    pub(crate) deadline: Duration,
    pub(crate) fail_mode: FailMode,
    pub(crate) fail_closed_retry_after: Duration,
    pub(crate) headers: HeaderMap,
    pub(crate) http: HyperClient<Connector, Full<Bytes>>,
    /// The client certificate of an `https://` client, and what explains a TLS failure.
    pub(crate) identity: Option<Arc<Identity>>,
    pub(crate) breaker: Option<Breaker>,
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) stats: Counters,
}

/// The URLs of the calls.
#[derive(Debug)]
pub(crate) struct Endpoints {
    pub(crate) check: Uri,
    pub(crate) peek: Uri,
    pub(crate) report: Uri,
    pub(crate) reserve: Uri,
    pub(crate) commit: Uri,
    pub(crate) release: Uri,
}

#[derive(Clone, Copy)]
pub(crate) enum Call {
    Check,
    Peek,
    Report,
    Reserve,
}

impl Client {
    /// Checks a request: consumes its cost from every rule that applies when all allow. Without a
    /// verdict in time, the fail mode decides ([`Decision::failure`] says why).
    pub async fn check(&self, request: &Request) -> Result<Decision, Error> {
        self.decide(Call::Check, request).await
    }

    /// What [`check`](Client::check) would answer, consuming nothing.
    pub async fn peek(&self, request: &Request) -> Result<Decision, Error> {
        self.decide(Call::Peek, request).await
    }

    /// Consumes the cost after the fact (tokens known once a response is done); never denies.
    /// Without an answer it returns [`Error::Unavailable`] (`not_sent` when the connection was
    /// never made, so that [`retry`](crate::retry) may retry it).
    pub async fn report(&self, request: &Request) -> Result<Decision, Error> {
        match self.call(Call::Report, request).await {
            Ok(decision) => Ok(decision),
            Err(error) => {
                if let Error::Unavailable { reason, .. } = &error {
                    self.count(*reason, None);
                }
                Err(error)
            }
        }
    }

    /// Counters since the client was built.
    pub fn stats(&self) -> Stats {
        let inner = &*self.inner;
        let mut stats = inner.stats.snapshot();
        if let Some(breaker) = &inner.breaker {
            let t = breaker.transitions();
            stats.breaker_opened = t.opened.load(Ordering::Relaxed);
            stats.breaker_half_opened = t.half_opened.load(Ordering::Relaxed);
            stats.breaker_closed = t.closed.load(Ordering::Relaxed);
        }
        if let Some(budget) = &inner.budget {
            (stats.retries, stats.retries_refused) = budget.counts();
        }
        stats
    }

    /// Where the circuit breaker is; `None` when the client has none
    /// ([`ClientBuilder::no_breaker`](crate::ClientBuilder::no_breaker)).
    pub fn breaker_state(&self) -> Option<BreakerState> {
        self.inner.breaker.as_ref().map(Breaker::state)
    }

    /// Calls `call` and retries it as `policy` says (as the free [`retry`](crate::retry)) and as
    /// the client's retry budget allows: a retry the budget refuses returns the error of the
    /// attempt it would have repeated. A call refused by the open breaker is not retried.
    ///
    /// ```no_run
    /// # async fn f(floodgate: floodgate_client::Client) -> Result<(), floodgate_client::Error> {
    /// use floodgate_client::{Request, RetryPolicy};
    /// let usage = Request::new().descriptor("tenant", "t1").cost(812);
    /// floodgate.retry(RetryPolicy::default(), |_| floodgate.report(&usage)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn retry<T, E, F, Fut>(&self, policy: RetryPolicy, call: F) -> Result<T, E>
    where
        E: Retryable,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        retry_granted(policy, call, || self.grant_retry()).await
    }

    /// Whether the retry budget grants one more retry (always, without a budget).
    pub(crate) fn grant_retry(&self) -> bool {
        self.inner.budget.as_ref().is_none_or(RetryBudget::withdraw)
    }

    pub(crate) async fn decide(&self, call: Call, request: &Request) -> Result<Decision, Error> {
        match self.call(call, request).await {
            Ok(decision) => Ok(decision),
            Err(Error::Unavailable { reason, .. }) => {
                let mode = request.fail_mode.unwrap_or(self.inner.fail_mode);
                self.count(reason, Some(mode));
                let allowed = mode == FailMode::Open;
                let retry_after = (!allowed).then_some(self.inner.fail_closed_retry_after);
                let mut headers = HeaderMap::new();
                if let Some(d) = retry_after {
                    let secs = d.as_millis().div_ceil(1000).max(1);
                    headers.insert(header::RETRY_AFTER, HeaderValue::from(secs as u64));
                }
                Ok(Decision {
                    allowed,
                    status: 0,
                    retry_after,
                    limits: Vec::new(),
                    headers,
                    failure: Some((reason, mode)),
                    reservation: None,
                    expires_at_ms: None,
                })
            }
            Err(other) => Err(other),
        }
    }

    fn count(&self, reason: FailureReason, mode: Option<FailMode>) {
        self.inner.stats.count(reason, mode);
    }

    async fn call(&self, call: Call, request: &Request) -> Result<Decision, Error> {
        let inner = &*self.inner;
        let body = request.body(matches!(call, Call::Reserve))?;
        let uri = match call {
            Call::Check => &inner.endpoints.check,
            Call::Peek => &inner.endpoints.peek,
            Call::Report => &inner.endpoints.report,
            Call::Reserve => &inner.endpoints.reserve,
        };
        let (parts, bytes) = self.exchange(Method::POST, uri.clone(), Some(body), request.deadline).await?;
        render(parts.status.as_u16(), &parts.headers, &bytes)
    }

    /// One request with the deadline, as the breaker allows: the answer's head and body, or
    /// [`Error::Unavailable`] (reason `breaker_open` when the breaker refused it unsent).
    pub(crate) async fn exchange(
        &self,
        method: Method,
        uri: Uri,
        body: Option<Vec<u8>>,
        deadline: Option<Duration>,
    ) -> Result<(http::response::Parts, Bytes), Error> {
        let inner = &*self.inner;
        let deadline = deadline.unwrap_or(inner.deadline);
        if deadline.is_zero() {
            return Err(Error::InvalidRequest("deadline must be longer than 0".into()));
        }
        let mut builder = http::Request::builder().method(method).uri(uri);
        if let Some(headers) = builder.headers_mut() {
            headers.extend(inner.headers.iter().map(|(n, v)| (n.clone(), v.clone())));
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let http_request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| Error::InvalidRequest(e.to_string()))?;
        let pass = match &inner.breaker {
            Some(breaker) => breaker.pass()?,
            None => Pass::free(),
        };
        inner.stats.call();
        if let Some(budget) = &inner.budget {
            budget.deposit();
        }
        let exchange = async {
            let response = inner
                .http
                .request(http_request)
                .await
                .map_err(|e| self.unavailable(e.is_connect(), "", Box::new(e)))?;
            let (parts, body) = response.into_parts();
            let bytes = body
                .collect()
                .await
                .map_err(|e| self.unavailable(false, "the answer was cut: ", Box::new(e)))?;
            Ok::<_, Error>((parts, bytes.to_bytes()))
        };
        let outcome = match tokio::time::timeout(deadline, exchange).await {
            Ok(result) => result,
            Err(_) => Err(Error::Unavailable {
                reason: FailureReason::Deadline,
                not_sent: false,
                message: format!("no answer within {} ms", deadline.as_millis()),
                source: None,
            }),
        };
        pass.finish(breaker::failed(&outcome));
        outcome
    }

    /// The error of a call that got no answer: TLS, when TLS explains it, or unreachable.
    fn unavailable(
        &self,
        not_sent: bool,
        context: &str,
        error: Box<dyn std::error::Error + Send + Sync>,
    ) -> Error {
        if let Some(why) = self.inner.identity.as_ref().and_then(|identity| identity.explain(&*error)) {
            return Error::Unavailable {
                reason: FailureReason::Tls,
                not_sent,
                message: why,
                source: Some(error),
            };
        }
        let message = match error.source() {
            Some(source) => format!("{context}{error}: {source}"),
            None => format!("{context}{error}"),
        };
        Error::Unavailable { reason: FailureReason::Unreachable, not_sent, message, source: Some(error) }
    }

    /// The URL of `POST /v1/commit`.
    pub(crate) fn commit_uri(&self) -> &Uri {
        &self.inner.endpoints.commit
    }

    /// The URL of `POST /v1/release`.
    pub(crate) fn release_uri(&self) -> &Uri {
        &self.inner.endpoints.release
    }

    pub(crate) fn base(&self) -> &str {
        &self.inner.base
    }

    pub(crate) fn count_failure(&self, reason: FailureReason) {
        self.count(reason, None);
    }
}

fn render(status: u16, headers: &HeaderMap, body: &[u8]) -> Result<Decision, Error> {
    if (status == 200 || status == 429)
        && let Ok(verdict) = serde_json::from_slice::<WireVerdict>(body)
    {
        let mut passed = HeaderMap::new();
        for (name, value) in headers {
            if passed_header(name.as_str()) {
                passed.append(name.clone(), value.clone());
            }
        }
        let retry_after =
            if verdict.allowed { None } else { verdict.retry_after_ms.map(Duration::from_millis) };
        return Ok(Decision {
            allowed: verdict.allowed,
            status,
            retry_after,
            limits: verdict.limits,
            headers: passed,
            failure: None,
            reservation: if verdict.allowed {
                verdict.reservation.or_else(|| {
                    headers.get("floodgate-reservation").and_then(|v| v.to_str().ok()).map(str::to_owned)
                })
            } else {
                None
            },
            expires_at_ms: if verdict.allowed { verdict.expires_at_ms } else { None },
        });
    }
    Err(failed(status, body))
}
