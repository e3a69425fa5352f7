//! The [`Engine`]: descriptors and a cost in, a [`Verdict`] out — the [`Policy`] in force, which
//! can be replaced while requests run, over a [`Store`]; and [`EngineError`], a request that can
//! never pass.

use std::sync::Arc;

use arc_swap::ArcSwap;
use floodgate_core::CostError;

use crate::store::{Mode, Store, StoreError};
use crate::{Descriptors, Hit, Impossible, MemoryStore, Policy, Verdict};

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
    /// A descriptor's value is not what the rule needs: an `ip` that is not an IP address, for a
    /// rule that groups addresses by prefix ([`Rule::ip_prefix`](crate::Rule::ip_prefix)), or a
    /// time zone or anchor that is not one, for a quota whose calendar comes from a descriptor
    /// ([`Rule::calendar_by`](crate::Rule::calendar_by)).
    #[error("rule {rule:?}: descriptor {descriptor:?} is {value:?}, which is not {expected}")]
    Descriptor {
        /// The rule.
        rule: Arc<str>,
        /// The descriptor's name.
        descriptor: Arc<str>,
        /// Its value.
        value: String,
        /// What the rule needs, e.g. "an IP address".
        expected: &'static str,
    },
    /// A value the request states for the rule is not allowed (see [`crate::stated`]).
    #[error("rule {rule:?}: {source}")]
    Stated {
        /// The rule.
        rule: Arc<str>,
        /// What is wrong with it.
        #[source]
        source: crate::StatedError,
    },
    /// The request states a value that no rule applying to it takes from requests (see
    /// [`Rule::statable`](crate::Rule::statable)).
    #[error("the request states a {field}, and no rule that applies to it takes one from requests")]
    Unclaimed {
        /// `limit`, `window` or `block_for`.
        field: &'static str,
    },
    /// The request lacks a descriptor the rule needs and has no default for: the time zone or
    /// anchor of a quota whose calendar comes from a descriptor.
    #[error(
        "rule {rule:?}: descriptor {descriptor:?} is missing, and the rule's calendar comes from it (no default is set)"
    )]
    MissingDescriptor {
        /// The rule.
        rule: Arc<str>,
        /// The descriptor's name.
        descriptor: Arc<str>,
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
///
/// The policy can be replaced while requests run ([`Engine::set_policy`]): whoever holds the
/// engine (a tower layer, say) decides on the new policy from the next request on.
#[derive(Debug)]
pub struct Engine<S = MemoryStore> {
    policy: ArcSwap<Policy>,
    store: S,
}

impl<S: Store> Engine<S> {
    /// An engine applying `policy` over `store`.
    pub fn new(policy: Policy, store: S) -> Self {
        Engine { policy: ArcSwap::from_pointee(policy), store }
    }

    /// An engine applying `policy` (shared with whoever else holds it) over `store`.
    pub fn from_shared(policy: Arc<Policy>, store: S) -> Self {
        Engine { policy: ArcSwap::new(policy), store }
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

    /// [`Engine::set_policy`] with a policy shared with others (a server keeps its own reference).
    pub fn set_shared_policy(&self, policy: Arc<Policy>) {
        self.policy.store(policy);
    }

    /// Checks a request of `cost`: allowed only if every enforced limit allows, and then it consumes
    /// from them; **a denied request consumes nothing from any limit**.
    pub async fn check(&self, descriptors: &Descriptors, cost: u64) -> Result<Verdict, EngineError> {
        self.one(descriptors, cost, Mode::Check).await
    }

    /// What [`Engine::check`] would answer, consuming nothing.
    pub async fn peek(&self, descriptors: &Descriptors, cost: u64) -> Result<Verdict, EngineError> {
        self.one(descriptors, cost, Mode::Peek).await
    }

    /// Consumes `cost` after the fact (e.g. tokens known once a response is done); never denies,
    /// and any cost is accepted, also beyond a limit's capacity.
    pub async fn report(&self, descriptors: &Descriptors, cost: u64) -> Result<Verdict, EngineError> {
        self.one(descriptors, cost, Mode::Report).await
    }

    /// Decides one hit in `mode` — a check, a peek or a report, of one cost or of
    /// [`Costs`](crate::Costs) per dimension ([`Hit::with_costs`]); a cost some enforced limit can
    /// never grant is an error.
    pub async fn decide(&self, mode: Mode, hit: Hit<'_>) -> Result<Verdict, EngineError> {
        let policy = self.policy.load();
        policy.evaluate(&self.store, mode, &[hit], Impossible::Error).await
    }

    /// Checks several hits at once, all-or-nothing, in **one** store call (see
    /// [`Policy::evaluate`]): Envoy's descriptors of one request. A cost some enforced limit can
    /// never grant denies the request ([`Impossible::Deny`]).
    pub async fn check_hits(&self, hits: &[Hit<'_>]) -> Result<Verdict, EngineError> {
        let policy = self.policy.load();
        policy.evaluate(&self.store, Mode::Check, hits, Impossible::Deny).await
    }

    /// Evaluates `hits` against `policy` (rather than the engine's own) on the engine's store: for
    /// front doors that read the policy from a snapshot of their own.
    pub async fn evaluate(
        &self,
        policy: &Policy,
        mode: Mode,
        hits: &[Hit<'_>],
        impossible: Impossible,
    ) -> Result<Verdict, EngineError> {
        policy.evaluate(&self.store, mode, hits, impossible).await
    }

    /// Gives back everything `verdict` consumed (a reservation that was not used).
    pub async fn refund(&self, descriptors: &Descriptors, verdict: &Verdict) -> Result<(), StoreError> {
        let policy = self.policy.load();
        policy.give_back(&self.store, &[Hit::new(descriptors, 0)], verdict, false).await
    }

    /// Releases the concurrency permits `verdict` holds.
    pub async fn release(&self, descriptors: &Descriptors, verdict: &Verdict) -> Result<(), StoreError> {
        self.policy.load().release_permits(&self.store, descriptors, verdict).await
    }

    /// Forgets the state of `rule` for the key made from `descriptors`. Returns whether the rule
    /// applies to them and had state.
    pub async fn reset(&self, rule: &str, descriptors: &Descriptors) -> Result<bool, StoreError> {
        let policy = self.policy.load();
        policy.reset(&self.store, rule, descriptors).await
    }

    /// [`Engine::check`] without waiting, when the store can answer at once (the memory store
    /// always can); `None` otherwise (see [`Policy::evaluate_now`]).
    pub fn check_now(&self, descriptors: &Descriptors, cost: u64) -> Option<Result<Verdict, EngineError>> {
        let policy = self.policy.load();
        policy.evaluate_now(&self.store, Mode::Check, &[Hit::new(descriptors, cost)], Impossible::Error)
    }

    async fn one(&self, descriptors: &Descriptors, cost: u64, mode: Mode) -> Result<Verdict, EngineError> {
        let policy = self.policy.load();
        policy.evaluate(&self.store, mode, &[Hit::new(descriptors, cost)], Impossible::Error).await
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
