//! Rules: which requests a limit applies to, how its key is made, and what happens on denial.

use std::borrow::Cow;
use std::sync::Arc;

use crate::calendar::Calendars;
use crate::key::push_field;
use crate::{CalendarBy, Descriptors, EngineError, IpPrefix, Limit};

/// The descriptor [`Rule::ip_prefix`] groups.
pub(crate) const IP: &str = "ip";
use crate::store::PrefetchBatch;

/// What a rule does when its limit would deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Action {
    /// Deny the request (the default).
    #[default]
    Deny,
    /// Count and report, never deny: for rolling out a new limit safely.
    Shadow,
    /// Allow, but mark the request (a header and a metric) for risk systems downstream.
    Tag,
    /// Enforced like `Deny`; a front door that can hold a request (the gateway, the tower layer)
    /// waits for capacity up to `max_wait` before it answers, and passes the request once the
    /// limit allows it (see [`crate::delay`]). Front doors that answer at once (the check API,
    /// Envoy RLS) deny, with the exact `retry_after`.
    Delay {
        /// The longest a request waits for capacity; past it, it is denied.
        max_wait: std::time::Duration,
    },
}

impl Action {
    /// Whether the action enforces its limit (deny or delay), as opposed to shadowing or tagging.
    pub fn enforces(self) -> bool {
        matches!(self, Action::Deny | Action::Delay { .. })
    }
}

/// What to do when the store fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum OnStoreError {
    /// Let the request through (the default): availability over enforcement.
    #[default]
    FailOpen,
    /// Deny the request: enforcement over availability.
    FailClosed,
    /// Decide from an in-process limiter holding this instance's share of the limit, where the
    /// store is wrapped in a [`Fallback`](crate::store::Fallback) (`ceil(limit × local_factor /
    /// instances)`, same algorithm, same key); without one it fails open. Not for concurrency
    /// limits: a permit taken locally could not be released on the store.
    Local,
}

impl OnStoreError {
    /// Every policy, in the order the docs list them.
    pub const ALL: [OnStoreError; 3] =
        [OnStoreError::FailOpen, OnStoreError::FailClosed, OnStoreError::Local];

    /// As written in configuration: `fail_open`, `fail_closed` or `local`.
    ///
    /// ```
    /// use floodgate::OnStoreError;
    /// assert_eq!(OnStoreError::FailClosed.as_str(), "fail_closed");
    /// assert_eq!(OnStoreError::from_name("local"), Some(OnStoreError::Local));
    /// assert_eq!(OnStoreError::from_name("fail-open"), None);
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            OnStoreError::FailOpen => "fail_open",
            OnStoreError::FailClosed => "fail_closed",
            OnStoreError::Local => "local",
        }
    }

    /// The policy named `name` (exactly as [`OnStoreError::as_str`] writes it).
    pub fn from_name(name: &str) -> Option<OnStoreError> {
        OnStoreError::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

/// A condition on one descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// The descriptor equals one of these values.
    OneOf(Vec<String>),
    /// The descriptor is present, whatever its value.
    Present,
    /// The descriptor is present and equals none of these values (a catch-all that more specific
    /// rules carve values out of).
    NoneOf(Vec<String>),
    /// The descriptor matches this pattern.
    Like(Pattern),
    /// The descriptor is present and matches none of these patterns.
    NotLike(Vec<Pattern>),
}

impl Condition {
    /// Whether `value` (the descriptor's, or `None` when the request lacks it) satisfies the
    /// condition. Every condition needs the descriptor present.
    pub fn holds(&self, value: Option<&str>) -> bool {
        let Some(v) = value else { return false };
        match self {
            Condition::Present => true,
            Condition::OneOf(values) => values.iter().any(|x| x == v),
            Condition::NoneOf(values) => !values.iter().any(|x| x == v),
            Condition::Like(pattern) => pattern.matches(v),
            Condition::NotLike(patterns) => !patterns.iter().any(|p| p.matches(v)),
        }
    }
}

/// A value pattern: `*` matches any run of characters (none included), anywhere and any number
/// of times; every other character matches itself. `/api/*/action` matches `/api/123/action`
/// but not `/api/123/other`; `files/*` matches `files/` and `files/a.pdf`.
///
/// ```
/// use floodgate::Pattern;
/// let p = Pattern::new("/api/*/resource/*/action");
/// assert!(p.matches("/api/v1/resource/42/action"));
/// assert!(!p.matches("/api/v1/resource/42"));
/// assert!(Pattern::new("value*").matches("value"));
/// assert!(Pattern::new("exact").matches("exact") && !Pattern::new("exact").matches("exactly"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pattern {
    text: String,
}

impl Pattern {
    /// The pattern `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Pattern { text: text.into() }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern has a `*` at all.
    pub fn is_wildcard(&self) -> bool {
        self.text.contains('*')
    }

    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        let mut parts = self.text.split('*');
        let first = parts.next().unwrap_or_default();
        let Some(mut rest) = value.strip_prefix(first) else { return false };
        let Some(last) = parts.next_back() else { return rest.is_empty() };
        // Each middle part at its leftmost place after the one before: for `*`-only patterns the
        // leftmost place never rules out a match that a later place would allow.
        for part in parts {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        rest.ends_with(last)
    }
}

/// A rule failed validation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuleError {
    /// Rule names must be non-empty.
    #[error("a rule name must not be empty")]
    EmptyName,
    /// Two rules share a name.
    #[error("duplicate rule name {0:?}")]
    DuplicateName(String),
    /// The rollout percentage is outside 0–100.
    #[error("rule {rule:?}: rollout {percent}% is not between 0% and 100%")]
    Rollout {
        /// The rule.
        rule: String,
        /// The given percentage.
        percent: f64,
    },
    /// The same descriptor appears twice in a key.
    #[error("rule {rule:?}: descriptor {descriptor:?} appears twice in the key")]
    DuplicateKeyDescriptor {
        /// The rule.
        rule: String,
        /// The repeated descriptor.
        descriptor: String,
    },
    /// A concurrency rule asks for the local fallback.
    #[error(
        "rule {rule:?}: on_store_error local is not available for the concurrency algorithm (a permit taken locally could not be released on the store): use fail_open or fail_closed"
    )]
    LocalConcurrency {
        /// The rule.
        rule: String,
    },
    /// A rule asks for batch leases on an algorithm where they could not be exact.
    #[error(
        "rule {rule:?}: prefetch is not available for the {algorithm} algorithm (units taken early would not be worth the same when spent later); it is for fixed_window, sliding_window, token_bucket, gcra and quota"
    )]
    PrefetchUnsupported {
        /// The rule.
        rule: String,
        /// Its algorithm.
        algorithm: crate::LimitKind,
    },
    /// A rule's `shards` cannot split its limit exactly.
    #[error("rule {rule:?}: shards: {reason}")]
    Shards {
        /// The rule.
        rule: String,
        /// Why not.
        reason: String,
    },
    /// A rule groups `ip` by prefix but its key does not name `ip`.
    #[error("rule {rule:?}: ip_prefix groups the ip descriptor, but the rule's key does not name ip")]
    IpPrefixWithoutIp {
        /// The rule.
        rule: String,
    },
    /// A rule's cost dimension is not a valid name.
    #[error(
        "rule {rule:?}: cost {dimension:?} is not a cost dimension: expected requests or a name of lowercase letters, digits and _ (at most 64), such as tokens"
    )]
    CostDimension {
        /// The rule.
        rule: String,
        /// The name given.
        dimension: String,
    },
    /// A rule's calendar from descriptors cannot be built (see [`Rule::calendar_by`]).
    #[error("rule {rule:?}: {reason}")]
    Calendar {
        /// The rule.
        rule: String,
        /// Why not.
        reason: String,
    },
    /// A rule replaces a rule the policy does not have, or itself.
    #[error("rule {rule:?}: replaces {replaced:?}, which is not another rule of this policy")]
    UnknownReplaced {
        /// The rule.
        rule: String,
        /// The name it replaces.
        replaced: String,
    },
}

/// One rule: match conditions, key, limit, action.
///
/// ```
/// use std::num::NonZeroU64;
/// use std::time::Duration;
/// use floodgate::{Rule, Limit};
/// use floodgate_core::SlidingWindow;
///
/// let per_user = Rule::new(
///     "chat-per-user",
///     SlidingWindow::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(60))?,
/// )
/// .when("route", "POST /chat")
/// .key(["user"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub(crate) name: Arc<str>,
    pub(crate) conditions: Vec<(String, Condition)>,
    pub(crate) key: Vec<String>,
    pub(crate) limit: Limit,
    pub(crate) action: Action,
    /// Limits and actions that vary with a descriptor's value (e.g. the tenant's `plan`).
    pub(crate) by: Option<ByDescriptor>,
    /// Enforced share of keys, in percent.
    pub(crate) rollout: f64,
    pub(crate) on_store_error: OnStoreError,
    /// Rules this one replaces when both apply to one request (envoyproxy/ratelimit's `replaces`).
    pub(crate) replaces: Vec<Arc<str>>,
    /// Batch leases for a hot key (see [`Rule::prefetch`]).
    pub(crate) prefetch: Option<PrefetchBatch>,
    /// Keys the limit is spread over (see [`Rule::shards`]).
    pub(crate) shards: Option<u16>,
    /// The `ip` descriptor grouped by network prefix (see [`Rule::ip_prefix`]).
    pub(crate) ip_prefix: Option<IpPrefix>,
    /// The cost dimension the rule counts (see [`Rule::cost`]).
    pub(crate) cost: Arc<str>,
    /// A quota's time zone and anchor from descriptors (see [`Rule::calendar_by`]).
    pub(crate) calendar: Option<CalendarBy>,
}

impl Rule {
    /// A rule named `name` applying `limit` to every request, with one key for all (a global limit)
    /// until [`Rule::key`] names descriptors.
    pub fn new(name: impl Into<Arc<str>>, limit: impl Into<Limit>) -> Self {
        Rule {
            name: name.into(),
            conditions: Vec::new(),
            key: Vec::new(),
            limit: limit.into(),
            action: Action::Deny,
            by: None,
            rollout: 100.0,
            on_store_error: OnStoreError::FailOpen,
            replaces: Vec::new(),
            prefetch: None,
            shards: None,
            ip_prefix: None,
            cost: Arc::from(crate::cost::REQUESTS),
            calendar: None,
        }
    }

    /// Reads a quota's time zone, its anchor or both from the request's descriptors, so that one
    /// rule serves tenants in many zones and billing days: each request's quota counts in the
    /// periods of its own calendar (the rule's period, in the zone and from the anchor the
    /// descriptors give). Counters stay per key: a tenant that moves to another zone keeps its key,
    /// and its count restarts when its period does. Only for quota limits (each of the rule's
    /// variants); [`Policy::new`] refuses it on others, with a default or mapped setting that is not
    /// valid, and with [`Rule::shards`]. A request whose setting is not valid, or that lacks the
    /// descriptor when no default is set, fails with
    /// [`EngineError::Descriptor`](crate::EngineError::Descriptor) or
    /// [`EngineError::MissingDescriptor`](crate::EngineError::MissingDescriptor).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use std::num::NonZeroU64;
    /// use floodgate::{CalendarBy, Descriptors, Engine, FromDescriptor, Policy, Rule};
    /// use floodgate_core::{Calendar, Quota, calendar::Period};
    ///
    /// let monthly = Quota::new(NonZeroU64::new(100).unwrap(), Calendar::utc(Period::Month { anchor_day: 1 }));
    /// let rule = Rule::new("monthly", monthly).key(["tenant"]).calendar_by(
    ///     CalendarBy::new()
    ///         .time_zone(FromDescriptor::new("tz").default("UTC"))
    ///         .anchor(FromDescriptor::new("billing_day").default("1")),
    /// );
    /// let engine = Engine::in_memory(Policy::new([rule])?);
    /// let tenant = Descriptors::new().with("tenant", "acme").with("tz", "Asia/Tokyo").with("billing_day", "15");
    /// assert!(engine.check(&tenant, 1).await?.allowed);
    /// let martian = Descriptors::new().with("tenant", "m").with("tz", "Mars/Olympus");
    /// assert!(engine.check(&martian, 1).await.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn calendar_by(mut self, calendar: CalendarBy) -> Self {
        self.calendar = Some(calendar);
        self
    }

    /// Where the rule's quota calendar comes from, when from descriptors (see
    /// [`Rule::calendar_by`]).
    pub fn calendar_source(&self) -> Option<&CalendarBy> {
        self.calendar.as_ref()
    }

    /// The descriptors the rule's quota calendar is read from (see [`Rule::calendar_by`]): none,
    /// or its time zone's and its anchor's.
    pub fn calendar_descriptors(&self) -> impl Iterator<Item = &str> {
        self.calendar
            .iter()
            .flat_map(|c| c.time_zone_source().into_iter().chain(c.anchor_source()).map(|f| f.descriptor()))
    }

    /// The cost dimension the rule counts: `requests` (the default; a call's plain cost) or
    /// another name such as `tokens`, which a call gives in its [`Costs`](crate::Costs). A call
    /// whose costs leave the dimension out (or give it 0) is not subject to the rule. The name
    /// must be a valid dimension ([`valid_dimension`](crate::cost::valid_dimension));
    /// [`Policy::new`] refuses others.
    pub fn cost(mut self, dimension: impl Into<Arc<str>>) -> Self {
        self.cost = dimension.into();
        self
    }

    /// The cost dimension the rule counts (see [`Rule::cost`]).
    pub fn cost_dimension(&self) -> &str {
        &self.cost
    }

    /// When this rule and one of the rules named `rules` both apply to a request (to any of its
    /// hits), the other is not applied at all: not checked, not charged, not reported — what
    /// envoyproxy/ratelimit's `replaces` does, e.g. for a higher limit on one endpoint of a
    /// category. Two rules may replace each other; then neither applies.
    pub fn replaces<I, S>(mut self, rules: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Arc<str>>,
    {
        self.replaces = rules.into_iter().map(Into::into).collect();
        self
    }

    /// Applies only when `descriptor` equals `value` (repeat to require several).
    pub fn when(mut self, descriptor: impl Into<String>, value: impl Into<String>) -> Self {
        self.conditions.push((descriptor.into(), Condition::OneOf(vec![value.into()])));
        self
    }

    /// Applies only when `descriptor` satisfies `condition`.
    pub fn when_condition(mut self, descriptor: impl Into<String>, condition: Condition) -> Self {
        self.conditions.push((descriptor.into(), condition));
        self
    }

    /// The descriptors whose values make the key: one counter per distinct combination.
    /// A request lacking one of them is not subject to this rule.
    pub fn key<I, S>(mut self, descriptors: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.key = descriptors.into_iter().map(Into::into).filter(|d| d != "global").collect();
        self
    }

    /// Varies the limit (and optionally the action) with the value of `descriptor`: a request whose
    /// value is listed gets that variant; any other value gets the rule's own limit and action, or —
    /// with [`ByDescriptor::only_listed`] — is not subject to the rule. Counters are per key, not per
    /// variant: a tenant moving from `free` to `pro` keeps its usage under the new limit.
    pub fn vary_by(mut self, by: ByDescriptor) -> Self {
        self.by = Some(by);
        self
    }

    /// The limit and action that apply to a request with `descriptors`, or `None` when the rule's
    /// variants exclude it.
    pub(crate) fn select(&self, descriptors: &crate::Descriptors) -> Option<(&Limit, Action)> {
        self.select_variant(descriptors).map(|(limit, action, _)| (limit, action))
    }

    /// [`Rule::select`], with the model a request over the limit degrades to (see
    /// [`ByDescriptor::degrading`]).
    pub(crate) fn select_variant(
        &self,
        descriptors: &crate::Descriptors,
    ) -> Option<(&Limit, Action, Option<&Arc<str>>)> {
        let Some(by) = &self.by else { return Some((&self.limit, self.action, None)) };
        let value = descriptors.get(&by.descriptor);
        match value.and_then(|v| by.variants.iter().find(|variant| variant.value == v)) {
            Some(v) => Some((&v.limit, v.action.unwrap_or(self.action), v.degrade_to.as_ref())),
            None if by.only_listed => None,
            None => Some((&self.limit, self.action, None)),
        }
    }

    /// What happens when the limit would deny.
    pub fn action(mut self, action: Action) -> Self {
        self.action = action;
        self
    }

    /// Enforces the rule for `percent` % of keys (a stable hash of the key decides which) and
    /// shadows it for the rest.
    pub fn rollout(mut self, percent: f64) -> Self {
        self.rollout = percent;
        self
    }

    /// What happens when the store fails.
    pub fn on_store_error(mut self, policy: OnStoreError) -> Self {
        self.on_store_error = policy;
        self
    }

    /// Lets a [`Prefetch`](crate::store::Prefetch) store take up to `batch.size()` units of this
    /// rule's limit in one store call and spend them locally (hot keys). Only for algorithms
    /// where units taken early are worth the same when spent later
    /// ([`LimitKind::prefetches`](crate::LimitKind::prefetches)); [`Policy::new`] refuses it on
    /// the others.
    pub fn prefetch(mut self, batch: PrefetchBatch) -> Self {
        self.prefetch = Some(batch);
        self
    }

    /// Spreads the limit over `n` store keys (at least 2) — for a hot global limit, so that one
    /// Redis key (one cluster slot) does not take every request. Each key holds a share of the
    /// limit ([`Limit::split`]: the shares sum to exactly the limit); a request takes the next
    /// shard in turn (round robin, per instance) and, when that shard denies, tries the next one
    /// once. A request's cost must fit one shard. Not for `concurrency`, nor with limits that vary
    /// by a descriptor; [`Policy::new`] refuses them.
    pub fn shards(mut self, n: u16) -> Self {
        self.shards = Some(n);
        self
    }

    /// Keys the `ip` descriptor by its network (`address/length`, host bits cleared) rather than
    /// by the whole address, so that the addresses of one network share one counter: the usual
    /// practice for IPv6, where one client holds a whole /64. IPv4 addresses written as IPv6
    /// (`::ffff:a.b.c.d`) count as IPv4. A request whose `ip` is not an address fails with
    /// [`EngineError::Descriptor`](crate::EngineError::Descriptor). The key must name `ip`;
    /// [`Policy::new`] refuses it otherwise.
    pub fn ip_prefix(mut self, prefix: IpPrefix) -> Self {
        self.ip_prefix = Some(prefix);
        self
    }

    /// How the rule groups the `ip` descriptor, if it does.
    pub fn ip_grouping(&self) -> Option<IpPrefix> {
        self.ip_prefix
    }

    /// The keys the limit is spread over, if sharded.
    pub fn shard_count(&self) -> Option<u16> {
        self.shards
    }

    /// The rule's batch leases, if any.
    pub fn prefetch_batch(&self) -> Option<PrefetchBatch> {
        self.prefetch
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rule's limit.
    pub fn limit(&self) -> &Limit {
        &self.limit
    }

    /// The descriptor whose value chooses the rule's limit (see [`Rule::vary_by`]), if any.
    pub fn varies_by(&self) -> Option<&str> {
        self.by.as_ref().map(ByDescriptor::descriptor)
    }

    /// The descriptors making the key.
    pub fn key_descriptors(&self) -> &[String] {
        &self.key
    }

    /// The rule's action.
    pub fn action_kind(&self) -> Action {
        self.action
    }

    /// The rules it replaces (see [`Rule::replaces`]).
    pub fn replaced(&self) -> &[Arc<str>] {
        &self.replaces
    }

    /// The rule's conditions, in the order given.
    pub fn conditions(&self) -> &[(String, Condition)] {
        &self.conditions
    }

    /// What happens when the store fails.
    pub fn store_error_policy(&self) -> OnStoreError {
        self.on_store_error
    }

    /// Every limit the rule may apply: its own, then those of its variants.
    pub fn limits(&self) -> impl Iterator<Item = &Limit> {
        std::iter::once(&self.limit).chain(self.by.iter().flat_map(|b| b.variants.iter().map(|v| &v.limit)))
    }
}

/// Limits that vary with one descriptor's value; see [`Rule::vary_by`].
#[derive(Debug, Clone, PartialEq)]
pub struct ByDescriptor {
    pub(crate) descriptor: String,
    pub(crate) variants: Vec<Variant>,
    pub(crate) only_listed: bool,
}

/// One value's limit, and what to do past it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Variant {
    pub(crate) value: String,
    pub(crate) limit: Limit,
    pub(crate) action: Option<Action>,
    /// The model to switch to past the limit (the action is then [`Action::Tag`]).
    pub(crate) degrade_to: Option<Arc<str>>,
}

impl ByDescriptor {
    /// Variants keyed by the value of `descriptor`.
    pub fn new(descriptor: impl Into<String>) -> Self {
        ByDescriptor { descriptor: descriptor.into(), variants: Vec::new(), only_listed: false }
    }

    /// For requests whose `descriptor` is `value`: `limit`, and `action` instead of the rule's
    /// when given.
    pub fn variant(
        mut self,
        value: impl Into<String>,
        limit: impl Into<Limit>,
        action: Option<Action>,
    ) -> Self {
        self.variants.push(Variant { value: value.into(), limit: limit.into(), action, degrade_to: None });
        self
    }

    /// For requests whose `descriptor` is `value`: `limit`, and past it the request is allowed,
    /// tagged ([`Action::Tag`]) and its verdict names `model` to switch to
    /// ([`LimitOutcome::degrade_to`](crate::LimitOutcome::degrade_to)) — a plan that degrades to
    /// a smaller model instead of being refused.
    pub fn degrading(
        mut self,
        value: impl Into<String>,
        limit: impl Into<Limit>,
        model: impl Into<Arc<str>>,
    ) -> Self {
        self.variants.push(Variant {
            value: value.into(),
            limit: limit.into(),
            action: Some(Action::Tag),
            degrade_to: Some(model.into()),
        });
        self
    }

    /// Requests whose value is not listed (or missing) are not subject to the rule, instead of
    /// getting the rule's own limit.
    pub fn only_listed(mut self) -> Self {
        self.only_listed = true;
        self
    }

    /// The descriptor the variants depend on.
    pub fn descriptor(&self) -> &str {
        &self.descriptor
    }
}

/// A sharded rule's keys: one limit per shard, and the next shard to take.
#[derive(Debug)]
pub(crate) struct Shards {
    pub(crate) limits: Box<[Limit]>,
    next: std::sync::atomic::AtomicUsize,
}

impl Shards {
    /// The shard the next request takes (round robin).
    pub(crate) fn next(&self) -> u16 {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.limits.len();
        i as u16
    }

    /// The shard a change named by `seed` takes: the same one each time it is made again (a retried
    /// settlement must find its own earlier change), spread over the shards by the seeds.
    pub(crate) fn pick(&self, seed: u64) -> u16 {
        (seed % self.limits.len() as u64) as u16
    }

    /// The shard after `i`.
    pub(crate) fn after(&self, i: u16) -> u16 {
        ((usize::from(i) + 1) % self.limits.len()) as u16
    }
}

fn compile_shards(rule: &Rule, n: u16) -> Result<Shards, RuleError> {
    let refuse = |reason: String| RuleError::Shards { rule: rule.name.to_string(), reason };
    if n < 2 {
        return Err(refuse(format!("{n} is not a split: at least 2")));
    }
    if rule.by.is_some() {
        return Err(refuse("not available with a limit that varies by a descriptor".into()));
    }
    if rule.limit.holds_permits() {
        return Err(refuse(
            "not available for the concurrency algorithm (a permit must be released on the key it was taken on)"
                .into(),
        ));
    }
    let limits = rule.limit.split(n).ok_or_else(|| {
        refuse(format!(
            "{n} shards would leave some with nothing: every count of the limit must be at least {n}"
        ))
    })?;
    Ok(Shards { limits: limits.into_boxed_slice(), next: std::sync::atomic::AtomicUsize::new(0) })
}

/// A rule ready for matching: its key prefix encoded once.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    pub(crate) rule: Rule,
    pub(crate) shards: Option<Shards>,
    /// The encoded rule name and key descriptor names (see the `key` module).
    pub(crate) scope: Box<[u8]>,
    /// Enforced share of keys in basis points (10 000 = 100 %).
    pub(crate) rollout_bp: u16,
    /// Whether the rule counts `requests` (a hit's plain cost).
    pub(crate) counts_requests: bool,
    /// The calendars of a quota whose calendar comes from descriptors.
    pub(crate) calendars: Option<Calendars>,
}

impl CompiledRule {
    /// `limit` (one the rule selected) as it applies to `descriptors`: in their calendar, for a
    /// quota whose calendar comes from descriptors.
    pub(crate) fn in_calendar<'p>(
        &self,
        limit: &'p Limit,
        descriptors: &Descriptors,
    ) -> Result<Cow<'p, Limit>, EngineError> {
        match (&self.calendars, limit) {
            (Some(calendars), Limit::Quota(q)) => {
                Ok(Cow::Owned(Limit::Quota(calendars.quota(&self.rule.name, q, descriptors)?)))
            }
            _ => Ok(Cow::Borrowed(limit)),
        }
    }
}

/// The rules in force, compiled once and shared by every request.
#[derive(Debug, Default)]
pub struct Policy {
    pub(crate) rules: Vec<CompiledRule>,
    namespace: Option<String>,
    /// Whether any rule replaces another (then planning a request looks at all its hits first).
    pub(crate) replacing: bool,
}

impl Policy {
    /// Validates and compiles `rules`, kept in the given order.
    pub fn new(rules: impl IntoIterator<Item = Rule>) -> Result<Self, RuleError> {
        Self::compile(None, rules)
    }

    /// Like [`Policy::new`], with every key in `namespace` (an Envoy rate-limit *domain*): rules of
    /// different namespaces never share counters, even with equal names.
    pub fn in_namespace(
        namespace: impl Into<String>,
        rules: impl IntoIterator<Item = Rule>,
    ) -> Result<Self, RuleError> {
        Self::compile(Some(namespace.into()), rules)
    }

    /// The namespace, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    fn compile(namespace: Option<String>, rules: impl IntoIterator<Item = Rule>) -> Result<Self, RuleError> {
        let mut compiled: Vec<CompiledRule> = Vec::new();
        for rule in rules {
            if rule.name.is_empty() {
                return Err(RuleError::EmptyName);
            }
            if compiled.iter().any(|c| c.rule.name == rule.name) {
                return Err(RuleError::DuplicateName(rule.name.to_string()));
            }
            if !(0.0..=100.0).contains(&rule.rollout) {
                return Err(RuleError::Rollout { rule: rule.name.to_string(), percent: rule.rollout });
            }
            if rule.on_store_error == OnStoreError::Local && rule.limits().any(Limit::holds_permits) {
                return Err(RuleError::LocalConcurrency { rule: rule.name.to_string() });
            }
            if rule.prefetch.is_some()
                && let Some(limit) = rule.limits().find(|l| !l.kind().prefetches())
            {
                return Err(RuleError::PrefetchUnsupported {
                    rule: rule.name.to_string(),
                    algorithm: limit.kind(),
                });
            }
            if rule.ip_prefix.is_some() && !rule.key.iter().any(|d| d == IP) {
                return Err(RuleError::IpPrefixWithoutIp { rule: rule.name.to_string() });
            }
            if !crate::cost::valid_dimension(&rule.cost) {
                return Err(RuleError::CostDimension {
                    rule: rule.name.to_string(),
                    dimension: rule.cost.to_string(),
                });
            }
            let rollout_bp = (rule.rollout * 100.0).round() as u16;
            for (i, d) in rule.key.iter().enumerate() {
                if rule.key[..i].contains(d) {
                    return Err(RuleError::DuplicateKeyDescriptor {
                        rule: rule.name.to_string(),
                        descriptor: d.clone(),
                    });
                }
            }
            let mut scope = Vec::new();
            if let Some(ns) = &namespace {
                // A leading empty field marks a namespaced key: it cannot be confused with a rule name,
                // which is never empty.
                push_field(&mut scope, b"");
                push_field(&mut scope, ns.as_bytes());
            }
            push_field(&mut scope, rule.name.as_bytes());
            for d in &rule.key {
                push_field(&mut scope, d.as_bytes());
            }
            let shards = match rule.shards {
                None => None,
                Some(n) => Some(compile_shards(&rule, n)?),
            };
            let calendars = match &rule.calendar {
                None => None,
                Some(by) => {
                    let refuse = |reason: String| RuleError::Calendar { rule: rule.name.to_string(), reason };
                    if rule.shards.is_some() {
                        return Err(refuse(
                            "shards are not available with a calendar from a descriptor".into(),
                        ));
                    }
                    for limit in rule.limits() {
                        by.check(limit).map_err(refuse)?;
                    }
                    Some(Calendars::new(by.clone()))
                }
            };
            let counts_requests = &*rule.cost == crate::cost::REQUESTS;
            compiled.push(CompiledRule {
                rule,
                shards,
                scope: scope.into_boxed_slice(),
                rollout_bp,
                counts_requests,
                calendars,
            });
        }
        for c in &compiled {
            if let Some(replaced) = c
                .rule
                .replaces
                .iter()
                .find(|r| **r == c.rule.name || !compiled.iter().any(|o| o.rule.name == **r))
            {
                return Err(RuleError::UnknownReplaced {
                    rule: c.rule.name.to_string(),
                    replaced: replaced.to_string(),
                });
            }
        }
        let replacing = compiled.iter().any(|c| !c.rule.replaces.is_empty());
        Ok(Policy { rules: compiled, namespace, replacing })
    }

    /// The rules, in order.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().map(|c| &c.rule)
    }

    /// The rule at `index` ([`LimitOutcome::index`](crate::LimitOutcome::index)).
    pub fn rule(&self, index: usize) -> Option<&Rule> {
        self.rules.get(index).map(|c| &c.rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference: `*` tried at every length, by backtracking.
    fn glob(pattern: &[u8], value: &[u8]) -> bool {
        match pattern.split_first() {
            None => value.is_empty(),
            Some((b'*', rest)) => (0..=value.len()).any(|i| glob(rest, &value[i..])),
            Some((c, rest)) => value.first() == Some(c) && glob(rest, &value[1..]),
        }
    }

    #[test]
    fn patterns_read_like_envoys_examples() {
        assert!(Pattern::new("value*").matches("valueXYZ"));
        assert!(Pattern::new("/api/*/action").matches("/api/user-id/action"));
        assert!(!Pattern::new("/api/*/action").matches("/api/123/other"));
        assert!(Pattern::new("*").matches(""));
        assert!(Pattern::new("a*a").matches("aa") && !Pattern::new("a*a").matches("a"));
        assert!(!Pattern::new("plain").is_wildcard());
    }

    proptest! {
        #[test]
        fn patterns_match_exactly_what_the_reference_matches(pattern in "[ab*]{0,6}", value in "[ab]{0,8}") {
            prop_assert_eq!(Pattern::new(pattern.clone()).matches(&value), glob(pattern.as_bytes(), value.as_bytes()));
        }
    }

    #[test]
    fn a_rule_may_only_replace_another_rule_of_its_policy() {
        let limit = || {
            crate::Limit::from(
                floodgate_core::FixedWindow::try_new(
                    std::num::NonZeroU64::MIN,
                    std::time::Duration::from_secs(1),
                )
                .unwrap(),
            )
        };
        let ok = Policy::new([Rule::new("a", limit()), Rule::new("b", limit()).replaces(["a"])]);
        assert!(ok.is_ok_and(|p| p.replacing));
        let unknown = Policy::new([Rule::new("b", limit()).replaces(["a"])]).unwrap_err();
        assert_eq!(unknown, RuleError::UnknownReplaced { rule: "b".into(), replaced: "a".into() });
        assert!(Policy::new([Rule::new("a", limit()).replaces(["a"])]).is_err(), "not itself");
    }
}
