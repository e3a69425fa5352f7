//! Every fuzz target's property, checked on its seeds (and on the regression inputs kept beside
//! them) without the fuzzer: each target's program, built the ordinary way, replays
//! `seeds/<target>/` and fails on the first input the property does not hold for.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The targets: `src/bin/<target>.rs`.
fn targets() -> BTreeSet<String> {
    names(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin"), |name| name.strip_suffix(".rs"))
}

fn names(dir: &Path, keep: impl Fn(&str) -> Option<&str>) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|name| keep(&name).map(str::to_owned))
        .collect()
}

/// A target's program: cargo builds a package's binaries, into the directory above this test's
/// own `deps/`, before running its integration tests.
fn program(target: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let program = dir.join(target);
    assert!(program.is_file(), "{} was not built", program.display());
    program
}

#[test]
fn every_target_has_seeds_and_every_seed_directory_a_target() {
    let targets = targets();
    let seeded = names(&Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds"), |name| Some(name));
    assert_eq!(targets, seeded, "src/bin/<target>.rs and seeds/<target>/ go together");
    for target in &targets {
        let seeds = floodgate_fuzz::seeds(target);
        assert!(std::fs::read_dir(&seeds).unwrap().next().is_some(), "{} is empty", seeds.display());
    }
}

#[test]
fn every_targets_property_holds_on_its_seeds() {
    let mut failed = Vec::new();
    for target in targets() {
        let output = Command::new(program(&target)).output().unwrap();
        if !output.status.success() {
            failed.push(format!(
                "{target}:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
