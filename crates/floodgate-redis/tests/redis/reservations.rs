//! Reservations and cost dimensions on real `redis-server` processes: records live in Redis, so an
//! instance commits or releases what another reserved; a settlement happens once however many
//! instances retry it; an expired reservation stays charged its estimate (Redis's clock, or a
//! test clock); and RPM + TPM in one call, all-or-nothing, on a node and on a cluster (where the
//! rules' keys are in different slots).

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Costs, Descriptors, Engine, Hit, Limit, Mode, Policy, Rule, SettleError, Settlement};
use floodgate_core::{Concurrency, FixedWindow, ManualClock};
use floodgate_testkit::{FlakyStore, Lost, START};

use floodgate_redis::RedisStore;

use super::{cluster_store, node_store};

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

fn per_hour(limit: u64) -> Limit {
    FixedWindow::try_new(nz(limit), Duration::from_secs(3600)).expect("a window").into()
}

/// 10 requests and 1000 tokens an hour, 2 calls in flight, per tenant (a tenant per test: the
/// shared servers hold every test's keys).
fn policy() -> Policy {
    Policy::new([
        Rule::new("rpm", per_hour(10)).key(["tenant"]),
        Rule::new("tpm", per_hour(1000)).key(["tenant"]).cost("tokens"),
        Rule::new("in-flight", Concurrency::try_new(nz(2), Duration::from_secs(600)).unwrap())
            .key(["tenant"]),
    ])
    .expect("a policy")
}

fn tenant(name: &str) -> Descriptors {
    Descriptors::new().with("tenant", format!("{name}-{}", std::process::id()))
}

/// Reserves `estimate` for `t` for five minutes (allowed): the reservation's id.
async fn reserve_id<S: floodgate::Store>(engine: &Engine<S>, t: &Descriptors, estimate: &Costs) -> String {
    let reserved = engine.reserve(Hit::with_costs(t, estimate), Duration::from_secs(300)).await.unwrap();
    reserved.reservation.expect("allowed").id
}

/// (requests, tokens, permits) left, by a peek of one of each.
async fn left<S: floodgate::Store>(engine: &Engine<S>, t: &Descriptors) -> (u64, u64, u64) {
    let one = Costs::new().with("requests", 1).with("tokens", 1);
    let v = engine.decide(Mode::Peek, Hit::with_costs(t, &one)).await.unwrap();
    let r = |name: &str| {
        let d = v.limits.iter().find(|l| &*l.rule == name).unwrap().decision;
        if d.allowed { d.remaining + 1 } else { 0 }
    };
    (r("rpm"), r("tpm"), r("in-flight"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_commits_what_another_reserved_once() {
    let a = Engine::new(policy(), node_store().await);
    let b = Engine::new(policy(), node_store().await);
    let t = tenant("cross");
    let estimate = Costs::new().with("requests", 1).with("tokens", 600);
    let id = reserve_id(&a, &t, &estimate).await;
    assert_eq!(left(&b, &t).await, (9, 400, 1), "b sees what a reserved");

    let actual = Costs::new().with("tokens", 250);
    let settled = b.settle(&id, Settlement::Commit(&actual)).await.unwrap();
    assert_eq!(settled.refunded, Costs::new().with("tokens", 350));
    assert_eq!(left(&a, &t).await, (9, 750, 2), "the over-reservation and the permit are back");

    // Retried on either instance: the same answer, charged once.
    for engine in [&a, &b] {
        let again = engine.settle(&id, Settlement::Commit(&actual)).await.unwrap();
        assert!(again.replayed);
        assert_eq!((&again.charged, &again.refunded), (&settled.charged, &settled.refunded));
    }
    assert_eq!(left(&a, &t).await, (9, 750, 2));
    assert!(matches!(
        a.settle(&id, Settlement::Release).await,
        Err(SettleError::Conflict { committed: true })
    ));
    assert!(matches!(
        b.settle("00000000000000000000000000000000", Settlement::Release).await,
        Err(SettleError::NotFound)
    ));
}

/// Instance `a` marks a commit settled and is cut off around giving back (before the store made
/// it, or after, its answer lost); instance `b` retries, and the limits end as one commit leaves
/// them: given back once, the excess charged once.
async fn a_settlement_cut_off_is_finished_once_by_another_instance(a: RedisStore, b: RedisStore, name: &str) {
    let a = Engine::new(policy(), FlakyStore::new(a));
    let b = Engine::new(policy(), b);
    for (n, at) in [Lost::Before, Lost::After].into_iter().enumerate() {
        let t = tenant(&format!("{name}-{n}"));
        let estimate = Costs::new().with("requests", 1).with("tokens", 600);
        let id = reserve_id(&a, &t, &estimate).await;
        let actual = Costs::new().with("tokens", 250);
        a.store().lose_adjustments(1, at);
        assert!(a.settle(&id, Settlement::Commit(&actual)).await.is_err());
        let expected = match at {
            Lost::Before => (9, 400, 1),
            Lost::After => (9, 750, 2),
        };
        assert_eq!(left(&b, &t).await, expected, "{at:?}: what the cut-off commit made");
        for _ in 0..2 {
            let retried = b.settle(&id, Settlement::Commit(&actual)).await.unwrap();
            assert!(retried.replayed);
            assert_eq!(retried.refunded, Costs::new().with("tokens", 350));
            assert_eq!(left(&b, &t).await, (9, 750, 2), "{at:?}: given back once");
        }
        assert!(a.settle(&id, Settlement::Commit(&actual)).await.unwrap().replayed);
        assert_eq!(left(&b, &t).await, (9, 750, 2));

        // Above the estimate: the permit given back, the answer lost, the excess not yet charged.
        let estimate = Costs::new().with("requests", 1).with("tokens", 100);
        let id = reserve_id(&a, &t, &estimate).await;
        assert_eq!(left(&b, &t).await, (8, 650, 1));
        a.store().lose_adjustments(1, Lost::After);
        let actual = Costs::new().with("tokens", 300);
        assert!(a.settle(&id, Settlement::Commit(&actual)).await.is_err());
        assert_eq!(left(&b, &t).await, (8, 650, 2));
        for _ in 0..2 {
            let retried = b.settle(&id, Settlement::Commit(&actual)).await.unwrap();
            assert_eq!(retried.excess, Costs::new().with("tokens", 200));
            assert_eq!(left(&b, &t).await, (8, 450, 2), "the excess charged once");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_cut_off_on_a_node_is_finished_once_by_another_instance() {
    a_settlement_cut_off_is_finished_once_by_another_instance(
        node_store().await,
        node_store().await,
        "cut-node",
    )
    .await;
}

/// On a cluster the rules' keys are in different slots: the give-back is one script per slot,
/// each made at most once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_cut_off_on_a_cluster_is_finished_once_by_another_instance() {
    a_settlement_cut_off_is_finished_once_by_another_instance(
        cluster_store().await,
        cluster_store().await,
        "cut-cluster",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_settlements_from_two_instances_settle_once() {
    let a = Engine::new(policy(), node_store().await);
    let b = Engine::new(policy(), node_store().await);
    let t = tenant("race");
    let estimate = Costs::new().with("requests", 1).with("tokens", 500);
    for _ in 0..20 {
        let id = reserve_id(&a, &t, &estimate).await;
        let (x, y) = tokio::join!(a.settle(&id, Settlement::Release), b.settle(&id, Settlement::Release));
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(x.replayed != y.replayed, "exactly one of the two gave it back");
        assert_eq!(left(&a, &t).await, (10, 1000, 2), "given back once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_reservation_stays_charged_its_estimate_on_a_test_clock() {
    let clock = ManualClock::new(START);
    let engine = Engine::new(policy(), node_store().await.with_clock(clock.clone()));
    let t = tenant("expiry");
    let estimate = Costs::new().with("requests", 1).with("tokens", 600);
    let r = engine
        .reserve(Hit::with_costs(&t, &estimate), Duration::from_secs(30))
        .await
        .unwrap()
        .reservation
        .unwrap();
    assert_eq!(r.expires_at, START.saturating_add(Duration::from_secs(30)), "on the store's clock");
    clock.advance(Duration::from_secs(30));
    assert!(matches!(engine.settle(&r.id, Settlement::Release).await, Err(SettleError::Expired(_))));
    assert_eq!(left(&engine, &t).await, (9, 400, 1), "charged the estimate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpm_and_tpm_in_one_call_on_a_cluster_consume_nothing_when_denied_and_reserve_across_slots() {
    let a = Engine::new(policy(), cluster_store().await);
    let b = Engine::new(policy(), cluster_store().await);
    let t = tenant("cluster");
    let big = Costs::new().with("requests", 1).with("tokens", 700);
    assert!(a.decide(Mode::Check, Hit::with_costs(&t, &big)).await.unwrap().allowed);
    let denied = a.decide(Mode::Check, Hit::with_costs(&t, &big)).await.unwrap();
    assert!(!denied.allowed);
    let (rpm, tpm, _) = left(&a, &t).await;
    assert_eq!((rpm, tpm), (9, 300), "the denial took no request and no token");

    let estimate = Costs::new().with("requests", 1).with("tokens", 200);
    let id = reserve_id(&a, &t, &estimate).await;
    let actual = Costs::new().with("tokens", 50);
    let settled = b.settle(&id, Settlement::Commit(&actual)).await.unwrap();
    assert_eq!(settled.refunded, Costs::new().with("tokens", 150));
    // The first check's permit is still held (a plain check's permit lives until its lease ends);
    // the reservation's was freed by the commit.
    assert_eq!(left(&b, &t).await, (8, 250, 1));
}

/// `budget` on Redis: never refilled, gone `ttl` after its first use — on a test clock, and on
/// Redis's own clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_gone_ttl_after_its_first_use_on_redis() {
    let steps = |ttl| {
        Policy::new([
            Rule::new("steps", floodgate_core::Budget::try_new(nz(3), ttl).unwrap()).key(["session"])
        ])
        .unwrap()
    };
    let clock = ManualClock::new(START);
    let engine = Engine::new(steps(Duration::from_secs(3600)), node_store().await.with_clock(clock.clone()));
    let s = Descriptors::new().with("session", format!("budget-{}", std::process::id()));
    for _ in 0..3 {
        assert!(engine.check(&s, 1).await.unwrap().allowed);
        clock.advance(Duration::from_secs(600));
    }
    let denied = engine.check(&s, 1).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(1800)), "an hour after the first step");
    clock.advance(Duration::from_secs(1800) - Duration::from_micros(1));
    assert!(!engine.check(&s, 1).await.unwrap().allowed);
    clock.advance(Duration::from_micros(1));
    let fresh = engine.check(&s, 1).await.unwrap();
    assert!(fresh.allowed);
    assert_eq!(fresh.limits[0].decision.remaining, 2, "a new budget");

    // On Redis's clock: a budget of 300 ms.
    let real = Engine::new(steps(Duration::from_millis(300)), node_store().await);
    let r = Descriptors::new().with("session", format!("budget-real-{}", std::process::id()));
    for _ in 0..3 {
        assert!(real.check(&r, 1).await.unwrap().allowed);
    }
    let denied = real.check(&r, 1).await.unwrap();
    assert!(!denied.allowed && denied.retry_after().unwrap() <= Duration::from_millis(300));
    tokio::time::sleep(denied.retry_after().unwrap() + Duration::from_millis(20)).await;
    assert!(real.check(&r, 1).await.unwrap().allowed, "gone once its ttl after the first use passed");
}
