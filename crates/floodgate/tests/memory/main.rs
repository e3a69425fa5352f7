//! The memory store: the conformance suite, exactness under threads, the sweeper, and the key cap.

mod concurrency;
mod conformance;
mod full;
mod sweeper;

use std::pin::pin;
use std::task::{Context, Poll, Waker};

use floodgate::store::{Applied, Mode, Op};
use floodgate::{Limit, MemoryConfig, MemoryStore, Store, StoreError};
use floodgate_core::{Grant, ManualClock};

/// The store under test.
type Memory = MemoryStore<ManualClock>;

/// A memory store with default settings on `clock`.
fn memory(clock: ManualClock) -> Memory {
    MemoryStore::with_config(MemoryConfig::default(), clock)
}

/// Runs a memory-store future to its end on the calling thread. The memory store never waits, so
/// the future must be ready on its first poll.
fn ready<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a memory store future must complete without waiting"),
    }
}

/// [`Store::apply`] from a plain thread.
fn apply(store: &Memory, ops: &[Op<'_>], mode: Mode) -> Result<Applied, StoreError> {
    let mut out = Applied::default();
    ready(store.apply(ops, mode, &mut out)).map(|()| out)
}

/// Whether a check of `ops` was admitted.
fn admitted(store: &Memory, ops: &[Op<'_>]) -> bool {
    let applied = apply(store, ops, Mode::Check).expect("the memory store does not fail here");
    ops.iter().zip(&applied.results).all(|(op, r)| !op.enforce || r.decision.allowed)
}

/// [`Store::refund`] from a plain thread.
fn refund(store: &Memory, key: &[u8], limit: &Limit, grant: Grant) {
    ready(store.refund(key, limit, grant)).expect("the memory store does not fail here");
}
