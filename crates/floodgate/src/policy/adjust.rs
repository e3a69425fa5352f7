//! Changes after a decision: giving back what a verdict took (a refund, released permits, a
//! settlement's give-back), reporting a cost at most once, and forgetting a rule's state for a key.

use std::borrow::Cow;

use floodgate_core::Grant;
use smallvec::SmallVec;

use super::compiled::{CompiledRule, KeyBuf, build_key, push_shard};
use super::plan::{Merged, Request};
use crate::store::{Mode, Store, StoreError};
use crate::{Descriptors, Hit, Impossible, Limit, LimitOutcome, Policy, Verdict};

impl Policy {
    /// Reports `hit` — consumes its costs from every limit that applies, never denies — at most
    /// once for `once` ([`Records::adjust_once`](crate::store::Records::adjust_once)). A sharded
    /// rule takes the shard `seed` picks, so that the report made again lands on the same shard.
    /// Returns whether this call applied it.
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
    /// ([`Records::adjust_once`](crate::store::Records::adjust_once)), in one store call. A rule
    /// gone since (a reload) is skipped; a sharded rule whose shard is not known takes the shard
    /// `seed` picks, the same one each time. Returns whether this call gave anything back.
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
            let Some(limit) = self.give_back_to(compiled, descriptors, None, shard, seed, &mut request.buf)
            else {
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
                block_for: None,
            });
            grants.push(grant);
        }
        if grants.is_empty() {
            return Ok(false);
        }
        let ops = request.ops();
        store.adjust_once(&ops, crate::store::Adjustment::GiveBack(&grants), once).await
    }

    /// Frees the concurrency permits `verdict` (this policy's answer to one request with
    /// `descriptors`) holds, under the keys they were taken for.
    pub async fn release_permits<S: Store>(
        &self,
        store: &S,
        descriptors: &Descriptors,
        verdict: &Verdict,
    ) -> Result<(), StoreError> {
        self.give_back(store, &[Hit::new(descriptors, 0)], verdict, true).await
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
            let Some(limit) =
                self.give_back_to(compiled, hit.descriptors, hit.stated, l.shard, None, &mut buf)
            else {
                continue;
            };
            store.refund(&buf, &limit, grant).await?;
        }
        Ok(())
    }

    /// Appends to `buf` the key of `compiled` that a grant taken for `descriptors` (stating `stated`) is given back
    /// to, and returns the limit to give it back under; `None` when the rule no longer applies to
    /// them. A sharded rule's grant goes back to `shard`, the one it was taken from; when that is
    /// not known (or no longer exists: a reload changed the rule's shards), to the shard `seed`
    /// picks ([`Shards::pick`](super::compiled::Shards::pick): the same one when a change is made
    /// again), else to the shard the next request takes.
    pub(crate) fn give_back_to<'p>(
        &'p self,
        compiled: &'p CompiledRule,
        descriptors: &Descriptors,
        stated: Option<&crate::Stated>,
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
        // As the request stated it, in the calendar it was taken in (the request's descriptors
        // chose it).
        let Ok((limit, _)) = compiled.applied(limit, descriptors, stated, buf) else {
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
    /// the rule applies to them and had state (see [`Engine::reset`](crate::Engine::reset)).
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
