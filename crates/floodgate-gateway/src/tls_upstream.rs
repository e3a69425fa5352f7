//! TLS to `https` upstreams: the connection hyper-util's pooled client is given ([`Conn`]), plain
//! TCP or TLS over it, and the rustls configuration of an upstream's CA bundle.
//!
//! The certificate must chain to the upstream's `tls.ca` (or the system's bundle) and name the
//! URL's host (a DNS name, or an IP address in its IP SANs). ALPN offers `http/1.1`, and `h2`
//! first when the upstream has `http2: true`; the pooled client speaks HTTP/2 on a connection that
//! negotiated it, with as many requests at once as the upstream's `SETTINGS_MAX_CONCURRENT_STREAMS`
//! allows, and HTTP/1.1 on any other.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use floodgate_config::gateway::UpstreamTls;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls;

/// The rustls client configuration of an upstream's `tls`: its CA bundle as the only roots, ALPN
/// `h2` (when `http2`) then `http/1.1`.
pub(crate) fn client_config(tls: &UpstreamTls, http2: bool) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = tls.ca.certs("CA certificate").map_err(|e| e.0)?;
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!("{}: no usable CA certificate", tls.ca.path().display()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("rustls: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols =
        if http2 { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] };
    Ok(Arc::new(config))
}

/// A connection to an upstream: plain TCP (`http`) or TLS over TCP (`https`).
#[derive(Debug)]
pub(crate) enum Conn {
    Plain(TokioIo<TcpStream>),
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            Conn::Plain(io) => io.connected(),
            Conn::Tls(io) => {
                let (tcp, session) = io.inner().get_ref();
                let connected = tcp.connected();
                match session.alpn_protocol() {
                    Some(b"h2") => connected.negotiated_h2(),
                    _ => connected,
                }
            }
        }
    }
}

impl Read for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Conn::Tls(io) => Pin::new(&mut **io).poll_read(cx, buf),
        }
    }
}

impl Write for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Conn::Tls(io) => Pin::new(&mut **io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_flush(cx),
            Conn::Tls(io) => Pin::new(&mut **io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Conn::Tls(io) => Pin::new(&mut **io).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(io) => io.is_write_vectored(),
            Conn::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Conn::Tls(io) => Pin::new(&mut **io).poll_write_vectored(cx, bufs),
        }
    }
}

/// The TLS handshake with an `https` upstream over `tcp`, checking its certificate against `host`.
pub(crate) async fn handshake(
    config: Arc<rustls::ClientConfig>,
    host: &str,
    tcp: TcpStream,
) -> io::Result<TlsStream<TcpStream>> {
    // An IPv6 host comes bracketed in a URI.
    let name = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?} is not a TLS server name: {e}"))
    })?;
    tokio_rustls::TlsConnector::from(config).connect(name, tcp).await
}
