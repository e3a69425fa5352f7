//! The Redis store against real `redis-server` processes: the conformance suite (single node and
//! cluster), a differential test against the memory store, exactness under concurrency, clock skew,
//! recovery, calls Redis runs after their deadline, the cross-slot protocol, key expiry, penalty
//! boxes, and TLS.

// The cluster test waits out a node's `CLIENT PAUSE` on the process clock.
#![allow(clippy::disallowed_methods)]

mod calendars;
mod cluster;
mod concurrency;
mod conformance;
mod differential;
mod expiry;
mod fleet;
mod penalty;
mod prefetch;
mod recovery;
mod reservations;
mod shards;
mod skew;
mod stale;
mod tls;

use std::time::Duration;

use floodgate_redis::{HashTag, RedisConfig, RedisStore};
use floodgate_testkit::redis::{RedisCluster, RedisServer};

/// How long tests wait for a store to connect and load its scripts: generous, since tests share
/// two cores with the servers and with each other (the default, 1 s, is for production).
const CONNECT: Duration = Duration::from_secs(10);

/// The deadline of stores on the shared node and cluster (see [`node_store`]).
const SHARED_DEADLINE: Duration = Duration::from_secs(30);

/// A store on the process's shared single node, with a generous deadline: tests share two cores
/// with the servers, and the shared node queues the requests of every test at once (the
/// concurrency tests put hundreds in flight). Deadlines themselves are tested on private servers.
async fn node_store() -> RedisStore {
    RedisStore::connect(node_config(RedisServer::shared())).await.expect("connect to the shared node")
}

/// A store on a deadline of a few tens of milliseconds, once warm. Warming loads the scripts with
/// that deadline on each command, which two busy cores miss now and then: it is tried again until
/// it succeeds (what the server's survival loop does for a cold store).
async fn warm_store(config: RedisConfig) -> RedisStore {
    let store = RedisStore::connect_lazy(config).expect("a valid configuration");
    floodgate_testkit::wait::until("the store connected and its scripts loaded", || async {
        store.warm().await.ok()
    })
    .await;
    store
}

fn node_config(server: &RedisServer) -> RedisConfig {
    RedisConfig { deadline: SHARED_DEADLINE, connect_timeout: CONNECT, ..RedisConfig::node(server.url()) }
}

/// A store on the process's shared cluster; keys spread by whole key, so multi-limit requests
/// usually span slots.
async fn cluster_store() -> RedisStore {
    cluster_store_with(HashTag::Key).await
}

async fn cluster_store_with(hash_tag: HashTag) -> RedisStore {
    cluster_store_of(RedisConfig { hash_tag, ..RedisConfig::cluster(RedisCluster::shared().urls()) }).await
}

/// A store on the process's shared cluster with `config`'s settings, on the shared deadlines.
async fn cluster_store_of(config: RedisConfig) -> RedisStore {
    let config = RedisConfig { deadline: SHARED_DEADLINE, connect_timeout: CONNECT, ..config };
    RedisStore::connect(config).await.expect("connect to the shared cluster")
}

/// Runs `attempts` checks of cost 1 (no descriptors) through every engine × `tasks` tasks, each
/// answered by the store without error; how many were admitted.
async fn hammer<S: floodgate::Store>(
    engines: &[std::sync::Arc<floodgate::Engine<S>>],
    tasks: usize,
    attempts: usize,
) -> usize {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let tickets = Arc::new(AtomicUsize::new(0));
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut running = Vec::new();
    for engine in engines {
        for _ in 0..tasks {
            let (engine, tickets, admitted) =
                (Arc::clone(engine), Arc::clone(&tickets), Arc::clone(&admitted));
            running.push(tokio::spawn(async move {
                while tickets.fetch_add(1, Ordering::Relaxed) < attempts {
                    let verdict =
                        engine.check(&floodgate::Descriptors::new(), 1).await.expect("a valid request");
                    assert_eq!(verdict.store_error, None, "no store errors under load");
                    if verdict.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in running {
        task.await.expect("a task");
    }
    admitted.load(Ordering::Relaxed)
}
