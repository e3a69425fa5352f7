//! The bench's HTTP/1.1 client: pooled keep-alive connections with `TCP_NODELAY`, each exchange
//! read whole within a timeout (so its connection goes back to the pool), and the pages a run
//! reads beside its load (`/readyz`, `/metrics`, a peer's counters).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The pooled HTTP/1.1 client of the HTTP targets and the processes' APIs.
pub(crate) type Client = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;

/// A new pooled client: keep-alive, `TCP_NODELAY`, idle connections kept 30 s.
pub(crate) fn pooled() -> Client {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

/// Why an exchange has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoAnswer {
    /// The connection was refused: the request was never sent.
    Connect,
    /// The connection failed once the request may have been sent.
    Transport,
    /// The answer's body could not be read.
    Body,
    /// No whole answer within the timeout.
    Timeout,
}

impl NoAnswer {
    /// The error kind reports count it as.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            NoAnswer::Connect => "connect",
            NoAnswer::Transport => "http_transport",
            NoAnswer::Body => "http_body",
            NoAnswer::Timeout => "timeout",
        }
    }
}

/// Sends `request` and reads the whole answer within `timeout`.
pub(crate) async fn exchange(
    client: &Client,
    request: http::Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<(http::StatusCode, Bytes), NoAnswer> {
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| if e.is_connect() { NoAnswer::Connect } else { NoAnswer::Transport })?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|_| NoAnswer::Body)?.to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, exchange).await.unwrap_or(Err(NoAnswer::Timeout))
}

/// `GET url` on `client`, within `timeout`.
pub(crate) async fn get_on(
    client: &Client,
    url: &str,
    timeout: Duration,
) -> Result<(http::StatusCode, Bytes), NoAnswer> {
    let request = http::Request::get(url).body(Full::new(Bytes::new())).map_err(|_| NoAnswer::Connect)?;
    exchange(client, request, timeout).await
}

/// `GET url` (loopback HTTP) on a client of its own: its status and whole body, or `None`
/// without an answer within `timeout`.
pub(crate) async fn get(url: &str, timeout: Duration) -> Option<(http::StatusCode, Bytes)> {
    get_on(&pooled(), url, timeout).await.ok()
}
