//! The [`Engine`]: descriptors and a cost in, a [`Verdict`] out.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use floodgate_core::{CostError, Decision, Grant, Timestamp};
use smallvec::SmallVec;

use crate::key::push_field;
use crate::rule::{CompiledRule, Policy};
use crate::store::{Applied, Mode, Op, Store, StoreError};
use crate::{Action, Descriptors, Limit, MemoryStore, OnStoreError};

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
}

impl Outcome {
    /// The metric label: `allowed`, `denied`, `shadow_denied`, `tagged`, `error_allowed` or
    /// `error_denied`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::Tagged => "tagged",
            Outcome::ErrorAllowed => "error_allowed",
            Outcome::ErrorDenied => "error_denied",
        }
    }

    /// Whether this outcome denies the request.
    pub fn denies(self) -> bool {
        matches!(self, Outcome::Denied | Outcome::ErrorDenied)
    }
}

/// One rule's part in a verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitOutcome {
    /// The rule's name.
    pub rule: Arc<str>,
    /// What its limit decided.
    pub decision: Decision,
    /// What that means for the request.
    pub outcome: Outcome,
    /// Whether the limit is enforced for this request (action `deny` and inside its rollout), as
    /// opposed to shadowed or tagging: only enforced limits are advertised in headers.
    pub enforced: bool,
    /// The window advertised in `RateLimit-Policy` (`w=`).
    pub window: Duration,
    /// Whether the limit is a calendar quota (a 429 says "quota exceeded" rather than "rate limited").
    pub quota: bool,
    /// What was consumed, to refund or release later.
    pub grant: Option<Grant>,
    /// Whether the grant is a concurrency permit that must be released.
    pub permit: bool,
}

/// The answer for one request: allowed or not, and why, limit by limit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Verdict {
    /// Whether the request may pass: every enforced limit allowed (or failed open).
    pub allowed: bool,
    /// The store's time of the decision.
    pub at: Timestamp,
    /// One entry per rule that applied, in rule order.
    pub limits: SmallVec<[LimitOutcome; 4]>,
    /// Set when the store failed and the rules' failure policies decided instead.
    pub store_error: Option<String>,
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
        if !self.allowed {
            return self
                .limits
                .iter()
                .filter(|l| l.outcome.denies())
                .max_by_key(|l| (l.decision.retry_after.unwrap_or_default(), l.decision.reset_after));
        }
        self.enforced().min_by_key(|l| (l.decision.remaining, std::cmp::Reverse(l.decision.reset_after)))
    }

    /// The limits that were enforced (not shadowed or tagging), in rule order.
    pub fn enforced(&self) -> impl Iterator<Item = &LimitOutcome> {
        self.limits.iter().filter(|l| l.enforced)
    }

    /// The rules that tagged this request.
    pub fn tags(&self) -> impl Iterator<Item = &str> {
        self.limits.iter().filter(|l| l.outcome == Outcome::Tagged).map(|l| &*l.rule)
    }

    /// Whether the request holds concurrency permits to release with [`Engine::release`].
    pub fn holds_permits(&self) -> bool {
        self.limits.iter().any(|l| l.permit && l.grant.is_some())
    }
}

/// A request that can never pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The cost is zero, or above what an enforced rule can ever grant.
    #[error("rule {rule:?}: {source}")]
    Cost {
        /// The rule (empty for a zero cost).
        rule: Arc<str>,
        /// Why.
        #[source]
        source: CostError,
    },
}

/// The engine: the policy in force plus a store.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use std::num::NonZeroU64;
/// use std::time::Duration;
/// use floodgate::{Descriptors, Engine, MemoryStore, Policy, Rule};
/// use floodgate_core::FixedWindow;
///
/// let per_user = Rule::new("per-user", FixedWindow::try_new(NonZeroU64::new(2).unwrap(), Duration::from_secs(60))?)
///     .key(["user"]);
/// let engine = Engine::new(Policy::new([per_user])?, MemoryStore::new());
/// let alice = Descriptors::new().with("user", "alice");
/// assert!(engine.check(&alice, 1).await?.allowed);
/// assert!(engine.check(&alice, 1).await?.allowed);
/// let third = engine.check(&alice, 1).await?;
/// assert!(!third.allowed);
/// assert!(third.retry_after().is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Engine<S = MemoryStore> {
    policy: ArcSwap<Policy>,
    store: S,
}

/// The key buffer of one request: room for a few keys without allocating.
type KeyBuf = SmallVec<[u8; 256]>;

/// One applied rule of a request being built.
struct Planned<'p> {
    rule: &'p CompiledRule,
    /// The rule's limit for this request (see [`crate::Rule::vary_by`]).
    limit: &'p Limit,
    key: std::ops::Range<usize>,
    /// The rule's action for this request.
    action: Action,
    enforce: bool,
    /// The cost can never be granted; only allowed for non-enforced rules, which then record a
    /// would-deny without asking the store.
    impossible: Option<CostError>,
}

impl<S: Store> Engine<S> {
    /// An engine applying `policy` over `store`.
    pub fn new(policy: Policy, store: S) -> Self {
        Engine { policy: ArcSwap::from_pointee(policy), store }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    /// Replaces the policy atomically; requests in flight finish on the old one. State is keyed by
    /// rule name and key descriptors, so counters of rules that keep both carry over.
    pub fn set_policy(&self, policy: Policy) {
        self.policy.store(Arc::new(policy));
    }

    /// Checks a request of `cost`: allowed only if every enforced limit allows, and then it consumes
    /// from them; **a denied request consumes nothing from any limit**.
    pub async fn check(&self, descriptors: &Descriptors, cost: u64) -> Result<Verdict, EngineError> {
        self.run(descriptors, cost, Mode::Check).await
    }

    /// What [`Engine::check`] would answer, consuming nothing.
    pub async fn peek(&self, descriptors: &Descriptors, cost: u64) -> Result<Verdict, EngineError> {
        self.run(descriptors, cost, Mode::Peek).await
    }

    /// Consumes `cost` after the fact (e.g. tokens known once a response is done); never denies,
    /// and any cost is accepted, also beyond a limit's capacity.
    pub async fn report(&self, descriptors: &Descriptors, cost: u64) -> Result<Verdict, EngineError> {
        self.run(descriptors, cost, Mode::Report).await
    }

    /// Gives back everything `verdict` consumed (a reservation that was not used).
    pub async fn refund(&self, descriptors: &Descriptors, verdict: &Verdict) -> Result<(), StoreError> {
        self.give_back(descriptors, verdict, false).await
    }

    /// Releases the concurrency permits `verdict` holds.
    pub async fn release(&self, descriptors: &Descriptors, verdict: &Verdict) -> Result<(), StoreError> {
        self.give_back(descriptors, verdict, true).await
    }

    /// Forgets the state of `rule` for the key made from `descriptors`. Returns whether the rule
    /// applies to them and had state.
    pub async fn reset(&self, rule: &str, descriptors: &Descriptors) -> Result<bool, StoreError> {
        let policy = self.policy.load();
        let Some(compiled) = policy.rules.iter().find(|c| &*c.rule.name == rule) else { return Ok(false) };
        let mut buf = KeyBuf::new();
        if !build_key(compiled, descriptors, &mut buf) {
            return Ok(false);
        }
        self.store.reset(&buf).await
    }

    async fn give_back(
        &self,
        descriptors: &Descriptors,
        verdict: &Verdict,
        permits_only: bool,
    ) -> Result<(), StoreError> {
        let policy = self.policy.load_full();
        let mut buf = KeyBuf::new();
        for l in &verdict.limits {
            let Some(grant) = l.grant else { continue };
            if permits_only && !l.permit {
                continue;
            }
            let Some(compiled) = policy.rules.iter().find(|c| c.rule.name == l.rule) else { continue };
            let Some((limit, _)) = compiled.rule.select(descriptors) else { continue };
            buf.clear();
            if build_key(compiled, descriptors, &mut buf) {
                self.store.refund(&buf, limit, grant).await?;
            }
        }
        Ok(())
    }

    async fn run(&self, descriptors: &Descriptors, cost: u64, mode: Mode) -> Result<Verdict, EngineError> {
        if cost == 0 {
            return Err(EngineError::Cost { rule: Arc::from(""), source: CostError::Zero });
        }
        let policy = self.policy.load_full();
        let mut buf = KeyBuf::new();
        let mut planned: SmallVec<[Planned<'_>; 4]> = SmallVec::new();
        for compiled in &policy.rules {
            if !matches(compiled, descriptors) {
                continue;
            }
            let Some((limit, action)) = compiled.rule.select(descriptors) else { continue };
            let start = buf.len();
            if !build_key(compiled, descriptors, &mut buf) {
                buf.truncate(start);
                continue;
            }
            let key = start..buf.len();
            let rule = &compiled.rule;
            let enforce = action == Action::Deny && in_rollout(&buf[key.clone()], compiled.rollout_bp);
            let impossible = match mode {
                Mode::Report => None,
                _ => floodgate_core::validate_cost(cost, limit.capacity()).err(),
            };
            if let (true, Some(source)) = (enforce, impossible) {
                return Err(EngineError::Cost { rule: rule.name.clone(), source });
            }
            planned.push(Planned { rule: compiled, limit, action, key, enforce, impossible });
        }

        let ops: SmallVec<[Op<'_>; 4]> = planned
            .iter()
            .filter(|p| p.impossible.is_none())
            .map(|p| Op {
                key: &buf[p.key.clone()],
                scope_len: p.rule.scope.len(),
                limit: p.limit,
                cost,
                enforce: p.enforce,
            })
            .collect();
        if planned.is_empty() {
            return Ok(Verdict { allowed: true, ..Verdict::default() });
        }

        let mut applied = Applied::default();
        if let Err(error) = self.store.apply(&ops, mode, &mut applied).await {
            return Ok(failure_verdict(&planned, &error));
        }

        let mut results = applied.results.iter();
        let mut limits: SmallVec<[LimitOutcome; 4]> = SmallVec::new();
        for p in &planned {
            let rule = &p.rule.rule;
            let (decision, grant) = match p.impossible {
                Some(_) => (never_allowed(p.limit), None),
                None => {
                    let r = results.next().expect("one result per op");
                    (r.decision, r.grant)
                }
            };
            let outcome = match (decision.allowed, p.enforce, p.action) {
                (true, _, _) => Outcome::Allowed,
                (false, true, _) => Outcome::Denied,
                (false, false, Action::Tag) => Outcome::Tagged,
                (false, false, _) => Outcome::ShadowDenied,
            };
            limits.push(LimitOutcome {
                rule: rule.name.clone(),
                decision,
                outcome,
                enforced: p.enforce,
                window: p.limit.policy_window(applied.at),
                quota: matches!(p.limit, Limit::Quota(_)),
                grant,
                permit: p.limit.holds_permits(),
            });
        }
        let allowed = !limits.iter().any(|l| l.outcome.denies());
        Ok(Verdict { allowed, at: applied.at, limits, store_error: None })
    }
}

impl Engine<MemoryStore> {
    /// An engine over a fresh [`MemoryStore`] whose sweeper is running.
    pub fn in_memory(policy: Policy) -> Self {
        let store = MemoryStore::new();
        store.start_sweeper();
        Engine::new(policy, store)
    }
}

fn matches(compiled: &CompiledRule, descriptors: &Descriptors) -> bool {
    compiled.rule.conditions.iter().all(|(name, condition)| match (condition, descriptors.get(name)) {
        (_, None) => false,
        (crate::Condition::Present, Some(_)) => true,
        (crate::Condition::OneOf(values), Some(v)) => values.iter().any(|x| x == v),
        (crate::Condition::NoneOf(values), Some(v)) => !values.iter().any(|x| x == v),
    })
}

/// Appends the rule's key for `descriptors`; false when a key descriptor is missing.
fn build_key(compiled: &CompiledRule, descriptors: &Descriptors, buf: &mut KeyBuf) -> bool {
    buf.extend_from_slice(&compiled.scope);
    for name in &compiled.rule.key {
        match descriptors.get(name) {
            Some(value) => push_field(buf, value.as_bytes()),
            None => return false,
        }
    }
    true
}

/// Whether a key falls in the enforced share of a rollout: a stable FNV-1a hash of the key, so the
/// same client is always on the same side, on every instance and across restarts.
fn in_rollout(key: &[u8], rollout_bp: u16) -> bool {
    if rollout_bp >= 10_000 {
        return true;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % 10_000) < u64::from(rollout_bp)
}

fn never_allowed(limit: &Limit) -> Decision {
    Decision {
        allowed: false,
        limit: limit.capacity(),
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: None,
    }
}

/// How long a client denied by a failing store is asked to wait.
const STORE_ERROR_RETRY: Duration = Duration::from_secs(1);

fn failure_verdict(planned: &[Planned<'_>], error: &StoreError) -> Verdict {
    let limits: SmallVec<[LimitOutcome; 4]> = planned
        .iter()
        .map(|p| {
            let rule = &p.rule.rule;
            let closed = p.enforce && rule.on_store_error == OnStoreError::FailClosed;
            let decision = Decision {
                allowed: !closed,
                limit: p.limit.capacity(),
                remaining: 0,
                reset_after: Duration::ZERO,
                retry_after: closed.then_some(STORE_ERROR_RETRY),
            };
            LimitOutcome {
                rule: rule.name.clone(),
                decision,
                outcome: if closed { Outcome::ErrorDenied } else { Outcome::ErrorAllowed },
                enforced: p.enforce,
                window: Duration::ZERO,
                quota: false,
                grant: None,
                permit: false,
            }
        })
        .collect();
    let allowed = !limits.iter().any(|l| l.outcome.denies());
    Verdict { allowed, at: Timestamp::EPOCH, limits, store_error: Some(error.to_string()) }
}
