//! What a route's upstream is called with, and the request as the upstream sees it (hop-by-hop
//! headers dropped, `X-Forwarded-For`, `X-Forwarded-Proto` and `Forwarded` appended, verified
//! identity headers set). Two ways to an upstream:
//!
//! - **HTTP/1.1, inline** (every request but those below): a connection of the upstream's pool, or
//!   a new one, written and read by the request's own task ([`pool`](super::pool)) in the gateway's
//!   own HTTP/1.1 codec ([`h1`](super::h1)); its response body is [`UpstreamBody::Inline`], which
//!   reads the connection as it is polled and gives it back to the pool when read to its end.
//!   Chosen from measurement (`BENCHMARKS.md`, the gateway beside nginx): hyper-util's pooled
//!   client runs each connection as a task of its own, fed through a channel, so every request
//!   crossed tasks both ways; and hyper's own client connection, driven inline, still cost a
//!   request's head built as a second header map, a channel between its sender and its dispatcher,
//!   and a body channel.
//! - **hyper-util's pooled client** ([`Client`]): h2c upstreams (`http2: true`, prior knowledge,
//!   where one connection carries many requests at once and a connection task is what HTTP/2
//!   needs), `https` upstreams (TLS, HTTP/2 when ALPN agrees on it: [`tls_upstream`](super::tls_upstream)),
//!   and upgrades (a WebSocket handshake), whose connection is handed over once switched.
//!
//! The call itself — timeouts, the breaker, retries — is [`call`](super::call)'s, the same on both:
//!
//! - **Timeouts**, each a budget of its own: `connect` is the connector's (a new connection within
//!   `connect`); the response head must arrive within `first_byte` of the request going out on its
//!   connection — the moment a new connection is made, or the attempt's start on a pooled one (the
//!   inline path knows which it took; for the pooled client [`Timed`] tells them apart); the
//!   request's `total` deadline bounds every attempt, the backoffs and (in `body.rs`) the response
//!   body.
//! - **Retries**: only for idempotent methods (GET, HEAD, OPTIONS, PUT, DELETE, TRACE), only on a
//!   connection that could not be made (the request surely did not run) or a configured status,
//!   only when the request body was small enough to be kept whole (`retries.max_body`), never for
//!   a breaker's probe or an upgrade; each retry needs a place in the budget ([`Budget`]) and waits
//!   a backoff drawn uniformly below `min(max_backoff, backoff × 2^(n-1))` (full jitter). A request
//!   whose pooled connection failed before any byte of it was written goes out on another
//!   connection within the same attempt, whatever its method — it never reached the upstream, and
//!   the pooled client did the same.
//! - **Breaker**: every attempt asks it; a failure is a connection or timeout error or a 5xx.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use floodgate_config::gateway::Upstream;
use http::header::{CONNECTION, HOST, HeaderName, UPGRADE};
use http::uri::{PathAndQuery, Scheme};
use http::{HeaderMap, HeaderValue, Method, Request, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::time::Instant;
use tokio_rustls::rustls;

use super::h1::KEEP_ALIVE;
use super::pool::{Inline, InlineBody, Pools};
use super::tls_upstream::{Conn, client_config, handshake};

/// The client of one kind of upstream connection.
pub(super) type Client = hyper_util::client::legacy::Client<Timed, Body>;

tokio::task_local! {
    /// The attempt a connection is being made for, while its request is polled.
    static ATTEMPT: Arc<Attempt>;
}

/// What an attempt knows of its connection: whether one is being made for it, and when it was
/// made (so that `first_byte` counts from there, and not from the attempt's start).
#[derive(Debug, Default)]
pub(super) struct Attempt {
    connecting: AtomicBool,
    connected: Mutex<Option<Instant>>,
    changed: Notify,
}

impl Attempt {
    /// Runs `request` as this attempt: connections made while it is polled report to it.
    pub(super) fn scope<F: Future>(self: &Arc<Self>, request: F) -> impl Future<Output = F::Output> {
        ATTEMPT.scope(Arc::clone(self), request)
    }

    /// When the response head is due: `first_byte` after the connection was made; after `started`
    /// on a pooled connection; `None` while a connection is being made (its own `connect` timeout
    /// bounds that).
    pub(super) fn head_due(&self, started: Instant, first_byte: Duration) -> Option<Instant> {
        match *self.connected.lock() {
            Some(at) => Some(at + first_byte),
            None if self.connecting.load(Ordering::Acquire) => None,
            None => Some(started + first_byte),
        }
    }

    /// Resolves at the next change of [`Attempt::head_due`] (once enabled or polled).
    pub(super) fn changed(&self) -> Notified<'_> {
        self.changed.notified()
    }
}

/// The connector of every upstream client: hyper-util's, then on an `https` upstream the TLS
/// handshake ([`tls_upstream`](super::tls_upstream)), both within the `connect` timeout; telling
/// the attempt polling it when a connection for it starts and when it is made. A connection
/// hyper-util finishes in the background (its request took a pooled one meanwhile) reports to
/// nobody.
#[derive(Clone)]
pub(super) struct Timed {
    http: HttpConnector,
    /// The TLS of `https` upstreams; `None` on a client of `http` upstreams.
    tls: Option<Arc<rustls::ClientConfig>>,
    connect: Duration,
}

impl std::fmt::Debug for Timed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timed").field("tls", &self.tls.is_some()).field("connect", &self.connect).finish()
    }
}

/// Why a connection could not be made.
type ConnectError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for Timed {
    type Response = Conn;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, ConnectError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let attempt = ATTEMPT.try_with(Arc::clone).ok();
        if let Some(attempt) = &attempt {
            attempt.connecting.store(true, Ordering::Release);
            attempt.changed.notify_waiters();
        }
        let tls =
            (uri.scheme_str() == Some("https")).then(|| (self.tls.clone(), uri.host().map(str::to_owned)));
        let (connect, started) = (self.connect, Instant::now());
        let connecting = self.http.call(uri);
        Box::pin(async move {
            let connection: Result<Conn, ConnectError> = async {
                let tcp = connecting.await?;
                let Some((config, host)) = tls else { return Ok(Conn::Plain(tcp)) };
                let (Some(config), Some(host)) = (config, host) else {
                    return Err("an https upstream, but no TLS settings for it".into());
                };
                let left = connect.saturating_sub(started.elapsed());
                match tokio::time::timeout(left, handshake(config, &host, tcp.into_inner())).await {
                    Ok(Ok(tls)) => Ok(Conn::Tls(Box::new(TokioIo::new(tls)))),
                    Ok(Err(e)) => Err(format!("TLS with {host}: {e}").into()),
                    Err(_) => Err(format!("TLS with {host}: no handshake within the connect timeout").into()),
                }
            }
            .await;
            if let Some(attempt) = attempt {
                if connection.is_ok() {
                    *attempt.connected.lock() = Some(Instant::now());
                }
                attempt.changed.notify_waiters();
            }
            connection
        })
    }
}

/// What tells pooled clients apart: the connect timeout, HTTP/2, and the CA bundle of `https`
/// upstreams (its path and contents, so that a reload with a new bundle makes a new client).
type ClientKey = (Duration, bool, Option<(std::path::PathBuf, Vec<u8>)>);

/// One pooled client per connect timeout, protocol and CA bundle, shared by the routes (and kept
/// across reloads, with their idle connections), and every upstream's pool of inline connections.
#[derive(Debug, Default)]
pub(super) struct Clients {
    by_kind: Mutex<HashMap<ClientKey, Client>>,
    pools: Pools,
}

impl Clients {
    /// How a route with `connect` reaches `upstream` over inline HTTP/1.1 connections; `None` for
    /// an h2c upstream (`http2`) or an `https` one, which the pooled client serves.
    pub(super) fn inline(&self, upstream: &Upstream, connect: Duration) -> Option<Inline> {
        if upstream.http2 || upstream.tls.is_some() {
            return None;
        }
        self.pools.inline(&upstream.uri, connect)
    }

    /// The pooled client of `upstream` with `connect`.
    pub(super) fn get(&self, connect: Duration, upstream: &Upstream) -> Client {
        let tls = upstream.tls.as_ref();
        let key = (connect, upstream.http2, tls.map(|t| (t.ca.path().to_path_buf(), t.ca.bytes().to_vec())));
        self.by_kind
            .lock()
            .entry(key)
            .or_insert_with(|| {
                let mut connector = HttpConnector::new();
                connector.set_connect_timeout(Some(connect));
                connector.set_nodelay(true);
                connector.enforce_http(tls.is_none());
                let tls = tls.and_then(|t| match client_config(t, upstream.http2) {
                    Ok(config) => Some(config),
                    Err(error) => {
                        // The configuration checked the bundle at load: its requests fail, saying why.
                        tracing::error!(%error, "gateway: the CA bundle of an https upstream cannot be used");
                        None
                    }
                });
                let mut builder = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
                builder.pool_idle_timeout(Duration::from_secs(90)).pool_max_idle_per_host(1024);
                // h2c speaks HTTP/2 with prior knowledge; over TLS, ALPN decides per connection.
                if upstream.http2 && upstream.tls.is_none() {
                    builder.http2_only(true);
                }
                builder.build(Timed { http: connector, tls, connect })
            })
            .clone()
    }
}

/// An upstream's response body: from the pooled client's connection task, or read from a
/// connection driven inline.
pub(super) enum UpstreamBody {
    Shared(Incoming),
    Inline(InlineBody),
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let frame = match self.get_mut() {
            UpstreamBody::Shared(incoming) => std::task::ready!(Pin::new(incoming).poll_frame(cx))
                .map(|frame| frame.map_err(|e| Box::new(e) as Self::Error)),
            UpstreamBody::Inline(inline) => std::task::ready!(Pin::new(inline).poll_frame(cx))
                .map(|frame| frame.map_err(|e| Box::new(e) as Self::Error)),
        };
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Shared(incoming) => incoming.is_end_stream(),
            UpstreamBody::Inline(inline) => inline.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            UpstreamBody::Shared(incoming) => incoming.size_hint(),
            UpstreamBody::Inline(inline) => inline.size_hint(),
        }
    }
}

/// Why an upstream call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// The breaker is open: no call was made.
    BreakerOpen,
    /// The connection could not be made in `connect`.
    ConnectTimeout,
    /// The connection was refused or failed.
    Connect,
    /// No response head within `first_byte` of the request going out on its connection.
    FirstByteTimeout,
    /// The request's `total` deadline passed.
    TotalTimeout,
    /// The upstream's answer could not be read.
    Broken,
}

/// Headers that concern one connection, never forwarded (RFC 9110 §7.6.1), besides those the
/// `Connection` header names.
const HOPS: usize = 8;
const HOP_BY_HOP: [HeaderName; HOPS] = [
    CONNECTION,
    KEEP_ALIVE,
    HeaderName::from_static("proxy-connection"),
    http::header::PROXY_AUTHENTICATE,
    http::header::PROXY_AUTHORIZATION,
    http::header::TE,
    http::header::TRAILER,
    http::header::TRANSFER_ENCODING,
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Removes the hop-by-hop headers, and those `Connection` names; keeps `Upgrade` (and
/// `Connection: upgrade`) when `upgrade`.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    // One pass over the few names present tells which hop-by-hop headers the message has (most
    // have none, or only `Connection`); only those are removed, where removing each of the nine
    // by name would hash every one.
    let mut present = Present::default();
    for name in headers.keys() {
        present.see(name, upgrade);
    }
    if !present.is_empty() {
        remove_hop_by_hop(headers, present);
    }
    if upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// Which of [`HOP_BY_HOP`] (bit `i` for entry `i`) and `Upgrade` (the bit after them) a message
/// has, among those to remove.
#[derive(Debug, Default, Clone, Copy)]
struct Present(u16);

impl Present {
    /// `Connection`'s, the first of [`HOP_BY_HOP`].
    const CONNECTION_BIT: u16 = 1;
    const UPGRADE_BIT: u16 = 1 << HOPS;

    fn see(&mut self, name: &HeaderName, upgrade: bool) {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            self.0 |= 1 << i;
        } else if !upgrade && name == UPGRADE {
            self.0 |= Self::UPGRADE_BIT;
        }
    }

    fn is_empty(self) -> bool {
        self.0 == 0
    }

    fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }
}

/// [`strip_hop_by_hop`]'s removals: the `present` ones, and the headers `Connection` names.
fn remove_hop_by_hop(headers: &mut HeaderMap, present: Present) {
    if present.has(Present::CONNECTION_BIT) {
        // The names that are hop-by-hop themselves (`Connection: keep-alive`, the usual value) are
        // removed below by their bits, and `Upgrade` is either kept or removed by its own: only
        // the other names are made and collected (none, most often: no allocation).
        let named: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|name| {
                !name.eq_ignore_ascii_case(UPGRADE.as_str())
                    && !HOP_BY_HOP.iter().any(|hop| name.eq_ignore_ascii_case(hop.as_str()))
            })
            .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(&name);
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present.has(1 << i) {
            headers.remove(name);
        }
    }
    if present.has(Present::UPGRADE_BIT) {
        headers.remove(UPGRADE);
    }
}

/// Whether a request asks to switch protocols (a WebSocket handshake, say).
pub(super) fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(UPGRADE)
        && headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
}

/// The request headers as the upstream sees them. `X-Forwarded-For` and `Forwarded` are written
/// into one buffer that both values share (one allocation for the two), the peer's address
/// written into it twice rather than formatted once on its own.
pub(super) fn forward_headers(
    headers: &mut HeaderMap,
    peer: SocketAddr,
    upgrade: bool,
    identity_headers: &[(HeaderName, Option<String>)],
) {
    let original_host = headers.remove(HOST);
    strip_hop_by_hop(headers, upgrade);
    let ip = peer.ip().to_canonical();
    let mut buf = bytes::BytesMut::with_capacity(96);
    // Each forwarding header is looked up once (an entry), not once to read and again to write.
    let xff = headers.entry(X_FORWARDED_FOR);
    if let http::header::Entry::Occupied(existing) = &xff
        && let Ok(existing) = existing.get().to_str()
    {
        buf.extend_from_slice(existing.as_bytes());
        buf.extend_from_slice(b", ");
    }
    floodgate_tower::push_ip(&mut buf, ip);
    let xff_end = buf.len();
    // RFC 7239: an IPv6 node is quoted and bracketed.
    let (open, close): (&[u8], &[u8]) = match ip {
        std::net::IpAddr::V4(_) => (b"for=", b";proto=http"),
        std::net::IpAddr::V6(_) => (b"for=\"[", b"]\";proto=http"),
    };
    buf.extend_from_slice(open);
    floodgate_tower::push_ip(&mut buf, ip);
    buf.extend_from_slice(close);
    let mut values = buf.freeze();
    let forwarded = values.split_off(xff_end);
    if let Ok(value) = HeaderValue::from_maybe_shared(values) {
        match xff {
            http::header::Entry::Occupied(mut existing) => {
                existing.insert(value);
            }
            http::header::Entry::Vacant(vacant) => {
                vacant.insert(value);
            }
        }
    }
    headers.entry(X_FORWARDED_PROTO).or_insert(HeaderValue::from_static("http"));
    if let Some(host) = original_host {
        headers.entry(X_FORWARDED_HOST).or_insert(host);
    }
    if let Ok(value) = HeaderValue::from_maybe_shared(forwarded) {
        headers.append(http::header::FORWARDED, value);
    }
    for (header, value) in identity_headers {
        headers.remove(header);
        if let Some(value) = value.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(header.clone(), value);
        }
    }
}

/// The upstream URI of a request for `path_and_query` on a route whose base is `base`: the base's
/// scheme and authority as they are (shared, not parsed again), and the request's path after the
/// base's path, which is parsed only when there is a base path to join it to.
pub(super) fn target(base: &Uri, path_and_query: &PathAndQuery) -> Option<Uri> {
    let prefix = base.path().trim_end_matches('/');
    let path_and_query = if prefix.is_empty() {
        path_and_query.clone()
    } else {
        let mut joined = String::with_capacity(prefix.len() + path_and_query.as_str().len());
        joined.push_str(prefix);
        joined.push_str(path_and_query.as_str());
        PathAndQuery::from_maybe_shared(Bytes::from(joined)).ok()?
    };
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(base.scheme().cloned().unwrap_or(Scheme::HTTP));
    parts.authority = Some(base.authority()?.clone());
    parts.path_and_query = Some(path_and_query);
    Uri::from_parts(parts).ok()
}

/// A request body: kept whole (replayable), or streamed once.
pub(super) enum Outgoing {
    Kept(Bytes),
    Streamed(Option<Body>),
}

/// A request ready to go upstream, possibly several times.
pub(super) struct Prepared {
    pub(super) method: Method,
    pub(super) uri: Uri,
    pub(super) headers: HeaderMap,
    pub(super) body: Outgoing,
    /// An upgrade handshake: sent once, never retried.
    pub(super) upgrade: bool,
}

impl Prepared {
    /// The request of one attempt; `last`: no other attempt follows, so the headers are moved
    /// rather than copied.
    pub(super) fn build(&mut self, last: bool) -> Option<Request<Body>> {
        let body = match &mut self.body {
            Outgoing::Kept(bytes) => Body::from(bytes.clone()),
            Outgoing::Streamed(body) => body.take()?,
        };
        let mut request = Request::new(body);
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = if last { std::mem::take(&mut self.headers) } else { self.headers.clone() };
        Some(request)
    }
}

/// Whether `method` may be sent twice with the same effect (RFC 9110 §9.2.2).
pub(super) fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v))).collect()
    }

    fn names(headers: &HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn the_forwarding_headers_name_the_client_for_each_address_family() {
        let mut first = headers(&[("host", "app.example")]);
        forward_headers(&mut first, "10.1.2.3:5000".parse().unwrap(), false, &[]);
        assert_eq!(first["x-forwarded-for"], "10.1.2.3");
        assert_eq!(first["forwarded"], "for=10.1.2.3;proto=http");
        assert_eq!(first["x-forwarded-host"], "app.example");
        assert_eq!(first["x-forwarded-proto"], "http");

        let mut behind = headers(&[("x-forwarded-for", "203.0.113.9")]);
        forward_headers(&mut behind, "[2001:db8::1]:5000".parse().unwrap(), false, &[]);
        assert_eq!(behind["x-forwarded-for"], "203.0.113.9, 2001:db8::1");
        assert_eq!(behind["forwarded"], "for=\"[2001:db8::1]\";proto=http");

        // An IPv4 client on a dual-stack socket is named by its IPv4 address.
        let mut mapped = HeaderMap::new();
        forward_headers(&mut mapped, "[::ffff:192.0.2.1]:5000".parse().unwrap(), false, &[]);
        assert_eq!(mapped["x-forwarded-for"], "192.0.2.1");
        assert_eq!(mapped["forwarded"], "for=192.0.2.1;proto=http");
    }

    #[test]
    fn an_upstream_target_joins_the_base_path_and_the_request() {
        let base: Uri = "http://api.internal:8080/v2/".parse().unwrap();
        let path = |p: &'static str| PathAndQuery::from_static(p);
        assert_eq!(target(&base, &path("/users?id=7")).unwrap(), "http://api.internal:8080/v2/users?id=7");
        let root: Uri = "https://api.internal".parse().unwrap();
        assert_eq!(target(&root, &path("/")).unwrap(), "https://api.internal/");
        let slash: Uri = "http://api.internal:8080/".parse().unwrap();
        assert_eq!(target(&slash, &path("/a/b?c=d&e")).unwrap(), "http://api.internal:8080/a/b?c=d&e");
        let deep: Uri = "http://[::1]:9000/v1/chat".parse().unwrap();
        let joined = target(&deep, &path("/completions?x=%20")).unwrap();
        assert_eq!(joined, "http://[::1]:9000/v1/chat/completions?x=%20");
        assert_eq!((joined.path(), joined.query()), ("/v1/chat/completions", Some("x=%20")));
    }

    #[test]
    fn a_message_without_hop_by_hop_headers_keeps_all_of_them() {
        let mut plain = headers(&[("host", "a"), ("content-length", "2"), ("x-id", "7")]);
        strip_hop_by_hop(&mut plain, false);
        assert_eq!(names(&plain), ["content-length", "host", "x-id"]);
        strip_hop_by_hop(&mut plain, true);
        assert_eq!(plain["connection"], "upgrade", "an upgrade says so");
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed() {
        let mut message = headers(&[
            ("host", "a"),
            ("connection", "close, x-trace"),
            ("x-trace", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("x-id", "7"),
        ]);
        strip_hop_by_hop(&mut message, false);
        assert_eq!(names(&message), ["host", "x-id"]);

        let mut upgrade =
            headers(&[("connection", "upgrade, x-trace"), ("x-trace", "1"), ("upgrade", "websocket")]);
        strip_hop_by_hop(&mut upgrade, true);
        assert_eq!(names(&upgrade), ["connection", "upgrade"]);
        assert_eq!(upgrade["connection"], "upgrade");

        // `Upgrade` alone, outside an upgrade, is removed too.
        let mut stray = headers(&[("upgrade", "h2c"), ("x-id", "7")]);
        strip_hop_by_hop(&mut stray, false);
        assert_eq!(names(&stray), ["x-id"]);

        // The usual upstream answer: `Connection: keep-alive` alone goes, with what it names.
        let mut answer = headers(&[
            ("connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("content-length", "2"),
            ("proxy-authenticate", "Basic"),
        ]);
        strip_hop_by_hop(&mut answer, false);
        assert_eq!(names(&answer), ["content-length"]);

        // Names in any case, hop-by-hop ones among them, over two `Connection` headers.
        let mut mixed = headers(&[
            ("connection", "Keep-Alive, X-Trace"),
            ("connection", "TE,  x-session ,Upgrade"),
            ("x-trace", "1"),
            ("x-session", "s"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("x-id", "7"),
        ]);
        strip_hop_by_hop(&mut mixed, false);
        assert_eq!(names(&mixed), ["x-id"]);
    }
}
