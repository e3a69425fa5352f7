//! Errors of the layer's configuration.

/// A trusted proxy that is neither a CIDR nor an IP address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid trusted proxy {value:?}: expected a CIDR such as 10.0.0.0/8 or an IP address")]
pub struct InvalidProxy {
    /// The value given.
    pub value: String,
    /// Why it does not parse as a CIDR.
    #[source]
    pub source: ipnet::AddrParseError,
}
