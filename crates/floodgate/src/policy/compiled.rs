//! A rule compiled into a [`Policy`](super::Policy): its key's scope encoded once, its shards and
//! its calendars; and the key it makes for a request's descriptors.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::calendar::Calendars;
use crate::key::push_field;
use crate::rule::IP;
use crate::{Descriptors, EngineError, Limit, NotAnAddress, Rule, RuleError, Stated};

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

/// `rule`'s limit split over `n` shards, or why it cannot be.
pub(super) fn compile_shards(rule: &Rule, n: u16) -> Result<Shards, RuleError> {
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
    /// `limit` (one the rule selected) as it applies to a request of `descriptors` stating
    /// `stated`, and its block duration: with what it states ([`crate::stated`]; a (limit,
    /// window) other than the rule's own ends the key in `buf`, which holds the rule's key for
    /// the request), in the request's calendar for a quota whose calendar comes from descriptors.
    pub(crate) fn applied<'p>(
        &self,
        limit: &'p Limit,
        descriptors: &Descriptors,
        stated: Option<&Stated>,
        buf: &mut KeyBuf,
    ) -> Result<(Cow<'p, Limit>, Option<Duration>), EngineError> {
        let s = crate::stated::apply(limit, self.rule.statable.as_ref(), self.rule.block_for, stated)
            .map_err(|source| EngineError::Stated { rule: self.rule.name.clone(), source })?;
        if let Some(key) = s.key {
            crate::stated::push_key(buf, key);
        }
        let limit = match s.limit {
            Some(own) => Cow::Owned(own),
            None => Cow::Borrowed(limit),
        };
        if let (Some(calendars), Limit::Quota(q)) = (&self.calendars, &*limit) {
            let q = calendars.quota(&self.rule.name, q, descriptors)?;
            return Ok((Cow::Owned(Limit::Quota(q)), s.block_for));
        }
        Ok((limit, s.block_for))
    }
}

/// The key buffer of one request: room for a few keys without allocating.
pub(crate) type KeyBuf = SmallVec<[u8; 256]>;

/// Whether every condition of the rule holds for `descriptors`.
pub(super) fn matches(compiled: &CompiledRule, descriptors: &Descriptors) -> bool {
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
