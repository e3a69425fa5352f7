//! The engine over a memory store on a manual clock: rules, actions, costs, reloads, store failures,
//! and a model of the whole engine built from the bare algorithms.

mod actions;
mod budget;
mod calendars;
mod cost;
mod dimensions;
mod failure;
mod hits;
mod ip_prefix;
mod matching;
mod model;
mod partition;
mod protocol_free;
mod reload;
mod requests;
mod reservations;
mod usage;
mod variants;

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Descriptors, Engine, Limit, MemoryConfig, MemoryStore, Policy, Rule};
use floodgate_core::{FixedWindow, ManualClock, SlidingWindow};
use floodgate_testkit::START;

type TestEngine = Engine<MemoryStore<ManualClock>>;

/// An engine applying `rules` over a memory store with `config`, on a manual clock stopped at
/// [`START`] (a UTC midnight).
fn engine_with(config: MemoryConfig, rules: impl IntoIterator<Item = Rule>) -> (TestEngine, ManualClock) {
    let clock = ManualClock::new(START);
    let store = MemoryStore::with_config(config, clock.clone());
    (Engine::new(Policy::new(rules).expect("a valid policy"), store), clock)
}

/// [`engine_with`] the default memory store settings.
fn engine(rules: impl IntoIterator<Item = Rule>) -> (TestEngine, ManualClock) {
    engine_with(MemoryConfig::default(), rules)
}

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

/// `limit` a minute, in fixed windows.
fn per_minute(limit: u64) -> Limit {
    FixedWindow::try_new(nz(limit), Duration::from_secs(60)).expect("a valid window").into()
}

/// `limit` per sliding `window`.
fn sliding(limit: u64, window: Duration) -> Limit {
    SlidingWindow::try_new(nz(limit), window).expect("a valid window").into()
}

/// Descriptors from `(name, value)` pairs.
fn request(pairs: &[(&'static str, &str)]) -> Descriptors {
    pairs.iter().map(|(n, v)| (*n, v.to_string())).collect()
}
