//! The words of the protocol, as the service core says them: a bucket's id, a report of its
//! usage, an action for a stream, and why a stream cannot go on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::strategy::Strategy;

/// A bucket's id: its keys and values, sorted by key (Envoy's `BucketId`, whose order does not
/// matter).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketId {
    pairs: Box<[(Box<str>, Box<str>)]>,
}

impl BucketId {
    /// The id made of `pairs`, in any order.
    pub fn new<K: Into<Box<str>>, V: Into<Box<str>>>(pairs: impl IntoIterator<Item = (K, V)>) -> BucketId {
        let mut pairs: Vec<(Box<str>, Box<str>)> =
            pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        pairs.sort();
        BucketId { pairs: pairs.into_boxed_slice() }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|i| &*self.pairs[i].1)
    }

    /// The keys and values, sorted by key.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        self.pairs.iter().map(|(k, v)| (&**k, &**v))
    }

    /// How many keys it has.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether it has no key (never so on the wire: Envoy's ids have at least one).
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

impl std::fmt::Display for BucketId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.pairs().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}: {v}")?;
        }
        f.write_str("}")
    }
}

/// One bucket's usage since its last report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The bucket.
    pub bucket: BucketId,
    /// The time the report covers (`time_elapsed`, more than zero).
    pub elapsed: Duration,
    /// Requests the Envoy let through.
    pub allowed: u64,
    /// Requests it refused.
    pub denied: u64,
}

/// What to tell an Envoy about one of its buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Apply `strategy` for `ttl` (a TTL of zero expires the assignment at once).
    Assign {
        /// The bucket.
        bucket: BucketId,
        /// What to apply.
        strategy: Strategy,
        /// For how long.
        ttl: Duration,
    },
    /// Forget the bucket.
    Abandon {
        /// The bucket.
        bucket: BucketId,
    },
}

impl Action {
    /// The bucket it is about.
    pub fn bucket(&self) -> &BucketId {
        match self {
            Action::Assign { bucket, .. } | Action::Abandon { bucket } => bucket,
        }
    }
}

/// Where a stream's actions go ([`outbox`]): they wait in its mailbox until the stream's task
/// takes them from the [`Inbox`] and sends them. An action replaces one for the same bucket not yet
/// taken (the newest says all the Envoy needs to know), so what waits is bounded by the stream's
/// buckets however slowly its Envoy reads. Dropped — the server closed the stream — it ends the
/// inbox once what waits has been taken.
#[derive(Debug)]
pub struct Outbox {
    mailbox: Arc<Mailbox>,
}

/// The stream's side of its [`Outbox`].
#[derive(Debug)]
pub struct Inbox {
    mailbox: Arc<Mailbox>,
}

#[derive(Debug, Default)]
struct Mailbox {
    waiting: Mutex<Waiting>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct Waiting {
    /// In the order they came, one per bucket.
    actions: Vec<Action>,
    /// Where each bucket's action is in `actions`.
    at: HashMap<BucketId, usize>,
    /// The outbox was dropped.
    closed: bool,
}

/// A stream's outbox and inbox.
pub fn outbox() -> (Outbox, Inbox) {
    let mailbox = Arc::new(Mailbox::default());
    (Outbox { mailbox: Arc::clone(&mailbox) }, Inbox { mailbox })
}

impl Outbox {
    /// Leaves `actions` for the stream, each replacing one for its bucket still waiting.
    pub fn send(&self, actions: Vec<Action>) {
        let mut waiting = self.mailbox.waiting.lock();
        let waiting = &mut *waiting;
        for action in actions {
            match waiting.at.get(action.bucket()) {
                Some(&i) => waiting.actions[i] = action,
                None => {
                    waiting.at.insert(action.bucket().clone(), waiting.actions.len());
                    waiting.actions.push(action);
                }
            }
        }
        self.mailbox.changed.notify_one();
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.mailbox.waiting.lock().closed = true;
        self.mailbox.changed.notify_one();
    }
}

impl Inbox {
    /// Every action waiting, once there is one; `None` once the outbox is dropped and nothing
    /// waits.
    pub async fn recv(&mut self) -> Option<Vec<Action>> {
        let mailbox = Arc::clone(&self.mailbox);
        loop {
            let changed = mailbox.changed.notified();
            if let Some(taken) = self.try_recv() {
                return taken;
            }
            changed.await;
        }
    }

    /// Every action waiting (`Some(Some(..))`), or `Some(None)` once the outbox is dropped and
    /// nothing waits; `None` while nothing waits.
    pub fn try_recv(&mut self) -> Option<Option<Vec<Action>>> {
        let mut waiting = self.mailbox.waiting.lock();
        if !waiting.actions.is_empty() {
            waiting.at.clear();
            return Some(Some(std::mem::take(&mut waiting.actions)));
        }
        waiting.closed.then_some(None)
    }
}

/// A stream registered with [`Quotas::open`](super::Quotas::open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId(pub(super) u64);

/// Why a stream cannot be opened or go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// The server is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// No `rlqs` rules for the domain.
    #[error("no rlqs rules for domain {0:?} (rlqs.domains in the configuration)")]
    UnknownDomain(String),
    /// The stream reports more buckets than one stream may.
    #[error("this stream reports more than {0} buckets")]
    TooManyBuckets(usize),
    /// The stream is not (or no longer) registered.
    #[error("the stream is closed")]
    Closed,
}

/// The most buckets one stream may report.
pub const MAX_BUCKETS_PER_STREAM: usize = 10_000;
