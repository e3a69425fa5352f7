//! Hot reload: the configuration file's directory is watched (the binary reloads on `SIGHUP`
//! too, through [`reload_logged`]).
//!
//! The watcher watches the file's **parent directory** (or the directory itself for a directory
//! configuration), not the file: editors save by writing a new file and renaming it over the old
//! one, and Kubernetes updates a mounted ConfigMap by swapping the `..data` symlink — either
//! replaces the watched inode, and a watch on the file alone would go deaf. Events for the file's
//! name (or any `*.yaml`/`*.yml` of a configuration directory) and for Kubernetes' `..`-names are
//! debounced (200 ms of quiet by default) and trigger one reload. A reload validates first; an
//! invalid file is rejected (recorded in the audit log and `floodgate_config_reloads_total
//! {result="rejected"}`, once per distinct error) and the running configuration stays. A file
//! whose content is unchanged is ignored.
//!
//! The token files of `auth` clients (`token_file`, often a mounted Secret outside the
//! configuration's directory) are polled once a second while the watcher runs — their modification
//! time, size and inode, following symbolic links — and a change reloads the configuration too, so
//! a rotated token is in force within about a second, without a signal.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

use crate::audit::Trigger;
use crate::{App, stopped};

/// The default quiet time before a reload.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// A running watcher; dropping it stops watching.
#[derive(Debug)]
pub struct ConfigWatcher {
    _watcher: RecommendedWatcher,
}

/// Which paths of the watched directory matter.
#[derive(Debug, Clone)]
enum Interest {
    /// One file, by name.
    File(std::ffi::OsString),
    /// Every YAML file of the directory.
    Directory,
}

impl Interest {
    fn matches(&self, path: &Path) -> bool {
        let Some(name) = path.file_name() else { return false };
        // Kubernetes ConfigMap mounts: `..data` and `..<timestamp>` are swapped atomically.
        if name.as_encoded_bytes().starts_with(b"..") {
            return true;
        }
        match self {
            Interest::File(file) => name == file.as_os_str(),
            Interest::Directory => {
                matches!(path.extension().and_then(OsStr::to_str), Some("yaml" | "yml"))
            }
        }
    }
}

/// Whether an event can mean new content (not a mere read).
fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Starts watching the app's configuration path; reloads go through `app.control()`.
pub fn watch(app: App, stop: watch::Receiver<bool>) -> notify::Result<ConfigWatcher> {
    let Some(path) = app.control().path() else {
        return Err(notify::Error::generic("no configuration file to watch"));
    };
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let (dir, interest) = if path.is_dir() {
        (path.clone(), Interest::Directory)
    } else {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        let name = path.file_name().map(OsStr::to_os_string).unwrap_or_default();
        (dir, Interest::File(name))
    };

    let (tx, rx) = mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
        Ok(event) if changes_content(&event.kind) && event.paths.iter().any(|p| interest.matches(p)) => {
            let _ = tx.send(());
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "configuration watcher error"),
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    tracing::info!(directory = %dir.display(), "watching the configuration for changes");

    let debounce = if app.options().debounce.is_zero() { DEBOUNCE } else { app.options().debounce };
    tokio::spawn(debounced(app, rx, stop, debounce));
    Ok(ConfigWatcher { _watcher: watcher })
}

/// Waits for an event, then for `quiet` without events, then reloads; until stopped.
async fn debounced(
    app: App,
    mut events: mpsc::UnboundedReceiver<()>,
    mut stop: watch::Receiver<bool>,
    quiet: Duration,
) {
    loop {
        tokio::select! {
            event = events.recv() => if event.is_none() { return },
            () = stopped(&mut stop) => return,
        }
        loop {
            tokio::select! {
                event = events.recv() => if event.is_none() { return },
                () = tokio::time::sleep(quiet) => break,
                () = stopped(&mut stop) => return,
            }
        }
        reload_logged(&app, Trigger::Watch).await;
    }
}

/// How often token files are looked at.
const TOKEN_POLL: Duration = Duration::from_secs(1);

/// What says a token file changed: its modification time, size and inode (`None`: unreadable).
type Signature = Option<(std::time::SystemTime, u64, u64)>;

fn signature(path: &Path) -> Signature {
    use std::os::unix::fs::MetadataExt as _;
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len(), metadata.ino()))
}

/// Polls the token files of the configuration in force every [`TOKEN_POLL`] and reloads when one
/// changes (a file that appears in the configuration is not a change), until stopped.
pub async fn watch_token_files(app: App, mut stop: watch::Receiver<bool>) {
    let mut seen: std::collections::HashMap<PathBuf, Signature> = std::collections::HashMap::new();
    let mut tick = tokio::time::interval(TOKEN_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stopped(&mut stop) => return,
        }
        let running = app.control().current();
        let files: Vec<PathBuf> = running
            .auth
            .iter()
            .flat_map(|auth| auth.config().clients.iter())
            .filter_map(|client| match &client.token_source {
                floodgate_config::auth::TokenSource::File(path) => Some(path.clone()),
                floodgate_config::auth::TokenSource::Env(_) => None,
            })
            .collect();
        drop(running);
        let mut changed = false;
        let mut now = std::collections::HashMap::with_capacity(files.len());
        for file in files {
            let signature = tokio::task::spawn_blocking({
                let file = file.clone();
                move || signature(&file)
            })
            .await
            .unwrap_or(None);
            if seen.get(&file).is_some_and(|before| *before != signature) {
                tracing::debug!(file = %file.display(), "a token file changed: reloading");
                changed = true;
            }
            now.insert(file, signature);
        }
        seen = now;
        if changed {
            reload_logged(&app, Trigger::Watch).await;
        }
    }
}

/// Reloads `app`'s configuration file (for the watcher and `SIGHUP`), logging the result.
pub async fn reload_logged(app: &App, trigger: Trigger) {
    match app.control().reload(trigger, None).await {
        Ok(applied) if applied.changed => {}
        Ok(_) => tracing::debug!(source = trigger.as_str(), "configuration unchanged"),
        Err(error) => tracing::debug!(source = trigger.as_str(), %error, "reload rejected"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_interest_matches_its_name_and_kubernetes_swaps_only() {
        let interest = Interest::File("floodgate.yaml".into());
        assert!(interest.matches(Path::new("/etc/floodgate/floodgate.yaml")));
        assert!(interest.matches(Path::new("/etc/floodgate/..data")));
        assert!(interest.matches(Path::new("/etc/floodgate/..2026_01_01_00_00_00.123")));
        assert!(!interest.matches(Path::new("/etc/floodgate/.floodgate.yaml.swp")));
        assert!(!interest.matches(Path::new("/etc/floodgate/other.yaml")));
    }

    #[test]
    fn a_directory_interest_matches_yaml_files() {
        let interest = Interest::Directory;
        assert!(interest.matches(Path::new("/etc/floodgate/a.yaml")));
        assert!(interest.matches(Path::new("/etc/floodgate/b.yml")));
        assert!(!interest.matches(Path::new("/etc/floodgate/notes.txt")));
    }

    #[test]
    fn reads_are_not_changes() {
        assert!(!changes_content(&EventKind::Access(AccessKind::Open(AccessMode::Any))));
        assert!(!changes_content(&EventKind::Access(AccessKind::Close(AccessMode::Read))));
        assert!(changes_content(&EventKind::Access(AccessKind::Close(AccessMode::Write))));
        assert!(changes_content(&EventKind::Any));
    }
}
