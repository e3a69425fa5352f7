//! The upstream a gateway run puts behind `floodgate serve --gateway` (and nginx): a minimal hyper
//! server answering `200 ok` to everything, HTTP/1.1 keep-alive, on a thread of its own so that
//! the load's runtime does not slow it. It stops, its connections with it, when dropped.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use tokio::sync::oneshot;

/// What the upstream answers.
pub(crate) const BODY: &[u8] = b"ok";

/// A running upstream; stopped when dropped.
#[derive(Debug)]
pub(crate) struct Upstream {
    addr: SocketAddr,
    /// Dropping it ends the accept loop, and the thread's runtime with every connection.
    _stop: oneshot::Sender<()>,
}

impl Upstream {
    /// Starts one on a free loopback port.
    pub(crate) fn start() -> std::io::Result<Upstream> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        std::thread::Builder::new().name("upstream".into()).spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                let accept = async {
                    loop {
                        let Ok((tcp, _)) = listener.accept().await else { continue };
                        let _ = tcp.set_nodelay(true);
                        tokio::spawn(async move {
                            let service = hyper::service::service_fn(|_request| async {
                                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(BODY))))
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                                .await;
                        });
                    }
                };
                tokio::select! {
                    _ = stopped => {}
                    () = accept => {}
                }
            });
        })?;
        Ok(Upstream { addr, _stop: stop })
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}
