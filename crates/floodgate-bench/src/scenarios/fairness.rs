//! `fairness`: who gets hurt. A mixed traffic model on a simulated clock, judged by a policy:
//!
//! - **normal users**, each with their own address: actions separated by an exponential think time
//!   (mean `--think`, at least 300 ms); an action is sometimes a double-click (a second request
//!   80–250 ms later) or a burst (a page load: 3–8 requests 50–300 ms apart);
//! - **NAT users**: the same humans, all behind one address;
//! - **bots**: one request every `--bot-interval` (±2 %), each with its own user and address.
//!
//! Every request carries `user`, `ip` and `route` = `GET /api`. The run is deterministic for a
//! `--seed`. Reported: the false-rejection rate of normal users (denied / sent, NAT users
//! included, and separately), the share of users who saw a rejection at all, and the rejection
//! rate of bots. A policy that rejects more than 1 % of normal requests is mis-set.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use floodgate::{Descriptors, Engine, MemoryConfig, MemoryStore};
use floodgate_core::{ManualClock, Timestamp};
use serde::Serialize;

use crate::Usage;
use crate::args::{Output, parse_duration};
use crate::harness::keys::Rng;
use crate::report::math::rate;
use crate::report::progress::Progress;
use crate::report::units::micros;
use crate::report::{Outcome, Report, Tally};
use crate::scenarios::Run;

/// `fairness`.
#[derive(Debug, Clone, Args)]
pub struct FairnessArgs {
    /// The policy to judge (native YAML; requests carry `user`, `ip` and `route` = "GET /api").
    /// Default: 30 per minute per user and 120 per minute per IP (sliding windows).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Normal users with their own address.
    #[arg(long, default_value_t = 200)]
    pub normal_users: u64,
    /// Further normal users who all share one address (a NAT, an office, a mobile carrier).
    #[arg(long, default_value_t = 10)]
    pub nat_users: u64,
    /// Scripted bots, each with its own user and address.
    #[arg(long, default_value_t = 3)]
    pub bots: u64,
    /// A bot's request interval.
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = parse_duration)]
    pub bot_interval: Duration,
    /// A human's mean think time between actions.
    #[arg(long, value_name = "DURATION", default_value = "6s", value_parser = parse_duration)]
    pub think: Duration,
    /// Chance that an action is a double-click (a second request 80–250 ms later).
    #[arg(long, default_value_t = 0.05)]
    pub double_click: f64,
    /// Chance that an action is a burst (a page load: 3–8 requests within ~1 s).
    #[arg(long, default_value_t = 0.03)]
    pub burst: f64,
    /// Simulated time.
    #[arg(long, short, value_name = "DURATION", default_value = "600s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Seed of the traffic model.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output.
    #[command(flatten)]
    pub output: Output,
}

impl Run for FairnessArgs {
    async fn run(&self) -> anyhow::Result<Report> {
        run(self).await
    }
}

/// The built-in policy (`policies/fairness.yaml`).
pub const DEFAULT_POLICY: &str = include_str!("../../policies/fairness.yaml");

/// Above this false-rejection rate a policy is mis-set.
pub const ACCEPTABLE_FALSE_REJECTIONS: f64 = 0.01;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Normal,
    Nat,
    Bot,
}

struct Actor {
    user: String,
    ip: String,
    kind: Kind,
    sent: u64,
    denied: u64,
}

/// The scenario's own JSON fields.
#[derive(Debug, Serialize)]
struct Details {
    /// Normal users, NAT users included.
    normal_users: u64,
    nat_users: u64,
    bots: u64,
    normal_requests: u64,
    normal_rejected: u64,
    /// Rejected / sent over all normal users' requests.
    false_rejection_rate: f64,
    /// The same over the users behind the NAT only.
    nat_false_rejection_rate: f64,
    /// Normal users who saw at least one rejection / normal users.
    users_with_a_rejection: f64,
    bot_requests: u64,
    bot_rejected: u64,
    bot_rejection_rate: f64,
    /// `ok` or `mis-set: ...`.
    verdict: String,
    seed: u64,
}

/// Runs `fairness`.
pub async fn run(args: &FairnessArgs) -> anyhow::Result<Report> {
    let config = match &args.config {
        Some(path) => floodgate_config::load(path),
        None => floodgate_config::parse("built-in fairness policy", DEFAULT_POLICY),
    }
    .map_err(|e| Usage(e.to_string()))?;
    if args.duration.is_zero() || args.duration > Duration::from_secs(7 * 86_400) {
        return Err(Usage("--duration (simulated) must be between 1ms and 7 days".into()).into());
    }
    if args.bot_interval < Duration::from_millis(1) || args.think < Duration::from_millis(1) {
        return Err(Usage("--bot-interval and --think must be at least 1ms".into()).into());
    }
    let (mut actors, events) = traffic(args);
    if events.len() > 50_000_000 {
        return Err(
            Usage(format!("{} requests: too many to simulate; shorten --duration", events.len())).into()
        );
    }

    // Minute-aligned start, so windows start as they would on the minute.
    let t0 = 1_000_000_020_000_000u64;
    let clock = ManualClock::new(Timestamp::from_micros(t0));
    let engine = Engine::new(config.policy, MemoryStore::with_config(MemoryConfig::default(), clock.clone()));
    let progress = Progress::new("fairness (simulated)", events.len() as u64, args.output.quiet);
    let started = Instant::now();
    let mut tally = Tally::default();
    for (n, &(t, who)) in events.iter().enumerate() {
        clock.set(Timestamp::from_micros(t0 + t));
        let actor = &mut actors[who];
        let d = Descriptors::new()
            .with("user", actor.user.clone())
            .with("ip", actor.ip.clone())
            .with("route", "GET /api");
        let sent = Instant::now();
        let outcome = match engine.check(&d, 1).await {
            Ok(v) if v.allowed => Outcome::Allowed,
            Ok(_) => Outcome::Denied,
            Err(_) => Outcome::Error("engine"),
        };
        tally.record(outcome, u64::try_from(sent.elapsed().as_nanos()).unwrap_or(u64::MAX), t / 1000);
        actor.sent += 1;
        actor.denied += u64::from(outcome != Outcome::Allowed);
        if n % 4096 == 0 {
            progress.set(n as u64);
        }
    }
    progress.finish();

    let sum = |pred: &dyn Fn(&Actor) -> bool, f: &dyn Fn(&Actor) -> u64| -> u64 {
        actors.iter().filter(|a| pred(a)).map(f).sum()
    };
    let human = |a: &Actor| a.kind != Kind::Bot;
    let normal_requests = sum(&human, &|a| a.sent);
    let normal_rejected = sum(&human, &|a| a.denied);
    let nat_requests = sum(&|a| a.kind == Kind::Nat, &|a| a.sent);
    let nat_rejected = sum(&|a| a.kind == Kind::Nat, &|a| a.denied);
    let bot_requests = sum(&|a| a.kind == Kind::Bot, &|a| a.sent);
    let bot_rejected = sum(&|a| a.kind == Kind::Bot, &|a| a.denied);
    let humans = actors.iter().filter(|a| human(a)).count() as u64;
    let hurt = actors.iter().filter(|a| human(a) && a.denied > 0).count() as u64;
    let false_rejection_rate = rate(normal_rejected, normal_requests);
    let verdict = if false_rejection_rate > ACCEPTABLE_FALSE_REJECTIONS {
        format!("mis-set: {:.2} % of normal requests rejected (over 1 %)", false_rejection_rate * 100.0)
    } else {
        "ok".to_owned()
    };
    let details = Details {
        normal_users: humans,
        nat_users: args.nat_users,
        bots: args.bots,
        normal_requests,
        normal_rejected,
        false_rejection_rate,
        nat_false_rejection_rate: rate(nat_rejected, nat_requests),
        users_with_a_rejection: rate(hurt, humans),
        bot_requests,
        bot_rejected,
        bot_rejection_rate: rate(bot_rejected, bot_requests),
        verdict,
        seed: args.seed,
    };
    let wall_s = started.elapsed().as_secs_f64();
    let mut report =
        Report::new(tally.summary("fairness", "simulated", args.duration.as_secs_f64(), wall_s), details);
    report.timeline = Some(tally.timeline);
    Ok(report)
}

/// The actors and their requests `(µs from start, actor)`, sorted by time.
fn traffic(args: &FairnessArgs) -> (Vec<Actor>, Vec<(u64, usize)>) {
    let mut rng = Rng::new(args.seed);
    let end = micros(args.duration);
    let mut actors = Vec::new();
    let mut events = Vec::new();
    let actor = |user: String, ip: String, kind| Actor { user, ip, kind, sent: 0, denied: 0 };
    for i in 0..args.normal_users {
        actors.push(actor(format!("user-{i}"), format!("10.1.{}.{}", i / 250, i % 250 + 1), Kind::Normal));
    }
    for i in 0..args.nat_users {
        actors.push(actor(format!("nat-user-{i}"), "203.0.113.7".into(), Kind::Nat));
    }
    for i in 0..args.bots {
        actors.push(actor(format!("bot-{i}"), format!("198.51.100.{}", i % 250 + 1), Kind::Bot));
    }
    let think = args.think.as_secs_f64() * 1e6;
    let ms = |n: u64| n * 1000;
    for (who, a) in actors.iter().enumerate() {
        if a.kind == Kind::Bot {
            let interval = micros(args.bot_interval);
            let mut t = rng.below(interval);
            while t < end {
                events.push((t, who));
                let jitter = interval / 50;
                t += interval - jitter + rng.below(2 * jitter + 1);
            }
            continue;
        }
        let mut t = (rng.unit() * think) as u64;
        while t < end {
            events.push((t, who));
            let r = rng.unit();
            if r < args.double_click {
                events.push((t + ms(rng.between(80, 250)), who));
            } else if r < args.double_click + args.burst {
                let mut at = t;
                for _ in 1..rng.between(3, 8) {
                    at += ms(rng.between(50, 300));
                    events.push((at, who));
                }
            }
            t += (rng.exponential(think) as u64).max(ms(300));
        }
    }
    events.retain(|&(t, _)| t < end);
    events.sort_unstable();
    (actors, events)
}
