//! The HTTP listener: connections accepted, served with HTTP/1.1 (and h2c), and shut down
//! gracefully. Check, peek and report requests go straight to their handler — the data plane
//! pays for no router and no per-request extension — and everything else (health, metrics, the
//! admin API) to the axum [router](super::router), with the peer's address for the admin API's
//! loopback check.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use floodgate_config::http_server::HttpConfig;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

use super::api;
use crate::metrics::Api;
use crate::state::{Shared, stopped};
use crate::tls::Tls;

/// Serves `listener` until `stop` turns true, then stops accepting and waits for the requests in
/// flight (idle keep-alive connections are closed).
///
/// The limits of the configuration in force (`http:`) apply to each connection as it is accepted:
/// beyond `max_connections` open ones it is closed at once; HTTP/1 request heads must arrive within
/// `header_read_timeout` (a slowloris client is closed then) and fit `max_header_bytes` (431
/// beyond; HTTP/2: the header list); a connection without a byte read or written for
/// `idle_timeout` is closed.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    router: Router,
    tls: Option<Arc<Tls>>,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let open = Arc::new(AtomicUsize::new(0));
    // The connection builder for the limits in force, rebuilt when a reload changes them.
    let mut built: Option<(HttpConfig, auto::Builder<TokioExecutor>)> = None;
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: the listener itself is fine; wait a little
                // rather than spin, as a busy server must keep accepting once it can.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut stop) => break,
        };
        let limits = shared.control.load().http;
        let Some(slot) = Slot::take(&open, limits.max_connections) else {
            tracing::debug!(%peer, max_connections = limits.max_connections, "connection refused: at max_connections");
            drop(tcp);
            continue;
        };
        let builder = match &built {
            Some((l, builder)) if *l == limits => builder.clone(),
            _ => built.insert((limits, connection_builder(&limits))).1.clone(),
        };
        let _ = tcp.set_nodelay(true);
        // One reference per connection: requests clone it (a count only this connection touches)
        // rather than the shared state's, which every core would contend for on every request.
        let connection = Arc::new(Connection { shared: Arc::clone(&shared), router: router.clone(), peer });
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match tls {
                None => serve_one(tcp, builder, connection, watcher, limits.idle_timeout).await,
                Some(tls) => match tls.accept(tcp).await {
                    Ok(io) => serve_one(io, builder, connection, watcher, limits.idle_timeout).await,
                    Err(e) => tracing::debug!(error = %e, %peer, "TLS handshake failed"),
                },
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Serves one connection on `io` until it ends, the server shuts down, or it is idle for
/// `idle_timeout`.
async fn serve_one<I>(
    io: I,
    builder: auto::Builder<TokioExecutor>,
    connection: Arc<Connection>,
    watcher: Watcher,
    idle_timeout: Duration,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = connection.peer;
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let connection = Arc::clone(&connection);
        async move { Ok::<_, std::convert::Infallible>(connection.dispatch(request).await) }
    });
    let (io, activity) = Watched::new(io);
    let served =
        watcher.watch(builder.serve_connection_with_upgrades(TokioIo::new(io), service).into_owned());
    tokio::select! {
        result = served => if let Err(e) = result {
            tracing::debug!(error = %e, %peer, "connection ended with an error");
        },
        () = activity.idle(idle_timeout) => {
            tracing::debug!(%peer, "idle connection closed");
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
}

/// Whether a [`Watched`] socket is idle.
struct Activity(Arc<AtomicBool>);

impl<I> Watched<I> {
    fn new(tcp: I) -> (Watched<I>, Activity) {
        let moved = Arc::new(AtomicBool::new(true));
        (Watched { tcp, moved: Arc::clone(&moved) }, Activity(moved))
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

/// What the requests of one connection share.
struct Connection {
    shared: Arc<Shared>,
    router: Router,
    peer: SocketAddr,
}

impl Connection {
    /// The check API's requests to their handler, the rest through the router.
    async fn dispatch(&self, request: http::Request<Incoming>) -> http::Response<Body> {
        if request.method() == http::Method::POST {
            let api = match request.uri().path() {
                "/v1/check" => Some(Api::Check),
                "/v1/peek" => Some(Api::Peek),
                "/v1/report" => Some(Api::Report),
                _ => None,
            };
            if let Some(api) = api {
                return api::handle(&self.shared, request, api).await;
            }
        }
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(self.peer));
        match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(infallible) => match infallible {},
        }
    }
}
