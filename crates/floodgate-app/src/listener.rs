//! What every listener does with the connections it accepts, against slow and hostile clients
//! (`http:` and `gateway.http:`, DESIGN.md §12): at most `max_connections` open at once (one more is
//! closed as soon as it is accepted), HTTP/1 request heads within `header_read_timeout` and
//! `max_header_bytes`, and a connection without a byte read or written for `idle_timeout` closed.
//! The HTTP listener and the gateway serve their connections here ([`serve`]): plain HTTP/1.1
//! requests with the listeners' own HTTP/1.1 (`http1.rs`), and from the first request that is not
//! one (HTTP/2, an upgrade, a streamed request body, a head to refuse), with hyper; the gRPC
//! listener's connections, which tonic serves, are accepted by the same loop ([`Accepting`]) and
//! wrapped by [`grpc_incoming`], which applies the same limits from below (HTTP/2's connection
//! preface within `header_read_timeout`). Every listener's TLS is the one acceptor of [`Tls`].

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::BytesMut;
use floodgate_config::http_server::HttpConfig;
use floodgate_http::Answer;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;

use crate::http1::{self, Served};
use crate::tls::Tls;
use crate::workers::Workers;
use crate::{App, stopped};

/// A listener's accepted connections, each within the limits in force when it is accepted.
struct Accepting {
    listener: TcpListener,
    /// Connections open now (each holds a [`Slot`]).
    open: Arc<AtomicUsize>,
    /// The listener's name in the logs.
    what: &'static str,
}

/// An accepted connection, holding one of `max_connections`.
struct Accepted {
    tcp: TcpStream,
    peer: SocketAddr,
    /// The limits in force when it was accepted.
    limits: HttpConfig,
    slot: Slot,
}

impl Accepting {
    fn new(listener: TcpListener, what: &'static str) -> Accepting {
        Accepting { listener, open: Arc::new(AtomicUsize::new(0)), what }
    }

    /// The next connection that fits `limits()` (read per connection, so that a reload applies
    /// to the connections accepted after it): one beyond `max_connections` is closed at once.
    /// `None` once `stop` turns true.
    async fn next(
        &self,
        stop: &mut watch::Receiver<bool>,
        limits: impl Fn() -> HttpConfig,
    ) -> Option<Accepted> {
        let what = self.what;
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    // Out of file descriptors and the like: the listener itself is fine; wait a
                    // little rather than spin, as a busy server must keep accepting once it can.
                    Err(e) => {
                        tracing::warn!(error = %e, listener = what, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = stopped(stop) => return None,
            };
            let limits = limits();
            let Some(slot) = Slot::take(&self.open, limits.max_connections) else {
                tracing::debug!(%peer, listener = what, max_connections = limits.max_connections, "connection refused: at max_connections");
                continue;
            };
            let _ = tcp.set_nodelay(true);
            return Some(Accepted { tcp, peer, limits, slot });
        }
    }
}

/// Serves `listener`'s connections (see [`serve_connection`]) until `stop` turns true, then stops accepting and
/// waits for the requests in flight (idle keep-alive connections are closed). Each connection is
/// accepted under the `limits()` in force then (see [`Accepting::next`]), handshaken with `tls`
/// when given (on the connection's own task, within `header_read_timeout`), and served by the
/// service `connection(peer)` makes for it. `what` names the listener in the logs. The HTTP API
/// and the gateway serve their listeners here.
pub async fn serve<L, M, S, F, R>(
    listener: TcpListener,
    what: &'static str,
    limits: L,
    tls: Option<Arc<Tls>>,
    connection: M,
    mut stop: watch::Receiver<bool>,
) where
    L: Fn() -> HttpConfig,
    M: Fn(SocketAddr) -> S,
    S: Fn(http::Request<Body>) -> F + Send + Sync + 'static,
    F: Future<Output = R> + Send + 'static,
    R: Into<Answer<Body>> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let accepting = Accepting::new(listener, what);
    let mut builders = Builders::default();
    while let Some(Accepted { tcp, peer, limits, slot }) = accepting.next(&mut stop, &limits).await {
        let builder = builders.get(&limits);
        let service = connection(peer);
        let watcher = graceful.watcher();
        let tls = tls.clone();
        let serving = Serving { builder, watcher, limits, stop: stop.clone(), peer, what };
        // A connection's future is held in a box of its own for the connection's life
        // (`workers::made_in_a_box`): the TLS connection's, kilobytes larger (the handshake, the
        // TLS state), is boxed within it, so that a plain connection's box is not as large.
        let connection = move |tcp: TcpStream| async move {
            let _slot = slot;
            match tls {
                None => serve_connection(tcp, service, serving).await,
                Some(tls) => {
                    Box::pin(async move {
                        match tls.accept(tcp).await {
                            Ok(io) => serve_connection(io, service, serving).await,
                            Err(e) => {
                                tracing::debug!(error = %e, %peer, listener = what, "TLS handshake failed")
                            }
                        }
                    })
                    .await;
                }
            }
        };
        match Workers::get() {
            // Boxed, as on a worker (`workers::made_in_a_box`).
            None => {
                tokio::spawn(crate::workers::made_in_a_box(|| connection(tcp)));
            }
            // Moved to the worker's reactor: registered there, so that its readiness wakes the
            // thread that serves it.
            Some(workers) => match tcp.into_std() {
                Ok(std) => workers.spawn(move |assigned| async move {
                    let _assigned = assigned;
                    match TcpStream::from_std(std) {
                        Ok(tcp) => connection(tcp).await,
                        Err(e) => tracing::warn!(error = %e, %peer, listener = what, "cannot serve a connection on its worker"),
                    }
                }),
                Err(e) => tracing::warn!(error = %e, %peer, listener = what, "cannot hand a connection to a worker"),
            },
        }
    }
    drop(accepting);
    graceful.shutdown().await;
}

/// What a connection is served with, besides its service.
struct Serving {
    builder: auto::Builder<TokioExecutor>,
    /// Holds the listener's graceful shutdown until the connection ends.
    watcher: Watcher,
    limits: HttpConfig,
    stop: watch::Receiver<bool>,
    peer: SocketAddr,
    what: &'static str,
}

/// Serves one connection on `io` with `service` until it ends, the server shuts down, or it is idle
/// for `idle_timeout`: its plain HTTP/1.1 requests with the listeners' own HTTP/1.1
/// ([`http1`](crate::http1)), and from the first request that is not one (HTTP/2, an upgrade, a
/// streamed body, a head to refuse), with hyper.
async fn serve_connection<I, S, F, R>(io: I, service: S, serving: Serving)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Fn(http::Request<Body>) -> F + Send + Sync + 'static,
    F: Future<Output = R> + Send + 'static,
    R: Into<Answer<Body>> + Send + 'static,
{
    let Serving { builder, watcher, limits, mut stop, peer, what } = serving;
    let (io, activity) = Watched::new(io);
    let served = async move {
        let own = http1::Limits {
            max_header_bytes: limits.max_header_bytes,
            header_read_timeout: limits.header_read_timeout,
        };
        let io = match http1::serve(io, &service, own, &mut stop).await {
            Ok(Served::Closed) => return Ok(()),
            Ok(Served::Hyper { mut io, read }) => {
                io.replay = read;
                io
            }
            Err(e) => return Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>),
        };
        let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
            // An HTTP/1 request answered before its body was read to its end (a 413 for a body
            // over the limit, a refusal that reads nothing) leaves its connection unusable, and
            // hyper closes it after the answer: the answer says so (`Connection: close`), or a
            // client would send its next request on a connection about to close.
            let http1 = request.version() < http::Version::HTTP_2;
            let ended = Arc::new(AtomicBool::new(hyper::body::Body::is_end_stream(request.body())));
            let watched = Arc::clone(&ended);
            let response = service(request.map(|body| Body::new(EndWatched { body, ended: watched })));
            async move {
                // Rate-limit headers rendered as lines go into the header map hyper writes.
                let mut response = response.await.into().into_response();
                if http1 && !ended.load(Ordering::Acquire) {
                    response
                        .headers_mut()
                        .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
                }
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        // Boxed: hyper's connection is kilobytes, and most connections never come to it (as the
        // TLS connection's, above: a plain connection's box is not as large).
        Box::pin(
            watcher.watch(builder.serve_connection_with_upgrades(TokioIo::new(io), service).into_owned()),
        )
        .await
    };
    let (served, idle) = (std::pin::pin!(served), std::pin::pin!(activity.idle(limits.idle_timeout)));
    match UntilIdle::new(served, idle).await {
        Some(Err(e)) => {
            tracing::debug!(error = %e, %peer, listener = what, "connection ended with an error");
        }
        Some(Ok(())) => {}
        None => tracing::debug!(%peer, listener = what, "idle connection closed"),
    }
}

/// A request body of hyper's that notes in `ended` when it has been read to its end.
struct EndWatched {
    body: Incoming,
    ended: Arc<AtomicBool>,
}

impl http_body::Body for EndWatched {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.body.is_end_stream() {
            self.ended.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection's future raced against its idle watch, which is polled only when its own timer
/// woke the task (and on the first poll): the connection's task wakes for every read and write,
/// and polling the watch's timer on each of those wake-ups is work for nothing.
///
/// Completes with the connection's output, or `None` when the watch completed first.
struct UntilIdle<'a, F, W> {
    served: Pin<&'a mut F>,
    idle: Pin<&'a mut W>,
    /// The waker the watch is polled with.
    timer: Arc<TimerWake>,
    timer_waker: std::task::Waker,
    /// The task's waker last handed to `timer`.
    task: Option<std::task::Waker>,
}

/// The idle watch's waker: notes that the watch has something to say, then wakes the task.
#[derive(Default)]
struct TimerWake {
    fired: AtomicBool,
    task: std::sync::Mutex<Option<std::task::Waker>>,
}

impl std::task::Wake for TimerWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(task) = task.as_ref() {
            task.wake_by_ref();
        }
    }
}

impl<'a, F, W> UntilIdle<'a, F, W> {
    fn new(served: Pin<&'a mut F>, idle: Pin<&'a mut W>) -> Self {
        let timer = Arc::new(TimerWake::default());
        let timer_waker = std::task::Waker::from(Arc::clone(&timer));
        UntilIdle { served, idle, timer, timer_waker, task: None }
    }
}

impl<F: Future, W: Future<Output = ()>> Future for UntilIdle<'_, F, W> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(output) = this.served.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        let new_task = !this.task.as_ref().is_some_and(|task| task.will_wake(cx.waker()));
        if new_task {
            let mut task = this.timer.task.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *task = Some(cx.waker().clone());
            this.task = task.clone();
        }
        if new_task || this.timer.fired.swap(false, Ordering::AcqRel) {
            let mut timer_cx = Context::from_waker(&this.timer_waker);
            if this.idle.as_mut().poll(&mut timer_cx).is_ready() {
                return Poll::Ready(None);
            }
        }
        Poll::Pending
    }
}

/// The connection builder for `limits`, kept while they stay the same (a reload may change them;
/// connections accepted after it get the new ones).
#[derive(Default)]
struct Builders(Option<(HttpConfig, auto::Builder<TokioExecutor>)>);

impl Builders {
    fn get(&mut self, limits: &HttpConfig) -> auto::Builder<TokioExecutor> {
        match &self.0 {
            Some((l, builder)) if l == limits => builder.clone(),
            _ => self.0.insert((*limits, connection_builder(limits))).1.clone(),
        }
    }
}

/// A connection builder with `limits`: HTTP/1.1 and HTTP/2 (h2c, prior knowledge), upgrades.
fn connection_builder(limits: &HttpConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// One of `max_connections` open connections; given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).ok()?;
        Some(Slot(Arc::clone(open)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's socket, noting whether bytes moved (a flag, not a clock read per poll).
struct Watched<I> {
    tcp: I,
    moved: Arc<AtomicBool>,
    /// Bytes read already and given back first: what the listeners' own HTTP/1.1 read before it
    /// handed the connection to hyper.
    replay: BytesMut,
}

/// Whether a [`Watched`] socket is idle.
struct Activity(Arc<AtomicBool>);

impl<I> Watched<I> {
    fn new(tcp: I) -> (Watched<I>, Activity) {
        let moved = Arc::new(AtomicBool::new(true));
        (Watched { tcp, moved: Arc::clone(&moved), replay: BytesMut::new() }, Activity(moved))
    }

    fn note<T>(&self, poll: &Poll<std::io::Result<T>>) {
        if matches!(poll, Poll::Ready(Ok(_))) {
            self.moved.store(true, Ordering::Relaxed);
        }
    }
}

impl Activity {
    /// Completes once no byte has moved for `timeout` (checked every quarter of it: the connection
    /// is closed between 1 and 1.25 times `timeout` after its last byte).
    async fn idle(&self, timeout: Duration) {
        let tick = (timeout / 4).max(Duration::from_millis(10));
        let mut quiet = Duration::ZERO;
        loop {
            tokio::time::sleep(tick).await;
            if self.0.swap(false, Ordering::Relaxed) {
                quiet = Duration::ZERO;
            } else {
                quiet += tick;
                if quiet >= timeout {
                    return;
                }
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.replay.is_empty() {
            let n = this.replay.len().min(buf.remaining());
            buf.put_slice(&this.replay.split_to(n));
            return Poll::Ready(Ok(()));
        }
        let poll = Pin::new(&mut this.tcp).poll_read(cx, buf);
        this.note(&poll);
        poll
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.note(&poll);
        poll
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.note(&poll);
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// The bytes of HTTP/2's client connection preface (RFC 9113 §3.4).
const PREFACE_LEN: usize = 24;

/// A gRPC connection as tonic serves it: plain or TLS, holding one of `max_connections`, and closed
/// (its reads fail with `TimedOut`) when the client has not sent HTTP/2's connection preface within
/// `header_read_timeout` of the accept, or when no byte moved for `idle_timeout` since.
pub struct GrpcConn {
    io: Box<dyn GrpcIo>,
    _slot: Slot,
    /// Preface bytes still expected.
    preface_left: usize,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    /// The last byte read or written.
    last: Instant,
    /// Fires at the deadline in force when it was set; moved on, not reset, per byte.
    timer: Pin<Box<Sleep>>,
}

impl std::fmt::Debug for GrpcConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcConn").field("preface_left", &self.preface_left).finish_non_exhaustive()
    }
}

/// A connection's stream: TCP, or TLS over it.
trait GrpcIo: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> GrpcIo for T {}

impl GrpcConn {
    fn new(io: Box<dyn GrpcIo>, slot: Slot, limits: &HttpConfig) -> GrpcConn {
        let now = Instant::now();
        GrpcConn {
            io,
            _slot: slot,
            preface_left: PREFACE_LEN,
            header_read_timeout: limits.header_read_timeout,
            idle_timeout: limits.idle_timeout,
            last: now,
            timer: Box::pin(tokio::time::sleep_until(now + limits.header_read_timeout)),
        }
    }

    /// Notes a write that moved bytes as activity (once the preface is in: before it, only the
    /// client's bytes count).
    fn wrote(&mut self, poll: &Poll<std::io::Result<usize>>) {
        if matches!(poll, Poll::Ready(Ok(n)) if *n > 0) && self.preface_left == 0 {
            self.last = Instant::now();
        }
    }

    /// When the connection is closed if nothing more happens.
    fn deadline(&self) -> Instant {
        if self.preface_left > 0 {
            self.last + self.header_read_timeout
        } else {
            self.last + self.idle_timeout
        }
    }

    /// Whether the deadline has passed (re-arming the timer at the deadline when it has not: the
    /// timer wakes the connection's task once per deadline, not once per byte).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            let deadline = self.deadline();
            if Instant::now() >= deadline {
                return true;
            }
            self.timer.as_mut().reset(deadline);
        }
    }
}

impl tonic::transport::server::Connected for GrpcConn {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for GrpcConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.io).poll_read(cx, buf);
        match poll {
            Poll::Ready(Ok(())) => {
                let read = buf.filled().len() - before;
                if read > 0 {
                    let waiting = this.preface_left > 0;
                    this.preface_left = this.preface_left.saturating_sub(read);
                    this.last = Instant::now();
                    if waiting && this.preface_left == 0 {
                        // The deadline moves from the preface's to the idle timeout's, which may
                        // be sooner than the timer is set for.
                        let deadline = this.deadline();
                        this.timer.as_mut().reset(deadline);
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.expired(cx) => {
                let what = if this.preface_left > 0 {
                    "no HTTP/2 preface within header_read_timeout"
                } else {
                    "idle for idle_timeout"
                };
                Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, what)))
            }
            other => other,
        }
    }
}

impl AsyncWrite for GrpcConn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(&poll);
        poll
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(&poll);
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The gRPC listener's connections for `serve_with_incoming_shutdown`, accepted here under the
/// limits of the configuration in force (`http:`) and, with `tls`, handshaken (each handshake on a
/// task of its own, so a slow one holds up no other, and within `header_read_timeout`), until
/// stopped.
pub fn grpc_incoming(
    listener: TcpListener,
    app: App,
    tls: Option<Arc<Tls>>,
    mut stop: watch::Receiver<bool>,
) -> ReceiverStream<std::io::Result<GrpcConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let accepting = Accepting::new(listener, "grpc");
    tokio::spawn(async move {
        while let Some(Accepted { tcp, peer, limits, slot }) =
            accepting.next(&mut stop, || app.control().load().http).await
        {
            match &tls {
                None => {
                    if tx.send(Ok(GrpcConn::new(Box::new(tcp), slot, &limits))).await.is_err() {
                        return;
                    }
                }
                Some(tls) => {
                    let (tls, tx) = (Arc::clone(tls), tx.clone());
                    tokio::spawn(async move {
                        match tls.accept(tcp).await {
                            Ok(io) => {
                                let conn = GrpcConn::new(Box::new(io), slot, &limits);
                                let _ = tx.send(Ok(conn)).await;
                            }
                            Err(e) => tracing::debug!(error = %e, %peer, "gRPC: TLS handshake failed"),
                        }
                    });
                }
            }
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;
    use std::task::{Wake, Waker};

    use super::*;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Wakes(AtomicU32);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A future standing for the idle watch: counts its polls, keeps the waker of the last, and
    /// completes once `done` is set.
    #[derive(Default)]
    struct Watch {
        polls: AtomicU32,
        waker: std::sync::Mutex<Option<Waker>>,
        done: AtomicBool,
    }

    fn watching(watch: &Watch) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            watch.polls.fetch_add(1, Ordering::SeqCst);
            *watch.waker.lock().unwrap() = Some(cx.waker().clone());
            if watch.done.load(Ordering::SeqCst) { Poll::Ready(()) } else { Poll::Pending }
        })
    }

    /// A connection standing in: pending until `ready` is set.
    fn serving(ready: &AtomicBool) -> impl Future<Output = &'static str> + '_ {
        std::future::poll_fn(
            |_| if ready.load(Ordering::SeqCst) { Poll::Ready("served") } else { Poll::Pending },
        )
    }

    #[test]
    fn the_watch_is_polled_on_the_first_poll_and_when_its_timer_fires_only() {
        let (watch, ready) = (Watch::default(), AtomicBool::new(false));
        let (served, idle) = (std::pin::pin!(serving(&ready)), std::pin::pin!(watching(&watch)));
        let mut race = std::pin::pin!(UntilIdle::new(served, idle));
        let task = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&waker);
        assert!(race.as_mut().poll(&mut cx).is_pending());
        assert_eq!(watch.polls.load(Ordering::SeqCst), 1, "the first poll registers the watch");
        // The connection's own wake-ups (reads, writes) do not poll the watch.
        for _ in 0..10 {
            assert!(race.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(watch.polls.load(Ordering::SeqCst), 1);
        // The watch's timer fires: the task is woken, and its next poll polls the watch.
        watch.waker.lock().unwrap().take().expect("the watch's waker").wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert!(race.as_mut().poll(&mut cx).is_pending());
        assert_eq!(watch.polls.load(Ordering::SeqCst), 2);
        assert!(race.as_mut().poll(&mut cx).is_pending());
        assert_eq!(watch.polls.load(Ordering::SeqCst), 2, "once per firing");
        ready.store(true, Ordering::SeqCst);
        assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(Some("served")));
    }

    #[test]
    fn the_watch_ends_the_race_when_its_timer_fires_and_it_completes() {
        let (watch, ready) = (Watch::default(), AtomicBool::new(false));
        let (served, idle) = (std::pin::pin!(serving(&ready)), std::pin::pin!(watching(&watch)));
        let mut race = std::pin::pin!(UntilIdle::new(served, idle));
        let waker = Waker::from(Arc::new(Wakes::default()));
        let mut cx = Context::from_waker(&waker);
        assert!(race.as_mut().poll(&mut cx).is_pending());
        watch.done.store(true, Ordering::SeqCst);
        // Not polled until its timer says so.
        assert!(race.as_mut().poll(&mut cx).is_pending());
        watch.waker.lock().unwrap().take().expect("the watch's waker").wake();
        assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(None));
    }

    #[test]
    fn a_timer_firing_wakes_the_task_that_polled_last() {
        let (watch, ready) = (Watch::default(), AtomicBool::new(false));
        let (served, idle) = (std::pin::pin!(serving(&ready)), std::pin::pin!(watching(&watch)));
        let mut race = std::pin::pin!(UntilIdle::new(served, idle));
        let (first, second) = (Arc::new(Wakes::default()), Arc::new(Wakes::default()));
        let first_waker = Waker::from(Arc::clone(&first));
        assert!(race.as_mut().poll(&mut Context::from_waker(&first_waker)).is_pending());
        let second_waker = Waker::from(Arc::clone(&second));
        assert!(race.as_mut().poll(&mut Context::from_waker(&second_waker)).is_pending());
        watch.waker.lock().unwrap().take().expect("the watch's waker").wake();
        assert_eq!((first.0.load(Ordering::SeqCst), second.0.load(Ordering::SeqCst)), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_by_the_watch_on_a_real_timer() {
        let ready = AtomicBool::new(false);
        let activity = Activity(Arc::new(AtomicBool::new(true)));
        let (served, idle) =
            (std::pin::pin!(serving(&ready)), std::pin::pin!(activity.idle(Duration::from_secs(60))));
        assert_eq!(UntilIdle::new(served, idle).await, None);
    }
}
