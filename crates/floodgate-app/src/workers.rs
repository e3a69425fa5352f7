//! The threads that serve accepted connections: one single-threaded runtime per core, each
//! connection kept on one of them from its accept to its close.
//!
//! A connection's task, and every upstream connection its requests open, then wake on the thread
//! that polls them: no work stealing moves a request between threads, and a socket's readiness is
//! reported by the reactor of the thread that reads it. Accepting stays on the runtime of the
//! listener's loop ([`crate::listener`]), which hands each connection to the worker serving the
//! fewest — a hand-off per connection, not per request.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::runtime::Handle;

/// The workers of this process, started at first use.
static WORKERS: OnceLock<Option<Workers>> = OnceLock::new();
/// How many to start (set before first use by [`Workers::configure`]; the cores by default).
static COUNT: OnceLock<usize> = OnceLock::new();

thread_local! {
    /// The index of the worker this thread is, if it is one.
    static INDEX: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The worker threads, each a single-threaded runtime driven forever.
#[derive(Debug)]
pub struct Workers {
    handles: Vec<Handle>,
    /// Connections each worker serves now.
    serving: Arc<[AtomicUsize]>,
}

/// A connection's hold on its worker: counted in its worker's load until dropped.
#[derive(Debug)]
pub struct Assigned {
    serving: Arc<[AtomicUsize]>,
    index: usize,
}

impl Drop for Assigned {
    fn drop(&mut self) {
        self.serving[self.index].fetch_sub(1, Ordering::Relaxed);
    }
}

impl Workers {
    /// Sets how many workers the process starts: `0` serves connections on the runtime of the
    /// listener's loop instead (tokio's work-stealing scheduler). Only before the first connection
    /// is served; `Err` with the count in force when it is too late.
    pub fn configure(count: usize) -> Result<(), usize> {
        COUNT.set(count).map_err(|_| Workers::count_in_force())?;
        Ok(())
    }

    fn count_in_force() -> usize {
        *COUNT.get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
    }

    /// The process's workers: `None` when connections are served on the listener's runtime (zero
    /// configured, or the workers could not be started).
    pub fn get() -> Option<&'static Workers> {
        WORKERS.get_or_init(|| Workers::start(Workers::count_in_force())).as_ref()
    }

    fn start(count: usize) -> Option<Workers> {
        if count == 0 {
            return None;
        }
        let mut handles = Vec::with_capacity(count);
        for index in 0..count {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start a worker runtime: serving on the main runtime");
                    return None;
                }
            };
            handles.push(runtime.handle().clone());
            let started =
                std::thread::Builder::new().name(format!("floodgate-worker-{index}")).spawn(move || {
                    INDEX.with(|i| i.set(Some(index)));
                    runtime.block_on(std::future::pending::<()>());
                });
            if let Err(e) = started {
                tracing::warn!(error = %e, "cannot start a worker thread: serving on the main runtime");
                return None;
            }
        }
        let serving = (0..count).map(|_| AtomicUsize::new(0)).collect();
        Some(Workers { handles, serving })
    }

    /// How many workers there are.
    pub fn count(&self) -> usize {
        self.handles.len()
    }

    /// Runs `connection` on the worker serving the fewest connections now; the [`Assigned`] it is
    /// given counts it there until dropped.
    pub fn spawn<F, Fut>(&self, connection: F)
    where
        F: FnOnce(Assigned) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let index = self
            .serving
            .iter()
            .enumerate()
            .min_by_key(|(_, n)| n.load(Ordering::Relaxed))
            .map_or(0, |(i, _)| i);
        self.serving[index].fetch_add(1, Ordering::Relaxed);
        let assigned = Assigned { serving: Arc::clone(&self.serving), index };
        self.handles[index].spawn(async move { made_in_a_box(|| connection(assigned)).await });
    }
}

/// The future `make` makes, made in a box of its own rather than moved into one.
///
/// A connection's future is kilobytes large, and a task's future is copied whole when it is spawned
/// and again as its stages are set at its end (tokio's `Core::set_stage`): a task that holds the
/// connection's future boxed is a pointer's size, and those copies with it. Written into memory
/// allocated first (`Box::write`), the future is made in place, where `Box::pin(make())` made it on
/// the stack and copied it into its box.
#[inline(always)]
pub(crate) fn made_in_a_box<F: Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// The index of the worker the calling thread is, or `None` on any other thread.
pub fn current() -> Option<usize> {
    INDEX.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_runs_on_the_least_loaded_worker_and_is_counted_there_until_it_ends() {
        let workers = Workers::start(2).unwrap();
        // Each connection says where it ran, and says again once it has given its worker back.
        let (said, heard) = std::sync::mpsc::channel();
        let connection = |hold: Option<tokio::sync::oneshot::Receiver<()>>| {
            let said = said.clone();
            move |assigned: Assigned| async move {
                said.send(("ran", assigned.index, current())).unwrap();
                if let Some(hold) = hold {
                    let _ = hold.await;
                }
                let index = assigned.index;
                drop(assigned);
                said.send(("ended", index, current())).unwrap();
            }
        };
        // The first goes to worker 0 and stays; the second then finds worker 1 the least loaded.
        let (end, hold) = tokio::sync::oneshot::channel();
        workers.spawn(connection(Some(hold)));
        assert_eq!(heard.recv().unwrap(), ("ran", 0, Some(0)));
        workers.spawn(connection(None));
        assert_eq!(heard.recv().unwrap(), ("ran", 1, Some(1)));
        assert_eq!(heard.recv().unwrap(), ("ended", 1, Some(1)));
        assert_eq!(current(), None, "the test's own thread is no worker");
        // Worker 0's connection still counts there: the next goes to worker 1 again.
        workers.spawn(connection(None));
        assert_eq!(heard.recv().unwrap(), ("ran", 1, Some(1)));
        assert_eq!(heard.recv().unwrap(), ("ended", 1, Some(1)));
        // Once it ended, worker 0 is the least loaded again.
        end.send(()).unwrap();
        assert_eq!(heard.recv().unwrap(), ("ended", 0, Some(0)));
        workers.spawn(connection(None));
        assert_eq!(heard.recv().unwrap(), ("ran", 0, Some(0)));
    }

    #[test]
    fn zero_workers_serve_on_the_listeners_runtime() {
        assert!(Workers::start(0).is_none());
    }
}
