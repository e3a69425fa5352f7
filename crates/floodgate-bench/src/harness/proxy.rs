//! A TCP proxy between the servers and Redis that `outage` turns slow or silent: the faults a
//! signal to `redis-server` cannot make. `slow` holds each chunk of requests for a delay (the
//! latency of a congested link or a far replica: requests still flow, each one later), `blackhole`
//! accepts connections and forwards nothing until it is mended (a dropped route or a firewall that
//! drops packets: the kernel never refuses, nothing ever answers). Answers from Redis flow back as
//! they come; what was held is forwarded, in order, once the fault ends, as a healed link would.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// What the proxy does with requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// Forwards at once.
    Pass,
    /// Forwards each chunk this long after it arrived.
    Delay(Duration),
    /// Forwards nothing (accepting new connections all the same).
    Hole,
}

/// A running proxy; dropping it closes every connection through it.
#[derive(Debug)]
pub(crate) struct FaultProxy {
    addr: SocketAddr,
    link: watch::Sender<Link>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream`.
    pub(crate) async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (link, watched) = watch::channel(Link::Pass);
        let task = tokio::spawn(async move {
            // Dropped with the accept loop: aborts every connection's tasks.
            let mut connections = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                connections.spawn(relay(client, upstream, watched.clone()));
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(FaultProxy { addr, link, task })
    }

    /// The address the servers connect to.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Changes what happens to requests from now on (and to those held by a `Hole`).
    pub(crate) fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection: requests through the link, answers straight back.
async fn relay(client: TcpStream, upstream: SocketAddr, link: watch::Receiver<Link>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = server.set_nodelay(true);
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    // Requests are read as they come, stamped, and written by another task when the link lets
    // them: a delay adds latency without limiting throughput.
    let (held, mut release) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = from_client.read(&mut buf).await {
            if n == 0 || held.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let write = async move {
        let mut link = link;
        while let Some((arrived, chunk)) = release.recv().await {
            loop {
                let now = *link.borrow_and_update();
                match now {
                    Link::Pass => break,
                    Link::Delay(delay) => {
                        tokio::select! {
                            () = tokio::time::sleep_until(arrived + delay) => break,
                            // Mended (or made worse) while waiting: look again.
                            changed = link.changed() => if changed.is_err() { return },
                        }
                    }
                    Link::Hole => {
                        if link.changed().await.is_err() {
                            return;
                        }
                    }
                }
            }
            if to_server.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    let back = async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    };
    tokio::join!(read, write, back);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server, the proxy in front of it, and one round trip's time through it.
    async fn round_trip(proxy: &FaultProxy, stream: &mut TcpStream) -> Duration {
        let _ = proxy;
        let sent = Instant::now();
        stream.write_all(b"ping").await.expect("write");
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).await.expect("read");
        assert_eq!(&buf, b"ping");
        sent.elapsed()
    }

    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_delay_holds_requests_and_a_hole_holds_them_until_mended() {
        let proxy = FaultProxy::start(echo().await).await.expect("proxy");
        let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");
        round_trip(&proxy, &mut stream).await;
        proxy.set(Link::Delay(Duration::from_millis(50)));
        let slow = round_trip(&proxy, &mut stream).await;
        assert!(slow >= Duration::from_millis(50), "held for the delay: {slow:?}");

        proxy.set(Link::Hole);
        stream.write_all(b"ping").await.expect("write");
        let mut buf = [0u8; 4];
        let silent = tokio::time::timeout(Duration::from_millis(300), stream.read_exact(&mut buf)).await;
        assert!(silent.is_err(), "nothing comes back through a hole");
        proxy.set(Link::Pass);
        stream.read_exact(&mut buf).await.expect("the held request, answered once mended");
        assert_eq!(&buf, b"ping");
    }
}
