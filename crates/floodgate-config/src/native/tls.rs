//! `tls:` (and `gateway.tls:`): a listener's certificate, key and, for mutual TLS, the CA that
//! client certificates must chain to (DESIGN.md §12).
//!
//! ```yaml
//! tls:
//!   cert: /etc/floodgate/tls/server.crt     # PEM: the certificate, then its chain
//!   key: /etc/floodgate/tls/server.key      # PEM: PKCS#8, PKCS#1 (RSA) or SEC1 (EC)
//!   client_ca: /etc/floodgate/tls/clients.crt   # optional: clients must present a certificate it signed
//! ```
//!
//! The files are read and parsed at load, so that a missing file or one without a certificate or
//! key is reported at its line; the server reads them again whenever they change.
//!
//! [`PemFile`] reads and parses a PEM file, for these sections and for the Redis store's
//! `store.tls` files alike.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::Invalid;
use crate::yaml::Item;

/// A listener's TLS files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The certificate chain (PEM), the server's own first.
    pub cert: PathBuf,
    /// The private key (PEM).
    pub key: PathBuf,
    /// The CAs client certificates must chain to (PEM); `None`: no client certificate is asked for.
    pub client_ca: Option<PathBuf>,
}

/// Why a TLS file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TlsFileError(pub String);

impl TlsConfig {
    /// The certificate chain.
    pub fn certs(&self) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
        PemFile::read(&self.cert)?.certs("certificate")
    }

    /// The private key.
    pub fn private_key(&self) -> Result<PrivateKeyDer<'static>, TlsFileError> {
        PemFile::read(&self.key)?.private_key()
    }

    /// The client CAs, when mutual TLS is asked for.
    pub fn client_cas(&self) -> Result<Option<Vec<CertificateDer<'static>>>, TlsFileError> {
        self.client_ca.as_deref().map(|p| PemFile::read(p)?.certs("client CA certificate")).transpose()
    }
}

/// A PEM file as it was read: its path, for errors, and its text. Cloning shares the text; the
/// text is never printed (it may hold a private key).
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile {
    path: PathBuf,
    text: Arc<[u8]>,
}

impl fmt::Debug for PemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PemFile").field("path", &self.path).field("bytes", &self.text.len()).finish()
    }
}

impl PemFile {
    /// Reads the file at `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<PemFile, TlsFileError> {
        let path = path.as_ref();
        let text =
            std::fs::read(path).map_err(|e| TlsFileError(format!("cannot read {}: {e}", path.display())))?;
        Ok(PemFile { path: path.to_path_buf(), text: text.into() })
    }

    /// Where it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its text, as read.
    pub fn bytes(&self) -> &[u8] {
        &self.text
    }

    /// The certificates in it, at least one; `what` names them in the error when there is none
    /// (`certificate`, `client CA certificate`).
    pub fn certs(&self, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
        let certs = CertificateDer::pem_slice_iter(&self.text)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error(format!("invalid PEM: {e}")))?;
        if certs.is_empty() {
            return Err(self.error(format!("no {what} (PEM `BEGIN CERTIFICATE`)")));
        }
        Ok(certs)
    }

    /// The private key in it (PKCS#8, PKCS#1 or SEC1).
    pub fn private_key(&self) -> Result<PrivateKeyDer<'static>, TlsFileError> {
        PrivateKeyDer::from_pem_slice(&self.text)
            .map_err(|e| self.error(format!("no private key in PEM (PKCS#8, PKCS#1 or SEC1): {e}")))
    }

    /// `why` about this file: `<path>: <why>`.
    pub(crate) fn error(&self, why: impl fmt::Display) -> TlsFileError {
        TlsFileError(format!("{}: {why}", self.path.display()))
    }
}

const FIELDS: &[&str] = &["cert", "key", "client_ca"];

/// Validates a `tls` section, reading its files.
pub(crate) fn compile(item: Item<'_>) -> Result<TlsConfig, Invalid> {
    let fields = item.fields("the TLS settings", Some(FIELDS))?;
    let path = |name: &str, hint: &str| -> Result<(PathBuf, Item<'_>), Invalid> {
        let f = fields.require(name, hint)?;
        let text = f.str("a file path")?;
        if text.is_empty() {
            return Err(f.error(format!("{name} is empty: give a PEM file's path")));
        }
        Ok((PathBuf::from(text), f))
    };
    let (cert, cert_item) = path("cert", "the PEM certificate chain")?;
    let (key, key_item) = path("key", "the PEM private key")?;
    let mut config = TlsConfig { cert, key, client_ca: None };
    config.certs().map_err(|e| cert_item.error(e.0))?;
    config.private_key().map_err(|e| key_item.error(e.0))?;
    if let Some(c) = fields.get("client_ca") {
        let text = c.str("a file path")?;
        config.client_ca = Some(PathBuf::from(text));
        config.client_cas().map_err(|e| c.error(e.0))?;
    }
    Ok(config)
}
