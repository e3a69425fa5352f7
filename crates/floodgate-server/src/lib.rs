//! The `floodgate` binary's library: configuration, the HTTP and gRPC front doors, admin, reload
//! and metrics.

pub mod config;
