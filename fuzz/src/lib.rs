//! Fuzz targets for Floodgate's parsers and key encoding.
//!
//! Each target is one file, `src/bin/<target>.rs`: a property over arbitrary bytes, written with
//! [`fuzz_target!`]. The same file builds two ways:
//!
//! - with `cargo fuzz run <target>` (cargo-fuzz sets `--cfg fuzzing`), a libFuzzer binary that
//!   searches for inputs breaking the property, guided by coverage, starting from the target's
//!   seeds in `seeds/<target>/` (`scripts/fuzz`; docs/fuzzing.md);
//! - in ordinary builds, a program that checks the property on every seed of its target and on
//!   the files named on its command line (a crash input found by the fuzzer reproduces without
//!   it); the test suite runs every target this way (`tests/seeds.rs`).
//!
//! Adding a target is adding its file (and seeds): nothing lists the targets.
//!
//! ```text
//! // src/bin/example.rs
//! #![cfg_attr(fuzzing, no_main)]
//! //! Fuzz target: what it checks.
//!
//! floodgate_fuzz::fuzz_target!(|data| {
//!     let _ = std::str::from_utf8(data);
//! });
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub mod config;

#[cfg(fuzzing)]
#[doc(hidden)]
pub use libfuzzer_sys;

/// Declares a fuzz target: `fuzz_target!(|data| { ... })` with `data: &[u8]`, the property to
/// check (panic when it does not hold). See the crate docs.
#[macro_export]
macro_rules! fuzz_target {
    (|$data:ident| $body:block) => {
        /// The property of this target, for one input.
        fn check($data: &[u8]) $body

        #[cfg(fuzzing)]
        #[allow(unsafe_code)]
        mod libfuzzer_entry {
            $crate::libfuzzer_sys::fuzz_target!(|data: &[u8]| super::check(data));
        }

        #[cfg(not(fuzzing))]
        fn main() -> ::std::process::ExitCode {
            $crate::replay(env!("CARGO_BIN_NAME"), check)
        }
    };
}

/// The seed directory of `target`: `seeds/<target>/` beside this crate's manifest.
pub fn seeds(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds").join(target)
}

/// The inputs of a replay: every file of `target`'s seed directory, then the files named on the
/// command line (and the files of directories named there), each in name order.
fn inputs(target: &str) -> Result<Vec<PathBuf>, String> {
    let mut roots = vec![seeds(target)];
    roots.extend(std::env::args_os().skip(1).map(PathBuf::from));
    let mut files = Vec::new();
    for root in roots {
        if root.is_dir() {
            let mut listed: Vec<PathBuf> = std::fs::read_dir(&root)
                .map_err(|e| format!("cannot list {}: {e}", root.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| path.is_file())
                .collect();
            listed.sort();
            files.extend(listed);
        } else {
            files.push(root);
        }
    }
    Ok(files)
}

/// Checks `check` on every input of `target` (see [`fuzz_target!`]): exit 0 when the property
/// holds on all of them, 1 naming the first input it fails on (its panic message printed above),
/// and 1 when there is no input at all.
pub fn replay(target: &str, check: fn(&[u8])) -> ExitCode {
    let outcome = inputs(target).and_then(|files| {
        if files.is_empty() {
            return Err(format!("no inputs: {} is empty", seeds(target).display()));
        }
        check_all(&files, check)
    });
    match outcome {
        Ok(n) => {
            println!("{target}: {n} inputs, the property holds");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{target}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `check` on each file's bytes; the number of files, or which one it failed on.
fn check_all(files: &[PathBuf], check: fn(&[u8])) -> Result<usize, String> {
    for file in files {
        let data = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            return Err(format!("the property fails on {}", file.display()));
        }
    }
    Ok(files.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_names_the_input_the_property_fails_on() {
        let dir = std::env::temp_dir().join(format!("floodgate-fuzz-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (good, bad) = (dir.join("good"), dir.join("bad"));
        std::fs::write(&good, b"ok").unwrap();
        std::fs::write(&bad, b"boom").unwrap();
        let property: fn(&[u8]) = |data| assert_ne!(data, b"boom", "the property");
        assert_eq!(check_all(std::slice::from_ref(&good), property), Ok(1));
        let error = check_all(&[good.clone(), bad.clone()], property).unwrap_err();
        assert!(error.contains("fails on") && error.ends_with("bad"), "{error}");
        let error = check_all(&[dir.join("missing")], property).unwrap_err();
        assert!(error.contains("cannot read"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
