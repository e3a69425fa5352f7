//! Rules: which requests a limit applies to, how its key is made, and what happens on denial.

use std::sync::Arc;

use crate::Limit;
use crate::key::push_field;

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
}

/// What to do when the store fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum OnStoreError {
    /// Let the request through (the default): availability over enforcement.
    #[default]
    FailOpen,
    /// Deny the request: enforcement over availability.
    FailClosed,
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
        }
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
        let Some(by) = &self.by else { return Some((&self.limit, self.action)) };
        let value = descriptors.get(&by.descriptor);
        match value.and_then(|v| by.variants.iter().find(|(x, _, _)| x == v)) {
            Some((_, limit, action)) => Some((limit, action.unwrap_or(self.action))),
            None if by.only_listed => None,
            None => Some((&self.limit, self.action)),
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

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rule's limit.
    pub fn limit(&self) -> &Limit {
        &self.limit
    }

    /// The descriptors making the key.
    pub fn key_descriptors(&self) -> &[String] {
        &self.key
    }

    /// The rule's action.
    pub fn action_kind(&self) -> Action {
        self.action
    }
}

/// Limits that vary with one descriptor's value; see [`Rule::vary_by`].
#[derive(Debug, Clone, PartialEq)]
pub struct ByDescriptor {
    pub(crate) descriptor: String,
    pub(crate) variants: Vec<(String, Limit, Option<Action>)>,
    pub(crate) only_listed: bool,
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
        self.variants.push((value.into(), limit.into(), action));
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

/// A rule ready for matching: its key prefix encoded once.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    pub(crate) rule: Rule,
    /// The encoded rule name and key descriptor names (see the `key` module).
    pub(crate) scope: Box<[u8]>,
    /// Enforced share of keys in basis points (10 000 = 100 %).
    pub(crate) rollout_bp: u16,
}

/// The rules in force, compiled once and shared by every request.
#[derive(Debug, Default)]
pub struct Policy {
    pub(crate) rules: Vec<CompiledRule>,
    namespace: Option<String>,
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
            compiled.push(CompiledRule { rule, scope: scope.into_boxed_slice(), rollout_bp });
        }
        Ok(Policy { rules: compiled, namespace })
    }

    /// The rules, in order.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().map(|c| &c.rule)
    }
}
