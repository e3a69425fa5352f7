//! `http:`: the HTTP listener's limits against slow and hostile clients (DESIGN.md §12): how long
//! a client may take to send a request's headers, how long a connection may sit idle, how many
//! connections are open at once, and how large a request's headers may be.
//!
//! ```yaml
//! http:
//!   header_read_timeout: 10s
//!   idle_timeout: 60s
//!   max_connections: 10000
//!   max_header_bytes: 16384
//! ```
//!
//! Each applies to connections accepted after it is in force: a reload changes it without a restart.

use std::time::Duration;

use super::positive_duration;
use crate::error::Invalid;
use crate::yaml::Item;

/// The HTTP listener's limits. `Default`: 10 s to send headers, 60 s idle, 10 000 connections, 16 KiB
/// of headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpConfig {
    /// How long a client may take to send a request's headers (HTTP/1), from the connection's
    /// start or the previous response; the connection is closed after it (default 10 s).
    pub header_read_timeout: Duration,
    /// How long a connection may stay without a byte read or written before it is closed
    /// (default 60 s).
    pub idle_timeout: Duration,
    /// The most connections open at once; one more is closed as soon as it is accepted (default
    /// 10 000).
    pub max_connections: usize,
    /// The largest request head: request line and headers (HTTP/1: 431 beyond), or header list
    /// (HTTP/2) (default 16 KiB, at least 8 KiB).
    pub max_header_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            max_header_bytes: 16 * 1024,
        }
    }
}

/// The smallest `max_header_bytes`: HTTP/1's read buffer is never smaller.
pub const MIN_HEADER_BYTES: usize = 8 * 1024;

const FIELDS: &[&str] = &["header_read_timeout", "idle_timeout", "max_connections", "max_header_bytes"];

/// Validates the `http` section.
pub(crate) fn compile(item: Item<'_>) -> Result<HttpConfig, Invalid> {
    let fields = item.fields("the HTTP listener's limits", Some(FIELDS))?;
    let mut config = HttpConfig::default();
    if let Some(t) = fields.get("header_read_timeout") {
        config.header_read_timeout = positive_duration(t, "header_read_timeout")?;
    }
    if let Some(t) = fields.get("idle_timeout") {
        config.idle_timeout = positive_duration(t, "idle_timeout")?;
    }
    if let Some(m) = fields.get("max_connections") {
        let n = m.u64_at_least("max_connections", 1)?;
        config.max_connections = usize::try_from(n).map_err(|_| m.error("max_connections is too large"))?;
    }
    if let Some(m) = fields.get("max_header_bytes") {
        let n = m.u64_at_least("max_header_bytes", MIN_HEADER_BYTES as u64)?;
        config.max_header_bytes = usize::try_from(n).map_err(|_| m.error("max_header_bytes is too large"))?;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse_document;

    fn compile_text(text: &str) -> Result<HttpConfig, Invalid> {
        let root = parse_document(text).expect("valid YAML");
        compile(Item::root(&root))
    }

    #[test]
    fn every_limit_is_read_and_the_rest_default() {
        let c = compile_text("header_read_timeout: 2s\nmax_connections: 5\n").unwrap();
        assert_eq!(c.header_read_timeout, Duration::from_secs(2));
        assert_eq!(c.max_connections, 5);
        assert_eq!(c.idle_timeout, HttpConfig::default().idle_timeout);
        assert_eq!(c.max_header_bytes, 16 * 1024);
    }

    #[test]
    fn bad_limits_are_refused_at_their_line() {
        for (text, needle) in [
            ("header_read_timeout: 0s\n", "longer than 0"),
            ("idle_timeout: soon\n", "invalid idle_timeout"),
            ("max_connections: 0\n", "at least 1"),
            ("max_header_bytes: 100\n", "at least 8192"),
            ("max_conections: 5\n", "did you mean"),
        ] {
            let e = compile_text(text).unwrap_err();
            assert_eq!(e.line, Some(1), "{text}: {e:?}");
            assert!(e.message.contains(needle), "{text}: {e:?}");
        }
    }
}
