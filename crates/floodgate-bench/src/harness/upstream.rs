//! The upstream a gateway run puts behind `floodgate serve --gateway` (and nginx): a minimal hyper
//! server answering `200 ok` to everything, on a thread of its own so that the load's runtime does
//! not slow it. It speaks what [`Protocols`] says: HTTP/1.1 keep-alive; HTTP/1.1 or h2c (HTTP/2
//! with prior knowledge) on the same port, told apart by the HTTP/2 preface; or TLS with ALPN `h2`
//! and `http/1.1`. An HTTP/2 connection carries at most [`MAX_STREAMS`] requests at once. It counts
//! the TCP connections it accepted and holds, and the requests of each HTTP version ([`Counts`]),
//! and stops, its connections with it, when dropped.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What the upstream answers.
pub(crate) const BODY: &[u8] = b"ok";

/// The requests one HTTP/2 connection carries at once (`SETTINGS_MAX_CONCURRENT_STREAMS`, hyper's
/// default, stated): a client with more waits for a stream or opens another connection.
pub(crate) const MAX_STREAMS: u32 = 200;

/// What the upstream speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Protocols {
    /// HTTP/1.1 only, keep-alive.
    Http1,
    /// HTTP/1.1, or h2c with prior knowledge, on the same port: hyper-util's `auto` builder reads
    /// the start of each connection for the HTTP/2 preface.
    Cleartext,
    /// TLS with the certificate chain `cert` and its key `key` (PEM files), ALPN `h2` then
    /// `http/1.1`; on the connection, HTTP/2 or HTTP/1.1 as the client then speaks.
    Tls {
        /// The server's certificate chain, leaf first.
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
    },
}

/// What an upstream has seen since it started; read with [`Counts::now`].
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// TCP connections accepted (over TLS: before the handshake, so one that fails counts).
    accepted: AtomicU64,
    /// Connections open now: accepted and not yet closed.
    open: AtomicU64,
    /// Requests answered over HTTP/1.x.
    http1_requests: AtomicU64,
    /// Requests answered over HTTP/2.
    http2_requests: AtomicU64,
}

/// The [`Counts`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CountsNow {
    /// TCP connections accepted since the upstream started.
    pub(crate) accepted: u64,
    /// Connections open at that moment.
    pub(crate) open: u64,
    /// Requests answered over HTTP/1.x since the upstream started.
    pub(crate) http1_requests: u64,
    /// Requests answered over HTTP/2 since the upstream started.
    pub(crate) http2_requests: u64,
}

impl Counts {
    /// The counts now.
    pub(crate) fn now(&self) -> CountsNow {
        CountsNow {
            accepted: self.accepted.load(Ordering::SeqCst),
            open: self.open.load(Ordering::SeqCst),
            http1_requests: self.http1_requests.load(Ordering::SeqCst),
            http2_requests: self.http2_requests.load(Ordering::SeqCst),
        }
    }
}

/// One open connection in [`Counts::open`]; it leaves when dropped (the connection closed, or the
/// upstream stopped).
struct Held(Arc<Counts>);

impl Held {
    /// Counts a connection just accepted.
    fn accepted(counts: &Arc<Counts>) -> Held {
        counts.accepted.fetch_add(1, Ordering::SeqCst);
        counts.open.fetch_add(1, Ordering::SeqCst);
        Held(Arc::clone(counts))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A running upstream; stopped when dropped.
#[derive(Debug)]
pub(crate) struct Upstream {
    addr: SocketAddr,
    counts: Arc<Counts>,
    /// The id of the thread it runs on, when `/proc` says.
    thread: Option<u32>,
    /// Dropping it ends the accept loop, and the thread's runtime with every connection.
    _stop: oneshot::Sender<()>,
}

impl Upstream {
    /// Starts one speaking HTTP/1.1 on a free loopback port.
    pub(crate) fn start() -> io::Result<Upstream> {
        Upstream::serving(&Protocols::Http1)
    }

    /// Starts one speaking `protocols` on a free loopback port. A certificate or key that cannot
    /// be read or used is an error naming its file.
    pub(crate) fn serving(protocols: &Protocols) -> io::Result<Upstream> {
        let tls = match protocols {
            Protocols::Tls { cert, key } => Some(acceptor(cert, key)?),
            Protocols::Http1 | Protocols::Cleartext => None,
        };
        let only_http1 = *protocols == Protocols::Http1;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let counted = Arc::clone(&counts);
        let (stop, stopped) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (said, heard) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("upstream".into()).spawn(move || {
            let _ = said.send(crate::harness::cpu::current_thread());
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                let accept = async {
                    loop {
                        let Ok((tcp, _)) = listener.accept().await else { continue };
                        let held = Held::accepted(&counted);
                        let _ = tcp.set_nodelay(true);
                        let tls = tls.clone();
                        tokio::spawn(async move {
                            if let Some(acceptor) = tls {
                                // A client that does not trust the certificate ends it here.
                                if let Ok(stream) = acceptor.accept(tcp).await {
                                    serve(stream, false, &held.0).await;
                                }
                            } else {
                                serve(tcp, only_http1, &held.0).await;
                            }
                            drop(held);
                        });
                    }
                };
                tokio::select! {
                    _ = stopped => {}
                    () = accept => {}
                }
            });
        })?;
        let thread = heard.recv().ok().flatten();
        Ok(Upstream { addr, counts, thread, _stop: stop })
    }

    /// The id of the thread it runs on (every connection of it is served there).
    pub(crate) fn thread(&self) -> Option<u32> {
        self.thread
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its counts, live.
    pub(crate) fn counts(&self) -> Arc<Counts> {
        Arc::clone(&self.counts)
    }
}

/// Serves one connection until the client closes it: HTTP/1.1 only when `only_http1`, else
/// HTTP/1.1 or HTTP/2 by the connection's first bytes. Each request is counted by its version.
async fn serve<I>(io: I, only_http1: bool, counts: &Arc<Counts>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let counts = Arc::clone(counts);
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let by_version = match request.version() {
            http::Version::HTTP_2 => &counts.http2_requests,
            _ => &counts.http1_requests,
        };
        by_version.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(BODY)))) }
    });
    let io = TokioIo::new(io);
    if only_http1 {
        let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
    } else {
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder.http2().max_concurrent_streams(MAX_STREAMS);
        let _ = builder.serve_connection(io, service).await;
    }
}

/// The TLS acceptor of the certificate chain in `cert` and the key in `key` (PEM), offering ALPN
/// `h2` then `http/1.1`.
fn acceptor(cert: &Path, key: &Path) -> io::Result<TlsAcceptor> {
    let invalid = |path: &Path, what: String| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()))
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| invalid(cert, format!("cannot read a certificate: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(cert, format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(invalid(cert, "no certificate in the file".into()));
    }
    let private =
        PrivateKeyDer::from_pem_file(key).map_err(|e| invalid(key, format!("no usable private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| io::Error::other(format!("rustls: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| {
            invalid(cert, format!("the certificate and {} do not make a server: {e}", key.display()))
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt as _, Empty};

    use super::*;

    /// One GET on a new connection to `upstream` over `io`, as HTTP/2 when `http2`: its body.
    async fn get_over<I>(io: I, http2: bool) -> Bytes
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io = TokioIo::new(io);
        let request = http::Request::get("http://upstream/x").body(Empty::<Bytes>::new()).unwrap();
        let response = if http2 {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.unwrap();
            tokio::spawn(connection);
            sender.send_request(request).await.unwrap()
        } else {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(connection);
            sender.send_request(request).await.unwrap()
        };
        assert_eq!(response.status(), http::StatusCode::OK);
        response.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn cleartext_serves_http1_and_h2c_on_one_port_and_counts_them() {
        let upstream = Upstream::serving(&Protocols::Cleartext).unwrap();
        for http2 in [false, true, true] {
            let tcp = tokio::net::TcpStream::connect(upstream.addr()).await.unwrap();
            assert_eq!(&get_over(tcp, http2).await[..], BODY);
        }
        let now = upstream.counts().now();
        assert_eq!((now.accepted, now.http1_requests, now.http2_requests), (3, 1, 2));
    }

    #[tokio::test]
    async fn tls_negotiates_h2_by_alpn_and_a_closed_connection_is_no_longer_open() {
        let certs = floodgate_testkit::tls::TestCerts::generate();
        let protocols = Protocols::Tls { cert: certs.server_cert(), key: certs.server_key() };
        let upstream = Upstream::serving(&protocols).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(certs.ca()).unwrap() {
            roots.add(ca.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(upstream.addr()).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = connector.connect(name, tcp).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        assert_eq!(&get_over(tls, true).await[..], BODY);
        let counts = upstream.counts();
        assert_eq!((counts.now().accepted, counts.now().http2_requests), (1, 1));
        floodgate_testkit::wait::until("the closed connection to leave the open ones", || async {
            (counts.now().open == 0).then_some(())
        })
        .await;
    }

    #[test]
    fn a_missing_certificate_is_an_error_naming_its_file() {
        let protocols = Protocols::Tls {
            cert: PathBuf::from("/nonexistent/cert.pem"),
            key: PathBuf::from("/nonexistent/key.pem"),
        };
        let error = Upstream::serving(&protocols).unwrap_err();
        assert!(error.to_string().starts_with("/nonexistent/cert.pem: "), "{error}");
    }
}
