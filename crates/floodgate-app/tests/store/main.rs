//! [`AnyStore`], the store the server and the bench run on, through the store conformance suite:
//! on the memory store and on a real `redis-server` (started by the test, on a test clock); and
//! the largest limits a Redis store takes (`doubles`).

mod doubles;

use std::time::Duration;

use floodgate::MemoryConfig;
use floodgate_app::store::{AnyStore, OpenError};
use floodgate_config::redis::RedisStoreConfig;
use floodgate_config::{StoreConfig, Survival};
use floodgate_redis::{RedisConfig, RedisStore};
use floodgate_testkit::redis::RedisServer;

mod memory {
    floodgate_testkit::conformance_tests!(|clock| floodgate_app::store::AnyStore::memory_on(
        floodgate::MemoryConfig::default(),
        clock
    ));
}

mod redis {
    floodgate_testkit::conformance_tests!({
        let store = crate::redis_store().await;
        move |clock: floodgate::core::ManualClock| {
            let local =
                floodgate::MemoryStore::with_config(floodgate::MemoryConfig::default(), clock.clone());
            let survival = floodgate_config::Survival::default();
            let hooks = floodgate_app::store::Hooks::default();
            floodgate_app::store::AnyStore::Redis(floodgate_app::store::guard(
                store.with_clock(clock.clone()),
                &survival,
                local,
                clock,
                hooks,
            ))
        }
    });
}

async fn redis_store() -> RedisStore {
    let server = RedisServer::shared();
    let config = RedisConfig {
        deadline: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(10),
        ..RedisConfig::node(server.url())
    };
    RedisStore::connect(config).await.expect("connect to the shared node")
}

#[tokio::test]
async fn opened_stores_say_what_they_are_and_whether_they_can_decide() {
    let memory = AnyStore::open(&StoreConfig::Memory(MemoryConfig::default()), &Survival::default()).unwrap();
    assert_eq!((memory.kind(), memory.counts_keys(), memory.keys()), ("memory", true, Some(0)));
    assert!(memory.ready().await.is_ready());

    let server = RedisServer::shared();
    let redis =
        AnyStore::open(&StoreConfig::Redis(RedisStoreConfig::node(server.url())), &Survival::default())
            .unwrap();
    assert_eq!((redis.kind(), redis.counts_keys(), redis.keys()), ("redis", false, None));
    assert!(redis.ready().await.is_ready(), "the shared node answers PING");

    // Nothing listens on port 1: not ready, and the answer says why.
    let down = AnyStore::open(
        &StoreConfig::Redis(RedisStoreConfig::node("redis://127.0.0.1:1")),
        &Survival::default(),
    )
    .unwrap();
    let readiness = down.ready().await;
    assert!(!readiness.is_ready(), "{readiness:?}");
    let cluster = AnyStore::open(
        &StoreConfig::Redis(RedisStoreConfig::cluster(["redis://127.0.0.1:1"])),
        &Survival::default(),
    )
    .unwrap();
    assert_eq!(cluster.kind(), "redis_cluster");
}

#[test]
fn a_redis_store_needs_a_runtime_and_a_valid_configuration() {
    let node = StoreConfig::Redis(RedisStoreConfig::node("redis://127.0.0.1:6379"));
    assert_eq!(
        AnyStore::open(&node, &Survival::default()).unwrap_err(),
        OpenError::NoRuntime { kind: "redis" }
    );
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let bad = RedisStoreConfig {
            prefix: Some("fg{x}".into()),
            ..RedisStoreConfig::node("redis://127.0.0.1:6379")
        };
        let error = AnyStore::open(&StoreConfig::Redis(bad), &Survival::default()).unwrap_err();
        assert!(error.to_string().contains("prefix"), "{error}");
    });
}

#[tokio::test]
async fn a_configured_tls_store_reaches_a_tls_server_with_its_client_certificate() {
    use floodgate_testkit::redis::ClientAuth;
    use floodgate_testkit::tls::TestCerts;

    let certs = TestCerts::generate();
    let server = RedisServer::start_tls(&certs, ClientAuth::Required);
    let yaml = |tls: &str| {
        format!(
            "store:\n  kind: redis\n  url: {}\n  deadline: 2s\n  connect_timeout: 10s\n  tls:\n{tls}rules: []\n",
            server.url()
        )
    };
    let ca = format!("    ca: {}\n", certs.ca().display());
    let mutual = format!(
        "{ca}    cert: {}\n    key: {}\n",
        certs.client_cert().display(),
        certs.client_key().display()
    );

    let config = floodgate_config::parse("tls.yaml", &yaml(&mutual)).expect("a valid configuration");
    let store = AnyStore::open(&config.store, &config.survival).expect("a store");
    assert_eq!(store.kind(), "redis");
    assert!(store.ready().await.is_ready(), "the server admits the configured client certificate");

    // Without the client certificate, the server refuses the store: not ready, and why.
    let config = floodgate_config::parse("tls.yaml", &yaml(&ca)).expect("a valid configuration");
    let store = AnyStore::open(&config.store, &config.survival).expect("a store");
    let readiness = store.ready().await;
    assert!(!readiness.is_ready(), "{readiness:?}");
}

/// A configuration with a `prefetch` rule, opened on Redis as the server opens it: the rule's
/// checks are served from batches, and a flush gives the unspent units back.
#[tokio::test]
async fn a_configured_prefetch_rule_is_served_from_batches_on_redis() {
    let server = RedisServer::shared();
    let name = format!(
        "prefetched-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap()
    );
    let yaml = format!(
        "store:\n  kind: redis\n  url: {:?}\n  deadline: 5s\nrules:\n  - name: {name}\n    key: []\n    algorithm: fixed_window\n    limit: 100\n    window: 1h\n    prefetch: {{ batch: 10, ttl: 1h }}\n",
        server.url()
    );
    let config = floodgate_config::parse("prefetch.yaml", &yaml).unwrap();
    let store = AnyStore::open(&config.store, &config.survival).unwrap();
    let engine = floodgate::Engine::new(config.policy, store);
    for _ in 0..10 {
        assert!(engine.check(&floodgate::Descriptors::new(), 1).await.unwrap().allowed);
    }
    let prefetch = engine.store().prefetch().expect("a Redis store runs inside prefetch");
    let stats = prefetch.stats();
    assert_eq!((stats.batches, stats.store_calls, stats.local_decisions), (1, 1, 9));
    assert!(engine.check(&floodgate::Descriptors::new(), 1).await.unwrap().allowed);
    assert_eq!(prefetch.flush().await.units, 9, "the second batch's unspent units go back");
}
