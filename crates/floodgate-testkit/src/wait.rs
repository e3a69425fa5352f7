//! Waiting in tests: on an event, never on a clock.
//!
//! A test asserts what happened, not how fast. Where it must wait — for a call to return, a
//! connection to close, a restarted server to answer — it waits for that event; a clock serves
//! only as a guard against a hang. [`HANG_GUARD`] is that guard, the same for every test: long
//! enough that a loaded machine never reaches it, so that its expiry means the event is not coming,
//! and the test fails naming what it waited for. How long things take is measured by the
//! benchmarks (`floodgate-bench`), never asserted by the tests.
//!
//! ```
//! use floodgate_testkit::wait;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! // A call that must return, whatever it returns.
//! let answer = wait::finished("the answer", async { 42 }).await;
//! assert_eq!(answer, 42);
//!
//! // Something that happens after a while: asked again until it has.
//! let tries = std::cell::Cell::new(0);
//! let third = wait::until("a third try", || async {
//!     tries.set(tries.get() + 1);
//!     (tries.get() == 3).then_some("third")
//! })
//! .await;
//! assert_eq!(third, "third");
//! # });
//! ```

use std::future::Future;
use std::time::Duration;

/// How long a test waits for an event before calling it a hang: 30 s. Not a claim about how fast
/// anything is — nothing a test waits for should come near it, even on two busy cores.
pub const HANG_GUARD: Duration = Duration::from_secs(30);

/// The pause between two calls of [`until`]'s probe.
const BETWEEN_PROBES: Duration = Duration::from_millis(20);

/// Waits for `future` to finish and returns its output.
///
/// # Panics
/// When it has not finished within [`HANG_GUARD`]: the message names `what` was waited for.
pub async fn finished<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(HANG_GUARD, future).await {
        Ok(output) => output,
        Err(_) => panic!("{what}: not done after {HANG_GUARD:?}; it hangs"),
    }
}

/// Calls `probe` until it answers `Some`, pausing briefly between calls, and returns what it
/// answered. A probe may assert on what it sees meanwhile (a failure that must be transient…).
///
/// # Panics
/// When `probe` has not answered `Some` within [`HANG_GUARD`]: the message names `what` was
/// waited for.
pub async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    finished(what, async {
        loop {
            if let Some(answer) = probe().await {
                return answer;
            }
            tokio::time::sleep(BETWEEN_PROBES).await;
        }
    })
    .await
}

/// Calls `probe` until it answers true, pausing briefly between calls, blocking the thread: for
/// the testkit's own synchronous tests.
///
/// # Panics
/// When `probe` has not answered true within [`HANG_GUARD`].
#[cfg(test)]
pub(crate) fn until_blocking(what: &str, mut probe: impl FnMut() -> bool) {
    let guard = std::time::Instant::now() + HANG_GUARD;
    while !probe() {
        assert!(std::time::Instant::now() < guard, "{what}: not done after {HANG_GUARD:?}; it hangs");
        std::thread::sleep(BETWEEN_PROBES);
    }
}
