//! Stable hashes: FNV-1a 64 of configuration texts and of each rule's canonical definition.
//!
//! Unlike `std`'s hasher these never change between runs, builds or machines, so an audit log can
//! compare the fingerprints of two configurations loaded days apart.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(OFFSET, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// FNV-1a 64 of `text`, as 16 lowercase hex digits.
pub(crate) fn hex(text: &str) -> String {
    format!("{:016x}", fnv1a(text.as_bytes()))
}

/// A rule's canonical definition, built field by field: one line per field, values quoted with
/// Rust's debug escaping so that no value can spill into the next field.
#[derive(Debug, Default)]
pub(crate) struct Canonical(String);

impl Canonical {
    /// Adds `field = value`.
    pub(crate) fn field(&mut self, field: &str, value: impl std::fmt::Debug) -> &mut Self {
        use std::fmt::Write as _;
        let _ = writeln!(self.0, "{field}={value:?}");
        self
    }

    /// The fingerprint.
    pub(crate) fn hash(&self) -> u64 {
        fnv1a(self.0.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_fnv1a_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(hex(""), "cbf29ce484222325");
    }

    #[test]
    fn canonical_fields_cannot_run_together() {
        let mut a = Canonical::default();
        a.field("name", "x\nkey=y");
        let mut b = Canonical::default();
        b.field("name", "x").field("key", "y");
        assert_ne!(a.hash(), b.hash());
    }
}
