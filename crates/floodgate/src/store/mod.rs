//! Stores: where limit state lives, and the one atomic operation the engine needs from them.
//!
//! A [`Store`] applies all the limits of one request at once, **all-or-nothing**: when any enforced
//! limit denies, nothing is consumed from any limit. It owns the time (one authority per store:
//! the process clock for [`MemoryStore`], Redis's own clock for the Redis store) and runs the
//! algorithms of `floodgate-core` under its own atomic read-modify-write. It also keeps what
//! reservations need, its [`Records`] (see the `record` module).
//!
//! A store may wrap another, as tower middleware wraps a service: [`Breaker`], [`Fallback`] and
//! [`Prefetch`] implement [`Store`] for what they change, and [`Wraps`] to pass the record calls
//! through to the store they wrap.

mod breaker;
mod fallback;
mod memory;
mod prefetch;
mod record;

use std::future::Future;
use std::sync::Arc;

use floodgate_core::{Decision, Grant, Timestamp};
use smallvec::SmallVec;

pub use breaker::{Breaker, BreakerConfig, BreakerState, OnChange};
pub use fallback::{Fallback, FallbackConfig, FallbackStats, OnFallback, Replayed};
pub use memory::{
    Fsync, MemoryConfig, MemoryStats, MemoryStore, OnFull, OverflowStats, PersistConfig, PersistError,
    Recovered,
};
pub use prefetch::{Prefetch, PrefetchBatch, PrefetchError, PrefetchStats, Returned};
pub use record::{Record, Records, Settle, Wraps, kept_after_expiry};

use crate::{Limit, OnStoreError};

/// One limit of one request.
#[derive(Debug, Clone, Copy)]
pub struct Op<'a> {
    /// The encoded key (see the `key` module docs).
    pub key: &'a [u8],
    /// How many leading bytes of `key` name the rule (rather than the request's values): keys that
    /// share them belong to the same rule.
    pub scope_len: usize,
    /// The limit to apply.
    pub limit: &'a Limit,
    /// The cost, already checked to be within `1..=limit.capacity()` for checks and peeks.
    pub cost: u64,
    /// Whether this limit's denial denies the request. Shadow and tag limits don't: they are
    /// evaluated, and consume only when the request is admitted and they would have admitted it.
    pub enforce: bool,
    /// What the rule does when the store fails: a [`Fallback`] decides the ops that fall back
    /// locally ([`Op::falls_back`]); the engine applies the others' policy.
    pub on_error: OnStoreError,
    /// The rule's batch leases: a [`Prefetch`] wrapper takes up to `batch` units in one store call
    /// and spends them locally for later requests on the same key. Other stores ignore it.
    pub prefetch: Option<PrefetchBatch>,
    /// The rule's penalty box ([`Rule::block_for`](crate::Rule::block_for)): see [`Store`] for
    /// what a store does with it.
    pub block_for: Option<std::time::Duration>,
}

impl Op<'_> {
    /// Whether a [`Fallback`] decides this op locally when the store fails: its rule says
    /// [`OnStoreError::Local`] and its limit holds no permits.
    pub fn falls_back(&self) -> bool {
        self.on_error == OnStoreError::Local && !self.limit.holds_permits()
    }
}

/// What to do with the ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Decide; when every enforced limit allows, consume from the limits that allow.
    Check,
    /// Decide, consuming nothing.
    Peek,
    /// Consume from every limit, never deny.
    Report,
}

/// The result for one op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpResult {
    /// What the limit decided.
    pub decision: Decision,
    /// What was consumed, if anything.
    pub grant: Option<Grant>,
    /// For a quota in [`Mode::Peek`]: what the key counted in the calendar period before the
    /// current one ([`Quota::previous`](floodgate_core::Quota::previous)), 0 when that is not
    /// kept. `None` for every other algorithm and mode: a check or a report never reads it.
    pub previous: Option<u64>,
}

/// The results of [`Store::apply`], in the order of the ops. Callers keep one and reuse it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Applied {
    /// The store's time of the decision.
    pub at: Timestamp,
    /// One result per op.
    pub results: SmallVec<[OpResult; 4]>,
    /// Set by a [`Fallback`] when the store failed and it decided the ops that fall back locally:
    /// the store's error. Then the results of those ops ([`Op::falls_back`]) are the local
    /// decisions, and the results of the others mean nothing (their rules' policies decide).
    /// Stores leave it `None`.
    pub degraded: Option<Arc<StoreError>>,
}

/// Names a change a store applies at most once ([`Records::adjust_once`]): a second call with the
/// same id changes nothing, so that a change whose answer was lost can be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Once<'a> {
    /// The change's name (for a settlement: the reservation's id and the step).
    pub id: &'a [u8],
    /// How long the store remembers that the change was made; a call after that applies it again.
    pub keep: std::time::Duration,
}

/// What [`Records::adjust_once`] does to its ops.
#[derive(Debug, Clone, Copy)]
pub enum Adjustment<'a> {
    /// Consumes each op's cost and never denies, as [`Mode::Report`].
    Report,
    /// Gives back grant `i` on op `i`, as [`Store::refund`] (the ops' costs are not read).
    GiveBack(&'a [Grant]),
}

impl<'a> Adjustment<'a> {
    /// The grants given back (`None` for a report), checked to be one per op of the `ops` given.
    pub fn grants(self, ops: usize) -> Result<Option<&'a [Grant]>, StoreError> {
        match self {
            Adjustment::Report => Ok(None),
            Adjustment::GiveBack(grants) if grants.len() == ops => Ok(Some(grants)),
            Adjustment::GiveBack(grants) => Err(StoreError::Backend {
                message: format!("{} grants given back on {ops} keys", grants.len()),
                transient: false,
                source: None,
            }),
        }
    }
}

/// A store failed; the request's limits could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The memory store holds `max_keys` keys and is configured to refuse new ones.
    #[error("the store is full ({max_keys} keys) and refuses new keys")]
    Full {
        /// The configured cap.
        max_keys: usize,
    },
    /// The backend did not answer within the deadline.
    #[error("the store did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// The store's circuit breaker is open: the store kept failing, and is not called until the
    /// breaker's probe finds it answering again (see [`Breaker`]).
    #[error("the store's circuit breaker is open (the store kept failing)")]
    BreakerOpen,
    /// The backend is unreachable or failed.
    #[error("store backend error: {message}")]
    Backend {
        /// What failed.
        message: String,
        /// Whether retrying may succeed.
        transient: bool,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl StoreError {
    /// Whether the failure may go away by itself (a timeout, a lost connection), as opposed to one
    /// that repeats until someone acts (a full store, a script error).
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Full { .. } => false,
            StoreError::Timeout(_) | StoreError::BreakerOpen => true,
            StoreError::Backend { transient, .. } => *transient,
        }
    }
}

/// Two store errors are equal when they are of the same kind and say the same (their sources
/// are not compared): what tests and verdict comparisons need.
impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (StoreError::Full { max_keys: a }, StoreError::Full { max_keys: b }) => a == b,
            (StoreError::Timeout(a), StoreError::Timeout(b)) => a == b,
            (StoreError::BreakerOpen, StoreError::BreakerOpen) => true,
            (
                StoreError::Backend { message: a, transient: ta, .. },
                StoreError::Backend { message: b, transient: tb, .. },
            ) => a == b && ta == tb,
            _ => false,
        }
    }
}

/// Where limit state lives.
///
/// Every store also keeps what reservations need, its [`Records`] (the reservation records and
/// the notes of changes made at most once): a store that keeps none says so with an empty `impl
/// Records`, and a store that wraps another passes them through to it by implementing [`Wraps`].
pub trait Store: Records + Send + Sync + 'static {
    /// Applies `ops` atomically, all-or-nothing (see [`Mode`]), writing one result per op, in the
    /// order of `ops`, into `out` (cleared first; passed in so that no decision moves or allocates
    /// a result buffer).
    fn apply(
        &self,
        ops: &[Op<'_>],
        mode: Mode,
        out: &mut Applied,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// [`Store::apply`] when the store can answer without waiting — the memory store always can —
    /// or `None` when the caller must await [`Store::apply`]. Not a second way to decide: the same
    /// atomic operation, offered synchronously by the stores that have it, so that a caller inside
    /// a synchronous call (a tower service's `call`) needs no future. The default is `None`;
    /// wrappers pass it through.
    fn try_apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Option<Result<(), StoreError>> {
        let _ = (ops, mode, out);
        None
    }

    /// Gives back what `grant` consumed from `key` (a refunded reservation, a released permit).
    fn refund(
        &self,
        key: &[u8],
        limit: &Limit,
        grant: Grant,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Forgets `key`'s state, as if it had never been used. Returns whether it existed.
    fn reset(&self, key: &[u8]) -> impl Future<Output = Result<bool, StoreError>> + Send;
}
