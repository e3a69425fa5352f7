//! The configuration loader: native and envoyproxy/ratelimit files, directories, every class of
//! bad input with its exact file, line, column and field, and the compiled policies exercised
//! through a real [`floodgate::Engine`] on a memory store and a manual clock.

mod calendars;
mod cost;
mod directory;
mod doubles;
mod envoy;
mod errors;
mod garbage;
mod gateway;
mod native;
mod partition_keys;
mod prefetch;
mod shards;

use std::path::PathBuf;

use floodgate::{Descriptors, Engine, MemoryConfig, MemoryStore, Policy, Verdict};
use floodgate_core::{ManualClock, Timestamp};

/// 2025-01-01T00:00:00Z: a UTC midnight, a Wednesday, and a whole second.
const START: Timestamp = Timestamp::from_secs(1_735_689_600);

/// A fixture file or directory.
fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/config/fixtures").join(name)
}

type TestEngine = Engine<MemoryStore<ManualClock>>;

/// An engine applying `policy` over a fresh memory store on a manual clock stopped at [`START`].
fn engine(policy: Policy) -> (TestEngine, ManualClock) {
    let clock = ManualClock::new(START);
    let store = MemoryStore::with_config(MemoryConfig::default(), clock.clone());
    (Engine::new(policy, store), clock)
}

/// Descriptors from `(name, value)` pairs.
fn request(pairs: &[(&'static str, &str)]) -> Descriptors {
    pairs.iter().map(|(n, v)| (*n, v.to_string())).collect()
}

/// Checks `descriptors` `n` times at cost 1 and returns how many were allowed, and the last verdict.
async fn hammer(engine: &TestEngine, descriptors: &Descriptors, n: usize) -> (usize, Verdict) {
    let mut allowed = 0;
    let mut last = Verdict::default();
    for _ in 0..n {
        last = engine.check(descriptors, 1).await.expect("a possible request");
        allowed += usize::from(last.allowed);
    }
    (allowed, last)
}
