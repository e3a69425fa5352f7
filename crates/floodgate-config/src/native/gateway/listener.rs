//! Where the gateway listens and whom it believes: `listen`, `trusted_proxies` and
//! `forwarded_header` (its `tls:` and `http:` are the listeners' own sections, read by
//! [`tls`](crate::tls) and [`http_server`](crate::http_server)).

use std::net::SocketAddr;

use ipnet::IpNet;

use crate::error::Invalid;
use crate::yaml::{Item, did_you_mean};

/// Which forwarding header the trusted proxies append to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded`.
    Forwarded,
}

/// `listen: 127.0.0.1:8000`.
pub(super) fn listen(item: Item<'_>) -> Result<SocketAddr, Invalid> {
    let text = item.text("an address such as 127.0.0.1:8000")?;
    text.parse().map_err(|_| {
        item.error(format!(
            "invalid listen address {}: expected IP:port, e.g. 127.0.0.1:8000",
            item.node.describe()
        ))
    })
}

/// `trusted_proxies: [10.0.0.0/8, 192.0.2.1]`: CIDRs or single addresses.
pub(super) fn trusted_proxies(item: Item<'_>) -> Result<Vec<IpNet>, Invalid> {
    let mut proxies = Vec::new();
    for cidr in item.elements("a list of CIDRs")? {
        let text = cidr.text("a CIDR such as 10.0.0.0/8")?;
        let net = text.parse::<IpNet>().or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from));
        proxies.push(net.map_err(|_| {
            cidr.error(format!(
                "invalid trusted proxy {}: expected a CIDR such as 10.0.0.0/8 or an IP address",
                cidr.node.describe()
            ))
        })?);
    }
    Ok(proxies)
}

/// `forwarded_header: x-forwarded-for | forwarded`, in any case.
pub(super) fn forwarded_header(item: Item<'_>) -> Result<ForwardedHeader, Invalid> {
    match item.str("x-forwarded-for or forwarded")?.to_ascii_lowercase().as_str() {
        "x-forwarded-for" => Ok(ForwardedHeader::XForwardedFor),
        "forwarded" => Ok(ForwardedHeader::Forwarded),
        other => Err(item.error(format!(
            "unknown forwarded_header {other:?}: expected x-forwarded-for or forwarded{}",
            did_you_mean(other, ["x-forwarded-for", "forwarded"])
        ))),
    }
}
