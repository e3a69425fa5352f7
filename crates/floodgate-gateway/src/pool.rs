//! Upstream HTTP/1.1 connections driven inline: each a TCP stream that the task of the request
//! using it writes and reads itself — the request's head and body, then the response's head
//! ([`exchange`]), then its body ([`InlineBody`]) — with no task of its own and no channel between
//! tasks, and with the request head written straight from the request's parts ([`h1`]).
//!
//! A connection whose response body ended whole, with nothing after it, and whose response says it
//! stays open, goes back to its upstream's [`Pool`]: a short list under a lock, newest last, at
//! most [`MAX_IDLE`] connections, each dropped once idle longer than [`IDLE_TIMEOUT`] (checked when
//! the list is touched). A connection that is not read to its end — the client went away, the
//! meter cut the stream, the `total` deadline passed, the upstream broke it — is closed, never
//! pooled; so is one whose request body was not sent whole (the upstream answered first).
//!
//! An idle connection is watched by nobody: one the upstream closed meanwhile is found out when it
//! is taken (a read that would not wait says so), and skipped. A request whose write fails before
//! any byte of it went out on a pooled connection (the race that check cannot close) is sent again
//! on another connection, as hyper-util's pooled client does with `retry_canceled_requests`: it
//! never reached the upstream. Once a byte of it was written, a failure is the attempt's, and
//! [`call`](super::call)'s retry rules decide.

use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Body;
use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Response, Uri};
use http_body::{Body as _, Frame, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::h1::{self, Decoded, Decoder, H1Error, RequestFraming};

/// How long a pooled connection may stay idle (hyper-util's pool had the same).
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// The most idle connections kept for one upstream.
pub(super) const MAX_IDLE: usize = 1024;
/// The read buffer's spare room before a read (it grows by [`READ_CHUNK`] when it has less).
const MIN_READ_ROOM: usize = 1024;
const READ_CHUNK: usize = 8 * 1024;

/// A connection: its stream, what was read of it and not yet used, and the buffer request heads are
/// written into (kept, so that its allocation serves the next request too).
struct Link {
    io: TcpStream,
    read: BytesMut,
    head: BytesMut,
}

impl Link {
    /// Reads what the stream has into `read`: the count (0 at the end of the stream). A read that
    /// fills less than the room it had tells the reactor the socket is drained, so that
    /// [`Link::idle_and_open`] then needs no system call to see it still open.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        if self.read.capacity() - self.read.len() < MIN_READ_ROOM {
            self.read.reserve(READ_CHUNK);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.read)
    }

    /// Writes `out` whole, counting what went into `sent`.
    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Outbox,
        sent: &mut u64,
    ) -> Poll<std::io::Result<()>> {
        while !out.is_empty() {
            let mut slices = [IoSlice::new(&[]); 3];
            let count = out.slices(&mut slices);
            match self.io.try_write_vectored(&slices[..count]) {
                Ok(0) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    out.advance(n);
                    *sent += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => ready!(self.io.poll_write_ready(cx))?,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Open, with nothing unread: a read that would not wait finds no end of stream and no bytes.
    fn idle_and_open(&mut self) -> bool {
        self.read.is_empty()
            && matches!(self.io.try_read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// Bytes on their way to the stream: up to three pieces (a head and a body; a chunk's size line,
/// data and CRLF), written with one vectored write where the stream takes them.
#[derive(Default)]
struct Outbox {
    parts: [Bytes; 3],
    first: usize,
}

impl Outbox {
    fn is_empty(&self) -> bool {
        self.parts[self.first..].iter().all(Bytes::is_empty)
    }

    fn set(&mut self, parts: [Bytes; 3]) {
        self.parts = parts;
        self.first = 0;
    }

    fn slices<'a>(&'a self, slices: &mut [IoSlice<'a>; 3]) -> usize {
        let mut count = 0;
        for part in self.parts[self.first..].iter().filter(|p| !p.is_empty()) {
            slices[count] = IoSlice::new(part);
            count += 1;
        }
        count
    }

    fn advance(&mut self, mut n: usize) {
        while n > 0 && self.first < self.parts.len() {
            let part = &mut self.parts[self.first];
            let take = n.min(part.len());
            part.advance(take);
            n -= take;
            if part.is_empty() {
                self.first += 1;
            }
        }
    }
}

/// A connection, boxed (moved in and out of the pool and along with the response body as a
/// pointer), with the pool it goes back to.
pub(super) struct Lease {
    link: Box<Link>,
    pool: Arc<Pool>,
    /// Taken from the pool (rather than made for this request).
    pub(super) reused: bool,
}

impl Lease {
    /// Back to the pool when nothing is left unread on it and it is still open; else closed.
    fn release(mut self) {
        if self.link.idle_and_open() {
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
            let mut link = idle.link;
            if link.idle_and_open() {
                return Some(Lease { link, pool: Arc::clone(self), reused: true });
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

/// Why no connection could be had: the connector's error (refused, unreachable, its `connect`
/// timeout).
#[derive(Debug)]
pub(super) struct ConnectFailed(pub(super) Box<dyn std::error::Error + Send + Sync>);

impl Inline {
    /// A pooled connection still open, if there is one.
    pub(super) fn pooled(&self) -> Option<Lease> {
        self.pool.take(Instant::now())
    }

    /// A new connection (within the connector's `connect` timeout).
    pub(super) async fn connect(&self) -> Result<Lease, ConnectFailed> {
        let io = tower::ServiceExt::oneshot(self.connector.clone(), self.base.clone())
            .await
            .map_err(|e| ConnectFailed(Box::new(e)))?;
        let link = Link { io: io.into_inner(), read: BytesMut::new(), head: BytesMut::new() };
        Ok(Lease { link: Box::new(link), pool: Arc::clone(&self.pool), reused: false })
    }

    /// The `Host` the upstream is sent.
    pub(super) fn host(&self) -> &HeaderValue {
        &self.host
    }
}

/// A request as an inline connection sends it: its head's parts, borrowed (written straight into
/// the connection's buffer, so a retry sends them again without a copy).
#[derive(Clone, Copy)]
pub(super) struct Sending<'a> {
    pub(super) method: &'a Method,
    pub(super) path_and_query: &'a str,
    pub(super) host: &'a HeaderValue,
    pub(super) headers: &'a HeaderMap,
}

/// A request's body.
pub(super) enum Payload {
    Empty,
    /// Whole, and sent with the head in one write where the stream takes both.
    Whole(Bytes),
    /// Streamed as it comes: `Content-Length` when the length is known, else chunked.
    Stream {
        body: Body,
        length: Option<u64>,
    },
}

/// How an exchange ended before a response head came.
pub(super) enum Unanswered {
    /// The connection failed before any byte of the request was written: the body, to send again.
    Unsent(Payload),
    /// The exchange failed once the request had started going out.
    Failed(H1Error),
}

/// What is left to send of a request: the outbox, and the rest of a streamed body.
struct Upload {
    out: Outbox,
    stream: Option<(Body, Option<u64>)>,
    /// Body bytes sent (checked against a `Content-Length`).
    body_sent: u64,
    /// Bytes written to the stream in all.
    sent: u64,
    /// The chunked body's last chunk is queued.
    ending: bool,
    done: bool,
}

impl Upload {
    /// Sends what can be sent now: `Ready(Ok)` once the request is written whole.
    fn poll(&mut self, link: &mut Link, cx: &mut Context<'_>) -> Poll<Result<(), H1Error>> {
        while !self.done {
            if let Err(e) = ready!(link.poll_send(cx, &mut self.out, &mut self.sent)) {
                return Poll::Ready(Err(H1Error::Io(e)));
            }
            let Some((body, length)) = self.stream.as_mut() else {
                self.done = true;
                break;
            };
            if self.ending {
                self.done = true;
                break;
            }
            match ready!(Pin::new(body).poll_frame(cx)) {
                None => match *length {
                    Some(n) if n != self.body_sent => return Poll::Ready(Err(H1Error::RequestBodyLength)),
                    Some(_) => self.done = true,
                    None => {
                        self.out.set([Bytes::from_static(b"0\r\n\r\n"), Bytes::new(), Bytes::new()]);
                        self.ending = true;
                    }
                },
                Some(Err(e)) => return Poll::Ready(Err(H1Error::RequestBody(e.to_string()))),
                Some(Ok(frame)) => {
                    // Trailers of the client's body are not passed on.
                    let Ok(data) = frame.into_data() else { continue };
                    if data.is_empty() {
                        continue;
                    }
                    self.body_sent += data.len() as u64;
                    match *length {
                        Some(n) if self.body_sent > n => return Poll::Ready(Err(H1Error::RequestBodyLength)),
                        Some(_) => self.out.set([data, Bytes::new(), Bytes::new()]),
                        None => self.out.set([h1::chunk_line(data.len()), data, Bytes::from_static(b"\r\n")]),
                    }
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Sends `request` with `payload` on `lease` and waits for the response head; an answer that comes
/// while a streamed body is still going out is taken, and the body goes on being sent from the
/// response body's polls. Cancel-safe: dropping it closes the connection (the lease goes with it).
pub(super) async fn exchange(
    mut lease: Lease,
    request: Sending<'_>,
    payload: Payload,
) -> Result<Response<InlineBody>, Unanswered> {
    let framing = match &payload {
        Payload::Empty => RequestFraming::None,
        Payload::Whole(bytes) => RequestFraming::Length(bytes.len() as u64),
        Payload::Stream { length: Some(n), .. } => RequestFraming::Length(*n),
        Payload::Stream { length: None, .. } => RequestFraming::Chunked,
    };
    let link = &mut *lease.link;
    link.head.clear();
    h1::write_head(
        &mut link.head,
        request.method,
        request.path_and_query,
        request.host,
        request.headers,
        framing,
    );
    let head = link.head.split().freeze();
    let (whole, stream) = match payload {
        Payload::Empty => (Bytes::new(), None),
        Payload::Whole(bytes) => (bytes, None),
        Payload::Stream { body, length } => (Bytes::new(), Some((body, length))),
    };
    let mut upload =
        Upload { out: Outbox::default(), stream, body_sent: 0, sent: 0, ending: false, done: false };
    upload.out.set([head, whole.clone(), Bytes::new()]);
    let answer = std::future::poll_fn(|cx| {
        let link = &mut *lease.link;
        if !upload.done
            && let Poll::Ready(Err(e)) = upload.poll(link, cx)
        {
            return Poll::Ready(Err(e));
        }
        loop {
            // Nothing read yet: nothing to parse.
            if !link.read.is_empty()
                && let Some(head) = h1::parse_head(&mut link.read, request.method)?
            {
                return Poll::Ready(Ok(head));
            }
            match ready!(link.poll_fill(cx)) {
                Ok(0) => return Poll::Ready(Err(H1Error::ClosedBeforeHead)),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Err(H1Error::Io(e))),
            }
        }
    })
    .await;
    match answer {
        Ok(head) => {
            let upload = (!upload.done).then(|| Box::new(upload));
            let body = InlineBody::new(lease, head.decoder, head.keep_alive, upload);
            Ok(head.response.map(|()| body))
        }
        Err(H1Error::Io(_)) if upload.sent == 0 => Err(Unanswered::Unsent(match upload.stream.take() {
            Some((body, length)) => Payload::Stream { body, length },
            None if whole.is_empty() => Payload::Empty,
            None => Payload::Whole(whole),
        })),
        Err(e) => Err(Unanswered::Failed(e)),
    }
}

/// A response body read from a connection driven inline, which goes back to its pool when the body
/// ended whole (and the request was sent whole).
pub(super) struct InlineBody {
    /// The connection while the body is being read.
    lease: Option<Lease>,
    decoder: Decoder,
    /// The response lets the connection carry another request.
    keep_alive: bool,
    /// The rest of a streamed request body, sent as the response is read.
    upload: Option<Box<Upload>>,
}

impl InlineBody {
    fn new(lease: Lease, decoder: Decoder, keep_alive: bool, upload: Option<Box<Upload>>) -> InlineBody {
        let mut body = InlineBody { lease: Some(lease), decoder, keep_alive, upload };
        if body.decoder.is_done() {
            body.finish();
        }
        body
    }

    /// The body ended whole: the connection goes back to its pool if it can carry another request.
    fn finish(&mut self) {
        if let Some(lease) = self.lease.take()
            && self.keep_alive
            && self.upload.is_none()
        {
            lease.release();
        }
    }

    fn broke(&mut self, error: H1Error) -> Poll<Option<Result<Frame<Bytes>, H1Error>>> {
        self.lease = None;
        self.upload = None;
        Poll::Ready(Some(Err(error)))
    }
}

impl http_body::Body for InlineBody {
    type Data = Bytes;
    type Error = H1Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Some(lease) = this.lease.as_mut() else { return Poll::Ready(None) };
        if let Some(upload) = this.upload.as_mut() {
            match upload.poll(&mut lease.link, cx) {
                Poll::Ready(Ok(())) => this.upload = None,
                Poll::Ready(Err(e)) => return this.broke(e),
                Poll::Pending => {}
            }
        }
        loop {
            let Some(lease) = this.lease.as_mut() else { return Poll::Ready(None) };
            match this.decoder.decode(&mut lease.link.read) {
                Err(e) => return this.broke(e),
                Ok(Decoded::Data(data)) => {
                    if this.decoder.is_done() {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(Decoded::Trailers(trailers)) => return Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
                Ok(Decoded::End) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Decoded::More) => match ready!(lease.link.poll_fill(cx)) {
                    Ok(0) => {
                        if let Err(e) = this.decoder.closed() {
                            return this.broke(e);
                        }
                        // Framed by the close: over, and the connection with it.
                        this.keep_alive = false;
                    }
                    Ok(_) => {}
                    Err(e) => return this.broke(H1Error::Io(e)),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoder.exact_left() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
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

    fn sending<'a>(inline: &'a Inline, headers: &'a HeaderMap) -> Sending<'a> {
        Sending { method: &Method::GET, path_and_query: "/x", host: inline.host(), headers }
    }

    async fn get(inline: &Inline, lease: Lease) -> Bytes {
        let headers = HeaderMap::new();
        let Ok(response) = exchange(lease, sending(inline, &headers), Payload::Empty).await else {
            panic!("no answer")
        };
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
        let headers = HeaderMap::new();
        let Ok(response) = exchange(lease, sending(&inline, &headers), Payload::Empty).await else {
            panic!("no answer")
        };
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "first");
        drop(body);
        assert_eq!(inline.pool.len(), 0);
        assert!(closed_rx.await.unwrap(), "the upstream's connection is closed");
    }

    /// A request body of the given frames; after them, it ends, or (`then_wait`) never does.
    struct Frames {
        frames: std::collections::VecDeque<&'static str>,
        then_wait: bool,
    }

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            match self.frames.pop_front() {
                Some(frame) => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(frame.as_bytes()))))),
                None if self.then_wait => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
    }

    fn frames(frames: &[&'static str], then_wait: bool) -> Body {
        Body::new(Frames { frames: frames.iter().copied().collect(), then_wait })
    }

    /// An upstream for one connection: reads until `until` holds for what it read, sends `reply`,
    /// and reports what it read and whether the gateway then closed the connection.
    async fn one_exchange(
        until: fn(&[u8]) -> bool,
        reply: &'static [u8],
        close_after: bool,
    ) -> (Uri, tokio::sync::oneshot::Receiver<(Vec<u8>, bool)>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: Uri = format!("http://{}", listener.local_addr().unwrap()).parse().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = vec![0u8; 4096];
            while !until(&seen) {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            tcp.write_all(reply).await.unwrap();
            if close_after {
                drop(tcp);
                let _ = tx.send((seen, false));
                return;
            }
            // Anything more, or the gateway's close.
            let closed = loop {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => break true,
                    Ok(_) => {}
                }
            };
            let _ = tx.send((seen, closed));
        });
        (uri, rx)
    }

    fn inline_to(uri: &Uri) -> Inline {
        Pools::default().inline(uri, Duration::from_secs(5)).unwrap()
    }

    /// Sends `method /x` with `payload` on a new connection of `inline`: the answer.
    async fn send(inline: &Inline, method: &Method, payload: Payload) -> Response<InlineBody> {
        let lease = inline.connect().await.unwrap();
        let headers = HeaderMap::new();
        let request = Sending { method, ..sending(inline, &headers) };
        match exchange(lease, request, payload).await {
            Ok(response) => response,
            Err(_) => panic!("no answer"),
        }
    }

    #[tokio::test]
    async fn a_streamed_body_of_unknown_length_goes_out_chunked() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        let (uri, seen) = one_exchange(|s| s.ends_with(b"0\r\n\r\n"), ok, false).await;
        let inline = inline_to(&uri);
        let body = frames(&["hello", "", " world!"], false);
        let response = send(&inline, &Method::POST, Payload::Stream { body, length: None }).await;
        assert_eq!(response.status(), 200);
        drop(response);
        let host = inline.host().to_str().unwrap().to_owned();
        // The connection, pooled, closes with the pool.
        drop(inline);
        let (seen, _) = seen.await.unwrap();
        let expected = format!(
            "POST /x HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n world!\r\n0\r\n\r\n"
        );
        assert_eq!(String::from_utf8(seen).unwrap(), expected);
    }

    #[tokio::test]
    async fn a_streamed_body_of_known_length_goes_out_with_it_and_its_connection_is_pooled() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (uri, seen) = one_exchange(|s| s.ends_with(b"hello world!"), ok, false).await;
        let inline = inline_to(&uri);
        let body = frames(&["hello", " world!"], false);
        let response = send(&inline, &Method::PUT, Payload::Stream { body, length: Some(12) }).await;
        assert_eq!(response.into_body().collect().await.unwrap().to_bytes(), "ok");
        assert_eq!(inline.pool.len(), 1, "sent whole and read whole: pooled");
        drop(inline);
        let (seen, closed) = seen.await.unwrap();
        let text = String::from_utf8(seen).unwrap();
        assert!(text.contains("\r\ncontent-length: 12\r\n\r\nhello world!"), "{text}");
        assert!(closed, "the pool closed it once no route used it");
    }

    #[tokio::test]
    async fn an_answer_before_the_body_is_sent_is_taken_and_its_connection_closed() {
        let too_large = b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 0\r\n\r\n";
        let (uri, seen) = one_exchange(|s| s.windows(4).any(|w| w == b"\r\n\r\n"), too_large, false).await;
        let inline = inline_to(&uri);
        // The body's first part goes, then it never ends.
        let body = frames(&["part"], true);
        let response = send(&inline, &Method::POST, Payload::Stream { body, length: Some(100) }).await;
        assert_eq!(response.status(), 413);
        assert!(response.into_body().collect().await.unwrap().to_bytes().is_empty());
        assert_eq!(inline.pool.len(), 0, "the request was not sent whole: not pooled");
        let (_, closed) = seen.await.unwrap();
        assert!(closed);
    }

    #[tokio::test]
    async fn a_chunked_answer_is_read_to_its_trailers_and_its_connection_pooled() {
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nx-sum: 5\r\n\r\n";
        let (uri, _seen) = one_exchange(|s| s.ends_with(b"\r\n\r\n"), chunked, false).await;
        let inline = inline_to(&uri);
        let response = send(&inline, &Method::GET, Payload::Empty).await;
        assert!(!response.headers().contains_key("transfer-encoding"), "hop-by-hop: not passed on");
        let collected = response.into_body().collect().await.unwrap();
        assert_eq!(collected.trailers().map(|t| t["x-sum"].clone()), Some(HeaderValue::from_static("5")));
        assert_eq!(collected.to_bytes(), "abcde");
        assert_eq!(inline.pool.len(), 1);
    }

    #[tokio::test]
    async fn an_answer_framed_by_the_close_is_read_to_it_and_a_broken_one_is_an_error() {
        let head_end = |s: &[u8]| s.ends_with(b"\r\n\r\n");
        let (uri, _seen) = one_exchange(head_end, b"HTTP/1.1 200 OK\r\n\r\nto the end", true).await;
        let inline = inline_to(&uri);
        let response = send(&inline, &Method::GET, Payload::Empty).await;
        assert_eq!(response.into_body().collect().await.unwrap().to_bytes(), "to the end");
        assert_eq!(inline.pool.len(), 0, "framed by the close: never pooled");

        let short = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort";
        let (uri, _seen) = one_exchange(head_end, short, true).await;
        let response = send(&inline_to(&uri), &Method::GET, Payload::Empty).await;
        let error = response.into_body().collect().await.expect_err("closed five bytes short");
        assert!(matches!(error, H1Error::ClosedInBody), "{error:?}");

        let (uri, _seen) = one_exchange(head_end, b"HTTP/1.1 200", true).await;
        let inline = inline_to(&uri);
        let lease = inline.connect().await.unwrap();
        let headers = HeaderMap::new();
        let failed = exchange(lease, sending(&inline, &headers), Payload::Empty).await;
        assert!(matches!(failed, Err(Unanswered::Failed(H1Error::ClosedBeforeHead))));
    }
}
