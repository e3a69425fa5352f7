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
