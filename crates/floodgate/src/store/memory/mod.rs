//! The embedded memory store: the default, with no setup.
//!
//! - `config`: its settings, and what it does with a new key once it is full.
//! - `key`: keys as the table holds them, and how they are hashed.
//! - `slot`: a key's state behind its lock, and the word beside it for token buckets and GCRA.
//! - `lookup`: finding a key's slot, or inserting a new key within `max_keys`.
//! - `overflow`: the counters a rule's new keys share while the store is full.
//! - `lock`: locking the keys of a multi-key call in one order.
//! - `apply`: the changes made under those locks, and their log entries.
//! - `persist`: the log and the checkpoints of a persisted store, and loading them at start.

use std::hash::RandomState;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use floodgate_core::{Clock, Grant, SystemClock, Timestamp};

use super::{Adjustment, Applied, Mode, Once, Op, Record, Records, Settle, Store, StoreError};
use crate::Limit;
use crate::key::OVERFLOW_MARK;

mod apply;
mod config;
mod key;
mod lock;
mod lookup;
mod overflow;
mod persist;
mod slot;

pub use config::{MemoryConfig, OnFull};
use key::{KeyHashing, StoredKey, spilled};
pub use overflow::OverflowStats;
use persist::{CHECKPOINT_BYTES, CHECKPOINT_EVERY_SECS, Wal, encode_key, encode_record};
pub use persist::{Fsync, PersistConfig, PersistError, Recovered};
use slot::{Slot, State};

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
    /// The sweeper has reported the records that expired unsettled up to this time, in µs on the
    /// store's clock (written under `records`' lock).
    expiries_seen: AtomicU64,
    /// Told of each record that expires unsettled ([`MemoryStore::on_expired_records`]).
    on_expired: std::sync::OnceLock<OnExpired>,
    /// The write-ahead log, when the store persists (see the `persist` module).
    wal: Option<Wal>,
    /// What opening the persisted state found.
    recovered: Option<Recovered>,
}

/// What [`MemoryStore::on_expired_records`] is given: told of a record's body.
type ExpiredObserver = dyn Fn(&[u8]) + Send + Sync;

/// What [`MemoryStore::on_expired_records`] calls.
struct OnExpired(Box<ExpiredObserver>);

impl std::fmt::Debug for OnExpired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnExpired")
    }
}

/// A reservation record in memory.
#[derive(Debug)]
struct Kept {
    body: Vec<u8>,
    expires_at: Timestamp,
    forget_at: Timestamp,
    settled: Option<Vec<u8>>,
}

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
        let opened = clock.now();
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
                expiries_seen: AtomicU64::new(opened.as_micros()),
                on_expired: std::sync::OnceLock::new(),
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

    /// Drops every key whose state has expired by the clock's `now`, and the reservation records
    /// kept long enough; reports the records that expired unsettled since the last sweep
    /// ([`MemoryStore::on_expired_records`]). Returns how many keys it dropped. The background
    /// sweeper calls this every `sweep_interval`.
    pub fn sweep(&self) -> usize {
        let inner = &*self.inner;
        let (now, expired) = self.sweep_records();
        if let Some(observer) = inner.on_expired.get() {
            for body in &expired {
                (observer.0)(body);
            }
        }
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

    /// Forgets the records kept long enough, and returns the clock's now with the bodies of the
    /// records that expired unsettled since the last call (only while someone is told of them).
    /// The clock is read under the records' lock, as [`Records::settle_record`] reads it: a record
    /// reported here can no longer be settled, and one settled first is not reported.
    fn sweep_records(&self) -> (Timestamp, Vec<Vec<u8>>) {
        let inner = &*self.inner;
        let mut records = inner.records.lock();
        let now = inner.clock.now();
        let since = Timestamp::from_micros(inner.expiries_seen.load(Ordering::Relaxed));
        let watched = inner.on_expired.get().is_some() && now > since;
        let mut expired = Vec::new();
        records.retain(|_, r| {
            if watched && r.settled.is_none() && r.expires_at > since && r.expires_at <= now {
                expired.push(r.body.clone());
            }
            r.forget_at > now
        });
        if now > since {
            inner.expiries_seen.store(now.as_micros(), Ordering::Relaxed);
        }
        (now, expired)
    }

    /// Tells `observer` of each reservation record that expires unsettled — the body the engine
    /// wrote, once per record — from the first sweep after its expiry, on the sweeper's thread
    /// (so it must be quick). Records that expired before the store was opened (a persisted
    /// store's, while the server was down) are not told of. One observer per store: a later call
    /// does nothing.
    pub fn on_expired_records(&self, observer: impl Fn(&[u8]) + Send + Sync + 'static) {
        let _ = self.inner.on_expired.set(OnExpired(Box::new(observer)));
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
}

impl<C: Clock> MemoryStore<C> {
    /// Whether a change is answered at once ([`Store::try_apply_now`] answers): always, but on a
    /// store persisted with [`Fsync::Always`], whose answers wait for the disk.
    pub fn answers_at_once(&self) -> bool {
        !self.inner.wal.as_ref().is_some_and(|wal| wal.waits())
    }
}

impl<C: Clock> Store for MemoryStore<C> {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        let seq = self.apply_logged(ops, mode, out)?;
        self.synced(seq).await
    }

    /// `None` on a store persisted with [`Fsync::Always`]: its answers wait for the disk.
    fn try_apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Option<Result<(), StoreError>> {
        self.answers_at_once().then(|| self.apply_now(ops, mode, out))
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        let seq = self.refund_now(key, limit, grant);
        self.synced(seq).await
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        let (existed, seq) = self.reset_now(key);
        self.synced(seq).await?;
        Ok(existed)
    }
}

impl<C: Clock> Records for MemoryStore<C> {
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
        let (settle, seq) = {
            let mut records = self.inner.records.lock();
            // Read under the lock, as the sweeper reads it: see `sweep_records`.
            let now = self.inner.clock.now();
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
