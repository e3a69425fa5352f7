//! Stores that wrap a store: the circuit breaker and the local fallback, on a manual clock, around real memory stores made
//! to fail or hang on command.

mod breaker;
mod fallback;
mod prefetch;
