//! TLS on the server's listeners (`tls:` for HTTP and gRPC, `gateway.tls:` for the gateway):
//! rustls on the ring provider, certificates read again when their files change, mutual TLS when
//! a client CA is given.
//!
//! A [`Tls`] holds the server configuration in force; each connection's handshake uses the one in
//! force when it was accepted. [`Tls::watch`] looks at the files' modification times and sizes
//! every second (following symbolic links, so a Kubernetes Secret's `..data` swap is seen) and, on
//! a change, builds a new configuration: in force for the next handshake, or — when the new files
//! do not make one (a key that does not match, a half-written file) — logged, the old one staying.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use floodgate_config::tls::{TlsConfig, TlsFileError};
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Completes once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// How often the files are looked at.
pub const POLL: Duration = Duration::from_secs(1);

/// A listener's TLS: its files and the server configuration they make.
#[derive(Debug)]
pub struct Tls {
    files: TlsConfig,
    alpn: Vec<Vec<u8>>,
    current: ArcSwap<ServerConfig>,
    /// The files' (modified, length) when `current` was built.
    stamp: parking_lot::Mutex<Stamp>,
    /// How long a handshake may take.
    handshake_timeout: Duration,
}

type Stamp = Vec<Option<(SystemTime, u64)>>;

/// Why a TLS configuration cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file is missing or does not hold what it should.
    #[error(transparent)]
    File(#[from] TlsFileError),
    /// rustls refused the certificates or key (e.g. a key that is not the certificate's).
    #[error("{0}")]
    Rustls(String),
}

impl Tls {
    /// Builds the configuration of `files`, offering `alpn` (e.g. `h2` then `http/1.1`).
    pub fn new(files: &TlsConfig, alpn: &[&[u8]], handshake_timeout: Duration) -> Result<Tls, TlsError> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let stamp = stamp(files);
        let config = build(files, &alpn)?;
        Ok(Tls {
            files: files.clone(),
            alpn,
            current: ArcSwap::from_pointee(config),
            stamp: parking_lot::Mutex::new(stamp),
            handshake_timeout,
        })
    }

    /// Runs the handshake on `tcp` with the configuration in force, within the handshake timeout.
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        let acceptor = TlsAcceptor::from(self.current.load_full());
        match tokio::time::timeout(self.handshake_timeout, acceptor.accept(tcp)).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")),
        }
    }

    /// Rebuilds the configuration when the files changed since it was built; whether it did.
    pub fn refresh(&self) -> bool {
        let now = stamp(&self.files);
        let mut stamp = self.stamp.lock();
        if *stamp == now {
            return false;
        }
        *stamp = now;
        match build(&self.files, &self.alpn) {
            Ok(config) => {
                self.current.store(Arc::new(config));
                tracing::info!(event = "tls_reloaded", cert = %self.files.cert.display(), "TLS certificates reloaded");
                true
            }
            Err(e) => {
                tracing::warn!(
                    event = "tls_rejected",
                    cert = %self.files.cert.display(),
                    error = %e,
                    "TLS files changed but cannot be used; the previous certificates stay"
                );
                false
            }
        }
    }

    /// Refreshes every [`POLL`] until stopped.
    pub async fn watch(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => { self.refresh(); }
                () = stopped(&mut stop) => return,
            }
        }
    }
}

fn stamp(files: &TlsConfig) -> Stamp {
    [Some(&files.cert), Some(&files.key), files.client_ca.as_ref()]
        .into_iter()
        .flatten()
        .map(|p| std::fs::metadata(p).ok().map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len())))
        .collect()
}

fn build(files: &TlsConfig, alpn: &[Vec<u8>]) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = files.certs()?;
    let key = files.private_key()?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match files.client_cas()? {
        Some(cas) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in cas {
                roots.add(ca).map_err(|e| {
                    let ca = files.client_ca.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
                    TlsError::Rustls(format!("{ca}: a client CA rustls refuses: {e}"))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Rustls(format!("client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        TlsError::Rustls(format!("{} and {}: {e}", files.cert.display(), files.key.display()))
    })?;
    config.alpn_protocols = alpn.to_vec();
    Ok(config)
}
