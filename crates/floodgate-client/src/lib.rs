//! A client of [Floodgate](https://github.com/floodgate-rs/floodgate)'s HTTP API: `check`, `peek`
//! and `report` over keep-alive HTTP/1.1 connections (hyper), with
//!
//! - a **deadline** on every call (default 50 ms);
//! - a **fail mode** for a check without a verdict — service down, late or failing —
//!   ([`FailMode::Open`] allows, [`FailMode::Closed`] denies with a `Retry-After`), counted in
//!   [`Client::stats`];
//! - **safe retries** ([`retry`]): at most `attempts` retries with exponential backoff and full
//!   jitter, only of calls that surely did not run (a refused connection, a 429, waiting at least
//!   its `Retry-After`); never a deadline miss, whose outcome is unknown, unless the call is
//!   idempotent.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let yaml = "store: {kind: memory}\nrules: [{name: per-user, key: [user], algorithm: fixed_window, limit: 5, window: 60s}]\n";
//! # let app = floodgate_app::App::new(floodgate_config::parse("doc.yaml", yaml)?, Default::default())?;
//! # let server = floodgate_server::Server::new(app, tokio::net::TcpListener::bind("127.0.0.1:0").await?, None)?;
//! # let url = format!("http://{}", server.http_addr());
//! # tokio::spawn(server.run(std::future::pending()));
//! use std::time::Duration;
//! use floodgate_client::{Client, FailMode, Request, RetryPolicy, retry};
//!
//! let floodgate = Client::builder(url) // e.g. "http://127.0.0.1:8080"
//!     .deadline(Duration::from_millis(50))
//!     .fail_mode(FailMode::Open)
//!     .build()?;
//! let request = Request::new().descriptor("user", "u1").descriptor("route", "POST /chat");
//! let decision = floodgate.check(&request).await?;
//! if !decision.allowed {
//!     println!("retry in {} s", decision.retry_after_secs().unwrap_or(1));
//! }
//! // Tokens known once the answer is done; retried only if the connection was refused.
//! let usage = Request::new().descriptor("user", "u1").cost(2);
//! retry(RetryPolicy::default(), |_| floodgate.report(&usage)).await?;
//! println!("{:?}", floodgate.stats());
//! # Ok(()) }
//! ```
//!
//! Costs per dimension ([`Request::costs`]: requests and tokens in one call), reservations
//! ([`Client::reserve`] → a [`Reservation`] guard: [`commit`](Reservation::commit) the actual cost,
//! or [`release`](Reservation::release); dropped unsettled, it is released by a task spawned on the
//! current Tokio runtime — outside one, nothing is sent and the estimate stays charged), and
//! [`Client::usage`]. [`Client::commit`] and [`Client::release`] are idempotent on the server, so
//! an attempt that got no answer is retried (twice at most); 404 and 409 are
//! [`Error::NotFound`] and [`Error::ReservationSettled`].
//!
//! Feature `grpc`: [`grpc::RlsClient`], Envoy's rate limit service (RLS v3) over gRPC, with the
//! same deadline, fail mode and counters.
//!
//! The tests (`tests/client`) run against the real server, started in the test process.

mod client;
mod decision;
mod error;
mod reservation;
mod retry;

#[cfg(feature = "grpc")]
pub mod grpc;

pub use client::{Client, ClientBuilder, Stats};
pub use decision::{Decision, FailMode, LimitStatus, Request};
pub use error::{Error, FailureReason};
pub use reservation::{Reservation, Reserved, Settled, Usage};
pub use retry::{RetryPolicy, Retryable, retry};
