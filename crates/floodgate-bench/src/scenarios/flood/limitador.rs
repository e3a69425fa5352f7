//! `flood --peer limitador`: a `limitador-server` this run starts — its memory storage, with a
//! cache of `--max-keys` counters (`memory --cache N`), on free loopback ports, with one limit
//! equal to the built-in rule — held by a watchdog that kills it when the run ends in any way.
//!
//! Its counters are read from `GET /counters/{namespace}` on its HTTP port (the live ones, as it
//! lists them), its memory from `/proc/<pid>/status`; the load goes to its Envoy RLS port, the
//! domain being the namespace.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::Usage;
use crate::harness::client;
use crate::harness::process::resident_set;
use crate::harness::process::{OUTPUT, Watched, free_port, scratch_dir};

/// The namespace of the limit (the Envoy RLS domain of every request).
pub(crate) const NAMESPACE: &str = "floodgate-bench";

/// How long `limitador-server` may take to answer.
const STARTUP: Duration = Duration::from_secs(10);

/// What to tell when there is no `limitador-server`.
const FIND: &str = "pass --limitador-server PATH or set LIMITADOR_SERVER (a release build of \
                    Kuadrant/limitador's limitador-server)";

/// The limits file: one limit of `limit` per `window` (whole seconds) per value of the
/// descriptor `key`, in [`NAMESPACE`] — what the built-in rule is on Floodgate.
pub(crate) fn limits_yaml(key: &str, limit: u64, window: Duration) -> Result<String, Usage> {
    let seconds = whole_seconds(window)?;
    check_descriptor(key)?;
    Ok(format!(
        "- namespace: {NAMESPACE}\n  name: per_user\n  max_value: {limit}\n  seconds: {seconds}\n  \
         conditions: []\n  variables: [\"descriptors[0]['{key}']\"]\n"
    ))
}

/// limitador's `seconds`: a window of whole seconds, at least one.
pub(crate) fn whole_seconds(window: Duration) -> Result<u64, Usage> {
    if window.subsec_nanos() != 0 || window.is_zero() {
        return Err(Usage(format!(
            "--peer limitador: a limit's window is whole seconds; --window {window:?} is not"
        )));
    }
    Ok(window.as_secs())
}

/// The key descriptor goes into a CEL expression (`descriptors[0]['NAME']`): a plain name only.
fn check_descriptor(key: &str) -> Result<(), Usage> {
    let plain = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        Ok(())
    } else {
        Err(Usage(format!("--peer limitador: --key-descriptor {key:?} must be letters, digits, `_` or `-`")))
    }
}

/// A `limitador-server` of this run.
#[derive(Debug)]
pub(crate) struct Limitador {
    watched: Watched,
    /// Its Envoy RLS port on 127.0.0.1.
    pub(crate) rls_port: u16,
    /// Its HTTP port on 127.0.0.1.
    pub(crate) http_port: u16,
    /// What `--version` printed: `Limitador Server v2.4.0-dev (2981b2bd) [] release`.
    pub(crate) version: String,
}

impl Limitador {
    /// Starts `program` with the limits `limits` (YAML) and a cache of `cache` counters, on free
    /// loopback ports, and waits until it answers.
    pub(crate) async fn start(program: &Path, limits: &str, cache: u64) -> anyhow::Result<Limitador> {
        let version = match std::process::Command::new(program).arg("--version").output() {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            Ok(out) => {
                let why = format!("{}: `--version` failed ({})", program.display(), out.status);
                return Err(Usage(why).into());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Usage(format!("{} not found: {FIND}", program.display())).into());
            }
            Err(e) => return Err(Usage(format!("cannot run {}: {e}; {FIND}", program.display())).into()),
        };
        let mut last = String::new();
        for _ in 0..5 {
            // Two ports free now (never the same); another process could take one before the
            // server binds it, which the launch detects (the server exits).
            let (rls_port, http_port) = (free_port()?, free_port()?);
            match Limitador::launch(program, limits, cache, rls_port, http_port).await {
                Ok(mut server) => {
                    server.version.clone_from(&version);
                    return Ok(server);
                }
                Err(e) => last = e,
            }
        }
        anyhow::bail!("limitador-server did not start: {last}")
    }

    async fn launch(
        program: &Path,
        limits: &str,
        cache: u64,
        rls_port: u16,
        http_port: u16,
    ) -> Result<Limitador, String> {
        let dir = scratch_dir("limitador", rls_port).map_err(|e| e.to_string())?;
        let file = dir.join("limits.yaml");
        if let Err(e) = std::fs::write(&file, limits) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("cannot write {}: {e}", file.display()));
        }
        let (rls, http, cache_arg) = (rls_port.to_string(), http_port.to_string(), cache.to_string());
        let ip = "127.0.0.1";
        let mut args: Vec<&OsStr> =
            ["--rls-ip", ip, "--rls-port", &rls, "--http-ip", ip, "--http-port", &http]
                .map(OsStr::new)
                .to_vec();
        args.extend([file.as_os_str(), OsStr::new("memory"), OsStr::new("--cache"), OsStr::new(&cache_arg)]);
        let watched = Watched::spawn(&dir, program, args).map_err(|e| e.to_string())?;
        // From here on, dropping the server stops it and removes the directory.
        let server = Limitador { watched, rls_port, http_port, version: String::new() };
        let deadline = Instant::now() + STARTUP;
        loop {
            let status = client::get(&server.url("/status"), Duration::from_millis(500)).await;
            let rls = tokio::net::TcpStream::connect(("127.0.0.1", rls_port)).await.is_ok();
            if matches!(status, Some((http::StatusCode::OK, _))) && rls {
                // Ours only if it still runs: one that could not bind its ports exits.
                tokio::time::sleep(Duration::from_millis(100)).await;
                if server.watched.running() {
                    return Ok(server);
                }
            }
            if !server.watched.running() || Instant::now() > deadline {
                let output = std::fs::read_to_string(dir.join(OUTPUT)).unwrap_or_default();
                let last =
                    output.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no answer, no output");
                return Err(format!("ports {rls_port} and {http_port}: {last}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `127.0.0.1:PORT` of its Envoy RLS service.
    pub(crate) fn rls_addr(&self) -> String {
        format!("127.0.0.1:{}", self.rls_port)
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }

    /// The live counters of [`NAMESPACE`] (`GET /counters/{namespace}`: the cache's entries
    /// whose window has not ended), or `None` if unread.
    pub(crate) async fn counters(&self) -> Option<u64> {
        let (status, body) = client::get(&self.url(&format!("/counters/{NAMESPACE}")), STARTUP).await?;
        if status != http::StatusCode::OK {
            return None;
        }
        let counters: Vec<serde::de::IgnoredAny> = serde_json::from_slice(&body).ok()?;
        Some(counters.len() as u64)
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.watched.pid()
    }

    /// Its resident set size, in bytes.
    pub(crate) fn rss_bytes(&self) -> Option<u64> {
        resident_set(&self.watched.pid().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_file_is_the_built_in_rule_as_one_limitador_limit() {
        let yaml = limits_yaml("user", 100, Duration::from_secs(60)).unwrap();
        assert_eq!(
            yaml,
            "- namespace: floodgate-bench\n  name: per_user\n  max_value: 100\n  seconds: 60\n  \
             conditions: []\n  variables: [\"descriptors[0]['user']\"]\n"
        );
        assert!(limits_yaml("tenant_id", 5, Duration::from_secs(3600)).unwrap().contains("['tenant_id']"));
    }

    #[test]
    fn a_window_of_part_seconds_or_a_descriptor_that_is_not_a_plain_name_is_refused() {
        assert_eq!(whole_seconds(Duration::from_secs(90)).unwrap(), 90);
        let e = limits_yaml("user", 100, Duration::from_millis(1500)).unwrap_err();
        assert!(e.0.contains("whole seconds"), "{e}");
        assert!(limits_yaml("user", 100, Duration::ZERO).is_err());
        for bad in ["", "us'er", "a b", "x]"] {
            let e = limits_yaml(bad, 100, Duration::from_secs(60)).unwrap_err();
            assert!(e.0.contains("--key-descriptor"), "{bad:?}: {e}");
        }
    }

    #[tokio::test]
    async fn a_missing_program_is_a_usage_error_that_says_where_to_find_one() {
        let e = Limitador::start(Path::new("/nonexistent/limitador-server"), "", 10).await.unwrap_err();
        let usage = e.downcast_ref::<Usage>().expect("a usage error");
        assert!(usage.0.contains("not found") && usage.0.contains("LIMITADOR_SERVER"), "{usage}");
    }
}
