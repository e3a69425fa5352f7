//! A gateway request's descriptors: `ip` (the forwarding header walked from the right past the
//! trusted proxies, by [`ClientIp`]), `route` (the matched template, as
//! `floodgate_tower::route_template` writes it), `method`, the `header.<name>` descriptors the rules use, and once
//! the identity is known `user`, `tenant`, `plan` and `authenticated`.

use std::net::{IpAddr, SocketAddr};

use floodgate::{Descriptors, Policy};
use floodgate_tower::ClientIp;
use http::HeaderName;
use http::request::Parts;

/// The `header.<name>` descriptors the rules of `policy` use (in their keys, conditions, varying
/// limits or quota calendars), with their headers: only these are read from a request.
pub(super) fn header_descriptors(policy: &Policy) -> Vec<(HeaderName, String)> {
    let mut found: Vec<(HeaderName, String)> = Vec::new();
    for rule in policy.rules() {
        let keys = rule.key_descriptors().iter().map(String::as_str);
        let conditions = rule.conditions().iter().map(|(d, _)| d.as_str());
        for name in keys.chain(conditions).chain(rule.varies_by()).chain(rule.calendar_descriptors()) {
            let Some(header) = name.strip_prefix("header.") else { continue };
            let Ok(header) = HeaderName::from_bytes(header.as_bytes()) else { continue };
            if !found.iter().any(|(_, d)| d == name) {
                found.push((header, name.to_owned()));
            }
        }
    }
    found
}

/// `ip`'s text, as [`IpAddr`]'s `Display` writes it: an IPv4 address written octet by octet (the
/// formatting machinery costs more than the rest of the descriptors together).
pub(super) fn ip_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let mut text = String::with_capacity(15);
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text.push('.');
                }
                text.push_str(itoa::Buffer::new().format(octet));
            }
            text
        }
        IpAddr::V6(_) => ip.to_string(),
    }
}

/// The descriptors known before the identity: `ip`, `route` (the method and the matched
/// `template`), `method` and the headers.
pub(super) fn before_identity(
    parts: &Parts,
    template: &str,
    peer: SocketAddr,
    client_ip: &ClientIp,
    headers: &[(HeaderName, String)],
) -> Descriptors {
    // Room for these three, the headers, and the identity's four (`user`, `tenant`, `plan`,
    // `authenticated`) without growing.
    let mut descriptors = Descriptors::with_capacity(3 + headers.len() + 4);
    descriptors.insert("ip", ip_text(client_ip.resolve_from(peer.ip(), &parts.headers)));
    let method = parts.method.as_str();
    let mut route = String::with_capacity(method.len() + 1 + template.len());
    route.push_str(method);
    route.push(' ');
    route.push_str(template);
    descriptors.insert("route", route);
    descriptors.insert("method", method.to_owned());
    for (header, descriptor) in headers {
        if let Some(value) = parts.headers.get(header) {
            // Bytes that are not UTF-8 are replaced rather than dropping the descriptor: a client
            // cannot escape a per-header limit with an unreadable value.
            descriptors.insert(descriptor.clone(), String::from_utf8_lossy(value.as_bytes()).into_owned());
        }
    }
    descriptors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_written_as_display_writes_it() {
        for ip in [
            "0.0.0.0",
            "255.255.255.255",
            "10.0.0.1",
            "192.168.100.7",
            "1.20.255.9",
            "::1",
            "2001:db8::8a2e:370:7334",
            "::ffff:10.0.0.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_text(ip), ip.to_string());
        }
    }
}
