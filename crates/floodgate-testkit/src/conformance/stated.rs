//! Caller-stated limits through the engine: a rule's limit, window and block duration stated per
//! request count on a counter per statement, on this store.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::store::Mode;
use floodgate::{Descriptors, EngineError, Hit, Impossible, Policy, Rule, Statable, Stated, Store, Verdict};
use floodgate_core::{ManualClock, SlidingLog};

use crate::StoreUnderTest;

/// Two statements of one key count on two counters, each with its own limit; a stated block
/// refuses for exactly its duration and then the key starts afresh; a statement out of bounds
/// fails the request and counts nothing.
pub async fn stated_limits_count_per_statement<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "stated_limits_count_per_statement");
    // The store may be shared (one Redis): the policy's namespace is this test's own.
    let namespace = String::from_utf8_lossy(t.key("stated", "").bytes()).into_owned();
    let template = SlidingLog::try_new(NonZeroU64::new(100).expect("not 0"), Duration::from_secs(60))
        .expect("a valid window");
    let statable = Statable::new()
        .limit(NonZeroU64::new(10).expect("not 0"))
        .window(Duration::from_secs(3600))
        .block_for(Duration::from_secs(3600));
    let rule = Rule::new("throttle", template).key(["user"]).statable(statable);
    let policy = Policy::in_namespace(namespace, [rule]).expect("a valid policy");
    let user = Descriptors::new().with("user", "u1");
    let check = |stated: Stated| {
        let (policy, store, user) = (&policy, t.store(), &user);
        async move {
            let hit = Hit::new(user, 1).stating(&stated);
            policy.evaluate(store, Mode::Check, &[hit], Impossible::Error).await
        }
    };
    let decided = |v: Result<Verdict, EngineError>| v.expect("decided").limits[0].decision;
    let two = Stated { limit: Some(2), window: Some(Duration::from_secs(60)), block_for: None };
    let three = Stated { limit: Some(3), ..two };
    for _ in 0..2 {
        assert!(decided(check(two).await).allowed);
    }
    let over = decided(check(two).await);
    assert!(!over.allowed && over.limit == 2, "the stated limit denies: {over:?}");
    for i in 0..3 {
        assert!(decided(check(three).await).allowed, "another statement, another counter: {i}");
    }
    assert!(!decided(check(three).await).allowed);

    let boxed = Stated {
        limit: Some(1),
        window: Some(Duration::from_secs(30)),
        block_for: Some(Duration::from_secs(90)),
    };
    assert!(decided(check(boxed).await).allowed);
    assert_eq!(decided(check(boxed).await).retry_after, Some(Duration::from_secs(90)));
    t.advance(Duration::from_secs(90) - Duration::from_micros(1));
    assert_eq!(decided(check(boxed).await).retry_after, Some(Duration::from_micros(1)));
    t.advance(Duration::from_micros(1));
    let after = decided(check(boxed).await);
    assert!(after.allowed && after.remaining == 0, "afresh when the block ends: {after:?}");

    let too_many = Stated { limit: Some(11), ..two };
    assert!(matches!(check(too_many).await, Err(EngineError::Stated { .. })));
    t.advance(Duration::from_secs(3600));
    assert_eq!(decided(check(two).await).remaining, 1, "the refused statement counted nothing");
}
