//! The Redis store against real `redis-server` processes: the conformance suite (single node and
//! cluster), a differential test against the memory store, exactness under concurrency, clock skew,
//! recovery, calls Redis runs after their deadline, the cross-slot protocol, key expiry, and TLS.

// Recovery tests time real calls against the store's deadline.
#![allow(clippy::disallowed_methods)]

mod cluster;
mod concurrency;
mod conformance;
mod differential;
mod expiry;
mod fleet;
mod prefetch;
mod recovery;
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
const SHARED_DEADLINE: Duration = Duration::from_secs(5);

/// A store on the process's shared single node, with a generous deadline: tests share two cores
/// with the servers, and the shared node queues the requests of every test at once (the
/// concurrency tests put hundreds in flight). Deadlines themselves are tested on private servers.
async fn node_store() -> RedisStore {
    RedisStore::connect(node_config(RedisServer::shared())).await.expect("connect to the shared node")
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
    let config = RedisConfig {
        deadline: SHARED_DEADLINE,
        connect_timeout: CONNECT,
        hash_tag,
        ..RedisConfig::cluster(RedisCluster::shared().urls())
    };
    RedisStore::connect(config).await.expect("connect to the shared cluster")
}
