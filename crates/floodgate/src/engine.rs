//! The [`Engine`]: descriptors and a cost in, a [`Verdict`] out.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use floodgate_core::{CostError, Decision, Grant, Timestamp};
use smallvec::SmallVec;

use crate::key::push_field;
use crate::rule::{CompiledRule, IP, Policy, Shards};
use crate::store::{Applied, Mode, Op, PrefetchBatch, Store, StoreError};
use crate::{Action, Costs, Descriptors, Limit, MemoryStore, NotAnAddress, OnStoreError};

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
    /// ([`OnStoreError::Local`]).
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
    /// The rule's position in its policy ([`Policy::rules`] order): a front door that keeps
    /// something per rule (metric handles, say) indexes it by this, with no lookup by name.
    pub index: usize,
    /// Which hit of the request the limit applied to (its position in the hits given to
    /// [`Policy::evaluate`]; always 0 for a request of one descriptor set).
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
    /// Whether the grant is a concurrency permit that must be released.
    pub permit: bool,
    /// The shard the grant was taken from, for a sharded rule (see
    /// [`Rule::shards`](crate::Rule::shards)): what is given back goes to the same shard.
    pub shard: Option<u16>,
}

/// The answer for one request: allowed or not, and why, limit by limit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Verdict {
    /// Whether the request may pass: every enforced limit allowed (or failed open).
    pub allowed: bool,
    /// The store's time of the decision.
    pub at: Timestamp,
    /// One entry per rule that applied, in the order of the hits, then of the rules.
    pub limits: SmallVec<[LimitOutcome; 4]>,
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

    /// Whether the request holds concurrency permits to release with [`Engine::release`].
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

/// One descriptor set of a request and its cost: what one Envoy descriptor, or one `/v1/check`
/// body, asks for. A request is one or more hits, decided together in one store call.
#[derive(Debug, Clone, Copy)]
pub struct Hit<'a> {
    /// What the request is.
    pub descriptors: &'a Descriptors,
    /// What it costs in `requests` (at least 1 unless `costs` are given).
    pub cost: u64,
    /// What it costs per dimension, when given: then each rule takes the cost of its own
    /// dimension ([`Rule::cost`](crate::Rule::cost)), and `cost` is the `requests` among them.
    pub costs: Option<&'a Costs>,
}

impl<'a> Hit<'a> {
    /// A hit of `cost` requests for `descriptors`: rules counting another dimension do not apply.
    pub fn new(descriptors: &'a Descriptors, cost: u64) -> Self {
        Hit { descriptors, cost, costs: None }
    }

    /// A hit costing `costs` for `descriptors`: each rule takes the cost of its own dimension, and
    /// a rule whose dimension costs 0 (or is not named) does not apply — it can neither deny nor
    /// consume. At least one dimension must cost 1 or more.
    pub fn with_costs(descriptors: &'a Descriptors, costs: &'a Costs) -> Self {
        Hit { descriptors, cost: costs.get(crate::cost::REQUESTS), costs: Some(costs) }
    }

    /// What the hit costs a rule that counts `dimension`.
    pub fn cost_in(&self, dimension: &str) -> u64 {
        match self.costs {
            Some(costs) => costs.get(dimension),
            None if dimension == crate::cost::REQUESTS => self.cost,
            None => 0,
        }
    }

    /// What the hit costs `rule`.
    fn cost_for(&self, rule: &CompiledRule) -> u64 {
        match self.costs {
            None if rule.counts_requests => self.cost,
            None => 0,
            Some(costs) => costs.get(&rule.rule.cost),
        }
    }

    /// Whether the hit costs nothing at all (an error).
    fn costs_nothing(&self) -> bool {
        match self.costs {
            None => self.cost == 0,
            Some(costs) => costs.is_zero(),
        }
    }
}

/// What [`Policy::evaluate`] does with a cost that an enforced limit can never grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Impossible {
    /// Fail the request with [`EngineError::Cost`], asking the store nothing: the caller made a
    /// mistake that waiting cannot fix (the HTTP API answers 422, the tower layer 400).
    #[default]
    Error,
    /// Deny the request: the limit is reported denied with no `retry_after`, and the other limits
    /// as a peek would (nothing is consumed). For protocols that can only say "over limit", such
    /// as Envoy's.
    Deny,
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

/// The key buffer of one request: room for a few keys without allocating.
pub(crate) type KeyBuf = SmallVec<[u8; 256]>;

/// One applied rule of a request being built.
struct Planned<'p> {
    rule: &'p CompiledRule,
    /// The rule's position in the policy.
    index: usize,
    /// The hit it applies to.
    hit: usize,
    /// The rule's limit for this request (see [`crate::Rule::vary_by`]): its own, or in the
    /// request's calendar ([`crate::Rule::calendar_by`]).
    limit: Cow<'p, Limit>,
    key: std::ops::Range<usize>,
    /// The rule's action for this request.
    action: Action,
    /// The model past the limit, for a plan that degrades.
    degrade_to: Option<&'p Arc<str>>,
    enforce: bool,
    /// The cost can never be granted: the limit records a would-deny without asking the store.
    impossible: bool,
    /// The store op deciding it (several hits with the same key share one), when not impossible.
    op: usize,
    /// Whether this is the first limit of its op: only that one carries the op's grant, so that a
    /// shared grant is given back once.
    first_of_op: bool,
}

/// One store op being planned: a distinct key, and the summed cost of the hits that share it.
struct Merged<'p> {
    key: std::ops::Range<usize>,
    scope_len: usize,
    limit: Cow<'p, Limit>,
    cost: u64,
    enforce: bool,
    on_error: OnStoreError,
    prefetch: Option<PrefetchBatch>,
    /// A sharded rule's shards, and the one this op is on (the key's last two bytes).
    shard: Option<(&'p Shards, u16)>,
}

/// A request being decided: its keys, the limits that apply and the store ops they make.
#[derive(Default)]
struct Request<'p> {
    buf: KeyBuf,
    planned: SmallVec<[Planned<'p>; 4]>,
    merged: SmallVec<[Merged<'p>; 4]>,
    /// Set for a change made at most once ([`Policy::report_once`]): sharded rules take the shard
    /// this seed picks ([`Shards::pick`]), not the next one, so that the change made again lands
    /// where it landed before.
    shard_seed: Option<u64>,
}

impl<'p> Request<'p> {
    /// The store ops, borrowing the keys (complete once planning is done).
    fn ops(&self) -> SmallVec<[Op<'_>; 4]> {
        self.merged
            .iter()
            .map(|m| Op {
                key: &self.buf[m.key.clone()],
                scope_len: m.scope_len,
                limit: &m.limit,
                cost: m.cost,
                enforce: m.enforce,
                on_error: m.on_error,
                prefetch: m.prefetch,
            })
            .collect()
    }

    /// After a denial in [`Mode::Check`]: when only sharded limits denied, moves each of them to
    /// its next shard (once per request: the caller asks the store again at most once) and returns
    /// true.
    fn next_shards(&mut self, applied: &Applied) -> bool {
        if applied.degraded.is_some() || applied.results.len() != self.merged.len() {
            return false;
        }
        let denies = |i: usize, m: &Merged<'_>| m.enforce && !applied.results[i].decision.allowed;
        let mut sharded_denials = false;
        for (i, m) in self.merged.iter().enumerate() {
            if denies(i, m) {
                if m.shard.is_none() {
                    return false;
                }
                sharded_denials = true;
            }
        }
        if !sharded_denials {
            return false;
        }
        for i in 0..self.merged.len() {
            let Some((shards, shard)) = self.merged[i].shard.filter(|_| denies(i, &self.merged[i])) else {
                continue;
            };
            let next = shards.after(shard);
            let m = &mut self.merged[i];
            self.buf[m.key.end - 2..m.key.end].copy_from_slice(&next.to_be_bytes());
            let limit = &shards.limits[usize::from(next)];
            m.limit = Cow::Borrowed(limit);
            m.shard = Some((shards, next));
            for p in self.planned.iter_mut().filter(|p| p.op == i) {
                p.limit = Cow::Borrowed(limit);
            }
        }
        true
    }

    /// The verdict from what the store answered.
    fn verdict(&self, result: Result<(), StoreError>, applied: &Applied) -> Verdict {
        match result {
            Ok(()) => match &applied.degraded {
                None => verdict(&self.planned, &self.merged, applied),
                Some(error) => fallback_verdict(&self.planned, &self.merged, applied, Arc::clone(error)),
            },
            Err(error) => failure_verdict(&self.planned, error),
        }
    }
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
    /// [`Costs`] per dimension ([`Hit::with_costs`]); a cost some enforced limit can never grant
    /// is an error.
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
        let policy = self.policy.load();
        policy.give_back(&self.store, &[Hit::new(descriptors, 0)], verdict, true).await
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

// === impl Policy: deciding ===

impl Policy {
    /// Decides a request of one or more hits on `store`, in **one** store call, all-or-nothing:
    /// with `mode` [`Mode::Check`], allowed only if every enforced limit of every hit allows, and
    /// then it consumes from them; a denied request consumes nothing from any limit.
    ///
    /// Hits whose limits share a key (the same rule and the same values, as two Envoy descriptors
    /// of one request may) are one op for the store, of their summed cost, decided once; each
    /// hit's [`LimitOutcome`] reports it, and only the first carries its grant.
    ///
    /// A zero cost is an error. A cost some enforced limit can never grant is an error or a denial,
    /// as `impossible` says; for limits that are not enforced it is recorded as a would-deny,
    /// without asking the store.
    pub async fn evaluate<S: Store>(
        &self,
        store: &S,
        mode: Mode,
        hits: &[Hit<'_>],
        impossible: Impossible,
    ) -> Result<Verdict, EngineError> {
        let mut request = Request::default();
        let store_mode = match self.prepare(mode, hits, impossible, &mut request)? {
            Some(store_mode) => store_mode,
            None => return Ok(Verdict { allowed: true, ..Verdict::default() }),
        };
        let mut applied = Applied::default();
        let mut result = {
            let ops = request.ops();
            store.apply(&ops, store_mode, &mut applied).await
        };
        // A sharded limit's shard was empty: its next shard is asked, once.
        if store_mode == Mode::Check && result.is_ok() && request.next_shards(&applied) {
            let ops = request.ops();
            result = store.apply(&ops, store_mode, &mut applied).await;
        }
        Ok(request.verdict(result, &applied))
    }

    /// Reports `hit` — consumes its costs from every limit that applies, never denies — at most
    /// once for `once` ([`Store::adjust_once`]). A sharded rule takes the shard `seed` picks, so
    /// that the report made again lands on the same shard. Returns whether this call applied it.
    pub(crate) async fn report_once<S: Store>(
        &self,
        store: &S,
        hit: Hit<'_>,
        seed: u64,
        once: crate::store::Once<'_>,
    ) -> Result<bool, StoreError> {
        let mut request = Request { shard_seed: Some(seed), ..Request::default() };
        let planned = self.prepare(Mode::Report, &[hit], Impossible::Error, &mut request);
        match planned {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(false),
            // Descriptors and costs a reservation was granted with plan again; a reload in between
            // may have made them invalid.
            Err(error) => {
                return Err(StoreError::Backend {
                    message: format!("the report cannot be planned: {error}"),
                    transient: false,
                    source: None,
                });
            }
        }
        let ops = request.ops();
        store.adjust_once(&ops, crate::store::Adjustment::Report, once).await
    }

    /// Gives each of `back` — a rule's name, the grant to give back to it, and the shard it was
    /// taken from — back on the key `descriptors` make, at most once for `once`
    /// ([`Store::adjust_once`]), in one store call. A rule gone since (a reload) is skipped; a
    /// sharded rule whose shard is not known takes the shard `seed` picks, the same one each time.
    /// Returns whether this call gave anything back.
    pub(crate) async fn give_back_once<S: Store>(
        &self,
        store: &S,
        descriptors: &Descriptors,
        back: &[(&str, Grant, Option<u16>)],
        seed: u64,
        once: crate::store::Once<'_>,
    ) -> Result<bool, StoreError> {
        let mut request = Request::default();
        let mut grants: SmallVec<[Grant; 4]> = SmallVec::new();
        for (k, &(rule, grant, shard)) in back.iter().enumerate() {
            let Some(compiled) = self.rules.iter().find(|c| *c.rule.name == *rule) else { continue };
            let start = request.buf.len();
            let seed = Some(seed.wrapping_add(k as u64));
            let Some(limit) = self.give_back_to(compiled, descriptors, shard, seed, &mut request.buf) else {
                continue;
            };
            request.merged.push(Merged {
                key: start..request.buf.len(),
                scope_len: compiled.scope.len(),
                limit,
                cost: grant.cost,
                enforce: true,
                on_error: compiled.rule.on_store_error,
                prefetch: None,
                shard: None,
            });
            grants.push(grant);
        }
        if grants.is_empty() {
            return Ok(false);
        }
        let ops = request.ops();
        store.adjust_once(&ops, crate::store::Adjustment::GiveBack(&grants), once).await
    }

    /// [`Policy::evaluate`] without waiting, when the store can answer at once
    /// ([`Store::try_apply_now`]: the memory store always can); `None` when it cannot, and the
    /// caller must await [`Policy::evaluate`] instead. For front doors that decide inside a
    /// synchronous call, such as a tower service's `call`, so that no future is allocated.
    pub fn evaluate_now<S: Store>(
        &self,
        store: &S,
        mode: Mode,
        hits: &[Hit<'_>],
        impossible: Impossible,
    ) -> Option<Result<Verdict, EngineError>> {
        let mut request = Request::default();
        let store_mode = match self.prepare(mode, hits, impossible, &mut request) {
            Ok(Some(store_mode)) => store_mode,
            Ok(None) => return Some(Ok(Verdict { allowed: true, ..Verdict::default() })),
            Err(e) => return Some(Err(e)),
        };
        let mut applied = Applied::default();
        let mut result = {
            let ops = request.ops();
            store.try_apply_now(&ops, store_mode, &mut applied)?
        };
        if store_mode == Mode::Check && result.is_ok() && request.next_shards(&applied) {
            let ops = request.ops();
            result = store.try_apply_now(&ops, store_mode, &mut applied)?;
        }
        Some(Ok(request.verdict(result, &applied)))
    }

    /// Plans `request`; returns the mode to ask the store in, or `None` when no rule applies.
    fn prepare<'p>(
        &'p self,
        mode: Mode,
        hits: &[Hit<'_>],
        impossible: Impossible,
        request: &mut Request<'p>,
    ) -> Result<Option<Mode>, EngineError> {
        let denied = self.plan(mode, hits, impossible, request)?;
        if request.planned.is_empty() {
            return Ok(None);
        }
        // A request already denied by a cost it can never be granted consumes nothing: the store
        // only reports the other limits, as a peek.
        Ok(Some(if denied && mode == Mode::Check { Mode::Peek } else { mode }))
    }

    /// Finds the rules that apply to each hit, appends their keys to the request's buffer and
    /// plans one store op per distinct key. Returns whether an enforced limit can never grant its
    /// cost (with [`Impossible::Deny`]).
    fn plan<'p>(
        &'p self,
        mode: Mode,
        hits: &[Hit<'_>],
        impossible: Impossible,
        request: &mut Request<'p>,
    ) -> Result<bool, EngineError> {
        let Request { buf, planned, merged: ops, shard_seed } = request;
        let shard_seed = *shard_seed;
        let mut denied = false;
        let replaced = self.replaced(hits);
        for (hit_index, hit) in hits.iter().enumerate() {
            if hit.costs_nothing() {
                return Err(EngineError::Cost { rule: Arc::from(""), source: CostError::Zero });
            }
            for (index, compiled) in self.rules.iter().enumerate() {
                let hit_cost = hit.cost_for(compiled);
                if hit_cost == 0 || replaced.contains(&index) || !matches(compiled, hit.descriptors) {
                    continue;
                }
                let Some((limit, action, degrade_to)) = compiled.rule.select_variant(hit.descriptors) else {
                    continue;
                };
                let start = buf.len();
                match build_key(compiled, hit.descriptors, buf) {
                    Ok(true) => {}
                    Ok(false) => {
                        buf.truncate(start);
                        continue;
                    }
                    Err(error) => {
                        buf.truncate(start);
                        return Err(error);
                    }
                }
                let key = start..buf.len();
                let limit = match compiled.in_calendar(limit, hit.descriptors) {
                    Ok(limit) => limit,
                    Err(error) => {
                        buf.truncate(start);
                        return Err(error);
                    }
                };
                let enforce = action.enforces() && in_rollout(&buf[key.clone()], compiled.rollout_bp);
                // A sharded rule: the next shard's number ends the key, and its share is the limit.
                let (limit, key, shard) = match &compiled.shards {
                    Some(shards) => {
                        let i = match shard_seed {
                            Some(seed) => shards.pick(seed.wrapping_add(index as u64)),
                            None => shards.next(),
                        };
                        push_shard(buf, i);
                        (Cow::Borrowed(&shards.limits[usize::from(i)]), start..buf.len(), Some((shards, i)))
                    }
                    None => (limit, key, None),
                };
                // The same key for an earlier hit: one op of the summed cost.
                let shared = planned
                    .iter()
                    .find(|p| !p.impossible && p.index == index && buf[p.key.clone()] == buf[key.clone()])
                    .map(|p| p.op);
                let cost = match shared {
                    Some(op) => ops[op].cost.saturating_add(hit_cost),
                    None => hit_cost,
                };
                let never = match mode {
                    Mode::Report => None,
                    _ => floodgate_core::validate_cost(cost, limit.capacity()).err(),
                };
                let mut p = Planned {
                    rule: compiled,
                    index,
                    hit: hit_index,
                    limit: limit.clone(),
                    key,
                    action,
                    degrade_to,
                    enforce,
                    impossible: never.is_some(),
                    op: usize::MAX,
                    first_of_op: false,
                };
                if let Some(source) = never {
                    if enforce {
                        match impossible {
                            Impossible::Error => {
                                return Err(EngineError::Cost { rule: compiled.rule.name.clone(), source });
                            }
                            Impossible::Deny => denied = true,
                        }
                    }
                    planned.push(p);
                    continue;
                }
                match shared {
                    Some(op) => {
                        ops[op].cost = cost;
                        ops[op].enforce |= enforce;
                        p.op = op;
                    }
                    None => {
                        p.op = ops.len();
                        p.first_of_op = true;
                        ops.push(Merged {
                            key: p.key.clone(),
                            scope_len: compiled.scope.len(),
                            limit,
                            cost,
                            enforce,
                            on_error: compiled.rule.on_store_error,
                            prefetch: compiled.rule.prefetch,
                            shard,
                        });
                    }
                }
                planned.push(p);
            }
        }
        Ok(denied)
    }

    /// The positions of the rules that another rule applying to `hits` replaces (see
    /// [`Rule::replaces`](crate::Rule::replaces)); none when no rule of the policy replaces any.
    fn replaced(&self, hits: &[Hit<'_>]) -> SmallVec<[usize; 2]> {
        let mut replaced = SmallVec::new();
        if !self.replacing {
            return replaced;
        }
        for c in self.rules.iter().filter(|c| !c.rule.replaces.is_empty()) {
            let applies = hits.iter().any(|h| {
                h.cost_for(c) > 0 && matches(c, h.descriptors) && c.rule.select(h.descriptors).is_some()
            });
            if !applies {
                continue;
            }
            for name in &c.rule.replaces {
                if let Some(i) = self.rules.iter().position(|o| o.rule.name == *name)
                    && !replaced.contains(&i)
                {
                    replaced.push(i);
                }
            }
        }
        replaced
    }

    /// Gives back what `verdict`'s limits consumed (only concurrency permits when `permits_only`),
    /// each under the key of the hit it applied to.
    pub(crate) async fn give_back<S: Store>(
        &self,
        store: &S,
        hits: &[Hit<'_>],
        verdict: &Verdict,
        permits_only: bool,
    ) -> Result<(), StoreError> {
        let mut buf = KeyBuf::new();
        for l in &verdict.limits {
            let Some(grant) = l.grant else { continue };
            if permits_only && !l.permit {
                continue;
            }
            let Some(hit) = hits.get(l.hit) else { continue };
            let Some(compiled) = self.rule_of(l) else { continue };
            buf.clear();
            let Some(limit) = self.give_back_to(compiled, hit.descriptors, l.shard, None, &mut buf) else {
                continue;
            };
            store.refund(&buf, &limit, grant).await?;
        }
        Ok(())
    }

    /// Appends to `buf` the key of `compiled` that a grant taken for `descriptors` is given back
    /// to, and returns the limit to give it back under; `None` when the rule no longer applies to
    /// them. A sharded rule's grant goes back to `shard`, the one it was taken from; when that is
    /// not known (or no longer exists: a reload changed the rule's shards), to the shard `seed`
    /// picks ([`Shards::pick`]: the same one when a change is made again), else to the shard the
    /// next request takes.
    pub(crate) fn give_back_to<'p>(
        &'p self,
        compiled: &'p CompiledRule,
        descriptors: &Descriptors,
        shard: Option<u16>,
        seed: Option<u64>,
        buf: &mut KeyBuf,
    ) -> Option<Cow<'p, Limit>> {
        let (limit, _) = compiled.rule.select(descriptors)?;
        let start = buf.len();
        if !matches!(build_key(compiled, descriptors, buf), Ok(true)) {
            buf.truncate(start);
            return None;
        }
        // In the calendar it was taken in (the request's descriptors chose it).
        let Ok(limit) = compiled.in_calendar(limit, descriptors) else {
            buf.truncate(start);
            return None;
        };
        let Some(shards) = &compiled.shards else { return Some(limit) };
        let i = match (shard, seed) {
            (Some(i), _) if usize::from(i) < shards.limits.len() => i,
            (_, Some(seed)) => shards.pick(seed),
            _ => shards.next(),
        };
        push_shard(buf, i);
        Some(Cow::Borrowed(&shards.limits[usize::from(i)]))
    }

    /// Forgets the state of `rule` for the key made from `descriptors` on `store`. Returns whether
    /// the rule applies to them and had state (see [`Engine::reset`]).
    pub async fn reset<S: Store>(
        &self,
        store: &S,
        rule: &str,
        descriptors: &Descriptors,
    ) -> Result<bool, StoreError> {
        let Some(compiled) = self.rules.iter().find(|c| &*c.rule.name == rule) else { return Ok(false) };
        let mut buf = KeyBuf::new();
        // A value the rule cannot key by (an `ip` that is no address) has no state.
        if !matches!(build_key(compiled, descriptors, &mut buf), Ok(true)) {
            return Ok(false);
        }
        let Some(shards) = &compiled.shards else { return store.reset(&buf).await };
        // Every shard of a sharded rule.
        let base = buf.len();
        let mut existed = false;
        for i in 0..shards.limits.len() {
            buf.truncate(base);
            push_shard(&mut buf, i as u16);
            existed |= store.reset(&buf).await?;
        }
        Ok(existed)
    }

    /// The rule a limit outcome came from: by its position when this is the policy that decided
    /// it, else by name (a reload came in between).
    fn rule_of(&self, l: &LimitOutcome) -> Option<&CompiledRule> {
        match self.rules.get(l.index) {
            Some(c) if c.rule.name == l.rule => Some(c),
            _ => self.rules.iter().find(|c| c.rule.name == l.rule),
        }
    }
}

/// The verdict of a request from the store's results.
fn verdict(planned: &[Planned<'_>], merged: &[Merged<'_>], applied: &Applied) -> Verdict {
    let limits: SmallVec<[LimitOutcome; 4]> = planned
        .iter()
        .map(|p| {
            if p.impossible {
                return decided(p, never_allowed(&p.limit), None, applied.at, false);
            }
            let r = &applied.results[p.op];
            let mut outcome =
                decided(p, r.decision, if p.first_of_op { r.grant } else { None }, applied.at, false);
            outcome.shard = merged[p.op].shard.map(|(_, i)| i);
            outcome
        })
        .collect();
    let allowed = !limits.iter().any(|l| l.outcome.denies());
    Verdict { allowed, at: applied.at, limits, store_error: None }
}

/// A limit's outcome from its decision (by the store, or by a fallback's local share when
/// `local`).
fn decided(
    p: &Planned<'_>,
    decision: Decision,
    grant: Option<Grant>,
    at: Timestamp,
    local: bool,
) -> LimitOutcome {
    let outcome = match (decision.allowed, p.enforce, p.action) {
        (true, _, _) if local => Outcome::LocalAllowed,
        (true, _, _) => Outcome::Allowed,
        (false, true, _) if local => Outcome::LocalDenied,
        (false, true, _) => Outcome::Denied,
        (false, false, Action::Tag) => Outcome::Tagged,
        (false, false, _) => Outcome::ShadowDenied,
    };
    LimitOutcome {
        rule: p.rule.rule.name.clone(),
        index: p.index,
        hit: p.hit,
        decision,
        outcome,
        enforced: p.enforce,
        window: p.limit.policy_window(at),
        dimension: p.rule.rule.cost.clone(),
        quota: matches!(*p.limit, Limit::Quota(_)),
        degrade_to: if outcome == Outcome::Tagged { p.degrade_to.cloned() } else { None },
        grant,
        permit: p.limit.holds_permits(),
        shard: None,
    }
}

fn matches(compiled: &CompiledRule, descriptors: &Descriptors) -> bool {
    compiled.rule.conditions.iter().all(|(name, condition)| condition.holds(descriptors.get(name)))
}

/// Appends the rule's key for `descriptors`; false when a key descriptor is missing.
pub(crate) fn build_key(
    compiled: &CompiledRule,
    descriptors: &Descriptors,
    buf: &mut KeyBuf,
) -> Result<bool, EngineError> {
    buf.extend_from_slice(&compiled.scope);
    for name in &compiled.rule.key {
        let Some(value) = descriptors.get(name) else { return Ok(false) };
        match compiled.rule.ip_prefix {
            Some(prefix) if name == IP => {
                let mut group: SmallVec<[u8; 48]> = SmallVec::new();
                prefix.write_group(value, &mut group).map_err(|NotAnAddress| EngineError::Descriptor {
                    rule: compiled.rule.name.clone(),
                    descriptor: Arc::from(IP),
                    value: value.to_owned(),
                    expected: "an IP address (the rule groups addresses by prefix)",
                })?;
                push_field(buf, &group);
            }
            _ => push_field(buf, value.as_bytes()),
        }
    }
    Ok(true)
}

/// Ends a sharded rule's key with shard `i`: a field of fixed width whose last two bytes are the
/// shard's number, so that moving a planned key to another shard rewrites them in place.
pub(crate) fn push_shard(buf: &mut KeyBuf, i: u16) {
    let [hi, lo] = i.to_be_bytes();
    push_field(buf, &[b'#', hi, lo]);
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

fn failure_verdict(planned: &[Planned<'_>], error: StoreError) -> Verdict {
    let limits: SmallVec<[LimitOutcome; 4]> = planned.iter().map(failed).collect();
    let allowed = !limits.iter().any(|l| l.outcome.denies());
    Verdict { allowed, at: Timestamp::EPOCH, limits, store_error: Some(Arc::new(error)) }
}

/// A limit the failing store could not decide: its rule's policy does (a rule that would fall back
/// locally fails open when no fallback decided it).
fn failed(p: &Planned<'_>) -> LimitOutcome {
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
        index: p.index,
        hit: p.hit,
        decision,
        outcome: if closed { Outcome::ErrorDenied } else { Outcome::ErrorAllowed },
        enforced: p.enforce,
        window: Duration::ZERO,
        dimension: rule.cost.clone(),
        quota: false,
        degrade_to: None,
        grant: None,
        permit: false,
        shard: None,
    }
}

/// The verdict when the store failed and a fallback decided the ops that fall back locally
/// (see [`Applied::degraded`]): those limits by their local decision, the others by their rules'
/// policies. A local decision carries no grant: what it consumed is the fallback's to account for,
/// and nothing of it may be given back to the store.
fn fallback_verdict(
    planned: &[Planned<'_>],
    merged: &[Merged<'_>],
    applied: &Applied,
    error: Arc<StoreError>,
) -> Verdict {
    let limits: SmallVec<[LimitOutcome; 4]> = planned
        .iter()
        .map(|p| {
            if p.impossible {
                return decided(p, never_allowed(&p.limit), None, applied.at, false);
            }
            let local = merged[p.op].on_error == OnStoreError::Local && !p.limit.holds_permits();
            match applied.results.get(p.op) {
                Some(r) if local => decided(p, r.decision, None, applied.at, true),
                _ => failed(p),
            }
        })
        .collect();
    let allowed = !limits.iter().any(|l| l.outcome.denies());
    Verdict { allowed, at: applied.at, limits, store_error: Some(error) }
}
