//! The processes a run starts besides Redis: `floodgate serve` (the binary beside this one, or
//! `--floodgate`), nginx, and peers held by the testkit's watchdog ([`Watched`]: `flood --peer
//! limitador`) — each stopped however the run ends — and the ports they are waited on.

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
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kb: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kb * 1024)
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
