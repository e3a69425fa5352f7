//! [`Permits`]: the concurrency permits one admitted request holds, released when dropped — by the
//! tower layer's response body and by the gateway's alike.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Waker};

type Release = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Concurrency permits held by one admitted request; released when dropped.
///
/// The release is an async store call and `Drop` cannot await: it is polled once right away (the
/// memory store finishes there), and if it is still pending, spawned on the tokio runtime that
/// admitted the request. Without a runtime, or if the store fails, the permits are freed when their
/// lease expires.
pub struct Permits {
    // A `Mutex` only to make the holder `Sync`; it is never contended (`get_mut` in `drop`).
    release: Mutex<Option<Release>>,
    runtime: Option<tokio::runtime::Handle>,
}

impl Permits {
    /// Permits that `release` frees (e.g. `engine.release(descriptors, verdict)`, its error
    /// ignored: a failed release is recovered by the permits' lease expiry, and there is no one
    /// left to tell).
    pub fn new(release: impl Future<Output = ()> + Send + 'static) -> Self {
        Permits {
            release: Mutex::new(Some(Box::pin(release))),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        let release = match self.release.get_mut() {
            Ok(release) => release.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        let Some(mut release) = release else { return };
        if release.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_ready() {
            return;
        }
        if let Some(runtime) = self.runtime.take().or_else(|| tokio::runtime::Handle::try_current().ok()) {
            runtime.spawn(release);
        }
    }
}

impl fmt::Debug for Permits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permits").finish_non_exhaustive()
    }
}
