//! `redis-server`s a run starts for itself (`outage`, `flood`): loopback, a free port, no
//! persistence, a directory of their own, held by a [`Watched`] watchdog that kills the server and
//! removes its directory when the run ends in any way — and the few raw RESP commands the bench
//! sends them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::Usage;
use crate::report::units::wall_micros;
use crate::watchdog::{Watched, program_dir};

/// How long a `redis-server` may take to be ready.
pub(crate) const STARTUP: Duration = Duration::from_secs(10);

/// What to tell when there is no `redis-server`.
const INSTALL: &str = "install it (apt-get install -y redis-server) or pass --redis-server PATH";

/// A `redis-server` of this run: loopback, on a port of its own, in a directory of its own, no
/// persistence, held by a [`Watched`] watchdog (stopped and its directory removed when the node is
/// dropped or this process ends in any way).
#[derive(Debug)]
pub(crate) struct RedisNode {
    program: PathBuf,
    /// Arguments beyond the defaults (a cluster node's).
    extra: Vec<String>,
    /// Its port on 127.0.0.1.
    pub(crate) port: u16,
    watchdog: Option<Watched>,
}

impl RedisNode {
    /// Starts `program` on a free loopback port.
    pub(crate) async fn start(program: &Path, extra: &[&str]) -> anyhow::Result<RedisNode> {
        match std::process::Command::new(program)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
        {
            Ok(status) if status.success() => {}
            Ok(status) => {
                return Err(Usage(format!("{}: `--version` failed ({status})", program.display())).into());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Usage(format!("{} not found: {INSTALL}", program.display())).into());
            }
            Err(e) => return Err(Usage(format!("cannot run {}: {e}; {INSTALL}", program.display())).into()),
        }
        let mut last = String::new();
        for _ in 0..5 {
            // A port free now; another process could take it before the server binds it, which
            // the launch detects (the server answering is not ours).
            let port = if extra.is_empty() {
                std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()
            } else {
                cluster_port()?
            };
            match RedisNode::launch(program, port, extra).await {
                Ok(node) => return Ok(node),
                Err(e) => last = e,
            }
        }
        anyhow::bail!("redis-server did not start: {last}")
    }

    /// Starts `program` on `port` and waits until it answers.
    async fn launch(program: &Path, port: u16, extra: &[&str]) -> Result<RedisNode, String> {
        let dir = program_dir("redis", port)?;
        let (dir_arg, log) = (dir.display().to_string(), dir.join("redis.log"));
        let port_arg = port.to_string();
        let args = ["--port", &port_arg, "--bind", "127.0.0.1", "--dir", &dir_arg, "--logfile"]
            .into_iter()
            .map(std::ffi::OsStr::new)
            .chain([log.as_os_str()])
            .chain(["--save", "", "--appendonly", "no", "--daemonize", "no"].map(std::ffi::OsStr::new))
            .chain(extra.iter().map(std::ffi::OsStr::new));
        let watchdog = Watched::spawn(&dir, program, args).await?;
        // From here on, dropping the node stops the server and removes the directory.
        let node = RedisNode {
            program: program.to_owned(),
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
            port,
            watchdog: Some(watchdog),
        };
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let deadline = Instant::now() + STARTUP;
        loop {
            if answers(port, &["PING"], "+PONG").await {
                // Ours only if its directory is ours: a server of another process on this port
                // means ours could not bind it.
                if answers(port, &["CONFIG", "GET", "dir"], &name).await {
                    return Ok(node);
                }
                return Err(format!("port {port} is taken by another redis-server"));
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!("port {port}: {}", log.lines().last().unwrap_or("no answer, no log")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// `127.0.0.1:PORT`.
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Sends the server `SIG<name>` (`STOP`, `CONT`, `KILL`) through the watchdog.
    pub(crate) async fn signal(&mut self, name: &str) -> anyhow::Result<()> {
        let w = self.watchdog.as_mut().ok_or_else(|| anyhow::anyhow!("redis-server is not running"))?;
        w.signal(name).await
    }

    /// After a kill: a new, empty server on the same port (retrying while the port is still busy).
    pub(crate) async fn restart(&mut self) -> anyhow::Result<()> {
        // The old watchdog reaps the killed server and removes its directory.
        self.watchdog = None;
        let deadline = Instant::now() + STARTUP;
        loop {
            let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
            match RedisNode::launch(&self.program, self.port, &extra).await {
                Ok(node) => {
                    *self = node;
                    return Ok(());
                }
                Err(e) if Instant::now() > deadline => {
                    anyhow::bail!("redis-server did not restart on port {}: {e}", self.port)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// A free port for a cluster node: below 55536, with its cluster bus port (the port + 10000) free
/// too.
fn cluster_port() -> std::io::Result<u16> {
    let seed = u64::from(std::process::id()) ^ wall_micros();
    for i in 0..1000u64 {
        let port = 20_000 + ((seed.wrapping_mul(6364136223846793005).wrapping_add(i * 7919)) % 25_000) as u16;
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return Ok(port);
        }
    }
    Err(std::io::Error::other("no free port pair for a cluster node below 55536"))
}

/// Whether the server on `port` answers `command` with a reply containing `needle` (raw RESP,
/// within 500 ms).
pub(crate) async fn answers(port: u16, command: &[&str], needle: &str) -> bool {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream.write_all(&resp_command(command)).await.ok()?;
        let (mut reply, mut buf) = (Vec::new(), [0u8; 512]);
        loop {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            reply.extend_from_slice(&buf[..n]);
            if reply.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                return Some(());
            }
        }
    };
    matches!(tokio::time::timeout(Duration::from_millis(500), ask).await, Ok(Some(())))
}

/// The reply of the server on `port` to `command` (raw RESP, within 500 ms): a simple string, an
/// integer or a bulk string, as text; `None` for an error reply, no answer or another type.
pub(crate) async fn query(port: u16, command: &[&str]) -> Option<String> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream.write_all(&resp_command(command)).await.ok()?;
        let (mut reply, mut buf) = (Vec::new(), [0u8; 4096]);
        loop {
            match parse_reply(&reply) {
                Reply::Complete(value) => return value,
                Reply::Partial => {}
            }
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            reply.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_millis(500), ask).await.ok().flatten()
}

/// `command` as a RESP array of bulk strings.
fn resp_command(command: &[&str]) -> Vec<u8> {
    let mut request = format!("*{}\r\n", command.len());
    for part in command {
        request.push_str(&format!("${}\r\n{part}\r\n", part.len()));
    }
    request.into_bytes()
}

/// A RESP reply read so far.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// Not all of it yet.
    Partial,
    /// All of it: its text, or `None` for an error or a type [`query`] does not read.
    Complete(Option<String>),
}

fn parse_reply(bytes: &[u8]) -> Reply {
    let Some(end) = bytes.windows(2).position(|w| w == b"\r\n") else { return Reply::Partial };
    let line = String::from_utf8_lossy(&bytes[1..end]).into_owned();
    match bytes.first() {
        Some(b'+' | b':') => Reply::Complete(Some(line)),
        Some(b'$') => {
            let Ok(len) = line.parse::<usize>() else { return Reply::Complete(None) };
            let start = end + 2;
            if bytes.len() < start + len + 2 {
                return Reply::Partial;
            }
            Reply::Complete(Some(String::from_utf8_lossy(&bytes[start..start + len]).into_owned()))
        }
        _ => Reply::Complete(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_whole_and_errors_are_none() {
        assert_eq!(parse_reply(b":42"), Reply::Partial);
        assert_eq!(parse_reply(b":42\r\n"), Reply::Complete(Some("42".into())));
        assert_eq!(parse_reply(b"+PONG\r\n"), Reply::Complete(Some("PONG".into())));
        assert_eq!(parse_reply(b"$11\r\nused_memory"), Reply::Partial);
        assert_eq!(parse_reply(b"$13\r\nused_memory:1\r\n"), Reply::Complete(Some("used_memory:1".into())));
        assert_eq!(parse_reply(b"-ERR unknown command\r\n"), Reply::Complete(None));
        assert_eq!(resp_command(&["INFO", "memory"]), b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n");
    }
}
