//! `flood`: a flood of distinct keys — a user id never seen before on every request — beside
//! normal users who stay under their own limits: what the flood does to them.
//!
//! The run starts one in-process `floodgate` server on the store it measures: the memory store,
//! capped at `max_keys` (`--max-keys`, default 10 000; `on_full: aggregate`), or a `redis-server`
//! it starts itself (a free loopback port, no persistence, killed at the end however the run ends,
//! as `outage` runs it). `--store-field NAME=VALUE` writes further fields into the store section,
//! or replaces the run's own, so the same command measures other store settings. The policy is
//! one rule per user (`--algorithm`, `--limit` per `--window`; default a fixed window of 100 a
//! minute), or the rules of `--config FILE`. Requests go over HTTP (`/v1/check`) or, with
//! `--transport grpc`, Envoy RLS.
//!
//! With `--peer limitador` the same traffic goes to a `limitador-server` the run starts instead
//! ([`limitador`]): its memory storage with a cache of `--max-keys` counters, the built-in rule as
//! its one limit (a fixed window), over Envoy RLS — the peer measured side by side in the same
//! conditions.
//!
//! `--users` normal users, each sending `--normal-rate / --users` requests a second, evenly
//! spaced, open loop (latency from the scheduled time, so stalls are not hidden), far under the
//! limit: any denial of theirs is a **false rejection**. The first half, the **known** users, send
//! from the start; the others, the **newcomers**, join one by one during the flood, evenly spread
//! over it (newcomer `i` of `n` first at `before + during × i / n`), so that most arrive while the
//! flood holds the table and what they meet does not hang on a race with its first second. Two
//! phases, by scheduled send time:
//!
//! 1. `before` (`--before`, 5 s): the known users alone;
//! 2. `during` (`--during`, 10 s): the known users, the newcomers as they join, and the **flood**:
//!    `--flood-rate` requests a second (open loop; or `--flood-concurrency` closed-loop callers),
//!    each from a new user id, `flood-<n>`.
//!
//! Beside them, `--limited-users` **limited** users ([`limited`]) spend their whole limit before
//! the run, then probe it through both phases: a probe admitted before the limit resets by the
//! rule itself is a **freed** limited user, whose counter the limiter lost (evicted) or reset.
//!
//! When the memory store is full, a new key of a rule is counted on the rule's overflow counter
//! (`on_full: aggregate`), shared with every other new key: newcomers then share a limit with the
//! flood, while known users keep their own counters. The report gives, per phase, the normal
//! users' decisions, false rejections (known users and newcomers apart), latency, and the flood's
//! decisions; and, as the flood starts and after it, the store's keys (`floodgate_keys` from the
//! server's `/metrics`, or Redis's `DBSIZE`), the process's resident memory (the server runs in
//! it), Redis's `used_memory` and the memory per key, and any `floodgate_overflow_decisions_total`
//! series the server exports; on limitador, its live counters and its own resident memory.

mod args;
pub(crate) mod limitador;
mod limited;
mod load;
mod plan;
mod probe;
mod report;

pub use self::args::{FloodArgs, FloodPeer, FloodStore, FloodTransport};
use self::limitador::Limitador;
pub use self::plan::DEFAULT_LIMITED_USERS;
use self::plan::Plan;
use self::probe::Holder;
use crate::Usage;
use crate::harness::redis;
use crate::harness::server::{LocalServer, STARTUP};
use crate::harness::target::{Shape, Target};
use crate::report::Report;
use crate::scenarios::Run;

/// The memory store's `max_keys` (and limitador's `--cache`) unless `--max-keys` says otherwise.
pub const DEFAULT_MAX_KEYS: u64 = 10_000;

/// The name of the built-in rule.
const RULE: &str = "per_user";

/// What a run measured, for its report.
#[derive(Debug)]
pub(crate) struct Setup {
    /// `floodgate` or `limitador`.
    pub(crate) peer: FloodPeer,
    /// How the requests reached it.
    pub(crate) transport: FloodTransport,
    /// The store section's fields (Floodgate), or limitador's storage and cache.
    pub(crate) section: Vec<(String, String)>,
    /// The target, as the report names it.
    pub(crate) target: String,
    /// `limitador-server --version`.
    pub(crate) peer_version: Option<String>,
    /// Where keys and memory were read.
    pub(crate) keys_from: &'static str,
    pub(crate) rss_from: &'static str,
    /// The memory store's configured bound: [`memory_bound`] of its settings.
    pub(crate) memory_bound_bytes: Option<u64>,
}

/// About how many bytes one entry of the memory store takes, key and overflow counter alike
/// (docs/configuration.md, "A full memory store": 10 000 keys and 65 536 counters took 9.1 MB by
/// the store's estimate).
pub(crate) const BYTES_PER_ENTRY: u64 = 120;

/// The memory a memory store may hold with `config`'s settings and rules: `max_keys`, plus the
/// overflow counters of every rule that overflows, each [`BYTES_PER_ENTRY`]; `None` on another
/// store.
pub(crate) fn memory_bound(config: &floodgate_config::Config) -> Option<u64> {
    let floodgate_config::StoreConfig::Memory(memory) = &config.store else { return None };
    let rules = (config.policy.rules().count()
        + config.domains.values().map(|d| d.rules().count()).sum::<usize>()) as u64;
    let counters = match memory.on_full {
        floodgate::OnFull::Aggregate => memory.overflow_counters as u64 * rules,
        floodgate::OnFull::Reject => 0,
    };
    Some((memory.max_keys as u64 + counters) * BYTES_PER_ENTRY)
}

/// Runs `flood`.
pub async fn run(args: &FloodArgs) -> anyhow::Result<Report> {
    let plan = Plan::new(args)?;
    match args.peer {
        FloodPeer::Floodgate => on_floodgate(args, &plan).await,
        FloodPeer::Limitador => on_limitador(args, &plan).await,
    }
}

/// The run on an in-process Floodgate server, on its memory store or on a Redis it starts.
async fn on_floodgate(args: &FloodArgs, plan: &Plan) -> anyhow::Result<Report> {
    let node = match args.store {
        FloodStore::Memory => None,
        FloodStore::Redis => Some(redis::start(&args.redis_server)?),
    };
    let section = store_section(args, node.as_ref().map(|n| n.url()).as_deref())?;
    let config = policy(args, &section)?;
    let memory_bound_bytes = memory_bound(&config);
    let server = LocalServer::start_config(config).await?;
    let result = async {
        match args.store {
            // A Redis store connects on its first call: one decision before the load.
            FloodStore::Redis => server.wait_deciding(STARTUP).await?,
            FloodStore::Memory => {
                anyhow::ensure!(
                    server.wait_ready(STARTUP).await,
                    "the server on {} did not become ready",
                    server.addr
                )
            }
        }
        let transport = args.transport();
        let target = match transport {
            FloodTransport::Http => Target::http(&server.url(), args.timeout, false)?,
            FloodTransport::Grpc => Target::grpc(&server.grpc_addr.to_string(), args.timeout, false).await?,
        };
        let shape = Shape { key_descriptor: args.key_descriptor.clone(), with: Vec::new(), domain: None };
        let holder = Holder::Floodgate(&server, node.as_ref());
        let run = load::run(args, plan, &target, shape, holder).await;
        let place = match &node {
            Some(node) => format!("on redis-server {}", redis::addr(node)),
            None => "(memory store)".to_owned(),
        };
        let setup = Setup {
            peer: FloodPeer::Floodgate,
            transport,
            section,
            target: format!("1 in-process server {place}, over {}", target.describe()),
            peer_version: None,
            keys_from: holder.keys_from(),
            rss_from: holder.rss_from(),
            memory_bound_bytes,
        };
        Ok(report::report(args, plan, &setup, run))
    }
    .await;
    server.stop().await;
    drop(node);
    result
}

/// The run on a `limitador-server` it starts (killed at the end, however the run ends).
async fn on_limitador(args: &FloodArgs, plan: &Plan) -> anyhow::Result<Report> {
    let limits = limitador::limits_yaml(&args.key_descriptor, args.limit, args.window)?;
    let cache = args.max_keys.unwrap_or(DEFAULT_MAX_KEYS);
    let server = Limitador::start(&args.limitador_server, &limits, cache).await?;
    let target = Target::grpc(&server.rls_addr(), args.timeout, false).await?;
    let shape = Shape {
        key_descriptor: args.key_descriptor.clone(),
        with: Vec::new(),
        domain: Some(limitador::NAMESPACE.into()),
    };
    let holder = Holder::Limitador(&server);
    let run = load::run(args, plan, &target, shape, holder).await;
    let setup = Setup {
        peer: FloodPeer::Limitador,
        transport: FloodTransport::Grpc,
        section: vec![("storage".into(), "memory".into()), ("cache".into(), cache.to_string())],
        target: format!("limitador-server (memory, --cache {cache}), over {}", target.describe()),
        peer_version: Some(server.version.clone()),
        keys_from: holder.keys_from(),
        rss_from: holder.rss_from(),
        memory_bound_bytes: None,
    };
    drop(server);
    Ok(report::report(args, plan, &setup, run))
}

// === the configuration ===

/// The store section's fields, in order: the run's (`kind`, and `max_keys` and `on_full` on
/// memory, `url` on Redis), each `--store-field` replacing the field of its name or appended.
pub(crate) fn store_section(
    args: &FloodArgs,
    redis_url: Option<&str>,
) -> Result<Vec<(String, String)>, Usage> {
    let mut fields: Vec<(String, String)> = vec![("kind".into(), args.store.name().into())];
    match (args.store, redis_url) {
        (FloodStore::Memory, _) => {
            fields.push(("max_keys".into(), args.max_keys.unwrap_or(DEFAULT_MAX_KEYS).to_string()));
            fields.push(("on_full".into(), "aggregate".into()));
        }
        (FloodStore::Redis, Some(url)) => fields.push(("url".into(), format!("{url:?}"))),
        (FloodStore::Redis, None) => return Err(Usage("a Redis store needs its URL".into())),
    }
    for (name, value) in &args.store_fields {
        if name == "kind" {
            return Err(Usage("--store-field kind: the store is chosen with --store".into()));
        }
        match fields.iter_mut().find(|(n, _)| n == name) {
            Some(field) => field.1.clone_from(value),
            None => fields.push((name.clone(), value.clone())),
        }
    }
    Ok(fields)
}

/// The store section as YAML.
fn store_yaml(fields: &[(String, String)]) -> String {
    let mut yaml = String::from("store:\n");
    for (name, value) in fields {
        yaml.push_str(&format!("  {name}: {value}\n"));
    }
    yaml
}

/// The store section on one line, for the report: `kind: memory, max_keys: 10000, …`.
pub(crate) fn store_line(fields: &[(String, String)]) -> String {
    fields.iter().map(|(n, v)| format!("{n}: {v}")).collect::<Vec<_>>().join(", ")
}

/// The server's configuration: the built-in rule on the run's store, or the rules of `--config`
/// with the run's store in place of the file's.
fn policy(args: &FloodArgs, section: &[(String, String)]) -> anyhow::Result<floodgate_config::Config> {
    let rule =
        args.algorithm.rule_yaml(RULE, &args.key_descriptor, args.limit, args.window).map_err(Usage)?;
    let yaml = format!("{}rules:\n{rule}", store_yaml(section));
    let ours = floodgate_config::parse("flood store (--store, --max-keys, --store-field)", &yaml)
        .map_err(|e| Usage(e.to_string()))?;
    let Some(path) = &args.config else { return Ok(ours) };
    let mut config = floodgate_config::load(path).map_err(|e| Usage(e.to_string()))?;
    config.store = ours.store;
    config.survival = ours.survival;
    Ok(config)
}

/// `floodgate-bench flood` with `extra` on its command line, parsed.
#[cfg(test)]
fn test_args(extra: &[&str]) -> FloodArgs {
    use clap::Parser as _;
    let cli = crate::cli::Cli::try_parse_from([&["floodgate-bench", "flood"], extra].concat()).unwrap();
    let crate::cli::Scenario::Flood(args) = cli.scenario else { panic!("not flood") };
    args
}

impl Run for FloodArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::test_args as args;
    use super::*;

    #[test]
    fn store_fields_replace_the_runs_own_or_are_appended() {
        let fields = store_section(&args(&["--max-keys", "200"]), None).unwrap();
        assert_eq!(store_line(&fields), "kind: memory, max_keys: 200, on_full: aggregate");
        let a = args(&["--store-field", "on_full=reject", "--store-field", "sweep_interval=1s"]);
        let fields = store_section(&a, None).unwrap();
        assert_eq!(store_line(&fields), "kind: memory, max_keys: 10000, on_full: reject, sweep_interval: 1s");
        assert_eq!(
            store_yaml(&fields),
            "store:\n  kind: memory\n  max_keys: 10000\n  on_full: reject\n  sweep_interval: 1s\n"
        );
        let redis = store_section(
            &args(&["--store", "redis", "--store-field", "deadline=200ms"]),
            Some("redis://127.0.0.1:7"),
        );
        assert_eq!(store_line(&redis.unwrap()), "kind: redis, url: \"redis://127.0.0.1:7\", deadline: 200ms");
        assert!(store_section(&args(&["--store-field", "kind=redis"]), None).is_err());
    }

    #[test]
    fn the_configuration_is_the_rule_on_the_runs_store() {
        let a = args(&["--max-keys", "200", "--store-field", "sweep_interval=2s"]);
        let config = policy(&a, &store_section(&a, None).unwrap()).unwrap();
        let floodgate_config::StoreConfig::Memory(memory) = &config.store else {
            panic!("{:?}", config.store)
        };
        assert_eq!((memory.max_keys, memory.on_full), (200, floodgate::OnFull::Aggregate));
        assert_eq!(memory.sweep_interval, Duration::from_secs(2));
        assert_eq!(memory_bound(&config), Some((200 + 65_536) * BYTES_PER_ENTRY), "one rule's counters");
        let reject = args(&["--max-keys", "200", "--store-field", "on_full=reject"]);
        let config = policy(&reject, &store_section(&reject, None).unwrap()).unwrap();
        assert_eq!(
            memory_bound(&config),
            Some(200 * BYTES_PER_ENTRY),
            "no counters when full keys are refused"
        );
        let bad = args(&["--store-field", "max_keys=none"]);
        let e = policy(&bad, &store_section(&bad, None).unwrap()).unwrap_err();
        assert!(e.downcast_ref::<Usage>().is_some(), "{e:#}");
    }
}
