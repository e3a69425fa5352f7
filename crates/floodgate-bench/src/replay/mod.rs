//! Replaying access logs against a policy (DESIGN.md §13). Built so far: reading the log formats
//! ([`log`]); the `replay` scenario itself is not yet wired into the command line.

pub mod log;
