//! The overflow counters: where a new key of a rule is counted when the store is full and
//! [`OnFull::Aggregate`] says to share — one of the rule's `overflow_counters` shared counters,
//! chosen by a keyed hash of the key — and how a key is found on its counter again (to give back
//! to it, to log it, to inherit its state when room returns).

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use floodgate_core::Clock;
use smallvec::SmallVec;

use super::key::{StoredKey, spilled};
use super::slot::{Slot, State};
use super::{MemoryStore, OnFull};
use crate::key::OVERFLOW_MARK;
use crate::store::StoreError;

/// One rule's overflow, by its scope (see [`MemoryStore::overflow`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverflowStats {
    /// The leading bytes of the rule's keys ([`Op::scope_len`](crate::store::Op::scope_len)).
    pub scope: Box<[u8]>,
    /// Requests decided on the rule's overflow counters, since start.
    pub decisions: u64,
}

/// The key of overflow counter `i` of the rule whose keys begin with `scope`: [`OVERFLOW_MARK`],
/// the scope, and `i` in 4 bytes.
fn counter_key(scope: &[u8], i: u32) -> SmallVec<[u8; 64]> {
    let mut key = SmallVec::new();
    key.push(OVERFLOW_MARK);
    key.extend_from_slice(scope);
    key.extend_from_slice(&i.to_be_bytes());
    key
}

impl<C: Clock> MemoryStore<C> {
    /// The rules that have overflowed, with their overflow decisions since start.
    pub fn overflow(&self) -> Vec<OverflowStats> {
        let guard = self.inner.overflowed.guard();
        self.inner
            .overflowed
            .iter(&guard)
            .map(|(scope, n)| OverflowStats { scope: scope.clone(), decisions: n.load(Ordering::Relaxed) })
            .collect()
    }

    /// A new key that does not fit: refused, or on its overflow counter.
    pub(super) fn overflowed<'g>(
        &self,
        key: &[u8],
        scope_len: usize,
        guard: &'g impl papaya::Guard,
    ) -> Result<Option<&'g Slot>, StoreError> {
        let inner = &*self.inner;
        inner.overflows.fetch_add(1, Ordering::Relaxed);
        match inner.config.on_full {
            OnFull::Reject => Err(StoreError::Full { max_keys: inner.config.max_keys }),
            OnFull::Aggregate => Ok(self.overflow_counter(key, scope_len, true, guard)),
        }
    }

    /// Which of its rule's overflow counters `key` is decided on.
    fn counter_of(&self, key: &[u8]) -> u32 {
        let n = self.inner.config.overflow_counters as u64;
        (self.inner.overflow_hashing.hash_one(key) % n) as u32
    }

    /// The overflow counter of `key`, created when `create` (and counted as an overflow
    /// decision of its rule); `None` when not creating and the counter holds nothing.
    pub(super) fn overflow_counter<'g>(
        &self,
        key: &[u8],
        scope_len: usize,
        create: bool,
        guard: &'g impl papaya::Guard,
    ) -> Option<&'g Slot> {
        let inner = &*self.inner;
        let scope = &key[..scope_len.min(key.len())];
        let slot = match self.counter_in_table(scope, key, guard) {
            Some(slot) => slot,
            None if create => {
                let counter = counter_key(scope, self.counter_of(key));
                match inner.map.try_insert(StoredKey::new(&counter), Slot::default(), guard) {
                    Ok(slot) => {
                        inner.counters.fetch_add(1, Ordering::Relaxed);
                        inner.key_bytes.fetch_add(spilled(counter.len()), Ordering::Relaxed);
                        slot
                    }
                    Err(occupied) => occupied.current,
                }
            }
            None => return None,
        };
        let decisions = inner.overflowed.guard();
        match inner.overflowed.get(scope, &decisions) {
            Some(n) => n.fetch_add(1, Ordering::Relaxed),
            None => inner
                .overflowed
                .get_or_insert_with(scope.into(), || AtomicU64::new(0), &decisions)
                .fetch_add(1, Ordering::Relaxed),
        };
        Some(slot)
    }

    /// The state of `key`'s overflow counter, when its rule has overflowed and the counter holds
    /// one.
    pub(super) fn inherited(
        &self,
        key: &[u8],
        scope_len: usize,
        guard: &impl papaya::Guard,
    ) -> Option<(State, u32)> {
        let inner = &*self.inner;
        if inner.counters.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.counter_in_table(&key[..scope_len.min(key.len())], key, guard)?.lock().snapshot()
    }

    /// The overflow counter holding a key not in the table: that of the overflowed rule whose
    /// scope `key` begins with.
    pub(super) fn counter_holding<'g>(&self, key: &[u8], guard: &'g impl papaya::Guard) -> Option<&'g Slot> {
        let inner = &*self.inner;
        if inner.counters.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let scopes = inner.overflowed.guard();
        let scope = inner.overflowed.keys(&scopes).find(|scope| key.starts_with(scope))?;
        self.counter_in_table(scope, key, guard)
    }

    /// `key`'s overflow counter among its rule's (`scope`), if the table holds it.
    fn counter_in_table<'g>(
        &self,
        scope: &[u8],
        key: &[u8],
        guard: &'g impl papaya::Guard,
    ) -> Option<&'g Slot> {
        let counter = counter_key(scope, self.counter_of(key));
        self.inner.map.get(&self.inner.hashing.lookup(&counter), guard)
    }

    /// The key `slot` is held under, for the log: `key` itself, or its overflow counter's.
    pub(super) fn held_key(&self, key: &[u8], slot: &Slot, guard: &impl papaya::Guard) -> SmallVec<[u8; 64]> {
        let inner = &*self.inner;
        let is =
            |k: &[u8]| inner.map.get(&inner.hashing.lookup(k), guard).is_some_and(|s| std::ptr::eq(s, slot));
        if is(key) {
            return SmallVec::from_slice(key);
        }
        let scopes = inner.overflowed.guard();
        for scope in inner.overflowed.keys(&scopes) {
            if key.starts_with(scope) {
                let counter = counter_key(scope, self.counter_of(key));
                if is(&counter) {
                    return counter;
                }
            }
        }
        SmallVec::from_slice(key)
    }
}
