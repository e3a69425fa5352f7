//! The [`Policy`]: the rules in force, compiled once and shared by every request, and how a
//! request of one or more [`Hit`]s is decided on a store, in one store call ([`Policy::evaluate`]).
//!
//! - `compiled`: a rule as the policy holds it: its key's scope, its shards, its calendars, and
//!   the key it makes for a request.
//! - `plan`: planning a request: the rules that apply to each hit, and one store op per key.
//! - `outcome`: the verdict, from what the store answered or from the rules' failure policies.
//! - `adjust`: changes after a decision: giving back, reporting at most once, resetting.
//!
//! Reservations ([`crate::reservation`]) and usage ([`crate::usage`]) add their own methods.

mod adjust;
mod compiled;
mod outcome;
mod plan;

use crate::calendar::Calendars;
use crate::key::push_field;
use crate::rule::IP;
use crate::store::{Applied, Mode, Store};
use crate::{
    Costs, Descriptors, EngineError, Limit, LimitKind, OnStoreError, Rule, RuleError, Stated, Verdict,
};

use compiled::compile_shards;
pub(crate) use compiled::{CompiledRule, KeyBuf, build_key, push_shard};
use plan::Request;

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
            if let Some(statable) = &rule.statable {
                let refuse = |reason: String| RuleError::Statable { rule: rule.name.to_string(), reason };
                if let Some(reason) = rule.limits().find_map(|l| statable.refusal(l.kind())) {
                    return Err(refuse(reason));
                }
                if statable.limit.is_some() && rule.by.is_some() {
                    return Err(refuse(
                        "a limit that varies by a descriptor cannot also be stated by requests".into(),
                    ));
                }
                if rule.shards.is_some() {
                    return Err(refuse(
                        "not available with shards (a stated limit could not be split)".into(),
                    ));
                }
                if rule.prefetch.is_some() {
                    return Err(refuse("not available with prefetch".into()));
                }
            }
            let blocks = rule.block_for.is_some() || rule.statable.is_some_and(|s| s.block_for.is_some());
            if blocks {
                let refuse =
                    |reason: &str| RuleError::BlockFor { rule: rule.name.to_string(), reason: reason.into() };
                if rule.limits().any(|l| l.kind() == LimitKind::Concurrency) {
                    return Err(refuse(
                        "not available for the concurrency algorithm (a permit held is not a count a block could forget)",
                    ));
                }
                if rule.prefetch.is_some() {
                    return Err(refuse(
                        "not available with prefetch (units spent locally would not see the block)",
                    ));
                }
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
    /// The limit, window or block duration it states for the rules that take them
    /// ([`Hit::stating`]).
    pub stated: Option<&'a Stated>,
}

impl<'a> Hit<'a> {
    /// A hit of `cost` requests for `descriptors`: rules counting another dimension do not apply.
    pub fn new(descriptors: &'a Descriptors, cost: u64) -> Self {
        Hit { descriptors, cost, costs: None, stated: None }
    }

    /// This hit, stating `stated` to the rules that take it ([`Rule::statable`](crate::Rule::statable)):
    /// a value out of a rule's bounds fails the request with
    /// [`EngineError::Stated`], and one that no rule applying to the hit takes with
    /// [`EngineError::Unclaimed`]. Nothing stated is the same as not stating.
    pub fn stating(mut self, stated: &'a Stated) -> Self {
        self.stated = Some(stated).filter(|s| !s.is_empty());
        self
    }

    /// A hit costing `costs` for `descriptors`: each rule takes the cost of its own dimension, and
    /// a rule whose dimension costs 0 (or is not named) does not apply — it can neither deny nor
    /// consume. At least one dimension must cost 1 or more.
    pub fn with_costs(descriptors: &'a Descriptors, costs: &'a Costs) -> Self {
        Hit { descriptors, cost: costs.get(crate::cost::REQUESTS), costs: Some(costs), stated: None }
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

impl Policy {
    /// Decides a request of one or more hits on `store`, in **one** store call, all-or-nothing:
    /// with `mode` [`Mode::Check`], allowed only if every enforced limit of every hit allows, and
    /// then it consumes from them; a denied request consumes nothing from any limit.
    ///
    /// Hits whose limits share a key (the same rule and the same values, as two Envoy descriptors
    /// of one request may) are one op for the store, of their summed cost, decided once; each
    /// hit's [`LimitOutcome`](crate::LimitOutcome) reports it, and only the first carries its grant.
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
