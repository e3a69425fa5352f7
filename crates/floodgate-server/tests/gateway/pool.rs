//! The gateway's upstream connections: kept and reused across requests, one the upstream closed
//! while idle never used, one whose response the client abandoned never kept. The upstream is a
//! real TCP server that counts the connections it accepts and sees close.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use floodgate_testkit::wait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use super::Gateway;

/// An HTTP/1.1 upstream answering `GET /ok` with `200 ok` on any connection, and `GET /slow` with
/// a head promising 10 bytes and 5 of them, the rest never. It counts the connections it accepts
/// and those whose other side closed, and closes all of its connections when told.
struct Counting {
    url: String,
    accepted: Arc<AtomicUsize>,
    closed_by_peer: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
    close_all: watch::Sender<u64>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Counting {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Counting {
    async fn start() -> Counting {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed_by_peer = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let changed = Arc::new(Notify::new());
        let (close_all, closing) = watch::channel(0u64);
        let state =
            (Arc::clone(&accepted), Arc::clone(&closed_by_peer), Arc::clone(&open), Arc::clone(&changed));
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (accepted, closed_by_peer, open, changed) = state.clone();
                accepted.fetch_add(1, Ordering::SeqCst);
                open.fetch_add(1, Ordering::SeqCst);
                changed.notify_waiters();
                let mut closing = closing.clone();
                closing.mark_unchanged();
                tokio::spawn(async move {
                    let by_peer = tokio::select! {
                        by_peer = serve(tcp) => by_peer,
                        _ = closing.changed() => false,
                    };
                    if by_peer {
                        closed_by_peer.fetch_add(1, Ordering::SeqCst);
                    }
                    open.fetch_sub(1, Ordering::SeqCst);
                    changed.notify_waiters();
                });
            }
        });
        Counting { url, accepted, closed_by_peer, open, close_all, changed, task }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Waits until `probe` holds of the upstream's counts.
    async fn until(&self, what: &str, probe: impl Fn(&Counting) -> bool) {
        wait::finished(what, async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if probe(self) {
                    return;
                }
                changed.await;
            }
        })
        .await;
    }
}

/// Serves one connection until the peer closes it (true) or it fails (false).
async fn serve(mut tcp: TcpStream) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match tcp.read(&mut buf).await {
            Ok(0) => return true,
            Ok(n) => n,
            Err(_) => return false,
        };
        seen.extend_from_slice(&buf[..n]);
        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).into_owned();
            seen.drain(..end + 4);
            let reply: &[u8] = if head.starts_with("GET /slow ") {
                b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nfirst"
            } else {
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            };
            if tcp.write_all(reply).await.is_err() {
                return false;
            }
        }
    }
}

/// One route taking every path to `url`.
fn one_route(url: &str) -> String {
    super::resilience::route_config(url, "")
}

#[tokio::test]
async fn sequential_requests_share_one_upstream_connection() {
    let upstream = Counting::start().await;
    let gateway = Gateway::start(&one_route(&upstream.url)).await;
    for _ in 0..5 {
        let reply = gateway.get("/ok", &[]).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, "ok");
    }
    assert_eq!(upstream.accepted(), 1, "one connection, kept and reused");
    gateway.stop().await;
}

#[tokio::test]
async fn a_connection_the_upstream_closed_while_idle_is_not_used() {
    let upstream = Counting::start().await;
    let gateway = Gateway::start(&one_route(&upstream.url)).await;
    assert_eq!(gateway.get("/ok", &[]).await.status, 200);
    assert_eq!(upstream.accepted(), 1);
    // The upstream closes its idle connection; the gateway's pooled one is then dead.
    upstream.close_all.send_modify(|n| *n += 1);
    upstream.until("the upstream closed its connection", |u| u.open.load(Ordering::SeqCst) == 0).await;
    for _ in 0..3 {
        let reply = gateway.get("/ok", &[]).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.body, "ok");
    }
    assert_eq!(upstream.accepted(), 2, "one new connection, reused after");
    gateway.stop().await;
}

#[tokio::test]
async fn a_response_the_client_abandoned_does_not_keep_its_connection() {
    let upstream = Counting::start().await;
    let gateway = Gateway::start(&one_route(&upstream.url)).await;
    let mut client = TcpStream::connect(gateway.addr).await.unwrap();
    client.write_all(b"GET /slow HTTP/1.1\r\nhost: gateway\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"first") {
        let n = wait::finished("the first part of the body", client.read(&mut buf)).await.unwrap();
        assert!(n > 0, "the gateway closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    drop(client);
    // The gateway closes the upstream connection of the abandoned body rather than keeping it.
    upstream
        .until("the gateway closed the upstream connection", |u| u.closed_by_peer.load(Ordering::SeqCst) == 1)
        .await;
    assert_eq!(gateway.get("/ok", &[]).await.status, 200);
    assert_eq!(upstream.accepted(), 2);
    gateway.stop().await;
}
