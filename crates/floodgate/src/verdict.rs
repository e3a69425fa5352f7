//! The [`Verdict`]: the answer for one request, allowed or not, and why, limit by limit.

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{Decision, Grant, Timestamp};
use smallvec::SmallVec;

use crate::PartitionKey;
use crate::store::StoreError;

/// What happened to one limit, as counted in metrics (`floodgate_decisions_total{result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The limit allowed the request.
    Allowed,
    /// The limit denied the request.
    Denied,
    /// A shadowed limit (action `shadow`, or outside its rollout) would have denied; it did not.
    ShadowDenied,
    /// A `tag` limit would have denied; the request passes, marked.
    Tagged,
    /// The store failed and the rule fails open.
    ErrorAllowed,
    /// The store failed and the rule fails closed.
    ErrorDenied,
    /// The store failed and this instance's local share of the limit allowed
    /// ([`OnStoreError::Local`](crate::OnStoreError::Local)).
    LocalAllowed,
    /// The store failed and this instance's local share of the limit denied.
    LocalDenied,
}

impl Outcome {
    /// Every outcome, in declaration order: `Outcome::ALL[o as usize] == o`.
    ///
    /// ```
    /// use floodgate::Outcome;
    /// assert!(Outcome::ALL.iter().enumerate().all(|(i, o)| *o as usize == i));
    /// ```
    pub const ALL: [Outcome; 8] = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::ShadowDenied,
        Outcome::Tagged,
        Outcome::ErrorAllowed,
        Outcome::ErrorDenied,
        Outcome::LocalAllowed,
        Outcome::LocalDenied,
    ];

    /// The metric label: `allowed`, `denied`, `shadow_denied`, `tagged`, `error_allowed`,
    /// `error_denied`, `local_allowed` or `local_denied`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::Tagged => "tagged",
            Outcome::ErrorAllowed => "error_allowed",
            Outcome::ErrorDenied => "error_denied",
            Outcome::LocalAllowed => "local_allowed",
            Outcome::LocalDenied => "local_denied",
        }
    }

    /// Whether this outcome denies the request.
    pub fn denies(self) -> bool {
        matches!(self, Outcome::Denied | Outcome::ErrorDenied | Outcome::LocalDenied)
    }
}

/// One rule's part in a verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitOutcome {
    /// The rule's name.
    pub rule: Arc<str>,
    /// The rule's position in its policy ([`Policy::rules`](crate::Policy::rules) order): a front
    /// door that keeps something per rule (metric handles, say) indexes it by this, with no lookup
    /// by name.
    pub index: usize,
    /// Which hit of the request the limit applied to (its position in the hits given to
    /// [`Policy::evaluate`](crate::Policy::evaluate); always 0 for a request of one descriptor set).
    pub hit: usize,
    /// What its limit decided.
    pub decision: Decision,
    /// What that means for the request.
    pub outcome: Outcome,
    /// Whether the limit is enforced for this request (action `deny` and inside its rollout), as
    /// opposed to shadowed or tagging: only enforced limits are advertised in headers.
    pub enforced: bool,
    /// The window advertised in `RateLimit-Policy` (`w=`).
    pub window: Duration,
    /// The cost dimension the rule counts (`requests`, `tokens`, ...; see
    /// [`Rule::cost`](crate::Rule::cost)).
    pub dimension: Arc<str>,
    /// Whether the limit is a calendar quota (a 429 says "quota exceeded" rather than "rate limited").
    pub quota: bool,
    /// The model to switch to: set when the limit tagged the request ([`Outcome::Tagged`]) under
    /// a plan that degrades past its limit ([`ByDescriptor::degrading`](crate::ByDescriptor::degrading)).
    pub degrade_to: Option<Arc<str>>,
    /// What was consumed, to refund or release later.
    pub grant: Option<Grant>,
    /// Whether the limit is a concurrency limit (of requests in flight): its grant, if any, is a
    /// permit that must be released.
    pub permit: bool,
    /// The shard the grant was taken from, for a sharded rule (see
    /// [`Rule::shards`](crate::Rule::shards)): what is given back goes to the same shard.
    pub shard: Option<u16>,
    /// The partition key of the request's key, for an enforced limit of a rule that advertises one
    /// ([`Rule::partition_key`](crate::Rule::partition_key)).
    pub partition: Option<PartitionKey>,
}

/// A verdict's limits: the first [`INLINE_LIMITS`] held in the verdict itself, more on the heap.
pub type Limits = SmallVec<[LimitOutcome; INLINE_LIMITS]>;

/// How many limit outcomes a [`Verdict`] holds without an allocation. A verdict is moved several
/// times on its way from the store to the response (each move copies it whole), so it is kept to
/// what most requests have, one or two limits; a request that more rules apply to allocates once,
/// and its verdict's moves then copy less.
pub const INLINE_LIMITS: usize = 2;

/// The answer for one request: allowed or not, and why, limit by limit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Verdict {
    /// Whether the request may pass: every enforced limit allowed (or failed open).
    pub allowed: bool,
    /// The store's time of the decision.
    pub at: Timestamp,
    /// One entry per rule that applied, in the order of the hits, then of the rules.
    pub limits: Limits,
    /// Set when the store failed and the rules' failure policies decided instead: the store's own
    /// error, typed ([`StoreError::is_transient`], its `source()`), so that whoever decides what to
    /// do about it (a fallback, a breaker, a log) can tell a timeout from a permanent fault.
    pub store_error: Option<Arc<StoreError>>,
}

impl Verdict {
    /// For a denied request, when the same request may pass: the longest `retry_after` among the
    /// denying limits (the others only replenish meanwhile).
    pub fn retry_after(&self) -> Option<Duration> {
        self.limits.iter().filter(|l| l.outcome.denies()).filter_map(|l| l.decision.retry_after).max()
    }

    /// The limit to advertise first in headers: when denied, the denying limit with the longest
    /// wait; otherwise the enforced limit with the least remaining (then the longest reset).
    pub fn most_restrictive(&self) -> Option<&LimitOutcome> {
        most_restrictive(self.allowed, self.limits.iter())
    }

    /// The limits that were enforced (not shadowed or tagging), in rule order.
    pub fn enforced(&self) -> impl Iterator<Item = &LimitOutcome> {
        self.limits.iter().filter(|l| l.enforced)
    }

    /// The rules that tagged this request.
    pub fn tags(&self) -> impl Iterator<Item = &str> {
        self.limits.iter().filter(|l| l.outcome == Outcome::Tagged).map(|l| &*l.rule)
    }

    /// The model the request should switch to: the first limit's
    /// [`LimitOutcome::degrade_to`], when the request is allowed.
    pub fn degrade_to(&self) -> Option<&str> {
        if !self.allowed {
            return None;
        }
        self.limits.iter().find_map(|l| l.degrade_to.as_deref())
    }

    /// Whether the request holds concurrency permits to release with
    /// [`Engine::release`](crate::Engine::release).
    pub fn holds_permits(&self) -> bool {
        self.limits.iter().any(|l| l.permit && l.grant.is_some())
    }

    /// The limits that applied to hit `hit` (see [`LimitOutcome::hit`]).
    pub fn of_hit(&self, hit: usize) -> impl Iterator<Item = &LimitOutcome> {
        self.limits.iter().filter(move |l| l.hit == hit)
    }

    /// Whether hit `hit` was within its limits on its own: none of its enforced limits denied.
    /// (The request as a whole may still be denied by another hit, and then nothing was taken.)
    pub fn hit_allowed(&self, hit: usize) -> bool {
        !self.of_hit(hit).any(|l| l.outcome.denies())
    }

    /// [`Verdict::most_restrictive`] among the limits of hit `hit`, as if it were alone.
    pub fn most_restrictive_of_hit(&self, hit: usize) -> Option<&LimitOutcome> {
        most_restrictive(self.hit_allowed(hit), self.of_hit(hit))
    }
}

fn most_restrictive<'a>(
    allowed: bool,
    limits: impl Iterator<Item = &'a LimitOutcome>,
) -> Option<&'a LimitOutcome> {
    if !allowed {
        return limits
            .filter(|l| l.outcome.denies())
            .max_by_key(|l| (l.decision.retry_after.unwrap_or_default(), l.decision.reset_after));
    }
    limits
        .filter(|l| l.enforced)
        .min_by_key(|l| (l.decision.remaining, std::cmp::Reverse(l.decision.reset_after)))
}
