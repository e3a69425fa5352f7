//! Stores that wrap a store: the circuit breaker, on a manual clock, around real memory stores made
//! to fail or hang on command.

mod breaker;
