//! Reservations on the memory store, on a manual clock: reserve an estimate, commit the actual
//! (refunding the over-reservation, charging the excess), release, idempotent retries, conflicts,
//! unknown ids, expiry charging the estimate (and the sweeper reporting it once), what each answer
//! says stays charged per rule, and settlements cut off between their steps.

use std::time::Duration;

use std::sync::{Arc, Mutex};

use floodgate::reservation::Kind;
use floodgate::{
    Charge, Charges, Costs, Descriptors, Engine, Hit, MemoryConfig, MemoryStore, Policy, Rule, SettleError,
    Settlement, Store,
};
use floodgate_core::{Concurrency, ManualClock};
use floodgate_testkit::{FlakyStore, Lost};

use super::{engine, nz, per_minute, request};

/// 10 requests and 1000 tokens a minute per tenant, 2 calls in flight per tenant.
fn rules() -> [Rule; 3] {
    [
        Rule::new("rpm", per_minute(10)).key(["tenant"]),
        Rule::new("tpm", per_minute(1000)).key(["tenant"]).cost("tokens"),
        Rule::new("in-flight", Concurrency::try_new(nz(2), Duration::from_secs(600)).unwrap())
            .key(["tenant"]),
    ]
}

fn estimate() -> Costs {
    Costs::new().with("requests", 1).with("tokens", 600)
}

/// Reserves `costs` for `tenant` for five minutes (allowed): the reservation's id.
async fn reserve_id<S: Store>(engine: &Engine<S>, tenant: &Descriptors, costs: &Costs) -> String {
    let reserved = engine.reserve(Hit::with_costs(tenant, costs), Duration::from_secs(300)).await.unwrap();
    reserved.reservation.expect("allowed").id
}

type FlakyMemory = FlakyStore<MemoryStore<ManualClock>>;

/// [`super::engine`] over a [`FlakyStore`]: the engine, and the store to make fail.
fn flaky_engine(rules: impl IntoIterator<Item = Rule>) -> (Engine<FlakyMemory>, FlakyMemory) {
    let clock = ManualClock::new(floodgate_testkit::START);
    let store = FlakyStore::new(MemoryStore::with_config(MemoryConfig::default(), clock));
    (Engine::new(Policy::new(rules).unwrap(), store.clone()), store)
}

/// What each rule has left, by a peek of one request and one token.
async fn left<S: Store>(engine: &Engine<S>) -> (u64, u64, u64) {
    let t1 = request(&[("tenant", "t1")]);
    let one = Costs::new().with("requests", 1).with("tokens", 1);
    let v = engine.decide(floodgate::Mode::Peek, Hit::with_costs(&t1, &one)).await.unwrap();
    // What remains after the peek's own 1, plus that 1; 0 when even 1 does not fit.
    let r = |name: &str| {
        let d = v.limits.iter().find(|l| &*l.rule == name).unwrap().decision;
        if d.allowed { d.remaining + 1 } else { 0 }
    };
    (r("rpm"), r("tpm"), r("in-flight"))
}

#[tokio::test]
async fn a_commit_refunds_what_was_reserved_beyond_the_actual_and_frees_the_permit() {
    let (engine, _clock) = engine(rules());
    let t1 = request(&[("tenant", "t1")]);
    let est = estimate();
    let reserved = engine.reserve(Hit::with_costs(&t1, &est), Duration::from_secs(300)).await.unwrap();
    assert!(reserved.verdict.allowed);
    let reservation = reserved.reservation.expect("an id");
    assert_eq!(reservation.id.len(), 32);
    assert_eq!(left(&engine).await, (9, 400, 1), "the estimate and a permit are held");

    let actual = Costs::new().with("tokens", 412);
    let settled = engine.settle(&reservation.id, Settlement::Commit(&actual)).await.unwrap();
    assert!(settled.committed && !settled.replayed);
    assert_eq!(settled.refunded, Costs::new().with("tokens", 188));
    assert!(settled.excess.is_zero());
    assert_eq!(settled.charged, Costs::new().with("requests", 1).with("tokens", 412));
    assert_eq!(left(&engine).await, (9, 588, 2), "188 tokens back, the permit freed, the request stays");

    // A retried commit charges nothing more and answers the same.
    let again = engine.settle(&reservation.id, Settlement::Commit(&actual)).await.unwrap();
    assert!(again.replayed);
    assert_eq!((again.charged, again.refunded), (settled.charged, settled.refunded));
    assert_eq!(left(&engine).await, (9, 588, 2));
    // Another commit, or a release, of a committed reservation is a conflict.
    let other = Costs::new().with("tokens", 1);
    assert!(matches!(
        engine.settle(&reservation.id, Settlement::Commit(&other)).await,
        Err(SettleError::Conflict { committed: true })
    ));
    assert!(matches!(
        engine.settle(&reservation.id, Settlement::Release).await,
        Err(SettleError::Conflict { committed: true })
    ));
}

#[tokio::test]
async fn a_commit_above_the_estimate_charges_the_excess_and_never_denies() {
    let (engine, _clock) = engine(rules());
    let t1 = request(&[("tenant", "t1")]);
    let est = estimate();
    let id = reserve_id(&engine, &t1, &est).await;
    // Another call takes the rest of the tokens meanwhile.
    let rest = Costs::new().with("tokens", 400);
    assert!(engine.decide(floodgate::Mode::Check, Hit::with_costs(&t1, &rest)).await.unwrap().allowed);
    let actual = Costs::new().with("tokens", 900);
    let settled = engine.settle(&id, Settlement::Commit(&actual)).await.unwrap();
    assert_eq!(settled.excess, Costs::new().with("tokens", 300));
    assert!(settled.refunded.is_zero());
    let (_, tpm, _) = left(&engine).await;
    assert_eq!(tpm, 0, "1300 tokens counted against 1000: the excess is charged, past the limit");
}

#[tokio::test]
async fn a_release_gives_everything_back_once() {
    let (engine, _clock) = engine(rules());
    let t1 = request(&[("tenant", "t1")]);
    let est = estimate();
    let id = reserve_id(&engine, &t1, &est).await;
    let released = engine.settle(&id, Settlement::Release).await.unwrap();
    assert!(!released.committed);
    assert_eq!(released.refunded, est);
    assert_eq!(left(&engine).await, (10, 1000, 2));
    assert!(engine.settle(&id, Settlement::Release).await.unwrap().replayed, "a retried release");
    assert_eq!(left(&engine).await, (10, 1000, 2), "given back once");
    assert!(matches!(
        engine.settle(&id, Settlement::Commit(&est)).await,
        Err(SettleError::Conflict { committed: false })
    ));
}

#[tokio::test]
async fn an_unknown_id_is_not_found() {
    let (engine, _clock) = engine(rules());
    for id in ["", "0123456789abcdef0123456789abcdef", "not an id"] {
        assert!(matches!(engine.settle(id, Settlement::Release).await, Err(SettleError::NotFound)), "{id:?}");
    }
}

#[tokio::test]
async fn a_reservation_past_its_ttl_stays_charged_its_estimate() {
    let (engine, clock) = engine(rules());
    let t1 = request(&[("tenant", "t1")]);
    let est = estimate();
    let r = engine
        .reserve(Hit::with_costs(&t1, &est), Duration::from_secs(30))
        .await
        .unwrap()
        .reservation
        .unwrap();
    clock.advance(Duration::from_secs(29));
    assert_eq!(left(&engine).await, (9, 400, 1));
    clock.advance(Duration::from_secs(1));
    // At its expiry: neither commit nor release gives anything back.
    assert!(matches!(engine.settle(&r.id, Settlement::Release).await, Err(SettleError::Expired(_))));
    let actual = Costs::new().with("tokens", 10);
    assert!(matches!(engine.settle(&r.id, Settlement::Commit(&actual)).await, Err(SettleError::Expired(_))));
    assert_eq!(left(&engine).await, (9, 400, 1), "charged the estimate");
    // Kept a while for late retries, then forgotten.
    clock.advance(Duration::from_secs(61));
    engine.store().sweep();
    assert!(matches!(engine.settle(&r.id, Settlement::Release).await, Err(SettleError::NotFound)));
}

#[tokio::test]
async fn a_denied_reserve_holds_nothing() {
    let (engine, _clock) = engine(rules());
    let t1 = request(&[("tenant", "t1")]);
    let big = Costs::new().with("requests", 1).with("tokens", 600);
    assert!(
        engine
            .reserve(Hit::with_costs(&t1, &big), Duration::from_secs(60))
            .await
            .unwrap()
            .reservation
            .is_some()
    );
    let denied = engine.reserve(Hit::with_costs(&t1, &big), Duration::from_secs(60)).await.unwrap();
    assert!(!denied.verdict.allowed && denied.reservation.is_none());
    assert_eq!(left(&engine).await, (9, 400, 1), "the denied reserve took nothing");
}

/// A settlement whose instance crashed between marking the reservation settled and giving back
/// (here: the store call that gives back failed) is finished by the retry, once, whichever side
/// of the store the cut fell.
#[tokio::test]
async fn a_settlement_cut_off_before_or_after_its_give_back_is_finished_once_by_the_retry() {
    for at in [Lost::Before, Lost::After] {
        let (engine, store) = flaky_engine(rules());
        let t1 = request(&[("tenant", "t1")]);
        let est = estimate();
        let id = reserve_id(&engine, &t1, &est).await;
        let actual = Costs::new().with("tokens", 412);
        store.lose_adjustments(1, at);
        assert!(matches!(engine.settle(&id, Settlement::Commit(&actual)).await, Err(SettleError::Store(_))));
        let expected = match at {
            Lost::Before => (9, 400, 1),
            Lost::After => (9, 588, 2),
        };
        assert_eq!(left(&engine).await, expected, "{at:?}: what the cut-off commit made");
        for _ in 0..2 {
            let retried = engine.settle(&id, Settlement::Commit(&actual)).await.unwrap();
            assert!(retried.replayed && retried.committed);
            assert_eq!(retried.refunded, Costs::new().with("tokens", 188));
            assert_eq!(left(&engine).await, (9, 588, 2), "{at:?}: given back once, by whichever call");
        }
        // A conflicting settlement changes nothing.
        assert!(matches!(
            engine.settle(&id, Settlement::Release).await,
            Err(SettleError::Conflict { committed: true })
        ));
        assert_eq!(left(&engine).await, (9, 588, 2));
    }
}

/// A commit above its estimate is two steps, the give-back (the permit) and the excess: cut off
/// between them, the retry charges the excess and does not free the permit again.
#[tokio::test]
async fn a_commit_cut_off_between_its_give_back_and_its_excess_is_finished_once_by_the_retry() {
    let [rpm, tpm, _] = rules();
    let in_flight = Concurrency::try_new(nz(3), Duration::from_secs(600)).unwrap();
    let (engine, store) = flaky_engine([rpm, tpm, Rule::new("in-flight", in_flight).key(["tenant"])]);
    let t1 = request(&[("tenant", "t1")]);
    // Another call holds a permit throughout: a permit given back twice would show as 3 free.
    let one = Costs::new().with("requests", 1);
    assert!(engine.decide(floodgate::Mode::Check, Hit::with_costs(&t1, &one)).await.unwrap().allowed);
    let est = Costs::new().with("requests", 1).with("tokens", 100);
    let id = reserve_id(&engine, &t1, &est).await;
    assert_eq!(left(&engine).await, (8, 900, 1));
    let actual = Costs::new().with("tokens", 350);
    // The give-back made, its answer lost; the excess never tried.
    store.lose_adjustments(1, Lost::After);
    assert!(engine.settle(&id, Settlement::Commit(&actual)).await.is_err());
    assert_eq!(left(&engine).await, (8, 900, 2), "the permit is back, the excess not yet charged");
    for _ in 0..2 {
        let retried = engine.settle(&id, Settlement::Commit(&actual)).await.unwrap();
        assert!(retried.replayed);
        assert_eq!(retried.excess, Costs::new().with("tokens", 250));
        assert_eq!(left(&engine).await, (8, 650, 2), "the excess charged once, the permit freed once");
    }
}

/// A settlement's give-back to a sharded rule lands on the shard the reservation's id picks: a
/// retry after a give-back whose answer was lost finds it made, on that shard, and makes nothing.
#[tokio::test]
async fn a_sharded_give_back_is_made_once_across_retries() {
    let (engine, store) =
        flaky_engine([Rule::new("tpm", per_minute(1000)).key(["tenant"]).cost("tokens").shards(4)]);
    let t1 = request(&[("tenant", "t1")]);
    let est = Costs::new().with("tokens", 200);
    let id = reserve_id(&engine, &t1, &est).await;
    store.lose_adjustments(1, Lost::After);
    let actual = Costs::new().with("tokens", 50);
    assert!(engine.settle(&id, Settlement::Commit(&actual)).await.is_err());
    let used = async || engine.policy().usage(engine.store(), "tpm", &t1).await.unwrap().used;
    assert_eq!(used().await, 50, "150 given back by the cut-off commit, to the shard it came from");
    for _ in 0..3 {
        engine.settle(&id, Settlement::Commit(&actual)).await.unwrap();
        assert_eq!(used().await, 50, "not given back again");
    }
}

/// What a sharded rule's reservation gives back goes to the shard it was taken from, so none of
/// it is lost to a shard holding less than it: the shards' total is exact.
#[tokio::test]
async fn a_sharded_reservation_gives_back_to_its_own_shard() {
    let rules = [Rule::new("tpm", per_minute(4000)).key(["tenant"]).cost("tokens").shards(4)];
    let (engine, _clock) = engine(rules);
    let t1 = request(&[("tenant", "t1")]);
    // Uneven estimates, so the shards hold different amounts.
    let mut reserved = Vec::new();
    for n in 0..8u64 {
        let est = Costs::new().with("tokens", 100 + 200 * (n % 2));
        reserved.push((reserve_id(&engine, &t1, &est).await, 100 + 200 * (n % 2)));
    }
    let used = async || engine.policy().usage(engine.store(), "tpm", &t1).await.unwrap().used;
    let mut total = 1600;
    assert_eq!(used().await, total);
    // Released in another order: each estimate returns whole.
    for i in [7, 2, 5, 0, 3, 6, 1, 4] {
        let (id, est) = &reserved[i];
        engine.settle(id, Settlement::Release).await.unwrap();
        total -= est;
        assert_eq!(used().await, total, "after releasing reservation {i}");
    }
}

/// `rule` held `held` and stays charged `charged`.
fn charge(rule: &str, held: u64, charged: u64) -> Charge {
    Charge { rule: rule.into(), held, charged, permit: rule == "in-flight" }
}

#[tokio::test]
async fn each_answer_says_per_rule_what_was_held_and_what_stays_charged() {
    let (engine, clock) = engine(rules());
    let est = estimate();
    // A tenant each, so that no reservation finds another's charges.
    let tenant = |name: &str| request(&[("tenant", name)]);

    let id = reserve_id(&engine, &tenant("t1"), &est).await;
    let actual = Costs::new().with("tokens", 412);
    let committed = engine.settle(&id, Settlement::Commit(&actual)).await.unwrap();
    let rules = vec![charge("rpm", 1, 1), charge("tpm", 600, 412), charge("in-flight", 1, 0)];
    assert_eq!(committed.charges, Charges { kind: Kind::Reserve, rules });

    let id = reserve_id(&engine, &tenant("t2"), &est).await;
    let over = Costs::new().with("tokens", 700);
    let rules = vec![charge("rpm", 1, 1), charge("tpm", 600, 700), charge("in-flight", 1, 0)];
    assert_eq!(engine.settle(&id, Settlement::Commit(&over)).await.unwrap().charges.rules, rules);

    let id = reserve_id(&engine, &tenant("t3"), &est).await;
    let rules = vec![charge("rpm", 1, 0), charge("tpm", 600, 0), charge("in-flight", 1, 0)];
    assert_eq!(engine.settle(&id, Settlement::Release).await.unwrap().charges.rules, rules);

    let t4 = tenant("t4");
    let r = engine.reserve(Hit::with_costs(&t4, &est), Duration::from_secs(30)).await.unwrap();
    clock.advance(Duration::from_secs(30));
    let Err(SettleError::Expired(charges)) =
        engine.settle(&r.reservation.unwrap().id, Settlement::Release).await
    else {
        panic!("expired")
    };
    let rules = vec![charge("rpm", 1, 1), charge("tpm", 600, 600), charge("in-flight", 1, 1)];
    assert_eq!(charges, Charges { kind: Kind::Reserve, rules });
}

#[tokio::test]
async fn the_sweeper_reports_each_reservation_that_expired_unsettled_once() {
    let (engine, clock) = engine(rules());
    let reported: Arc<Mutex<Vec<Charges>>> = Arc::default();
    let seen = Arc::clone(&reported);
    engine.store().on_expired_records(move |body| seen.lock().unwrap().push(Charges::expired(body).unwrap()));
    let (t1, t2) = (request(&[("tenant", "t1")]), request(&[("tenant", "t2")]));
    let est = estimate();
    let ttl = Duration::from_secs(30);
    let expiring = engine.reserve(Hit::with_costs(&t1, &est), ttl).await.unwrap().reservation.unwrap();
    let settled = engine.reserve(Hit::with_costs(&t2, &est), ttl).await.unwrap().reservation.unwrap();
    engine.settle(&settled.id, Settlement::Release).await.unwrap();

    clock.advance(Duration::from_secs(29));
    engine.store().sweep();
    assert!(reported.lock().unwrap().is_empty(), "not expired yet");
    clock.advance(Duration::from_secs(1));
    engine.store().sweep();
    let rules = vec![charge("rpm", 1, 1), charge("tpm", 600, 600), charge("in-flight", 1, 1)];
    assert_eq!(*reported.lock().unwrap(), [Charges { kind: Kind::Reserve, rules }], "the unsettled one");
    // Once: neither the next sweep nor the one that forgets the record reports it again, and a
    // settlement after it is refused.
    engine.store().sweep();
    assert!(matches!(engine.settle(&expiring.id, Settlement::Release).await, Err(SettleError::Expired(_))));
    clock.advance(Duration::from_secs(120));
    engine.store().sweep();
    assert_eq!(reported.lock().unwrap().len(), 1);
}
