//! Real `redis-server` processes for tests: a single node, or a 3-master Redis Cluster.
//!
//! Each server runs on a free port of 127.0.0.1 in a temporary directory of its own, with no
//! persistence. It is killed when its handle is dropped — also when the test panics — and, because
//! it is started under a small shell watchdog that reads the test process's end of a pipe, also
//! when the test process dies without unwinding (an abort, a `SIGKILL`): the pipe closes and the
//! watchdog kills the server and removes its directory. [`RedisServer::shared`] and
//! [`RedisCluster::shared`] start one per test process on first use, for the tests that can share.
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

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::tls::TestCerts;

/// What to run when Redis is missing.
const INSTALL: &str = "apt-get install -y redis-server";

/// How long a server may take to answer after it is started.
const STARTUP: Duration = Duration::from_secs(10);

/// One `redis-server` process, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    /// TLS only, with these certificates, when set.
    tls: Option<ServerTls>,
    /// The watchdog shell; its stdin is our end of the pipe.
    watchdog: Option<Child>,
}

/// Whether a TLS server asks its clients for a certificate signed by its CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// Clients must present one (mutual TLS): `--tls-auth-clients yes`.
    Required,
    /// Clients present none: `--tls-auth-clients no`.
    Off,
}

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

/// Panics with the install command when `program` is missing.
fn require(program: &str) {
    match Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!("`{program}` is not installed; Redis tests need it: run `{INSTALL}`")
        }
        Err(e) => panic!("cannot run `{program}`: {e}"),
    }
}

/// A port on 127.0.0.1 that is free now, and whose cluster bus port (+10 000) is free too.
fn free_port() -> u16 {
    // Ports handed out once are never handed out again in this process: a stopped server may be
    // restarted on its port, which must not meanwhile become another server's.
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..100 {
        let Ok(listener) = TcpListener::bind("127.0.0.1:0") else { continue };
        let Ok(addr) = listener.local_addr() else { continue };
        let port = addr.port();
        if port < 55_000
            && !handed_out.iter().any(|p| *p == port || *p == port + 10_000 || *p + 10_000 == port)
            && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
        {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free port pair found on 127.0.0.1");
}

fn temp_dir(port: u16) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "floodgate-redis-{}-{}-{port}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// Runs `redis-cli -p port args…` (over TLS with `tls`); its output, trimmed.
fn cli(port: u16, tls: Option<&ServerTls>, args: &[&str]) -> Result<String, String> {
    require("redis-cli");
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(tls.map(ServerTls::cli_args).unwrap_or_default())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("redis-cli: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{text} {}", String::from_utf8_lossy(&out.stderr)))
    }
}

// === impl RedisServer ===

impl RedisServer {
    /// Starts a single node on a free port.
    ///
    /// # Panics
    /// When `redis-server` is not installed (with the command to install it) or does not start.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a node with extra `redis-server` arguments (`["--cluster-enabled", "yes"]`).
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn start_with(args: &[&str]) -> RedisServer {
        RedisServer::start_on(args, None)
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
        RedisServer::start_on(args, Some(ServerTls { certs: certs.clone(), client_auth }))
    }

    fn start_on(args: &[&str], tls: Option<ServerTls>) -> RedisServer {
        require("redis-server");
        // One start at a time in this process: a port picked as free stays unclaimed until the
        // server binds it, and two starts racing for it would both believe the server is theirs.
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = STARTING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut server = RedisServer {
                port,
                dir: temp_dir(port),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                tls: tls.clone(),
                watchdog: None,
            };
            match server.launch() {
                Ok(()) => return server,
                Err(e) => last = e,
            }
        }
        panic!("redis-server did not start: {last}");
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
        let log = self.dir.join("redis.log").display().to_string();
        // The watchdog: start the server, wait for our end of the pipe to close (drop, exit or
        // death of the test process), then kill the server and remove its directory.
        let script = r#"dir="$1"; shift
redis-server "$@" &
pid=$!
cat >/dev/null
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$dir""#;
        let listen = match &self.tls {
            Some(tls) => tls.server_args(&port),
            None => vec!["--port".into(), port],
        };
        let child = Command::new("sh")
            .args(["-c", script, "sh", &dir])
            .args(listen)
            .args(["--bind", "127.0.0.1", "--dir", &dir, "--logfile", &log])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no"])
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot spawn the watchdog shell: {e}"))?;
        self.watchdog = Some(child);
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
            let exited = self.watchdog.as_mut().and_then(|c| c.try_wait().ok().flatten()).is_some();
            if exited || started.elapsed() > STARTUP {
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
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

    /// Runs a command with `redis-cli` (over TLS, with the client certificate, for a TLS server).
    fn try_cli(&self, args: &[&str]) -> Result<String, String> {
        cli(self.port, self.tls.as_ref(), args)
    }

    /// Whether the server is running.
    pub fn is_running(&self) -> bool {
        self.watchdog.is_some()
    }

    /// Kills the server (as a crash would: no shutdown, nothing saved).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.watchdog.take() {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    ///
    /// # Panics
    /// When it does not start.
    pub fn restart(&mut self) {
        self.stop();
        let started = Instant::now();
        loop {
            match self.launch() {
                Ok(()) => return,
                // The port may take a moment to be free again.
                Err(e) if started.elapsed() > STARTUP => panic!("redis-server did not restart: {e}"),
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

/// A Redis Cluster of three masters (no replicas), each a [`RedisServer`], all killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

// === impl RedisCluster ===

impl RedisCluster {
    /// Starts three cluster-enabled nodes and joins them with `redis-cli --cluster create`, then
    /// waits until every node reports the cluster `ok`.
    ///
    /// # Panics
    /// When `redis-server` is not installed (with the command to install it) or the cluster does
    /// not form.
    pub fn start() -> RedisCluster {
        RedisCluster::start_on(None)
    }

    /// Starts three nodes that speak TLS only, to clients and to each other
    /// (`--tls-cluster yes`, `--tls-replication yes`), as [`RedisServer::start_tls`] does; the
    /// nodes' URLs are `rediss://`.
    ///
    /// # Panics
    /// As [`RedisCluster::start`].
    pub fn start_tls(certs: &TestCerts, client_auth: ClientAuth) -> RedisCluster {
        RedisCluster::start_on(Some((certs, client_auth)))
    }

    fn start_on(tls: Option<(&TestCerts, ClientAuth)>) -> RedisCluster {
        let node_args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ];
        let tls_args = ["--tls-cluster", "yes", "--tls-replication", "yes"];
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| match tls {
                Some((certs, auth)) => {
                    RedisServer::start_tls_with(certs, auth, &[&node_args[..], &tls_args[..]].concat())
                }
                None => RedisServer::start_with(&node_args),
            })
            .collect();
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())).collect();
        let mut args: Vec<&str> = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        if let Err(e) = nodes[0].try_cli(&args) {
            panic!("redis-cli --cluster create failed: {e}");
        }
        let started = Instant::now();
        while !nodes
            .iter()
            .all(|n| n.try_cli(&["CLUSTER", "INFO"]).is_ok_and(|i| i.contains("cluster_state:ok")))
        {
            assert!(started.elapsed() < Duration::from_secs(30), "the cluster did not become ok");
            std::thread::sleep(Duration::from_millis(50));
        }
        RedisCluster { nodes }
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
