//! Descriptor extractors: how a request becomes [`Descriptors`].
//!
//! An [`Extractor`] reads one descriptor from the request head ([`Parts`]): the client IP
//! ([`ClientIp`], with trusted proxies), a header, the route template, the method, or anything a
//! closure computes. When an extractor finds nothing, the descriptor is absent, and the rules whose
//! key or conditions need it do not apply to the request.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::ControlFlow;
use std::sync::Arc;

use axum::extract::{ConnectInfo, MatchedPath};
use floodgate::Descriptors;
use http::header::{FORWARDED, HeaderName};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method};
use ipnet::IpNet;

use crate::error::InvalidProxy;

/// `X-Forwarded-For`.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

type DescriptorFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Reads one descriptor from a request.
///
/// ```
/// use floodgate_tower::{ClientIp, Extractor};
/// use http::HeaderName;
///
/// let extractors = [
///     Extractor::client_ip(ClientIp::new().try_trust(["10.0.0.0/8"])?),
///     Extractor::header(HeaderName::from_static("x-user-id"), "user"),
///     Extractor::route(),
///     Extractor::method(),
///     Extractor::from_fn("api_key", |parts| {
///         let auth = parts.headers.get("authorization")?.to_str().ok()?;
///         auth.strip_prefix("Bearer ").map(str::to_owned)
///     }),
/// ];
///
/// let request = http::Request::post("/chat").header("x-user-id", "u1").body(())?;
/// let (parts, _) = request.into_parts();
/// let mut descriptors = floodgate::Descriptors::new();
/// for e in &extractors {
///     e.extract(&parts, &mut descriptors);
/// }
/// assert_eq!(descriptors.get("user"), Some("u1"));
/// assert_eq!(descriptors.get("method"), Some("POST"));
/// // No `ConnectInfo` (not served by axum here) and no `MatchedPath` (no router): absent.
/// assert_eq!(descriptors.get("ip"), None);
/// assert_eq!(descriptors.get("route"), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Extractor {
    descriptor: Cow<'static, str>,
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    ClientIp(Arc<ClientIp>),
    Header(HeaderName),
    Route,
    Method,
    Custom(DescriptorFn),
}

impl Extractor {
    /// The client's IP address as descriptor `ip` (see [`ClientIp`] for how proxies are handled).
    pub fn client_ip(client_ip: ClientIp) -> Self {
        Extractor { descriptor: Cow::Borrowed("ip"), kind: Kind::ClientIp(Arc::new(client_ip)) }
    }

    /// The value of request header `header` as descriptor `descriptor`, e.g.
    /// `Extractor::header(HeaderName::from_static("x-user-id"), "user")`.
    ///
    /// The first value is used when the header is repeated. Bytes that are not UTF-8 are replaced
    /// by U+FFFD rather than dropping the descriptor, so a client cannot escape a per-user limit
    /// by sending an unreadable id. A missing header means no descriptor.
    pub fn header(header: HeaderName, descriptor: impl Into<Cow<'static, str>>) -> Self {
        Extractor { descriptor: descriptor.into(), kind: Kind::Header(header) }
    }

    /// The route template as descriptor `route`: `"<METHOD> <template>"` from axum's
    /// [`MatchedPath`], e.g. `POST /order/{id}` (axum 0.8 writes parameters as `{id}`), never the
    /// raw URL. Without a `MatchedPath` (a request no route matched, or a layer applied outside the
    /// router) there is no `route` descriptor. See [`route_template`].
    pub fn route() -> Self {
        Extractor { descriptor: Cow::Borrowed("route"), kind: Kind::Route }
    }

    /// The request method as descriptor `method` (`GET`, `POST`, …).
    pub fn method() -> Self {
        Extractor { descriptor: Cow::Borrowed("method"), kind: Kind::Method }
    }

    /// Whatever `f` returns, as descriptor `descriptor`; `None` means no descriptor.
    pub fn from_fn<F>(descriptor: impl Into<Cow<'static, str>>, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Extractor { descriptor: descriptor.into(), kind: Kind::Custom(Arc::new(f)) }
    }

    /// The same extractor writing descriptor `descriptor` instead (e.g. `Extractor::route().named("endpoint")`).
    pub fn named(mut self, descriptor: impl Into<Cow<'static, str>>) -> Self {
        self.descriptor = descriptor.into();
        self
    }

    /// The descriptor this extractor writes.
    pub fn descriptor(&self) -> &str {
        &self.descriptor
    }

    /// The value for `parts`, if any.
    pub fn value(&self, parts: &Parts) -> Option<String> {
        match &self.kind {
            Kind::ClientIp(c) => c.resolve(parts).map(ip_text),
            Kind::Header(h) => {
                parts.headers.get(h).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            }
            Kind::Route => route_template(parts),
            Kind::Method => Some(parts.method.as_str().to_owned()),
            Kind::Custom(f) => f(parts),
        }
    }

    /// Adds this extractor's descriptor for `parts` to `out` (replacing an earlier one of the same
    /// name); adds nothing when there is no value.
    pub fn extract(&self, parts: &Parts, out: &mut Descriptors) {
        if let Some(value) = self.value(parts) {
            out.insert(self.descriptor.clone(), value);
        }
    }
}

impl fmt::Debug for Extractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Extractor");
        d.field("descriptor", &self.descriptor);
        match &self.kind {
            Kind::ClientIp(c) => d.field("client_ip", c),
            Kind::Header(h) => d.field("header", h),
            Kind::Route => d.field("route", &true),
            Kind::Method => d.field("method", &true),
            Kind::Custom(_) => d.field("custom", &"<fn>"),
        };
        d.finish()
    }
}

/// `"<METHOD> <template>"` from axum's [`MatchedPath`] (e.g. `POST /order/{id}`); `None` when no
/// route matched.
pub fn route_template(parts: &Parts) -> Option<String> {
    let path = parts.extensions.get::<MatchedPath>()?;
    Some(route_descriptor(&parts.method, path.as_str()))
}

/// The `route` descriptor of a request with `method` matched by `template`: `"<METHOD> <template>"`
/// (e.g. `POST /order/{id}`), joined without the formatting machinery (it is on every request).
pub fn route_descriptor(method: &Method, template: &str) -> String {
    let mut route = String::with_capacity(method.as_str().len() + 1 + template.len());
    push_route(&mut route, method, template);
    route
}

/// Writes [`route_descriptor`]'s text into `out`.
pub fn push_route(out: &mut impl std::fmt::Write, method: &Method, template: &str) {
    // Writing to a string or a buffer cannot fail.
    let _ = out.write_str(method.as_str());
    let _ = out.write_char(' ');
    let _ = out.write_str(template);
}

/// The `ip` descriptor's text: what [`IpAddr`]'s `Display` writes (see [`push_ip`]).
pub fn ip_text(ip: IpAddr) -> String {
    let mut text = String::with_capacity(15);
    push_ip(&mut text, ip);
    text
}

/// Writes what [`IpAddr`]'s `Display` writes into `out`, an IPv4 address octet by octet
/// (`Display`'s formatting machinery costs more than the rest of a request's descriptors).
pub fn push_ip(out: &mut impl std::fmt::Write, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                // Writing to a string or a buffer cannot fail.
                let mut put = |b: u8| {
                    let _ = out.write_char(char::from(b));
                };
                if i > 0 {
                    put(b'.');
                }
                // Digit by digit: a copy call per octet costs more than the digits.
                if octet >= 100 {
                    put(b'0' + octet / 100);
                }
                if octet >= 10 {
                    put(b'0' + octet / 10 % 10);
                }
                put(b'0' + octet % 10);
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

// === impl ClientIp ===

/// Which forwarding header the trusted proxies append to.
///
/// Only the header that *your* proxies append can be believed: a header they pass through
/// untouched is written entirely by the client. So exactly one is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: <client>, <proxy1>, <proxy2>` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=<client>, for=<proxy1>` (also `for="[2001:db8::1]:4711"`).
    Forwarded,
}

/// The client's IP address, believing forwarding headers only from trusted proxies.
///
/// The TCP peer comes from axum's [`ConnectInfo<SocketAddr>`](ConnectInfo) request extension
/// (serve with `into_make_service_with_connect_info::<SocketAddr>()`); without it there is no
/// client IP and no `ip` descriptor.
///
/// **The walk**, exactly:
/// 1. If the peer is not in a trusted CIDR, the peer is the client; forwarding headers are ignored
///    entirely (anyone can write them).
/// 2. Otherwise the addresses of the configured [`ProxyHeader`] are read **from the right** (the
///    hop closest to us first; repeated header lines count as one list in order). Each address
///    that is in a trusted CIDR is skipped; the first that is not is the client. The left-most
///    values, which the client itself may have written, are therefore never believed unless every
///    hop to their right is trusted.
/// 3. A malformed entry (not an IP, `unknown`, an obfuscated `_node`, an empty list item, a
///    `Forwarded` element without exactly one `for=`, a value that is not visible ASCII) stops the
///    walk: the client is the last address reached, which is a trusted hop (or the peer itself).
/// 4. If every address is trusted, the left-most one is the client.
///
/// Accepted entries: `192.0.2.1`, `192.0.2.1:8080`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:4711`, and in `Forwarded` the same inside quotes. IPv4-mapped IPv6 addresses
/// (`::ffff:192.0.2.1`) count as their IPv4 address, for the result and for the trust check.
///
/// ```
/// use std::net::IpAddr;
/// use floodgate_tower::ClientIp;
/// use http::HeaderMap;
///
/// let client_ip = ClientIp::new().try_trust(["10.0.0.0/8"])?;
/// let mut headers = HeaderMap::new();
/// // The client wrote "6.6.6.6"; our proxy 10.0.0.2 appended the address it saw.
/// headers.insert("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.0.0.2".parse()?);
/// let proxy: IpAddr = "10.0.0.1".parse()?;
/// assert_eq!(client_ip.resolve_from(proxy, &headers), "203.0.113.7".parse::<IpAddr>()?);
/// // From an untrusted peer the header is ignored.
/// let stranger: IpAddr = "198.51.100.9".parse()?;
/// assert_eq!(client_ip.resolve_from(stranger, &headers), stranger);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClientIp {
    trusted: Vec<IpNet>,
    header: ProxyHeader,
}

impl ClientIp {
    /// The TCP peer's address; no proxy trusted, so forwarding headers are ignored.
    pub fn new() -> Self {
        ClientIp::default()
    }

    /// Also trusts the proxies in `net`.
    pub fn trust(mut self, net: IpNet) -> Self {
        self.trusted.push(normalize_net(net));
        self
    }

    /// Also trusts the proxies in `cidrs`: CIDRs (`10.0.0.0/8`, `fd00::/8`) or single addresses.
    pub fn try_trust<I>(mut self, cidrs: I) -> Result<Self, InvalidProxy>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        for cidr in cidrs {
            let cidr = cidr.as_ref().trim();
            let net = match cidr.parse::<IpNet>() {
                Ok(net) => net,
                Err(source) => match cidr.parse::<IpAddr>() {
                    Ok(ip) => IpNet::from(ip),
                    Err(_) => return Err(InvalidProxy { value: cidr.to_owned(), source }),
                },
            };
            self.trusted.push(normalize_net(net));
        }
        Ok(self)
    }

    /// Reads `header` for the forwarding chain ([`ProxyHeader::XForwardedFor`] by default).
    pub fn header(mut self, header: ProxyHeader) -> Self {
        self.header = header;
        self
    }

    /// The trusted proxy networks.
    pub fn trusted(&self) -> &[IpNet] {
        &self.trusted
    }

    /// Whether `ip` is a trusted proxy.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The client of the request: the peer from [`ConnectInfo<SocketAddr>`](ConnectInfo), walked
    /// back through trusted proxies. `None` without `ConnectInfo`.
    pub fn resolve(&self, parts: &Parts) -> Option<IpAddr> {
        let ConnectInfo(peer) = parts.extensions.get::<ConnectInfo<SocketAddr>>()?;
        Some(self.resolve_from(peer.ip(), &parts.headers))
    }

    /// The client of a request from `peer` with `headers` (see the type docs for the walk).
    pub fn resolve_from(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.is_trusted(peer) {
            return peer;
        }
        let mut reached = peer;
        let flow = match self.header {
            ProxyHeader::XForwardedFor => self.walk_x_forwarded_for(headers, &mut reached),
            ProxyHeader::Forwarded => self.walk_forwarded(headers, &mut reached),
        };
        match flow {
            ControlFlow::Break(client) => client,
            ControlFlow::Continue(()) => reached,
        }
    }

    /// The client of a request from `peer` whose `X-Forwarded-For` was `list` (its values joined
    /// by commas, as an access log records it), by the same walk as [`ClientIp::resolve_from`]
    /// with [`ProxyHeader::XForwardedFor`]: for `floodgate-bench replay`, without building a
    /// header map per logged request.
    ///
    /// ```
    /// use floodgate_tower::ClientIp;
    /// let c = ClientIp::new().try_trust(["10.0.0.0/8"])?;
    /// let peer = "10.0.0.2".parse()?;
    /// assert_eq!(c.resolve_x_forwarded_for(peer, "1.1.1.1, 203.0.113.9, 10.0.0.7").to_string(), "203.0.113.9");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve_x_forwarded_for(&self, peer: IpAddr, list: &str) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.is_trusted(peer) {
            return peer;
        }
        let mut reached = peer;
        match self.walk_list(list, &mut reached) {
            ControlFlow::Break(client) => client,
            ControlFlow::Continue(()) => reached,
        }
    }

    /// One `X-Forwarded-For` value, right to left.
    fn walk_list(&self, list: &str, reached: &mut IpAddr) -> ControlFlow<IpAddr> {
        if !list.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)) {
            return ControlFlow::Break(*reached);
        }
        for entry in list.rsplit(',') {
            self.step(reached, parse_node(entry))?;
        }
        ControlFlow::Continue(())
    }

    /// One hop, right to left: stop at an untrusted address or a malformed entry.
    fn step(&self, reached: &mut IpAddr, hop: Option<IpAddr>) -> ControlFlow<IpAddr> {
        let Some(ip) = hop else { return ControlFlow::Break(*reached) };
        *reached = ip;
        if self.is_trusted(ip) { ControlFlow::Continue(()) } else { ControlFlow::Break(ip) }
    }

    fn walk_x_forwarded_for(&self, headers: &HeaderMap, reached: &mut IpAddr) -> ControlFlow<IpAddr> {
        for value in headers.get_all(X_FORWARDED_FOR).iter().rev() {
            let Some(list) = visible_ascii(value) else { return ControlFlow::Break(*reached) };
            self.walk_list(list, reached)?;
        }
        ControlFlow::Continue(())
    }

    fn walk_forwarded(&self, headers: &HeaderMap, reached: &mut IpAddr) -> ControlFlow<IpAddr> {
        for value in headers.get_all(FORWARDED).iter().rev() {
            let Some(list) = visible_ascii(value) else { return ControlFlow::Break(*reached) };
            let elements: Vec<&str> = split_unquoted(list, b',').collect();
            for element in elements.into_iter().rev() {
                self.step(reached, forwarded_for(element))?;
            }
        }
        ControlFlow::Continue(())
    }
}

fn normalize_net(net: IpNet) -> IpNet {
    // A mapped IPv4 network (`::ffff:10.0.0.0/104`) is trusted as the IPv4 network it names.
    if let IpNet::V6(v6) = net
        && let Some(v4) = v6.addr().to_ipv4_mapped()
        && v6.prefix_len() >= 96
        && let Ok(mapped) = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96)
    {
        return IpNet::V4(mapped.trunc());
    }
    net
}

fn visible_ascii(value: &HeaderValue) -> Option<&str> {
    value.to_str().ok()
}

/// The node of a `Forwarded` element's `for=` parameter; `None` when it has none, several, or one
/// that is not an IP address.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let mut found = None;
    for pair in split_unquoted(element, b';') {
        let (name, value) = pair.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            continue;
        }
        if found.is_some() {
            return None;
        }
        let value = value.trim();
        let node = match value.strip_prefix('"') {
            Some(quoted) => quoted.strip_suffix('"').filter(|inner| !inner.contains(['"', '\\']))?,
            None => value,
        };
        found = Some(parse_node(node)?);
    }
    found
}

/// An address as proxies write it: `v4`, `v4:port`, `v6`, `[v6]`, `[v6]:port`.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim();
    if let Some(rest) = node.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return inside.parse::<Ipv6Addr>().ok().map(|ip| IpAddr::V6(ip).to_canonical());
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    let (host, port) = node.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// A port number, or an RFC 7239 obfuscated port (`_abc`).
fn is_port(port: &str) -> bool {
    port.parse::<u16>().is_ok()
        || port.strip_prefix('_').is_some_and(|p| {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        })
}

/// Splits `s` at `sep` outside double-quoted strings (a backslash escapes the next character
/// inside quotes).
fn split_unquoted(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    let mut parts = Vec::new();
    for (i, b) in s.bytes().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == sep && !quoted {
            parts.push(&s[start..i]);
            start = i + 1;
        }
    }
    parts.push(&s[start..]);
    parts.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_is_written_as_display_writes_it() {
        for text in [
            "0.0.0.0",
            "255.255.255.255",
            "10.0.0.1",
            "192.168.100.7",
            "1.20.255.9",
            "::1",
            "2001:db8::8a2e:370:7334",
            "::ffff:10.0.0.1",
        ] {
            assert_eq!(ip_text(ip(text)), ip(text).to_string());
        }
        // Every octet value, in every position.
        for octet in 0..=255u8 {
            let v4 = IpAddr::from([octet, 255 - octet, octet / 3, octet.wrapping_mul(7)]);
            assert_eq!(ip_text(v4), v4.to_string());
        }
    }

    #[test]
    fn a_route_descriptor_is_the_method_and_the_template() {
        assert_eq!(route_descriptor(&Method::POST, "/order/{id}"), "POST /order/{id}");
        assert_eq!(route_descriptor(&Method::from_bytes(b"PURGE").unwrap(), "/"), "PURGE /");
    }

    fn headers(name: &'static str, values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(name, v.parse().unwrap());
        }
        h
    }

    fn proxies() -> ClientIp {
        ClientIp::new().try_trust(["10.0.0.0/8", "fd00::/8"]).unwrap()
    }

    #[test]
    fn untrusted_peer_ignores_forwarding_headers() {
        let h = headers("x-forwarded-for", &["1.2.3.4"]);
        assert_eq!(proxies().resolve_from(ip("198.51.100.1"), &h), ip("198.51.100.1"));
        assert_eq!(ClientIp::new().resolve_from(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn trusted_chain_is_walked_from_the_right() {
        let h = headers("x-forwarded-for", &["203.0.113.7, 10.1.1.1"]);
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &h), ip("203.0.113.7"));
    }

    #[test]
    fn spoofed_left_most_entries_do_not_change_the_client() {
        let h = headers("x-forwarded-for", &["1.1.1.1, 10.9.9.9, 203.0.113.7, 10.1.1.1"]);
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &h), ip("203.0.113.7"));
    }

    #[test]
    fn repeated_header_lines_form_one_list() {
        let h = headers("x-forwarded-for", &["6.6.6.6", "203.0.113.7", "10.1.1.1"]);
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &h), ip("203.0.113.7"));
    }

    #[test]
    fn malformed_entry_stops_at_the_last_trusted_hop() {
        let h = headers("x-forwarded-for", &["203.0.113.7, garbage, 10.1.1.1"]);
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &h), ip("10.1.1.1"));
        let h = headers("x-forwarded-for", &["203.0.113.7,,"]);
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &h), ip("10.0.0.1"));
        let h = headers("x-forwarded-for", &["unknown"]);
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn all_trusted_chain_yields_the_left_most_address() {
        let h = headers("x-forwarded-for", &["10.3.3.3, 10.2.2.2"]);
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &h), ip("10.3.3.3"));
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &HeaderMap::new()), ip("10.0.0.1"));
    }

    #[test]
    fn addresses_with_ports_and_brackets_are_accepted() {
        let h = headers("x-forwarded-for", &["[2001:db8::1]:4711, 192.0.2.1:80"]);
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &h), ip("192.0.2.1"));
        let trusted_v4 = ClientIp::new().try_trust(["10.0.0.0/8", "192.0.2.1"]).unwrap();
        assert_eq!(trusted_v4.resolve_from(ip("10.0.0.1"), &h), ip("2001:db8::1"));
        let h = headers("x-forwarded-for", &["2001:db8::2"]);
        assert_eq!(proxies().resolve_from(ip("fd00::1"), &h), ip("2001:db8::2"));
    }

    #[test]
    fn ipv4_mapped_addresses_count_as_ipv4() {
        let h = headers("x-forwarded-for", &["::ffff:203.0.113.7"]);
        assert_eq!(proxies().resolve_from(ip("::ffff:10.0.0.1"), &h), ip("203.0.113.7"));
        let mapped = ClientIp::new().try_trust(["::ffff:10.0.0.0/104"]).unwrap();
        assert_eq!(mapped.resolve_from(ip("10.0.0.1"), &h), ip("203.0.113.7"));
    }

    #[test]
    fn forwarded_header_is_parsed_with_quotes_ports_and_other_parameters() {
        let c = proxies().header(ProxyHeader::Forwarded);
        let h = headers(
            "forwarded",
            &[r#"for=6.6.6.6, for="[2001:db8::1]:4711";proto=https, For=10.1.1.1;by=10.0.0.1"#],
        );
        assert_eq!(c.resolve_from(ip("10.0.0.1"), &h), ip("2001:db8::1"));
        let h = headers("forwarded", &[r#"for="192.0.2.60:47011";host=example.com"#]);
        assert_eq!(c.resolve_from(ip("10.0.0.1"), &h), ip("192.0.2.60"));
    }

    #[test]
    fn forwarded_malformed_elements_stop_the_walk() {
        let c = proxies().header(ProxyHeader::Forwarded);
        for bad in [
            "for=unknown",
            "for=_hidden",
            "proto=https",
            "for=1.2.3.4;for=5.6.7.8",
            r#"for="1.2.3.4"#,
            r#"for="1.2\.3.4""#,
        ] {
            let h = headers("forwarded", &[&format!("for=203.0.113.7, {bad}")]);
            assert_eq!(c.resolve_from(ip("10.0.0.1"), &h), ip("10.0.0.1"), "{bad}");
        }
    }

    #[test]
    fn only_the_configured_header_is_read() {
        let h = headers("forwarded", &["for=203.0.113.7"]);
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &h), ip("10.0.0.1"));
        let h = headers("x-forwarded-for", &["203.0.113.7"]);
        assert_eq!(proxies().header(ProxyHeader::Forwarded).resolve_from(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn non_ascii_header_value_stops_the_walk() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_bytes(b"203.0.113.7\xff").unwrap());
        assert_eq!(proxies().resolve_from(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn invalid_trusted_cidr_is_a_named_error() {
        let err = ClientIp::new().try_trust(["10.0.0.0/8", "10.0.0.0/33"]).unwrap_err();
        assert_eq!(err.value, "10.0.0.0/33");
        assert!(err.to_string().contains("10.0.0.0/33"));
    }

    #[test]
    fn header_extractor_keeps_non_utf8_ids_instead_of_dropping_them() {
        let mut req = http::Request::new(());
        req.headers_mut().insert("x-user-id", HeaderValue::from_bytes(b"u\xff1").unwrap());
        let (parts, _) = req.into_parts();
        let e = Extractor::header(HeaderName::from_static("x-user-id"), "user");
        assert_eq!(e.value(&parts).as_deref(), Some("u\u{fffd}1"));
    }

    #[test]
    fn quoted_separators_do_not_split() {
        assert_eq!(split_unquoted(r#"a="x,y",b"#, b',').collect::<Vec<_>>(), [r#"a="x,y""#, "b"]);
        assert_eq!(split_unquoted(r#"a="x\",y",b"#, b',').collect::<Vec<_>>(), [r#"a="x\",y""#, "b"]);
    }
}
