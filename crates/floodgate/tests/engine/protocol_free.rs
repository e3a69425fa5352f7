//! The engine knows no protocol: neither it nor the algorithms depend on HTTP, serde or any
//! front door's crates (those live in `floodgate-http` and above). Read from the manifests.

use std::path::PathBuf;

/// The names of the `[dependencies]` of the crate at `dir` (relative to this crate).
fn dependencies(dir: &str) -> Vec<String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir).join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    text.lines()
        .skip_while(|l| l.trim() != "[dependencies]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .filter_map(|l| l.split(['=', '.']).next())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect()
}

#[test]
fn the_engine_and_the_algorithms_depend_on_no_protocol_crate() {
    for krate in [".", "../floodgate-core"] {
        let deps = dependencies(krate);
        assert!(deps.contains(&"thiserror".to_owned()), "{krate}: the manifest was read: {deps:?}");
        for protocol in ["http", "http-body", "serde", "serde_json", "axum", "hyper", "tonic", "prost"] {
            assert!(!deps.iter().any(|d| d == protocol), "{krate} depends on {protocol}: {deps:?}");
        }
    }
}
