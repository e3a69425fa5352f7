#![cfg_attr(fuzzing, no_main)]
//! Fuzz target: envoyproxy/ratelimit files (`floodgate_config::parse` of a text whose top level
//! has `domain`), seeded with the repository's Envoy configurations. The property:
//! `floodgate_fuzz::config::check`, plus: a loaded Envoy file defines its domain
//! (`floodgate_fuzz::config::check_envoy`).

floodgate_fuzz::fuzz_target!(|data| {
    if let Ok(text) = std::str::from_utf8(data) {
        floodgate_fuzz::config::check(text);
        floodgate_fuzz::config::check_envoy(text);
    }
});
