//! Reservation records: what a store keeps for each reservation, so that any instance sharing the
//! store can settle (commit or release) what another reserved — the store's [`Records`].
//!
//! A record is opaque bytes written by the engine (see `crate::reservation`), an expiry on the
//! store's clock, and once settled, the settlement (opaque bytes too). The store's part is to keep
//! it, and to settle it **once**: [`Records::settle_record`] marks a pending record settled
//! atomically — only one of two racing settlements wins — and refuses a record past its expiry, on
//! the store's own clock. A settlement changes the limits at most once too
//! ([`Records::adjust_once`]), the store noting each change made beside the records.
//!
//! A store that wraps another (a breaker, a fallback, a prefetching store) passes these calls
//! through to it: it implements [`Wraps`], and its [`Records`] are the wrapped store's.

use std::future::Future;
use std::time::Duration;

use floodgate_core::Timestamp;

use super::{Adjustment, Once, Op, Store, StoreError};

/// What a store keeps for reservations: their records, and the notes of the changes made at most
/// once. Every [`Store`] implements it; the defaults fail, as for a store that keeps no records
/// (it says so with an empty `impl Records`). A store that wraps another gets the wrapped store's
/// by implementing [`Wraps`].
pub trait Records: Send + Sync + 'static {
    /// Applies `adjustment` to `ops` **at most once** for `once.id`: the change and the note that it
    /// was made are one atomic write, so a retried call — after a crash, a lost answer, or by
    /// another instance — changes nothing more. Returns whether anything was applied by this call
    /// (`false`: an earlier call with the same id made it).
    ///
    /// On a store that splits a call by where its keys live (a Redis Cluster's slots), each part
    /// is applied at most once on its own: a retry completes the parts a failed call did not make.
    /// Ops must name distinct keys. The default: a store that cannot note changes fails.
    fn adjust_once(
        &self,
        ops: &[Op<'_>],
        adjustment: Adjustment<'_>,
        once: Once<'_>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = (ops, adjustment, once);
        std::future::ready(Err(unsupported()))
    }

    /// Keeps a reservation record under `id`: it expires `ttl` from now on the store's clock, and
    /// is forgotten `kept` from now. Returns its expiry. The default: a store that keeps no records
    /// fails.
    fn put_record(
        &self,
        id: &[u8],
        body: &[u8],
        ttl: Duration,
        kept: Duration,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send {
        let _ = (id, body, ttl, kept);
        std::future::ready(Err(unsupported()))
    }

    /// The record `id`, if the store still keeps it.
    fn get_record(&self, id: &[u8]) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        let _ = id;
        std::future::ready(Err(unsupported()))
    }

    /// Settles record `id` with `settlement`, atomically: only a pending record not past its expiry
    /// (on the store's clock) is settled; otherwise nothing changes and the answer says why.
    fn settle_record(
        &self,
        id: &[u8],
        settlement: &[u8],
    ) -> impl Future<Output = Result<Settle, StoreError>> + Send {
        let _ = (id, settlement);
        std::future::ready(Err(unsupported()))
    }
}

/// A store that wraps another: its [`Records`] are the wrapped store's, each call passed through
/// [`Wraps::pass_through`].
///
/// A wrapper that does something of its own in a record call (a test store that injects faults)
/// implements [`Records`] itself instead.
pub trait Wraps: Send + Sync + 'static {
    /// The wrapped store.
    type Inner: Store;

    /// The wrapped store.
    fn inner(&self) -> &Self::Inner;

    /// Runs `call`, a call made to the wrapped store on the wrapper's behalf. The default awaits it
    /// as it is; a wrapper that guards every call (a [`Breaker`](super::Breaker)) runs it guarded.
    fn pass_through<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>> + Send,
    ) -> impl Future<Output = Result<T, StoreError>> + Send {
        call
    }
}

/// A wrapper's records are the wrapped store's.
impl<W: Wraps> Records for W {
    fn adjust_once(
        &self,
        ops: &[Op<'_>],
        adjustment: Adjustment<'_>,
        once: Once<'_>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.pass_through(self.inner().adjust_once(ops, adjustment, once))
    }

    fn put_record(
        &self,
        id: &[u8],
        body: &[u8],
        ttl: Duration,
        kept: Duration,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send {
        self.pass_through(self.inner().put_record(id, body, ttl, kept))
    }

    fn get_record(&self, id: &[u8]) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        self.pass_through(self.inner().get_record(id))
    }

    fn settle_record(
        &self,
        id: &[u8],
        settlement: &[u8],
    ) -> impl Future<Output = Result<Settle, StoreError>> + Send {
        self.pass_through(self.inner().settle_record(id, settlement))
    }
}

/// A reservation record as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// What the engine wrote.
    pub body: Vec<u8>,
    /// When the reservation expires, on the store's clock.
    pub expires_at: Timestamp,
    /// Whether the store's clock is past `expires_at` (and the record was not settled before).
    pub expired: bool,
    /// The settlement, once settled.
    pub settled: Option<Vec<u8>>,
    /// How much longer the store keeps the record (after that it is forgotten): what a settlement's
    /// [`Once`] notes must outlive.
    pub kept_for: Duration,
}

/// What [`Records::settle_record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// The record was pending: it is now settled with the given settlement.
    Settled,
    /// The record was already settled, with this settlement.
    Already(Vec<u8>),
    /// The record expired before it was settled; nothing changed.
    Expired,
    /// No such record (never written, or forgotten since).
    Missing,
}

/// How long a record is kept after its reservation expires, so that a retried settlement finds
/// its answer: as long as the reservation lasted, and at least a minute.
pub fn kept_after_expiry(ttl: Duration) -> Duration {
    ttl.max(Duration::from_secs(60))
}

/// The error of a store that keeps no reservation records.
fn unsupported() -> StoreError {
    StoreError::Backend {
        message: "this store keeps no reservation records".into(),
        transient: false,
        source: None,
    }
}
