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
    let mut descriptors = Descriptors::new();
    let mut keys: Vec<&str> = Vec::new();
    for (key, value) in entries {
        keys.push(key);
        let name = entry_names(&keys).pop().unwrap_or_default();
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
    serde_json::to_string(keys).unwrap_or_default()
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
}
