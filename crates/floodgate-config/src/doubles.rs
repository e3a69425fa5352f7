//! Rules a Redis store (a node or a cluster) could not decide: its scripts compute in Lua doubles,
//! exact only below 2^53, so a limit out of that range ([`Limit::exact_in_doubles`]) would load and
//! then fail every call. With such a store the configuration refuses the rule at load, pointing at
//! the parameter out of range and saying its bound.

use floodgate::doubles::Inexact;
use floodgate::{Limit, Rule};
use floodgate_core::Rate;

use crate::error::Invalid;
use crate::yaml::{Fields, Item};

/// The first of `rule`'s limits — its own, its variants', each of its shards' — whose arithmetic
/// is not exact in doubles, and why.
fn first_inexact(rule: &Rule) -> Option<(&Limit, Inexact, bool)> {
    for limit in rule.limits() {
        if let Err(why) = limit.exact_in_doubles() {
            return Some((limit, why, false));
        }
        let shards = rule.shard_count().and_then(|n| limit.split(n)).unwrap_or_default();
        if let Some(why) = shards.iter().find_map(|shard| shard.exact_in_doubles().err()) {
            return Some((limit, why, true));
        }
    }
    None
}

/// Why `rule` (its limit `limit`, or each of its shards when `shard`) is refused on store kind
/// `kind`.
fn refusal(rule: &str, limit: &Limit, why: &Inexact, shard: bool, kind: &str) -> String {
    let whose = if shard { "each shard of its" } else { "its" };
    format!(
        "rule {rule:?}: {whose} {} limit is out of range for store kind {kind}, whose Lua scripts compute in \
         doubles (exact below 2^53): {why}",
        limit.algorithm_name()
    )
}

/// Refuses a native rule (written in `fields`, at `item`) for a store of `kind` when one of its
/// limits is not exact in doubles; the error points at the parameter out of range — for a limit
/// that varies by a descriptor, at the value's entry; at `shards` when only its shards are out of
/// range.
pub(crate) fn check_native(
    rule: &Rule,
    item: &Item<'_>,
    fields: &Fields<'_>,
    kind: &str,
) -> Result<(), Invalid> {
    let Some((limit, why, shard)) = first_inexact(rule) else { return Ok(()) };
    let written = if shard { fields.get("shards") } else { fields.get(why.parameter()) };
    // A bucket's burst left out is its rate's count: then the rate is what to change.
    let at = written.or_else(|| fields.get("rate")).unwrap_or_else(|| item.clone());
    let at = entry_of(&at, limit).unwrap_or(at);
    Err(at.error(refusal(rule.name(), limit, &why, shard, kind)))
}

/// In a `limit` or `rate` that varies by a descriptor (`{by, values, default}`), the entry that
/// wrote `limit`: the count or rate equal to its own.
fn entry_of<'a>(at: &Item<'a>, limit: &Limit) -> Option<Item<'a>> {
    if !at.is_map() {
        return None;
    }
    let rate = match limit {
        Limit::TokenBucket(a) => Some(a.rate()),
        Limit::Gcra(a) => Some(a.rate()),
        _ => None,
    };
    let wrote = |entry: &Item<'_>| match rate {
        Some(rate) => entry.str("a rate").ok().and_then(|t| t.parse::<Rate>().ok()) == Some(rate),
        None => entry.u64_at_least("limit", 1).ok() == Some(limit.capacity()),
    };
    let fields = at.fields("a value that varies by a descriptor", None).ok()?;
    let values = fields.get("values").and_then(|v| v.fields("values by descriptor", None).ok());
    let listed = values.iter().flat_map(|v| v.iter().map(|(_, _, entry)| entry)).collect::<Vec<_>>();
    listed.into_iter().chain(fields.get("default")).find(|entry| wrote(entry))
}

/// An Envoy rule whose limit is not exact in doubles: refused once the store is known to be Redis.
#[derive(Debug)]
pub(crate) struct InexactRule {
    /// Where its limit is written (the message is [`InexactRule::refused`]'s).
    at: Invalid,
    rule: String,
    limit: Limit,
    why: Inexact,
    shard: bool,
}

impl InexactRule {
    /// `rule`, its limit written at `at`, when one of its limits is not exact in doubles.
    pub(crate) fn of(rule: &Rule, at: &Item<'_>) -> Option<InexactRule> {
        let (limit, why, shard) = first_inexact(rule)?;
        let (rule, limit) = (rule.name().to_owned(), limit.clone());
        Some(InexactRule { at: at.error(String::new()), rule, limit, why, shard })
    }

    /// The error on store kind `kind`.
    pub(crate) fn refused(self, kind: &str) -> Invalid {
        Invalid { message: refusal(&self.rule, &self.limit, &self.why, self.shard, kind), ..self.at }
    }
}
