//! The admin state on disk (`admin: {state_dir}` or `--state-dir`, DESIGN.md §12): the configuration
//! versions kept for rollback, the audit log, and the gateway's admin switches, so that what the
//! admin API changed outlives a restart or a `kill -9`.
//!
//! The directory holds:
//!
//! - `lock`: held (an advisory `flock`) while a server uses the directory, with its process id, so
//!   two servers never write one state;
//! - `versions/<version>.json`: one file per kept version (the last 32, as the control keeps): the
//!   texts it was read from, what applied it and when, and the hash of the configuration file as the
//!   server last read it;
//! - `audit.jsonl`: the audit log, one JSON record per line, oldest first; rewritten to the records
//!   kept (the last 1000) once it holds twice as many;
//! - `switches.json`: the gateway switches the admin API set, when any.
//!
//! **Every write is on disk before the call that made it is answered**: a version or the switches
//! are written to a temporary file, `fsync`ed, renamed over the old one, and the directory
//! `fsync`ed; an audit record is appended and `fdatasync`ed. A crash can therefore leave only a
//! torn last line of the audit log (an append that was never acknowledged), which opening cuts with
//! a warning, and stray temporary files, which opening removes. Anything else that cannot be read —
//! a version file that is not a version, a line in the middle of the log that is not a record — is
//! an error that names the file (and line) and stops the server from starting: the state is never
//! silently dropped.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};

use floodgate_config::gateway::Shed;
use floodgate_config::{self as config, Config, ConfigError, Source};
use serde::{Deserialize, Serialize};

use crate::audit::{AuditRecord, Trigger};
use crate::switches::SwitchChange;

const LOCK: &str = "lock";
const VERSIONS: &str = "versions";
const AUDIT: &str = "audit.jsonl";
const SWITCHES: &str = "switches.json";
const TMP_SUFFIX: &str = ".tmp";

/// The state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file or directory cannot be read, written or synced.
    #[error("admin state: {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// Another process holds the directory.
    #[error(
        "admin state: {path} is in use by another floodgate process ({holder}); give each server its own state_dir"
    )]
    Locked {
        /// The directory.
        path: PathBuf,
        /// Who holds it, as its lock file says.
        holder: String,
    },
    /// A file holds something that is not what the server wrote.
    #[error("admin state: {path}{}: {message}; move the file away to start without it", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The 1-based line, for the audit log.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io { path: path.to_path_buf(), source }
}

/// A configuration version as kept on disk: enough to read it again as it was applied, whatever
/// its files say now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredVersion {
    /// The version number.
    pub version: u64,
    /// When it was applied, RFC 3339.
    pub time: String,
    /// What applied it.
    pub trigger: Trigger,
    /// For a rollback: the version whose configuration it restored.
    pub restored: Option<u64>,
    /// The hash of the configuration file (or directory, or built-in example) as the server had
    /// last read it when this version was applied: at start, a file whose hash differs has changed
    /// since, and wins over what the admin API applied.
    pub file_hash: String,
    /// Where the configuration came from.
    pub source: StoredSource,
}

/// Where a kept configuration came from, with its texts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSource {
    /// The file or directory it was read from; `None` for an admin-API body or the built-in example.
    pub path: Option<PathBuf>,
    /// For a text without a file: the name its errors are reported under (`admin`, `built-in
    /// example`).
    pub name: Option<String>,
    /// Each file and its text, in load order (for a configuration read from `path`).
    pub files: Vec<StoredFile>,
    /// The text, for a configuration without a file.
    pub text: Option<String>,
    /// Its content hash, as [`Source::hash`].
    pub hash: String,
}

/// One file of a kept configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredFile {
    /// Its path when it was read.
    pub path: PathBuf,
    /// Its text then.
    pub text: String,
}

impl StoredSource {
    /// `source` as kept; `name` names a text without a file.
    pub fn of(source: &Source, name: &str) -> StoredSource {
        match &source.path {
            Some(path) if !source.files.is_empty() => StoredSource {
                path: Some(path.clone()),
                name: None,
                files: source
                    .files
                    .iter()
                    .map(|(path, text)| StoredFile { path: path.clone(), text: text.clone() })
                    .collect(),
                text: None,
                hash: source.hash.clone(),
            },
            _ => StoredSource {
                path: None,
                name: Some(name.to_owned()),
                files: Vec::new(),
                text: Some(source.text.clone()),
                hash: source.hash.clone(),
            },
        }
    }

    /// The configuration, read again from the kept texts (never from the files as they are now).
    /// Fails as the configuration would fail today (a token file gone, a field this version no
    /// longer reads), or when the texts no longer give the same hash.
    pub fn read(&self) -> Result<Config, ConfigError> {
        let config = match (&self.path, &self.text) {
            (Some(path), _) => config::from_files(
                path,
                self.files.iter().map(|f| (f.path.clone(), f.text.clone())).collect(),
            )?,
            (None, Some(text)) => config::parse(self.name.as_deref().unwrap_or("admin"), text)?,
            (None, None) => {
                return Err(ConfigError {
                    message: "a kept version with neither a path nor a text".into(),
                    file: None,
                    line: None,
                    column: None,
                    field: None,
                });
            }
        };
        if config.source.hash != self.hash {
            return Err(ConfigError {
                message: format!(
                    "the kept text reads with hash {}, not {} as when it was applied",
                    config.source.hash, self.hash
                ),
                file: None,
                line: None,
                column: None,
                field: None,
            });
        }
        Ok(config)
    }
}

/// The gateway switches the admin API set, as kept on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct StoredSwitches {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stale_reads: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    async_writes: Option<bool>,
}

/// What a state directory held when it was opened.
#[derive(Debug, Default)]
pub struct Restored {
    /// The kept versions, oldest first.
    pub versions: Vec<StoredVersion>,
    /// The audit log, oldest first (at most the last `KEPT_AUDIT_RECORDS`).
    pub audit: Vec<AuditRecord>,
    /// The gateway switches the admin API had set.
    pub switches: SwitchChange,
}

/// An open state directory: held (locked) until dropped.
#[derive(Debug)]
pub struct StateDir {
    dir: PathBuf,
    _lock: File,
    audit: File,
    /// Records in `audit.jsonl`.
    audit_lines: usize,
    /// Records kept when the log is rewritten.
    keep_audit: usize,
}

impl StateDir {
    /// Opens (creating when missing) and locks `dir`, and reads what it holds. `keep_audit`:
    /// how many audit records are kept (the log is rewritten to them once it holds twice as many).
    pub fn open(dir: &Path, keep_audit: usize) -> Result<(StateDir, Restored), StateError> {
        let versions_dir = dir.join(VERSIONS);
        fs::create_dir_all(&versions_dir).map_err(io_error(&versions_dir))?;
        let lock_path = dir.join(LOCK);
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io_error(&lock_path))?;
        if let Err(e) = lock.try_lock() {
            return Err(match e {
                fs::TryLockError::WouldBlock => {
                    let holder = fs::read_to_string(&lock_path).unwrap_or_default();
                    let holder = match holder.trim() {
                        "" => "unknown process".to_owned(),
                        pid => format!("process {pid}"),
                    };
                    StateError::Locked { path: dir.to_path_buf(), holder }
                }
                fs::TryLockError::Error(source) => StateError::Io { path: lock_path, source },
            });
        }
        lock.set_len(0).map_err(io_error(&lock_path))?;
        writeln!(lock, "{}", std::process::id()).map_err(io_error(&lock_path))?;

        let versions = read_versions(&versions_dir)?;
        let audit_path = dir.join(AUDIT);
        let audit = read_audit(&audit_path)?;
        let switches = read_switches(&dir.join(SWITCHES))?;
        let file =
            OpenOptions::new().create(true).append(true).open(&audit_path).map_err(io_error(&audit_path))?;
        let mut state = StateDir {
            dir: dir.to_path_buf(),
            _lock: lock,
            audit: file,
            audit_lines: audit.len(),
            keep_audit,
        };
        // Only what is kept is read back: a log past twice that is rewritten now, not at the next
        // record, so that one that grew under an older setting does not linger.
        let kept_from = audit.len().saturating_sub(keep_audit);
        let audit = audit[kept_from..].to_vec();
        if state.audit_lines >= 2 * keep_audit.max(1) {
            state.rewrite_audit(&audit)?;
        }
        Ok((state, Restored { versions, audit, switches }))
    }

    /// Writes `version` (on disk when this returns) and removes the kept versions older than
    /// `oldest_kept`.
    pub fn write_version(&mut self, version: &StoredVersion, oldest_kept: u64) -> Result<(), StateError> {
        let dir = self.dir.join(VERSIONS);
        let bytes = serde_json::to_vec_pretty(version)
            .map_err(|e| StateError::Io { path: dir.clone(), source: io::Error::other(e) })?;
        write_atomically(&dir.join(version_file(version.version)), &bytes)?;
        let mut removed = false;
        for entry in fs::read_dir(&dir).map_err(io_error(&dir))? {
            let entry = entry.map_err(io_error(&dir))?;
            if let Some(v) = version_number(&entry.file_name().to_string_lossy())
                && v < oldest_kept
            {
                fs::remove_file(entry.path()).map_err(io_error(&entry.path()))?;
                removed = true;
            }
        }
        if removed {
            sync_dir(&dir)?;
        }
        Ok(())
    }

    /// Appends `record` to the audit log (on disk when this returns); `kept` is the log as the
    /// server keeps it, `record` last, written instead once the file holds twice what is kept.
    pub fn append_audit(&mut self, record: &AuditRecord, kept: &[AuditRecord]) -> Result<(), StateError> {
        if self.audit_lines + 1 >= 2 * self.keep_audit.max(1) {
            return self.rewrite_audit(kept);
        }
        let path = self.dir.join(AUDIT);
        let mut line = serde_json::to_vec(record)
            .map_err(|e| StateError::Io { path: path.clone(), source: io::Error::other(e) })?;
        line.push(b'\n');
        self.audit.write_all(&line).map_err(io_error(&path))?;
        self.audit.sync_data().map_err(io_error(&path))?;
        self.audit_lines += 1;
        Ok(())
    }

    /// Writes the gateway switches the admin API set (on disk when this returns); none set removes
    /// the file.
    pub fn write_switches(&mut self, switches: SwitchChange) -> Result<(), StateError> {
        let path = self.dir.join(SWITCHES);
        if switches == SwitchChange::default() {
            match fs::remove_file(&path) {
                Ok(()) => return sync_dir(&self.dir),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(StateError::Io { path, source: e }),
            }
        }
        let stored = StoredSwitches {
            shed: switches.shed.map(|s| s.as_str().to_owned()),
            stale_reads: switches.stale_reads,
            async_writes: switches.async_writes,
        };
        let bytes = serde_json::to_vec_pretty(&stored)
            .map_err(|e| StateError::Io { path: path.clone(), source: io::Error::other(e) })?;
        write_atomically(&path, &bytes)
    }

    fn rewrite_audit(&mut self, records: &[AuditRecord]) -> Result<(), StateError> {
        let path = self.dir.join(AUDIT);
        let mut bytes = Vec::new();
        for record in records {
            serde_json::to_writer(&mut bytes, record)
                .map_err(|e| StateError::Io { path: path.clone(), source: io::Error::other(e) })?;
            bytes.push(b'\n');
        }
        write_atomically(&path, &bytes)?;
        self.audit = OpenOptions::new().append(true).open(&path).map_err(io_error(&path))?;
        self.audit_lines = records.len();
        Ok(())
    }
}

fn version_file(version: u64) -> String {
    format!("{version:020}.json")
}

fn version_number(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".json")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Writes `bytes` to `path` so that a crash leaves either the old file or the new one: a temporary
/// file beside it, synced, renamed over it, and the directory synced.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    let mut file = File::create(&tmp).map_err(io_error(&tmp))?;
    file.write_all(bytes).map_err(io_error(&tmp))?;
    file.sync_all().map_err(io_error(&tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(io_error(path))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

fn sync_dir(dir: &Path) -> Result<(), StateError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir))
}

fn read_versions(dir: &Path) -> Result<Vec<StoredVersion>, StateError> {
    let mut versions = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let entry = entry.map_err(io_error(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.ends_with(TMP_SUFFIX) {
            // A write that never finished, hence never acknowledged.
            fs::remove_file(&path).map_err(io_error(&path))?;
            continue;
        }
        let Some(number) = version_number(&name) else {
            return Err(StateError::Corrupt {
                path,
                line: None,
                message: "not a version file (expected <version>.json)".into(),
            });
        };
        let bytes = fs::read(&path).map_err(io_error(&path))?;
        let version: StoredVersion = serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
            path: path.clone(),
            line: None,
            message: format!("not a kept configuration version: {e}"),
        })?;
        if version.version != number {
            return Err(StateError::Corrupt {
                path,
                line: None,
                message: format!("holds version {}, not {number} as its name says", version.version),
            });
        }
        versions.push(version);
    }
    versions.sort_by_key(|v| v.version);
    Ok(versions)
}

/// The audit log's records; a torn last line (no newline: an append cut by a crash) is cut from
/// the file.
fn read_audit(path: &Path) -> Result<Vec<AuditRecord>, StateError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StateError::Io { path: path.to_path_buf(), source: e }),
    };
    let mut reader = BufReader::new(file);
    let mut records = Vec::new();
    let mut line = Vec::new();
    let mut offset = 0u64;
    for number in 1.. {
        line.clear();
        let read = reader.read_until(b'\n', &mut line).map_err(io_error(path))?;
        if read == 0 {
            break;
        }
        if line.last() != Some(&b'\n') {
            tracing::warn!(
                event = "admin_state_torn_record",
                file = %path.display(),
                line = number,
                "the audit log ends with a record cut by a crash (never acknowledged): cutting it"
            );
            let file = OpenOptions::new().write(true).open(path).map_err(io_error(path))?;
            file.set_len(offset).map_err(io_error(path))?;
            file.sync_all().map_err(io_error(path))?;
            break;
        }
        let record = serde_json::from_slice(&line).map_err(|e| StateError::Corrupt {
            path: path.to_path_buf(),
            line: Some(number),
            message: format!("not an audit record: {e}"),
        })?;
        records.push(record);
        offset += read as u64;
    }
    Ok(records)
}

fn read_switches(path: &Path) -> Result<SwitchChange, StateError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SwitchChange::default()),
        Err(e) => return Err(StateError::Io { path: path.to_path_buf(), source: e }),
    };
    let corrupt = |message: String| StateError::Corrupt { path: path.to_path_buf(), line: None, message };
    let stored: StoredSwitches =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("not the gateway's switches: {e}")))?;
    let shed = match stored.shed.as_deref() {
        None => None,
        Some(name) => Some(Shed::parse(name).ok_or_else(|| corrupt(format!("unknown shed {name:?}")))?),
    };
    Ok(SwitchChange { shed, stale_reads: stored.stale_reads, async_writes: stored.async_writes })
}

/// Keeps `f`'s file handle use off the async runtime's threads.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StateError> + Send + 'static,
) -> Result<T, StateError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(StateError::Io {
            path: PathBuf::new(),
            source: io::Error::other(format!("the writer failed: {e}")),
        })
    })
}

#[cfg(test)]
mod tests;
