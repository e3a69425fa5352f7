//! Upstream HTTP/1.1 connections driven inline: each is hyper's [`client::conn::http1`]
//! connection, polled by the task of the request that uses it — while the request waits for the
//! response head ([`exchange`]), then from the response body ([`InlineBody`]) — never by a task of
//! its own, so that a request's bytes cross no channel between tasks on their way up or down.
//!
//! A connection whose response body ended whole, and that hyper says is ready for another request,
//! goes back to its upstream's [`Pool`]: a short list under a lock, newest last, at most
//! [`MAX_IDLE`] connections, each dropped once idle longer than [`IDLE_TIMEOUT`] (checked when the
//! list is touched). A connection that is not read to its end — the client went away, the meter cut
//! the stream, the `total` deadline passed, the upstream broke it — is closed, never pooled.
//!
//! An idle connection is polled by nobody: one the upstream closed meanwhile is found out when it
//! is taken (it is polled once then, and hyper reads the close), and skipped. A request that hyper
//! hands back unsent because its pooled connection closed before writing it (the race the check
//! cannot close) is sent again on another connection, as hyper-util's pooled client does with
//! `retry_canceled_requests`: it never reached the upstream. Once a byte of it was written, a
//! failure is the attempt's, and [`call`](super::call)'s retry rules decide.
//!
//! [`client::conn::http1`]: hyper::client::conn::http1

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri};
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a pooled connection may stay idle (hyper-util's pool had the same).
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// The most idle connections kept for one upstream.
pub(super) const MAX_IDLE: usize = 1024;

type Conn = Connection<TokioIo<TcpStream>, Body>;

/// A connection and its sender, boxed: hyper's connection is several hundred bytes, moved in and
/// out of the pool and along with the response body as a pointer.
struct Link {
    send: SendRequest<Body>,
    conn: Conn,
}

/// A connection with its sender: one exchange at a time.
pub(super) struct Lease {
    link: Box<Link>,
    pool: Arc<Pool>,
    /// Taken from the pool (rather than made for this request).
    pub(super) reused: bool,
}

impl Lease {
    /// Polls the connection once with `cx`: false once it is done (closed or failed).
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        Pin::new(&mut self.link.conn).poll(cx).is_pending()
    }

    /// Back to the pool when the connection is open and ready for another request; else closed.
    fn release(mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        if self.drive(&mut cx) && self.link.send.is_ready() {
            self.pool.put(Idle { link: self.link, since: Instant::now() });
        }
    }
}

/// An idle connection in a pool.
struct Idle {
    link: Box<Link>,
    since: Instant,
}

/// One upstream's idle connections: a list per worker thread (a connection is reused on the thread
/// whose reactor it is registered with), and one for every other thread.
pub(super) struct Pool {
    idle: Box<[Mutex<VecDeque<Idle>>]>,
    idle_timeout: Duration,
    max_idle: usize,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle: usize = self.idle.iter().map(|list| list.lock().len()).sum();
        f.debug_struct("Pool").field("idle", &idle).finish_non_exhaustive()
    }
}

impl Pool {
    pub(super) fn new(idle_timeout: Duration, max_idle: usize) -> Pool {
        let lists = floodgate_app::workers::Workers::get().map_or(0, |w| w.count()) + 1;
        Pool { idle: (0..lists).map(|_| Mutex::new(VecDeque::new())).collect(), idle_timeout, max_idle }
    }

    /// The calling thread's list.
    fn list(&self) -> &Mutex<VecDeque<Idle>> {
        let last = self.idle.len() - 1;
        &self.idle[floodgate_app::workers::current().map_or(last, |i| i.min(last))]
    }

    /// An idle connection that is still open at `now`, newest first; those idle too long, or
    /// closed by the upstream meanwhile, are dropped on the way.
    fn take(self: &Arc<Self>, now: Instant) -> Option<Lease> {
        loop {
            let idle = {
                let mut list = self.list().lock();
                let idle = list.pop_back()?;
                if now.saturating_duration_since(idle.since) >= self.idle_timeout {
                    // The newest is too old: so are all the others.
                    let stale = std::mem::take(&mut *list);
                    drop(list);
                    drop(stale);
                    return None;
                }
                idle
            };
            let mut lease = Lease { link: idle.link, pool: Arc::clone(self), reused: true };
            let mut cx = Context::from_waker(Waker::noop());
            if lease.drive(&mut cx) && lease.link.send.is_ready() {
                return Some(lease);
            }
        }
    }

    /// When the newest idle connection went idle (what [`Pool::take`] measures its idle time from).
    #[cfg(test)]
    fn newest_since(&self) -> Option<Instant> {
        self.list().lock().back().map(|idle| idle.since)
    }

    fn put(&self, idle: Idle) {
        let mut list = self.list().lock();
        let mut dropped = Vec::new();
        while list
            .front()
            .is_some_and(|old| idle.since.saturating_duration_since(old.since) >= self.idle_timeout)
        {
            dropped.extend(list.pop_front());
        }
        if list.len() >= self.max_idle {
            dropped.extend(list.pop_front());
        }
        list.push_back(idle);
        drop(list);
        drop(dropped);
    }

    /// How many idle connections the pool holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.idle.iter().map(|list| list.lock().len()).sum()
    }
}

/// How a route reaches one upstream over inline connections: the upstream's pool (shared by every
/// route to it, and kept across reloads), a connector with the route's `connect` timeout, and the
/// `Host` the upstream is sent.
#[derive(Clone)]
pub(super) struct Inline {
    pool: Arc<Pool>,
    connector: HttpConnector,
    /// `http://authority`, what the connector is given.
    base: Uri,
    host: HeaderValue,
}

impl std::fmt::Debug for Inline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inline").field("base", &self.base).field("pool", &self.pool).finish_non_exhaustive()
    }
}

/// Every upstream's pool, by authority. Held weakly: a pool lives as long as a route table's route
/// uses it (a reload finds it while the previous table is alive), and its idle connections close
/// with it once no route goes to its upstream.
#[derive(Debug, Default)]
pub(super) struct Pools {
    by_authority: Mutex<HashMap<String, Weak<Pool>>>,
}

impl Pools {
    /// How a route with `connect` reaches `upstream` inline; `None` when `upstream` has no authority.
    pub(super) fn inline(&self, upstream: &Uri, connect: Duration) -> Option<Inline> {
        let authority = upstream.authority()?;
        let host = match authority.port_u16() {
            Some(port) if port != 80 => format!("{}:{port}", authority.host()),
            _ => authority.host().to_owned(),
        };
        let host = HeaderValue::from_str(&host).ok()?;
        let base: Uri = format!("http://{authority}").parse().ok()?;
        let pool = {
            let mut pools = self.by_authority.lock();
            pools.retain(|_, pool| pool.strong_count() > 0);
            let entry = pools.entry(authority.as_str().to_ascii_lowercase()).or_default();
            match entry.upgrade() {
                Some(pool) => pool,
                None => {
                    let pool = Arc::new(Pool::new(IDLE_TIMEOUT, MAX_IDLE));
                    *entry = Arc::downgrade(&pool);
                    pool
                }
            }
        };
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect));
        connector.set_nodelay(true);
        connector.enforce_http(true);
        Some(Inline { pool, connector, base, host })
    }
}

/// Why no connection could be had.
#[derive(Debug)]
pub(super) enum ConnectFailed {
    /// The connector's error (refused, unreachable, its `connect` timeout).
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// hyper refused the connection (its handshake).
    Handshake(hyper::Error),
}

impl Inline {
    /// A pooled connection still open, if there is one.
    pub(super) fn pooled(&self) -> Option<Lease> {
        self.pool.take(Instant::now())
    }

    /// A new connection (within the connector's `connect` timeout).
    pub(super) async fn connect(&self) -> Result<Lease, ConnectFailed> {
        let io = tower::ServiceExt::oneshot(self.connector.clone(), self.base.clone())
            .await
            .map_err(|e| ConnectFailed::Connect(Box::new(e)))?;
        let (send, conn) = http1::Builder::new().handshake(io).await.map_err(ConnectFailed::Handshake)?;
        Ok(Lease { link: Box::new(Link { send, conn }), pool: Arc::clone(&self.pool), reused: false })
    }

    /// The request as an upstream connection sends it: origin-form, with the upstream's `Host`.
    pub(super) fn shape(&self, request: &mut Request<Body>) {
        if let Some(path) = request.uri().path_and_query().cloned() {
            *request.uri_mut() = Uri::from(path);
        }
        request.headers_mut().insert(http::header::HOST, self.host.clone());
    }
}

/// How an exchange ended before a response head came.
pub(super) enum Unanswered {
    /// hyper handed the request back unsent: the connection closed before writing it.
    Unsent(Box<Request<Body>>),
    /// The exchange failed after the request went out.
    Failed(hyper::Error),
}

/// Sends `request` on `lease` and waits for the response head, driving the connection meanwhile.
/// Cancel-safe: dropping it closes the connection (the lease goes with it).
pub(super) async fn exchange(
    mut lease: Lease,
    request: Request<Body>,
) -> Result<Response<InlineBody>, Unanswered> {
    let mut sending = std::pin::pin!(lease.link.send.try_send_request(request));
    let mut open = true;
    let answer = std::future::poll_fn(|cx| {
        if open {
            open = lease.drive(cx);
        }
        sending.as_mut().poll(cx)
    })
    .await;
    match answer {
        Ok(response) => {
            let lease = open.then_some(lease);
            Ok(response.map(|incoming| InlineBody { incoming, lease, ended: false }))
        }
        Err(mut e) => match e.take_message() {
            Some(request) => Err(Unanswered::Unsent(Box::new(request))),
            None => Err(Unanswered::Failed(e.into_error())),
        },
    }
}

/// A response body read from a connection driven inline: the connection is polled alongside the
/// body (it is what reads the socket), and goes back to its pool when the body ended whole.
pub(super) struct InlineBody {
    incoming: Incoming,
    /// The connection while it is open.
    lease: Option<Lease>,
    /// The body was read to its end.
    ended: bool,
}

impl http_body::Body for InlineBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(lease) = this.lease.as_mut()
            && !lease.drive(cx)
        {
            // Done: what it read is in the body's channel still.
            this.lease = None;
        }
        let frame = std::task::ready!(Pin::new(&mut this.incoming).poll_frame(cx));
        match &frame {
            None => this.ended = true,
            Some(Ok(_)) => this.ended = this.incoming.is_end_stream(),
            Some(Err(_)) => this.lease = None,
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

impl Drop for InlineBody {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take()
            && (self.ended || self.incoming.is_end_stream())
        {
            lease.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// An upstream answering every request on a connection with `200 ok`, counting its accepts.
    async fn upstream() -> (Uri, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepts = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepts);
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut seen = Vec::new();
                    loop {
                        let Ok(n) = tcp.read(&mut buf).await else { return };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if tcp.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (format!("http://{addr}").parse().unwrap(), accepts)
    }

    async fn get(inline: &Inline, lease: Lease) -> Bytes {
        let mut request = Request::new(Body::empty());
        *request.uri_mut() = "http://upstream/x".parse().unwrap();
        inline.shape(&mut request);
        let Ok(response) = exchange(lease, request).await else { panic!("no answer") };
        response.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn a_connection_read_to_its_end_is_pooled_and_reused() {
        let (uri, accepts) = upstream().await;
        let inline = Pools::default().inline(&uri, Duration::from_secs(5)).unwrap();
        assert!(inline.pooled().is_none());
        let lease = inline.connect().await.unwrap();
        assert_eq!(get(&inline, lease).await, "ok");
        assert_eq!(inline.pool.len(), 1);
        let lease = inline.pooled().expect("the connection, back in the pool");
        assert!(lease.reused);
        assert_eq!(get(&inline, lease).await, "ok");
        assert_eq!(inline.pool.len(), 1);
        assert_eq!(accepts.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_pool_is_shared_while_a_route_uses_it_and_goes_with_the_last() {
        let pools = Pools::default();
        let uri: Uri = "http://127.0.0.1:9/".parse().unwrap();
        let first = pools.inline(&uri, Duration::from_secs(1)).unwrap();
        let second =
            pools.inline(&"http://127.0.0.1:9/other".parse().unwrap(), Duration::from_secs(2)).unwrap();
        assert!(Arc::ptr_eq(&first.pool, &second.pool), "one pool per upstream");
        let weak = Arc::downgrade(&first.pool);
        drop((first, second));
        assert!(weak.upgrade().is_none(), "no route uses it: gone, with its idle connections");
        let again = pools.inline(&uri, Duration::from_secs(1)).unwrap();
        assert_eq!(again.pool.len(), 0);
    }

    #[tokio::test]
    async fn an_idle_connection_past_the_idle_timeout_is_not_used() {
        let (uri, _) = upstream().await;
        let inline = Pools::default().inline(&uri, Duration::from_secs(5)).unwrap();
        let lease = inline.connect().await.unwrap();
        assert_eq!(get(&inline, lease).await, "ok");
        assert_eq!(inline.pool.len(), 1);
        // Looked at within the idle timeout, it is there; at the timeout, gone (and dropped). The
        // times are the pool's own stamp plus offsets, so no clock is read here.
        let since = inline.pool.newest_since().expect("an idle connection");
        let lease =
            inline.pool.take(since + IDLE_TIMEOUT - Duration::from_secs(1)).expect("within the timeout");
        lease.release();
        assert_eq!(inline.pool.len(), 1);
        let since = inline.pool.newest_since().expect("idle again");
        let expired = inline.pool.take(since + IDLE_TIMEOUT);
        assert!(expired.is_none(), "idle for the whole timeout: not used");
        assert_eq!(inline.pool.len(), 0);
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_does_not_pool_its_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: Uri = format!("http://{}", listener.local_addr().unwrap()).parse().unwrap();
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = tcp.read(&mut buf).await;
            let _ = tcp.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nfirst").await;
            // The rest never comes; the gateway's side closes.
            let closed = matches!(tcp.read(&mut buf).await, Ok(0) | Err(_));
            let _ = closed_tx.send(closed);
        });
        let inline = Pools::default().inline(&uri, Duration::from_secs(5)).unwrap();
        let lease = inline.connect().await.unwrap();
        let mut request = Request::new(Body::empty());
        inline.shape(&mut request);
        let Ok(response) = exchange(lease, request).await else { panic!("no answer") };
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "first");
        drop(body);
        assert_eq!(inline.pool.len(), 0);
        assert!(closed_rx.await.unwrap(), "the upstream's connection is closed");
    }
}
