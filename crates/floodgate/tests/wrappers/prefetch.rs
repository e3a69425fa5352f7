//! Prefetch over a memory store: batch leases on a manual clock, and the conformance suite.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::store::{Prefetch, PrefetchBatch};
use floodgate::{Descriptors, Engine, MemoryConfig, MemoryStore, Policy, Rule};
use floodgate_core::{FixedWindow, ManualClock, Timestamp};

/// A prefetch wrapper over a store that answers is that store for ops without prefetch: the
/// store conformance suite passes through it.
mod conformance {
    floodgate_testkit::conformance_tests!(|clock| floodgate::store::Prefetch::new(
        floodgate::MemoryStore::with_config(floodgate::MemoryConfig::default(), clock.clone()),
        clock,
    ));
}

#[tokio::test]
async fn a_batch_serves_later_requests_without_the_store_and_answers_at_once() {
    let clock = ManualClock::new(Timestamp::from_secs(1_800_000_000));
    let limit = FixedWindow::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(60)).unwrap();
    let batch = PrefetchBatch::try_new(4, Duration::from_secs(1)).unwrap();
    let rule = Rule::new("hot", limit).prefetch(batch);
    let inner = MemoryStore::with_config(MemoryConfig::default(), clock.clone());
    let engine = Engine::new(Policy::new([rule]).unwrap(), Prefetch::new(inner, clock.clone()));
    let first = engine.check(&Descriptors::new(), 1).await.unwrap();
    assert!(first.allowed);
    assert_eq!(first.limits[0].decision.remaining, 9, "remaining counts the lease's unspent units");
    for left in [8, 7, 6] {
        let verdict = engine.check_now(&Descriptors::new(), 1).expect("a lease answers at once").unwrap();
        assert!(verdict.allowed);
        assert_eq!(verdict.limits[0].decision.remaining, left);
    }
    assert!(engine.check_now(&Descriptors::new(), 1).is_none(), "the lease is spent: the store is asked");
    let stats = engine.store().stats();
    assert_eq!((stats.store_calls, stats.local_decisions, stats.batches), (1, 3, 1));
}

#[test]
fn policies_refuse_prefetch_and_shards_where_they_could_not_be_exact() {
    use floodgate::RuleError;
    use floodgate_core::{Concurrency, Gcra, Rate, SlidingLog};
    let batch = PrefetchBatch::try_new(10, Duration::from_secs(1)).unwrap();
    let log = SlidingLog::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(60)).unwrap();
    let permits = Concurrency::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(30)).unwrap();
    let window = FixedWindow::try_new(NonZeroU64::new(3).unwrap(), Duration::from_secs(1)).unwrap();
    let slow = Gcra::try_new(
        Rate::try_new(NonZeroU64::new(2).unwrap(), Duration::from_secs(1)).unwrap(),
        NonZeroU64::new(8).unwrap(),
    )
    .unwrap();
    for rule in [
        Rule::new("log", log).prefetch(batch),
        Rule::new("permits", permits).prefetch(batch),
        Rule::new("slow", slow).prefetch(batch),
    ] {
        let err = Policy::new([rule]).expect_err("no batch leases");
        assert!(matches!(err, RuleError::PrefetchUnsupported { .. }), "{err}");
    }
    for rule in [
        Rule::new("one", window).shards(1),
        Rule::new("thin", window).shards(4),
        Rule::new("slow", slow).shards(4),
        Rule::new("permits", permits).shards(2),
    ] {
        assert!(matches!(Policy::new([rule]), Err(RuleError::Shards { .. })));
    }
}

#[test]
fn shard_shares_sum_to_exactly_the_limit() {
    use floodgate::Limit;
    use floodgate_core::{Rate, TokenBucket};
    for (count, n) in [(10, 3), (103, 4), (7, 7), (1_000_003, 16), (65_535, 65_535)] {
        let limit: Limit =
            FixedWindow::try_new(NonZeroU64::new(count).unwrap(), Duration::from_secs(1)).unwrap().into();
        let shares = limit.split(n).unwrap();
        assert_eq!(shares.iter().map(Limit::capacity).sum::<u64>(), count, "{count} over {n}");
        let (min, max) = (
            shares.iter().map(Limit::capacity).min().unwrap(),
            shares.iter().map(Limit::capacity).max().unwrap(),
        );
        assert!(max - min <= 1, "{count} over {n}: even shares");
        let rate = Rate::try_new(NonZeroU64::new(count).unwrap(), Duration::from_secs(3_600)).unwrap();
        let bucket: Limit = TokenBucket::try_new(rate, NonZeroU64::new(count).unwrap()).unwrap().into();
        let rates: u64 = bucket
            .split(n)
            .unwrap()
            .iter()
            .map(|l| match l {
                Limit::TokenBucket(b) => b.rate().count(),
                _ => unreachable!(),
            })
            .sum();
        assert_eq!(rates, count, "a bucket's rate over {n} shards");
    }
    let limit: Limit =
        FixedWindow::try_new(NonZeroU64::new(3).unwrap(), Duration::from_secs(1)).unwrap().into();
    assert_eq!(limit.split(4), None, "a shard would get nothing");
}
