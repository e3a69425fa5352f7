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
//! per interval. A failed write or sync fails every later call
//! ([`StoreError::Backend`](crate::StoreError::Backend)): nothing is acknowledged that is not on
//! disk.
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
//!
//! # Where the code is
//!
//! - `codec`: how entries are encoded and decoded, each framed with its length and checksum.
//! - `recovery`: loading the snapshot and replaying the log at start, cutting a torn tail.
//! - `log`: the write-ahead log: appending, the writer thread and its syncs, segments, checkpoints.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod codec;
mod log;
mod recovery;

pub(crate) use codec::{encode_delete, encode_group, encode_key, encode_record};
pub(crate) use log::{CHECKPOINT_BYTES, CHECKPOINT_EVERY_SECS, Wal};

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

/// An I/O error on `path`, as a [`PersistError::Io`].
fn io_at(path: &Path) -> impl FnOnce(io::Error) -> PersistError + '_ {
    move |source| PersistError::Io { path: path.to_owned(), source }
}

#[cfg(test)]
mod tests;

/// The path of log segment `n` in `dir`.
pub(super) fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("wal-{n:016}.log"))
}

/// The segments in `dir`, by number.
pub(super) fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, PersistError> {
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
