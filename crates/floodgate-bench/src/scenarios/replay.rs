//! `replay`: the command line of [`floodgate_replay`] — access logs replayed against a policy
//! (and a second one to compare) by the real engine on the log's clock (DESIGN.md §13). Reads the
//! policies, replays, writes the table, `--json` and `--plot`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use floodgate_replay::log::JsonFields;
use floodgate_replay::mapping::FieldMap;
use floodgate_replay::source::{self, FormatName};
use floodgate_replay::{Options, ReplayReport};

use crate::Usage;
use crate::args::{Output, parse_pair, parse_percent};
use crate::report::Report;
use crate::scenarios::Run;

/// `replay` (DESIGN.md §13).
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The access logs, read in order (gzip-compressed ones too: told by their first bytes).
    #[arg(long, value_name = "FILE", num_args = 1.., required = true)]
    pub log: Vec<PathBuf>,
    /// The policy (native YAML, as `floodgate serve --config` reads it).
    #[arg(long, value_name = "POLICY.yaml")]
    pub config: PathBuf,
    /// A second policy replayed beside the first: both reports, and the requests one denies and
    /// the other does not.
    #[arg(long, value_name = "B.yaml")]
    pub compare: Option<PathBuf>,
    /// Suggest, for each rule and algorithm, the smallest limit at which at most
    /// `--max-refused-keys` of the keys would ever have been refused.
    #[arg(long)]
    pub suggest: bool,
    /// `--suggest`: the share of keys allowed to be refused at least once, in percent.
    #[arg(long, value_name = "PERCENT", default_value_t = 0.1, value_parser = parse_percent)]
    pub max_refused_keys: f64,
    /// `--suggest`: added above the suggested limit, in percent (e.g. 25).
    #[arg(long, value_name = "PERCENT", default_value_t = 0.0, value_parser = parse_percent)]
    pub headroom: f64,
    /// The log format, when it cannot be told from the lines.
    #[arg(long, value_enum)]
    pub format: Option<FormatName>,
    /// Route templates (comma-separated, repeatable): `/api/orders/{id}`, `POST /api/orders`,
    /// `/files/{*rest}`. A path no pattern matches is its own route.
    #[arg(long, value_name = "PATTERNS")]
    pub routes: Vec<String>,
    /// A descriptor from a logged field (repeatable): `user=remote_user`,
    /// `tenant=header.x-tenant`. Fields: `remote_user`, `header.referer`, `header.user-agent`
    /// (combined); `header.user-agent`, `header.x-request-id`, `header.host` (envoy); the names
    /// `--json-field` gives.
    #[arg(long = "map", value_name = "DESCRIPTOR=FIELD", value_parser = parse_pair)]
    pub map: Vec<(String, String)>,
    /// JSON lines: which JSON field holds what (repeatable): `time=ts`, `addr=client`,
    /// `forwarded_for=xff`, `method=verb`, `path=uri`, `status=code`, `duration=rt`, or any
    /// descriptor (`user=uid`, `header.x-api-key=key`).
    #[arg(long = "json-field", value_name = "NAME=FIELD", value_parser = parse_pair)]
    pub json_field: Vec<(String, String)>,
    /// Proxies whose logged X-Forwarded-For is believed (CIDR or address, repeatable). Default:
    /// the policy's `gateway.trusted_proxies`.
    #[arg(long = "trusted-proxy", value_name = "CIDR")]
    pub trusted_proxy: Vec<String>,
    /// How many top denied keys per rule.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Only read and parse the logs, deciding nothing: the lines, the malformed ones and the
    /// reading rate (what the replay's own rate is compared with).
    #[arg(long)]
    pub parse_only: bool,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for ReplayArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        Err(Usage("replay writes its own report: see replay::run".into()).into())
    }

    async fn execute(&self, _output: &Output) -> anyhow::Result<()> {
        run(self)
    }
}

impl ReplayArgs {
    /// The replay's options.
    pub fn options(&self) -> Options {
        let mut json_fields = JsonFields::default();
        for (name, field) in &self.json_field {
            json_fields.set(name, field.clone());
        }
        Options {
            logs: self.log.clone(),
            format: self.format.map(|f| f.format(&json_fields)),
            json_fields,
            routes: self.routes.clone(),
            maps: self
                .map
                .iter()
                .map(|(d, f)| FieldMap { descriptor: d.clone(), field: f.clone() })
                .collect(),
            trusted_proxies: self.trusted_proxy.clone(),
            suggest: self.suggest,
            collect_times: self.suggest || self.output.plot.is_some(),
            max_refused_keys: self.max_refused_keys / 100.0,
            headroom: self.headroom / 100.0,
            top: self.top,
            record_decisions: false,
        }
    }
}

/// A replay's error as the command line says it: a usage error (exit 64) when it is in what was
/// asked, a failure otherwise.
fn failure(e: floodgate_replay::Error) -> anyhow::Error {
    if e.is_usage() { Usage(e.to_string()).into() } else { e.into() }
}

/// Runs `replay`: reads the policies, replays, writes the table, `--json` and `--plot`.
pub fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    let load = |path: &std::path::Path| floodgate_config::load(path).map_err(|e| Usage(e.to_string()));
    let a = load(&args.config)?;
    let b = args.compare.as_deref().map(load).transpose()?;
    let options = args.options();
    for log in &options.logs {
        if !log.is_file() {
            return Err(Usage(format!("--log {}: no such file", log.display())).into());
        }
    }
    let started = std::time::Instant::now();
    if args.parse_only {
        let mut records = 0u64;
        let reading = source::read_all(&options.logs, options.format.as_ref(), &options.json_fields, |r| {
            records += 1;
            std::hint::black_box(r);
        })
        .map_err(|e| failure(e.into()))?;
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "read {} lines ({records} requests, {} malformed) in {elapsed:.2} s ({:.0} lines/s)",
            reading.lines,
            reading.malformed,
            reading.lines as f64 / elapsed.max(1e-9)
        );
        return Ok(());
    }
    let (report, outcome) = floodgate_replay::replay_with(&options, a, b).map_err(failure)?;
    let elapsed = started.elapsed();
    if !args.output.quiet {
        println!("{}", report.table());
        let lines = match &report {
            ReplayReport::One(r) => r.lines,
            ReplayReport::Two(c) => c.a.lines,
        };
        println!(
            "replayed {lines} lines in {:.2} s ({:.0} lines/s)",
            elapsed.as_secs_f64(),
            lines as f64 / elapsed.as_secs_f64().max(1e-9)
        );
    }
    if let Some(path) = &args.output.json {
        std::fs::write(path, report.to_json() + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.output.plot {
        std::fs::write(path, floodgate_replay::plot::svg(&report, &outcome))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
