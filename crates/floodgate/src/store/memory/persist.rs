//! The memory store's durability (`store: {kind: memory, persist: {path, fsync}}`): a write-ahead
//! log of **post-states** and periodic checkpoints, in one directory.
//!
//! # What is logged
//!
//! After a call changes a key, the key's new state and expiry are appended to the log while its
//! lock is still held, so the order of a key's entries in the log is the order of its changes (the
//! position in the log is the global sequence number). A reset logs the key's removal; a
//! reservation record is logged whole each time it is written or settled, under the records' lock.
//! Replay keeps the last entry of each key and record. A key that expires is not logged (the
//! sweeper drops it from memory; replay skips an expired state).
//!
//! # Group commit
//!
//! Appends go to an in-memory buffer. One writer thread takes whatever has arrived, writes it, and
//! with [`Fsync::Always`] calls `fdatasync` before telling the callers of that batch their change is
//! on disk (the memory store's `apply`, `refund`, `reset` and record calls wait for it before they
//! answer). With [`Fsync::Every`] callers are answered at once and the writer writes and syncs once
//! per interval. A failed write or sync fails every later call ([`StoreError::Backend`]): nothing
//! is acknowledged that is not on disk.
//!
//! # Files
//!
//! - `LOCK`: held (`flock`) while a process uses the directory.
//! - `wal-<n>.log` (n: 16 digits): log segments, an 8-byte magic then entries, each
//!   `length (u32 LE) | crc32 (u32 LE) | payload`.
//! - `snapshot`: a checkpoint: its magic, the first segment to replay after it, then entries like
//!   the log's (live keys and records), then an end entry with their count. Written to
//!   `snapshot.tmp`, synced, renamed over `snapshot`, and the directory synced; then the segments
//!   it covers are deleted.
//!
//! On start: the snapshot is loaded, newer segments replayed, expired states dropped. A bad entry
//! at the end of the last segment (followed by no valid entry) is a write torn by a crash — never
//! acknowledged — and is cut off ([`Recovered::truncated`]). Any other bad entry refuses the start
//! with [`PersistError::Corrupt`], naming the file and offset: acknowledged data is never dropped
//! silently.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use floodgate_core::{LeaseState, LogState, SlidingState, Timestamp, WindowState};
use parking_lot::{Condvar, Mutex};

use super::Kept;
use super::slot::State;
use crate::store::StoreError;

/// Where and how the memory store persists its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistConfig {
    /// The directory holding the log and snapshot (created if missing; one process at a time).
    pub path: PathBuf,
    /// When the log is synced to disk.
    pub fsync: Fsync,
}

/// When the log is synced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// Before each call is answered (calls arriving together share one sync): every
    /// acknowledged change survives a crash.
    Always,
    /// Once per interval; calls are answered at once, and a crash loses at most the changes of the
    /// last interval.
    Every(Duration),
}

/// The persistence directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// A file operation failed.
    #[error("store.persist: {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// Another process holds the directory's lock.
    #[error(
        "store.persist: {path} is in use by another process (its LOCK file is held); one floodgate per directory"
    )]
    Locked {
        /// The directory.
        path: PathBuf,
    },
    /// A file is damaged where a crash cannot have left it.
    #[error(
        "store.persist: {path} is corrupt at byte {offset}: {what}; refusing to start, as acknowledged \
         state would be lost (restore the file from a backup, or move it away to start without it)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where its bad entry starts.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

/// What opening a persisted store found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Keys restored (overflow counters included).
    pub keys: usize,
    /// Reservation records restored.
    pub records: usize,
    /// Keys and records dropped because they had expired.
    pub expired: usize,
    /// Log segments replayed.
    pub segments: usize,
    /// A torn tail cut off the last segment: the file, where it was cut, and the bytes dropped.
    pub truncated: Option<(PathBuf, u64, u64)>,
    /// How long loading took.
    pub took: Duration,
}

const WAL_MAGIC: &[u8; 8] = b"FGWAL\0\0\x01";
const SNAP_MAGIC: &[u8; 8] = b"FGSNP\0\0\x01";
const HEADER: usize = 8;
/// The largest entry (a sliding log's entries bound it).
const MAX_ENTRY: usize = 256 << 20;

const PUT: u8 = 1;
const DELETE: u8 = 2;
const RECORD: u8 = 3;
const END: u8 = 4;
/// Entries that stand or fall together: replay applies all of them or, when the group is torn, none.
const GROUP: u8 = 5;

/// A checkpoint is taken once this much log has been written since the last one.
pub(super) const CHECKPOINT_BYTES: u64 = 64 << 20;
/// ... or this many seconds after the last one, when anything was logged since.
pub(super) const CHECKPOINT_EVERY_SECS: u64 = 300;

// ---------------------------------------------------------------------------------------------
// Encoding

/// Appends one framed entry: `payload` writes it.
fn frame(buf: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) {
    let at = buf.len();
    buf.extend_from_slice(&[0; 8]);
    payload(buf);
    let len = (buf.len() - at - 8) as u32;
    let crc = crc32fast::hash(&buf[at + 8..]);
    buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
    buf[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
}

fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// A key's state after a change (or its removal, when it holds none).
pub(super) fn encode_key(buf: &mut Vec<u8>, key: &[u8], state: &State, expires_secs: u32) {
    frame(buf, |b| {
        let tag = match state {
            State::Tat(_) => 1,
            State::Gcra(_) => 2,
            State::Window(_) => 3,
            State::Quota(_) => 4,
            State::Budget(_) => 5,
            State::Sliding(_) => 6,
            State::Log(_) => 7,
            State::Lease(_) => 8,
            State::Empty | State::Dead | State::Reserved => {
                b.push(DELETE);
                put_bytes(b, key);
                return;
            }
        };
        b.push(PUT);
        put_bytes(b, key);
        b.extend_from_slice(&expires_secs.to_le_bytes());
        b.push(tag);
        match state {
            State::Tat(t) | State::Gcra(t) => put_u64(b, *t),
            State::Window(w) | State::Quota(w) | State::Budget(w) => {
                put_u64(b, w.start);
                put_u64(b, w.count);
            }
            State::Sliding(s) => {
                put_u64(b, s.start);
                put_u64(b, s.prev);
                put_u64(b, s.curr);
            }
            State::Log(log) => {
                put_u64(b, log.entries.len() as u64);
                for (t, c) in &log.entries {
                    put_u64(b, *t);
                    put_u64(b, *c);
                }
            }
            State::Lease(l) => {
                put_u64(b, l.next_id);
                put_u64(b, l.leases.len() as u64);
                for (id, until, cost) in &l.leases {
                    put_u64(b, *id);
                    put_u64(b, *until);
                    put_u64(b, *cost);
                }
            }
            State::Empty | State::Dead | State::Reserved => unreachable!("returned above"),
        }
    });
}

/// A key's removal.
pub(super) fn encode_delete(buf: &mut Vec<u8>, key: &[u8]) {
    encode_key(buf, key, &State::Empty, 0);
}

/// A reservation record as it is now.
pub(super) fn encode_record(buf: &mut Vec<u8>, id: &[u8], r: &Kept) {
    frame(buf, |b| {
        b.push(RECORD);
        put_bytes(b, id);
        put_bytes(b, &r.body);
        put_u64(b, r.expires_at.as_micros());
        put_u64(b, r.forget_at.as_micros());
        match &r.settled {
            Some(s) => {
                b.push(1);
                put_bytes(b, s);
            }
            None => b.push(0),
        }
    });
}

/// Entries that stand or fall together, as one framed entry: `entries` writes them (framed by the
/// functions above). Not nested. The group's checksum covers them, so theirs are zeroed: a group
/// torn off the tail then holds nothing that reads as a valid entry of its own, and is dropped
/// whole as a torn tail rather than taken for corruption before one.
pub(super) fn encode_group(buf: &mut Vec<u8>, entries: impl FnOnce(&mut Vec<u8>)) {
    frame(buf, |b| {
        b.push(GROUP);
        let mut pos = b.len();
        entries(b);
        while pos + 8 <= b.len() {
            let len = u32::from_le_bytes([b[pos], b[pos + 1], b[pos + 2], b[pos + 3]]) as usize;
            b[pos + 4..pos + 8].fill(0);
            pos += 8 + len;
        }
    });
}

/// One decoded entry.
enum Entry {
    Put(Box<[u8]>, State, u32),
    Delete(Box<[u8]>),
    Record(Box<[u8]>, Kept),
    End(u64),
    Group(Vec<Entry>),
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A count of items of `size` bytes each, checked against what is left.
    fn count(&mut self, size: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n.checked_mul(size)? <= self.bytes.len()).then_some(n)
    }
}

fn decode(payload: &[u8]) -> Option<Entry> {
    let mut r = Reader { bytes: payload };
    let entry = match r.u8()? {
        PUT => {
            let key = r.bytes()?.into();
            let expires = r.u32()?;
            let state = match r.u8()? {
                1 => State::Tat(r.u64()?),
                2 => State::Gcra(r.u64()?),
                t @ 3..=5 => {
                    let w = WindowState { start: r.u64()?, count: r.u64()? };
                    match t {
                        3 => State::Window(w),
                        4 => State::Quota(w),
                        _ => State::Budget(w),
                    }
                }
                6 => State::Sliding(SlidingState { start: r.u64()?, prev: r.u64()?, curr: r.u64()? }),
                7 => {
                    let n = r.count(16)?;
                    let mut log = LogState::default();
                    for _ in 0..n {
                        log.entries.push_back((r.u64()?, r.u64()?));
                    }
                    State::Log(Box::new(log))
                }
                8 => {
                    let next_id = r.u64()?;
                    let n = r.count(24)?;
                    let mut leases = Vec::with_capacity(n);
                    for _ in 0..n {
                        leases.push((r.u64()?, r.u64()?, r.u64()?));
                    }
                    State::Lease(Box::new(LeaseState { leases, next_id }))
                }
                _ => return None,
            };
            Entry::Put(key, state, expires)
        }
        DELETE => Entry::Delete(r.bytes()?.into()),
        RECORD => {
            let id = r.bytes()?.into();
            let body = r.bytes()?.to_vec();
            let expires_at = Timestamp::from_micros(r.u64()?);
            let forget_at = Timestamp::from_micros(r.u64()?);
            let settled = match r.u8()? {
                0 => None,
                1 => Some(r.bytes()?.to_vec()),
                _ => return None,
            };
            Entry::Record(id, Kept { body, expires_at, forget_at, settled })
        }
        END => Entry::End(r.u64()?),
        GROUP => {
            let bytes = r.bytes;
            r.bytes = &[];
            let mut entries = Vec::new();
            let mut pos = 0;
            while pos < bytes.len() {
                let (payload, end) = grouped_at(bytes, pos)?;
                match decode(payload)? {
                    Entry::Group(_) | Entry::End(_) => return None,
                    entry => entries.push(entry),
                }
                pos = end;
            }
            Entry::Group(entries)
        }
        _ => return None,
    };
    r.bytes.is_empty().then_some(entry)
}

/// The valid entry at `pos`, if one is there: its payload and end.
fn entry_at(bytes: &[u8], pos: usize) -> Result<(&[u8], usize), &'static str> {
    let rest = &bytes[pos..];
    if rest.len() < 8 {
        return Err("an entry header cut short");
    }
    let len = u32::from_le_bytes(rest[..4].try_into().unwrap_or_default()) as usize;
    let crc = u32::from_le_bytes(rest[4..8].try_into().unwrap_or_default());
    if len == 0 || len > MAX_ENTRY {
        return Err("an impossible entry length");
    }
    if rest.len() < 8 + len {
        return Err("an entry cut short");
    }
    let payload = &rest[8..8 + len];
    if crc32fast::hash(payload) != crc {
        return Err("a checksum mismatch");
    }
    Ok((payload, pos + 8 + len))
}

/// The entry of a group at `pos` (see [`encode_group`]): its payload and end.
fn grouped_at(bytes: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let header = bytes.get(pos..pos + 8)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len == 0 || header[4..] != [0; 4] {
        return None;
    }
    Some((bytes.get(pos + 8..pos + 8 + len)?, pos + 8 + len))
}

/// Whether any valid entry starts after `pos` (then a bad entry at `pos` is not a torn tail).
fn valid_entry_after(bytes: &[u8], pos: usize) -> bool {
    (pos + 1..bytes.len().saturating_sub(8))
        .any(|p| matches!(entry_at(bytes, p), Ok((payload, _)) if decode(payload).is_some()))
}

/// Reads the entries of one file (after its header), handing each to `each`. Returns the offset
/// where its valid entries end, and whether a torn tail follows it (only when `last`).
fn read_entries(
    path: &Path,
    bytes: &[u8],
    start: usize,
    last: bool,
    mut each: impl FnMut(Entry),
) -> Result<(usize, bool), PersistError> {
    let mut pos = start;
    while pos < bytes.len() {
        let bad = match entry_at(bytes, pos) {
            Ok((payload, end)) => match decode(payload) {
                Some(entry) => {
                    each(entry);
                    pos = end;
                    continue;
                }
                None => "an entry that does not decode",
            },
            Err(what) => what,
        };
        if last && !valid_entry_after(bytes, pos) {
            return Ok((pos, true));
        }
        return Err(PersistError::Corrupt { path: path.to_owned(), offset: pos as u64, what: bad.into() });
    }
    Ok((pos, false))
}

// ---------------------------------------------------------------------------------------------
// Loading

/// What the directory held, replayed.
pub(super) struct Loaded {
    pub(super) keys: HashMap<Box<[u8]>, (State, u32)>,
    pub(super) records: HashMap<Box<[u8]>, Kept>,
    pub(super) recovered: Recovered,
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> PersistError + '_ {
    move |source| PersistError::Io { path: path.to_owned(), source }
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("wal-{n:016}.log"))
}

/// The segments in `dir`, by number.
fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, PersistError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_at(dir))? {
        let entry = entry.map_err(io_at(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name.strip_prefix("wal-").and_then(|n| n.strip_suffix(".log"))
            && let Ok(n) = n.parse::<u64>()
        {
            out.push((n, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

fn sync_dir(dir: &Path) -> Result<(), PersistError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_at(dir))
}

/// Loads the snapshot and replays the newer segments, cutting a torn tail off the last one.
/// Returns what was loaded and the number of the segment to write next.
#[allow(clippy::disallowed_methods)] // how long loading took, reported, never decided on
fn load(dir: &Path, now: Timestamp) -> Result<(Loaded, u64), PersistError> {
    let started = Instant::now();
    let mut keys: HashMap<Box<[u8]>, (State, u32)> = HashMap::new();
    let mut records: HashMap<Box<[u8]>, Kept> = HashMap::new();
    let mut recovered = Recovered::default();
    fn replay(
        keys: &mut HashMap<Box<[u8]>, (State, u32)>,
        records: &mut HashMap<Box<[u8]>, Kept>,
        entry: Entry,
    ) {
        match entry {
            Entry::Put(key, state, expires) => {
                keys.insert(key, (state, expires));
            }
            Entry::Delete(key) => {
                keys.remove(&key);
            }
            Entry::Record(id, kept) => {
                records.insert(id, kept);
            }
            Entry::End(_) => {}
            Entry::Group(entries) => {
                for entry in entries {
                    replay(keys, records, entry);
                }
            }
        }
    }
    let mut apply = |entry: Entry| replay(&mut keys, &mut records, entry);

    let tmp = dir.join("snapshot.tmp");
    if tmp.exists() {
        fs::remove_file(&tmp).map_err(io_at(&tmp))?;
    }
    let snapshot = dir.join("snapshot");
    let mut first = 1;
    match fs::read(&snapshot) {
        Ok(bytes) => {
            if bytes.len() < HEADER + 8 || &bytes[..8] != SNAP_MAGIC {
                return Err(PersistError::Corrupt {
                    path: snapshot,
                    offset: 0,
                    what: "not a floodgate snapshot".into(),
                });
            }
            first = u64::from_le_bytes(bytes[8..16].try_into().unwrap_or_default());
            let mut ended = None;
            let mut entries = 0u64;
            let (end, _) = read_entries(&snapshot, &bytes, HEADER + 8, false, |entry| {
                if let Entry::End(n) = entry {
                    ended = Some(n);
                } else {
                    entries += 1;
                    apply(entry);
                }
            })?;
            if ended != Some(entries) {
                return Err(PersistError::Corrupt {
                    path: snapshot,
                    offset: end as u64,
                    what: format!(
                        "it ends without its end entry, or with the wrong count ({entries} entries)"
                    ),
                });
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_at(&snapshot)(e)),
    }

    let all = segments(dir)?;
    let mut next = first.max(1);
    let live: Vec<_> = all.iter().filter(|(n, _)| *n >= first).collect();
    for (i, (n, path)) in live.iter().enumerate() {
        let last = i + 1 == live.len();
        let bytes = fs::read(path).map_err(io_at(path))?;
        next = next.max(n + 1);
        recovered.segments += 1;
        if bytes.len() < HEADER {
            // Created but its header never reached the disk: only the last segment can be so.
            if last && (bytes.iter().all(|b| *b == 0) || WAL_MAGIC.starts_with(&bytes)) {
                continue;
            }
            return Err(PersistError::Corrupt {
                path: path.clone(),
                offset: 0,
                what: "a header cut short".into(),
            });
        }
        if &bytes[..8] != WAL_MAGIC {
            return Err(PersistError::Corrupt {
                path: path.clone(),
                offset: 0,
                what: "not a floodgate log".into(),
            });
        }
        let (end, torn) = read_entries(path, &bytes, HEADER, last, &mut apply)?;
        if torn {
            let file = OpenOptions::new().write(true).open(path).map_err(io_at(path))?;
            file.set_len(end as u64).and_then(|()| file.sync_all()).map_err(io_at(path))?;
            recovered.truncated = Some((path.clone(), end as u64, (bytes.len() - end) as u64));
        }
    }
    // Segments a checkpoint covered but had not yet deleted when the process stopped.
    for (n, path) in &all {
        if *n < first {
            fs::remove_file(path).map_err(io_at(path))?;
        }
    }

    let now_secs = now.as_secs();
    let before = keys.len() + records.len();
    keys.retain(|_, (_, expires)| u64::from(*expires) > now_secs);
    records.retain(|_, r| r.forget_at > now);
    recovered.expired = before - keys.len() - records.len();
    recovered.keys = keys.len();
    recovered.records = records.len();
    recovered.took = started.elapsed();
    Ok((Loaded { keys, records, recovered }, next))
}

// ---------------------------------------------------------------------------------------------
// The log

/// The write-ahead log of one persisted memory store.
#[derive(Debug)]
pub(super) struct Wal {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// One checkpoint at a time.
    checkpointing: Mutex<()>,
    /// Held while the store uses the directory.
    _lock: File,
}

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    fsync: Fsync,
    pending: Mutex<Pending>,
    wake: Condvar,
    /// The highest sequence number on disk (written, and synced as `fsync` says).
    durable: AtomicU64,
    /// Set when a write or sync failed: every later call fails.
    failed: Mutex<Option<String>>,
    broken: AtomicBool,
    waiters: Mutex<Vec<(u64, Waker)>>,
    stop: AtomicBool,
    /// Log bytes written since the last checkpoint.
    written: AtomicU64,
}

#[derive(Debug, Default)]
struct Pending {
    /// Entries not yet handed to the writer, by segment.
    chunks: Vec<(u64, Vec<u8>)>,
    /// The last sequence number given.
    seq: u64,
    /// The segment new entries go to.
    segment: u64,
    /// Emptied buffers, for reuse.
    spare: Vec<Vec<u8>>,
}

impl Wal {
    /// Opens `config.path` (created if missing), locks it, and loads what it holds.
    pub(super) fn open(config: &PersistConfig, now: Timestamp) -> Result<(Wal, Loaded), PersistError> {
        let dir = &config.path;
        fs::create_dir_all(dir).map_err(io_at(dir))?;
        let lock_path = dir.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_at(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(PersistError::Locked { path: dir.clone() }),
            Err(fs::TryLockError::Error(e)) => return Err(io_at(&lock_path)(e)),
        }
        let (loaded, next) = load(dir, now)?;
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            fsync: config.fsync,
            pending: Mutex::new(Pending { segment: next, ..Pending::default() }),
            wake: Condvar::new(),
            durable: AtomicU64::new(0),
            failed: Mutex::new(None),
            broken: AtomicBool::new(false),
            waiters: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            written: AtomicU64::new(0),
        });
        let for_writer = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("floodgate-wal".into())
            .spawn(move || for_writer.run())
            .map_err(io_at(dir))?;
        let wal =
            Wal { shared, writer: Mutex::new(Some(writer)), checkpointing: Mutex::new(()), _lock: lock };
        Ok((wal, loaded))
    }

    /// Appends entries (`write` encodes them) and returns their sequence number. Call it while
    /// holding the locks of what they describe.
    #[inline]
    pub(super) fn append(&self, write: impl FnOnce(&mut Vec<u8>)) -> u64 {
        let shared = &*self.shared;
        let mut p = shared.pending.lock();
        let segment = p.segment;
        if p.chunks.last().is_none_or(|(s, _)| *s != segment) {
            let buf = p.spare.pop().unwrap_or_default();
            p.chunks.push((segment, buf));
        }
        if let Some((_, buf)) = p.chunks.last_mut() {
            write(buf);
        }
        p.seq += 1;
        let seq = p.seq;
        drop(p);
        if shared.fsync == Fsync::Always {
            shared.wake.notify_one();
        }
        seq
    }

    /// The sequence number of the last entry appended.
    pub(super) fn last_seq(&self) -> u64 {
        self.shared.pending.lock().seq
    }

    /// Whether callers wait for their changes to be synced ([`Fsync::Always`]).
    pub(super) fn waits(&self) -> bool {
        self.shared.fsync == Fsync::Always
    }

    /// The error every call gets once the log failed.
    pub(super) fn check(&self) -> Result<(), StoreError> {
        if self.shared.broken.load(Ordering::Acquire) { Err(self.shared.error()) } else { Ok(()) }
    }

    /// Completes when entry `seq` is on disk as `fsync` says: at once with an interval (unless the
    /// log failed), after its sync with [`Fsync::Always`].
    pub(super) fn durable(&self, seq: u64) -> Durable<'_> {
        Durable { shared: &self.shared, seq }
    }

    /// Log bytes written since the last checkpoint.
    pub(super) fn written(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }

    /// Takes a checkpoint: `each` writes every live key and record into the buffer it is given
    /// (flushed to the file whenever it is handed back non-empty) and returns how many it wrote.
    pub(super) fn checkpoint(
        &self,
        fill: impl FnOnce(&mut dyn FnMut(&mut Vec<u8>) -> Result<(), PersistError>) -> Result<u64, PersistError>,
    ) -> Result<(), PersistError> {
        let _one = self.checkpointing.lock();
        let shared = &*self.shared;
        // From here on entries go to a new segment: everything before is in memory, and so in
        // the snapshot.
        let (first, seq) = {
            let mut p = shared.pending.lock();
            p.segment += 1;
            (p.segment, p.seq)
        };
        let written_before = shared.written.load(Ordering::Relaxed);
        let dir = &shared.dir;
        let tmp = dir.join("snapshot.tmp");
        let mut file = File::create(&tmp).map_err(io_at(&tmp))?;
        let mut head = Vec::with_capacity(16);
        head.extend_from_slice(SNAP_MAGIC);
        put_u64(&mut head, first);
        file.write_all(&head).map_err(io_at(&tmp))?;
        let mut flush = |buf: &mut Vec<u8>| -> Result<(), PersistError> {
            file.write_all(buf).map_err(io_at(&tmp))?;
            buf.clear();
            Ok(())
        };
        let count = fill(&mut flush)?;
        let mut end = Vec::new();
        frame(&mut end, |b| {
            b.push(END);
            put_u64(b, count);
        });
        flush(&mut end)?;
        file.sync_all().map_err(io_at(&tmp))?;
        drop(file);
        let snapshot = dir.join("snapshot");
        fs::rename(&tmp, &snapshot).map_err(io_at(&snapshot))?;
        sync_dir(dir)?;
        // Wait for the writer to be done with the older segments before deleting them.
        while shared.durable.load(Ordering::Acquire) < seq && !shared.broken.load(Ordering::Acquire) {
            shared.wake.notify_one();
            std::thread::sleep(Duration::from_millis(1));
        }
        for (n, path) in segments(dir)? {
            if n < first {
                fs::remove_file(&path).map_err(io_at(&path))?;
            }
        }
        sync_dir(dir)?;
        let _ = shared
            .written
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| Some(w.saturating_sub(written_before)));
        Ok(())
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify_all();
        if let Some(writer) = self.writer.lock().take() {
            let _ = writer.join();
        }
    }
}

impl Shared {
    fn error(&self) -> StoreError {
        let why = self.failed.lock().clone().unwrap_or_default();
        StoreError::Backend {
            message: format!("the memory store's log at {} failed: {why}", self.dir.display()),
            transient: false,
            source: None,
        }
    }

    /// The writer thread: takes what arrived, writes it, syncs, tells the waiting callers.
    #[allow(clippy::disallowed_methods)] // the writer's own schedule, never a decision's time
    fn run(&self) {
        let mut file: Option<(u64, File)> = None;
        // With an interval: when the next batch is due, one interval after the last was taken
        // (not after its write and sync ended), so a crash loses at most about one interval.
        let mut due = Instant::now();
        loop {
            let (chunks, seq, stopping) = {
                let mut p = self.pending.lock();
                match self.fsync {
                    Fsync::Always => {
                        while p.chunks.is_empty() && !self.stop.load(Ordering::Acquire) {
                            self.wake.wait_for(&mut p, Duration::from_millis(100));
                        }
                    }
                    Fsync::Every(interval) => {
                        due += interval;
                        let now = Instant::now();
                        if due < now {
                            due = now;
                        }
                        // Woken early only to stop (or spuriously: then it writes early).
                        if !self.stop.load(Ordering::Acquire) {
                            self.wake.wait_until(&mut p, due);
                        }
                    }
                }
                (std::mem::take(&mut p.chunks), p.seq, self.stop.load(Ordering::Acquire))
            };
            if !chunks.is_empty() {
                match self.write(&mut file, &chunks) {
                    Ok(()) => {
                        self.durable.fetch_max(seq, Ordering::AcqRel);
                    }
                    Err(e) => {
                        *self.failed.lock() = Some(e.to_string());
                        self.broken.store(true, Ordering::Release);
                    }
                }
                let mut p = self.pending.lock();
                for (_, mut buf) in chunks {
                    if p.spare.len() < 4 && buf.capacity() <= 4 << 20 {
                        buf.clear();
                        p.spare.push(buf);
                    }
                }
            } else {
                self.durable.fetch_max(seq, Ordering::AcqRel);
            }
            self.wake_waiters();
            if stopping || self.broken.load(Ordering::Acquire) {
                return;
            }
        }
    }

    fn write(&self, file: &mut Option<(u64, File)>, chunks: &[(u64, Vec<u8>)]) -> Result<(), PersistError> {
        for (segment, bytes) in chunks {
            if file.as_ref().is_none_or(|(n, _)| n != segment) {
                // Finish the old segment first: only the last one may end torn.
                if let Some((n, old)) = file.take() {
                    old.sync_data().map_err(io_at(&segment_path(&self.dir, n)))?;
                }
                let path = segment_path(&self.dir, *segment);
                let mut f = OpenOptions::new().create(true).append(true).open(&path).map_err(io_at(&path))?;
                if f.metadata().map_err(io_at(&path))?.len() == 0 {
                    f.write_all(WAL_MAGIC).map_err(io_at(&path))?;
                }
                f.sync_all().map_err(io_at(&path))?;
                sync_dir(&self.dir)?;
                *file = Some((*segment, f));
            }
            if let Some((n, f)) = file.as_mut() {
                f.write_all(bytes).map_err(io_at(&segment_path(&self.dir, *n)))?;
            }
            self.written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        if let Some((n, f)) = file.as_ref() {
            f.sync_data().map_err(io_at(&segment_path(&self.dir, *n)))?;
        }
        Ok(())
    }

    fn wake_waiters(&self) {
        let durable = self.durable.load(Ordering::Acquire);
        let broken = self.broken.load(Ordering::Acquire);
        let mut waiters = self.waiters.lock();
        waiters.retain(|(seq, waker)| {
            if broken || *seq <= durable {
                waker.wake_by_ref();
                false
            } else {
                true
            }
        });
    }
}

/// See [`Wal::durable`].
#[derive(Debug)]
pub(super) struct Durable<'a> {
    shared: &'a Shared,
    seq: u64,
}

impl Future for Durable<'_> {
    type Output = Result<(), StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let shared = self.shared;
        let ready = |shared: &Shared| {
            if shared.broken.load(Ordering::Acquire) {
                Some(Err(shared.error()))
            } else if shared.fsync != Fsync::Always || shared.durable.load(Ordering::Acquire) >= self.seq {
                Some(Ok(()))
            } else {
                None
            }
        };
        if let Some(done) = ready(shared) {
            return Poll::Ready(done);
        }
        let mut waiters = shared.waiters.lock();
        // Checked again under the lock: the writer wakes waiters under it after updating `durable`.
        if let Some(done) = ready(shared) {
            return Poll::Ready(done);
        }
        waiters.push((self.seq, cx.waker().clone()));
        Poll::Pending
    }
}

#[cfg(test)]
mod tests;
