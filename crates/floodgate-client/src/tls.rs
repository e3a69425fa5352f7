//! HTTPS and mutual TLS: rustls on the ring provider (as the server's listeners), a CA bundle that
//! the server's certificate must chain to, and a client certificate for servers that require one.
//!
//! The certificates are read and checked when the client is built, so that a bad file is reported
//! by its setting and path rather than by a failed handshake. A handshake that fails later — a
//! server certificate the bundle does not verify, a client certificate the server requires and did
//! not get or refused — is [`FailureReason::Tls`](crate::FailureReason::Tls), explained in words.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tower_service::Service;

use crate::error::Error;

/// PEM text for a TLS setting: a file read when the client is built, or text held in memory.
/// Errors name it by its path, or by the origin given.
#[derive(Clone, PartialEq, Eq)]
pub struct Pem {
    source: Source,
}

#[derive(Clone, PartialEq, Eq)]
enum Source {
    File(PathBuf),
    Text { origin: String, bytes: Arc<[u8]> },
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A private key's bytes are never printed.
        match &self.source {
            Source::File(path) => f.debug_tuple("Pem::file").field(path).finish(),
            Source::Text { origin, bytes } => {
                f.debug_struct("Pem::text").field("origin", origin).field("bytes", &bytes.len()).finish()
            }
        }
    }
}

impl Pem {
    /// The file at `path`, read when the client is built.
    pub fn file(path: impl Into<PathBuf>) -> Pem {
        Pem { source: Source::File(path.into()) }
    }

    /// PEM text held in memory; `origin` names it in errors (`"the mounted secret"`).
    pub fn text(origin: impl Into<String>, bytes: impl AsRef<[u8]>) -> Pem {
        Pem { source: Source::Text { origin: origin.into(), bytes: Arc::from(bytes.as_ref()) } }
    }

    fn origin(&self) -> String {
        match &self.source {
            Source::File(path) => path.display().to_string(),
            Source::Text { origin, .. } => origin.clone(),
        }
    }

    /// The text, or an error naming `field` and the file.
    fn read(&self, field: &'static str) -> Result<Vec<u8>, Error> {
        match &self.source {
            Source::File(path) => std::fs::read(path)
                .map_err(|e| Error::Config { field, reason: format!("cannot read {}: {e}", path.display()) }),
            Source::Text { bytes, .. } => Ok(bytes.to_vec()),
        }
    }

    /// The certificates in it (at least one).
    fn certificates(&self, field: &'static str) -> Result<Vec<CertificateDer<'static>>, Error> {
        let text = self.read(field)?;
        let certs = CertificateDer::pem_slice_iter(&text)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Config { field, reason: format!("{}: invalid PEM ({e})", self.origin()) })?;
        if certs.is_empty() {
            return Err(Error::Config {
                field,
                reason: format!("{}: no certificate (-----BEGIN CERTIFICATE-----) in it", self.origin()),
            });
        }
        Ok(certs)
    }
}

/// The TLS settings of a client: the CA bundle and, for mutual TLS, a certificate and its key.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsSettings {
    pub(crate) ca: Option<Pem>,
    pub(crate) identity: Option<(Pem, Pem)>,
}

impl TlsSettings {
    pub(crate) fn is_empty(&self) -> bool {
        self.ca.is_none() && self.identity.is_none()
    }

    /// The rustls configuration, after reading and checking every file.
    pub(crate) fn client_config(&self) -> Result<(Arc<ClientConfig>, Arc<Identity>), Error> {
        let Some(ca) = &self.ca else {
            return Err(Error::Config {
                field: "tls_ca",
                reason: "an https:// URL needs the CA bundle the server's certificate chains to \
                         (for the system's public roots, e.g. /etc/ssl/certs/ca-certificates.crt)"
                    .into(),
            });
        };
        let mut roots = RootCertStore::empty();
        for cert in ca.certificates("tls_ca")? {
            roots.add(cert).map_err(|e| Error::Config {
                field: "tls_ca",
                reason: format!("{}: not a usable CA certificate: {e}", ca.origin()),
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = match &self.identity {
            Some((cert, key)) => Some(Arc::new(certified_key(cert, key, &provider)?)),
            None => None,
        };
        let identity = Arc::new(Identity { key, asked: AtomicBool::new(false) });
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config { field: "tls_ca", reason: format!("rustls: {e}") })?
            .with_root_certificates(roots)
            .with_client_cert_resolver(Arc::clone(&identity) as Arc<dyn ResolvesClientCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok((Arc::new(config), identity))
    }
}

fn certified_key(
    cert: &Pem,
    key: &Pem,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<CertifiedKey, Error> {
    let chain = cert.certificates("tls_client_cert")?;
    let text = key.read("tls_client_key")?;
    let der = PrivateKeyDer::from_pem_slice(&text).map_err(|e| Error::Config {
        field: "tls_client_key",
        reason: format!("{}: no private key in PEM form ({e})", key.origin()),
    })?;
    CertifiedKey::from_der(chain, der, provider).map_err(|e| Error::Config {
        field: "tls_client_key",
        reason: match e {
            rustls::Error::InconsistentKeys(_) => {
                format!("{} is not the key of the client certificate {}", key.origin(), cert.origin())
            }
            e => format!("{}: not a usable private key: {e}", key.origin()),
        },
    })
}

/// The client certificate presented when a server asks for one (none without mutual TLS), and
/// whether a server asked: what explains a handshake that a server ended for want of one.
#[derive(Debug)]
pub(crate) struct Identity {
    key: Option<Arc<CertifiedKey>>,
    asked: AtomicBool,
}

impl ResolvesClientCert for Identity {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.asked.store(true, Ordering::Relaxed);
        self.key.clone()
    }

    fn has_certs(&self) -> bool {
        self.key.is_some()
    }
}

impl Identity {
    /// Why a call over TLS failed, in words, when TLS is why: a rustls error in `error`'s chain, or
    /// a connection ended by a server that asked for a client certificate this client lacks.
    pub(crate) fn explain(&self, error: &(dyn std::error::Error + 'static)) -> Option<String> {
        let mut next = Some(error);
        let mut cut = false;
        while let Some(e) = next {
            if let Some(tls) = e.downcast_ref::<rustls::Error>() {
                return Some(self.describe(tls));
            }
            if let Some(io) = e.downcast_ref::<io::Error>() {
                if let Some(tls) = io.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
                    return Some(self.describe(tls));
                }
                cut |= matches!(
                    io.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof
                );
            }
            if let Some(hyper) = e.downcast_ref::<hyper::Error>() {
                cut |= hyper.is_incomplete_message() || hyper.is_canceled();
            }
            next = e.source();
        }
        (cut && self.key.is_none() && self.asked.load(Ordering::Relaxed)).then(|| NO_CLIENT_CERT.to_owned())
    }

    fn describe(&self, error: &rustls::Error) -> String {
        use rustls::Error as E;
        match error {
            E::InvalidCertificate(CertificateError::UnknownIssuer) => {
                "TLS: the server's certificate is not signed by a CA of the bundle (tls_ca)".into()
            }
            E::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => "TLS: the server's certificate is not valid for the URL's host".into(),
            E::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => {
                "TLS: the server's certificate has expired".into()
            }
            E::AlertReceived(AlertDescription::CertificateRequired) => NO_CLIENT_CERT.into(),
            E::AlertReceived(
                AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::CertificateExpired
                | AlertDescription::HandshakeFailure,
            ) if self.key.is_none() && self.asked.load(Ordering::Relaxed) => NO_CLIENT_CERT.into(),
            E::AlertReceived(
                alert @ (AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::CertificateExpired
                | AlertDescription::CertificateRevoked
                | AlertDescription::UnsupportedCertificate),
            ) if self.key.is_some() => {
                format!("TLS: the server refused the client certificate (tls_client_cert): {alert:?}")
            }
            e => format!("TLS: {e}"),
        }
    }
}

const NO_CLIENT_CERT: &str = "TLS: the server requires a client certificate (mutual TLS) and this client \
                              has none (tls_client_cert)";

/// Makes the client's connections: plain TCP for `http://`, TCP then a TLS handshake for
/// `https://`.
#[derive(Clone)]
pub(crate) struct Connector {
    http: HttpConnector,
    tls: Option<TlsConnector>,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector").field("http", &self.http).field("tls", &self.tls.is_some()).finish()
    }
}

impl Connector {
    pub(crate) fn new(mut http: HttpConnector, tls: Option<Arc<ClientConfig>>) -> Connector {
        http.enforce_http(tls.is_none());
        Connector { http, tls: tls.map(TlsConnector::from) }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TokioIo<Stream>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.http.call(uri.clone());
        let tls = self.tls.clone();
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            let Some(tls) = tls.filter(|_| uri.scheme() == Some(&http::uri::Scheme::HTTPS)) else {
                return Ok(TokioIo::new(Stream::Plain(tcp)));
            };
            let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
            let name = ServerName::try_from(host.to_owned())?;
            let stream = tls.connect(name, tcp).await?;
            Ok(TokioIo::new(Stream::Tls(Box::new(stream))))
        })
    }
}

/// A connection of the client: plain TCP, or TLS over it.
#[derive(Debug)]
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Stream::Plain(tcp) => tcp.connected(),
            Stream::Tls(tls) => tls.get_ref().0.connected(),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_https_url_without_a_ca_bundle_or_an_unreadable_or_empty_file_is_refused_by_name() {
        let field = |settings: TlsSettings| match settings.client_config() {
            Err(Error::Config { field, reason }) => (field, reason),
            other => panic!("{other:?}"),
        };
        let (name, reason) = field(TlsSettings::default());
        assert_eq!(name, "tls_ca");
        assert!(reason.contains("needs the CA bundle"), "{reason}");

        let missing = TlsSettings { ca: Some(Pem::file("/nonexistent/ca.pem")), identity: None };
        let (name, reason) = field(missing);
        assert_eq!(name, "tls_ca");
        assert!(reason.contains("cannot read /nonexistent/ca.pem"), "{reason}");

        let empty = TlsSettings { ca: Some(Pem::text("the mounted secret", "not PEM")), identity: None };
        let (name, reason) = field(empty);
        assert_eq!(name, "tls_ca");
        assert!(reason.contains("the mounted secret: no certificate"), "{reason}");
    }

    #[test]
    fn a_key_is_never_printed() {
        let key = Pem::text("the key", "-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----\n");
        let shown = format!("{key:?}");
        assert!(!shown.contains("secret") && shown.contains("the key"), "{shown}");
    }
}
