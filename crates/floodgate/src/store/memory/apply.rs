//! The store's changes under the keys' locks: applying ops (a single key in its word or under its
//! lock; several keys locked in one order, all-or-nothing), adjusting at most once, refunding and
//! resetting — each logged while its locks are held, on a persisted store.

use std::sync::atomic::Ordering;
use std::time::Duration;

use floodgate_core::{Clock, Decision, Grant, Timestamp};
use smallvec::SmallVec;

use super::key::spilled;
use super::lock::Locked;
use super::persist::{Wal, encode_delete, encode_group, encode_key, encode_record};
use super::slot::{
    BUCKET, Cell, Fresh, GCRA, Held, block, blocked, consume, decide, previous, refund, report, status,
};
use super::{Kept, MemoryStore};
use crate::Limit;
use crate::limit::with_algorithm;
use crate::store::{Adjustment, Applied, Mode, Once, Op, OpResult, StoreError};

/// A held lock with the key it is logged under ([`MemoryStore::log_locked`]).
type HeldKey<'a, 'h> = (SmallVec<[u8; 64]>, &'a Held<'h>);

/// What a note of [`Records::adjust_once`](crate::store::Records::adjust_once) holds in the records' table,
/// where it is kept (and persisted, and swept) like a reservation record; its body is empty, so it
/// never reads as one.
const ONCE_NOTE: &[u8] = b"once";

impl<C: Clock> MemoryStore<C> {
    /// Applies `ops` under the locks of their keys; the heart of
    /// [`Store::apply`](crate::Store::apply).
    ///
    /// Ops must name distinct keys (the engine's keys always do: they include the rule name). On a
    /// store persisted with [`Fsync::Always`](super::Fsync::Always) this does not wait for the
    /// change to reach the disk: [`Store::apply`](crate::Store::apply) does.
    pub fn apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        self.apply_logged(ops, mode, out)?;
        match &self.inner.wal {
            None => Ok(()),
            Some(wal) => wal.check(),
        }
    }

    /// [`MemoryStore::apply_now`], returning the sequence number of its log entry (0: none).
    pub(super) fn apply_logged(
        &self,
        ops: &[Op<'_>],
        mode: Mode,
        out: &mut Applied,
    ) -> Result<u64, StoreError> {
        let now = self.inner.clock.now();
        let guard = self.inner.map.guard();
        let create = mode != Mode::Peek;
        out.at = now;
        out.results.clear();
        // A penalty box is read and written under the key's lock, with the other keys'.
        if let [op] = ops
            && op.block_for.is_none()
        {
            return self.apply_one(op, mode, now, create, &guard, &mut out.results);
        }
        loop {
            let Some(mut locked) =
                self.lock_all(ops, |op| self.slot(op.key, op.scope_len, create, &guard))?
            else {
                continue;
            };
            let Locked { locks, lock_of, .. } = &mut locked;
            let results = &mut out.results;
            // Ops whose key is in a penalty box: refused, and nothing counts for them.
            let mut in_box: SmallVec<[bool; 4]> = SmallVec::new();
            if mode == Mode::Report {
                for (i, op) in ops.iter().enumerate() {
                    // A report creates its keys, so every op has a slot.
                    if let Some(s) = &mut locks[lock_of[i]] {
                        if let Some(until) = op.block_for.and_then(|_| s.state().blocked_at(now)) {
                            // A report never denies: it says nothing is left until the box ends,
                            // and takes nothing (whatever its cost: the algorithm is not asked).
                            let decision = Decision {
                                allowed: true,
                                limit: op.limit.capacity(),
                                remaining: 0,
                                reset_after: Duration::from_micros(until - now.as_micros()),
                                retry_after: None,
                            };
                            results.push(OpResult { decision, grant: None, previous: None });
                            continue;
                        }
                        let (decision, grant) = with_algorithm!(op.limit, a => report(a, s, now, op.cost));
                        results.push(OpResult { decision, grant: Some(grant), previous: None });
                    }
                }
                return Ok(self.log_locked(ops, &locked, &guard, None));
            }
            let mut fresh: Fresh;
            for (i, op) in ops.iter().enumerate() {
                let mut state = match &mut locks[lock_of[i]] {
                    Some(s) => s.parts(),
                    None => {
                        fresh = Fresh::default();
                        fresh.parts()
                    }
                };
                let until = op.block_for.and_then(|_| state.0.blocked_at(now));
                in_box.push(until.is_some());
                let decision = match until {
                    Some(until) => {
                        let mut d = with_algorithm!(op.limit, a => decide(a, &mut state, now, op.cost));
                        blocked(&mut d, Duration::from_micros(until - now.as_micros()));
                        d
                    }
                    None => with_algorithm!(op.limit, a => decide(a, &mut state, now, op.cost)),
                };
                let previous = if mode == Mode::Peek { previous(op.limit, &mut state, now) } else { None };
                results.push(OpResult { decision, grant: None, previous });
            }
            let admitted = ops.iter().zip(results.iter()).all(|(op, r)| !op.enforce || r.decision.allowed);
            if !admitted {
                // Each enforced limit with a penalty box that denied by its count (not already in
                // the box) goes into it; a peek says so without writing it.
                let mut boxed = false;
                for (i, op) in ops.iter().enumerate() {
                    let Some(block_for) = op.block_for else { continue };
                    if !op.enforce || in_box[i] || results[i].decision.allowed {
                        continue;
                    }
                    match (&mut locks[lock_of[i]], mode) {
                        (Some(s), Mode::Check) => {
                            block(s, now, block_for, &mut results[i].decision);
                            boxed = true;
                        }
                        _ => blocked(&mut results[i].decision, block_for),
                    }
                }
                if boxed {
                    // The boxes are written with the rest; the other ops report their status.
                    for (i, op) in ops.iter().enumerate() {
                        if results[i].decision.allowed
                            && let Some(s) = &mut locks[lock_of[i]]
                        {
                            let (remaining, reset_after) = with_algorithm!(op.limit, a => status(a, s, now));
                            results[i].decision.remaining = remaining;
                            results[i].decision.reset_after = Duration::from_micros(reset_after);
                        }
                    }
                    return Ok(self.log_locked(ops, &locked, &guard, None));
                }
            }
            for (i, op) in ops.iter().enumerate() {
                let r = &mut results[i];
                if !r.decision.allowed || (admitted && mode == Mode::Peek) {
                    continue;
                }
                let s = &mut match &mut locks[lock_of[i]] {
                    Some(s) => s.parts(),
                    None => {
                        fresh = Fresh::default();
                        fresh.parts()
                    }
                };
                if admitted {
                    r.grant = Some(with_algorithm!(op.limit, a => consume(a, s, now, op.cost)));
                } else {
                    // Allowed, but another limit denies: nothing is taken, so report the state as
                    // it stays rather than as if this request had been admitted.
                    let (remaining, reset_after) = with_algorithm!(op.limit, a => status(a, s, now));
                    r.decision.remaining = remaining;
                    r.decision.reset_after = Duration::from_micros(reset_after);
                }
            }
            if admitted && mode == Mode::Check {
                return Ok(self.log_locked(ops, &locked, &guard, None));
            }
            return Ok(0);
        }
    }

    /// [`Records::adjust_once`](crate::store::Records::adjust_once): under the records' lock (where the note
    /// of each change made is kept, beside the reservation records) and the locks of every op's
    /// key, so that the change and its note are one step — and one entry of the log, on a persisted
    /// store. Returns whether it applied the change, and the log entry's sequence number (0: none).
    pub(super) fn adjust_now(
        &self,
        ops: &[Op<'_>],
        adjustment: Adjustment<'_>,
        once: Once<'_>,
    ) -> Result<(bool, u64), StoreError> {
        let inner = &*self.inner;
        let grants = adjustment.grants(ops.len())?;
        let now = inner.clock.now();
        let mut records = inner.records.lock();
        if records.get(once.id).is_some_and(|r| r.forget_at > now) {
            // Made by a call that may still be waiting for its entry to reach the disk.
            return Ok((false, inner.wal.as_ref().map_or(0, Wal::last_seq)));
        }
        let note = Kept {
            body: Vec::new(),
            expires_at: now,
            forget_at: now.saturating_add(once.keep),
            settled: Some(ONCE_NOTE.to_vec()),
        };
        let guard = inner.map.guard();
        let seq = loop {
            // What is given back goes to the key's state, or to the overflow counter that held it;
            // a key that is gone (expired) has nothing to give back to. A report creates its keys.
            let resolve = |op: &Op<'_>| match grants {
                None => self.slot(op.key, op.scope_len, true, &guard),
                Some(_) => Ok(self.slot_holding(op.key, &guard)),
            };
            let Some(mut locked) = self.lock_all(ops, resolve)? else { continue };
            let Locked { locks, lock_of, .. } = &mut locked;
            for (i, op) in ops.iter().enumerate() {
                let Some(s) = &mut locks[lock_of[i]] else { continue };
                // A key in a penalty box has forgotten its count: nothing to give back, and
                // nothing counts while it is there.
                if s.state().blocked_at(now).is_some() {
                    continue;
                }
                match grants {
                    None => {
                        with_algorithm!(op.limit, a => report(a, s, now, op.cost));
                    }
                    Some(grants) => with_algorithm!(op.limit, a => refund(a, s, now, &grants[i])),
                }
            }
            // One entry: replay finds the change and its note together, or neither.
            break self.log_locked(ops, &locked, &guard, Some((once.id, &note)));
        };
        records.insert(once.id.into(), note);
        Ok((true, seq))
    }

    /// Logs the state of every key a multi-key call holds `locked` (a persisted store), with the
    /// note of a change made once, returning the entry's sequence number; 0 for a store that does
    /// not persist. Several keys, or a note, are one group entry — all-or-nothing on disk as in
    /// memory: a write torn by a crash never restores one limit's change without the others', or a
    /// change without its note.
    fn log_locked(
        &self,
        ops: &[Op<'_>],
        locked: &Locked<'_>,
        guard: &impl papaya::Guard,
        note: Option<(&[u8], &Kept)>,
    ) -> u64 {
        let Some(wal) = &self.inner.wal else { return 0 };
        let Locked { slots, locks, lock_of } = locked;
        let mut keys: SmallVec<[HeldKey<'_, '_>; 4]> = SmallVec::new();
        for (index, held) in locks.iter().enumerate() {
            let Some(held) = held else { continue };
            let Some(i) = lock_of.iter().position(|l| *l == index) else { continue };
            let Some(slot) = slots[i] else { continue };
            keys.push((self.held_key(ops[i].key, slot, guard), held));
        }
        let each = |buf: &mut Vec<u8>| {
            for (key, held) in &keys {
                encode_key(buf, key, held.state(), held.expires_secs());
            }
            if let Some((id, note)) = note {
                encode_record(buf, id, note);
            }
        };
        if keys.len() + usize::from(note.is_some()) > 1 {
            wal.append(|buf| encode_group(buf, each))
        } else {
            wal.append(each)
        }
    }

    /// [`MemoryStore::apply_now`] for the common single-limit request: no ordering, and for a token
    /// bucket or GCRA whose state is in its word, no lock.
    fn apply_one(
        &self,
        op: &Op<'_>,
        mode: Mode,
        now: Timestamp,
        create: bool,
        guard: &impl papaya::Guard,
        results: &mut SmallVec<[OpResult; 4]>,
    ) -> Result<u64, StoreError> {
        // A persisted store logs every change under the key's lock, so it never updates the word
        // without it.
        let persisted = self.inner.wal.is_some();
        loop {
            let Some(slot) = self.slot(op.key, op.scope_len, create, guard)? else {
                let mut fresh = Fresh::default();
                let decision = with_algorithm!(op.limit, a => decide(a, &mut fresh, now, op.cost));
                let previous = if mode == Mode::Peek { previous(op.limit, &mut fresh, now) } else { None };
                results.push(OpResult { decision, grant: None, previous });
                return Ok(0);
            };
            let done = !persisted
                && match op.limit {
                    Limit::TokenBucket(a) => slot.apply_in_word(a, BUCKET, mode, now, op.cost, results),
                    Limit::Gcra(a) => slot.apply_in_word(a, GCRA, mode, now, op.cost, results),
                    _ => false,
                };
            if done {
                return Ok(0);
            }
            let mut s = slot.lock();
            if s.state().is_gone() {
                drop(s);
                std::thread::yield_now();
                continue;
            }
            // A bucket's state goes into the word, for the next single-limit requests.
            if !persisted {
                s.put_in_word();
            }
            results.push(match mode {
                Mode::Report => {
                    let (decision, grant) = with_algorithm!(op.limit, a => report(a, &mut s, now, op.cost));
                    OpResult { decision, grant: Some(grant), previous: None }
                }
                Mode::Check => {
                    let decision = with_algorithm!(op.limit, a => decide(a, &mut s, now, op.cost));
                    let grant = decision
                        .allowed
                        .then(|| with_algorithm!(op.limit, a => consume(a, &mut s, now, op.cost)));
                    OpResult { decision, grant, previous: None }
                }
                Mode::Peek => {
                    let decision = with_algorithm!(op.limit, a => decide(a, &mut s, now, op.cost));
                    OpResult { decision, grant: None, previous: previous(op.limit, &mut s, now) }
                }
            });
            if let Some(wal) = &self.inner.wal
                && results.last().is_some_and(|r| r.grant.is_some())
            {
                let key = self.held_key(op.key, slot, guard);
                return Ok(wal.append(|buf| encode_key(buf, &key, s.state(), s.expires_secs())));
            }
            return Ok(0);
        }
    }

    pub(super) fn refund_now(&self, key: &[u8], limit: &Limit, grant: Grant) -> u64 {
        let now = self.inner.clock.now();
        let guard = self.inner.map.guard();
        if let Some(slot) = self.slot_holding(key, &guard) {
            let mut s = slot.lock();
            // A key in a penalty box has forgotten the count the grant was taken from.
            if !s.state().is_gone() && s.state().blocked_at(now).is_none() {
                with_algorithm!(limit, a => refund(a, &mut s, now, &grant));
                if let Some(wal) = &self.inner.wal {
                    let key = self.held_key(key, slot, &guard);
                    return wal.append(|buf| encode_key(buf, &key, s.state(), s.expires_secs()));
                }
            }
        }
        0
    }

    /// Forgets `key`: whether it existed, and the log entry's sequence number (0: none).
    pub(super) fn reset_now(&self, key: &[u8]) -> (bool, u64) {
        let inner = &*self.inner;
        let guard = inner.map.guard();
        let Some(slot) = inner.map.get(&inner.hashing.lookup(key), &guard) else { return (false, 0) };
        let mut s = slot.lock();
        if s.state().is_gone() {
            return (false, 0);
        }
        s.kill();
        let seq = inner.wal.as_ref().map_or(0, |wal| wal.append(|buf| encode_delete(buf, key)));
        if let Ok(Some(_)) =
            inner.map.remove_if(&inner.hashing.lookup(key), |_, v| std::ptr::eq(v, slot), &guard)
        {
            inner.len.fetch_sub(1, Ordering::Relaxed);
            inner.key_bytes.fetch_sub(spilled(key.len()), Ordering::Relaxed);
        }
        (true, seq)
    }
}
