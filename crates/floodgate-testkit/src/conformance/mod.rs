//! The store conformance suite: what every [`Store`] must do, as generic async functions.
//!
//! Each function takes a factory that builds the store around the [`ManualClock`] it is given,
//! builds one store, and panics with the algorithm and the step when the store breaks the contract.
//! [`run_all`] runs them all; [`conformance_tests!`](crate::conformance_tests) makes one test each.
//!
//! | behaviour | contract (`DESIGN.md` §2) |
//! |---|---|
//! | [`check_consumes_only_when_allowed`] | a denied check consumes nothing |
//! | [`peek_consumes_nothing`] | a peek answers as a check would, and changes nothing |
//! | [`report_never_denies_and_consumes_past_the_limit`] | `report` never denies, takes any cost |
//! | [`denied_request_consumes_nothing_from_any_limit`] | all-or-nothing across the limits of a request |
//! | [`shadow_op_does_not_block_and_consumes_only_when_admitted`] | shadow limits count but never deny |
//! | [`refund_gives_back`] | a refund gives back exactly what a grant took |
//! | [`concurrency_permit_release`] | permits are released once, and leases run out |
//! | [`reset_forgets_key`] | a reset key is fresh; other keys are untouched |
//! | [`every_algorithm_retry_after_is_exact_through_the_store`] | allowed at `retry_after`, denied 1µs before |
//! | [`reset_after_is_when_the_limit_is_full_again`] | full capacity at `reset_after`, not 1µs before |
//! | [`keys_of_different_rules_are_independent`] | distinct keys never share state |
//! | [`penalty_box_refuses_for_exactly_block_for_then_forgets`] | a denial boxes the key for exactly `block_for`, then it starts afresh |
//! | [`only_the_limits_that_deny_go_in_the_box`] | all-or-nothing with boxes; shadow limits never box |
//! | [`a_peek_tells_of_the_box_without_closing_it`] | a peek says a check would box, and writes nothing |
//! | [`stated_limits_count_per_statement`] | caller-stated limits through the engine: a counter per statement, bounds, a stated block |
//! | [`a_quota_keeps_the_previous_period`] | a peek reads what a quota's key counted in the period before the current one, exactly |
//!
//! Every call also checks the answer's shape (see [`StoreUnderTest::apply`]): the store's time is
//! the clock's, one result per op, `retry_after` exactly on denials, grants exactly for what was
//! consumed.
//!
//! [`Store`]: floodgate::Store
//! [`ManualClock`]: floodgate_core::ManualClock
//! [`StoreUnderTest::apply`]: crate::StoreUnderTest::apply

mod consume;
mod give_back;
mod keys;
mod penalty;
mod previous;
mod stated;
mod time;

use floodgate::Store;
use floodgate_core::ManualClock;

pub use consume::{
    check_consumes_only_when_allowed, denied_request_consumes_nothing_from_any_limit, peek_consumes_nothing,
    report_never_denies_and_consumes_past_the_limit,
    shadow_op_does_not_block_and_consumes_only_when_admitted,
};
pub use give_back::{concurrency_permit_release, refund_gives_back, reset_forgets_key};
pub use keys::keys_of_different_rules_are_independent;
pub use penalty::{
    a_peek_tells_of_the_box_without_closing_it, only_the_limits_that_deny_go_in_the_box,
    penalty_box_refuses_for_exactly_block_for_then_forgets,
};
pub use previous::a_quota_keeps_the_previous_period;
pub use stated::stated_limits_count_per_statement;
pub use time::{
    every_algorithm_retry_after_is_exact_through_the_store, reset_after_is_when_the_limit_is_full_again,
};

/// Runs the whole suite, one behaviour after the other, each on a store of its own from `make`.
///
/// # Panics
/// At the first behaviour the store gets wrong.
pub async fn run_all<S: Store>(make: impl Fn(ManualClock) -> S) {
    crate::conformance_tests!(@list run (&make));
}

/// Expands to one `#[tokio::test]` per behaviour of the suite, each building its store with the
/// factory given (an expression of type `impl Fn(ManualClock) -> S`, repeated in every test).
/// The calling crate needs `tokio` with the `macros` and `rt` features.
///
/// ```
/// use floodgate::{MemoryConfig, MemoryStore};
///
/// floodgate_testkit::conformance_tests!(|clock| MemoryStore::with_config(MemoryConfig::default(), clock));
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    // The one list of behaviours, for `run_all` and for the tests.
    (@list $kind:ident $make:tt) => {
        $crate::conformance_tests!(@$kind $make
            check_consumes_only_when_allowed
            peek_consumes_nothing
            report_never_denies_and_consumes_past_the_limit
            denied_request_consumes_nothing_from_any_limit
            shadow_op_does_not_block_and_consumes_only_when_admitted
            refund_gives_back
            concurrency_permit_release
            reset_forgets_key
            every_algorithm_retry_after_is_exact_through_the_store
            reset_after_is_when_the_limit_is_full_again
            keys_of_different_rules_are_independent
            penalty_box_refuses_for_exactly_block_for_then_forgets
            only_the_limits_that_deny_go_in_the_box
            a_peek_tells_of_the_box_without_closing_it
            stated_limits_count_per_statement
            a_quota_keeps_the_previous_period
        );
    };
    (@run ($make:expr) $($behaviour:ident)*) => {
        $( $crate::conformance::$behaviour($make).await; )*
    };
    (@test ($make:expr) $($behaviour:ident)*) => {
        $(
            #[tokio::test]
            async fn $behaviour() {
                $crate::conformance::$behaviour($make).await;
            }
        )*
    };
    ($make:expr) => {
        $crate::conformance_tests!(@list test ($make));
    };
}
