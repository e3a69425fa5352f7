//! Key lookup: a key's slot, found in the table, or — for a new key — inserted within `max_keys`,
//! else resolved as [`OnFull`] says.

use std::sync::atomic::Ordering;

use floodgate_core::Clock;

use super::key::{StoredKey, spilled};
use super::slot::Slot;
use super::{MemoryStore, OnFull};
use crate::store::StoreError;

impl<C: Clock> MemoryStore<C> {
    /// The slot for `key`, created when `create`; `None` for a key never seen when not creating.
    ///
    /// When the store is full, a new key resolves as [`OnFull`] says — also for a peek, so that a
    /// peek answers what a check would.
    #[inline]
    pub(super) fn slot<'g>(
        &self,
        key: &[u8],
        scope_len: usize,
        create: bool,
        guard: &'g impl papaya::Guard,
    ) -> Result<Option<&'g Slot>, StoreError> {
        let inner = &*self.inner;
        match inner.map.get(&inner.hashing.lookup(key), guard) {
            Some(slot) => Ok(Some(slot)),
            None => self.new_slot(key, scope_len, create, guard),
        }
    }

    /// [`MemoryStore::slot`] for a key not in the table.
    #[inline(never)]
    fn new_slot<'g>(
        &self,
        key: &[u8],
        scope_len: usize,
        create: bool,
        guard: &'g impl papaya::Guard,
    ) -> Result<Option<&'g Slot>, StoreError> {
        let inner = &*self.inner;
        let full = || inner.len.load(Ordering::Relaxed) >= inner.config.max_keys;
        if !create {
            return match (full(), inner.config.on_full) {
                (false, _) => Ok(None),
                (true, OnFull::Reject) => Err(StoreError::Full { max_keys: inner.config.max_keys }),
                (true, OnFull::Aggregate) => Ok(self.overflow_counter(key, scope_len, false, guard)),
            };
        }
        // Full: the key is new unless a twin request just inserted it. A twin counts its key
        // after inserting it (`AcqRel`), so if its count is what made the store full, its insert
        // is visible here; if another key's count did, the twin is over the cap too.
        if inner.len.load(Ordering::Acquire) >= inner.config.max_keys {
            return match inner.map.get(&inner.hashing.lookup(key), guard) {
                Some(slot) => Ok(Some(slot)),
                None => self.overflowed(key, scope_len, guard),
            };
        }
        // A key that was counted on an overflow counter starts from that counter's state: it
        // spent from it, and must not get its limit afresh by moving into the table. The state is
        // copied before the key is inserted (locking the counter while holding the new slot could
        // deadlock with a request holding both): a request of the same key racing with this one
        // may still count on the counter after the copy, the one looseness this allows.
        let inherited = self.inherited(key, scope_len, guard);
        // Insert first, then count: a request racing to create the same key finds it and waits
        // for the verdict on it, so a key that fits is never refused because of its own twin.
        let slot = match inner.map.try_insert(StoredKey::new(key), Slot::reserved(), guard) {
            Ok(slot) => slot,
            Err(occupied) => return Ok(Some(occupied.current)),
        };
        let mut s = slot.lock();
        if inner.len.fetch_add(1, Ordering::AcqRel) < inner.config.max_keys {
            inner.key_bytes.fetch_add(spilled(key.len()), Ordering::Relaxed);
            match inherited {
                Some((state, expires_secs)) => s.open_as(state, expires_secs),
                None => s.open(),
            }
            drop(s);
            return Ok(Some(slot));
        }
        // Over the cap: take the key back before anyone used it.
        inner.len.fetch_sub(1, Ordering::Relaxed);
        s.kill();
        let _ = inner.map.remove_if(&inner.hashing.lookup(key), |_, v| std::ptr::eq(v, slot), guard);
        drop(s);
        self.overflowed(key, scope_len, guard)
    }

    /// The slot holding what was granted on `key`: its own, or — a key not in the table — the
    /// overflow counter it was granted on, if its rule overflowed. `None`: nothing to give back to.
    pub(super) fn slot_holding<'g>(&self, key: &[u8], guard: &'g impl papaya::Guard) -> Option<&'g Slot> {
        self.inner
            .map
            .get(&self.inner.hashing.lookup(key), guard)
            .or_else(|| self.counter_holding(key, guard))
    }
}
