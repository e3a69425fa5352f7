//! Redis key layout: `<prefix>{<tag>}<letter><engine key>`.
//!
//! - `<tag>` is 8 hex digits of a hash of the part of the key that picks the cluster slot (see
//!   [`HashTag`]): Redis hashes only what is between the first `{` and the next `}`, and the prefix
//!   holds no brace, so no byte of a user's value can move a key to another slot.
//! - `<letter>` says what the key holds: one letter per algorithm (`f s l t g c q n`), so that a
//!   rule whose algorithm changes on reload starts afresh instead of misreading another
//!   algorithm's state, as in the memory store; `x` for the key's penalty box ([`BOX_TAG`]), which
//!   shares the tag, hence the slot, of the key's state. (`o` begins the notes of changes made at
//!   most once: `<prefix>{<tag>}o<id>`, with an id rather than an engine key.)
//! - `<engine key>` is the engine's collision-free encoding, unchanged.

use floodgate::{Limit, LimitKind};

use crate::HashTag;

/// The letters of every algorithm, for [`Store::reset`](floodgate::Store::reset), which does not
/// know the key's algorithm.
pub(crate) const ALGORITHM_TAGS: [u8; 8] = {
    let mut tags = [0; 8];
    let mut i = 0;
    while i < LimitKind::ALL.len() {
        tags[i] = kind_tag(LimitKind::ALL[i]);
        i += 1;
    }
    tags
};

/// The letter of a key's penalty box ([`Op::block_for`](floodgate::store::Op::block_for)): its
/// value is the time the box ends (µs since the epoch), and it expires then.
pub(crate) const BOX_TAG: u8 = b'x';

pub(crate) fn algorithm_tag(limit: &Limit) -> u8 {
    kind_tag(limit.kind())
}

/// The letter of an algorithm in its keys (part of the key layout: it never changes).
const fn kind_tag(kind: LimitKind) -> u8 {
    match kind {
        LimitKind::FixedWindow => b'f',
        LimitKind::SlidingWindow => b's',
        LimitKind::SlidingLog => b'l',
        LimitKind::TokenBucket => b't',
        LimitKind::Gcra => b'g',
        LimitKind::Concurrency => b'c',
        LimitKind::Quota => b'q',
        LimitKind::Budget => b'n',
    }
}

/// The tag of `key` (8 lowercase hex digits) and its cluster slot.
pub(crate) fn tag(key: &[u8], hash_tag: &HashTag) -> ([u8; 8], u16) {
    let source = match hash_tag {
        HashTag::Key => key,
        HashTag::Descriptor(name) => descriptor_value(key, name.as_bytes()).unwrap_or(key),
    };
    let mut h: u32 = 0x811c_9dc5;
    for b in source {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let mut hex = [0u8; 8];
    for (i, d) in hex.iter_mut().enumerate() {
        let nibble = (h >> (28 - 4 * i)) & 0xf;
        *d = b"0123456789abcdef"[nibble as usize];
    }
    (hex, slot(&hex))
}

/// Writes the Redis key of `key` for `algorithm` into `out` (cleared first).
pub(crate) fn redis_key(out: &mut Vec<u8>, prefix: &[u8], tag: &[u8; 8], algorithm: u8, key: &[u8]) {
    out.clear();
    out.reserve(prefix.len() + 11 + key.len());
    out.extend_from_slice(prefix);
    out.push(b'{');
    out.extend_from_slice(tag);
    out.push(b'}');
    out.push(algorithm);
    out.extend_from_slice(key);
}

/// The value of descriptor `name` in an engine key: `[""  namespace] rule names… values…`.
fn descriptor_value<'k>(key: &'k [u8], name: &[u8]) -> Option<&'k [u8]> {
    let fields = floodgate::key::decode(key)?;
    let fields = match fields.first() {
        Some(&[]) => fields.get(2..)?,
        _ => &fields[..],
    };
    if fields.len() % 2 == 0 {
        return None;
    }
    let n = fields.len() / 2;
    let names = &fields[1..=n];
    let values = &fields[n + 1..];
    names.iter().position(|d| *d == name).map(|i| values[i])
}

/// The Redis Cluster slot of a key whose hash tag is `tag`: CRC16 (XMODEM) modulo 16384.
pub(crate) fn slot(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for b in tag {
        crc ^= u16::from(*b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc & 0x3fff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_has_its_letter_and_the_layout_stays() {
        assert_eq!(&ALGORITHM_TAGS, b"fsltgcqn", "keys written by earlier versions must stay readable");
        assert_eq!(BOX_TAG, b'x', "boxes written by earlier versions must stay readable");
        assert!(
            !ALGORITHM_TAGS.contains(&BOX_TAG) && BOX_TAG != b'o',
            "a penalty box never shares a key with an algorithm's state or a note"
        );
    }

    #[test]
    fn slots_match_the_redis_cluster_spec() {
        // From the Redis Cluster specification: CRC16 of "123456789" is 0x31C3.
        assert_eq!(slot(b"123456789"), 0x31c3 & 0x3fff);
        assert_eq!(slot(b"foo"), 12182);
    }

    #[test]
    fn a_descriptor_tag_colocates_every_rule_of_one_value() {
        // rule "per-user" keyed by (tenant, user) and rule "per-tenant" keyed by tenant.
        let a = b"8:per-user6:tenant4:user2:t12:u1";
        let b = b"10:per-tenant6:tenant2:t1";
        let by_tenant = HashTag::Descriptor("tenant".into());
        assert_eq!(tag(a, &by_tenant), tag(b, &by_tenant));
        assert_ne!(tag(a, &HashTag::Key), tag(b, &HashTag::Key));
        // Namespaced keys begin with an empty field and the namespace.
        let c = b"0:3:api10:per-tenant6:tenant2:t1";
        assert_eq!(tag(c, &by_tenant), tag(b, &by_tenant));
        // A key without the descriptor falls back to the whole key.
        let d = b"6:global";
        assert_eq!(tag(d, &by_tenant), tag(d, &HashTag::Key));
    }

    #[test]
    fn braces_in_values_cannot_pick_the_slot() {
        let mut out = Vec::new();
        let key = b"4:rule5:{abc}";
        let (t, _) = tag(key, &HashTag::Key);
        redis_key(&mut out, b"fg:", &t, b'f', key);
        let open = out.iter().position(|b| *b == b'{').unwrap();
        let close = open + out[open..].iter().position(|b| *b == b'}').unwrap();
        assert_eq!(&out[open + 1..close], &t[..]);
    }
}
