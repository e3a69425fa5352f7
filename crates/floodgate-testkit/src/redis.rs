//! Real `redis-server` processes for tests: a single node, or a Redis Cluster of three masters.
//!
//! Each server runs on a free port of 127.0.0.1 in a temporary directory of its own, with no
//! persistence. It is killed when its handle is dropped — also when the test panics — and, because
//! it is started under a small shell watchdog that reads the test process's end of a pipe
//! ([`Watched`]), also when the test process dies without unwinding (an abort, a `SIGKILL`): the
//! pipe closes and the watchdog kills the server and removes its directory. [`RedisServer::shared`]
//! and [`RedisCluster::shared`] start one per test process on first use, for the tests that can
//! share.
//!
//! [`RedisServer::start_tls`] and [`RedisCluster::start_tls`] start them with TLS only (`rediss://`),
//! on certificates the test makes ([`TestCerts`]), requiring client certificates or not.
//!
//! When `redis-server` is not installed, starting one **fails the test** with the command to
//! install it (`apt-get install -y redis-server`): Redis tests never skip silently.
//!
//! ```
//! use floodgate_testkit::redis::RedisServer;
//!
//! let server = RedisServer::start();
//! assert_eq!(server.cli(&["PING"]), "PONG");
//! assert!(server.url().starts_with("redis://127.0.0.1:"));
//! ```
//!
//! A tool that starts servers for its own runs (the bench's `outage`, `flood` and `reserve`) uses
//! the builders: another `redis-server` program, a cluster whose masters have replicas, and a
//! failure returned as a [`StartError`] instead of a panic. A running server can be frozen, resumed
//! or killed at an exact moment ([`RedisServer::signal`]) and started again, empty, on its port
//! ([`RedisServer::try_restart`]).
//!
//! ```
//! use floodgate_testkit::process::Signal;
//! use floodgate_testkit::redis::RedisServer;
//!
//! let mut server = RedisServer::builder().program("redis-server").try_start()?;
//! server.signal(Signal::Stop)?; // frozen: connections are accepted, nothing answers
//! server.signal(Signal::Cont)?;
//! assert_eq!(server.try_cli(&["PING"])?, "PONG");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::process::{Signal, Watched, free_port, scratch_dir};
use crate::tls::TestCerts;

/// What to run when Redis is missing.
const INSTALL: &str = "apt-get install -y redis-server";

/// How long a server may take to answer after it is started.
const STARTUP: Duration = Duration::from_secs(10);

/// How long a cluster may take to be `ok` once its nodes are joined.
const CLUSTER_STARTUP: Duration = Duration::from_secs(30);

/// One `redis-server` process, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    /// TLS only, with these certificates, when set.
    tls: Option<ServerTls>,
    /// The watchdog holding the server.
    watchdog: Option<Watched>,
}

/// Whether a TLS server asks its clients for a certificate signed by its CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// Clients must present one (mutual TLS): `--tls-auth-clients yes`.
    Required,
    /// Clients present none: `--tls-auth-clients no`.
    Off,
}

/// Why a server or a cluster did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The program is not installed (or not at the path given).
    #[error("`{}` is not installed; Redis tests need it: run `{INSTALL}`", program.display())]
    NotFound {
        /// The program.
        program: PathBuf,
    },
    /// The program ran, but `--version` failed.
    #[error("{}: `--version` failed ({status})", program.display())]
    VersionFailed {
        /// The program.
        program: PathBuf,
        /// How it exited.
        status: ExitStatus,
    },
    /// The program could not be run.
    #[error("cannot run `{}`: {source}", program.display())]
    CannotRun {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// It ran but never answered as a server of ours (the last line of its log says why), or the
    /// cluster did not form.
    #[error("{0}")]
    DidNotStart(String),
}

/// A `redis-cli` command that failed: its output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CliError(String);

#[derive(Debug, Clone)]
struct ServerTls {
    certs: TestCerts,
    client_auth: ClientAuth,
}

impl ServerTls {
    /// The `redis-server` arguments: TLS on the server's port, no plain port.
    fn server_args(&self, port: &str) -> Vec<String> {
        let path = |p: PathBuf| p.display().to_string();
        let auth = match self.client_auth {
            ClientAuth::Required => "yes",
            ClientAuth::Off => "no",
        };
        [
            "--port",
            "0",
            "--tls-port",
            port,
            "--tls-cert-file",
            &path(self.certs.server_cert()),
            "--tls-key-file",
            &path(self.certs.server_key()),
            "--tls-ca-cert-file",
            &path(self.certs.ca()),
            "--tls-auth-clients",
            auth,
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// The `redis-cli` arguments: TLS with the CA, presenting the client certificate.
    fn cli_args(&self) -> Vec<String> {
        let path = |p: PathBuf| p.display().to_string();
        vec![
            "--tls".into(),
            "--cacert".into(),
            path(self.certs.ca()),
            "--cert".into(),
            path(self.certs.client_cert()),
            "--key".into(),
            path(self.certs.client_key()),
        ]
    }
}

/// Whether `program` runs (`--version`).
fn check(program: &Path) -> Result<(), StartError> {
    let program_buf = || program.to_path_buf();
    match Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(StartError::VersionFailed { program: program_buf(), status }),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(StartError::NotFound { program: program_buf() }),
        Err(source) => Err(StartError::CannotRun { program: program_buf(), source }),
    }
}

/// Runs `redis-cli -p port args…` (over TLS with `tls`); its output, trimmed.
fn cli(port: u16, tls: Option<&ServerTls>, args: &[&str]) -> Result<String, CliError> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(tls.map(ServerTls::cli_args).unwrap_or_default())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound => {
                CliError(format!("`redis-cli` is not installed; Redis tests need it: run `{INSTALL}`"))
            }
            _ => CliError(format!("redis-cli: {e}")),
        })?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(CliError(format!("{text} {}", String::from_utf8_lossy(&out.stderr))))
    }
}

/// How to start a [`RedisServer`]: the program, extra arguments, TLS.
#[derive(Debug, Clone)]
pub struct Builder {
    program: PathBuf,
    args: Vec<String>,
    tls: Option<ServerTls>,
}

// === impl Builder ===

impl Builder {
    /// The `redis-server` to run (default: the one on `PATH`).
    pub fn program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = program.into();
        self
    }

    /// Extra `redis-server` arguments (`["--cluster-enabled", "yes"]`), after the defaults.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// TLS only (`rediss://`), with the server certificate of `certs`, verifying client
    /// certificates against its CA when `client_auth` requires them.
    pub fn tls(mut self, certs: &TestCerts, client_auth: ClientAuth) -> Self {
        self.tls = Some(ServerTls { certs: certs.clone(), client_auth });
        self
    }

    /// Starts the server on a free port and waits until it answers.
    ///
    /// # Errors
    /// When the program is missing or cannot be run, or the server does not answer as ours.
    pub fn try_start(&self) -> Result<RedisServer, StartError> {
        check(&self.program)?;
        // One start at a time in this process: a port picked as free stays unclaimed until the
        // server binds it, and two starts racing for it would both believe the server is theirs.
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = STARTING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port().map_err(|e| StartError::DidNotStart(e.to_string()))?;
            let dir = scratch_dir("redis", port).map_err(|e| StartError::DidNotStart(e.to_string()))?;
            let mut server = RedisServer {
                port,
                dir,
                program: self.program.clone(),
                args: self.args.clone(),
                tls: self.tls.clone(),
                watchdog: None,
            };
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(StartError::DidNotStart(format!("redis-server did not start: {last}")))
    }

    /// [`Builder::try_start`], for tests.
    ///
    /// # Panics
    /// When `redis-server` is not installed (with the command to install it) or does not start.
    pub fn start(&self) -> RedisServer {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }
}

// === impl RedisServer ===

impl RedisServer {
    /// How to start one: `redis-server` from `PATH`, no extra arguments, no TLS until set.
    pub fn builder() -> Builder {
        Builder { program: PathBuf::from("redis-server"), args: Vec::new(), tls: None }
    }

    /// Starts a single node on a free port.
    ///
    /// # Panics
    /// When `redis-server` is not installed (with the command to install it) or does not start.
    pub fn start() -> RedisServer {
        RedisServer::builder().start()
    }

    /// Starts a node with extra `redis-server` arguments (`["--cluster-enabled", "yes"]`).
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn start_with(args: &[&str]) -> RedisServer {
        RedisServer::builder().args(args).start()
    }

    /// Starts a single node that speaks TLS only (`rediss://`), with the server certificate of
    /// `certs`, verifying client certificates against its CA when `client_auth` requires them.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn start_tls(certs: &TestCerts, client_auth: ClientAuth) -> RedisServer {
        RedisServer::start_tls_with(certs, client_auth, &[])
    }

    /// [`RedisServer::start_tls`] with extra `redis-server` arguments.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn start_tls_with(certs: &TestCerts, client_auth: ClientAuth, args: &[&str]) -> RedisServer {
        RedisServer::builder().tls(certs, client_auth).args(args).start()
    }

    /// One server for the whole test process, started on first use.
    pub fn shared() -> &'static RedisServer {
        static SHARED: OnceLock<RedisServer> = OnceLock::new();
        SHARED.get_or_init(RedisServer::start)
    }

    fn launch(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let port = self.port.to_string();
        let dir = self.dir.display().to_string();
        let log = self.dir.join("redis.log");
        let mut args = match &self.tls {
            Some(tls) => tls.server_args(&port),
            None => vec!["--port".into(), port],
        };
        let log_arg = log.display().to_string();
        args.extend(["--bind", "127.0.0.1", "--dir", &dir, "--logfile", &log_arg].map(str::to_owned));
        args.extend(
            ["--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no"]
                .map(str::to_owned),
        );
        args.extend(self.args.iter().cloned());
        // From here on, the watchdog kills the server and removes its directory once stopped.
        self.watchdog = Some(Watched::spawn(&self.dir, &self.program, &args).map_err(|e| e.to_string())?);
        let started = Instant::now();
        loop {
            if let Ok(pong) = self.try_cli(&["PING"])
                && pong == "PONG"
            {
                // The answer must come from this server, not from another process's on the same
                // port (ours then failed to bind): its working directory is ours alone.
                let dir = self.try_cli(&["CONFIG", "GET", "dir"]).unwrap_or_default();
                let ours = self.dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| dir.contains(n));
                if ours {
                    return Ok(());
                }
                self.stop();
                return Err(format!("port {} answered by another redis-server", self.port));
            }
            let exited = !self.watchdog.as_ref().is_some_and(Watched::running);
            if exited || started.elapsed() > STARTUP {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                self.stop();
                return Err(format!("port {}: {}", self.port, log.lines().last().unwrap_or("no log")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://127.0.0.1:<port>` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The certificates of a TLS server.
    pub fn certs(&self) -> Option<&TestCerts> {
        self.tls.as_ref().map(|t| &t.certs)
    }

    /// Its working directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs a command with `redis-cli`; its output, trimmed.
    ///
    /// # Panics
    /// When `redis-cli` fails.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args).unwrap_or_else(|e| panic!("redis-cli {args:?} on port {}: {e}", self.port))
    }

    /// Runs a command with `redis-cli` (over TLS, with the client certificate, for a TLS server);
    /// its output, trimmed.
    ///
    /// # Errors
    /// When `redis-cli` is missing or fails (the server is down, the command is refused).
    pub fn try_cli(&self, args: &[&str]) -> Result<String, CliError> {
        cli(self.port, self.tls.as_ref(), args)
    }

    /// Whether the server is a master (`ROLE`): a single node, or a cluster node serving slots.
    pub fn is_master(&self) -> bool {
        self.try_cli(&["ROLE"]).is_ok_and(|role| role.lines().next() == Some("master"))
    }

    /// Whether the server is running.
    pub fn is_running(&self) -> bool {
        self.watchdog.is_some()
    }

    /// Sends the server `signal` at once: [`Signal::Stop`] freezes it (its port still accepts
    /// connections, nothing answers), [`Signal::Cont`] resumes it, [`Signal::Kill`] ends it as a
    /// crash would (then [`RedisServer::try_restart`] starts a new, empty one on its port).
    ///
    /// # Errors
    /// When the server is stopped, or the signal could not be sent.
    pub fn signal(&mut self, signal: Signal) -> io::Result<()> {
        let watchdog =
            self.watchdog.as_mut().ok_or_else(|| io::Error::other("redis-server is not running"))?;
        watchdog.signal(signal)
    }

    /// Kills the server (as a crash would: no shutdown, nothing saved).
    pub fn stop(&mut self) {
        drop(self.watchdog.take());
    }

    /// Starts the server again on the same port, empty.
    ///
    /// # Panics
    /// When it does not start.
    pub fn restart(&mut self) {
        self.try_restart().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts the server again on the same port, empty (retrying while the port is still busy,
    /// for as long as a start may take).
    ///
    /// # Errors
    /// When it does not start.
    pub fn try_restart(&mut self) -> Result<(), StartError> {
        self.stop();
        let started = Instant::now();
        loop {
            match self.launch() {
                Ok(()) => return Ok(()),
                // The port may take a moment to be free again.
                Err(e) if started.elapsed() > STARTUP => {
                    return Err(StartError::DidNotStart(format!("redis-server did not restart: {e}")));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three masters (with no replicas unless built with some), each node a
/// [`RedisServer`], all killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// How to start a [`RedisCluster`]: its nodes' program and TLS, replicas, node timeout.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    node: Builder,
    replicas: usize,
    node_timeout: Duration,
}

// === impl ClusterBuilder ===

impl ClusterBuilder {
    /// The `redis-server` of every node (default: the one on `PATH`).
    pub fn program(mut self, program: impl Into<PathBuf>) -> Self {
        self.node = self.node.program(program);
        self
    }

    /// Replicas of each master (default 0): the cluster has `3 × (1 + replicas)` nodes.
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// `--cluster-node-timeout` (default 5 s): how long a master may not answer before its
    /// replica is promoted.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// TLS only, to clients and between the nodes (`--tls-cluster yes`, `--tls-replication yes`),
    /// as [`Builder::tls`] says; the nodes' URLs are `rediss://`.
    pub fn tls(mut self, certs: &TestCerts, client_auth: ClientAuth) -> Self {
        self.node =
            self.node.tls(certs, client_auth).args(&["--tls-cluster", "yes", "--tls-replication", "yes"]);
        self
    }

    /// Starts the nodes, joins them with `redis-cli --cluster create`, then waits until every node
    /// reports the cluster `ok` — and, with replicas, every master has its replicas and every
    /// replica has finished its first sync (a replica that has not could never be failed over
    /// to).
    ///
    /// # Errors
    /// When a node does not start or the cluster does not form.
    pub fn try_start(&self) -> Result<RedisCluster, StartError> {
        let timeout = self.node_timeout.as_millis().to_string();
        let node = self.node.clone().args(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &timeout,
        ]);
        let nodes = (0..3 * (1 + self.replicas)).map(|_| node.try_start()).collect::<Result<Vec<_>, _>>()?;
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())).collect();
        let replicas = self.replicas.to_string();
        let mut args: Vec<&str> = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
        nodes[0]
            .try_cli(&args)
            .map_err(|e| StartError::DidNotStart(format!("redis-cli --cluster create failed: {e}")))?;
        let started = Instant::now();
        while !nodes.iter().all(|n| self.ready(n)) {
            if started.elapsed() > CLUSTER_STARTUP {
                return Err(StartError::DidNotStart("the cluster did not become ok".into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(RedisCluster { nodes })
    }

    /// Whether `node` says the cluster is `ok` and, with replicas, has its replicas or its first
    /// sync.
    fn ready(&self, node: &RedisServer) -> bool {
        let ok = node.try_cli(&["CLUSTER", "INFO"]).is_ok_and(|i| i.contains("cluster_state:ok"));
        if !ok || self.replicas == 0 {
            return ok;
        }
        let replication = node.try_cli(&["INFO", "replication"]).unwrap_or_default();
        if node.is_master() {
            replication.contains(&format!("connected_slaves:{}", self.replicas))
        } else {
            replication.contains("master_link_status:up")
        }
    }

    /// [`ClusterBuilder::try_start`], for tests.
    ///
    /// # Panics
    /// When `redis-server` is not installed (with the command to install it) or the cluster does
    /// not form.
    pub fn start(&self) -> RedisCluster {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }
}

// === impl RedisCluster ===

impl RedisCluster {
    /// How to start one: three masters of `redis-server` from `PATH`, no replicas, a node timeout
    /// of 5 s, no TLS until set.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder { node: RedisServer::builder(), replicas: 0, node_timeout: Duration::from_secs(5) }
    }

    /// Starts three cluster-enabled nodes and joins them with `redis-cli --cluster create`, then
    /// waits until every node reports the cluster `ok`.
    ///
    /// # Panics
    /// When `redis-server` is not installed (with the command to install it) or the cluster does
    /// not form.
    pub fn start() -> RedisCluster {
        RedisCluster::builder().start()
    }

    /// Starts three nodes that speak TLS only, to clients and to each other
    /// (`--tls-cluster yes`, `--tls-replication yes`), as [`RedisServer::start_tls`] does; the
    /// nodes' URLs are `rediss://`.
    ///
    /// # Panics
    /// As [`RedisCluster::start`].
    pub fn start_tls(certs: &TestCerts, client_auth: ClientAuth) -> RedisCluster {
        RedisCluster::builder().tls(certs, client_auth).start()
    }

    /// One cluster for the whole test process, started on first use.
    pub fn shared() -> &'static RedisCluster {
        static SHARED: OnceLock<RedisCluster> = OnceLock::new();
        SHARED.get_or_init(RedisCluster::start)
    }

    /// The nodes' URLs, seeds for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, to signal or restart one.
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// The node that serves `slot`.
    ///
    /// # Panics
    /// When no node claims it.
    pub fn node_of_slot(&self, slot: u16) -> &RedisServer {
        let slots = self.nodes[0].cli(&["CLUSTER", "SLOTS"]);
        // `redis-cli` prints each range as: start, end, then the master's address and port.
        let lines: Vec<&str> = slots.lines().map(str::trim).collect();
        for w in lines.windows(4) {
            if let (Ok(start), Ok(end), Ok(port)) =
                (w[0].parse::<u16>(), w[1].parse::<u16>(), w[3].parse::<u16>())
                && (start..=end).contains(&slot)
                && let Some(node) = self.nodes.iter().find(|n| n.port() == port)
            {
                return node;
            }
        }
        panic!("no node serves slot {slot}: {slots}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_is_an_error_that_says_how_to_install_it() {
        let e = RedisServer::builder().program("/nonexistent/redis-server").try_start().unwrap_err();
        assert!(
            matches!(&e, StartError::NotFound { program } if program == Path::new("/nonexistent/redis-server"))
        );
        assert!(e.to_string().contains("apt-get install -y redis-server"), "{e}");
    }

    #[test]
    fn a_killed_server_refuses_connections_and_restarts_empty_on_its_port() {
        let mut server = RedisServer::builder().try_start().unwrap();
        server.cli(&["SET", "k", "1"]);
        server.signal(Signal::Kill).unwrap();
        let port = server.port();
        crate::wait::until_blocking("the port refusing connections after SIGKILL", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        });
        server.try_restart().unwrap();
        assert_eq!((server.port(), server.cli(&["EXISTS", "k"]).as_str()), (port, "0"));
    }

    #[test]
    fn a_cluster_with_replicas_has_one_synced_replica_per_master() {
        let cluster = RedisCluster::builder().replicas(1).node_timeout(Duration::from_secs(1)).start();
        assert_eq!(cluster.nodes().len(), 6);
        let masters = cluster.nodes().iter().filter(|n| n.is_master()).count();
        assert_eq!(masters, 3);
        for node in cluster.nodes().iter().filter(|n| !n.is_master()) {
            assert!(node.cli(&["INFO", "replication"]).contains("master_link_status:up"));
        }
    }
}
