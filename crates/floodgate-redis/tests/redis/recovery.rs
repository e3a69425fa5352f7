//! Recovery: a flushed script cache, a restarted Redis, a stopped or paused Redis through the
//! engine's failure policies, and a key Redis cannot read.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::store::{Applied, Mode};
use floodgate::{Descriptors, Engine, OnStoreError, Policy, Rule, Store, StoreError};
use floodgate_core::FixedWindow;
use floodgate_redis::{RedisConfig, RedisStore};
use floodgate_testkit::process::Signal;
use floodgate_testkit::redis::{RedisCluster, RedisServer};
use floodgate_testkit::{TestKey, every_algorithm, wait};

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

async fn check_all(store: &RedisStore, name: &str) -> Result<Applied, StoreError> {
    let limits = every_algorithm(1_000);
    let keys: Vec<TestKey> = limits
        .iter()
        .map(|l| TestKey::new(&format!("{name}-{}", std::process::id()), l.algorithm_name()))
        .collect();
    let ops: Vec<_> = keys.iter().zip(&limits).map(|(k, l)| k.op(l, 1)).collect();
    let mut out = Applied::default();
    store.apply(&ops, Mode::Check, &mut out).await.map(|()| out)
}

#[tokio::test]
async fn a_flushed_script_cache_is_reloaded_transparently() {
    let store = crate::node_store().await;
    check_all(&store, "flush-node").await.expect("before the flush");
    RedisServer::shared().cli(&["SCRIPT", "FLUSH"]);
    let after = check_all(&store, "flush-node").await.expect("after the flush");
    assert!(after.results.iter().all(|r| r.decision.allowed));

    let cluster = crate::cluster_store().await;
    check_all(&cluster, "flush-cluster").await.expect("before the flush");
    for node in RedisCluster::shared().nodes() {
        node.cli(&["SCRIPT", "FLUSH"]);
    }
    check_all(&cluster, "flush-cluster").await.expect("after the flush, on every node");
}

#[tokio::test]
async fn one_limit_requests_run_their_single_limit_script_reloaded_after_a_flush() {
    let server = RedisServer::start();
    let store = RedisStore::connect(crate::node_config(&server)).await.expect("connect");
    let sha = |source: &str| redis::Script::new(source).get_hash().to_owned();
    let driver = sha(floodgate_redis::script_source());
    let [bucket, window] = floodgate_redis::single_limit_script_sources().map(|(_, source)| sha(source));
    let loaded = |sha: &str| server.cli(&["SCRIPT", "EXISTS", sha]) == "1";
    server.cli(&["SCRIPT", "FLUSH"]);

    let key = TestKey::new(&format!("one-{}", std::process::id()), "k");
    let window_limit = FixedWindow::try_new(nz(10), Duration::from_secs(60)).expect("a window").into();
    let bucket_limit = floodgate_core::Gcra::try_new(
        floodgate_core::Rate::try_new(nz(10), Duration::from_secs(60)).expect("a rate"),
        nz(10),
    )
    .expect("a bucket")
    .into();
    let mut out = Applied::default();
    for limit in [&window_limit, &bucket_limit] {
        store.apply(&[key.op(limit, 1)], Mode::Check, &mut out).await.expect("a one-limit check");
        assert!(out.results[0].decision.allowed);
    }
    assert!(loaded(&window) && loaded(&bucket), "each reloaded by its first call after the flush");
    assert!(!loaded(&driver), "a one-limit request does not run the driver");

    // Two limits on the same keys: the driver, reading the state the single-limit scripts wrote.
    let ops = [key.op(&window_limit, 1), key.op(&bucket_limit, 1)];
    store.apply(&ops, Mode::Check, &mut out).await.expect("a two-limit check");
    assert!(loaded(&driver));
    assert_eq!(out.results[0].decision.remaining, 8);
    assert_eq!(out.results[1].decision.remaining, 8);
}

#[tokio::test]
async fn a_restarted_redis_is_used_again_and_failures_meanwhile_are_transient() {
    let mut server = RedisServer::start();
    let store = RedisStore::connect(crate::node_config(&server)).await.expect("connect");
    check_all(&store, "restart").await.expect("before the restart");
    server.restart();
    wait::until("the store answers again after the restart", || async {
        match check_all(&store, "restart").await {
            Ok(_) => Some(()),
            Err(e) => {
                assert!(e.is_transient(), "a restart is a transient failure: {e}");
                None
            }
        }
    })
    .await;
}

fn engine(store: RedisStore, on_error: OnStoreError) -> Engine<RedisStore> {
    let limit = FixedWindow::try_new(nz(100), Duration::from_secs(60)).expect("a window");
    Engine::new(
        Policy::new([Rule::new("r", limit).key(["user"]).on_store_error(on_error)]).expect("a policy"),
        store,
    )
}

/// Checks through a fail-open and a fail-closed engine: each returns, decided by its rule's policy,
/// with a store error `expected` accepts (what ended the call).
async fn fails_by_policy(
    open: &Engine<RedisStore>,
    closed: &Engine<RedisStore>,
    expected: impl Fn(&StoreError) -> bool,
) {
    let request = Descriptors::new().with("user", "u");
    for _ in 0..5 {
        let v = wait::finished("a fail-open check", open.check(&request, 1)).await.expect("a valid request");
        assert!(v.allowed && v.store_error.as_deref().is_some_and(&expected), "fail open: {v:?}");
        let v =
            wait::finished("a fail-closed check", closed.check(&request, 1)).await.expect("a valid request");
        assert!(!v.allowed && v.store_error.as_deref().is_some_and(&expected), "fail closed: {v:?}");
    }
}

/// Ended by the deadline (a timeout of `deadline`) or before it (a transient backend error: a
/// connection refused or lost).
fn by_the_deadline_or_before(deadline: Duration) -> impl Fn(&StoreError) -> bool {
    move |e| match e {
        StoreError::Timeout(d) => *d == deadline,
        StoreError::Backend { transient, .. } => *transient,
        _ => false,
    }
}

/// Whether `e` is a connection attempt refused (nothing listens on the port).
fn refused(e: &StoreError) -> bool {
    use std::error::Error;
    e.source().and_then(|s| s.downcast_ref::<redis::RedisError>()).is_some_and(|r| r.is_connection_refusal())
}

#[tokio::test]
async fn a_stopped_redis_fails_open_or_closed_within_the_deadline() {
    let mut server = RedisServer::start();
    let deadline = Duration::from_millis(20);
    let config = RedisConfig { deadline, connect_timeout: super::CONNECT, ..RedisConfig::node(server.url()) };
    let store = crate::warm_store(config).await;
    let (open, closed) =
        (engine(store.clone(), OnStoreError::FailOpen), engine(store, OnStoreError::FailClosed));
    // A 20 ms deadline on two busy cores is missed now and then: a running Redis answers within it.
    wait::until("a running Redis answers within the deadline", || async {
        let v = open.check(&Descriptors::new().with("user", "u"), 1).await.expect("valid");
        v.store_error.is_none().then_some(())
    })
    .await;
    server.stop();
    fails_by_policy(&open, &closed, by_the_deadline_or_before(deadline)).await;
    // A store built while Redis is down fails the same way.
    let lazy = RedisStore::connect_lazy(RedisConfig {
        deadline,
        connect_timeout: super::CONNECT,
        ..RedisConfig::node(server.url())
    })
    .expect("a config");
    fails_by_policy(
        &engine(lazy.clone(), OnStoreError::FailOpen),
        &engine(lazy, OnStoreError::FailClosed),
        by_the_deadline_or_before(deadline),
    )
    .await;
}

#[tokio::test]
async fn a_stopped_redis_fails_fast_instead_of_waiting_out_the_deadline_and_recovers_at_once() {
    let mut server = RedisServer::start();
    // A deadline far longer than a refused connection takes, even on two busy cores: a call that
    // waited for it (or for a reconnect's back-off) would end in a timeout, not a refusal.
    let deadline = Duration::from_secs(5);
    let config = RedisConfig { deadline, connect_timeout: super::CONNECT, ..RedisConfig::node(server.url()) };
    let store = RedisStore::connect(config).await.expect("connect");
    check_all(&store, "fast-before").await.expect("a running Redis answers");
    server.stop();
    // The first call finds the connection gone; from then on every call is refused by the one
    // connection attempt it shares, at once.
    let _ = check_all(&store, "fast-down").await;
    for _ in 0..20 {
        let err = wait::finished("a call to a stopped Redis", check_all(&store, "fast-down"))
            .await
            .expect_err("Redis is stopped");
        assert!(err.is_transient(), "{err}");
        assert!(refused(&err), "refused by a connection attempt, not waiting out the deadline: {err:?}");
    }
    // Restarted: the first call may still answer with the attempt made while Redis was down (and
    // make a new one); the next one is Redis's, with no back-off to wait out.
    server.restart();
    if let Err(e) = check_all(&store, "fast-after").await {
        assert!(refused(&e), "the attempt made while Redis was down: {e:?}");
        check_all(&store, "fast-after").await.expect("the restarted Redis is used by the next call");
    }
}

#[tokio::test]
async fn a_paused_redis_times_out_at_the_deadline() {
    let mut server = RedisServer::start();
    let deadline = Duration::from_millis(20);
    let store = crate::warm_store(RedisConfig {
        deadline,
        connect_timeout: super::CONNECT,
        ..RedisConfig::node(server.url())
    })
    .await;
    let (open, closed) =
        (engine(store.clone(), OnStoreError::FailOpen), engine(store.clone(), OnStoreError::FailClosed));
    // Frozen until the test ends: the connection stays open, and nothing is ever answered, so
    // every call ends by its deadline.
    server.signal(Signal::Stop).expect("SIGSTOP");
    fails_by_policy(&open, &closed, |e| *e == StoreError::Timeout(deadline)).await;
    let err =
        wait::finished("a call to a paused Redis", check_all(&store, "paused")).await.expect_err("paused");
    assert!(matches!(err, StoreError::Timeout(d) if d == deadline), "{err}");
}

#[tokio::test]
async fn a_key_of_another_type_is_a_permanent_error() {
    let store = crate::node_store().await;
    let limit = every_algorithm(5).remove(3);
    let key = TestKey::new(&format!("wrongtype-{}", std::process::id()), "k");
    let redis_key = String::from_utf8(store.redis_key(key.bytes(), &limit)).expect("ASCII");
    RedisServer::shared().cli(&["RPUSH", &redis_key, "x"]);
    let mut out = Applied::default();
    let err = store.apply(&[key.op(&limit, 1)], Mode::Check, &mut out).await.expect_err("WRONGTYPE");
    assert!(!err.is_transient(), "{err}");
}

/// Warming a store loads its scripts within `connect_timeout`, not within one call's deadline: a
/// Redis that answers only after several deadlines (frozen, then resumed) still gets them loaded,
/// and the store is warm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_is_warmed_within_its_connect_timeout_when_redis_answers_after_its_deadline() {
    let mut server = tokio::task::block_in_place(RedisServer::start);
    let deadline = Duration::from_millis(50);
    let config =
        RedisConfig { deadline, connect_timeout: Duration::from_secs(20), ..RedisConfig::node(server.url()) };
    let store = RedisStore::connect_lazy(config).expect("a valid configuration");
    // Connected first (a connection is made within connect_timeout anyway), then frozen.
    assert!(store.reset(b"warm-probe").await.is_ok(), "the store answers before the freeze");
    server.signal(Signal::Stop).expect("SIGSTOP");
    let warming = tokio::spawn({
        let store = store.clone();
        async move { store.warm().await }
    });
    // Several deadlines pass with Redis frozen (a sleep is a least wait: it never ends early).
    tokio::time::sleep(deadline * 6).await;
    assert!(!warming.is_finished(), "the warm-up waits past the deadline for the frozen Redis");
    server.signal(Signal::Cont).expect("SIGCONT");
    let warmed = wait::finished("the warm-up", warming).await.expect("the warm-up task");
    assert!(warmed.is_ok(), "the scripts were loaded once Redis answered: {warmed:?}");
    assert!(store.is_warm());
}
