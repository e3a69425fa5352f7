//! A client of [Floodgate](https://github.com/floodgate-rs/floodgate)'s HTTP API: `check`, `peek`
//! and `report` over keep-alive HTTP/1.1 connections (hyper), plain or TLS (rustls), with
//!
//! - a **deadline** on every call (default 50 ms);
//! - a **fail mode** for a check without a verdict — service down, late or failing —
//!   ([`FailMode::Open`] allows, [`FailMode::Closed`] denies with a `Retry-After`), counted in
//!   [`Client::stats`];
//! - a **circuit breaker** ([`ClientBuilder::breaker`], on by default): after 10 failures in a row
//!   (no answer, a deadline missed, a 5xx) it opens, and for 2 s calls are not sent — the fail
//!   mode decides at once ([`FailureReason::BreakerOpen`]); then one probe is sent, whose success
//!   closes it and whose failure opens it again. Its transitions are counted in [`Stats`];
//! - **safe retries** ([`Client::retry`]): at most `attempts` retries with exponential backoff and
//!   full jitter, only of calls that surely did not run (a refused connection, a 429, waiting at
//!   least its `Retry-After`); never a deadline miss, whose outcome is unknown, unless the call is
//!   idempotent;
//! - a **retry budget** ([`ClientBuilder::retry_budget`], on by default) over those retries and
//!   those of commit and release: at most 10 % of the calls of the last 10 s, plus 1 a second, so
//!   that a failing service is not sent a wave of retries on top of its traffic.
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
//! use floodgate_client::{BreakerConfig, Client, FailMode, Request, RetryBudgetConfig, RetryPolicy};
//!
//! let floodgate = Client::builder(url) // e.g. "http://127.0.0.1:8080"
//!     .deadline(Duration::from_millis(50))
//!     .fail_mode(FailMode::Open)
//!     .breaker(BreakerConfig { consecutive_failures: 5, open_for: Duration::from_secs(5), ..Default::default() })
//!     .retry_budget(RetryBudgetConfig { ratio: 0.2, ..Default::default() })
//!     .build()?;
//! let request = Request::new().descriptor("user", "u1").descriptor("route", "POST /chat");
//! let decision = floodgate.check(&request).await?;
//! if !decision.allowed {
//!     println!("retry in {} s", decision.retry_after_secs().unwrap_or(1));
//! }
//! // Tokens known once the answer is done; retried only if the connection was refused, and as the
//! // retry budget allows.
//! let usage = Request::new().descriptor("user", "u1").cost(2);
//! floodgate.retry(RetryPolicy::default(), |_| floodgate.report(&usage)).await?;
//! println!("{:?}", floodgate.stats());
//! # Ok(()) }
//! ```
//!
//! **TLS**: an `https://` URL needs the CA bundle the server's certificate chains to
//! ([`ClientBuilder::tls_ca`]); [`ClientBuilder::tls_client_cert`] presents a client certificate
//! to a server that requires one (mutual TLS). The files are read and checked by
//! [`ClientBuilder::build`] ([`Error::Config`] names the setting and the file); a handshake that
//! fails later is [`FailureReason::Tls`], its message saying why (a server certificate the bundle
//! does not verify, a client certificate the server requires or refused).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let certs = floodgate_testkit::tls::TestCerts::generate();
//! # let yaml = format!(
//! #     "tls: {{cert: {}, key: {}, client_ca: {}}}\nstore: {{kind: memory}}\nrules: [{{name: per-user, key: [user], algorithm: fixed_window, limit: 5, window: 60s}}]\n",
//! #     certs.server_cert().display(), certs.server_key().display(), certs.ca().display(),
//! # );
//! # let app = floodgate_app::App::new(floodgate_config::parse("doc.yaml", &yaml)?, Default::default())?;
//! # let server = floodgate_server::Server::new(app, tokio::net::TcpListener::bind("127.0.0.1:0").await?, None)?;
//! # let url = format!("https://localhost:{}", server.http_addr().port());
//! # let (ca, cert, key) = (certs.ca(), certs.client_cert(), certs.client_key());
//! # tokio::spawn(server.run(std::future::pending()));
//! use std::time::Duration;
//! use floodgate_client::{Client, Pem, Request};
//!
//! let floodgate = Client::builder(url) // e.g. "https://floodgate.internal:8443"
//!     .deadline(Duration::from_secs(1))
//!     .tls_ca(Pem::file(ca)) // e.g. "/etc/floodgate/tls/ca.pem"
//!     .tls_client_cert(Pem::file(cert), Pem::file(key))
//!     .build()?;
//! # // A debug build's first call (its TLS handshake, the server's first request) may take longer
//! # // than the deadline on a busy machine: made once here, with time to spare.
//! # floodgate.peek(&Request::new().deadline(Duration::from_secs(30))).await?;
//! let decision = floodgate.check(&Request::new().descriptor("user", "u1")).await?;
//! assert!(decision.allowed && decision.failure.is_none());
//! # Ok(()) }
//! ```
//!
//! Costs per dimension ([`Request::costs`]: requests and tokens in one call), reservations
//! ([`Client::reserve`] → a [`Reservation`] guard: [`commit`](Reservation::commit) the actual cost,
//! or [`release`](Reservation::release); dropped unsettled, it is released by a task spawned on the
//! current Tokio runtime — outside one, nothing is sent and the estimate stays charged), and
//! [`Client::usage`]. [`Client::commit`] and [`Client::release`] are idempotent on the server, so
//! an attempt that got no answer is retried (twice at most, within the retry budget); 404 and 409
//! are [`Error::NotFound`] and [`Error::ReservationSettled`].
//!
//! The breaker's open time and the budget's window are read from a
//! [`Clock`](floodgate_core::Clock) ([`ClientBuilder::clock`]), so that tests move them by hand.
//!
//! Feature `grpc`: [`grpc::RlsClient`], Envoy's rate limit service (RLS v3) over gRPC, with the
//! same deadline, fail mode and counters (no breaker, budget or TLS).
//!
//! The tests (`tests/client`) run against the real server, started in the test process: the
//! breaker against a stopped and a black-holed server, the budget against a stopped server and one
//! answering 503, TLS and mutual TLS against the server's TLS listener.

mod breaker;
mod budget;
mod builder;
mod client;
mod clock;
mod decision;
mod error;
mod reservation;
mod retry;
mod stats;
mod tls;

#[cfg(feature = "grpc")]
pub mod grpc;

pub use budget::RetryBudgetConfig;
pub use builder::ClientBuilder;
pub use client::Client;
pub use decision::{Decision, FailMode, LimitStatus, Request};
pub use error::{Error, FailureReason};
pub use floodgate::breaker::{BreakerConfig, BreakerState};
pub use reservation::{PreviousPeriod, Reservation, Reserved, Settled, Usage};
pub use retry::{RetryPolicy, Retryable, retry};
pub use stats::Stats;
pub use tls::Pem;
