//! Locking the keys of a multi-key call: each slot once, all in one global order, so that two
//! calls can never deadlock.

use floodgate_core::Clock;
use smallvec::SmallVec;

use super::MemoryStore;
use super::slot::{Held, Slot};
use crate::store::{Op, StoreError};

/// The slots of a multi-key call, locked ([`MemoryStore::lock_all`]): `slots[i]` is op `i`'s slot,
/// `locks[lock_of[i]]` its lock (ops sharing a slot share it).
pub(super) struct Locked<'g> {
    pub(super) slots: SmallVec<[Option<&'g Slot>; 4]>,
    pub(super) locks: SmallVec<[Option<Held<'g>>; 4]>,
    pub(super) lock_of: SmallVec<[usize; 4]>,
}

impl<C: Clock> MemoryStore<C> {
    /// Resolves the slot of each op (`resolve`; `None`: the op's key has none) and locks them in one
    /// global order — by address, which also covers keys that resolve to a shared overflow slot —
    /// each slot once. `None` when a slot was removed meanwhile: the caller resolves again.
    pub(super) fn lock_all<'g>(
        &self,
        ops: &[Op<'_>],
        resolve: impl Fn(&Op<'_>) -> Result<Option<&'g Slot>, StoreError>,
    ) -> Result<Option<Locked<'g>>, StoreError> {
        let mut slots: SmallVec<[Option<&Slot>; 4]> = SmallVec::new();
        for op in ops {
            slots.push(resolve(op)?);
        }
        let mut order: SmallVec<[usize; 4]> = (0..ops.len()).collect();
        order.sort_unstable_by_key(|i| slots[*i].map_or(0, |s| s as *const Slot as usize));
        let mut locks: SmallVec<[Option<Held<'_>>; 4]> = SmallVec::new();
        let mut lock_of: SmallVec<[usize; 4]> = SmallVec::from_elem(0, ops.len());
        for (pos, &i) in order.iter().enumerate() {
            let shared = pos > 0 && {
                let prev = order[pos - 1];
                matches!((slots[prev], slots[i]), (Some(a), Some(b)) if std::ptr::eq(a, b))
            };
            if shared {
                lock_of[i] = lock_of[order[pos - 1]];
                continue;
            }
            lock_of[i] = locks.len();
            match slots[i] {
                Some(slot) => {
                    let locked = slot.lock();
                    if locked.state().is_gone() {
                        drop(locked);
                        std::thread::yield_now();
                        return Ok(None);
                    }
                    locks.push(Some(locked));
                }
                None => locks.push(None),
            }
        }
        Ok(Some(Locked { slots, locks, lock_of }))
    }
}
