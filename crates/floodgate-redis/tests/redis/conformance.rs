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
