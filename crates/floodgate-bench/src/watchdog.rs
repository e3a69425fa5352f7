//! Programs a run starts for itself (`redis-server` for `outage` and `flood`, `limitador-server`
//! for `flood --peer limitador`), each held by a watchdog shell that kills it and removes its
//! directory when the run ends in any way.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};

/// How long the watchdog may take to report the program's pid.
const SPAWN: Duration = Duration::from_secs(10);

/// The file in the program's directory that holds its stdout and stderr.
pub(crate) const OUTPUT: &str = "output.log";

/// A new directory for one program of this run, named `floodgate-bench-<name>-<pid>-<n>-<port>`
/// in the system's temporary directory: its watchdog removes it.
pub(crate) fn program_dir(name: &str, port: u16) -> Result<PathBuf, String> {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("floodgate-bench-{name}-{}-{n}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// A program of this run, in a directory of its own. A watchdog shell starts it and reads this
/// process's end of a pipe: a line there is a signal to send the program (the shell's `kill`
/// builtin: delivered within microseconds, no process to start at the moment of a fault); when the
/// pipe closes — the value dropped, or this process ended in any way, a return, an error, Ctrl-C,
/// a kill — the shell kills the program and removes its directory.
#[derive(Debug)]
pub(crate) struct Watched {
    /// Never waited for: it exits on its own once the pipe closes (Tokio reaps it).
    _shell: tokio::process::Child,
    commands: tokio::process::ChildStdin,
    replies: tokio::io::BufReader<tokio::process::ChildStdout>,
    pid: u32,
}

/// The watchdog: `sh -c WATCHDOG sh DIR PROGRAM ARGS…`. Prints the program's pid, then for each
/// signal name read, sends it and answers `ok` or `failed`. It ignores the signals a terminal or a
/// supervisor sends the whole process group (Ctrl-C is SIGINT to every process of the job), so it
/// outlives this process and cleans up once the pipe closes.
const WATCHDOG: &str = r#"dir="$1"; program="$2"; shift 2
trap '' INT TERM HUP QUIT
"$program" "$@" >"$dir/output.log" 2>&1 &
pid=$!
echo "$pid"
while read -r signal; do
  if kill -"$signal" "$pid" 2>/dev/null; then echo ok; else echo failed; fi
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$dir""#;

impl Watched {
    /// Starts `program` with `args` under a watchdog that removes `dir` (an existing directory,
    /// the program's own; it is removed here if the start fails) when it ends.
    pub(crate) async fn spawn<I, S>(dir: &Path, program: &Path, args: I) -> Result<Watched, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let shell = tokio::process::Command::new("sh")
            .args(["-c", WATCHDOG, "sh"])
            .arg(dir)
            .arg(program)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn();
        let mut shell = match shell {
            Ok(shell) => shell,
            Err(e) => {
                let _ = std::fs::remove_dir_all(dir);
                return Err(format!("cannot start the watchdog shell: {e}"));
            }
        };
        // From here on, dropping the shell's pipes stops the program and removes the directory.
        let (Some(commands), Some(replies)) = (shell.stdin.take(), shell.stdout.take()) else {
            return Err("the watchdog shell has no pipes".into());
        };
        let mut replies = tokio::io::BufReader::new(replies);
        let mut line = String::new();
        let _ = tokio::time::timeout(SPAWN, replies.read_line(&mut line)).await;
        let pid = line.trim().parse().map_err(|_| format!("the watchdog shell printed {line:?}"))?;
        Ok(Watched { _shell: shell, commands, replies, pid })
    }

    /// The program's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the program still runs (it has not exited: the watchdog reaps it only at the end,
    /// so an exited program is a zombie until then).
    pub(crate) fn running(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])))
            .is_some_and(|dead| !dead)
    }

    /// Sends the program `SIG<name>` (`STOP`, `CONT`, `KILL`).
    pub(crate) async fn signal(&mut self, name: &str) -> anyhow::Result<()> {
        self.commands.write_all(format!("{name}\n").as_bytes()).await?;
        self.commands.flush().await?;
        let mut reply = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.replies.read_line(&mut reply)).await;
        anyhow::ensure!(reply.trim() == "ok", "kill -{name} {} failed ({:?})", self.pid, reply.trim());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_program_is_killed_and_its_directory_removed_once_dropped() {
        let dir = std::env::temp_dir().join(format!("floodgate-bench-watchdog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut watched = Watched::spawn(&dir, Path::new("sleep"), ["30"]).await.unwrap();
        assert!(watched.running());
        watched.signal("STOP").await.unwrap();
        watched.signal("CONT").await.unwrap();
        let pid = watched.pid();
        drop(watched);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while (dir.exists() || std::path::Path::new(&format!("/proc/{pid}")).exists())
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!dir.exists(), "the directory is removed");
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the program is gone");
    }
}
