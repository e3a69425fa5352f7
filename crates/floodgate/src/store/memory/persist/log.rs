//! The write-ahead log: appends buffered in memory, one writer thread that writes them to the
//! current segment and syncs as [`Fsync`] says, the callers told when their change is on disk, and
//! checkpoints that write a snapshot and drop the segments it covers.

use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use floodgate_core::Timestamp;
use parking_lot::{Condvar, Mutex};

use super::codec::{SNAP_MAGIC, WAL_MAGIC, encode_end};
use super::recovery::{Loaded, load};
use super::{Fsync, PersistConfig, PersistError, io_at, segment_path, segments};
use crate::store::StoreError;

/// A checkpoint is taken once this much log has been written since the last one.
pub(crate) const CHECKPOINT_BYTES: u64 = 64 << 20;
/// ... or this many seconds after the last one, when anything was logged since.
pub(crate) const CHECKPOINT_EVERY_SECS: u64 = 300;

fn sync_dir(dir: &Path) -> Result<(), PersistError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_at(dir))
}

/// The write-ahead log of one persisted memory store.
#[derive(Debug)]
pub(crate) struct Wal {
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
    pub(crate) fn open(config: &PersistConfig, now: Timestamp) -> Result<(Wal, Loaded), PersistError> {
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
    pub(crate) fn append(&self, write: impl FnOnce(&mut Vec<u8>)) -> u64 {
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
    pub(crate) fn last_seq(&self) -> u64 {
        self.shared.pending.lock().seq
    }

    /// Whether callers wait for their changes to be synced ([`Fsync::Always`]).
    pub(crate) fn waits(&self) -> bool {
        self.shared.fsync == Fsync::Always
    }

    /// The error every call gets once the log failed.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        if self.shared.broken.load(Ordering::Acquire) { Err(self.shared.error()) } else { Ok(()) }
    }

    /// Completes when entry `seq` is on disk as `fsync` says: at once with an interval (unless the
    /// log failed), after its sync with [`Fsync::Always`].
    pub(crate) fn durable(&self, seq: u64) -> Durable<'_> {
        Durable { shared: &self.shared, seq }
    }

    /// Log bytes written since the last checkpoint.
    pub(crate) fn written(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }

    /// Takes a checkpoint: `each` writes every live key and record into the buffer it is given
    /// (flushed to the file whenever it is handed back non-empty) and returns how many it wrote.
    pub(crate) fn checkpoint(
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
        head.extend_from_slice(&first.to_le_bytes());
        file.write_all(&head).map_err(io_at(&tmp))?;
        let mut flush = |buf: &mut Vec<u8>| -> Result<(), PersistError> {
            file.write_all(buf).map_err(io_at(&tmp))?;
            buf.clear();
            Ok(())
        };
        let count = fill(&mut flush)?;
        let mut end = Vec::new();
        encode_end(&mut end, count);
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
pub(crate) struct Durable<'a> {
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
