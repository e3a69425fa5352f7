//! A gateway request's descriptors: `ip` (the forwarding header walked from the right past the
//! trusted proxies, by [`ClientIp`]), `route` (the matched template, as
//! `floodgate_tower::route_template` writes it), `method`, the `header.<name>` descriptors the rules use, and once
//! the identity is known `user`, `tenant`, `plan` and `authenticated`.

use std::net::SocketAddr;

use floodgate::{Descriptors, Policy};
use floodgate_tower::{ClientIp, push_ip, push_route};
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
    // Each value written in place, into the one string the descriptors keep their values in.
    let ip = client_ip.resolve_from(peer.ip(), &parts.headers);
    descriptors.insert_with("ip", |v| push_ip(v, ip));
    descriptors.insert_with("route", |v| push_route(v, &parts.method, template));
    descriptors.insert("method", parts.method.as_str());
    for (header, descriptor) in headers {
        if let Some(value) = parts.headers.get(header) {
            // Bytes that are not UTF-8 are replaced rather than dropping the descriptor: a client
            // cannot escape a per-header limit with an unreadable value.
            descriptors.insert(descriptor.clone(), String::from_utf8_lossy(value.as_bytes()));
        }
    }
    descriptors
}
