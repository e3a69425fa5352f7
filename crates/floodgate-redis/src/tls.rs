//! [`TlsConfig`]: the certificates of a `rediss://` connection, checked before any connection is
//! made so that a bad file is reported by name, not by a failed handshake.

use std::path::Path;
use std::sync::Arc;

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use redis::cluster::ClusterClientBuilder;

use crate::Target;

/// PEM text and where it came from (a file's path, or a name the caller gives), for errors.
/// Cloning shares the text.
#[derive(Clone, PartialEq, Eq)]
pub struct Pem {
    inner: Arc<PemText>,
}

#[derive(PartialEq, Eq)]
struct PemText {
    origin: String,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A private key's bytes are never printed.
        f.debug_struct("Pem")
            .field("origin", &self.inner.origin)
            .field("bytes", &self.inner.bytes.len())
            .finish()
    }
}

impl Pem {
    /// PEM text held in memory; `origin` names it in errors (`"the mounted secret"`).
    pub fn new(origin: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Pem {
        Pem { inner: Arc::new(PemText { origin: origin.into(), bytes: bytes.into() }) }
    }

    /// The contents of the file at `path`, named by its path in errors. Only read here: whether it
    /// holds what it should is checked when the store is built.
    ///
    /// # Errors
    /// [`TlsError::Read`] when the file is missing or unreadable.
    pub fn read(path: impl AsRef<Path>) -> Result<Pem, TlsError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        match std::fs::read(path) {
            Ok(bytes) => Ok(Pem::new(origin, bytes)),
            Err(source) => Err(TlsError::Read { origin, source }),
        }
    }

    /// Where the text came from.
    pub fn origin(&self) -> &str {
        &self.inner.origin
    }

    /// The PEM text.
    pub fn bytes(&self) -> &[u8] {
        &self.inner.bytes
    }
}

/// The certificates of a TLS (`rediss://`) connection. Every field is optional; the default
/// verifies the server against the platform's trusted roots and presents no client certificate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsConfig {
    /// The certificates (one or more, PEM) that the server's certificate must chain to, for a
    /// private CA; when `None`, the platform's trusted roots (read from the system's certificate
    /// store) are used.
    pub ca: Option<Pem>,
    /// The client certificate chain (PEM) presented for mutual TLS; needs [`TlsConfig::key`].
    pub cert: Option<Pem>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of [`TlsConfig::cert`].
    pub key: Option<Pem>,
}

/// Why a TLS setting cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {origin}: {source}")]
    Read {
        /// The file's path.
        origin: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file does not hold what it should.
    #[error("{file} {origin}: {why}")]
    Invalid {
        /// Which setting.
        file: TlsFile,
        /// Where its text came from.
        origin: String,
        /// What is wrong with it.
        why: String,
    },
    /// A client certificate without its key, or a key without its certificate.
    #[error("{0}")]
    Unpaired(&'static str),
    /// TLS settings for a URL that does not use TLS.
    #[error("TLS settings need rediss:// URLs, and {url:?} is not one")]
    NotTls {
        /// The URL.
        url: String,
    },
}

/// One of the PEM settings of a [`TlsConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    /// [`TlsConfig::ca`].
    Ca,
    /// [`TlsConfig::cert`].
    Cert,
    /// [`TlsConfig::key`].
    Key,
}

impl std::fmt::Display for TlsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsFile::Ca => "the CA bundle",
            TlsFile::Cert => "the client certificate",
            TlsFile::Key => "the client key",
        })
    }
}

impl TlsConfig {
    /// Checks the settings against `target`, and turns them into the `redis` crate's form.
    pub(crate) fn certificates(&self, target: &Target) -> Result<TlsCertificates, TlsError> {
        let urls: &[String] = match target {
            Target::Node(url) => std::slice::from_ref(url),
            Target::Cluster(seeds) => seeds,
        };
        if let Some(url) = urls.iter().find(|u| !is_tls_url(u)) {
            return Err(TlsError::NotTls { url: url.clone() });
        }
        self.check()?;
        let client_tls = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                Some(ClientTlsConfig { client_cert: cert.bytes().to_vec(), client_key: key.bytes().to_vec() })
            }
            _ => None,
        };
        Ok(TlsCertificates { client_tls, root_cert: self.ca.as_ref().map(|ca| ca.bytes().to_vec()) })
    }

    /// Checks that every file holds what it should, and that a certificate comes with its key.
    ///
    /// # Errors
    /// [`TlsError::Invalid`] naming the file and what is wrong with it, or [`TlsError::Unpaired`].
    pub fn check(&self) -> Result<(), TlsError> {
        if let Some(ca) = &self.ca {
            let certs = certificates(ca, TlsFile::Ca)?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in certs {
                roots.add(cert).map_err(|e| invalid(TlsFile::Ca, ca, format!("not a usable CA: {e}")))?;
            }
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let chain = certificates(cert, TlsFile::Cert)?;
                let der = PrivateKeyDer::from_pem_slice(key.bytes())
                    .map_err(|e| invalid(TlsFile::Key, key, format!("no private key in PEM form ({e})")))?;
                let provider = rustls::crypto::ring::default_provider();
                match rustls::sign::CertifiedKey::from_der(chain, der, &provider) {
                    Ok(_) => Ok(()),
                    Err(rustls::Error::InconsistentKeys(_)) => Err(invalid(
                        TlsFile::Key,
                        key,
                        format!("not the key of the client certificate {}", cert.origin()),
                    )),
                    Err(e) => Err(invalid(TlsFile::Key, key, format!("not a usable private key: {e}"))),
                }
            }
            (Some(_), None) => Err(TlsError::Unpaired("a client certificate needs its key (tls key)")),
            (None, Some(_)) => Err(TlsError::Unpaired("a client key needs its certificate (tls cert)")),
            (None, None) => Ok(()),
        }
    }
}

/// Whether `url` asks for TLS.
pub(crate) fn is_tls_url(url: &str) -> bool {
    url.get(..9).is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"))
}

fn certificates(pem: &Pem, file: TlsFile) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem.bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(file, pem, format!("invalid PEM ({e})")))?;
    if certs.is_empty() {
        return Err(invalid(file, pem, "no certificate (-----BEGIN CERTIFICATE-----) in it".into()));
    }
    Ok(certs)
}

fn invalid(file: TlsFile, pem: &Pem, why: String) -> TlsError {
    TlsError::Invalid { file, origin: pem.origin().to_owned(), why }
}

/// Makes ring the crypto provider of rustls in this process, unless one already is.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only when another thread installed one meanwhile, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A client of the node at `url`, over TLS with `certs` when given.
pub(crate) fn node_client(url: &str, certs: Option<&TlsCertificates>) -> redis::RedisResult<redis::Client> {
    match certs {
        Some(certs) => {
            install_crypto_provider();
            redis::Client::build_with_tls(url, certs.clone())
        }
        None => redis::Client::open(url),
    }
}

/// A cluster client builder from `seeds`, over TLS with `certs` when given.
pub(crate) fn cluster_builder(seeds: &[String], certs: Option<&TlsCertificates>) -> ClusterClientBuilder {
    let builder = ClusterClientBuilder::new(seeds.iter().map(String::as_str));
    match certs {
        Some(certs) => {
            install_crypto_provider();
            builder.certs(certs.clone())
        }
        None => builder,
    }
}
