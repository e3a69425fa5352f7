#![cfg_attr(fuzzing, no_main)]
//! Fuzz target: the native YAML configuration (`floodgate_config::parse`), seeded with the
//! repository's example and test configurations. The property: `floodgate_fuzz::config::check`.

floodgate_fuzz::fuzz_target!(|data| {
    if let Ok(text) = std::str::from_utf8(data) {
        floodgate_fuzz::config::check(text);
    }
});
