//! Penalty boxes ([`Op::block_for`]) on Redis, beyond the conformance suite: a box is one key of
//! its own that ends by itself and goes with a reset; changes made at most once and give-backs
//! leave it as the memory store does; and a request across cluster slots boxes the limits a
//! one-slot request would, in either order of its calls.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::store::{Adjustment, Applied, Mode, Once, Op, OpResult, Records};
use floodgate::{Limit, MemoryConfig, MemoryStore, Store};
use floodgate_core::{FixedWindow, ManualClock, SlidingLog};
use floodgate_redis::{CrossSlot, RedisConfig, RedisStore};
use floodgate_testkit::redis::{RedisCluster, RedisServer};
use floodgate_testkit::{START, TestKey};

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

fn per_hour(limit: u64) -> Limit {
    FixedWindow::try_new(nz(limit), Duration::from_secs(3600)).expect("a window").into()
}

fn boxed<'a>(key: &'a TestKey, limit: &'a Limit, block_for: Duration) -> Op<'a> {
    Op { block_for: Some(block_for), ..key.op(limit, 1) }
}

async fn apply(store: &impl Store, ops: &[Op<'_>], mode: Mode) -> Applied {
    let mut out = Applied::default();
    store.apply(ops, mode, &mut out).await.expect("the store answers");
    out
}

async fn one(store: &impl Store, op: Op<'_>, mode: Mode) -> OpResult {
    apply(store, &[op], mode).await.results[0]
}

fn cli_string(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("an ASCII key")
}

/// On Redis's own clock: the denial deletes the count and writes the box's end into the box key,
/// which expires when the box ends (to the millisecond, rounded up, plus one); a reset removes it.
#[tokio::test]
async fn a_box_is_a_key_of_its_own_that_expires_when_it_ends_and_goes_with_a_reset() {
    let server = RedisServer::shared();
    let store = crate::node_store().await;
    let limit = per_hour(1);
    let block_for = Duration::from_secs(90);
    let key = TestKey::new(&format!("box-key-{}", std::process::id()), "k");
    let (state, penalty) =
        (cli_string(store.redis_key(key.bytes(), &limit)), cli_string(store.penalty_box_key(key.bytes())));

    assert!(one(&store, boxed(&key, &limit, block_for), Mode::Check).await.decision.allowed);
    let denied = apply(&store, &[boxed(&key, &limit, block_for)], Mode::Check).await;
    assert_eq!(denied.results[0].decision.retry_after, Some(block_for), "boxed for exactly block_for");
    assert_eq!(server.cli(&["EXISTS", &state]), "0", "the count is forgotten when the box begins");
    let ends: u64 = server.cli(&["GET", &penalty]).parse().expect("the box's end, µs");
    assert_eq!(
        ends,
        denied.at.saturating_add(block_for).as_micros(),
        "the box ends block_for after the denial"
    );
    let ttl: i64 = server.cli(&["PTTL", &penalty]).parse().expect("a number");
    assert!(ttl > 0 && ttl <= 90_001, "the box key expires when the box ends: PTTL {ttl}ms");

    assert!(store.reset(key.bytes()).await.expect("a reset"), "a key in its box has state");
    assert_eq!(server.cli(&["EXISTS", &penalty]), "0", "a reset removes the box");
    let fresh = one(&store, boxed(&key, &limit, block_for), Mode::Check).await;
    assert!(fresh.decision.allowed, "after a reset the key starts afresh");
}

/// The steps of [`changes_made_once_and_give_backs_leave_a_box_as_the_memory_store_does`] on
/// `store`, whose clock is `clock`: every answer, in order.
async fn once_and_back<S: Store + Records>(store: &S, clock: &ManualClock, run: &str) -> Vec<OpResult> {
    let limit = per_hour(2);
    let block_for = Duration::from_secs(30);
    let key = TestKey::new(run, "k");
    let op = || boxed(&key, &limit, block_for);
    let mut seen = Vec::new();
    let first = one(store, op(), Mode::Check).await;
    let grant = first.grant.expect("the first check is admitted");
    seen.push(first);
    seen.push(one(store, op(), Mode::Check).await);
    seen.push(one(store, op(), Mode::Check).await);
    assert_eq!(seen[2].decision.retry_after, Some(block_for), "the third check boxes the key");

    // In the box: a report made once counts nothing, a give-back made once or not gives nothing
    // back (the count it was taken from is forgotten), and the box stays as it was.
    let keep = Duration::from_secs(60);
    let (report, back) = (format!("{run}/report"), format!("{run}/back"));
    let report = Once { id: report.as_bytes(), keep };
    assert!(store.adjust_once(&[op()], Adjustment::Report, report).await.expect("a report made once"));
    let back = Once { id: back.as_bytes(), keep };
    let given = store.adjust_once(&[op()], Adjustment::GiveBack(&[grant]), back).await;
    assert!(given.expect("a give-back made once"));
    store.refund(key.bytes(), &limit, grant).await.expect("a refund");
    clock.advance(block_for - Duration::from_micros(1));
    seen.push(one(store, op(), Mode::Peek).await);
    assert_eq!(seen[3].decision.retry_after, Some(Duration::from_micros(1)), "still in the box");

    // Then the key starts afresh: neither the report nor the give-backs left a count.
    clock.advance(Duration::from_micros(1));
    seen.push(one(store, op(), Mode::Check).await);
    assert_eq!((seen[4].decision.allowed, seen[4].decision.remaining), (true, 1), "a fresh key");
    seen
}

#[tokio::test]
async fn changes_made_once_and_give_backs_leave_a_box_as_the_memory_store_does() {
    let run = format!("box-once-{}", std::process::id());
    let clock = ManualClock::new(START);
    let memory = MemoryStore::with_config(MemoryConfig::default(), clock.clone());
    let in_memory = once_and_back(&memory, &clock, &run).await;
    let clock = ManualClock::new(START);
    let redis = crate::node_store().await.with_clock(clock.clone());
    assert_eq!(once_and_back(&redis, &clock, &run).await, in_memory);
}

/// Keys of `run`, each in a slot of its own and none in `taken`'s.
fn keys_in_slots_of_their_own(store: &RedisStore, taken: &[&TestKey], run: &str, n: usize) -> Vec<TestKey> {
    let mut slots: Vec<u16> = taken.iter().map(|k| store.slot(k.bytes())).collect();
    let mut keys = Vec::new();
    for i in 0.. {
        if keys.len() == n {
            break;
        }
        let key = TestKey::new(run, &format!("k{i}"));
        let slot = store.slot(key.bytes());
        if !slots.contains(&slot) {
            slots.push(slot);
            keys.push(key);
        }
    }
    keys
}

/// Whether `key`'s penalty box is written on the node of its slot.
fn box_written(cluster: &RedisCluster, store: &RedisStore, key: &TestKey) -> bool {
    let penalty = cli_string(store.penalty_box_key(key.bytes()));
    cluster.node_of_slot(store.slot(key.bytes())).cli(&["EXISTS", &penalty]) == "1"
}

/// Waits until every give-back `store` started has landed, and returns how many it started.
async fn give_backs_landed(store: &RedisStore) -> u64 {
    let gb = floodgate_testkit::wait::until("the give-backs landed", || {
        let gb = store.give_backs();
        std::future::ready((gb.landed + gb.lost == gb.started).then_some(gb))
    })
    .await;
    assert_eq!(gb.lost, 0, "{gb:?}");
    gb.started
}

/// A request across cluster slots boxes exactly the limits that a one-slot request would — the
/// enforced ones that deny by their own count — whichever slot denies it, and in either order of
/// the calls: denied first (the slot of a key that denied lately is checked, while the others are
/// asked how they stand in a denial, which boxes what denies there), or at once. What a slot took
/// for a request another slot denied is given back, and no give-back takes a key out of its box.
#[tokio::test]
async fn a_request_across_slots_boxes_the_limits_a_one_slot_request_would() {
    let cluster = RedisCluster::shared();
    for order in [CrossSlot::DeniedFirst, CrossSlot::AtOnce] {
        let config = RedisConfig { cross_slot: order, ..RedisConfig::cluster(cluster.urls()) };
        let clock = ManualClock::new(START);
        let store = crate::cluster_store_of(config).await.with_clock(clock.clone());
        let run = format!("box-across-{order:?}-{}", std::process::id());
        // `user` has no box: it is the key that denies lately. `tight` and `later` deny by their
        // count, `roomy` has room; each lives in a slot of its own.
        let user = TestKey::new(&run, "user");
        let [tight, later, roomy]: [TestKey; 3] =
            keys_in_slots_of_their_own(&store, &[&user], &run, 3).try_into().expect("three keys");
        let (own, one_only, hundred): (Limit, Limit, Limit) = (
            SlidingLog::try_new(nz(1), Duration::from_secs(3600)).expect("a log").into(),
            per_hour(1),
            per_hour(100),
        );
        let block_for = Duration::from_secs(30);

        assert!(one(&store, boxed(&tight, &one_only, block_for), Mode::Check).await.decision.allowed);
        assert!(one(&store, boxed(&later, &one_only, block_for), Mode::Check).await.decision.allowed);
        let pair = || [user.op(&own, 1), boxed(&roomy, &hundred, block_for)];
        assert!(apply(&store, &pair(), Mode::Check).await.results.iter().all(|r| r.grant.is_some()));
        // The user's limit denies (and, for `DeniedFirst`, is remembered as denying lately); at
        // once, `roomy`'s slot took its unit, and gives it back.
        let denied = apply(&store, &pair(), Mode::Check).await;
        assert!(!denied.results[0].decision.allowed && denied.results[1].grant.is_none());
        assert_eq!(give_backs_landed(&store).await, 1, "{order:?}");

        // The user's limit denies again, and `tight`'s count: `tight` goes into its box, as in a
        // one-slot request; `roomy` allows, and is neither charged nor boxed.
        let three =
            [user.op(&own, 1), boxed(&tight, &one_only, block_for), boxed(&roomy, &hundred, block_for)];
        let denied = apply(&store, &three, Mode::Check).await.results;
        assert!(!denied[0].decision.allowed, "{order:?}: the user's own limit");
        assert_eq!(denied[1].decision.retry_after, Some(block_for), "{order:?}: tight is boxed");
        assert_eq!((denied[1].decision.remaining, denied[1].decision.reset_after), (0, block_for));
        assert!(denied[2].decision.allowed && denied[2].grant.is_none(), "{order:?}: {:?}", denied[2]);
        let started = give_backs_landed(&store).await;
        match order {
            // Asked how they stand in a denial, the other slots took nothing.
            CrossSlot::DeniedFirst => assert_eq!(started, 1, "nothing taken, nothing given back"),
            CrossSlot::AtOnce => assert_eq!(started, 2, "roomy's slot took its unit, and gave it back"),
        }
        assert!(box_written(cluster, &store, &tight), "{order:?}: tight's box was written");
        assert!(!box_written(cluster, &store, &roomy), "{order:?}: roomy's was not");
        let peek = one(&store, boxed(&roomy, &hundred, block_for), Mode::Peek).await.decision;
        assert_eq!((peek.allowed, peek.remaining), (true, 98), "{order:?}: roomy holds the first unit only");

        // The user's limit has room again, but `later` denies by its count: checked first, the
        // user's slot takes its unit; `later` goes into its box, and the user's unit is given back.
        store.reset(user.bytes()).await.expect("a reset");
        let two = [user.op(&own, 1), boxed(&later, &one_only, block_for)];
        let denied = apply(&store, &two, Mode::Check).await.results;
        assert!(denied[0].decision.allowed && denied[0].grant.is_none(), "{order:?}: {:?}", denied[0]);
        assert_eq!(denied[1].decision.retry_after, Some(block_for), "{order:?}: later is boxed");
        assert_eq!(give_backs_landed(&store).await, started + 1, "{order:?}: the user's unit given back");
        assert!(box_written(cluster, &store, &later), "{order:?}: later's box was written");
        assert!(!box_written(cluster, &store, &user), "{order:?}: a limit without a box has none");
        let user_left = one(&store, user.op(&own, 1), Mode::Peek).await.decision;
        assert!(user_left.allowed, "{order:?}: the user was not charged for the denied request");

        // When the boxes end, their keys start afresh.
        clock.advance(block_for);
        for key in [&tight, &later] {
            let after = one(&store, boxed(key, &one_only, block_for), Mode::Check).await.decision;
            assert_eq!((after.allowed, after.remaining), (true, 0), "{order:?}: a fresh key after its box");
        }
    }
}
