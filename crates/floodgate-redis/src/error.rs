//! Redis errors as [`StoreError`]s: transient (worth retrying, fall back meanwhile) or permanent.

use std::time::Duration;

use floodgate::StoreError;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// Classifies a Redis error.
///
/// Transient: timeouts (as [`StoreError::Timeout`]), I/O and connection failures, a server loading
/// its dataset, busy with a script, out of memory, a cluster that is down, resharding, failing over
/// (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`, `MOVED`/`ASK` left after retries) and a
/// script missing after a flush (reloaded on the next call). Permanent: everything that repeats until
/// someone acts — authentication and ACL failures, a TLS handshake that fails (a server certificate
/// that does not verify, a client certificate missing or refused), a key of the wrong type, a script
/// error, a reply the store does not understand, a bad URL.
pub(crate) fn classify(e: RedisError, deadline: Duration) -> StoreError {
    if e.is_timeout() {
        return StoreError::Timeout(deadline);
    }
    let transient = !is_tls_failure(&e)
        && (e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_cluster_error()
            || match e.kind() {
                ErrorKind::Server(kind) => matches!(
                    kind,
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::NoScript
                        | ServerErrorKind::Moved
                        | ServerErrorKind::Ask
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                ),
                ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => true,
                ErrorKind::Extension => matches!(e.code(), Some("BUSY" | "OOM" | "LOADING")),
                _ => false,
            });
    StoreError::Backend { message: e.to_string(), transient, source: Some(Box::new(e)) }
}

/// Whether `e` is a TLS failure: an I/O error carrying a [`rustls::Error`] (the handshake's
/// verdicts, and the alerts the server sends, such as a certificate required).
fn is_tls_failure(e: &RedisError) -> bool {
    use std::error::Error;
    type Shared = std::sync::Arc<dyn Error + Send + Sync>;
    let Some(source) = e.source() else { return false };
    let io = match source.downcast_ref::<Shared>() {
        Some(shared) => shared.downcast_ref::<std::io::Error>(),
        None => source.downcast_ref::<std::io::Error>(),
    };
    io.and_then(std::io::Error::get_ref).is_some_and(|inner| inner.is::<rustls::Error>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_failures_are_transient_and_type_errors_are_not() {
        let d = Duration::from_millis(5);
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(classify(refused, d).is_transient());
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(matches!(classify(timeout, d), StoreError::Timeout(_)));
        let wrong = RedisError::from((ErrorKind::UnexpectedReturnType, "wrong type"));
        assert!(!classify(wrong, d).is_transient());
    }

    #[test]
    fn tls_failures_are_permanent() {
        let d = Duration::from_millis(5);
        let unknown_ca = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let e = RedisError::from(std::io::Error::new(std::io::ErrorKind::InvalidData, unknown_ca));
        assert!(!classify(e, d).is_transient());
    }
}
