//! Grouping client addresses by network prefix, so that one client holding many addresses (an IPv6
//! /64 holds 2^64 of them) is one key.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The prefix lengths a rule groups its `ip` descriptor by (see [`Rule::ip_prefix`](crate::Rule::ip_prefix)).
///
/// ```
/// use floodgate::IpPrefix;
/// let p = IpPrefix::new(24, 64).unwrap();
/// assert_eq!(p.group("2001:db8:1:2:aaaa::1").unwrap(), "2001:db8:1:2::/64");
/// assert_eq!(p.group("192.0.2.77").unwrap(), "192.0.2.0/24");
/// // An IPv4 address written as IPv6 is the same client.
/// assert_eq!(p.group("::ffff:192.0.2.1").unwrap(), "192.0.2.0/24");
/// assert!(IpPrefix::new(33, 64).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpPrefix {
    v4: u8,
    v6: u8,
}

/// A descriptor value that is not an IP address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAnAddress;

impl IpPrefix {
    /// IPv4 addresses grouped by their first `v4` bits (1–32), IPv6 ones by their first `v6` bits
    /// (1–128); `None` when a length is out of range.
    pub fn new(v4: u8, v6: u8) -> Option<Self> {
        ((1..=32).contains(&v4) && (1..=128).contains(&v6)).then_some(IpPrefix { v4, v6 })
    }

    /// The IPv4 prefix length.
    pub fn v4(&self) -> u8 {
        self.v4
    }

    /// The IPv6 prefix length.
    pub fn v6(&self) -> u8 {
        self.v6
    }

    /// `address`'s network, as `address/length` with the host bits cleared.
    pub fn group(&self, address: &str) -> Result<String, NotAnAddress> {
        let mut out = Vec::new();
        self.write_group(address, &mut out)?;
        Ok(String::from_utf8(out).unwrap_or_default())
    }

    /// [`IpPrefix::group`] appended to `out`, without allocating.
    pub(crate) fn write_group(&self, address: &str, out: &mut impl Extend<u8>) -> Result<(), NotAnAddress> {
        let ip: IpAddr = address.trim().parse().map_err(|_| NotAnAddress)?;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        let mut text = Text::default();
        // Writing to a 64-byte buffer: an address and a length are at most 43 bytes.
        let _ = match ip {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.v4)).unwrap_or(0);
                write!(text, "{}/{}", Ipv4Addr::from(u32::from(a) & mask), self.v4)
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.v6)).unwrap_or(0);
                write!(text, "{}/{}", Ipv6Addr::from(u128::from(a) & mask), self.v6)
            }
        };
        out.extend(text.bytes[..text.len].iter().copied());
        Ok(())
    }
}

/// A fixed buffer to format an address into.
struct Text {
    bytes: [u8; 64],
    len: usize,
}

impl Default for Text {
    fn default() -> Self {
        Text { bytes: [0; 64], len: 0 }
    }
}

impl std::fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn full_lengths_keep_the_address() {
        let p = IpPrefix::new(32, 128).unwrap();
        assert_eq!(p.group("2001:db8::1").unwrap(), "2001:db8::1/128");
        assert_eq!(p.group("10.1.2.3").unwrap(), "10.1.2.3/32");
        assert_eq!(IpPrefix::new(1, 1).unwrap().group("255.0.0.1").unwrap(), "128.0.0.0/1");
    }

    #[test]
    fn values_that_are_not_addresses_are_refused() {
        let p = IpPrefix::new(24, 64).unwrap();
        for bad in ["", "example.com", "1.2.3", "1.2.3.4:80", "[2001:db8::1]", "2001:db8::1/64", "::g"] {
            assert_eq!(p.group(bad), Err(NotAnAddress), "{bad:?}");
        }
        assert!(
            IpPrefix::new(0, 64).is_none()
                && IpPrefix::new(24, 0).is_none()
                && IpPrefix::new(24, 129).is_none()
        );
    }

    proptest! {
        #[test]
        fn addresses_share_a_group_exactly_when_their_prefixes_match(a in any::<u128>(), b in any::<u128>(), len in 1u8..=128) {
            let p = IpPrefix::new(32, len).unwrap();
            // Keep out of the IPv4-mapped range, which groups as IPv4.
            let (a, b) = (a | 1 << 127, b | 1 << 127);
            let (ga, gb) = (p.group(&Ipv6Addr::from(a).to_string()).unwrap(), p.group(&Ipv6Addr::from(b).to_string()).unwrap());
            let same = (a ^ b).checked_shr(128 - u32::from(len)).unwrap_or(0) == 0;
            prop_assert_eq!(ga == gb, same);
        }
    }
}
