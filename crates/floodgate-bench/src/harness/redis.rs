//! The `redis-server`s a run starts for itself (`outage`, `flood`, `reserve`, `soak`,
//! `cross-slot`): the testkit's launcher ([`floodgate_testkit::redis`]) — loopback, a free port, no
//! persistence, a directory of their own, held by a watchdog that kills the server and removes its
//! directory however the run ends — run off the runtime's workers, its failures said the bench's
//! way; and the `store` sections of configurations on them.

use std::path::Path;
use std::time::Duration;

pub(crate) use floodgate_testkit::process::Signal;
use floodgate_testkit::redis::StartError;
pub(crate) use floodgate_testkit::redis::{RedisCluster, RedisServer};

use crate::Usage;

/// What to tell when there is no `redis-server`.
const INSTALL: &str = "install it (apt-get install -y redis-server) or pass --redis-server PATH";

/// Starts `program` (`--redis-server`) on a free loopback port, and waits until it answers.
pub(crate) fn start(program: &Path) -> anyhow::Result<RedisServer> {
    blocking(|| RedisServer::builder().program(program).try_start()).map_err(failure)
}

/// Starts a cluster of 3 masters with `replicas` replicas each, of `program`, with
/// `--cluster-node-timeout node_timeout`, and waits until every replica has synced.
pub(crate) fn start_cluster(
    program: &Path,
    replicas: usize,
    node_timeout: Duration,
) -> anyhow::Result<RedisCluster> {
    let cluster = RedisCluster::builder().program(program).replicas(replicas).node_timeout(node_timeout);
    blocking(|| cluster.try_start()).map_err(failure)
}

/// Sends `server` `signal` at once (through its watchdog: within microseconds).
pub(crate) fn signal(server: &mut RedisServer, signal: Signal) -> anyhow::Result<()> {
    server.signal(signal).map_err(|e| anyhow::anyhow!("kill -{} redis-server: {e}", signal.name()))
}

/// After a kill: a new, empty server on the same port.
pub(crate) fn restart(server: &mut RedisServer) -> anyhow::Result<()> {
    blocking(|| server.try_restart()).map_err(failure)
}

/// The server's answer to `command` (`redis-cli`, off the runtime's workers), or `None`.
pub(crate) fn query(server: &RedisServer, command: &[&str]) -> Option<String> {
    blocking(|| server.try_cli(command)).ok()
}

/// `127.0.0.1:PORT`.
pub(crate) fn addr(server: &RedisServer) -> String {
    format!("127.0.0.1:{}", server.port())
}

/// A failed start, as the command line says it: a missing or broken program is a usage error
/// (exit 64) that says how to get one.
fn failure(e: StartError) -> anyhow::Error {
    match e {
        StartError::NotFound { program } => {
            Usage(format!("{} not found: {INSTALL}", program.display())).into()
        }
        StartError::VersionFailed { .. } => Usage(e.to_string()).into(),
        StartError::CannotRun { program, source } => {
            Usage(format!("cannot run {}: {source}; {INSTALL}", program.display())).into()
        }
        StartError::DidNotStart(why) => anyhow::anyhow!(why),
    }
}

/// Runs `f`, which blocks (a launcher waiting for its server, `redis-cli`), without holding up the
/// other tasks of a multi-threaded runtime: they move to another worker meanwhile.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// The `store` section of a configuration on the Redis node `url`, with a `deadline` when given
/// (written in whole milliseconds, the configuration's finest unit; at least 1 ms).
pub(crate) fn store_yaml(url: &str, deadline: Option<Duration>) -> String {
    with_deadline(format!("store:\n  kind: redis\n  url: {url:?}\n"), deadline)
}

/// The `store` section of a configuration on the Redis Cluster with seed nodes `urls`, with a
/// `deadline` when given (as [`store_yaml`] writes it).
pub(crate) fn cluster_store_yaml(urls: &[String], deadline: Option<Duration>) -> String {
    let list: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
    with_deadline(format!("store:\n  kind: redis_cluster\n  urls: [{}]\n", list.join(", ")), deadline)
}

fn with_deadline(mut yaml: String, deadline: Option<Duration>) -> String {
    if let Some(deadline) = deadline {
        yaml.push_str(&format!("  deadline: {}ms\n", deadline.as_millis().max(1)));
    }
    yaml
}

/// The master that serves `slot` in `cluster` (`CLUSTER SLOTS`, off the runtime's workers).
pub(crate) fn node_of_slot(cluster: &RedisCluster, slot: u16) -> &RedisServer {
    blocking(|| cluster.node_of_slot(slot))
}
