//! Planning a request: the rules that apply to each of its hits, their keys in one buffer, and one
//! store op per distinct key (hits whose limits share a key share one op, of their summed cost).

use std::borrow::Cow;
use std::sync::Arc;

use floodgate_core::CostError;
use smallvec::SmallVec;

use super::compiled::{CompiledRule, KeyBuf, Shards, build_key, matches, push_shard};
use crate::store::{Applied, Mode, Op, PrefetchBatch};
use crate::{Action, EngineError, Hit, Impossible, Limit, OnStoreError, PartitionKey, Policy};

/// One applied rule of a request being built.
pub(super) struct Planned<'p> {
    pub(super) rule: &'p CompiledRule,
    /// The rule's position in the policy.
    pub(super) index: usize,
    /// The hit it applies to.
    pub(super) hit: usize,
    /// The rule's limit for this request (see [`crate::Rule::vary_by`]): its own, or in the
    /// request's calendar ([`crate::Rule::calendar_by`]).
    pub(super) limit: Cow<'p, Limit>,
    pub(super) key: std::ops::Range<usize>,
    /// The rule's action for this request.
    pub(super) action: Action,
    /// The model past the limit, for a plan that degrades.
    pub(super) degrade_to: Option<&'p Arc<str>>,
    pub(super) enforce: bool,
    /// The cost can never be granted: the limit records a would-deny without asking the store.
    pub(super) impossible: bool,
    /// The store op deciding it (several hits with the same key share one), when not impossible.
    pub(super) op: usize,
    /// Whether this is the first limit of its op: only that one carries the op's grant, so that a
    /// shared grant is given back once.
    pub(super) first_of_op: bool,
    /// The key's partition key, when the rule advertises one and the limit is enforced.
    pub(super) partition: Option<PartitionKey>,
}

/// One store op being planned: a distinct key, and the summed cost of the hits that share it.
pub(super) struct Merged<'p> {
    pub(super) key: std::ops::Range<usize>,
    pub(super) scope_len: usize,
    pub(super) limit: Cow<'p, Limit>,
    pub(super) cost: u64,
    pub(super) enforce: bool,
    pub(super) on_error: OnStoreError,
    pub(super) prefetch: Option<PrefetchBatch>,
    /// A sharded rule's shards, and the one this op is on (the key's last two bytes).
    pub(super) shard: Option<(&'p Shards, u16)>,
    /// The penalty box in force for the key (an enforced limit's only).
    pub(super) block_for: Option<std::time::Duration>,
}

/// A request being decided: its keys, the limits that apply and the store ops they make.
#[derive(Default)]
pub(super) struct Request<'p> {
    pub(super) buf: KeyBuf,
    pub(super) planned: SmallVec<[Planned<'p>; 4]>,
    pub(super) merged: SmallVec<[Merged<'p>; 4]>,
    /// Set for a change made at most once ([`Policy::report_once`]): sharded rules take the shard
    /// this seed picks ([`Shards::pick`]), not the next one, so that the change made again lands
    /// where it landed before.
    pub(super) shard_seed: Option<u64>,
}

impl<'p> Request<'p> {
    /// The store ops, borrowing the keys (complete once planning is done).
    pub(super) fn ops(&self) -> SmallVec<[Op<'_>; 4]> {
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
                block_for: m.block_for,
            })
            .collect()
    }

    /// After a denial in [`Mode::Check`]: when only sharded limits denied, moves each of them to
    /// its next shard (once per request: the caller asks the store again at most once) and returns
    /// true.
    pub(super) fn next_shards(&mut self, applied: &Applied) -> bool {
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
}

impl Policy {
    /// Plans `request`; returns the mode to ask the store in, or `None` when no rule applies.
    pub(super) fn prepare<'p>(
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
            // What of the hit's statement the rules applying to it take.
            let mut claimed = [false; 3];
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
                let (limit, block_for) = match compiled.applied(limit, hit.descriptors, hit.stated, buf) {
                    Ok(applied) => applied,
                    Err(error) => {
                        buf.truncate(start);
                        return Err(error);
                    }
                };
                let takes = crate::stated::claims(compiled.rule.statable.as_ref());
                for (c, t) in claimed.iter_mut().zip(takes) {
                    *c |= t;
                }
                let key = start..buf.len();
                let enforce = action.enforces() && in_rollout(&buf[key.clone()], compiled.rollout_bp);
                // Of the key without its shard: one name for the counter, whichever shard serves it.
                let partition = compiled
                    .rule
                    .partition
                    .as_ref()
                    .filter(|_| enforce)
                    .map(|keys| keys.of(&buf[key.clone()]));
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
                    partition,
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
                        if enforce && ops[op].block_for.is_none() {
                            ops[op].block_for = block_for;
                        }
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
                            block_for: block_for.filter(|_| enforce),
                        });
                    }
                }
                planned.push(p);
            }
            if let Some(field) = hit.stated.and_then(|s| crate::stated::unclaimed(s, claimed)) {
                return Err(EngineError::Unclaimed { field });
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
