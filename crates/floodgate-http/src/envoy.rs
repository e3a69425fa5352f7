//! How an Envoy rate-limit descriptor (an ordered list of entries) becomes [`Descriptors`]: the
//! one mapping that gRPC `ShouldRateLimit`, `/v1/check` with a `domain`, the admin API and the
//! imported envoyproxy/ratelimit rules all agree on.
//!
//! Each entry's key becomes a descriptor name with its value; a key repeated within the descriptor
//! is named `key#2`, `key#3`, ... from its second occurrence on. [`ENVOY_KEYS`] is set to the
//! ordered keys, so that a rule for `[remote_address]` does not apply to a descriptor
//! `[remote_address, path]`, exactly as envoyproxy/ratelimit matches depth and order.

use floodgate::Descriptors;

/// The descriptor that [`envoy_descriptors`] sets to the ordered keys of an Envoy descriptor;
/// imported rules require it to equal their path's keys (reserved: not allowed as an Envoy key).
pub const ENVOY_KEYS: &str = "envoy.keys";

/// The [`Descriptors`] of one Envoy rate-limit descriptor (its entries in order).
///
/// ```
/// use floodgate_http::envoy::{ENVOY_KEYS, envoy_descriptors};
/// let d = envoy_descriptors([("database", "users"), ("user", "u1")]);
/// assert_eq!(d.get("database"), Some("users"));
/// assert_eq!(d.get("user"), Some("u1"));
/// assert_eq!(d.get(ENVOY_KEYS), Some(r#"["database","user"]"#));
/// ```
pub fn envoy_descriptors<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Descriptors {
    let entries = entries.into_iter();
    let mut descriptors = Descriptors::with_capacity(entries.size_hint().0 + 1);
    let mut keys: smallvec::SmallVec<[&str; 8]> = smallvec::SmallVec::new();
    for (key, value) in entries {
        let repeats = keys.iter().filter(|k| **k == key).count();
        keys.push(key);
        let name = match repeats {
            0 => key.to_owned(),
            n => format!("{key}#{}", n + 1),
        };
        descriptors.insert(name, value);
    }
    descriptors.insert(ENVOY_KEYS, keys_descriptor(&keys));
    descriptors
}

/// The descriptor names of entries with `keys`: the key, then `key#2`, `key#3`, ... for repeats.
///
/// ```
/// assert_eq!(floodgate_http::envoy::entry_names(&["a", "b", "a"]), ["a", "b", "a#2"]);
/// ```
pub fn entry_names(keys: &[&str]) -> Vec<String> {
    keys.iter()
        .enumerate()
        .map(|(i, key)| match keys[..i].iter().filter(|k| *k == key).count() {
            0 => (*key).to_owned(),
            n => format!("{key}#{}", n + 1),
        })
        .collect()
}

/// The value of [`ENVOY_KEYS`]: the keys as a JSON array (unambiguous whatever the keys hold).
pub fn keys_descriptor(keys: &[&str]) -> String {
    let mut out = Vec::with_capacity(2 + keys.iter().map(|k| k.len() + 3).sum::<usize>());
    out.push(b'[');
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        crate::wire::push_json_string(&mut out, key);
    }
    out.push(b']');
    // Written from `&str`s, escaped by JSON's rules: valid UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envoy_descriptors_name_repeated_keys() {
        let d = envoy_descriptors([("a", "1"), ("b", "2"), ("a", "3")]);
        assert_eq!(d.get("a"), Some("1"));
        assert_eq!(d.get("a#2"), Some("3"));
        assert_eq!(d.get(ENVOY_KEYS), Some(r#"["a","b","a"]"#));
        assert_eq!(envoy_descriptors([]).get(ENVOY_KEYS), Some("[]"));
    }

    #[test]
    fn the_keys_are_a_json_array_whatever_they_hold() {
        let keys = ["a\"b", "c\\d", "e\nf", "ü"];
        assert_eq!(keys_descriptor(&keys), serde_json::to_string(&keys).unwrap());
        let names = entry_names(&["a", "a", "b", "a"]);
        let d = envoy_descriptors([("a", "1"), ("a", "2"), ("b", "3"), ("a", "4")]);
        assert_eq!(names, ["a", "a#2", "b", "a#3"]);
        assert_eq!([d.get("a"), d.get("a#2"), d.get("a#3")], [Some("1"), Some("2"), Some("4")]);
    }
}
