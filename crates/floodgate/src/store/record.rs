//! Reservation records: what a store keeps for each reservation, so that any instance sharing the
//! store can settle (commit or release) what another reserved.
//!
//! A record is opaque bytes written by the engine (see `crate::reservation`), an expiry on the
//! store's clock, and once settled, the settlement (opaque bytes too). The store's part is to keep
//! it, and to settle it **once**: [`Store::settle_record`](super::Store::settle_record) marks a
//! pending record settled atomically — only one of two racing settlements wins — and refuses a
//! record past its expiry, on the store's own clock.

use std::time::Duration;

use floodgate_core::Timestamp;

use super::StoreError;

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
    /// [`Once`](super::Once) notes must outlive.
    pub kept_for: Duration,
}

/// What [`Store::settle_record`](super::Store::settle_record) did.
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
pub(crate) fn unsupported() -> StoreError {
    StoreError::Backend {
        message: "this store keeps no reservation records".into(),
        transient: false,
        source: None,
    }
}
