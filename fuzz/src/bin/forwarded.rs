#![cfg_attr(fuzzing, no_main)]
//! Fuzz target: the client address behind trusted proxies (`floodgate_tower::ClientIp`), from
//! `X-Forwarded-For` or `Forwarded` header lines, seeded with the forms proxies write.
//!
//! Input: the first byte picks the header (bit 0) and the TCP peer (bits 1–2: a trusted proxy
//! over IPv4 or IPv6, or an untrusted address); the rest, split at newlines, is the header's lines.
//!
//! Properties: no header panics; from an untrusted peer the headers are ignored; and what a
//! client writes to the left of the chain never changes the answer once the walk has stopped at
//! an untrusted address — the spoofing a client can attempt.

use std::net::IpAddr;

use floodgate_tower::{ClientIp, ProxyHeader};
use http::{HeaderMap, HeaderName, HeaderValue};

const TRUSTED: [&str; 3] = ["10.0.0.0/8", "fd00::/8", "192.0.2.0/24"];

floodgate_fuzz::fuzz_target!(|data| {
    let Some((&first, rest)) = data.split_first() else { return };
    let (header, name, spoof) = if first & 1 == 0 {
        (ProxyHeader::XForwardedFor, "x-forwarded-for", "6.6.6.6, ")
    } else {
        (ProxyHeader::Forwarded, "forwarded", "for=6.6.6.6, ")
    };
    let peer: IpAddr = match (first >> 1) & 3 {
        0 => "10.1.2.3".parse().unwrap(),
        1 => "fd00::1".parse().unwrap(),
        _ => "198.51.100.7".parse().unwrap(),
    };
    let client_ip = ClientIp::new().try_trust(TRUSTED).unwrap().header(header);
    let name = HeaderName::from_static(name);
    let lines: Vec<&[u8]> = rest.split(|b| *b == b'\n').take(8).collect();
    let mut headers = HeaderMap::new();
    for line in &lines {
        let Ok(value) = HeaderValue::from_bytes(line) else { return };
        headers.append(name.clone(), value);
    }

    let client = client_ip.resolve_from(peer, &headers);
    if !client_ip.is_trusted(peer) {
        assert_eq!(client, peer, "headers believed from an untrusted peer");
        return;
    }
    if client_ip.is_trusted(client) {
        return;
    }
    // The walk stopped at `client`, an untrusted address: whatever stands left of it was never
    // read, so a client prepending to the first line, or sending a line of its own first,
    // changes nothing.
    let mut prefixed = HeaderMap::new();
    for (i, line) in lines.iter().enumerate() {
        let value = if i == 0 { [spoof.as_bytes(), line].concat() } else { line.to_vec() };
        let Ok(value) = HeaderValue::from_bytes(&value) else { return };
        prefixed.append(name.clone(), value);
    }
    assert_eq!(client_ip.resolve_from(peer, &prefixed), client, "a spoofed prefix changed the client");
    let mut extra = HeaderMap::new();
    extra.append(name.clone(), HeaderValue::from_str(spoof.trim_end_matches([',', ' '])).unwrap());
    for value in headers.get_all(&name) {
        extra.append(name.clone(), value.clone());
    }
    assert_eq!(client_ip.resolve_from(peer, &extra), client, "a spoofed first line changed the client");
});
