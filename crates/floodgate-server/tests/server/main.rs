//! The `floodgate` service end to end: the real server on port 0, driven over HTTP and gRPC, and
//! the real binary for exit codes, signals and graceful shutdown.

mod admin;
mod admin_state;
mod api;
mod auth;
mod bad_input;
mod binary;
mod calendars;
mod clock;
mod costs;
mod dashboard;
mod durability;
mod grpc;
mod headers;
mod limits;
mod metrics;
mod openapi;
mod plans;
mod redis;
mod reload;
mod reservations;
mod rlqs;
mod simulate;
mod stated;
mod support;
mod survival;
mod tls;
mod usage;
