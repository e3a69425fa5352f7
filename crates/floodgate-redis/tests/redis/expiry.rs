//! Every key the store writes expires, no later than its state needs, on Redis's clock: on a
//! node, and on every master of a cluster.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::store::Mode;
use floodgate::{Costs, Descriptors, Engine, Hit, Limit, Policy, Rule, Settlement};
use floodgate_core::{Budget, FixedWindow, SlidingLog};
use floodgate_redis::{RedisConfig, RedisStore};
use floodgate_testkit::redis::{RedisCluster, RedisServer};
use floodgate_testkit::{TestKey, every_algorithm};

#[tokio::test]
async fn every_write_leaves_the_key_with_an_expiry() {
    let server = RedisServer::shared();
    let store = crate::node_store().await;
    for limit in every_algorithm(5) {
        let name = limit.algorithm_name();
        let key = TestKey::new(&format!("expiry-{}-{name}", std::process::id()), "k");
        let redis_key = String::from_utf8(store.redis_key(key.bytes(), &limit)).expect("an ASCII key");
        // How long the state may need, in ms (windows and leases of a minute, a bucket refilling a
        // cell every 12s — three of them — rounded up to whole seconds plus one; a quota's UTC day,
        // then two more: its count stays readable as the previous day's through the next).
        let most: i64 = match limit {
            Limit::TokenBucket(_) | Limit::Gcra(_) => 3 * 12_000 + 2_000 + 1,
            Limit::Quota(_) => 3 * 86_400_000 + 1_000,
            Limit::SlidingWindow(_) => 120_000 + 1_000,
            _ => 60_000 + 1_000,
        };
        for round in 0..3 {
            let mut out = floodgate::store::Applied::default();
            floodgate::Store::apply(&store, &[key.op(&limit, 1)], Mode::Check, &mut out)
                .await
                .expect("a check");
            let ttl: i64 = server.cli(&["PTTL", &redis_key]).parse().expect("a number");
            assert!(
                ttl > 0 && ttl <= most,
                "{name}, write {round}: PTTL {ttl}ms, expected within (0, {most}]"
            );
        }
    }
}

#[tokio::test]
async fn a_partial_give_back_of_a_sliding_logs_only_entry_keeps_an_expiry() {
    let server = RedisServer::shared();
    let store = crate::node_store().await;
    let limit = every_algorithm(5)
        .into_iter()
        .find(|l| matches!(l, Limit::SlidingLog(_)))
        .expect("a sliding log among the algorithms");
    let key = TestKey::new(&format!("expiry-give-back-{}", std::process::id()), "k");
    let redis_key = String::from_utf8(store.redis_key(key.bytes(), &limit)).expect("an ASCII key");
    let mut out = floodgate::store::Applied::default();
    floodgate::Store::apply(&store, &[key.op(&limit, 3)], Mode::Check, &mut out).await.expect("a check");
    let grant = out.results[0].grant.expect("admitted");
    // A reservation of 3 committed at 2: 1 given back, out of the log's only entry, which the
    // script removes (deleting the key) and writes again with what is left.
    let part = floodgate::core::Grant { cost: 1, ..grant };
    floodgate::Store::refund(&store, key.bytes(), &limit, part).await.expect("a give-back");
    let ttl: i64 = server.cli(&["PTTL", &redis_key]).parse().expect("a number");
    assert!(ttl > 0 && ttl <= 60_000 + 1_000, "PTTL {ttl}ms after the give-back, expected within (0, 61000]");
}

/// Every key a mixed workload leaves on a Redis of its own — the limits of every algorithm (one
/// limit per request and ten at once, one request of them denied), a penalty box, reports and refunds,
/// reservations reserved, committed under and over their estimate, released and left to expire,
/// the notes that make settlements once, and the fleet's heartbeat set — has an expiry, and none
/// later than the docs say (README, "Every Redis key expires").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_a_workload_leaves_expires_no_later_than_documented() {
    let server = tokio::task::block_in_place(RedisServer::start);
    let config = RedisConfig {
        deadline: crate::SHARED_DEADLINE,
        connect_timeout: crate::CONNECT,
        ..RedisConfig::node(server.url())
    };
    let store = RedisStore::connect(config).await.expect("connect");
    let workload = run_workload(&store).await;
    let keys = keys_with_pttl(&server);
    let census = check_expiries(&keys, &workload);
    census.assert_complete(&keys);
    assert_eq!(census.most_notes_of_one_step(), 1, "one note per settlement step: {keys:?}");
}

/// The same workload on a Redis Cluster of three masters of its own, keys spread by whole key: a
/// request's limits are in different slots, so the denied request is answered by slots that admit
/// and give back, and a settlement writes a note in each slot it changes, beside the record in a
/// slot of its own. Every master is scanned, each holds some of the keys, and every key has an
/// expiry within the same bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_a_workload_leaves_on_a_cluster_expires_no_later_than_documented() {
    let cluster = tokio::task::block_in_place(RedisCluster::start);
    let config = RedisConfig {
        deadline: crate::SHARED_DEADLINE,
        connect_timeout: crate::CONNECT,
        ..RedisConfig::cluster(cluster.urls())
    };
    let store = RedisStore::connect(config).await.expect("connect");
    let workload = run_workload(&store).await;
    let masters: Vec<&RedisServer> = cluster.nodes().iter().filter(|n| n.is_master()).collect();
    assert_eq!(masters.len(), 3, "three masters");
    let mut keys = Vec::new();
    for master in masters {
        let held = keys_with_pttl(master);
        assert!(!held.is_empty(), "the master on port {} holds some of the keys", master.port());
        keys.extend(held);
    }
    let census = check_expiries(&keys, &workload);
    census.assert_complete(&keys);
    // A release gives back to every rule, in their slots, each with its note.
    assert!(
        census.most_notes_of_one_step() > 1,
        "a settlement step's note in each slot it changed: {keys:?}"
    );
}

/// What the workload used that the documented bounds depend on.
struct Workload {
    /// The reservations' ttl.
    reservation_ttl: Duration,
    /// The fleet heartbeat's announcement.
    heartbeat: Duration,
    /// The penalty box's block.
    block_for: Duration,
}

/// The name of the rule that denies what the others admit.
const TIGHT: &str = "tight";

/// The name of the rule whose denial boxes its key.
const BOXED: &str = "boxed";

/// Every algorithm per user (windows and leases of a minute, a quota's UTC day), a budget of a
/// minute, a sliding log of 10 a minute per user ([`TIGHT`]) below the others' 50, and tokens per
/// tenant.
fn workload_policy() -> Policy {
    let nz = |n: u64| NonZeroU64::new(n).expect("not zero");
    let minute = Duration::from_secs(60);
    let mut rules: Vec<Rule> =
        every_algorithm(50).into_iter().map(|l| Rule::new(l.algorithm_name(), l).key(["user"])).collect();
    rules.push(Rule::new("budget", Budget::try_new(nz(50), minute).expect("a budget")).key(["user"]));
    rules.push(Rule::new(TIGHT, SlidingLog::try_new(nz(10), minute).expect("a log")).key(["user"]));
    let tokens = FixedWindow::try_new(nz(100_000), minute).expect("a window");
    rules.push(Rule::new("tokens", tokens).key(["tenant"]).cost("tokens"));
    Policy::new(rules).expect("a policy")
}

/// Runs the workload on `store`: per user, checks, a check refunded, a report, and a request that
/// only [`TIGHT`] denies (which leaves every count as it was); a user's key put in a penalty box
/// ([`BOXED`]); then reservations of a request and tokens, committed under and over their estimate,
/// released, and left unsettled; and a heartbeat.
async fn run_workload(store: &RedisStore) -> Workload {
    let engine = Engine::new(workload_policy(), store.clone());
    let left = |verdict: floodgate::Verdict| -> Vec<(String, u64)> {
        verdict.limits.iter().map(|l| (l.rule.to_string(), l.decision.remaining)).collect()
    };
    for n in 0..3 {
        let who = Descriptors::new().with("user", format!("u{n}")).with("tenant", "t");
        for _ in 0..3 {
            let verdict = engine.check(&who, 1).await.expect("a check");
            assert!(verdict.allowed && verdict.store_error.is_none(), "{verdict:?}");
        }
        let verdict = engine.check(&who, 2).await.expect("a check");
        engine.refund(&who, &verdict).await.expect("a refund");
        engine.decide(floodgate::Mode::Report, Hit::new(&who, 1)).await.expect("a report");

        // 4 of TIGHT's 10 taken: 7 more are denied by it alone, and take nothing anywhere.
        let peek =
            || async { engine.decide(floodgate::Mode::Peek, Hit::new(&who, 1)).await.expect("a peek") };
        let before = left(peek().await);
        let denied = engine.check(&who, 7).await.expect("a check");
        assert!(!denied.allowed && denied.store_error.is_none(), "{denied:?}");
        let denying: Vec<&str> =
            denied.limits.iter().filter(|l| !l.decision.allowed).map(|l| &*l.rule).collect();
        assert_eq!(denying, [TIGHT], "{denied:?}");
        // Time only gives back (windows pass, buckets refill): a count that went down kept a
        // share of the denied request.
        for ((rule, was), (_, is)) in before.iter().zip(left(peek().await)) {
            assert!(is >= *was, "{rule}: {is} left after the denied request, {was} before");
        }
    }

    // A denial of a rule with a penalty box: the key's count gives way to its box.
    let block_for = Duration::from_secs(20);
    let once = FixedWindow::try_new(NonZeroU64::MIN, Duration::from_secs(60)).expect("a window");
    let boxed = Policy::new([Rule::new(BOXED, once).key(["user"]).block_for(block_for)]).expect("a policy");
    let boxed = Engine::new(boxed, store.clone());
    let who = Descriptors::new().with("user", "b");
    assert!(boxed.check(&who, 1).await.expect("a check").allowed);
    let denied = boxed.check(&who, 1).await.expect("a check");
    assert_eq!(denied.retry_after(), Some(block_for), "boxed: {denied:?}");

    let reserver = Descriptors::new().with("user", "r").with("tenant", "t");
    let reservation_ttl = Duration::from_secs(5);
    let estimate = Costs::new().with("requests", 1).with("tokens", 600);
    let reserve = || async {
        let reserved =
            engine.reserve(Hit::with_costs(&reserver, &estimate), reservation_ttl).await.expect("a reserve");
        reserved.reservation.expect("granted").id
    };
    let under = reserve().await;
    engine.settle(&under, Settlement::Commit(&Costs::new().with("tokens", 250))).await.expect("commit under");
    let over = reserve().await;
    engine.settle(&over, Settlement::Commit(&Costs::new().with("tokens", 900))).await.expect("commit over");
    let released = reserve().await;
    engine.settle(&released, Settlement::Release).await.expect("release");
    let _unsettled = reserve().await;
    let heartbeat = Duration::from_secs(5);
    store.heartbeat("a", heartbeat).await.expect("a heartbeat");
    Workload { reservation_ttl, heartbeat, block_for }
}

/// Every key `server` holds (`SCAN`), with its `PTTL`: −2 for a key that expired between the scan
/// and the question (a fixed window's key expires at its window's end, which a workload may
/// straddle).
fn keys_with_pttl(server: &RedisServer) -> Vec<(String, i64)> {
    let keys = server.cli(&["--scan"]);
    keys.lines()
        .filter(|k| !k.is_empty())
        .map(|key| {
            let ttl: i64 = server.cli(&["PTTL", key]).parse().expect("a number");
            (key.to_owned(), ttl)
        })
        .collect()
}

/// The keys a workload left, by what they are.
#[derive(Debug, Default)]
struct Census {
    fleets: usize,
    records: usize,
    /// The settlement step (`<reservation id>:back`, `:more`) of each note.
    notes: Vec<String>,
    limits: usize,
    boxes: usize,
}

impl Census {
    /// Whether every kind of key the workload writes is there.
    fn assert_complete(&self, keys: &[(String, i64)]) {
        assert_eq!(self.fleets, 1, "the fleet set among {keys:?}");
        assert_eq!(self.records, 4, "one record per reservation among {keys:?}");
        assert!(self.notes.len() >= 4, "the settlements' notes among {keys:?}");
        assert!(self.limits >= 10, "every rule's keys among {keys:?}");
        assert_eq!(self.boxes, 1, "the penalty box among {keys:?}");
    }

    /// The most notes one settlement step wrote.
    fn most_notes_of_one_step(&self) -> usize {
        let mut steps: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
        for step in &self.notes {
            *steps.entry(step).or_default() += 1;
        }
        steps.into_values().max().unwrap_or(0)
    }
}

/// Tells each key apart by its name and checks its `PTTL` is within the documented bound for it,
/// in ms (plus a second of rounding): a limit's key as its algorithm says; a reservation record its
/// ttl, then kept as long again, at least a minute (the notes of its settlement live no longer);
/// the fleet set twice a heartbeat's announcement; a penalty box its block.
fn check_expiries(keys: &[(String, i64)], workload: &Workload) -> Census {
    let ttl = workload.reservation_ttl.as_millis();
    let record = (ttl + ttl.max(60_000)) as i64 + 1_000;
    let fleet = 2 * workload.heartbeat.as_millis() as i64 + 1_000;
    let penalty = workload.block_for.as_millis() as i64 + 1_000;
    let limit_bound = |key: &str| -> i64 {
        let by = |name: &str, ms: i64| key.contains(name).then_some(ms);
        by("quota", 3 * 86_400_000 + 1_000)
            .or_else(|| by("sliding_window", 120_000 + 1_000))
            .or_else(|| by("token_bucket", 60_000 + 2_000 + 1))
            .or_else(|| by("gcra", 60_000 + 2_000 + 1))
            .unwrap_or(60_000 + 1_000)
    };
    let mut census = Census::default();
    for (key, ttl) in keys {
        let (what, most) = if key.ends_with("{fleet}") {
            census.fleets += 1;
            ("the fleet set", fleet)
        } else if key.ends_with('R') && key.contains("{r") {
            census.records += 1;
            ("a reservation record", record)
        } else if key.split_once('}').is_some_and(|(_, rest)| rest.starts_with('x')) {
            // `<prefix>{<tag>}x<engine key>`
            assert!(key.contains(BOXED), "only {BOXED}'s key is boxed: {key:?}");
            census.boxes += 1;
            ("a penalty box", penalty)
        } else if key.ends_with(":back") || key.ends_with(":more") {
            // `<prefix>{<tag>}o<reservation id>:<step>`
            let step = key.split_once("}o").map_or(key.as_str(), |(_, step)| step);
            census.notes.push(step.to_owned());
            ("a settlement's note", record)
        } else {
            census.limits += 1;
            ("a limit's key", limit_bound(key))
        };
        // Gone since the scan: nothing in the workload deletes a key, so it expired.
        let expired = *ttl == -2;
        assert!(
            expired || (0..=most).contains(ttl),
            "{what} {key:?}: PTTL {ttl}ms, expected within [0, {most}] (or expired since the scan)"
        );
    }
    census
}
