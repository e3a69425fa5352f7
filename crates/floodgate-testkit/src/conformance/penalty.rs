//! The penalty box ([`Op::block_for`]): after a denial a key is refused for exactly its block
//! duration, nothing counts while it is, and then it starts afresh.

use std::time::Duration;

use floodgate::store::{Mode, Op, OpResult};
use floodgate::{Limit, Store};
use floodgate_core::ManualClock;

use crate::{StoreUnderTest, TestKey, every_algorithm};

/// Every algorithm a penalty box applies to (all but `concurrency`), of `capacity`.
fn boxable(capacity: u64) -> Vec<Limit> {
    every_algorithm(capacity).into_iter().filter(|l| !l.holds_permits()).collect()
}

fn boxed<'a>(key: &'a TestKey, limit: &'a Limit, cost: u64, block_for: Duration) -> Op<'a> {
    Op { block_for: Some(block_for), ..key.op(limit, cost) }
}

async fn one<S: Store>(t: &StoreUnderTest<S>, op: Op<'_>, mode: Mode) -> OpResult {
    t.apply(&[op], mode).await[0]
}

/// A denial puts the key in the box for exactly `block_for`, longer or shorter than the window:
/// refused with that `retry_after` (to the microsecond), nothing counted while refused, and when
/// the time is up the key starts afresh, its count forgotten. For every algorithm it applies to.
pub async fn penalty_box_refuses_for_exactly_block_for_then_forgets<S: Store>(
    make: impl FnOnce(ManualClock) -> S,
) {
    let t = StoreUnderTest::new(make, "penalty_box_refuses_for_exactly_block_for_then_forgets");
    for block_for in [Duration::from_secs(90), Duration::from_secs(7)] {
        for limit in boxable(3) {
            let name = format!("{} boxed for {block_for:?}", limit.algorithm_name());
            let key = t.key(&name, "k");
            let op = || boxed(&key, &limit, 1, block_for);
            for i in 0..3 {
                assert!(one(&t, op(), Mode::Check).await.decision.allowed, "{name}: request {i} of 3 fits");
            }
            let denied = one(&t, op(), Mode::Check).await.decision;
            assert!(!denied.allowed, "{name}: the 4th is over the limit");
            assert_eq!(denied.retry_after, Some(block_for), "{name}: retry exactly when the box ends");
            assert_eq!(
                (denied.remaining, denied.reset_after),
                (0, block_for),
                "{name}: nothing left until then"
            );

            let peeked = one(&t, op(), Mode::Peek).await.decision;
            assert_eq!(
                peeked.retry_after,
                Some(block_for),
                "{name}: a peek sees the box and changes nothing"
            );

            t.advance(block_for - Duration::from_micros(1));
            let late = one(&t, op(), Mode::Check).await.decision;
            assert_eq!(
                late.retry_after,
                Some(Duration::from_micros(1)),
                "{name}: refused 1µs before the end"
            );
            let reported = one(&t, op(), Mode::Report).await;
            assert_eq!(reported.grant, None, "{name}: nothing counts while boxed, a report neither");

            t.advance(Duration::from_micros(1));
            let after = one(&t, op(), Mode::Check).await.decision;
            assert!(after.allowed, "{name}: allowed when the box ends");
            assert_eq!(after.remaining, 2, "{name}: the count before the box is forgotten");
            t.advance(Duration::from_secs(86_400));
        }
    }
}

/// All-or-nothing: a request denied by one limit boxes only the limits that denied it by their
/// count; a limit that allowed is neither charged nor boxed, and a shadow limit never boxes.
pub async fn only_the_limits_that_deny_go_in_the_box<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "only_the_limits_that_deny_go_in_the_box");
    let block_for = Duration::from_secs(30);
    let (tight, loose) = (&boxable(1)[0], &boxable(5)[0]);
    let (a, b, s) = (t.key("tight", "k"), t.key("loose", "k"), t.key("shadow", "k"));
    let shadow = Op { enforce: false, ..boxed(&s, tight, 1, block_for) };
    let ops = || [boxed(&a, tight, 1, block_for), boxed(&b, loose, 1, block_for), shadow];
    assert!(t.apply(&ops(), Mode::Check).await.iter().take(2).all(|r| r.decision.allowed));
    let denied = t.apply(&ops(), Mode::Check).await;
    assert_eq!(denied[0].decision.retry_after, Some(block_for), "the tight limit denied: boxed");
    assert!(denied[1].decision.allowed, "the loose limit allowed");
    assert_eq!(denied[1].decision.remaining, 4, "and was not charged for the denied request");
    assert_ne!(denied[2].decision.retry_after, Some(block_for), "a shadow limit does not box");
    let loose_alone = one(&t, boxed(&b, loose, 1, block_for), Mode::Check).await.decision;
    assert_eq!((loose_alone.allowed, loose_alone.remaining), (true, 3), "the loose key is not in a box");
    let shadow_alone = one(&t, Op { enforce: false, ..boxed(&s, tight, 1, block_for) }, Mode::Check).await;
    assert_ne!(shadow_alone.decision.retry_after, Some(block_for), "the shadow key is not in a box");
}

/// A peek of a request that a check would box says so (`retry_after` is the block duration) and
/// writes nothing: the check after it is still decided by the count, and boxes then.
pub async fn a_peek_tells_of_the_box_without_closing_it<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "a_peek_tells_of_the_box_without_closing_it");
    let block_for = Duration::from_secs(600);
    for limit in boxable(1) {
        let name = limit.algorithm_name();
        let key = t.key(name, "k");
        assert!(one(&t, boxed(&key, &limit, 1, block_for), Mode::Check).await.decision.allowed);
        let peek = one(&t, boxed(&key, &limit, 1, block_for), Mode::Peek).await.decision;
        assert_eq!(peek.retry_after, Some(block_for), "{name}: a check would box");
        let without_box = one(&t, key.op(&limit, 1), Mode::Peek).await.decision;
        assert_ne!(without_box.retry_after, Some(block_for), "{name}: the peek wrote no box");
        let check = one(&t, boxed(&key, &limit, 1, block_for), Mode::Check).await.decision;
        assert_eq!(check.retry_after, Some(block_for), "{name}: the check boxes");
    }
}
