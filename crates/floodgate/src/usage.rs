//! Usage: what one rule's counter holds for a key, read from the store, consuming nothing.

use std::time::Duration;

use floodgate_core::Timestamp;
use smallvec::SmallVec;

use crate::policy::{KeyBuf, build_key, push_shard};
use crate::store::{Applied, Mode, Op, Store, StoreError};
use crate::{Descriptors, Limit, Policy};

/// What a rule's counter holds for one key, now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The limit's capacity for this key (its plan's, for a limit that varies).
    pub limit: u64,
    /// What counts now: the current window's or period's count, a bucket's deficit, the permits
    /// held — at most `limit` (`limit - remaining`): a count reported past the limit shows as the
    /// limit, not its overage.
    pub used: u64,
    /// What is left.
    pub remaining: u64,
    /// The current window or calendar period, `[start, end)`, for the algorithms that have one:
    /// a fixed window's window, a sliding window's or log's trailing window (ending now), a quota's
    /// period. `None` for buckets and concurrency.
    pub period: Option<(Timestamp, Timestamp)>,
    /// Until the counter is fully replenished, with no further traffic.
    pub reset_after: Duration,
    /// For a quota: what the key counted in the calendar period before the current one. `None`
    /// for the other algorithms, which keep no past (and for a store that does not keep it).
    pub previous: Option<Previous>,
    /// The store's time of the reading.
    pub at: Timestamp,
}

/// What a quota's key counted in the calendar period before the current one: a tenant's spend last
/// month. Periods before that one are not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Previous {
    /// The count, exactly as kept (a sharded rule's shards summed): unlike [`Usage::used`], not
    /// capped at the limit, so a count reported past the limit shows whole. 0 when the key counted
    /// nothing then.
    pub used: u64,
    /// The period, `[start, end)`: `end` is the current period's start.
    pub period: (Timestamp, Timestamp),
}

/// Why usage could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// The policy has no rule of that name.
    #[error("no rule named {0:?}")]
    UnknownRule(String),
    /// The descriptors lack one the rule's key needs.
    #[error("rule {rule:?} keys by {missing:?}, which is not given")]
    MissingDescriptor {
        /// The rule.
        rule: String,
        /// The missing descriptor.
        missing: String,
    },
    /// The rule's variants exclude these descriptors (a limit that varies by a descriptor, for
    /// listed values only).
    #[error(
        "rule {0:?} does not apply to these descriptors (its limit varies by a descriptor whose value is not listed)"
    )]
    NotApplicable(String),
    /// A descriptor's value is not what the rule needs.
    #[error(transparent)]
    Engine(#[from] crate::EngineError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Policy {
    /// The usage of rule `rule` for the key `descriptors` make, from `store`, consuming nothing. A
    /// sharded rule's shards are summed.
    pub async fn usage<S: Store>(
        &self,
        store: &S,
        rule: &str,
        descriptors: &Descriptors,
    ) -> Result<Usage, UsageError> {
        self.usage_stated(store, rule, descriptors, None).await
    }

    /// [`Policy::usage`] of the counter a request stating `stated` counts on (see
    /// [`crate::stated`]): a rule's counter for a (limit, window) a caller stated.
    pub async fn usage_stated<S: Store>(
        &self,
        store: &S,
        rule: &str,
        descriptors: &Descriptors,
        stated: Option<&crate::Stated>,
    ) -> Result<Usage, UsageError> {
        let compiled = self
            .rules
            .iter()
            .find(|c| &*c.rule.name == rule)
            .ok_or_else(|| UsageError::UnknownRule(rule.to_owned()))?;
        let (limit, _) =
            compiled.rule.select(descriptors).ok_or_else(|| UsageError::NotApplicable(rule.to_owned()))?;
        let mut buf = KeyBuf::new();
        if !build_key(compiled, descriptors, &mut buf)? {
            let missing = compiled.rule.key.iter().find(|d| descriptors.get(d).is_none()).cloned();
            return Err(UsageError::MissingDescriptor {
                rule: rule.to_owned(),
                missing: missing.unwrap_or_default(),
            });
        }
        // As stated, and a quota in the calendar the descriptors choose: the tenant's own period
        // bounds.
        let (limit, _) = compiled.applied(limit, descriptors, stated, &mut buf)?;
        let limit = &*limit;
        // One op per key (one, or one per shard), each a peek of 1.
        let mut keys: SmallVec<[(std::ops::Range<usize>, &Limit); 4]> = SmallVec::new();
        match &compiled.shards {
            None => keys.push((0..buf.len(), limit)),
            Some(shards) => {
                let base = buf.len();
                let mut all = KeyBuf::new();
                for (i, share) in shards.limits.iter().enumerate() {
                    buf.truncate(base);
                    push_shard(&mut buf, i as u16);
                    let start = all.len();
                    all.extend_from_slice(&buf);
                    keys.push((start..all.len(), share));
                }
                buf = all;
            }
        }
        let ops: SmallVec<[Op<'_>; 4]> = keys
            .iter()
            .map(|(range, limit)| Op {
                key: &buf[range.clone()],
                scope_len: compiled.scope.len(),
                limit,
                cost: 1,
                enforce: true,
                on_error: compiled.rule.on_store_error,
                prefetch: None,
                block_for: None,
            })
            .collect();
        let mut applied = Applied::default();
        store.apply(&ops, Mode::Peek, &mut applied).await?;
        if let Some(error) = applied.degraded.take() {
            return Err(UsageError::Store(StoreError::Backend {
                message: format!("the store failed: {error}"),
                transient: error.is_transient(),
                source: None,
            }));
        }
        let (mut remaining, mut reset_after) = (0u64, Duration::ZERO);
        for r in &applied.results {
            // A peek reports what would be left after a request of 1; when it would pass, one more
            // is left now.
            let d = r.decision;
            remaining =
                remaining.saturating_add(if d.allowed { d.remaining.saturating_add(1) } else { d.remaining });
            reset_after = reset_after.max(d.reset_after);
        }
        let capacity = limit.capacity();
        let remaining = remaining.min(capacity);
        let at = applied.at;
        let previous = match limit {
            Limit::Quota(q) => applied
                .results
                .iter()
                .try_fold(0u64, |sum, r| Some(sum.saturating_add(r.previous?)))
                .map(|used| Previous { used, period: q.previous_period(at) }),
            _ => None,
        };
        Ok(Usage {
            limit: capacity,
            used: capacity - remaining,
            remaining,
            period: period(limit, at),
            reset_after,
            previous,
            at,
        })
    }
}

/// The window or period `limit` counts in at `now`.
fn period(limit: &Limit, now: Timestamp) -> Option<(Timestamp, Timestamp)> {
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
    match limit {
        Limit::FixedWindow(a) => {
            let w = micros(a.window());
            let start = now.as_micros() / w * w;
            Some((Timestamp::from_micros(start), Timestamp::from_micros(start.saturating_add(w))))
        }
        Limit::SlidingWindow(a) => {
            Some((Timestamp::from_micros(now.as_micros().saturating_sub(micros(a.window()))), now))
        }
        Limit::SlidingLog(a) => {
            Some((Timestamp::from_micros(now.as_micros().saturating_sub(micros(a.window()))), now))
        }
        Limit::Quota(q) => Some(q.calendar().bounds(now)),
        Limit::TokenBucket(_) | Limit::Gcra(_) | Limit::Concurrency(_) | Limit::Budget(_) => None,
    }
}
