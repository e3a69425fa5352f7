//! [`ClientBuilder`]: the client's settings, checked when it is built.

use std::sync::Arc;
use std::time::Duration;

use floodgate::breaker::BreakerConfig;
use floodgate_core::{Clock, SystemClock};
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::breaker::{self, Breaker};
use crate::budget::{RetryBudget, RetryBudgetConfig};
use crate::client::{Client, Endpoints, Inner};
use crate::clock::SharedClock;
use crate::decision::FailMode;
use crate::error::Error;
use crate::stats::Counters;
use crate::tls::{Connector, Pem, TlsSettings};

/// Builds a [`Client`]: `Client::builder("http://127.0.0.1:8080").deadline(..).fail_mode(..).build()`.
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    url: String,
    deadline: Duration,
    fail_mode: FailMode,
    fail_closed_retry_after: Duration,
    headers: HeaderMap,
    pool_idle_timeout: Duration,
    breaker: Option<BreakerConfig>,
    retry_budget: Option<RetryBudgetConfig>,
    tls: TlsSettings,
    clock: SharedClock,
}

impl Client {
    /// A builder for the server at `url` (e.g. `http://127.0.0.1:8080`).
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url.into())
    }
}

impl ClientBuilder {
    pub(crate) fn new(url: String) -> ClientBuilder {
        ClientBuilder {
            url,
            deadline: Duration::from_millis(50),
            fail_mode: FailMode::Open,
            fail_closed_retry_after: Duration::from_secs(1),
            headers: HeaderMap::new(),
            pool_idle_timeout: Duration::from_secs(60),
            breaker: Some(BreakerConfig::default()),
            retry_budget: Some(RetryBudgetConfig::default()),
            tls: TlsSettings::default(),
            clock: SharedClock::new(SystemClock::new()),
        }
    }

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

    /// The circuit breaker's settings. It is on by default ([`BreakerConfig::default`]): open after
    /// 10 failures in a row (no answer, or a 5xx), or half the calls failed over 10 s once 20 were
    /// made; open for 2 s, during which calls are not sent and the fail mode decides at once; then
    /// one probe, whose success closes it and whose failure opens it again.
    pub fn breaker(mut self, config: BreakerConfig) -> ClientBuilder {
        self.breaker = Some(config);
        self
    }

    /// No circuit breaker: every call is sent, however the service fares.
    pub fn no_breaker(mut self) -> ClientBuilder {
        self.breaker = None;
        self
    }

    /// The retry budget of [`Client::retry`] and of the retries of commit and release. On by
    /// default ([`RetryBudgetConfig::default`]): retries at most 10 % of the calls of the last
    /// 10 s, plus 1 a second.
    pub fn retry_budget(mut self, config: RetryBudgetConfig) -> ClientBuilder {
        self.retry_budget = Some(config);
        self
    }

    /// No retry budget: retries are bounded by their policy's `attempts` only.
    pub fn no_retry_budget(mut self) -> ClientBuilder {
        self.retry_budget = None;
        self
    }

    /// The CA bundle (PEM, one or more certificates) that the server's certificate must chain to;
    /// needed by an `https://` URL. For a server with a publicly trusted certificate, the system's
    /// bundle (e.g. `Pem::file("/etc/ssl/certs/ca-certificates.crt")`).
    pub fn tls_ca(mut self, bundle: Pem) -> ClientBuilder {
        self.tls.ca = Some(bundle);
        self
    }

    /// The client certificate (PEM, then its chain) and its private key (PEM: PKCS#8, PKCS#1 or
    /// SEC1) presented to a server that asks for one: mutual TLS.
    pub fn tls_client_cert(mut self, cert: Pem, key: Pem) -> ClientBuilder {
        self.tls.identity = Some((cert, key));
        self
    }

    /// The clock of the breaker's open time and of the retry budget's window. Default the process
    /// clock; a [`ManualClock`](floodgate_core::ManualClock) moves them by hand in tests. Deadlines
    /// and backoffs are timers of the Tokio runtime.
    pub fn clock(mut self, clock: impl Clock) -> ClientBuilder {
        self.clock = SharedClock::new(clock);
        self
    }

    /// The client; [`Error::Config`] names the setting that cannot be used: the URL, the deadline,
    /// a breaker or budget setting, a TLS file that cannot be read or holds no usable certificate
    /// or key.
    pub fn build(self) -> Result<Client, Error> {
        let base = self.url.trim_end_matches('/');
        let uri: Uri = base.parse().map_err(|e| Error::Config {
            field: "url",
            reason: format!("{:?} is not a URL: {e}", self.url),
        })?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(Error::Config {
                    field: "url",
                    reason: format!("{:?} must be http://host:port or https://host:port", self.url),
                });
            }
        };
        if uri.authority().is_none() {
            return Err(Error::Config {
                field: "url",
                reason: format!("{:?} must be http://host:port or https://host:port", self.url),
            });
        }
        if self.deadline.is_zero() {
            return Err(Error::Config { field: "deadline", reason: "must be longer than 0".into() });
        }
        if let Some(config) = &self.breaker {
            breaker::validate(config)?;
        }
        if let Some(config) = &self.retry_budget {
            config.validate()?;
        }
        let (tls, identity) = if https {
            let (config, identity) = self.tls.client_config()?;
            (Some(config), Some(identity))
        } else if !self.tls.is_empty() {
            return Err(Error::Config {
                field: "url",
                reason: format!(
                    "TLS settings (tls_ca, tls_client_cert) need an https:// URL, not {:?}",
                    self.url
                ),
            });
        } else {
            (None, None)
        };
        let endpoint = |call: &str| -> Result<Uri, Error> {
            format!("{base}/v1/{call}")
                .parse()
                .map_err(|e| Error::Config { field: "url", reason: format!("{:?}: {e}", self.url) })
        };
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(self.pool_idle_timeout)
            .build(Connector::new(connector, tls));
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints: Endpoints {
                    check: endpoint("check")?,
                    peek: endpoint("peek")?,
                    report: endpoint("report")?,
                    reserve: endpoint("reserve")?,
                    commit: endpoint("commit")?,
                    release: endpoint("release")?,
                },
                base: base.to_owned(),
                deadline: self.deadline,
                fail_mode: self.fail_mode,
                fail_closed_retry_after: self.fail_closed_retry_after,
                headers: self.headers,
                http,
                identity,
                breaker: self.breaker.map(|config| Breaker::new(config, self.clock.clone())),
                budget: self.retry_budget.map(|config| RetryBudget::new(&config, self.clock.clone())),
                stats: Counters::default(),
            }),
        })
    }
}
