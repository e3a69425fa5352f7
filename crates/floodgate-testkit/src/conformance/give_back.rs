//! Refunds, permit releases and resets.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Limit, Store};
use floodgate_core::{Concurrency, Grant, ManualClock};

use crate::{StoreUnderTest, every_algorithm};

/// A refund gives back exactly what its grant took, and a refund for a key the store never saw
/// does no harm. For every algorithm.
pub async fn refund_gives_back<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "refund_gives_back");
    for limit in every_algorithm(5) {
        let name = limit.algorithm_name();
        let key = t.key(name, "k");

        let grant = t.check(&key, &limit, 3).await.grant.expect("a grant for an allowed check");
        t.refund(&key, &limit, grant).await;
        assert!(t.peek(&key, &limit, 5).await.decision.allowed, "{name}: a refund of 3 gives all 3 back");

        let two = t.check(&key, &limit, 2).await.grant.expect("a grant for an allowed check");
        assert!(t.check(&key, &limit, 3).await.decision.allowed, "{name}: the whole capacity is back");
        assert!(!t.check(&key, &limit, 1).await.decision.allowed, "{name}: and now all taken");
        t.refund(&key, &limit, two).await;
        assert!(t.peek(&key, &limit, 2).await.decision.allowed, "{name}: a refund of 2 gives 2 back");
        assert!(!t.peek(&key, &limit, 3).await.decision.allowed, "{name}: and not more than 2");

        let unknown = t.key(name, "never-seen");
        t.refund(&unknown, &limit, Grant { at: t.now(), cost: 2, lease: 1 }).await;
        let fresh = t.peek(&unknown, &limit, 5).await.decision;
        assert!(fresh.allowed && fresh.remaining == 0, "{name}: a stray refund left a fresh key {fresh:?}");
    }
}

/// A concurrency permit is held until released, or until its lease runs out to the microsecond;
/// releasing the same permit twice frees it only once.
pub async fn concurrency_permit_release<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "concurrency_permit_release");
    let two = NonZeroU64::new(2).expect("2 is not 0");
    let limit: Limit = Concurrency::try_new(two, Duration::from_secs(30)).expect("a valid lease").into();
    let key = t.key("permits", "k");

    let first = t.check(&key, &limit, 1).await.grant.expect("the first permit");
    t.advance(Duration::from_secs(1));
    assert!(t.check(&key, &limit, 1).await.decision.allowed, "the second permit");
    let full = t.check(&key, &limit, 1).await.decision;
    assert!(!full.allowed, "two permits held of two");
    assert_eq!(full.retry_after, Some(Duration::from_secs(29)), "the first lease ends 29s from now");

    t.refund(&key, &limit, first).await;
    assert!(t.check(&key, &limit, 1).await.decision.allowed, "a released permit can be taken again");
    t.refund(&key, &limit, first).await;
    assert!(!t.check(&key, &limit, 1).await.decision.allowed, "releasing a permit twice frees it once");

    // The two permits held were both taken at +1s: their leases end at +31s, to the microsecond.
    t.advance(Duration::from_secs(30) - Duration::from_micros(1));
    assert!(!t.peek(&key, &limit, 1).await.decision.allowed, "leases still running 1µs before they end");
    t.advance(Duration::from_micros(1));
    assert!(t.peek(&key, &limit, 2).await.decision.allowed, "both leases ended: both permits are free");
}

/// A reset key is fresh again, a reset says whether the key had state, and other keys keep theirs.
/// For every algorithm.
pub async fn reset_forgets_key<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "reset_forgets_key");
    for limit in every_algorithm(3) {
        let name = limit.algorithm_name();
        let (key, other) = (t.key(name, "k"), t.key(name, "other"));
        assert!(t.check(&key, &limit, 3).await.decision.allowed);
        assert!(t.check(&other, &limit, 3).await.decision.allowed);

        assert!(t.reset(&key).await, "{name}: a reset reports that the key had state");
        assert!(!t.reset(&key).await, "{name}: a second reset finds nothing");
        assert!(t.check(&key, &limit, 3).await.decision.allowed, "{name}: a reset key starts afresh");
        assert!(!t.check(&other, &limit, 1).await.decision.allowed, "{name}: a reset touches no other key");
    }
    assert!(!t.reset(&t.key("never-seen", "k")).await, "a key never seen has no state to reset");
}
