//! The store conformance suite, on a test clock: the same tests the memory store passes.

mod node {
    floodgate_testkit::conformance_tests!({
        let store = crate::node_store().await;
        move |clock| store.with_clock(clock)
    });
}

mod cluster {
    floodgate_testkit::conformance_tests!({
        let store = crate::cluster_store().await;
        move |clock| store.with_clock(clock)
    });
}

/// The Redis store inside [`Prefetch`](floodgate::store::Prefetch): a check without a
/// prefetching rule is the store's own, so the suite passes through it.
mod prefetch {
    floodgate_testkit::conformance_tests!({
        let store = crate::node_store().await;
        move |clock: floodgate::core::ManualClock| {
            floodgate::store::Prefetch::new(store.with_clock(clock.clone()), clock)
        }
    });
}
