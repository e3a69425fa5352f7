//! LiteLLM's proxy as the peer of `llm` (bench/peers/litellm installs it, hash-pinned, into a
//! venv): `--litellm-replicas` `litellm` processes (each count of the list in turn), one uvicorn
//! worker each, in front of the same upstream, with the budget as its router's per-deployment `tpm` — the limit its proxy enforces
//! without its Postgres (a virtual key's `tpm_limit` needs one, and its Prisma client fetches an
//! engine at run time, which this machine cannot) — sharing the run's Redis when there are several
//! (`router_settings.redis_host`), `LITELLM_LOCAL_MODEL_COST_MAP=True` (else it downloads a price
//! list). Killed when dropped.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context as _;
use floodgate_testkit::redis::RedisServer;

use super::{LlmArgs, Target, wait_ready};
use crate::harness::client::Client;
use crate::harness::process::{Process, ScratchDir, Stop, free_port};
use crate::harness::redis;

/// The running proxies.
pub(super) struct Litellm {
    _processes: Vec<Process>,
    urls: Vec<String>,
    /// `litellm`'s package version, as its venv has it.
    pub(super) version: Option<String>,
}

impl Litellm {
    /// Starts the proxies with `tpm` as the deployment's budget.
    pub(super) async fn start(
        args: &LlmArgs,
        replicas: usize,
        dir: &ScratchDir,
        upstream: &str,
        redis_server: &RedisServer,
        tpm: u64,
        client: &Client,
    ) -> anyhow::Result<Litellm> {
        let addr = redis::addr(redis_server);
        let (host, port) = addr.rsplit_once(':').unwrap_or(("127.0.0.1", "6379"));
        let shared = match replicas {
            1 => String::new(),
            _ => format!("  redis_host: {host}\n  redis_port: {port}\n"),
        };
        let config = format!(
            r#"model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: {upstream}/v1
      api_key: sk-fake
      tpm: {tpm}
router_settings:
  routing_strategy: usage-based-routing-v2
  enable_pre_call_checks: true
{shared}litellm_settings:
  drop_params: true
"#
        );
        let path = dir.path().join(format!("litellm-{tpm}.yaml"));
        std::fs::write(&path, config)?;
        // Started in the run's directory: a relative path is made absolute first.
        let program = match args.litellm.components().count() > 1 {
            true => std::fs::canonicalize(&args.litellm)
                .with_context(|| format!("{} not found", args.litellm.display()))?,
            false => args.litellm.clone(),
        };
        let mut processes = Vec::new();
        let mut urls = Vec::new();
        for _ in 0..replicas {
            let port = free_port()?;
            let mut command = Command::new(&program);
            command
                .args(["--config"])
                .arg(&path)
                .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--num_workers", "1"])
                .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                .env("LITELLM_LOG", "ERROR")
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let process = Process::spawn(&mut command, Stop::Kill)
                .with_context(|| format!("starting {}", args.litellm.display()))?;
            processes.push(process);
            urls.push(format!("http://127.0.0.1:{port}"));
        }
        for url in &urls {
            wait_ready(client, &format!("{url}/health/liveliness")).await?;
        }
        Ok(Litellm { _processes: processes, urls, version: version(&program) })
    }

    /// The proxies as a target.
    pub(super) fn target(&self) -> Target {
        Target { urls: self.urls.clone(), headers: Vec::new() }
    }
}

/// The `litellm` package's version, read by the Python of the venv `litellm` is in.
fn version(litellm: &Path) -> Option<String> {
    let python = litellm.with_file_name("python");
    let output = Command::new(python)
        .args(["-c", "import importlib.metadata as m; print(m.version('litellm'))"])
        .output()
        .ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
