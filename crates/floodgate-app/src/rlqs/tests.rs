//! [`Quotas`] on a manual clock: subscriptions, shares by demand, renewals, abandonment, reloads
//! and shutdown, as the actions each stream receives.

use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use floodgate_config::rlqs::RlqsConfig;
use floodgate_core::{ManualClock, Timestamp};
use floodgate_redis::rlqs::RemoteMember;

use super::*;
use crate::metrics::RlqsSeries;

const CONFIG: &str = "rlqs:
  reporting_interval: 1s
  assignment_ttl: 10s
  abandon_after: 5s
  floor: 10%
  domains:
    d:
      - name: api
        match: { name: api }
        algorithm: token_bucket
        rate: 1000/s
        burst: 100
      - name: open
        match: { name: open }
        blanket: allow_all
";

fn config(text: &str) -> Arc<RlqsConfig> {
    Arc::new(floodgate_config::parse("t.yaml", text).unwrap().rlqs.unwrap())
}

struct Envoy {
    id: StreamId,
    inbox: Inbox,
}

impl Envoy {
    fn open(quotas: &Quotas<ManualClock>, config: &Arc<RlqsConfig>) -> Envoy {
        let (tx, inbox) = outbox();
        Envoy { id: quotas.open("d", Some(config), tx).unwrap(), inbox }
    }

    fn actions(&mut self) -> Vec<Action> {
        let mut all = Vec::new();
        while let Some(Some(actions)) = self.inbox.try_recv() {
            all.extend(actions);
        }
        all
    }

    /// The rate of the last assignment received for `bucket`, if any arrived.
    fn rate(&mut self, bucket: &BucketId) -> Option<f64> {
        self.actions().into_iter().rev().find_map(|a| match a {
            Action::Assign { bucket: b, strategy, .. } if b == *bucket => strategy.rate(),
            _ => None,
        })
    }
}

fn api() -> BucketId {
    BucketId::new([("name", "api"), ("env", "prod")])
}

fn report(bucket: &BucketId, per_second: u64) -> Report {
    Report { bucket: bucket.clone(), elapsed: Duration::from_secs(1), allowed: per_second, denied: 0 }
}

fn quotas() -> (Quotas<ManualClock>, ManualClock) {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    (Quotas::new(clock.clone(), RlqsSeries::default()), clock)
}

#[test]
fn bucket_ids_are_order_insensitive() {
    assert_eq!(BucketId::new([("a", "A"), ("b", "B")]), BucketId::new([("b", "B"), ("a", "A")]));
    assert_eq!(BucketId::new([("b", "B"), ("a", "A")]).to_string(), "{a: A, b: B}");
}

#[test]
fn a_first_report_is_answered_and_shares_follow_demand() {
    let c = config(CONFIG);
    let (quotas, clock) = quotas();
    let mut hot = Envoy::open(&quotas, &c);
    let mut idle = Envoy::open(&quotas, &c);
    quotas.report(hot.id, Some(&c), &[report(&api(), 0)]).unwrap();
    assert_eq!(hot.rate(&api()), Some(1000.0), "alone, a stream gets the whole limit");
    quotas.report(idle.id, Some(&c), &[report(&api(), 0)]).unwrap();
    let (h, i) = (hot.rate(&api()).unwrap(), idle.rate(&api()).unwrap());
    assert!((h - 500.0).abs() < 1.0 && (i - 500.0).abs() < 1.0, "{h} {i}");

    // The hot one asks for 900 a second: it gets them, the idle one keeps more than its floor.
    clock.advance(Duration::from_secs(1));
    quotas.report(hot.id, Some(&c), &[report(&api(), 900)]).unwrap();
    let (h, i) = (hot.rate(&api()).unwrap(), idle.rate(&api()).unwrap());
    assert!(h >= 900.0 && i >= 50.0 && h + i <= 1000.0, "{h} {i}");

    // Demand shifts: the idle one is now hot, and the hot one idle.
    clock.advance(Duration::from_secs(1));
    quotas.report(hot.id, Some(&c), &[report(&api(), 0)]).unwrap();
    quotas.report(idle.id, Some(&c), &[report(&api(), 900)]).unwrap();
    let (h, i) = (hot.rate(&api()).unwrap(), idle.rate(&api()).unwrap());
    assert!(i >= 900.0 && h + i <= 1000.0, "{h} {i}");
}

#[test]
fn the_same_share_is_sent_again_only_as_its_ttl_nears_its_end() {
    let c = config(CONFIG);
    let (quotas, clock) = quotas();
    let mut envoy = Envoy::open(&quotas, &c);
    quotas.report(envoy.id, Some(&c), &[report(&api(), 10)]).unwrap();
    let first = envoy.actions();
    assert_eq!(first.len(), 1);
    for _ in 0..7 {
        clock.advance(Duration::from_secs(1));
        quotas.report(envoy.id, Some(&c), &[report(&api(), 10)]).unwrap();
        quotas.tick(Some(&c));
        assert_eq!(envoy.actions(), [], "unchanged and not near its TTL's end");
    }
    // 8 s after it was sent, with a TTL of 10 s and a 1 s interval: renewed, the same strategy.
    clock.advance(Duration::from_secs(1));
    quotas.tick(Some(&c));
    assert_eq!(envoy.actions(), first);
}

#[test]
fn idle_buckets_are_abandoned() {
    let c = config(CONFIG);
    let (quotas, clock) = quotas();
    let mut envoy = Envoy::open(&quotas, &c);
    quotas.report(envoy.id, Some(&c), &[report(&api(), 10)]).unwrap();
    envoy.actions();
    for _ in 0..4 {
        clock.advance(Duration::from_secs(1));
        quotas.report(envoy.id, Some(&c), &[report(&api(), 0)]).unwrap();
        quotas.tick(Some(&c));
    }
    assert!(!envoy.actions().iter().any(|a| matches!(a, Action::Abandon { .. })));
    clock.advance(Duration::from_secs(1));
    quotas.tick(Some(&c));
    assert_eq!(envoy.actions(), [Action::Abandon { bucket: api() }]);
    assert!(quotas.view().is_empty());
}

#[test]
fn a_reload_that_removes_a_rule_expires_its_assignments_at_once() {
    let c = config(CONFIG);
    let (quotas, _clock) = quotas();
    let mut envoy = Envoy::open(&quotas, &c);
    let open = BucketId::new([("name", "open")]);
    quotas.report(envoy.id, Some(&c), &[report(&api(), 1), report(&open, 1)]).unwrap();
    let actions = envoy.actions();
    assert!(actions.contains(&Action::Assign {
        bucket: open.clone(),
        strategy: Strategy::AllowAll,
        ttl: Duration::from_secs(10)
    }));
    let without_api = config(
        &CONFIG
            .replace("name: api\n        match: { name: api }", "name: api\n        match: { name: other }"),
    );
    quotas.tick(Some(&without_api));
    let expired = envoy.actions();
    assert!(
        matches!(&expired[..], [Action::Assign { bucket, ttl, .. }] if *bucket == api() && ttl.is_zero()),
        "{expired:?}"
    );
}

#[test]
fn shutdown_expires_every_assignment_and_closes_the_streams() {
    let c = config(CONFIG);
    let (quotas, _clock) = quotas();
    let mut envoy = Envoy::open(&quotas, &c);
    quotas.report(envoy.id, Some(&c), &[report(&api(), 1)]).unwrap();
    envoy.actions();
    quotas.shutdown();
    let last = envoy.actions();
    assert!(matches!(&last[..], [Action::Assign { ttl, .. }] if ttl.is_zero()), "{last:?}");
    assert_eq!(envoy.inbox.try_recv(), Some(None), "the stream is closed once its last actions are taken");
    let (tx, _rx) = outbox();
    assert_eq!(quotas.open("d", Some(&c), tx), Err(QuotaError::ShuttingDown));
}

#[test]
fn a_closed_stream_gives_its_share_back() {
    let c = config(CONFIG);
    let (quotas, _clock) = quotas();
    let mut a = Envoy::open(&quotas, &c);
    let b = Envoy::open(&quotas, &c);
    quotas.report(a.id, Some(&c), &[report(&api(), 0)]).unwrap();
    quotas.report(b.id, Some(&c), &[report(&api(), 0)]).unwrap();
    a.actions();
    quotas.close(b.id);
    assert_eq!(a.rate(&api()), Some(1000.0));
}

fn remote(demand: f64, assigned: f64, desired: f64) -> RemoteMember {
    RemoteMember { demand, assigned, desired }
}

/// Whether the quotas asked for an exchange since last asked (the permit is taken).
fn asked_for_an_exchange(quotas: &Quotas<ManualClock>) -> bool {
    let mut moved = std::pin::pin!(quotas.moved());
    moved.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_ready()
}

#[test]
fn the_fleets_demand_takes_its_part_of_the_limit() {
    let c = config(CONFIG);
    let (quotas, _clock) = quotas();
    quotas.join_fleet();
    let mut a = Envoy::open(&quotas, &c);
    quotas.report(a.id, Some(&c), &[report(&api(), 0)]).unwrap();
    assert!(a.actions().is_empty(), "on a fleet, nothing is assigned before the first claim");
    assert!(asked_for_an_exchange(&quotas), "the first exchange is asked for at once");
    let groups = quotas.demand();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].limit, 1000.0);
    assert!(groups[0].members[0].0.starts_with(quotas.instance()));
    // Three other streams elsewhere, idle: an equal split of four, claimed.
    let others = [remote(0.0, 250.0, 250.0), remote(0.0, 250.0, 250.0), remote(0.0, 250.0, 250.0)];
    quotas.exchange(&groups[0].group, 250.0, &others);
    let rate = a.rate(&api()).unwrap();
    assert!((rate - 250.0).abs() < 1.0 && rate <= 250.0, "{rate}");
    let view = &quotas.view()[0];
    assert!(view.fleet_assigned <= 1000.0 + 1e-9 && view.fleet_assigned > 998.0, "{view:?}");
    assert_eq!(view.claim, Some(250.0));
    assert!(!asked_for_an_exchange(&quotas), "nothing to change: no exchange before the tick");
}

#[test]
fn shares_that_want_more_than_the_claim_are_scaled_to_it_until_room_is_given_back() {
    let c = config(CONFIG);
    let (quotas, _clock) = quotas();
    quotas.join_fleet();
    let (mut a, mut b) = (Envoy::open(&quotas, &c), Envoy::open(&quotas, &c));
    quotas.report(a.id, Some(&c), &[report(&api(), 300)]).unwrap();
    quotas.report(b.id, Some(&c), &[report(&api(), 100)]).unwrap();
    let group = quotas.demand().remove(0).group;
    // Another instance's idle stream holds 700 of the 1000: by demand these two want far more
    // than the 300 left, and share it 3 to 1 (their demands beyond the floor).
    quotas.exchange(&group, 300.0, &[remote(0.0, 700.0, 700.0)]);
    let (ra, rb) = (a.rate(&api()).unwrap(), b.rate(&api()).unwrap());
    assert!(ra + rb <= 300.0 + 1e-9, "the claim bounds the shares: {ra} + {rb}");
    assert!(ra > rb && ra + rb > 295.0, "{ra} {rb}");
    assert!(asked_for_an_exchange(&quotas), "wanting more than the claim asks for an exchange");
    // The other instance hears of them and gives back all but its floor-level desire.
    quotas.exchange(&group, 900.0, &[remote(0.0, 100.0, 100.0)]);
    let (ra, rb) = (a.rate(&api()).unwrap(), b.rate(&api()).unwrap());
    assert!(ra >= 300.0 && rb >= 100.0 && ra + rb <= 900.0 + 1e-9, "{ra} {rb}");
}

#[test]
fn holding_more_than_wanted_while_another_instance_waits_asks_for_an_exchange() {
    let c = config(CONFIG);
    let (quotas, _clock) = quotas();
    quotas.join_fleet();
    let mut a = Envoy::open(&quotas, &c);
    quotas.report(a.id, Some(&c), &[report(&api(), 0)]).unwrap();
    assert!(asked_for_an_exchange(&quotas), "the first claim");
    let group = quotas.demand().remove(0).group;
    quotas.exchange(&group, 1000.0, &[]);
    assert_eq!(a.rate(&api()), Some(1000.0));
    assert!(!asked_for_an_exchange(&quotas));
    // An instance joined and waits for its 500 with nothing: this one, holding 1000, now wants
    // 500 — its stream gets 500 at once, and the claim is handed back at an exchange asked for.
    quotas.exchange(&group, 1000.0, &[remote(0.0, 0.0, 500.0)]);
    let rate = a.rate(&api()).unwrap();
    assert!(rate <= 500.0 && rate > 499.0, "{rate}");
    assert!(asked_for_an_exchange(&quotas));
    assert!((quotas.demand()[0].members[0].2 - 500.0).abs() < 1e-9, "it desires 500 now");
}

#[test]
fn on_one_instance_the_claim_is_the_limit() {
    let c = config(CONFIG);
    let (quotas, _clock) = quotas();
    let mut a = Envoy::open(&quotas, &c);
    quotas.report(a.id, Some(&c), &[report(&api(), 0)]).unwrap();
    assert_eq!(a.rate(&api()), Some(1000.0));
    assert_eq!(quotas.view()[0].claim, Some(1000.0));
    assert!(!asked_for_an_exchange(&quotas));
}

#[test]
fn a_stream_that_does_not_read_holds_one_action_per_bucket_the_newest() {
    let c = config(CONFIG);
    let (quotas, clock) = quotas();
    let mut reader = Envoy::open(&quotas, &c);
    let mut idle = Envoy::open(&quotas, &c);
    quotas.report(idle.id, Some(&c), &[report(&api(), 0)]).unwrap();
    // The other stream's demand swings a thousand times; the idle stream's share follows each
    // swing, and it reads none of them.
    for i in 0..1000u64 {
        clock.advance(Duration::from_secs(1));
        quotas.report(reader.id, Some(&c), &[report(&api(), if i % 2 == 0 { 900 } else { 10 })]).unwrap();
        reader.actions();
    }
    let waiting = idle.inbox.try_recv().expect("actions wait").expect("the stream is open");
    assert_eq!(waiting.len(), 1, "one action for its one bucket: {waiting:?}");
    let now = quotas.view()[0].members.iter().find(|m| m.stream == idle.id.0).unwrap().assigned;
    let Action::Assign { strategy, .. } = &waiting[0] else { panic!("an assignment: {waiting:?}") };
    assert_eq!(strategy.rate(), now, "the newest assignment");
}
