//! The embedded memory store: the default, with no setup.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use floodgate_core::{Clock, Grant, SystemClock, Timestamp};
use smallvec::SmallVec;

use super::{Adjustment, Applied, Mode, Once, Op, OpResult, Record, Settle, Store, StoreError};
use crate::Limit;
use crate::key::OVERFLOW_MARK;
use crate::limit::with_algorithm;

mod key;
mod persist;
mod slot;

use key::{KeyHashing, StoredKey, spilled};
use persist::{
    CHECKPOINT_BYTES, CHECKPOINT_EVERY_SECS, Wal, encode_delete, encode_group, encode_key, encode_record,
};
pub use persist::{Fsync, PersistConfig, PersistError, Recovered};
use slot::{BUCKET, Cell, Fresh, GCRA, Held, Slot, State, consume, decide, refund, report, status};

/// What the memory store does with a *new* key once it holds `max_keys` keys.
///
/// Live counters are never evicted to make room: evicting them would silently stop enforcing
/// their limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFull {
    /// Fail the request with [`StoreError::Full`]; each rule's store-failure policy
    /// (fail open or closed) decides what the client sees.
    Reject,
    /// Count each new key of a rule on one of the rule's `overflow_counters` shared counters,
    /// chosen by a hash of the key keyed at random per store (so clients cannot aim at one): a
    /// newcomer shares its limit with a small random group rather than with every other new key,
    /// until idle keys expire and make room. Each counter enforces the rule's own limit, so a key
    /// is never counted more loosely than alone; when room returns, a key moving into the table
    /// starts from its counter's state, not afresh.
    #[default]
    Aggregate,
}

/// Memory store settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryConfig {
    /// The most keys held at once (default 1 000 000).
    pub max_keys: usize,
    /// What to do with new keys when full (default [`OnFull::Aggregate`]).
    pub on_full: OnFull,
    /// The shared counters per rule that [`OnFull::Aggregate`] spreads new keys over (default
    /// 65 536; at least 1). A counter takes a table entry like a key, but is not counted in
    /// `max_keys`: it is created when a new key first lands on it and dropped by the sweeper
    /// once its state expires, so at most `overflow_counters` per rule are held.
    pub overflow_counters: usize,
    /// How often the background sweeper drops expired keys (default 10 s).
    pub sweep_interval: Duration,
    /// Where the store persists its state, if anywhere (default: nowhere; see
    /// [`MemoryStore::open`], which opens it — [`MemoryStore::with_config`] does not).
    pub persist: Option<PersistConfig>,
}

impl MemoryConfig {
    /// The most `overflow_counters` a rule may have: their number is written in 4 bytes of their
    /// keys, and 16 M counters (about 2 GB per rule) is beyond any sensible memory bound.
    pub const MAX_OVERFLOW_COUNTERS: usize = 1 << 24;
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_keys: 1_000_000,
            on_full: OnFull::Aggregate,
            overflow_counters: 65_536,
            sweep_interval: Duration::from_secs(10),
            persist: None,
        }
    }
}

/// Counts for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Keys held.
    pub keys: usize,
    /// An estimate of the memory they use, in bytes (slots, keys and table overhead).
    pub bytes_estimate: usize,
    /// The most keys held at once (`max_keys`).
    pub max_keys: usize,
    /// Overflow counters held, over all rules (not counted in `keys`).
    pub overflow_counters: usize,
    /// Requests for new keys refused or decided on overflow counters because the store was full,
    /// since start.
    pub overflows: usize,
}

/// One rule's overflow, by its scope (see [`MemoryStore::overflow`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverflowStats {
    /// The leading bytes of the rule's keys ([`Op::scope_len`]).
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

/// The embedded store: per-key state in a lock-free concurrent map, each key behind its own small
/// lock, so requests for different keys never wait on each other. A token bucket's or GCRA's state
/// (one number) waits between requests in a word beside the lock, where a single-limit request
/// updates it with one compare-and-swap, without the lock (see the `slot` module).
///
/// - **Linearizable per key** and **all-or-nothing across keys**: the keys of one request are locked
///   in one global order (by slot address), so two requests can never deadlock, and a denied
///   request consumes nothing. A request that locks a key takes its state out of the word first,
///   so no lock-free update lands while it holds the key.
/// - **No allocation per decision** once a key exists: lookups borrow the key; only a new key is
///   copied into the table.
/// - **Bounded**: every state knows when it expires; a sweeper drops expired keys (never one timer
///   per request), and `max_keys` caps the table (see [`OnFull`]).
///
/// Cloning shares the same table.
#[derive(Debug)]
pub struct MemoryStore<C: Clock = SystemClock> {
    inner: Arc<Inner<C>>,
}

impl<C: Clock> Clone for MemoryStore<C> {
    fn clone(&self) -> Self {
        MemoryStore { inner: Arc::clone(&self.inner) }
    }
}

#[derive(Debug)]
struct Inner<C> {
    map: papaya::HashMap<StoredKey, Slot, KeyHashing>,
    /// The map's hasher, for hashing the keys looked up.
    hashing: KeyHashing,
    clock: C,
    config: MemoryConfig,
    len: AtomicUsize,
    /// Heap bytes of keys too long to be stored inline.
    key_bytes: AtomicUsize,
    overflows: AtomicUsize,
    /// Overflow counters held (in `map`, beside the keys, not counted in `len`).
    counters: AtomicUsize,
    /// Overflow decisions, per scope of a rule that has overflowed.
    overflowed: papaya::HashMap<Box<[u8]>, AtomicU64>,
    /// Chooses a new key's overflow counter: SipHash, keyed at random per store.
    overflow_hashing: RandomState,
    sweeper_running: AtomicBool,
    /// Reservation records, by id: a plain map under one lock (reservations are settled at the
    /// pace of calls to a model, not of rate-limit checks); swept with the keys.
    records: parking_lot::Mutex<std::collections::HashMap<Box<[u8]>, Kept>>,
    /// The write-ahead log, when the store persists (see the `persist` module).
    wal: Option<Wal>,
    /// What opening the persisted state found.
    recovered: Option<Recovered>,
}

/// A reservation record in memory.
#[derive(Debug)]
struct Kept {
    body: Vec<u8>,
    expires_at: Timestamp,
    forget_at: Timestamp,
    settled: Option<Vec<u8>>,
}

/// The slots of a multi-key call, locked ([`MemoryStore::lock_all`]): `slots[i]` is op `i`'s slot,
/// `locks[lock_of[i]]` its lock (ops sharing a slot share it).
struct Locked<'g> {
    slots: SmallVec<[Option<&'g Slot>; 4]>,
    locks: SmallVec<[Option<Held<'g>>; 4]>,
    lock_of: SmallVec<[usize; 4]>,
}

/// A held lock with the key it is logged under ([`MemoryStore::log_locked`]).
type HeldKey<'a, 'h> = (SmallVec<[u8; 64]>, &'a Held<'h>);

/// What a note of [`Store::adjust_once`] holds in the records' table, where it is kept (and
/// persisted, and swept) like a reservation record; its body is empty, so it never reads as one.
const ONCE_NOTE: &[u8] = b"once";

/// Table overhead per entry beyond the key and slot, for the memory estimate: papaya's entry
/// allocation (allocator header and padding) plus its pointer and metadata in the table.
const ENTRY_OVERHEAD: usize = 32;

impl MemoryStore<SystemClock> {
    /// A store with default settings on the process clock.
    pub fn new() -> Self {
        Self::with_config(MemoryConfig::default(), SystemClock::new())
    }
}

impl Default for MemoryStore<SystemClock> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Clock> MemoryStore<C> {
    /// A store with `config`, reading time from `clock`. `overflow_counters` is kept within 1 and
    /// [`MemoryConfig::MAX_OVERFLOW_COUNTERS`] (the configuration file refuses values outside).
    /// It keeps its state in memory only: `config.persist` is opened by [`MemoryStore::open`].
    pub fn with_config(config: MemoryConfig, clock: C) -> Self {
        Self::build(config, clock, None)
    }

    /// A store with `config` on `clock`, persisted as `config.persist` says: the state kept in its
    /// directory is loaded (what was found is returned), every change is logged there, and a
    /// background thread takes checkpoints. Without `persist`, the same as
    /// [`MemoryStore::with_config`].
    pub fn open(config: MemoryConfig, clock: C) -> Result<(Self, Recovered), PersistError> {
        let Some(persist) = config.persist.clone() else {
            return Ok((Self::with_config(config, clock), Recovered::default()));
        };
        let (wal, loaded) = Wal::open(&persist, clock.now())?;
        let store = Self::build(config, clock, Some((wal, loaded.recovered.clone())));
        store.restore(loaded.keys, loaded.records);
        store.start_checkpoints(loaded.recovered.segments > 0);
        Ok((store, loaded.recovered))
    }

    fn build(mut config: MemoryConfig, clock: C, persisted: Option<(Wal, Recovered)>) -> Self {
        let (wal, recovered) = persisted.unzip();
        config.overflow_counters = config.overflow_counters.clamp(1, MemoryConfig::MAX_OVERFLOW_COUNTERS);
        let hashing = KeyHashing::default();
        let map = papaya::HashMap::builder().hasher(hashing.clone()).build();
        MemoryStore {
            inner: Arc::new(Inner {
                map,
                hashing,
                clock,
                config,
                len: AtomicUsize::new(0),
                key_bytes: AtomicUsize::new(0),
                overflows: AtomicUsize::new(0),
                counters: AtomicUsize::new(0),
                overflowed: papaya::HashMap::new(),
                overflow_hashing: RandomState::new(),
                sweeper_running: AtomicBool::new(false),
                records: parking_lot::Mutex::new(std::collections::HashMap::new()),
                wal,
                recovered,
            }),
        }
    }

    /// What opening a persisted store found in its directory; `None` for a store that does not
    /// persist.
    pub fn recovered(&self) -> Option<&Recovered> {
        self.inner.recovered.as_ref()
    }

    /// Puts loaded keys and records in the table.
    fn restore(
        &self,
        keys: std::collections::HashMap<Box<[u8]>, (State, u32)>,
        records: std::collections::HashMap<Box<[u8]>, Kept>,
    ) {
        let inner = &*self.inner;
        let guard = inner.map.guard();
        let scopes = inner.overflowed.guard();
        for (key, (state, expires_secs)) in keys {
            inner.map.insert(StoredKey::new(&key), Slot::restored(state, expires_secs), &guard);
            inner.key_bytes.fetch_add(spilled(key.len()), Ordering::Relaxed);
            if key.first() == Some(&OVERFLOW_MARK) && key.len() >= 5 {
                inner.counters.fetch_add(1, Ordering::Relaxed);
                let scope: Box<[u8]> = key[1..key.len() - 4].into();
                inner.overflowed.get_or_insert_with(scope, || AtomicU64::new(0), &scopes);
            } else {
                inner.len.fetch_add(1, Ordering::Relaxed);
            }
        }
        *inner.records.lock() = records;
    }

    /// Starts the thread that takes checkpoints: once enough log was written, or a while after
    /// anything was, and at once when `now` (the log replayed at start is compacted). It stops when
    /// the last clone of the store is dropped.
    fn start_checkpoints(&self, now: bool) {
        let weak: Weak<Inner<C>> = Arc::downgrade(&self.inner);
        let _ = std::thread::Builder::new().name("floodgate-checkpoint".into()).spawn(move || {
            // Seconds since the last checkpoint (the thread wakes once a second).
            let mut since = 0;
            let mut wanted = now;
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let Some(inner) = weak.upgrade() else { return };
                let Some(wal) = &inner.wal else { return };
                let written = wal.written();
                since += 1;
                if wanted || written >= CHECKPOINT_BYTES || (written > 0 && since >= CHECKPOINT_EVERY_SECS) {
                    // A failed checkpoint loses nothing (the log stays): it is tried again.
                    wanted = MemoryStore { inner }.checkpoint().is_err();
                    since = 0;
                }
            }
        });
    }

    /// Writes a checkpoint of a persisted store — every live key and record — and drops the log it
    /// covers (see the `persist` module); a store that does not persist does nothing. The
    /// background thread calls it; call it at shutdown too, so that the next start loads one file.
    pub fn checkpoint(&self) -> Result<(), PersistError> {
        let inner = &*self.inner;
        let Some(wal) = &inner.wal else { return Ok(()) };
        let now = inner.clock.now();
        let now_secs = now.as_secs();
        wal.checkpoint(|flush| {
            let mut buf = Vec::with_capacity(1 << 20);
            let mut count = 0;
            let guard = inner.map.guard();
            for (key, slot) in inner.map.iter(&guard) {
                let s = slot.lock();
                let live = !matches!(s.state(), State::Empty | State::Dead | State::Reserved);
                if live && u64::from(s.expires_secs()) > now_secs {
                    encode_key(&mut buf, key.as_bytes(), s.state(), s.expires_secs());
                    count += 1;
                }
                drop(s);
                if buf.len() >= 1 << 20 {
                    flush(&mut buf)?;
                }
            }
            for (id, r) in inner.records.lock().iter() {
                if r.forget_at > now {
                    encode_record(&mut buf, id, r);
                    count += 1;
                }
            }
            flush(&mut buf)?;
            Ok(count)
        })
    }

    /// The key `slot` is held under, for the log: `key` itself, or its overflow counter's.
    fn held_key(&self, key: &[u8], slot: &Slot, guard: &impl papaya::Guard) -> SmallVec<[u8; 64]> {
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

    /// Waits until change `seq` (0: none) is on disk as the store's `fsync` says.
    async fn synced(&self, seq: u64) -> Result<(), StoreError> {
        match &self.inner.wal {
            None => Ok(()),
            Some(wal) if seq == 0 => wal.check(),
            Some(wal) => wal.durable(seq).await,
        }
    }

    /// The store's clock.
    pub fn clock(&self) -> &C {
        &self.inner.clock
    }

    /// Key count and memory estimate, for metrics.
    pub fn stats(&self) -> MemoryStats {
        let keys = self.inner.len.load(Ordering::Relaxed);
        let counters = self.inner.counters.load(Ordering::Relaxed);
        let per_entry = std::mem::size_of::<(StoredKey, Slot)>() + ENTRY_OVERHEAD;
        MemoryStats {
            keys,
            bytes_estimate: (keys + counters) * per_entry + self.inner.key_bytes.load(Ordering::Relaxed),
            max_keys: self.inner.config.max_keys,
            overflow_counters: counters,
            overflows: self.inner.overflows.load(Ordering::Relaxed),
        }
    }

    /// The rules that have overflowed, with their overflow decisions since start.
    pub fn overflow(&self) -> Vec<OverflowStats> {
        let guard = self.inner.overflowed.guard();
        self.inner
            .overflowed
            .iter(&guard)
            .map(|(scope, n)| OverflowStats { scope: scope.clone(), decisions: n.load(Ordering::Relaxed) })
            .collect()
    }

    /// Drops every key whose state has expired by the clock's `now`; returns how many it dropped.
    /// The background sweeper calls this every `sweep_interval`.
    pub fn sweep(&self) -> usize {
        let inner = &*self.inner;
        let now = inner.clock.now();
        inner.records.lock().retain(|_, r| r.forget_at > now);
        let now_secs = now.as_secs();
        let guard = inner.map.guard();
        let mut removed = 0;
        for (key, slot) in inner.map.iter(&guard) {
            if slot.expires_secs().is_some_and(|e| u64::from(e) > now_secs) {
                continue;
            }
            let mut s = slot.lock();
            if u64::from(s.expires_secs()) > now_secs || s.state().is_gone() {
                continue;
            }
            // Marked dead under its lock, then unlinked: a request that still holds the slot sees
            // `Dead` and looks the key up again, so no update can land in a removed slot.
            s.kill();
            if let Ok(Some(_)) = inner.map.remove_if(key, |_, v| std::ptr::eq(v, slot), &guard) {
                let held =
                    if key.as_bytes().first() == Some(&OVERFLOW_MARK) { &inner.counters } else { &inner.len };
                held.fetch_sub(1, Ordering::Relaxed);
                inner.key_bytes.fetch_sub(spilled(key.as_bytes().len()), Ordering::Relaxed);
                removed += 1;
            }
        }
        removed
    }

    /// Starts the background sweeper thread (once per store; later calls do nothing). It stops when
    /// the last clone of the store is dropped.
    pub fn start_sweeper(&self) {
        if self.inner.sweeper_running.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak: Weak<Inner<C>> = Arc::downgrade(&self.inner);
        let interval = self.inner.config.sweep_interval;
        let spawned = std::thread::Builder::new().name("floodgate-sweeper".into()).spawn(move || {
            loop {
                std::thread::sleep(interval);
                let Some(inner) = weak.upgrade() else { return };
                MemoryStore { inner }.sweep();
            }
        });
        if spawned.is_err() {
            self.inner.sweeper_running.store(false, Ordering::SeqCst);
        }
    }

    /// The slot for `key`, created when `create`; `None` for a key never seen when not creating.
    ///
    /// When the store is full, a new key resolves as [`OnFull`] says — also for a peek, so that a
    /// peek answers what a check would.
    #[inline]
    fn slot<'g>(
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

    /// A new key that does not fit: refused, or on its overflow counter.
    fn overflowed<'g>(
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
    fn overflow_counter<'g>(
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
    fn inherited(&self, key: &[u8], scope_len: usize, guard: &impl papaya::Guard) -> Option<(State, u32)> {
        let inner = &*self.inner;
        if inner.counters.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.counter_in_table(&key[..scope_len.min(key.len())], key, guard)?.lock().snapshot()
    }

    /// The overflow counter holding a key not in the table: that of the overflowed rule whose
    /// scope `key` begins with.
    fn counter_holding<'g>(&self, key: &[u8], guard: &'g impl papaya::Guard) -> Option<&'g Slot> {
        let inner = &*self.inner;
        if inner.counters.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let scopes = inner.overflowed.guard();
        let scope = inner.overflowed.keys(&scopes).find(|scope| key.starts_with(scope))?;
        self.counter_in_table(scope, key, guard)
    }

    /// The slot holding what was granted on `key`: its own, or — a key not in the table — the
    /// overflow counter it was granted on, if its rule overflowed. `None`: nothing to give back to.
    fn slot_holding<'g>(&self, key: &[u8], guard: &'g impl papaya::Guard) -> Option<&'g Slot> {
        self.inner
            .map
            .get(&self.inner.hashing.lookup(key), guard)
            .or_else(|| self.counter_holding(key, guard))
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

    /// Applies `ops` under the locks of their keys; the heart of [`Store::apply`].
    ///
    /// Ops must name distinct keys (the engine's keys always do: they include the rule name). On a
    /// store persisted with [`Fsync::Always`] this does not wait for the change to reach the disk:
    /// [`Store::apply`] does.
    pub fn apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        self.apply_logged(ops, mode, out)?;
        match &self.inner.wal {
            None => Ok(()),
            Some(wal) => wal.check(),
        }
    }

    /// [`MemoryStore::apply_now`], returning the sequence number of its log entry (0: none).
    fn apply_logged(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<u64, StoreError> {
        let now = self.inner.clock.now();
        let guard = self.inner.map.guard();
        let create = mode != Mode::Peek;
        out.at = now;
        out.results.clear();
        if let [op] = ops {
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
            if mode == Mode::Report {
                for (i, op) in ops.iter().enumerate() {
                    // A report creates its keys, so every op has a slot.
                    if let Some(s) = &mut locks[lock_of[i]] {
                        let (decision, grant) = with_algorithm!(op.limit, a => report(a, s, now, op.cost));
                        results.push(OpResult { decision, grant: Some(grant) });
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
                let decision = with_algorithm!(op.limit, a => decide(a, &mut state, now, op.cost));
                results.push(OpResult { decision, grant: None });
            }
            let admitted = ops.iter().zip(results.iter()).all(|(op, r)| !op.enforce || r.decision.allowed);
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

    /// Resolves the slot of each op (`resolve`; `None`: the op's key has none) and locks them in one
    /// global order — by address, which also covers keys that resolve to a shared overflow slot —
    /// each slot once. `None` when a slot was removed meanwhile: the caller resolves again.
    fn lock_all<'g>(
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

    /// [`Store::adjust_once`]: under the records' lock (where the note of each change made is
    /// kept, beside the reservation records) and the locks of every op's key, so that the change
    /// and its note are one step — and one entry of the log, on a persisted store. Returns whether
    /// it applied the change, and the log entry's sequence number (0: none).
    fn adjust_now(
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
                results.push(OpResult { decision, grant: None });
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
                    OpResult { decision, grant: Some(grant) }
                }
                Mode::Check | Mode::Peek => {
                    let decision = with_algorithm!(op.limit, a => decide(a, &mut s, now, op.cost));
                    let grant = (mode == Mode::Check && decision.allowed)
                        .then(|| with_algorithm!(op.limit, a => consume(a, &mut s, now, op.cost)));
                    OpResult { decision, grant }
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

    fn refund_now(&self, key: &[u8], limit: &Limit, grant: Grant) -> u64 {
        let now = self.inner.clock.now();
        let guard = self.inner.map.guard();
        if let Some(slot) = self.slot_holding(key, &guard) {
            let mut s = slot.lock();
            if !s.state().is_gone() {
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
    fn reset_now(&self, key: &[u8]) -> (bool, u64) {
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

impl<C: Clock> Store for MemoryStore<C> {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        let seq = self.apply_logged(ops, mode, out)?;
        self.synced(seq).await
    }

    /// `None` on a store persisted with [`Fsync::Always`]: its answers wait for the disk.
    fn try_apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Option<Result<(), StoreError>> {
        if self.inner.wal.as_ref().is_some_and(|wal| wal.waits()) {
            return None;
        }
        Some(self.apply_now(ops, mode, out))
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        let seq = self.refund_now(key, limit, grant);
        self.synced(seq).await
    }

    async fn adjust_once(
        &self,
        ops: &[Op<'_>],
        adjustment: Adjustment<'_>,
        once: Once<'_>,
    ) -> Result<bool, StoreError> {
        let (applied, seq) = self.adjust_now(ops, adjustment, once)?;
        self.synced(seq).await?;
        Ok(applied)
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        let (existed, seq) = self.reset_now(key);
        self.synced(seq).await?;
        Ok(existed)
    }

    async fn put_record(
        &self,
        id: &[u8],
        body: &[u8],
        ttl: Duration,
        kept: Duration,
    ) -> Result<Timestamp, StoreError> {
        let now = self.inner.clock.now();
        let expires_at = now.saturating_add(ttl);
        let record = Kept {
            body: body.to_vec(),
            expires_at,
            forget_at: now.saturating_add(kept.max(ttl)),
            settled: None,
        };
        let seq = {
            let mut records = self.inner.records.lock();
            let seq =
                self.inner.wal.as_ref().map_or(0, |wal| wal.append(|buf| encode_record(buf, id, &record)));
            records.insert(id.into(), record);
            seq
        };
        self.synced(seq).await?;
        Ok(expires_at)
    }

    async fn get_record(&self, id: &[u8]) -> Result<Option<Record>, StoreError> {
        let now = self.inner.clock.now();
        let records = self.inner.records.lock();
        Ok(records.get(id).filter(|r| r.forget_at > now).map(|r| Record {
            body: r.body.clone(),
            expires_at: r.expires_at,
            expired: r.settled.is_none() && now >= r.expires_at,
            settled: r.settled.clone(),
            kept_for: r.forget_at.saturating_since(now),
        }))
    }

    async fn settle_record(&self, id: &[u8], settlement: &[u8]) -> Result<Settle, StoreError> {
        let now = self.inner.clock.now();
        let (settle, seq) = {
            let mut records = self.inner.records.lock();
            let Some(r) = records.get_mut(id).filter(|r| r.forget_at > now) else {
                return Ok(Settle::Missing);
            };
            match &r.settled {
                // Settled by a call that may still be waiting for its entry to reach the disk.
                Some(done) => {
                    (Settle::Already(done.clone()), self.inner.wal.as_ref().map_or(0, Wal::last_seq))
                }
                None if now >= r.expires_at => (Settle::Expired, 0),
                None => {
                    r.settled = Some(settlement.to_vec());
                    let seq =
                        self.inner.wal.as_ref().map_or(0, |wal| wal.append(|buf| encode_record(buf, id, r)));
                    (Settle::Settled, seq)
                }
            }
        };
        self.synced(seq).await?;
        Ok(settle)
    }
}

#[cfg(test)]
mod tests;
