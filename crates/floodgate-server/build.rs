//! Embeds the git commit the binary is built from, for `floodgate --version` and the startup log:
//! `FLOODGATE_COMMIT` is `FLOODGATE_GIT_COMMIT` when set (a build from an export, e.g. the
//! Dockerfile's `--build-arg`), else `git rev-parse --short=12 HEAD` of the source tree, else
//! `unknown` (no git, or no `.git` directory: a tarball or a clean export).

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).current_dir(dir).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// A commit id as git prints it: hexadecimal, nothing else (what goes into the version string).
fn is_commit(text: &str) -> bool {
    !text.is_empty() && text.len() <= 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=FLOODGATE_GIT_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));

    let given = std::env::var("FLOODGATE_GIT_COMMIT").ok().map(|c| c.trim().to_owned());
    let commit = match given.filter(|c| !c.is_empty()) {
        Some(commit) if is_commit(&commit) => commit,
        Some(other) => panic!("FLOODGATE_GIT_COMMIT must be a hexadecimal commit id, not {other:?}"),
        None => {
            // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it points to (a
            // commit), and packed refs (a branch packed by `git gc`). Only files that exist: a
            // missing one would rerun this script on every build.
            let mut watched = Vec::new();
            if let Some(git_dir) = git(&dir, &["rev-parse", "--absolute-git-dir"]) {
                watched.push(Path::new(&git_dir).join("HEAD"));
                if let Some(common) = git(&dir, &["rev-parse", "--path-format=absolute", "--git-common-dir"])
                {
                    watched.push(Path::new(&common).join("packed-refs"));
                    if let Some(branch) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
                        watched.push(Path::new(&common).join(branch));
                    }
                }
            }
            for path in watched.iter().filter(|p| p.exists()) {
                println!("cargo:rerun-if-changed={}", path.display());
            }
            git(&dir, &["rev-parse", "--short=12", "HEAD"])
                .filter(|c| is_commit(c))
                .unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env=FLOODGATE_COMMIT={commit}");
}
