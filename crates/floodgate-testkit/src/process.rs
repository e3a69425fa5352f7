//! Programs a test (or a bench run) starts for itself: a free loopback port, a directory of its
//! own, and a watchdog that kills the program and removes its directory however the test process
//! ends.
//!
//! A [`Watched`] program is started by a small shell that reads the test process's end of a pipe:
//! a line there is a signal to send the program (the shell's `kill` builtin, delivered within
//! microseconds: nothing to start at the moment of a fault); when the pipe closes — the handle
//! dropped, or the test process ending in any way, a panic, an abort, a `SIGKILL` — the shell
//! kills the program and removes its directory.
//!
//! ```
//! use floodgate_testkit::process::{Signal, Watched, free_port, scratch_dir};
//!
//! let port = free_port()?;
//! let dir = scratch_dir("sleep", port)?;
//! let mut sleep = Watched::spawn(&dir, "sleep".as_ref(), ["30"])?;
//! assert!(sleep.running());
//! sleep.signal(Signal::Stop)?;
//! sleep.signal(Signal::Cont)?;
//! drop(sleep); // killed, and `dir` removed
//! assert!(!dir.exists());
//! # Ok::<(), std::io::Error>(())
//! ```

use std::ffi::OsStr;
use std::io::{self, BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The file in a watched program's directory that holds its stdout and stderr.
pub const OUTPUT: &str = "output.log";

/// A port of 127.0.0.1 that nothing listens on now and that this process has not handed out
/// before, below 55 000 with the port 10 000 above it free too (a Redis Cluster node's bus port).
///
/// A port handed out once is never handed out again in this process: a stopped server may be
/// started again on its port, which must not meanwhile become another one's. Another process
/// may still take the port before the program binds it; a launcher checks that the program that
/// answers is its own.
pub fn free_port() -> io::Result<u16> {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    for _ in 0..100 {
        let Ok(listener) = TcpListener::bind("127.0.0.1:0") else { continue };
        let Ok(addr) = listener.local_addr() else { continue };
        let port = addr.port();
        if port < 55_000
            && !handed_out.iter().any(|p| *p == port || *p == port + 10_000 || *p + 10_000 == port)
            && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
        {
            handed_out.push(port);
            return Ok(port);
        }
    }
    Err(io::Error::other("no free port pair found on 127.0.0.1"))
}

/// A new directory for one program, `floodgate-<name>-<pid>-<n>-<port>` in the system's temporary
/// directory (its watchdog removes it).
pub fn scratch_dir(name: &str, port: u16) -> io::Result<PathBuf> {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("floodgate-{name}-{}-{n}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// A signal the watchdog sends its program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `SIGSTOP`: frozen. The kernel still accepts its connections and requests; nothing answers.
    Stop,
    /// `SIGCONT`: running again after a `Stop`.
    Cont,
    /// `SIGKILL`: gone at once, as in a crash (the watchdog still holds its directory).
    Kill,
}

impl Signal {
    /// The name `kill -NAME` takes.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
            Signal::Kill => "KILL",
        }
    }
}

/// The watchdog: `sh -c WATCHDOG sh DIR PROGRAM ARGS…`. Starts the program with its output in
/// `DIR/output.log`, prints its pid, then for each signal name read sends it and answers `ok` or
/// `failed`; once the pipe closes, kills the program, reaps it and removes `DIR`. It ignores the
/// signals a terminal or a supervisor sends a whole process group (Ctrl-C is `SIGINT` to every
/// process of the job), so that it outlives the test process and cleans up once the pipe closes.
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

/// A program in a directory of its own, held by a watchdog shell: killed, and its directory
/// removed, when this is dropped or the process ends in any way.
#[derive(Debug)]
pub struct Watched {
    shell: Child,
    /// Our end of the pipe: closing it ends the program.
    commands: Option<ChildStdin>,
    replies: BufReader<ChildStdout>,
    pid: u32,
}

// === impl Watched ===

impl Watched {
    /// Starts `program` with `args` under a watchdog that removes `dir` (an existing directory,
    /// the program's own; removed here too when the start fails) once it ends.
    ///
    /// # Errors
    /// When the shell cannot be started. A program that cannot be run is started all the same
    /// and exits at once: see [`Watched::running`].
    pub fn spawn<I, S>(dir: &Path, program: &Path, args: I) -> io::Result<Watched>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let shell = Command::new("sh")
            .args(["-c", WATCHDOG, "sh"])
            .arg(dir)
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let mut shell = match shell {
            Ok(shell) => shell,
            Err(e) => {
                let _ = std::fs::remove_dir_all(dir);
                return Err(io::Error::new(e.kind(), format!("cannot start the watchdog shell: {e}")));
            }
        };
        // From here on, dropping the pipes stops the program and removes the directory.
        let (commands, Some(replies)) = (shell.stdin.take(), shell.stdout.take()) else {
            return Err(io::Error::other("the watchdog shell has no pipes"));
        };
        let mut watched = Watched { shell, commands, replies: BufReader::new(replies), pid: 0 };
        let line = watched.reply()?;
        watched.pid = line.parse().map_err(|_| io::Error::other(format!("the watchdog printed {line:?}")))?;
        Ok(watched)
    }

    /// The program's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the program still runs: it has not exited (the watchdog reaps it only at the end,
    /// so an exited program is a zombie until then).
    pub fn running(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])))
            .is_some_and(|dead| !dead)
    }

    /// Sends the program `signal`, at once.
    ///
    /// # Errors
    /// When the watchdog is gone or `kill` failed (the program has been reaped).
    pub fn signal(&mut self, signal: Signal) -> io::Result<()> {
        let commands = self.commands.as_mut().ok_or_else(|| io::Error::other("the watchdog is closed"))?;
        commands.write_all(format!("{}\n", signal.name()).as_bytes())?;
        commands.flush()?;
        match self.reply()?.as_str() {
            "ok" => Ok(()),
            other => {
                Err(io::Error::other(format!("kill -{} {} failed ({other:?})", signal.name(), self.pid)))
            }
        }
    }

    /// The watchdog's next line, trimmed.
    fn reply(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.replies.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the watchdog shell exited"));
        }
        Ok(line.trim().to_owned())
    }
}

impl Drop for Watched {
    /// Closes the pipe and waits for the watchdog: the program is dead and reaped, and its
    /// directory removed, once this returns.
    fn drop(&mut self) {
        drop(self.commands.take());
        let _ = self.shell.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_handed_out_once_with_their_bus_port_free() {
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        for (i, p) in ports.iter().enumerate() {
            assert!(*p < 55_000);
            assert!(
                !ports[i + 1..].iter().any(|q| q == p || *q == p + 10_000 || *q + 10_000 == *p),
                "{ports:?}"
            );
        }
    }

    #[test]
    fn the_program_is_killed_and_its_directory_removed_once_dropped() {
        let dir = scratch_dir("watchdog-test", 0).unwrap();
        let mut watched = Watched::spawn(&dir, Path::new("sleep"), ["30"]).unwrap();
        assert!(watched.running());
        watched.signal(Signal::Stop).unwrap();
        watched.signal(Signal::Cont).unwrap();
        let pid = watched.pid();
        drop(watched);
        assert!(!dir.exists(), "the directory is removed");
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the program is gone");
    }

    #[test]
    fn a_killed_program_is_not_running_and_a_missing_one_never_was() {
        let dir = scratch_dir("watchdog-test", 1).unwrap();
        let mut watched = Watched::spawn(&dir, Path::new("sleep"), ["30"]).unwrap();
        watched.signal(Signal::Kill).unwrap();
        crate::wait::until_blocking("the killed program's end", || !watched.running());
        let dir = scratch_dir("watchdog-test", 2).unwrap();
        let missing = Watched::spawn(&dir, Path::new("/nonexistent/program"), ["x"]).unwrap();
        crate::wait::until_blocking("the missing program's end", || !missing.running());
        drop(missing);
        assert!(!dir.exists());
    }
}
