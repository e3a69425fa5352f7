//! Rules: which requests a limit applies to (conditions on descriptors, value patterns), which
//! descriptors make its key, and what happens on denial. A [`Policy`](crate::Policy) compiles them.

use std::sync::Arc;

use std::time::Duration;

use crate::store::PrefetchBatch;
use crate::{CalendarBy, IpPrefix, Limit, PartitionKeys, Statable};

/// The descriptor [`Rule::ip_prefix`] groups.
pub(crate) const IP: &str = "ip";

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
    /// Every action, in the order the docs list them; `delay` waits for nothing here (`max_wait`
    /// zero), as [`Action::from_name`] gives it.
    pub const ALL: [Action; 4] =
        [Action::Deny, Action::Shadow, Action::Tag, Action::Delay { max_wait: std::time::Duration::ZERO }];

    /// Whether the action enforces its limit (deny or delay), as opposed to shadowing or tagging.
    pub fn enforces(self) -> bool {
        matches!(self, Action::Deny | Action::Delay { .. })
    }

    /// The name as written in configuration and shown in reports: `deny`, `shadow`, `tag` or
    /// `delay`.
    ///
    /// ```
    /// use floodgate::Action;
    /// assert_eq!(Action::Shadow.name(), "shadow");
    /// assert_eq!(Action::from_name("tag"), Some(Action::Tag));
    /// assert_eq!(Action::from_name("block"), None);
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Shadow => "shadow",
            Action::Tag => "tag",
            Action::Delay { .. } => "delay",
        }
    }

    /// The action named `name` (exactly as [`Action::name`] writes it). `delay` comes with no wait
    /// (`max_wait` zero): its caller sets the wait it was given.
    pub fn from_name(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
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
    /// assert_eq!(OnStoreError::from_name("retry"), None);
    /// ```
    pub const fn as_str(self) -> &'static str {
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
        "rule {rule:?}: prefetch is not available for the {algorithm} algorithm ({}); it is for {}",
        .algorithm.prefetch_refusal().unwrap_or_default(),
        crate::LimitKind::prefetching()
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
    /// A rule takes from requests what its algorithm or its other settings cannot take (see
    /// [`Rule::statable`]).
    #[error("rule {rule:?}: stated limits: {reason}")]
    Statable {
        /// The rule.
        rule: String,
        /// Why not.
        reason: String,
    },
    /// A rule's penalty box cannot be kept (see [`Rule::block_for`]).
    #[error("rule {rule:?}: block_for: {reason}")]
    BlockFor {
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
    /// What names the rule's keys to clients, when it advertises them (see
    /// [`Rule::partition_key`]).
    pub(crate) partition: Option<PartitionKeys>,
    /// What requests may state (see [`Rule::statable`]).
    pub(crate) statable: Option<Statable>,
    /// The penalty box (see [`Rule::block_for`]).
    pub(crate) block_for: Option<Duration>,
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
            partition: None,
            statable: None,
            block_for: None,
        }
    }

    /// Lets requests state the rule's limit, window or block duration, within `statable`'s
    /// bounds ([`Hit::stating`](crate::Hit::stating); see [`crate::stated`]). What a request does
    /// not state is the rule's own. A request stating a value the rule does not take, or one out of
    /// its bounds, fails with [`EngineError::Stated`](crate::EngineError::Stated).
    /// [`Policy::new`](crate::Policy::new) refuses a stated window on a concurrency limit or a
    /// quota, a stated limit with limits that vary by a descriptor, and stated values with
    /// [`Rule::shards`] or [`Rule::prefetch`].
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use std::num::NonZeroU64;
    /// use std::time::Duration;
    /// use floodgate::{Descriptors, Engine, Hit, Mode, Policy, Rule, Statable, Stated};
    /// use floodgate_core::SlidingLog;
    ///
    /// let template = SlidingLog::try_new(NonZeroU64::new(100).unwrap(), Duration::from_secs(60))?;
    /// let rule = Rule::new("throttle", template)
    ///     .key(["route", "user"])
    ///     .statable(Statable::new().limit(NonZeroU64::new(10_000).unwrap()).window(Duration::from_secs(86_400)));
    /// let engine = Engine::in_memory(Policy::new([rule])?);
    /// let request = Descriptors::new().with("route", "login").with("user", "u1");
    /// let three_a_minute = Stated { limit: Some(3), window: Some(Duration::from_secs(60)), block_for: None };
    /// for _ in 0..3 {
    ///     assert!(engine.decide(Mode::Check, Hit::new(&request, 1).stating(&three_a_minute)).await?.allowed);
    /// }
    /// assert!(!engine.decide(Mode::Check, Hit::new(&request, 1).stating(&three_a_minute)).await?.allowed);
    /// let too_many = Stated { limit: Some(20_000), ..Stated::default() };
    /// assert!(engine.decide(Mode::Check, Hit::new(&request, 1).stating(&too_many)).await.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn statable(mut self, statable: Statable) -> Self {
        self.statable = Some(statable);
        self
    }

    /// What requests may state, if anything (see [`Rule::statable`]).
    pub fn statable_values(&self) -> Option<&Statable> {
        self.statable.as_ref()
    }

    /// A penalty box: after a request is denied by this rule's limit, its key is refused for
    /// `duration` (longer or shorter than the window), with that exact `retry_after`; nothing
    /// counts while it is refused, and when the time is up the key starts afresh, its count
    /// forgotten — what `@nestjs/throttler`'s `blockDuration` does. Only enforced limits block
    /// (a shadow or tag limit never does). A zero duration is no penalty box.
    /// [`Policy::new`](crate::Policy::new) refuses it with [`Rule::prefetch`] (units spent locally
    /// would not see the block) and on a concurrency limit (a permit is not a count that a block
    /// could forget).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use std::num::NonZeroU64;
    /// use std::time::Duration;
    /// use floodgate::{Descriptors, Engine, Policy, Rule};
    /// use floodgate_core::FixedWindow;
    ///
    /// let login = FixedWindow::try_new(NonZeroU64::new(2).unwrap(), Duration::from_secs(60))?;
    /// let rule = Rule::new("login", login).key(["user"]).block_for(Duration::from_secs(900));
    /// let engine = Engine::in_memory(Policy::new([rule])?);
    /// let user = Descriptors::new().with("user", "u1");
    /// engine.check(&user, 1).await?;
    /// engine.check(&user, 1).await?;
    /// let third = engine.check(&user, 1).await?;
    /// assert_eq!(third.retry_after(), Some(Duration::from_secs(900)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn block_for(mut self, duration: Duration) -> Self {
        self.block_for = Some(duration).filter(|d| !d.is_zero());
        self
    }

    /// The rule's own penalty box, if any (see [`Rule::block_for`]).
    pub fn block_duration(&self) -> Option<Duration> {
        self.block_for
    }

    /// Gives each enforced limit of the rule in a verdict a [`PartitionKey`](crate::PartitionKey)
    /// made by `keys` from the request's key ([`LimitOutcome::partition`](crate::LimitOutcome::partition)):
    /// a stable, opaque name for the counter the request counts on, which front doors advertise
    /// (`pk` in the IETF headers) so that a client acting for many users or keys can tell their
    /// limits apart. Never the key itself: see [`partition`](crate::partition).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use std::num::NonZeroU64;
    /// use std::time::Duration;
    /// use floodgate::{Descriptors, Engine, PartitionKeys, Policy, Rule};
    /// use floodgate_core::FixedWindow;
    ///
    /// let limit = FixedWindow::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(60))?;
    /// let keys = PartitionKeys::new(b"a secret of thirty-two bytes or more")?;
    /// let engine = Engine::in_memory(Policy::new([Rule::new("per-user", limit).key(["user"]).partition_key(keys)])?);
    /// let pk = |v: &floodgate::Verdict| v.limits[0].partition.expect("advertised");
    /// let u1 = engine.check(&Descriptors::new().with("user", "u1"), 1).await?;
    /// let again = engine.check(&Descriptors::new().with("user", "u1"), 1).await?;
    /// let u2 = engine.check(&Descriptors::new().with("user", "u2"), 1).await?;
    /// assert_eq!(pk(&u1), pk(&again));
    /// assert_ne!(pk(&u1), pk(&u2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn partition_key(mut self, keys: PartitionKeys) -> Self {
        self.partition = Some(keys);
        self
    }

    /// What names the rule's keys to clients, if it advertises them (see [`Rule::partition_key`]).
    pub fn partition_keys(&self) -> Option<&PartitionKeys> {
        self.partition.as_ref()
    }

    /// Reads a quota's time zone, its anchor or both from the request's descriptors, so that one
    /// rule serves tenants in many zones and billing days: each request's quota counts in the
    /// periods of its own calendar (the rule's period, in the zone and from the anchor the
    /// descriptors give). Counters stay per key: a tenant that moves to another zone keeps its key,
    /// and its count restarts when its period does. Only for quota limits (each of the rule's
    /// variants); [`Policy::new`](crate::Policy::new) refuses it on others, with a default or
    /// mapped setting that is not valid, and with [`Rule::shards`]. A request whose setting is not
    /// valid, or that lacks the descriptor when no default is set, fails with
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
    /// [`Policy::new`](crate::Policy::new) refuses others.
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
    /// ([`LimitKind::prefetches`](crate::LimitKind::prefetches));
    /// [`Policy::new`](crate::Policy::new) refuses it on the others.
    pub fn prefetch(mut self, batch: PrefetchBatch) -> Self {
        self.prefetch = Some(batch);
        self
    }

    /// Spreads the limit over `n` store keys (at least 2) — for a hot global limit, so that one
    /// Redis key (one cluster slot) does not take every request. Each key holds a share of the
    /// limit ([`Limit::split`]: the shares sum to exactly the limit); a request takes the next
    /// shard in turn (round robin, per instance) and, when that shard denies, tries the next one
    /// once. A request's cost must fit one shard. Not for `concurrency`, nor with limits that vary
    /// by a descriptor; [`Policy::new`](crate::Policy::new) refuses them.
    pub fn shards(mut self, n: u16) -> Self {
        self.shards = Some(n);
        self
    }

    /// Keys the `ip` descriptor by its network (`address/length`, host bits cleared) rather than
    /// by the whole address, so that the addresses of one network share one counter: the usual
    /// practice for IPv6, where one client holds a whole /64. IPv4 addresses written as IPv6
    /// (`::ffff:a.b.c.d`) count as IPv4. A request whose `ip` is not an address fails with
    /// [`EngineError::Descriptor`](crate::EngineError::Descriptor). The key must name `ip`;
    /// [`Policy::new`](crate::Policy::new) refuses it otherwise.
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_action_and_store_failure_policy_is_found_by_its_name() {
        for action in Action::ALL {
            assert_eq!(Action::from_name(action.name()), Some(action));
        }
        assert_eq!(Action::ALL.map(Action::name), ["deny", "shadow", "tag", "delay"]);
        for policy in OnStoreError::ALL {
            assert_eq!(OnStoreError::from_name(policy.as_str()), Some(policy));
        }
        assert_eq!(OnStoreError::ALL.map(OnStoreError::as_str), ["fail_open", "fail_closed", "local"]);
    }

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
}
