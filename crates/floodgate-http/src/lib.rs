//! Floodgate's HTTP vocabulary, shared by every front door — the tower layer, the HTTP check API,
//! Envoy RLS gRPC and the gateway — so that they all say the same thing the same way:
//!
//! - [`headers`]: a [`Verdict`](floodgate::Verdict) as rate-limit headers (IETF draft
//!   `RateLimit-Policy`/`RateLimit`, legacy `X-RateLimit-*`, `Retry-After`) and the
//!   `floodgate-tag` header;
//! - [`problem`]: RFC 9457 `application/problem+json` bodies, with stable `type` URIs;
//! - [`wire`]: the JSON request body of the check API, read with precise errors, and the verdict
//!   as JSON;
//! - [`envoy`]: how an Envoy descriptor's entries become descriptors;
//! - `openapi` (feature `openapi`): the OpenAPI 3.1 schemas of all of the above, for a front
//!   door's document.
//!
//! The engine crate (`floodgate`) knows none of this: it decides, this crate says it.
//!
//! ```
//! use floodgate_http::{HeaderStyle, Problem, rate_limit_headers};
//! use floodgate_http::wire::{CheckRequest, VerdictBody};
//!
//! let request = CheckRequest::parse(br#"{"descriptors": {"user": "u1"}}"#)?;
//! assert_eq!(request.cost, 1);
//! # let verdict = floodgate::Verdict { allowed: true, ..Default::default() };
//! // let verdict = engine.check(&request.descriptors, request.cost).await?;
//! let mut headers = http::HeaderMap::new();
//! rate_limit_headers(&verdict, HeaderStyle::Both, &mut headers);
//! let body = VerdictBody::from(&verdict).to_json();
//! assert!(Problem::from_verdict(&verdict).is_none(), "allowed: no 429 body");
//! # let _ = body;
//! # Ok::<(), Problem>(())
//! ```

pub mod envoy;
pub mod headers;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod problem;
pub mod wire;

#[cfg(test)]
mod tests;

pub use headers::{
    Answer, DEGRADE_HEADER, HeaderStyle, ParseHeaderStyleError, RateLimitLines, TAG_HEADER, degrade_header,
    rate_limit_headers, tag_header,
};
pub use problem::{PROBLEM_CONTENT_TYPE, Problem, limited_answer, limited_response};
pub use wire::ceil_ms;
