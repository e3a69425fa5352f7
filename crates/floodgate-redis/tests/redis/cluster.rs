//! Redis Cluster: co-location by descriptor, the cross-slot protocol when a slot fails (or runs its
//! share after the caller gave up), and a live reshard under traffic.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use floodgate::store::{Applied, Mode, Op};
use floodgate::{Descriptors, Engine, Limit, Policy, Rule, Store};
use floodgate_core::{FixedWindow, SlidingLog};
use floodgate_redis::{CrossSlot, GiveBacks, HashTag, RedisConfig, RedisStore};
use floodgate_testkit::TestKey;
use floodgate_testkit::redis::RedisCluster;

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

/// An engine key: length-prefixed rule name, descriptor names, then values (see `floodgate::key`).
fn engine_key(fields: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in fields {
        out.extend_from_slice(format!("{}:{f}", f.len()).as_bytes());
    }
    out
}

fn per_hour(limit: u64) -> Limit {
    SlidingLog::try_new(nz(limit), Duration::from_secs(3600)).expect("a log").into()
}

#[tokio::test]
async fn a_descriptor_hash_tag_keeps_a_tenants_limits_in_one_slot() {
    let store = crate::cluster_store_with(HashTag::Descriptor("tenant".into())).await;
    let tenant = format!("t-{}", std::process::id());
    let per_user = engine_key(&["per-user", "tenant", "user", &tenant, "u1"]);
    let per_tenant = engine_key(&["per-tenant", "tenant", &tenant]);
    assert_eq!(store.slot(&per_user), store.slot(&per_tenant));

    let policy = Policy::new([
        Rule::new("per-user", per_hour(2)).key(["tenant", "user"]),
        Rule::new("per-tenant", per_hour(3)).key(["tenant"]),
    ])
    .expect("a policy");
    let engine = Engine::new(policy, store);
    let (u1, u2) = (
        Descriptors::new().with("tenant", tenant.clone()).with("user", "u1"),
        Descriptors::new().with("tenant", tenant.clone()).with("user", "u2"),
    );
    assert!(engine.check(&u1, 1).await.expect("valid").allowed);
    assert!(engine.check(&u1, 1).await.expect("valid").allowed);
    assert!(!engine.check(&u1, 1).await.expect("valid").allowed, "u1's own limit");
    assert!(engine.check(&u2, 1).await.expect("valid").allowed);
    let last = engine.check(&u2, 1).await.expect("valid");
    assert!(!last.allowed, "the tenant's limit");
    assert_eq!(last.limits[0].decision.remaining, 1, "u2 was not charged for the denied request");
}

/// Two keys whose slots live on different nodes.
fn keys_on_two_nodes(cluster: &RedisCluster, store: &RedisStore) -> (TestKey, TestKey) {
    let base = TestKey::new(&format!("cross-{}", std::process::id()), "a");
    let port = cluster.node_of_slot(store.slot(base.bytes())).port();
    for i in 0..1000 {
        let other = TestKey::new(&format!("cross-{}", std::process::id()), &format!("b{i}"));
        if cluster.node_of_slot(store.slot(other.bytes())).port() != port {
            return (base, other);
        }
    }
    panic!("no two keys on different nodes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_slot_failures_give_back_and_a_live_reshard_keeps_counts() {
    let cluster = RedisCluster::start();
    // Long enough that the give-back to the node still answering lands even on two busy cores; the
    // pause below outlasts it.
    let deadline = Duration::from_millis(500);
    let config =
        RedisConfig { deadline, connect_timeout: super::CONNECT, ..RedisConfig::cluster(cluster.urls()) };
    let store = RedisStore::connect(config).await.expect("connect");
    let (a, b) = keys_on_two_nodes(&cluster, &store);
    let limit = per_hour(10);
    let ops = [a.op(&limit, 1), b.op(&limit, 1)];
    let mut out = Applied::default();
    store.apply(&ops, Mode::Check, &mut out).await.expect("a cross-slot check");
    assert!(out.results.iter().all(|r| r.grant.is_some()));

    // The node of `b` stops answering: the check fails within the deadline, and what `a` took is
    // given back in the background. The worst case: until then, `a` shows the cost charged.
    let paused = cluster.node_of_slot(store.slot(b.bytes()));
    let pause = Duration::from_millis(3000);
    paused.cli(&["CLIENT", "PAUSE", &pause.as_millis().to_string(), "ALL"]);
    let paused_at = std::time::Instant::now();
    let err = store.apply(&ops, Mode::Check, &mut out).await.expect_err("b is paused");
    assert!(err.is_transient(), "{err}");
    // `a`'s slot answered that it admitted (unless its call timed out too, on a busy machine): what
    // it took is given back in a task of its own, tried again until it lands (made at most once
    // by a note in `a`'s slot). Then `a` holds the first request's unit and nothing of the failed
    // one's. Had `a`'s call timed out as well, nothing is given back — it may have taken nothing —
    // and `a` holds one unit or two: the documented worst case, an under-admission.
    let settled = floodgate_testkit::wait::until("a's give-back settled", || {
        let gb = store.give_backs();
        std::future::ready((gb.landed + gb.lost == gb.started).then_some(gb))
    })
    .await;
    assert_eq!(settled.lost, 0, "a give-back to a node that answers is never lost: {settled:?}");
    store.apply(&[a.op(&limit, 1)], Mode::Peek, &mut out).await.expect("a peek on a");
    // A peek answers as if it took its cost: 10, less the first request's unit, less the peek's.
    let remaining = out.results[0].decision.remaining;
    match settled.landed {
        1 => assert_eq!(remaining, 8, "a holds the first request's unit only: {settled:?}"),
        _ => assert!(remaining == 8 || remaining == 7, "a holds {} units: {settled:?}", 10 - remaining),
    }
    // `b`'s node runs the queued check when it resumes, past the check's not-after time (deadline
    // + 2 × 500 ms at most after it was sent): it takes nothing — and, having answered nothing,
    // nothing is given back to it either. `b` holds the first request's unit, no more, no less.
    tokio::time::sleep(pause.saturating_sub(paused_at.elapsed()) + Duration::from_millis(500)).await;
    store.apply(&[b.op(&limit, 1)], Mode::Peek, &mut out).await.expect("a peek on b");
    let remaining = out.results[0].decision.remaining;
    assert_eq!(remaining, 8, "b holds {} units after the pause", 10 - remaining);

    // Move `a`'s slot to another node while requests keep coming: MOVED and ASK are followed, the
    // count moves with the key, and never more than the limit is admitted.
    let slot = store.slot(a.bytes());
    let from = cluster.node_of_slot(slot);
    let to = cluster.nodes().iter().find(|n| n.port() != from.port()).expect("another node");
    let (from_id, to_id) = (from.cli(&["CLUSTER", "MYID"]), to.cli(&["CLUSTER", "MYID"]));
    let limit = Arc::new(FixedWindow::try_new(nz(200), Duration::from_secs(3600)).expect("a window").into());
    let admitted = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (store, a, limit, admitted, errors, done) = (
            store.clone(),
            a.clone(),
            Arc::clone(&limit),
            Arc::clone(&admitted),
            Arc::clone(&errors),
            Arc::clone(&done),
        );
        tasks.push(tokio::spawn(async move {
            let mut out = Applied::default();
            let mut n = 0;
            while !done.load(Ordering::Relaxed) || n < 50 {
                n += 1;
                match store.apply(&[a.op(&limit, 1)], Mode::Check, &mut out).await {
                    Ok(()) if out.results[0].decision.allowed => {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(()) => {}
                    Err(e) => {
                        assert!(e.is_transient(), "{e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let slot = slot.to_string();
    to.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    from.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    let keys = from.cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
    for key in keys.lines().filter(|k| !k.is_empty()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        from.cli(&["MIGRATE", "127.0.0.1", &to.port().to_string(), key, "0", "5000"]);
    }
    for node in cluster.nodes() {
        node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    done.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("a task");
    }
    let admitted = admitted.load(Ordering::Relaxed);
    assert!(admitted <= 200, "{admitted} admitted by a limit of 200 across a reshard");
    store.apply(&[a.op(&limit, 1)], Mode::Peek, &mut out).await.expect("a peek after the reshard");
    let remaining = usize::try_from(out.results[0].decision.remaining).expect("small");
    assert_eq!(
        remaining + admitted,
        200,
        "the count moved with the key ({} transient errors)",
        errors.load(Ordering::Relaxed)
    );
}

/// Keys of `name`, each in another slot than `of`.
fn keys_off_the_slot_of(store: &RedisStore, of: &TestKey, name: &str, n: usize) -> Vec<TestKey> {
    (0..)
        .map(|i| TestKey::new(&format!("{name}-{}", std::process::id()), &format!("k{i}")))
        .filter(|k| store.slot(k.bytes()) != store.slot(of.bytes()))
        .take(n)
        .collect()
}

/// The engine keys `store` holds state for under `limit`, by whether a node has them.
fn exists(cluster: &RedisCluster, store: &RedisStore, key: &TestKey, limit: &Limit) -> bool {
    let redis_key = String::from_utf8(store.redis_key(key.bytes(), limit)).expect("an ASCII key");
    cluster.node_of_slot(store.slot(key.bytes())).cli(&["EXISTS", &redis_key]) == "1"
}

#[tokio::test]
async fn a_key_that_denied_lately_is_asked_first_so_that_its_denials_charge_no_other_slot() {
    let cluster = RedisCluster::shared();
    let store = crate::cluster_store().await;
    let user = TestKey::new(&format!("first-{}", std::process::id()), "user");
    let others = keys_off_the_slot_of(&store, &user, "first-other", 4);
    let (own, roomy) = (per_hour(1), per_hour(100));
    fn request<'a>(user: &'a TestKey, own: &'a Limit, other: &'a TestKey, roomy: &'a Limit) -> [Op<'a>; 2] {
        [user.op(own, 1), other.op(roomy, 1)]
    }
    let mut out = Applied::default();

    store.apply(&request(&user, &own, &others[0], &roomy), Mode::Check, &mut out).await.expect("a check");
    assert!(out.results.iter().all(|r| r.decision.allowed));
    // The user's limit denies; at once, the other slot consumed and gives back.
    store.apply(&request(&user, &own, &others[1], &roomy), Mode::Check, &mut out).await.expect("a check");
    assert!(!out.results[0].decision.allowed && out.results[1].grant.is_none());
    let landed = floodgate_testkit::wait::until("the give-back landed", || {
        let gb = store.give_backs();
        std::future::ready((gb.landed == 1).then_some(gb))
    })
    .await;
    assert_eq!(landed, GiveBacks { started: 1, retried: 0, landed: 1, lost: 0 });

    // Denied lately, the user's slot is asked first; the other slot is only read: it writes
    // nothing, and has nothing to give back.
    store.apply(&request(&user, &own, &others[2], &roomy), Mode::Check, &mut out).await.expect("a check");
    assert!(!out.results[0].decision.allowed);
    assert_eq!(out.results[1].decision.remaining, 100, "{:?}", out.results[1]);
    assert!(out.results[1].decision.allowed && out.results[1].grant.is_none(), "room there, not taken");
    assert!(!exists(cluster, &store, &others[2], &roomy), "the other slot was written");
    assert_eq!(store.give_backs().started, 1, "nothing taken, nothing to give back");

    // Reset, the user's limit admits again while its hint lasts: its slot first, then the other.
    store.reset(user.bytes()).await.expect("a reset");
    store.apply(&request(&user, &own, &others[3], &roomy), Mode::Check, &mut out).await.expect("a check");
    assert!(out.results.iter().all(|r| r.grant.is_some()), "{:?}", out.results);
    assert_eq!((out.results[0].decision.remaining, out.results[1].decision.remaining), (0, 99));
    assert_eq!(store.give_backs().started, 1);

    // The same on a store that goes at once: the other slot is charged and given back.
    let at_once = crate::cluster_store_of(RedisConfig {
        cross_slot: CrossSlot::AtOnce,
        ..RedisConfig::cluster(cluster.urls())
    })
    .await;
    at_once.apply(&request(&user, &own, &others[3], &roomy), Mode::Check, &mut out).await.expect("a check");
    assert!(!out.results[0].decision.allowed);
    assert_eq!(at_once.give_backs().started, 1, "at once, the other slot consumed");
}

/// Requests their own (per-user) limit denies, hammering beside requests that exactly fill a
/// shared (per-tenant) limit: denied first by the user's slot, they never hold the tenant's room,
/// so every request that fits is admitted — none refused although both its limits had room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_their_own_limit_denies_take_no_room_from_a_shared_one() {
    let store = crate::cluster_store().await;
    let run = format!("room-{}", std::process::id());
    let tenant = TestKey::new(&run, "tenant");
    let room = 120_u64;
    let shared: Limit = FixedWindow::try_new(nz(room), Duration::from_secs(3600)).expect("a window").into();
    let own = per_hour(1);
    let roomy = per_hour(1000);
    let abusers = keys_off_the_slot_of(&store, &tenant, &format!("{run}-abuser"), 8);
    let users = keys_off_the_slot_of(&store, &tenant, &format!("{run}-user"), 8);
    let mut out = Applied::default();
    // Each abuser's one request, then its first denial (at once: the tenant's unit is given back).
    for a in &abusers {
        for _ in 0..2 {
            store
                .apply(&[a.op(&own, 1), tenant.op(&shared, 1)], Mode::Check, &mut out)
                .await
                .expect("a check");
        }
        assert!(!out.results[0].decision.allowed);
    }
    let given = floodgate_testkit::wait::until("the abusers' give-backs landed", || {
        let gb = store.give_backs();
        std::future::ready((gb.landed == 8).then_some(gb))
    })
    .await;
    let fits = room - 8;

    let (store, tenant, shared) = (Arc::new(store), Arc::new(tenant), Arc::new(shared));
    let (own, roomy) = (Arc::new(own), Arc::new(roomy));
    let mut tasks = Vec::new();
    for (n, abuser) in abusers.into_iter().enumerate() {
        let user = users[n].clone();
        let (store, tenant, shared, own, roomy) =
            (store.clone(), tenant.clone(), shared.clone(), own.clone(), roomy.clone());
        // Task n sends its share of the requests that fit, each after two of its abuser's.
        let share = fits / 8 + u64::from((n as u64) < fits % 8);
        tasks.push(tokio::spawn(async move {
            let mut out = Applied::default();
            let mut admitted = 0;
            for _ in 0..share {
                for _ in 0..2 {
                    let ops = [abuser.op(&own, 1), tenant.op(&shared, 1)];
                    store.apply(&ops, Mode::Check, &mut out).await.expect("an abuser's check");
                    assert!(!out.results[0].decision.allowed, "the abuser's own limit denies");
                }
                let ops = [user.op(&roomy, 1), tenant.op(&shared, 1)];
                store.apply(&ops, Mode::Check, &mut out).await.expect("a user's check");
                admitted += u64::from(out.results.iter().all(|r| r.grant.is_some()));
            }
            (share, admitted)
        }));
    }
    let mut sent = 0;
    for t in tasks {
        let (share, admitted) = t.await.expect("a task");
        assert_eq!(admitted, share, "requests refused although both their limits had room");
        sent += share;
    }
    assert_eq!(sent, fits);
    store.apply(&[tenant.op(&shared, 1)], Mode::Peek, &mut out).await.expect("a peek");
    assert_eq!(out.results[0].decision.remaining, 0, "the tenant's room, exactly used");
    assert_eq!(store.give_backs(), given, "no request took the tenant's room to give it back");
}
