//! `flood`: a flood of distinct keys — a user id never seen before on every request — beside
//! normal users who stay under their own limits: what the flood does to them.
//!
//! The run starts one in-process `floodgate` server on the store it measures: the memory store,
//! capped at `max_keys` (`--max-keys`, default 10 000; `on_full: aggregate`), or a `redis-server`
//! it starts itself (a free loopback port, no persistence, killed at the end however the run ends,
//! as `outage` runs it). `--store-field NAME=VALUE` writes further fields into the store section,
//! or replaces the run's own, so the same command measures other store settings. The policy is
//! one rule per user (`--algorithm`, `--limit` per `--window`; default a fixed window of 100 a
//! minute), or the rules of `--config FILE`.
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
//! When the memory store is full, a new key of a rule is counted on the rule's overflow counter
//! (`on_full: aggregate`), shared with every other new key: newcomers then share a limit with the
//! flood, while known users keep their own counters. The report gives, per phase, the normal
//! users' decisions, false rejections (known users and newcomers apart), latency, and the flood's
//! decisions; and, as the flood starts and after it, the store's keys (`floodgate_keys` from the
//! server's `/metrics`, or Redis's `DBSIZE`), the process's resident memory (the server runs in
//! it), Redis's `used_memory` and the memory per key, and any `floodgate_overflow_decisions_total`
//! series the server exports.

mod load;
mod probe;
mod report;

use std::time::Duration;

use crate::Usage;
use crate::cli::{FloodArgs, FloodStore, MAX_DURATION};
use crate::instances::LocalServer;
use crate::redis_node::{RedisNode, STARTUP};
use crate::report::Report;
use crate::target::{Shape, Target};

/// The memory store's `max_keys` unless `--max-keys` says otherwise.
pub const DEFAULT_MAX_KEYS: u64 = 10_000;

/// The name of the built-in rule.
const RULE: &str = "per_user";

/// Runs `flood`.
pub async fn run(args: &FloodArgs) -> anyhow::Result<Report> {
    let plan = Plan::new(args)?;
    let node = match args.store {
        FloodStore::Memory => None,
        FloodStore::Redis => Some(RedisNode::start(&args.redis_server, &[]).await?),
    };
    let section = store_section(args, node.as_ref().map(RedisNode::url).as_deref())?;
    let config = policy(args, &section)?;
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
        let target = Target::http(&server.url(), args.timeout, false)?;
        let shape = Shape { key_descriptor: args.key_descriptor.clone(), with: Vec::new(), domain: None };
        let run = load::run(args, &plan, &target, shape, &server, node.as_ref()).await;
        Ok(report::report(args, &plan, &section, node.as_ref(), run))
    }
    .await;
    server.stop().await;
    drop(node);
    result
}

// === the plan ===

/// Who sends what, worked out from the flags (and checked).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    /// Normal users sending from the start: `known-0` … (the first half).
    pub(crate) known: u64,
    /// Normal users whose first request is sent during the flood: `new-0` ….
    pub(crate) newcomers: u64,
    /// Requests per second of each normal user.
    pub(crate) per_user_rate: f64,
    /// The `before` phase.
    pub(crate) before: Duration,
    /// The `during` phase.
    pub(crate) during: Duration,
}

impl Plan {
    /// The plan of `args`, or why it cannot be run.
    pub(crate) fn new(args: &FloodArgs) -> Result<Plan, Usage> {
        if args.before.is_zero() || args.during.is_zero() || args.before + args.during > MAX_DURATION {
            return Err(Usage("--before and --during must be above zero and at most 1h together".into()));
        }
        for (flag, rate) in [("--normal-rate", args.normal_rate), ("--flood-rate", args.flood_rate)] {
            if !(rate.is_finite() && rate > 0.0 && rate <= 10_000_000.0) {
                return Err(Usage(format!("{flag} must be between 0 and 10 000 000 per second")));
            }
        }
        if args.timeout.is_zero() {
            return Err(Usage("--timeout must be above zero".into()));
        }
        if args.store == FloodStore::Redis && args.max_keys.is_some() {
            return Err(Usage("--max-keys is a memory store setting; Redis holds every key".into()));
        }
        let known = args.users / 2;
        let per_user_rate = args.normal_rate / args.users as f64;
        // Known users send in each phase (newcomers send once they join, whatever the rate).
        for (flag, phase) in [("--before", args.before), ("--during", args.during)] {
            if per_user_rate * phase.as_secs_f64() < 1.0 {
                return Err(Usage(format!(
                    "each user sends --normal-rate / --users = {per_user_rate:.3} requests a second: not \
                     one within {flag} ({phase:?}); raise --normal-rate or {flag}, or lower --users"
                )));
            }
        }
        let plan = Plan {
            known,
            newcomers: args.users - known,
            per_user_rate,
            before: args.before,
            during: args.during,
        };
        if args.config.is_none() {
            let most = plan.most_per_user_in(args.window);
            if most > args.limit {
                return Err(Usage(format!(
                    "a normal user may send {most} requests within a --window of {:?}, over the --limit \
                     of {}: their denials would not be false rejections; lower --normal-rate or raise \
                     --users or --limit",
                    args.window, args.limit
                )));
            }
        }
        Ok(plan)
    }

    /// Every normal user.
    pub(crate) fn users(&self) -> u64 {
        self.known + self.newcomers
    }

    /// The most requests one normal user can send within any span of `window` (one every
    /// `1 / per_user_rate`; a known user sends over the whole run).
    pub(crate) fn most_per_user_in(&self, window: Duration) -> u64 {
        let r = self.per_user_rate;
        let in_window = (r * window.as_secs_f64()).ceil() as u64 + 1;
        in_window.min(self.known_requests_each())
    }

    /// The requests of one known user over the run (at most).
    pub(crate) fn known_requests_each(&self) -> u64 {
        (self.per_user_rate * (self.before + self.during).as_secs_f64()).ceil() as u64
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> FloodArgs {
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from([&["floodgate-bench", "flood"], extra].concat()).unwrap();
        let crate::cli::Scenario::Flood(args) = cli.scenario else { panic!("not flood") };
        args
    }

    #[test]
    fn the_default_plan_sends_each_user_one_request_a_second() {
        let plan = Plan::new(&args(&[])).unwrap();
        assert_eq!((plan.known, plan.newcomers, plan.users()), (1000, 1000, 2000));
        assert_eq!(plan.per_user_rate, 1.0);
        // A minute's window holds the whole run of 15 s: at most 15 requests of a user.
        assert_eq!((plan.known_requests_each(), plan.most_per_user_in(Duration::from_secs(60))), (15, 15));
        assert_eq!(plan.most_per_user_in(Duration::from_secs(5)), 6);
        let odd = Plan::new(&args(&["--users", "5", "--normal-rate", "5"])).unwrap();
        assert_eq!((odd.known, odd.newcomers), (2, 3));
    }

    #[test]
    fn a_plan_where_normal_users_could_reach_their_limit_or_send_nothing_is_refused() {
        let e = Plan::new(&args(&["--limit", "10"])).unwrap_err();
        assert!(e.0.contains("may send 15 requests") && e.0.contains("false rejections"), "{e}");
        assert!(Plan::new(&args(&["--limit", "15"])).is_ok());
        // With a policy file, what its rules allow is the caller's to know.
        assert!(Plan::new(&args(&["--config", "policy.yaml"])).is_ok());
        let e = Plan::new(&args(&["--normal-rate", "100"])).unwrap_err();
        assert!(e.0.contains("not one within --before"), "{e}");
        assert!(Plan::new(&args(&["--before", "0s"])).is_err());
        assert!(Plan::new(&args(&["--flood-rate", "0"])).is_err());
        assert!(Plan::new(&args(&["--before", "50m", "--during", "20m"])).is_err());
        let e = Plan::new(&args(&["--store", "redis", "--max-keys", "5"])).unwrap_err();
        assert!(e.0.contains("memory store setting"), "{e}");
    }

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
        let bad = args(&["--store-field", "max_keys=none"]);
        let e = policy(&bad, &store_section(&bad, None).unwrap()).unwrap_err();
        assert!(e.downcast_ref::<Usage>().is_some(), "{e:#}");
    }
}
