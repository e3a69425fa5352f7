//! The processes a run starts besides Redis: `floodgate serve` (the binary beside this one, or
//! `--floodgate`), nginx, and peers held by the testkit's watchdog ([`Watched`]: `flood --peer
//! limitador`, `soak`'s server through [`watch`]) — each stopped however the run ends — the ports
//! they are waited on, and what a process holds (memory, descriptors, threads).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) use floodgate_testkit::process::{OUTPUT, Watched, free_port, scratch_dir};

use crate::Usage;

/// A directory of this run's own, `floodgate-bench-<name>-<pid>-<n>` in the system's temporary
/// directory (configurations, persisted stores, nginx's prefix), removed when dropped.
#[derive(Debug)]
pub(crate) struct ScratchDir(PathBuf);

impl ScratchDir {
    /// A new, empty one.
    pub(crate) fn new(name: &str) -> std::io::Result<ScratchDir> {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("floodgate-bench-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(ScratchDir(path))
    }

    /// Where it is.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `floodgate` binary: `given` (`--floodgate`), else the one beside this executable; a usage
/// error, saying how to build it, when it is not there.
pub(crate) fn floodgate_binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let binary = match given {
        Some(path) => path.to_owned(),
        None => std::env::current_exe()?.with_file_name("floodgate"),
    };
    if !binary.exists() {
        return Err(Usage(format!(
            "{} not found: build it (cargo build --release -p floodgate-server) or pass --floodgate PATH",
            binary.display()
        ))
        .into());
    }
    Ok(binary)
}

/// `floodgate serve` of `binary` on `config`: its HTTP API on `http` (`127.0.0.1:PORT`, or port
/// 0), gRPC on a port of its own, the file not watched, no admin token from this environment,
/// errors only (`RUST_LOG=error`) and no output kept. Callers add to it (`--gateway`, a log).
pub(crate) fn serve(binary: &Path, config: &Path, http: &str) -> Command {
    let mut command = Command::new(binary);
    command
        .args(["serve", "--http", http, "--grpc", "127.0.0.1:0", "--no-watch", "--config"])
        .arg(config)
        .env("RUST_LOG", "error")
        .env_remove("FLOODGATE_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// `command` (its program, arguments and environment, as [`serve`] builds them) held by the
/// testkit's watchdog in `dir` (an existing directory, the program's own): killed, and `dir`
/// removed, however the run ends — a return, an error, a panic, Ctrl-C, or the bench killed. Its
/// output goes to `dir/output.log` ([`OUTPUT`]).
///
/// The watchdog runs `env`, which sets the command's environment and then executes the program in
/// its place: [`Watched::pid`] is the program's. (A program whose path holds a `=` would be taken
/// for a variable by `env`.)
pub(crate) fn watch(command: &Command, dir: &Path) -> std::io::Result<Watched> {
    let (mut unset, mut set) = (Vec::new(), Vec::new());
    for (name, value) in command.get_envs() {
        match value {
            None => unset.extend([OsString::from("-u"), name.to_owned()]),
            Some(value) => {
                let mut pair = name.to_owned();
                pair.push("=");
                pair.push(value);
                set.push(pair);
            }
        }
    }
    let args = unset
        .into_iter()
        .chain(set)
        .chain([command.get_program().to_owned()])
        .chain(command.get_args().map(ToOwned::to_owned));
    Watched::spawn(dir, Path::new("env"), args)
}

/// How a [`Process`] is stopped when dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// `SIGKILL` at once, as a crash.
    Kill,
    /// `SIGTERM`, then `SIGKILL` if it has not exited within 5 s: nginx's master stops its workers
    /// on `SIGTERM`, where a killed master leaves them running, holding the port and whatever
    /// descriptors they inherited.
    Terminate,
}

/// A child process of this run, stopped and reaped when dropped: on a return, an error or a
/// panic alike.
#[derive(Debug)]
pub(crate) struct Process {
    child: Child,
    stop: Stop,
}

impl Process {
    /// Starts `command`, to be stopped as `stop` says.
    pub(crate) fn spawn(command: &mut Command, stop: Stop) -> std::io::Result<Process> {
        Ok(Process { child: command.spawn()?, stop })
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `SIGKILL`, and the process reaped.
    pub(crate) fn kill(&mut self) -> std::io::Result<()> {
        self.child.kill()?;
        self.child.wait().map(drop)
    }

    /// How it exited, if it has.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Its stderr, when the command piped it.
    pub(crate) fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.stop == Stop::Terminate {
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
            for _ in 0..100 {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `addr` accepts a connection, at most `within`.
pub(crate) async fn wait_for_port(addr: SocketAddr, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "nothing answers on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The resident set size of process `pid` (`"self"`, or a number), from `/proc/<pid>/status`
/// (Linux); `None` when it cannot be read.
pub(crate) fn resident_set(pid: &str) -> Option<u64> {
    vm_rss(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// `VmRSS` of a `/proc/<pid>/status` page, in bytes.
pub(crate) fn vm_rss(status: &str) -> Option<u64> {
    let kb: u64 = status_field(status, "VmRSS")?.strip_suffix("kB")?.trim().parse().ok()?;
    Some(kb * 1024)
}

/// The value of the field `name` of a `/proc/<pid>/status` page, trimmed.
fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
}

/// What a process holds at a moment, from `/proc` (Linux); each `None` when it cannot be read (the
/// process is gone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Holdings {
    /// Its resident set (`VmRSS`), in bytes.
    pub(crate) rss_bytes: Option<u64>,
    /// Its open file descriptors: the entries of `/proc/<pid>/fd`.
    pub(crate) fds: Option<u64>,
    /// Its threads (`Threads`): the OS threads, not the tasks of an async runtime.
    pub(crate) threads: Option<u64>,
}

/// What process `pid` holds now.
pub(crate) fn holdings(pid: u32) -> Holdings {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
    let status = status.as_deref().unwrap_or_default();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok().map(|entries| entries.count() as u64);
    Holdings {
        rss_bytes: vm_rss(status),
        fds,
        threads: status_field(status, "Threads").and_then(|n| n.parse().ok()),
    }
}

/// How long a proxy this run starts may take to accept connections.
const PROXY_STARTUP: Duration = Duration::from_secs(10);

/// `floodgate serve` of `binary` on the configuration `yaml` (written into `dir`), its gateway
/// listening on a free loopback port: the process and the gateway's address, once it accepts.
pub(crate) async fn gateway(binary: &Path, dir: &Path, yaml: &str) -> anyhow::Result<(Process, SocketAddr)> {
    use anyhow::Context as _;
    let port = free_port()?;
    let config = dir.join("floodgate.yaml");
    std::fs::write(&config, yaml)?;
    let mut command = serve(binary, &config, "127.0.0.1:0");
    command.arg("--gateway").arg(format!("127.0.0.1:{port}"));
    let process = Process::spawn(&mut command, Stop::Terminate)
        .with_context(|| format!("starting {}", binary.display()))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_for_port(addr, PROXY_STARTUP).await?;
    Ok((process, addr))
}

/// nginx (`binary`) in a prefix of its own under `dir`, on a free loopback port: its `http` block
/// holds no access log, the prefix's temporary paths, and what `http` makes of the port (the
/// `server` blocks, upstreams). The process and its address, once it accepts.
pub(crate) async fn nginx(
    binary: &Path,
    dir: &Path,
    http: impl FnOnce(u16) -> String,
) -> anyhow::Result<(Process, SocketAddr)> {
    use anyhow::Context as _;
    let port = free_port()?;
    let prefix = dir.join(format!("nginx-{port}"));
    std::fs::create_dir_all(prefix.join("logs"))?;
    let conf = prefix.join("nginx.conf");
    let p = prefix.display();
    std::fs::write(
        &conf,
        format!(
            "worker_processes auto;\nerror_log {p}/logs/error.log crit;\npid {p}/nginx.pid;\nevents {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {p}/body; proxy_temp_path {p}/proxy;\n  fastcgi_temp_path {p}/fastcgi; uwsgi_temp_path {p}/uwsgi; scgi_temp_path {p}/scgi;\n{}}}\n",
            http(port)
        ),
    )?;
    let mut command = Command::new(binary);
    command.arg("-p").arg(&prefix).arg("-c").arg(&conf).args(["-g", "daemon off;"]);
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let process = Process::spawn(&mut command, Stop::Terminate)
        .with_context(|| format!("starting {} (apt-get install -y nginx)", binary.display()))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_for_port(addr, PROXY_STARTUP).await?;
    Ok((process, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_page_gives_the_resident_set_and_the_threads() {
        let status = "Name:\tfloodgate\nThreadsX:\t9\nVmRSS:\t   20480 kB\nThreads:\t7\n";
        assert_eq!(vm_rss(status), Some(20 << 20));
        assert_eq!(status_field(status, "Threads"), Some("7"));
        assert_eq!(status_field(status, "Missing"), None);
    }

    #[test]
    fn this_process_holds_memory_descriptors_and_threads() {
        let mine = holdings(std::process::id());
        assert!(mine.rss_bytes.is_some_and(|b| b > 0), "{mine:?}");
        assert!(mine.fds.is_some_and(|n| n >= 3) && mine.threads.is_some_and(|n| n >= 1), "{mine:?}");
        assert_eq!(holdings(u32::MAX), Holdings::default());
    }

    #[tokio::test]
    async fn a_watched_command_runs_with_its_environment_and_is_gone_once_dropped() {
        let dir = scratch_dir("watch-test", 0).unwrap();
        let mut command = Command::new("sh");
        command.args(["-c", "echo \"$SOAK_SET${SOAK_UNSET:-unset}\"; exec sleep 30"]);
        command.env("SOAK_SET", "set-").env_remove("SOAK_UNSET");
        let watched = watch(&command, &dir).unwrap();
        let pid = watched.pid();
        let output = floodgate_testkit::wait::until("the program's first line", || async {
            std::fs::read_to_string(dir.join(OUTPUT)).ok().filter(|o| o.ends_with('\n'))
        })
        .await;
        assert_eq!(output, "set-unset\n");
        assert!(holdings(pid).threads.is_some(), "the pid is the program's");
        drop(watched);
        assert!(!dir.exists() && holdings(pid) == Holdings::default());
    }
}
