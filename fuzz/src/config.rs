//! The properties of configuration loading, shared by the `config_native` and `config_envoy`
//! targets.

use floodgate::{Descriptors, Hit, Impossible, MemoryStore, Mode, Policy};
use floodgate_config::ConfigError;

/// Loads `text` as a configuration file and checks:
///
/// - nothing panics;
/// - an error has a message and names a place inside the text: a line that exists (the line
///   after the last for an error at the very end) and a column from 1;
/// - a configuration that loads loads again the same (same hash, same rule fingerprints), and
///   each of its policies decides a request on the memory store without an error (every rule's
///   key descriptors given a value, so that every rule applies).
pub fn check(text: &str) {
    match floodgate_config::parse("fuzz.yaml", text) {
        Err(error) => check_error(text, &error),
        Ok(config) => {
            let again =
                floodgate_config::parse("fuzz.yaml", text).expect("a text that loaded once loads again");
            assert_eq!(config.source.hash, again.source.hash);
            assert_eq!(config.fingerprints, again.fingerprints);
            decide(&config.policy);
            for policy in config.domains.values() {
                decide(policy);
            }
        }
    }
}

fn check_error(text: &str, error: &ConfigError) {
    assert!(!error.message.trim().is_empty(), "an error without a message: {error:?}");
    let lines = yaml_lines(text);
    if let Some(line) = error.line {
        assert!(
            (1..=lines.len() + 1).contains(&line),
            "line {line} of a text of {} lines: {error}",
            lines.len()
        );
    }
    if let Some(column) = error.column {
        assert!(column >= 1, "column {column}: {error}");
        if let Some(line) = error.line
            && let Some(content) = lines.get(line - 1)
        {
            // A column may point just past the line's end (a missing value), not further.
            assert!(
                column <= content.chars().count() + 2,
                "column {column} on line {line} of {} characters: {error}",
                content.chars().count()
            );
        }
    }
}

/// The lines of `text` as YAML counts them: a line ends at `\r\n`, `\r` or `\n` (YAML 1.2's line
/// breaks; `str::lines` knows only the first and the last).
fn yaml_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(['\r', '\n']) {
        lines.push(&rest[..i]);
        let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[i + skip..];
    }
    if !rest.is_empty() || lines.is_empty() {
        lines.push(rest);
    }
    lines
}

/// One request with every descriptor a rule of `policy` keys on or matches, checked and then
/// peeked on a fresh memory store: the engine accepts it.
fn decide(policy: &Policy) {
    let mut descriptors = Descriptors::new();
    for rule in policy.rules() {
        for name in rule.key_descriptors() {
            let value = if name == "ip" { "192.0.2.1" } else { "fuzz" };
            descriptors.insert(name.clone(), value);
        }
    }
    let store = MemoryStore::new();
    let hits = [Hit::new(&descriptors, 1)];
    for mode in [Mode::Check, Mode::Peek] {
        let result = policy
            .evaluate_now(&store, mode, &hits, Impossible::Deny)
            .expect("the memory store answers at once");
        if let Err(e) = result {
            // A descriptor value the rule cannot read (an `ip_prefix` rule keyed on a
            // non-address) is the one error a valid policy may give a valid request.
            assert!(matches!(e, floodgate::EngineError::Descriptor { .. }), "{e}");
        }
    }
}

/// Loads `text` and, when it is an envoyproxy/ratelimit file (a top-level `domain`, as the YAML
/// parser reads it) that loads, checks that it defines that domain.
pub fn check_envoy(text: &str) {
    let Ok(config) = floodgate_config::parse("fuzz.yaml", text) else { return };
    let Ok(document) = serde_saphyr::from_str::<serde_json::Value>(text) else { return };
    if let Some(domain) = document.get("domain").and_then(serde_json::Value::as_str) {
        assert!(
            config.domains.contains_key(domain),
            "the Envoy file's domain {domain:?} is not defined: {:?}",
            config.domains.keys()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::yaml_lines;

    #[test]
    fn yaml_lines_end_at_every_line_break_yaml_knows() {
        assert_eq!(yaml_lines("a\nb\r\nc\rd"), ["a", "b", "c", "d"]);
        assert_eq!(yaml_lines("a\n"), ["a"]);
        assert_eq!(yaml_lines(""), [""]);
        assert_eq!(yaml_lines("\r\r"), ["", ""]);
    }
}
