//! Floodgate's engine: rules, collision-free keys, all-or-nothing checks over a [`Store`], and the
//! embedded [`MemoryStore`]. It knows no protocol: the rate-limit headers, problem bodies and JSON
//! wire types every front door sends live in `floodgate-http`.
//!
//! Descriptors (dimension → value) and a cost go in; the [`Engine`] finds the rules that apply,
//! builds their keys, asks the store to apply all their limits at once, and returns a [`Verdict`].
//! A request may carry several descriptor sets ([`Hit`]s, as Envoy sends them): they too go to
//! the store in one call, all-or-nothing ([`Policy::evaluate`]).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use std::num::NonZeroU64;
//! use std::time::Duration;
//! use floodgate::{Descriptors, Engine, Policy, Rule};
//! use floodgate_core::{FixedWindow, SlidingWindow};
//!
//! let policy = Policy::new([
//!     Rule::new("chat-per-user", SlidingWindow::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(60))?)
//!         .when("route", "POST /chat")
//!         .key(["user"]),
//!     Rule::new("tenant-hourly", FixedWindow::try_new(NonZeroU64::new(1000).unwrap(), Duration::from_secs(3600))?)
//!         .key(["tenant"]),
//! ])?;
//! let engine = Engine::in_memory(policy);
//! let request = Descriptors::new().with("route", "POST /chat").with("user", "u1").with("tenant", "t1");
//! for _ in 0..10 {
//!     assert!(engine.check(&request, 1).await?.allowed);
//! }
//! let verdict = engine.check(&request, 1).await?;
//! assert!(!verdict.allowed);
//! // Denied by the user limit; the tenant limit was not charged for it.
//! assert_eq!(verdict.limits[1].decision.remaining, 990);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # What lives where
//!
//! - [`Engine`] (`engine`): the façade: the policy in force, replaceable while requests run, over a
//!   store; [`EngineError`] for a request that can never pass.
//! - [`Policy`] (`policy`): the rules compiled once, and how a request of one or more [`Hit`]s is
//!   planned into store ops, decided in one store call, read back into a verdict, and given back.
//! - [`Rule`] (`rule`): which requests a limit applies to (conditions, patterns, variants by a
//!   descriptor), which descriptors make its key, and what happens on denial.
//! - [`Verdict`] (`verdict`): the answer, limit by limit ([`LimitOutcome`], [`Outcome`]).
//! - [`Descriptors`], [`Costs`] ([`cost`]), [`Limit`], [`CalendarBy`], [`IpPrefix`]: what a request
//!   is and what it costs, what a rule applies, a quota's calendar read from descriptors, client
//!   addresses grouped by network.
//! - [`key`]: the collision-free encoding of the keys a store sees; [`partition`]: the keyed hash
//!   of a key that a front door may show as a partition key.
//! - [`doubles`]: whether a limit's arithmetic stays exact in doubles
//!   ([`Limit::exact_in_doubles`]), the range of a store that computes in them (Redis's Lua).
//! - [`store`]: the [`Store`] trait and the reservation records every store keeps
//!   ([`Records`](store::Records)), the embedded [`MemoryStore`], and the stores that wrap a store
//!   ([`Breaker`](store::Breaker), [`Fallback`](store::Fallback), [`Prefetch`](store::Prefetch)),
//!   which pass the record calls through ([`Wraps`](store::Wraps)).
//! - [`stated`]: limits, windows and block durations a request states for a rule that takes them.
//! - [`reservation`]: reserve an estimate now, settle it later; [`usage`]: what a rule's counter
//!   holds; [`delay`]: waiting for capacity; [`breaker`]: the circuit breaker's state machine.

pub mod breaker;
mod calendar;
pub mod cost;
pub mod delay;
mod descriptors;
pub mod doubles;
mod engine;
mod ip;
pub mod key;
mod limit;
pub mod partition;
mod policy;
pub mod reservation;
mod rule;
pub mod stated;
pub mod store;
pub mod usage;
mod verdict;

pub use calendar::{CalendarBy, FromDescriptor};
pub use cost::Costs;
pub use descriptors::{Descriptors, ValueWriter};
pub use engine::{Engine, EngineError};
pub use floodgate_core as core;
pub use ip::{IpPrefix, NotAnAddress};
pub use limit::{Limit, LimitKind};
pub use partition::{PartitionKey, PartitionKeys, PartitionSecretError};
pub use policy::{Hit, Impossible, Policy};
pub use reservation::{
    Charge, Charges, Reservation, ReserveError, Reserved, SettleError, Settled, Settlement,
};
pub use rule::{Action, ByDescriptor, Condition, OnStoreError, Pattern, Rule, RuleError};
pub use stated::{Statable, Stated, StatedError};
pub use store::{MemoryConfig, MemoryStore, Mode, OnFull, Store, StoreError};
pub use usage::{Previous, Usage, UsageError};
pub use verdict::{INLINE_LIMITS, LimitOutcome, Limits, Outcome, Verdict};
