//! The client and its builder.

use std::error::Error as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::decision::{Decision, FailMode, Request, WireVerdict, failed, passed_header};
use crate::error::{Error, FailureReason};

/// Builds a [`Client`]: `Client::builder("http://127.0.0.1:8080").deadline(..).fail_mode(..).build()`.
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    url: String,
    deadline: Duration,
    fail_mode: FailMode,
    fail_closed_retry_after: Duration,
    headers: HeaderMap,
    pool_idle_timeout: Duration,
}

impl ClientBuilder {
    /// How long a call may take before the fail mode decides. Default 50 ms.
    pub fn deadline(mut self, deadline: Duration) -> ClientBuilder {
        self.deadline = deadline;
        self
    }

    /// What a check decides without a verdict. Default [`FailMode::Open`].
    pub fn fail_mode(mut self, mode: FailMode) -> ClientBuilder {
        self.fail_mode = mode;
        self
    }

    /// `Retry-After` of a request denied by [`FailMode::Closed`]. Default 1 s.
    pub fn fail_closed_retry_after(mut self, retry_after: Duration) -> ClientBuilder {
        self.fail_closed_retry_after = retry_after;
        self
    }

    /// A header sent with every call (e.g. `authorization`).
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> ClientBuilder {
        self.headers.insert(name, value);
        self
    }

    /// How long an idle kept-alive connection stays in the pool. Default 60 s.
    pub fn pool_idle_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.pool_idle_timeout = timeout;
        self
    }

    /// The client; an error names what is wrong with the URL or the deadline.
    pub fn build(self) -> Result<Client, Error> {
        let base = self.url.trim_end_matches('/');
        let uri: Uri = base
            .parse()
            .map_err(|e| Error::InvalidRequest(format!("url {:?} is not a URL: {e}", self.url)))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(Error::InvalidRequest(format!(
                "url {:?} must be http://host:port (https is not supported by this client)",
                self.url
            )));
        }
        if self.deadline.is_zero() {
            return Err(Error::InvalidRequest("deadline must be longer than 0".into()));
        }
        let endpoint = |call: &str| -> Uri { format!("{base}/v1/{call}").parse().expect("a valid base URL") };
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(self.pool_idle_timeout)
            .build(connector);
        Ok(Client {
            inner: Arc::new(Inner {
                check: endpoint("check"),
                peek: endpoint("peek"),
                report: endpoint("report"),
                reserve: endpoint("reserve"),
                commit: endpoint("commit"),
                release: endpoint("release"),
                base: base.to_owned(),
                deadline: self.deadline,
                fail_mode: self.fail_mode,
                fail_closed_retry_after: self.fail_closed_retry_after,
                headers: self.headers,
                http,
                stats: Counters::default(),
            }),
        })
    }
}

/// A client of Floodgate's HTTP API (`/v1/check`, `/v1/peek`, `/v1/report`): keep-alive
/// connections (hyper), a deadline on every call, a fail mode for checks without a verdict, and
/// counters of those. Cheap to clone (one pool).
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    check: Uri,
    peek: Uri,
    report: Uri,
    reserve: Uri,
    commit: Uri,
    release: Uri,
    base: String,
    deadline: Duration,
    fail_mode: FailMode,
    fail_closed_retry_after: Duration,
    headers: HeaderMap,
    http: HyperClient<HttpConnector, Full<Bytes>>,
    stats: Counters,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    calls: AtomicU64,
    failed_open: AtomicU64,
    failed_closed: AtomicU64,
    unreachable: AtomicU64,
    deadline: AtomicU64,
    server_error: AtomicU64,
}

/// What a client counted since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Calls made.
    pub calls: u64,
    /// Checks and peeks allowed by [`FailMode::Open`].
    pub failed_open: u64,
    /// Checks and peeks denied by [`FailMode::Closed`].
    pub failed_closed: u64,
    /// Calls without a verdict because the service was unreachable.
    pub unreachable: u64,
    /// Calls without a verdict within the deadline.
    pub deadline: u64,
    /// Calls answered with a 5xx or no verdict.
    pub server_error: u64,
}

impl Counters {
    pub(crate) fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count(&self, reason: FailureReason, mode: Option<FailMode>) {
        match reason {
            FailureReason::Unreachable => &self.unreachable,
            FailureReason::Deadline => &self.deadline,
            FailureReason::ServerError => &self.server_error,
        }
        .fetch_add(1, Ordering::Relaxed);
        match mode {
            Some(FailMode::Open) => self.failed_open.fetch_add(1, Ordering::Relaxed),
            Some(FailMode::Closed) => self.failed_closed.fetch_add(1, Ordering::Relaxed),
            None => 0,
        };
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            calls: self.calls.load(Ordering::Relaxed),
            failed_open: self.failed_open.load(Ordering::Relaxed),
            failed_closed: self.failed_closed.load(Ordering::Relaxed),
            unreachable: self.unreachable.load(Ordering::Relaxed),
            deadline: self.deadline.load(Ordering::Relaxed),
            server_error: self.server_error.load(Ordering::Relaxed),
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Call {
    Check,
    Peek,
    Report,
    Reserve,
}

impl Client {
    /// A builder for the server at `url` (e.g. `http://127.0.0.1:8080`).
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            deadline: Duration::from_millis(50),
            fail_mode: FailMode::Open,
            fail_closed_retry_after: Duration::from_secs(1),
            headers: HeaderMap::new(),
            pool_idle_timeout: Duration::from_secs(60),
        }
    }

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
        self.inner.stats.snapshot()
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
            Call::Check => &inner.check,
            Call::Peek => &inner.peek,
            Call::Report => &inner.report,
            Call::Reserve => &inner.reserve,
        };
        let (parts, bytes) = self.exchange(Method::POST, uri.clone(), Some(body), request.deadline).await?;
        render(parts.status.as_u16(), &parts.headers, &bytes)
    }

    /// One request with the deadline: the answer's head and body, or [`Error::Unavailable`].
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
        inner.stats.call();
        let mut builder = http::Request::builder().method(method).uri(uri);
        if let Some(headers) = builder.headers_mut() {
            headers.extend(inner.headers.iter().map(|(n, v)| (n.clone(), v.clone())));
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let http_request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| Error::InvalidRequest(e.to_string()))?;
        let exchange = async {
            let response = inner.http.request(http_request).await.map_err(|e| {
                let not_sent = e.is_connect();
                Error::Unavailable {
                    reason: FailureReason::Unreachable,
                    not_sent,
                    message: match e.source() {
                        Some(source) => format!("{e}: {source}"),
                        None => e.to_string(),
                    },
                    source: Some(Box::new(e)),
                }
            })?;
            let (parts, body) = response.into_parts();
            let bytes = body.collect().await.map_err(|e| Error::Unavailable {
                reason: FailureReason::Unreachable,
                not_sent: false,
                message: format!("the answer was cut: {e}"),
                source: Some(Box::new(e)),
            })?;
            Ok::<_, Error>((parts, bytes.to_bytes()))
        };
        match tokio::time::timeout(deadline, exchange).await {
            Ok(result) => result,
            Err(_) => Err(Error::Unavailable {
                reason: FailureReason::Deadline,
                not_sent: false,
                message: format!("no answer within {} ms", deadline.as_millis()),
                source: None,
            }),
        }
    }

    /// The URL of `POST /v1/commit`.
    pub(crate) fn commit_uri(&self) -> &Uri {
        &self.inner.commit
    }

    /// The URL of `POST /v1/release`.
    pub(crate) fn release_uri(&self) -> &Uri {
        &self.inner.release
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
