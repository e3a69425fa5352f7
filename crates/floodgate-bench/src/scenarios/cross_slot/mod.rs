//! `cross-slot`: on a Redis Cluster, requests whose own limit denies them beside requests that
//! exactly fill a shared limit: how many of the requests that fit are refused although both their
//! limits had room (under-admission per 10,000 requests), for each order a request across slots
//! can take (`cross_slot: at_once` and `denied_first`) and, as the baseline, with every key of the
//! tenant in one slot (`hash_tag: tenant`), in the same run.
//!
//! The run starts a cluster of 3 masters (`--redis-server`, no replicas) and, for each variant in
//! turn, a [`RedisStore`](floodgate_redis::RedisStore) of its own on it, in this process, with
//! keys no other variant uses. The policy is what a deployment writes: a per-user rule keyed by
//! `[tenant, user]` (room for everything a user sends; users on the `abusive` plan: 1 an hour) and
//! a per-tenant rule keyed by `[tenant]`, fixed windows of an hour. Requests go through
//! [`floodgate::Engine`] rather than to [`Store::apply`](floodgate::Store::apply) directly: the
//! engine builds the keys as a server does, so the baseline is the real `hash_tag` configuration
//! rather than keys made to share a slot, and the latencies are those a front door sees. Users'
//! names are picked so that, by whole key, no user's key shares the tenant's slot: every request
//! of `at_once` and `denied_first` spans two slots.
//!
//! Before the load, each of `--abusers` abusive users sends its one request (admitted) and a
//! second (denied: its first denial, so that `denied_first` knows it). The tenant's room is then
//! exactly the plan's normal requests. Then `-c` callers send `--requests` requests, the next of
//! the plan each: `--abusive` percent of them from the abusers (denied by their own limit), spread
//! evenly, the others from `--users` normal users, each needing one unit of the tenant's room.
//! Every normal request refused was refused although both its limits had room: that is the
//! under-admission. Once every give-back has landed or been lost, the tenant's room left is read:
//! it must be what the requests that were not admitted left (`exact`), and the admitted ones must
//! fit the room (`never_over_admitted`).
//!
//! What to expect: `at_once` charges the tenant for each abusive request until its give-back lands,
//! a round trip later; that refuses normal requests only when the tenant's room is nearly spent —
//! here, in the last stretch of the run (`first_refusal_at_request`) — so the count is bounded by
//! the charges in flight at once (about the abusive callers), whatever `--requests`.
//! `denied_first` asks an abuser's slot first and only reads the tenant's: it charges nothing
//! elsewhere, and refuses no normal request while its hints hold. Its hints are a table of 4,096
//! entries by key hash, and an admission clears its entry: a normal user whose key shares an
//! abuser's entry makes that abuser's next request go at once. Co-located, a request is one atomic
//! call and an abusive one never charges the tenant.
//!
//! The store's deadline is `--deadline` (default 1 s, not the store's 50 ms: the scenario counts
//! admissions, and on a busy machine a slow reply must not become an error that leaves a charge of
//! its own). `--pause-master` pauses (`CLIENT PAUSE … ALL`) the master of the tenant's slot once in
//! each variant, when the plan's middle request is sent: the calls to it wait out the deadline, give-
//! backs to it are tried again, and checks Redis runs after their caller gave up (within the
//! store's not-after margin) stay charged — `charged_not_admitted` counts them.
//!
//! A fixed window starts again at the top of the hour: a variant whose load crosses it runs again
//! with fresh keys (`attempts`).

mod figures;
mod load;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use self::figures::{Figures, Plan};
use self::load::{Measured, Order, Setup};
use crate::Usage;
use crate::args::{Output, parse_duration, parse_percent};
use crate::harness::redis;
use crate::report::math;
use crate::report::progress::{Live, Progress};
use crate::report::{Errors, Grid, Report, Tally, human_us};
use crate::scenarios::Run;

/// `cross-slot`.
#[derive(Debug, Clone, Args)]
pub struct CrossSlotArgs {
    /// Requests sent in each variant (the tenant's room is its normal ones).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(2..=10_000_000))]
    pub requests: u64,
    /// The share of abusive requests, in percent.
    #[arg(long, value_name = "PERCENT", default_value = "50", value_parser = parse_percent)]
    pub abusive: f64,
    /// Abusive users: their own limit (1 an hour) is spent before the load.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub abusers: u64,
    /// Normal users: their own limit has room for every request.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub users: u64,
    /// Concurrent callers.
    #[arg(long, short = 'c', default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// The store deadline (whole milliseconds).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub deadline: Duration,
    /// Pause the master of the tenant's slot (`CLIENT PAUSE … ALL`) this long, once in each
    /// variant, when the middle request is sent.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub pause_master: Option<Duration>,
    /// The `redis-server` to run (default: the one on PATH).
    #[arg(long, value_name = "PATH", default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for CrossSlotArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// The longest `--pause-master`.
const MAX_PAUSE: Duration = Duration::from_secs(300);

/// The cluster's node timeout, Redis's default (the cluster has no replica to fail over to).
const NODE_TIMEOUT: Duration = Duration::from_secs(15);

/// The scenario's own JSON fields (docs/bench.md).
#[derive(Debug, Serialize)]
struct Details {
    requests_per_variant: u64,
    abusive_percent: f64,
    /// Abusive requests of each variant.
    abusive_requests: u64,
    /// Normal requests of each variant: the tenant's room when the load starts.
    room: u64,
    abusers: u64,
    users: u64,
    concurrency: u64,
    deadline_ms: f64,
    window_s: u64,
    /// `--pause-master`, when given.
    pause_master_ms: Option<f64>,
    at_once: Variant,
    denied_first: Variant,
    co_located: Variant,
}

/// One variant's fields.
#[derive(Debug, Serialize)]
struct Variant {
    /// `at_once` or `denied_first`, or `-` co-located (one slot: no order).
    cross_slot: &'static str,
    /// `key` or `tenant`.
    hash_tag: &'static str,
    sent: u64,
    duration_s: f64,
    requests_per_sec: f64,
    normal_sent: u64,
    normal_admitted: u64,
    normal_errors: u64,
    #[serde(flatten)]
    figures: Figures,
    /// The plan's index of the first normal request refused (`null`: none).
    first_refusal_at_request: Option<u64>,
    abusive_sent: u64,
    abusive_admitted: u64,
    abusive_denied: u64,
    abusive_errors: u64,
    /// The tenant's room left at the end.
    tenant_remaining: u64,
    give_backs: GiveBacks,
    admitted_p50_us: f64,
    admitted_p99_us: f64,
    denied_p50_us: f64,
    denied_p99_us: f64,
    errors: Errors,
    /// When the tenant's master was paused, ms from the start of the load.
    paused_at_ms: Option<f64>,
    /// 2 when the first run crossed the top of the hour.
    attempts: u32,
}

/// What became of the load's give-backs.
#[derive(Debug, Serialize)]
struct GiveBacks {
    started: u64,
    retried: u64,
    landed: u64,
    lost: u64,
}

/// Runs `cross-slot`.
pub async fn run(args: &CrossSlotArgs) -> anyhow::Result<Report> {
    let plan = validate(args)?;
    let cluster = redis::start_cluster(&args.redis_server, 0, NODE_TIMEOUT)?;
    let live = Arc::new(Live::default());
    let progress = Progress::new("cross-slot", plan.requests * 3, args.output.quiet);
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (progress, live, stop) = (progress.clone(), Arc::clone(&live), Arc::clone(&stop));
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                progress.set(live.sent());
            }
        })
    };
    let setup = Setup {
        cluster: &cluster,
        plan,
        concurrency: args.concurrency,
        deadline: args.deadline,
        pause: args.pause_master,
        live,
    };
    let mut measured = Vec::new();
    let mut result = Ok(());
    for order in Order::ALL {
        match load::run(&setup, order).await {
            Ok(m) => measured.push(m),
            Err(e) => {
                result = Err(e.context(format!("variant {}", order.name())));
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    progress.finish();
    result?;
    let [at_once, denied_first, co_located]: [Measured; 3] =
        measured.try_into().map_err(|_| anyhow::anyhow!("three variants"))?;

    let mut tally = Tally::default();
    for m in [&at_once, &denied_first, &co_located] {
        tally.merge(&m.tally);
    }
    let seconds: f64 = [&at_once, &denied_first, &co_located].iter().map(|m| m.load.as_secs_f64()).sum();
    let variants = [
        (Order::AtOnce, variant(Order::AtOnce, &at_once)),
        (Order::DeniedFirst, variant(Order::DeniedFirst, &denied_first)),
        (Order::CoLocated, variant(Order::CoLocated, &co_located)),
    ];
    let grid = grid(&variants);
    let [(_, at_once), (_, denied_first), (_, co_located)] = variants;
    let details = Details {
        requests_per_variant: plan.requests,
        abusive_percent: args.abusive,
        abusive_requests: plan.abusive(),
        room: plan.normal(),
        abusers: args.abusers,
        users: args.users,
        concurrency: args.concurrency,
        deadline_ms: args.deadline.as_secs_f64() * 1000.0,
        window_s: 3600,
        pause_master_ms: args.pause_master.map(|p| p.as_secs_f64() * 1000.0),
        at_once,
        denied_first,
        co_located,
    };
    let target = format!("in-process engine on a 3-master redis cluster ({})", cluster.urls().join(", "));
    let mut report = Report::new(tally.summary("cross-slot", &target, seconds, seconds), details);
    report.grids.push(grid);
    Ok(report)
}

fn validate(args: &CrossSlotArgs) -> Result<Plan, Usage> {
    let whole_ms = args.deadline.subsec_nanos().is_multiple_of(1_000_000);
    if !whole_ms || args.deadline < Duration::from_millis(1) || args.deadline > Duration::from_secs(60) {
        return Err(Usage("--deadline must be whole milliseconds between 1ms and 60s".into()));
    }
    if let Some(pause) = args.pause_master
        && (pause < Duration::from_millis(1) || pause > MAX_PAUSE)
    {
        return Err(Usage("--pause-master must be between 1ms and 5m".into()));
    }
    let plan = Plan {
        requests: args.requests,
        abusive_bp: (args.abusive * 100.0).round() as u64,
        abusers: args.abusers,
        users: args.users,
    };
    if plan.normal() == 0 {
        return Err(Usage("--abusive leaves no normal request: nothing to under-admit".into()));
    }
    Ok(plan)
}

/// One variant's fields, from what its load came to.
fn variant(order: Order, m: &Measured) -> Variant {
    let c = &m.counts;
    let sent = m.tally.sent();
    let seconds = m.load.as_secs_f64();
    let (admitted, denied) = (math::percentiles(&m.admitted), math::percentiles(&m.denied));
    let gb = m.give_backs;
    Variant {
        cross_slot: match order {
            Order::AtOnce | Order::DeniedFirst => order.name(),
            Order::CoLocated => "-",
        },
        hash_tag: if order == Order::CoLocated { "tenant" } else { "key" },
        sent,
        duration_s: seconds,
        requests_per_sec: if seconds > 0.0 { sent as f64 / seconds } else { 0.0 },
        normal_sent: c.normal_sent,
        normal_admitted: c.normal_admitted,
        normal_errors: c.normal_errors,
        figures: c.figures(),
        first_refusal_at_request: m.first_refusal,
        abusive_sent: c.abusive_sent,
        abusive_admitted: c.abusive_admitted,
        abusive_denied: c.abusive_sent - c.abusive_admitted - c.abusive_errors,
        abusive_errors: c.abusive_errors,
        tenant_remaining: c.tenant_remaining,
        give_backs: GiveBacks { started: gb.started, retried: gb.retried, landed: gb.landed, lost: gb.lost },
        admitted_p50_us: admitted.p50_us,
        admitted_p99_us: admitted.p99_us,
        denied_p50_us: denied.p50_us,
        denied_p99_us: denied.p99_us,
        errors: m.tally.errors_report(),
        paused_at_ms: m.paused_at.map(|p| p.as_secs_f64() * 1000.0),
        attempts: m.attempts,
    }
}

/// The three variants side by side, printed under the summary.
fn grid(variants: &[(Order, Variant)]) -> Grid {
    let row = |label: &str, cell: &dyn Fn(&Variant) -> String| {
        (label.to_owned(), variants.iter().map(|(_, v)| cell(v)).collect::<Vec<_>>())
    };
    let us = |p50: f64, p99: f64| format!("{} / {}", human_us(p50), human_us(p99));
    let rows = vec![
        row("sent", &|v| v.sent.to_string()),
        row("requests/s", &|v| format!("{:.0}", v.requests_per_sec)),
        row("normal sent", &|v| v.normal_sent.to_string()),
        row("normal admitted", &|v| v.normal_admitted.to_string()),
        row("normal refused", &|v| v.figures.normal_refused.to_string()),
        row("normal errors", &|v| v.normal_errors.to_string()),
        row("under-admitted /10k requests", &|v| format!("{:.2}", v.figures.under_admitted_per_10k_requests)),
        row("under-admitted /10k normal", &|v| format!("{:.2}", v.figures.under_admitted_per_10k_normal)),
        row("first refusal at request", &|v| {
            v.first_refusal_at_request.map_or("-".into(), |i| i.to_string())
        }),
        row("tenant remaining", &|v| v.tenant_remaining.to_string()),
        row("charged not admitted", &|v| v.figures.charged_not_admitted.to_string()),
        row("exact", &|v| v.figures.exact.to_string()),
        row("never over-admitted", &|v| v.figures.never_over_admitted.to_string()),
        row("abusive admitted", &|v| v.abusive_admitted.to_string()),
        row("give-backs started", &|v| v.give_backs.started.to_string()),
        row("give-backs retried", &|v| v.give_backs.retried.to_string()),
        row("give-backs landed", &|v| v.give_backs.landed.to_string()),
        row("give-backs lost", &|v| v.give_backs.lost.to_string()),
        row("errors", &|v| v.errors.total.to_string()),
        row("admitted p50 / p99", &|v| us(v.admitted_p50_us, v.admitted_p99_us)),
        row("denied p50 / p99", &|v| us(v.denied_p50_us, v.denied_p99_us)),
    ];
    let columns = variants.iter().map(|(order, _)| order.name().to_owned()).collect();
    Grid { head: "variant".into(), columns, rows }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Scenario};

    fn args(extra: &[&str]) -> CrossSlotArgs {
        let argv = [&["floodgate-bench", "cross-slot"][..], extra].concat();
        match Cli::try_parse_from(argv).expect("arguments").scenario {
            Scenario::CrossSlot(args) => args,
            other => panic!("not cross-slot: {other:?}"),
        }
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let a = args(&[]);
        assert_eq!((a.requests, a.abusive, a.abusers, a.users, a.concurrency), (20_000, 50.0, 32, 1_000, 64));
        assert_eq!((a.deadline, a.pause_master), (Duration::from_secs(1), None));
        let plan = validate(&a).expect("valid");
        assert_eq!((plan.abusive(), plan.normal()), (10_000, 10_000));
    }

    #[test]
    fn a_plan_without_normal_requests_or_a_pause_past_five_minutes_is_refused() {
        assert!(validate(&args(&["--abusive", "100"])).is_err());
        assert!(validate(&args(&["--pause-master", "6m"])).is_err());
        assert!(validate(&args(&["--deadline", "250us"])).is_err());
        let plan = validate(&args(&["--requests", "1001", "--abusive", "25%"])).expect("valid");
        assert_eq!((plan.abusive(), plan.normal()), (250, 751));
    }
}
