//! Test support for Floodgate: the **store conformance suite** that every [`Store`] backend runs.
//!
//! The suite is a set of generic async functions over `S: Store` (see [`conformance`]). Each one
//! builds a fresh store around a [`ManualClock`] with the factory it is given, drives it through
//! [`Store::apply`], [`Store::refund`] and [`Store::reset`] with keys it encodes itself, moves time
//! only through that clock, and panics with a message naming the algorithm and the step when the
//! store breaks the contract of `DESIGN.md` §2 (all-or-nothing, exact `retry_after`, reports that
//! never deny, shadow limits that never block…).
//!
//! A store under test must read its time from the clock it is built with (a Redis store takes an
//! explicit test clock for this), so that every decision is deterministic.
//!
//! ```
//! use floodgate::{MemoryConfig, MemoryStore};
//! use floodgate_testkit::conformance;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let memory = |clock| MemoryStore::with_config(MemoryConfig::default(), clock);
//! // One behaviour at a time…
//! conformance::check_consumes_only_when_allowed(memory).await;
//! conformance::every_algorithm_retry_after_is_exact_through_the_store(memory).await;
//! // …or the whole suite in one call: `conformance::run_all(memory).await`.
//! # });
//! ```
//!
//! In a test binary, [`conformance_tests!`] expands to one `#[tokio::test]` per behaviour, so a
//! failure names the behaviour that broke (the binary needs `tokio` with the `macros` and `rt`
//! features).
//!
//! The building blocks are public too, for store-specific tests: [`TestKey`] encodes distinct keys
//! the way the engine does, [`StoreUnderTest`] wraps a store and its clock with one-op helpers, and
//! [`every_algorithm`] gives one limit of each of the seven algorithms. [`redis`] starts real
//! `redis-server` processes (TLS ones on certificates from [`tls`]), each held by a watchdog from
//! [`process`], which also hands out free loopback ports ([`process::free_port`]).
//! [`CountingStore`] wraps a real store and counts the calls made to it (round trips per request).
//! With the `rlqs` feature, [`rlqs`] is a simulated Envoy `rate_limit_quota` filter.
//! [`wait`] is how a test waits: for an event, with a clock only as a guard against a hang.
//!
//! [`Store`]: floodgate::Store
//! [`Store::apply`]: floodgate::Store::apply
//! [`Store::refund`]: floodgate::Store::refund
//! [`Store::reset`]: floodgate::Store::reset
//! [`ManualClock`]: floodgate_core::ManualClock

pub mod conformance;
mod counting;
mod flaky;
pub mod process;
pub mod redis;
#[cfg(feature = "rlqs")]
pub mod rlqs;
mod subject;
pub mod tls;
pub mod wait;

pub use counting::{Calls, CountingStore};
pub use flaky::{Behaviour, FlakyStore, Lost};
pub use subject::{START, StoreUnderTest, TestKey, every_algorithm};
