//! Collision-free key encoding.
//!
//! A key is a sequence of length-prefixed fields, `<decimal length>:<bytes>`: the rule name, the
//! names of the rule's key descriptors, then the request's values for them. Because every field
//! carries its length, the byte string parses back into exactly one sequence of fields, so two
//! different (rule, values) pairs never share a key — whatever bytes an id contains (`:`, `{`, NUL…).
//!
//! `13:chat-per-user4:user` + `2:u1` → `13:chat-per-user4:user2:u1`

/// Appends one length-prefixed field to `out`.
pub(crate) fn push_field(out: &mut impl Extend<u8>, bytes: &[u8]) {
    let mut digits = [0u8; 20];
    let mut n = bytes.len();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[i..].iter().copied());
    out.extend([b':']);
    out.extend(bytes.iter().copied());
}

/// The first byte of the memory store's overflow counters' keys (`*`, a rule's scope, a number):
/// no key begins with it, since fields begin with a digit.
pub(crate) const OVERFLOW_MARK: u8 = b'*';

/// Splits an encoded key back into its fields; `None` if it is not a valid encoding.
pub fn decode(mut key: &[u8]) -> Option<Vec<&[u8]>> {
    let mut fields = Vec::new();
    while !key.is_empty() {
        let colon = key.iter().position(|b| *b == b':')?;
        let len: usize = std::str::from_utf8(&key[..colon]).ok()?.parse().ok()?;
        if colon == 0 || (colon > 1 && key[0] == b'0') {
            return None;
        }
        let rest = &key[colon + 1..];
        if rest.len() < len {
            return None;
        }
        fields.push(&rest[..len]);
        key = &rest[len..];
    }
    Some(fields)
}

/// The namespace (an Envoy domain, if any) and the rule name that an encoded key or scope begins
/// with; `None` if it is not a valid encoding. A namespaced key begins with an empty field, then
/// the namespace (see `Policy::in_namespace`).
pub fn rule_of(key: &[u8]) -> Option<(Option<&[u8]>, &[u8])> {
    match decode(key)?.as_slice() {
        [[], namespace, rule, ..] => Some((Some(namespace), rule)),
        [rule, ..] if !rule.is_empty() => Some((None, rule)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(fields: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in fields {
            push_field(&mut out, f);
        }
        out
    }

    #[test]
    fn reads_like_the_docs() {
        let k = encode(&[b"chat-per-user".to_vec(), b"user".to_vec(), b"u1".to_vec()]);
        assert_eq!(k, b"13:chat-per-user4:user2:u1");
    }

    #[test]
    fn a_keys_rule_and_namespace_read_back() {
        let plain = encode(&[b"per-user".to_vec(), b"user".to_vec(), b"u1".to_vec()]);
        assert_eq!(rule_of(&plain), Some((None, b"per-user".as_slice())));
        let namespaced = encode(&[b"".to_vec(), b"edge".to_vec(), b"per-ip".to_vec(), b"ip".to_vec()]);
        assert_eq!(rule_of(&namespaced), Some((Some(b"edge".as_slice()), b"per-ip".as_slice())));
        assert_eq!(rule_of(b"3:ab"), None);
    }

    #[test]
    fn separators_in_values_do_not_collide() {
        // ("a:b", "c") vs ("a", "b:c") — naive joining gives "a:b:c" twice.
        let a = encode(&[b"r".to_vec(), b"a:b".to_vec(), b"c".to_vec()]);
        let b = encode(&[b"r".to_vec(), b"a".to_vec(), b"b:c".to_vec()]);
        assert_ne!(a, b);
    }

    proptest! {
        #[test]
        fn encoding_is_injective(
            a in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..5),
            b in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..5),
        ) {
            let (ka, kb) = (encode(&a), encode(&b));
            let decoded: Vec<Vec<u8>> = decode(&ka).unwrap().into_iter().map(<[u8]>::to_vec).collect();
            prop_assert_eq!(&decoded, &a);
            prop_assert_eq!(ka == kb, a == b);
        }

        #[test]
        fn an_overflow_counter_key_never_equals_a_real_key(
            fields in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..8), 1..4),
            number in any::<u32>(),
        ) {
            let mut counter = vec![OVERFLOW_MARK];
            counter.extend_from_slice(&encode(&fields[..1]));
            counter.extend_from_slice(&number.to_be_bytes());
            prop_assert!(decode(&counter).is_none());
            prop_assert_ne!(counter, encode(&fields));
        }
    }
}
