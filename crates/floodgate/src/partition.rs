//! Partition keys: an opaque, stable name for the counter a rule keeps for a request, that a front
//! door may show to clients (the `pk` parameter of the IETF `RateLimit-Policy` and `RateLimit`
//! headers) without showing the key itself.
//!
//! A rule that advertises one ([`Rule::partition_key`](crate::Rule::partition_key)) gets, for
//! each enforced limit of a verdict, a [`PartitionKey`]: HMAC-SHA256 of the rule's key (its
//! namespace, its name, the names of its key descriptors and the request's values for them, as
//! [`key`](crate::key) encodes them, without a shard) under a secret, truncated to 16 bytes. The
//! same key gives the same partition key for as long as the secret is the same, on every
//! instance that shares it; two keys give different ones.
//!
//! The hash is keyed because keys are made of user ids, API keys and client addresses: an
//! unkeyed hash of such a small set of likely values is undone by hashing every candidate and
//! comparing. Without the secret, a partition key tells nothing of the key it names.
//!
//! ```
//! use floodgate::PartitionKeys;
//!
//! let keys = PartitionKeys::new(b"a secret of thirty-two bytes or more")?;
//! assert_eq!(keys.of(b"4:rule4:user2:u1"), keys.of(b"4:rule4:user2:u1"));
//! assert_ne!(keys.of(b"4:rule4:user2:u1"), keys.of(b"4:rule4:user2:u2"));
//! assert!(PartitionKeys::new(b"short").is_err());
//! # Ok::<(), floodgate::PartitionSecretError>(())
//! ```

use std::sync::Arc;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// What every message hashed begins with, so that a secret given to partition keys names nothing
/// but partition keys.
const CONTEXT: &[u8] = b"floodgate partition key\0";

/// The partition keys of a secret: what hashes a rule's key into its [`PartitionKey`]. Cheap to
/// clone (the key is shared).
#[derive(Clone)]
pub struct PartitionKeys {
    inner: Arc<Inner>,
}

struct Inner {
    key: hmac::Key,
    /// The partition key of the empty key: tells secrets apart (equality) without showing them.
    id: PartitionKey,
}

/// A secret shorter than [`PartitionKeys::MIN_SECRET_LEN`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a partition key secret needs at least {min} bytes, this one has {len}", min = PartitionKeys::MIN_SECRET_LEN)]
pub struct PartitionSecretError {
    /// The length given.
    pub len: usize,
}

impl PartitionKeys {
    /// The shortest secret taken: 32 bytes (256 bits, SHA-256's own size).
    pub const MIN_SECRET_LEN: usize = 32;

    /// The partition keys of `secret`. Every instance that should name a key alike must be given
    /// the same secret.
    pub fn new(secret: &[u8]) -> Result<Self, PartitionSecretError> {
        if secret.len() < Self::MIN_SECRET_LEN {
            return Err(PartitionSecretError { len: secret.len() });
        }
        Ok(Self::from_key(hmac::Key::new(hmac::HMAC_SHA256, secret)))
    }

    /// The partition keys of a random secret, drawn from the operating system: stable for as long
    /// as this value lives, in this process only. For one process; a fleet shares a secret
    /// ([`PartitionKeys::new`]).
    pub fn random() -> Self {
        let mut secret = [0u8; Self::MIN_SECRET_LEN];
        // The operating system's generator; it fails only where there is none at all.
        SystemRandom::new().fill(&mut secret).expect("the operating system's random number generator");
        Self::from_key(hmac::Key::new(hmac::HMAC_SHA256, &secret))
    }

    fn from_key(key: hmac::Key) -> Self {
        let id = sign(&key, b"");
        PartitionKeys { inner: Arc::new(Inner { key, id }) }
    }

    /// The partition key of an encoded key ([`key`](crate::key)).
    pub fn of(&self, key: &[u8]) -> PartitionKey {
        sign(&self.inner.key, key)
    }
}

fn sign(key: &hmac::Key, message: &[u8]) -> PartitionKey {
    let mut context = hmac::Context::with_key(key);
    context.update(CONTEXT);
    context.update(message);
    let tag = context.sign();
    let mut bytes = [0u8; PartitionKey::LEN];
    bytes.copy_from_slice(&tag.as_ref()[..PartitionKey::LEN]);
    PartitionKey(bytes)
}

impl PartialEq for PartitionKeys {
    /// Whether both come from the same secret.
    fn eq(&self, other: &Self) -> bool {
        self.inner.id == other.inner.id
    }
}

impl std::fmt::Debug for PartitionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionKeys").finish_non_exhaustive()
    }
}

/// The partition key of one rule's key for one request: 16 bytes of HMAC-SHA256 (see the
/// [module](self)). A front door writes it as it likes (`pk=:<base64>:` in the IETF headers).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionKey([u8; PartitionKey::LEN]);

impl PartitionKey {
    /// Its length in bytes.
    pub const LEN: usize = 16;

    /// A partition key of these bytes (as a front door's test or a client would rebuild one).
    pub const fn from_bytes(bytes: [u8; PartitionKey::LEN]) -> Self {
        PartitionKey(bytes)
    }

    /// Its bytes.
    pub const fn as_bytes(&self) -> &[u8; PartitionKey::LEN] {
        &self.0
    }
}

impl std::fmt::Debug for PartitionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PartitionKey(")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partition key is the first 16 bytes of HMAC-SHA256(secret, label ‖ key), and that HMAC
    /// is RFC 4231's (its test case 2: "Jefe" / "what do ya want for nothing?").
    #[test]
    fn a_partition_key_is_hmac_sha256_of_the_labelled_key_truncated_to_16_bytes() {
        let secret = [7u8; 32];
        let keys = PartitionKeys::new(&secret).unwrap();
        let key = hmac::Key::new(hmac::HMAC_SHA256, &secret);
        let mut message = CONTEXT.to_vec();
        message.extend_from_slice(b"8:per-user4:user2:u1");
        let full = hmac::sign(&key, &message);
        assert_eq!(keys.of(b"8:per-user4:user2:u1").as_bytes(), &full.as_ref()[..16]);
        let jefe = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, b"Jefe"), b"what do ya want for nothing?");
        assert_eq!(
            jefe.as_ref()[..16],
            [0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7],
            "the HMAC is RFC 4231's HMAC-SHA256"
        );
    }

    #[test]
    fn equal_secrets_give_equal_keys_and_other_secrets_other_keys() {
        let a = PartitionKeys::new(&[1u8; 32]).unwrap();
        let again = PartitionKeys::new(&[1u8; 32]).unwrap();
        let b = PartitionKeys::new(&[2u8; 32]).unwrap();
        assert_eq!(a, again);
        assert_ne!(a, b);
        assert_eq!(a.of(b"k"), again.of(b"k"));
        assert_ne!(a.of(b"k"), b.of(b"k"));
        assert_ne!(PartitionKeys::random(), PartitionKeys::random());
        assert_eq!(PartitionKeys::new(&[0u8; 31]), Err(PartitionSecretError { len: 31 }));
        assert_eq!(
            PartitionSecretError { len: 5 }.to_string(),
            "a partition key secret needs at least 32 bytes, this one has 5"
        );
    }

    #[test]
    fn debug_shows_no_secret() {
        let keys = PartitionKeys::new(b"0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(format!("{keys:?}"), "PartitionKeys { .. }");
        assert_eq!(
            format!("{:?}", PartitionKey::from_bytes([0xab; 16])),
            "PartitionKey(abababababababababababababababab)"
        );
    }
}
