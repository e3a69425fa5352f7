//! Recovery: what a persisted store finds in its directory at start — the snapshot loaded, the
//! newer log segments replayed, a torn tail cut off the last one, expired states dropped.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;
use std::time::Instant;

use floodgate_core::Timestamp;

use super::codec::{Entry, HEADER, SNAP_MAGIC, WAL_MAGIC, decode, entry_at};
use super::segments;
use super::{PersistError, Recovered, io_at};
use crate::store::memory::Kept;
use crate::store::memory::slot::State;

/// What the directory held, replayed.
pub(crate) struct Loaded {
    pub(crate) keys: HashMap<Box<[u8]>, (State, u32)>,
    pub(crate) records: HashMap<Box<[u8]>, Kept>,
    pub(crate) recovered: Recovered,
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

/// Loads the snapshot and replays the newer segments, cutting a torn tail off the last one.
/// Returns what was loaded and the number of the segment to write next.
#[allow(clippy::disallowed_methods)] // how long loading took, reported, never decided on
pub(super) fn load(dir: &Path, now: Timestamp) -> Result<(Loaded, u64), PersistError> {
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
