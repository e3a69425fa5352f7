//! One order's run: a store of its own on the cluster, keys no other run used, the abusers' own
//! limits spent, the load, and the tenant's room read once every give-back has landed or is lost.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use floodgate::{ByDescriptor, Descriptors, Engine, EngineError, Limit, Policy, Rule, StoreError, Verdict};
use floodgate_core::FixedWindow;
use floodgate_redis::{CrossSlot, GiveBacks, HashTag, RedisConfig, RedisStore};
use hdrhistogram::Histogram;
use tokio::sync::Notify;

use super::figures::{Counts, Plan, Sender};
use crate::harness::redis::{self, RedisCluster};
use crate::report::progress::{Batch, Live};
use crate::report::units::{micros, millis, nanos, wall_micros};
use crate::report::{Outcome, Tally, math};

/// The descriptors and rules of the policy.
const TENANT: &str = "tenant";
const USER: &str = "user";
const PLAN: &str = "plan";
/// The plan of abusive users: one request an hour.
const ABUSIVE: &str = "abusive";
const PER_USER: &str = "per-user";
const PER_TENANT: &str = "per-tenant";

/// Every limit's window: nothing replenishes during a run.
const WINDOW: Duration = Duration::from_secs(3600);

/// How long a run waits for its give-backs: past the 30 s the store tries one again.
const SETTLE_WITHIN: Duration = Duration::from_secs(40);

/// How a variant decides a request whose keys span slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    /// `cross_slot: at_once`, keys spread by whole key.
    AtOnce,
    /// `cross_slot: denied_first` (the default), keys spread by whole key.
    DeniedFirst,
    /// `hash_tag: tenant`: every key of the tenant in the tenant's slot, each request one atomic
    /// call. The baseline.
    CoLocated,
}

impl Order {
    /// The variants, in the order they run.
    pub(super) const ALL: [Order; 3] = [Order::AtOnce, Order::DeniedFirst, Order::CoLocated];

    /// The name in the report.
    pub(super) fn name(self) -> &'static str {
        match self {
            Order::AtOnce => "at_once",
            Order::DeniedFirst => "denied_first",
            Order::CoLocated => "co_located",
        }
    }

    /// The store's settings for this variant.
    fn config(self, urls: Vec<String>, deadline: Duration) -> RedisConfig {
        let base = RedisConfig { deadline, ..RedisConfig::cluster(urls) };
        match self {
            Order::AtOnce => RedisConfig { cross_slot: CrossSlot::AtOnce, ..base },
            Order::DeniedFirst => RedisConfig { cross_slot: CrossSlot::DeniedFirst, ..base },
            Order::CoLocated => RedisConfig { hash_tag: HashTag::Descriptor(TENANT.into()), ..base },
        }
    }
}

/// What every variant of a run shares.
#[derive(Debug)]
pub(super) struct Setup<'a> {
    pub(super) cluster: &'a RedisCluster,
    pub(super) plan: Plan,
    pub(super) concurrency: u64,
    pub(super) deadline: Duration,
    /// `--pause-master`: how long the tenant's master is paused, once the plan's middle request
    /// is sent.
    pub(super) pause: Option<Duration>,
    /// The progress bar's counts.
    pub(super) live: Arc<Live>,
}

/// What one variant's load came to.
#[derive(Debug)]
pub(super) struct Measured {
    pub(super) counts: Counts,
    /// Every request of the load.
    pub(super) tally: Tally,
    /// Latency of the admitted requests, and of the denied ones (ns).
    pub(super) admitted: Histogram<u64>,
    pub(super) denied: Histogram<u64>,
    /// The give-backs the load started (the warm-up's left out), once settled.
    pub(super) give_backs: GiveBacks,
    /// The plan's index of the first normal request refused, if any.
    pub(super) first_refusal: Option<u64>,
    /// How long the load took.
    pub(super) load: Duration,
    /// When the tenant's master was paused, from the start of the load.
    pub(super) paused_at: Option<Duration>,
    /// Attempts: 2 when the first crossed the top of the hour, where the fixed windows start again.
    pub(super) attempts: u32,
}

/// Runs `order`: again, with fresh keys, if the load crossed the top of the hour (where the
/// tenant's fixed window starts again, and its count with it).
pub(super) async fn run(setup: &Setup<'_>, order: Order) -> anyhow::Result<Measured> {
    if let Some(measured) = attempt(setup, order).await? {
        return Ok(measured);
    }
    match attempt(setup, order).await? {
        Some(measured) => Ok(Measured { attempts: 2, ..measured }),
        None => bail!("{}: the tenant's window started again during two runs in a row", order.name()),
    }
}

/// One attempt; `None` when the tenant's window started again during it.
async fn attempt(setup: &Setup<'_>, order: Order) -> anyhow::Result<Option<Measured>> {
    let plan = setup.plan;
    let store = RedisStore::connect(order.config(setup.cluster.urls(), setup.deadline))
        .await
        .context("connecting to the cluster")?;
    let tenant = format!("xslot-{}-{}-{}", order.name(), std::process::id(), wall_micros());
    let tenant_key = engine_key(&[PER_TENANT, TENANT, &tenant]);
    let tenant_slot = store.slot(&tenant_key);
    let co_located = order == Order::CoLocated;
    let abusers = names(&store, &tenant, "abuser-", plan.abusers, tenant_slot, co_located)?;
    let users = names(&store, &tenant, "user-", plan.users, tenant_slot, co_located)?;

    let room = plan.normal();
    let tenant_limit = window(room + plan.abusers)?;
    let policy = Policy::new([
        Rule::new(PER_USER, window(room.max(1))?)
            .key([TENANT, USER])
            .vary_by(ByDescriptor::new(PLAN).variant(ABUSIVE, window(1)?, None)),
        Rule::new(PER_TENANT, tenant_limit.clone()).key([TENANT]),
    ])?;
    let engine = Arc::new(Engine::new(policy, store.clone()));
    let of = |name: &String| Descriptors::new().with(TENANT, tenant.clone()).with(USER, name.clone());
    let abusers: Arc<Vec<Descriptors>> =
        Arc::new(abusers.iter().map(|a| of(a).with(PLAN, ABUSIVE)).collect());
    let users: Arc<Vec<Descriptors>> = Arc::new(users.iter().map(of).collect());
    let tenant_only = Descriptors::new().with(TENANT, tenant.clone());

    // Each abuser's one request, then its first denial: the load starts with every abuser denied
    // lately and the tenant's room equal to the plan's normal requests.
    for abuser in abusers.iter() {
        let first = decided(engine.check(abuser, 1).await, "an abuser's first request")?;
        let second = decided(engine.check(abuser, 1).await, "an abuser's second request")?;
        if !first.allowed || second.allowed {
            bail!(
                "an abuser's own limit of 1 admitted {} of its first two requests",
                u8::from(first.allowed) + u8::from(second.allowed)
            );
        }
    }
    let before = settled(&store).await?;
    let (left, hour) = room_left(&engine, &tenant_only).await?;
    if left != room {
        bail!("the tenant's room before the load is {left}, not {room}");
    }
    // The tenant's key is where its slot says: the node `--pause-master` pauses.
    let master = redis::node_of_slot(setup.cluster, tenant_slot);
    let redis_key =
        String::from_utf8(store.redis_key(&tenant_key, &tenant_limit)).context("the tenant's key")?;
    if redis::query(master, &["EXISTS", &redis_key]).as_deref() != Some("1") {
        bail!("the tenant's key {redis_key} is not on the master of its slot {tenant_slot}");
    }

    let next = Arc::new(AtomicU64::new(0));
    let halfway = Arc::new(Notify::new());
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..setup.concurrency {
        let (engine, abusers, users) = (Arc::clone(&engine), Arc::clone(&abusers), Arc::clone(&users));
        let (next, halfway, live) = (Arc::clone(&next), Arc::clone(&halfway), Arc::clone(&setup.live));
        workers.push(tokio::spawn(async move {
            let mut tally = WorkerTally::default();
            let mut batch = Batch::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= plan.requests {
                    break;
                }
                if i == plan.requests / 2 {
                    halfway.notify_one();
                }
                let sender = plan.sender(i);
                let descriptors = match sender {
                    Sender::Abuser(n) => &abusers[n as usize],
                    Sender::User(n) => &users[n as usize],
                };
                let sent = Instant::now();
                let outcome = outcome(engine.check(descriptors, 1).await);
                tally.record(i, sender, outcome, nanos(sent.elapsed()), millis(sent - started));
                batch.count(outcome, &live);
            }
            batch.flush(&live);
            tally
        }));
    }
    let mut paused_at = None;
    if let Some(pause) = setup.pause {
        halfway.notified().await;
        let ms = millis(pause).max(1).to_string();
        redis::query(master, &["CLIENT", "PAUSE", &ms, "ALL"])
            .context("CLIENT PAUSE on the tenant's master failed")?;
        paused_at = Some(started.elapsed());
    }
    let mut total = WorkerTally::default();
    for worker in workers {
        total.merge(worker.await?);
    }
    let load = started.elapsed();
    let after = settled(&store).await?;
    let (tenant_remaining, hour_after) = room_left(&engine, &tenant_only).await?;
    if hour_after != hour {
        return Ok(None);
    }
    let counts = Counts {
        room,
        normal_sent: total.normal_sent,
        normal_admitted: total.normal_admitted,
        normal_errors: total.normal_errors,
        abusive_sent: total.abusive_sent,
        abusive_admitted: total.abusive_admitted,
        abusive_errors: total.abusive_errors,
        tenant_remaining,
    };
    Ok(Some(Measured {
        counts,
        tally: total.tally,
        admitted: total.admitted,
        denied: total.denied,
        give_backs: GiveBacks {
            started: after.started - before.started,
            retried: after.retried - before.retried,
            landed: after.landed - before.landed,
            lost: after.lost - before.lost,
        },
        first_refusal: total.first_refusal,
        load,
        paused_at,
        attempts: 1,
    }))
}

/// `n` user names of `tenant` (`prefix0`, `prefix1`, …): those whose per-user key's slot is
/// another than the tenant's, so that each request spans two slots; co-located, the tenant's slot
/// itself, which the hash tag must give every one of them.
fn names(
    store: &RedisStore,
    tenant: &str,
    prefix: &str,
    n: u64,
    tenant_slot: u16,
    co_located: bool,
) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for k in 0.. {
        if names.len() as u64 == n {
            break;
        }
        let name = format!("{prefix}{k}");
        let slot = store.slot(&engine_key(&[PER_USER, TENANT, USER, tenant, &name]));
        if co_located && slot != tenant_slot {
            bail!("hash_tag tenant put {name}'s per-user key in slot {slot}, not the tenant's {tenant_slot}");
        }
        if co_located || slot != tenant_slot {
            names.push(name);
        }
    }
    Ok(names)
}

/// The engine's key of a rule's limit, from its fields: the rule's name, its key descriptors'
/// names, then their values, each length-prefixed (`floodgate::key`). Only to pick names by slot
/// and to find the tenant's master; the run checks that the tenant's key is there.
fn engine_key(fields: &[&str]) -> Vec<u8> {
    let mut key = Vec::new();
    for field in fields {
        key.extend_from_slice(field.len().to_string().as_bytes());
        key.push(b':');
        key.extend_from_slice(field.as_bytes());
    }
    key
}

/// A fixed window of `limit` per [`WINDOW`].
fn window(limit: u64) -> anyhow::Result<Limit> {
    let limit = NonZeroU64::new(limit).context("a limit of 0")?;
    Ok(FixedWindow::try_new(limit, WINDOW)?.into())
}

/// A verdict the store decided, or why not.
fn decided(result: Result<Verdict, EngineError>, what: &str) -> anyhow::Result<Verdict> {
    let verdict = result.with_context(|| what.to_owned())?;
    match &verdict.store_error {
        Some(e) => bail!("{what}: the store failed: {e}"),
        None => Ok(verdict),
    }
}

/// The tenant's room left, and the window (by the store's time) it was read in.
async fn room_left(engine: &Engine<RedisStore>, tenant: &Descriptors) -> anyhow::Result<(u64, u64)> {
    let verdict = decided(engine.peek(tenant, 1).await, "a peek at the tenant's room")?;
    let decision = &verdict.limits.first().context("no limit applies to the tenant alone")?.decision;
    // A peek answers as if it took its cost: the room is one more than it says, when it would admit.
    let left = if decision.allowed { decision.remaining + 1 } else { 0 };
    Ok((left, verdict.at.as_micros() / micros(WINDOW)))
}

/// Waits until every give-back the store started has landed or been lost, and returns the counts.
async fn settled(store: &RedisStore) -> anyhow::Result<GiveBacks> {
    let until = Instant::now() + SETTLE_WITHIN;
    loop {
        let counts = store.give_backs();
        if counts.landed + counts.lost >= counts.started {
            return Ok(counts);
        }
        if Instant::now() >= until {
            bail!("give-backs still in flight after {SETTLE_WITHIN:?}: {counts:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a request came to: a verdict the rules' failure policy made is an error, not a decision.
fn outcome(result: Result<Verdict, EngineError>) -> Outcome {
    match result {
        Ok(v) => match v.store_error.as_deref() {
            Some(StoreError::Timeout(_)) => Outcome::Error("timeout"),
            Some(_) => Outcome::Error("store"),
            None if v.allowed => Outcome::Allowed,
            None => Outcome::Denied,
        },
        Err(_) => Outcome::Error("engine"),
    }
}

/// One worker's counts.
#[derive(Debug)]
struct WorkerTally {
    normal_sent: u64,
    normal_admitted: u64,
    normal_errors: u64,
    abusive_sent: u64,
    abusive_admitted: u64,
    abusive_errors: u64,
    first_refusal: Option<u64>,
    tally: Tally,
    admitted: Histogram<u64>,
    denied: Histogram<u64>,
}

impl Default for WorkerTally {
    fn default() -> Self {
        WorkerTally {
            normal_sent: 0,
            normal_admitted: 0,
            normal_errors: 0,
            abusive_sent: 0,
            abusive_admitted: 0,
            abusive_errors: 0,
            first_refusal: None,
            tally: Tally::default(),
            admitted: math::latency_histogram(),
            denied: math::latency_histogram(),
        }
    }
}

impl WorkerTally {
    /// Request `i`, from `sender`, came to `outcome` in `latency_ns`, sent `at_ms` into the load.
    fn record(&mut self, i: u64, sender: Sender, outcome: Outcome, latency_ns: u64, at_ms: u64) {
        self.tally.record(outcome, latency_ns, at_ms);
        let latency_ns = latency_ns.clamp(1, self.admitted.high());
        match outcome {
            Outcome::Allowed => {
                let _ = self.admitted.record(latency_ns);
            }
            Outcome::Denied => {
                let _ = self.denied.record(latency_ns);
            }
            Outcome::Error(_) => {}
        }
        let (allowed, error) = (outcome == Outcome::Allowed, matches!(outcome, Outcome::Error(_)));
        match sender {
            Sender::Abuser(_) => {
                self.abusive_sent += 1;
                self.abusive_admitted += u64::from(allowed);
                self.abusive_errors += u64::from(error);
            }
            Sender::User(_) => {
                self.normal_sent += 1;
                self.normal_admitted += u64::from(allowed);
                self.normal_errors += u64::from(error);
                if outcome == Outcome::Denied {
                    self.first_refusal = Some(self.first_refusal.map_or(i, |f| f.min(i)));
                }
            }
        }
    }

    fn merge(&mut self, other: WorkerTally) {
        self.normal_sent += other.normal_sent;
        self.normal_admitted += other.normal_admitted;
        self.normal_errors += other.normal_errors;
        self.abusive_sent += other.abusive_sent;
        self.abusive_admitted += other.abusive_admitted;
        self.abusive_errors += other.abusive_errors;
        self.first_refusal = match (self.first_refusal, other.first_refusal) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.tally.merge(&other.tally);
        let _ = self.admitted.add(&other.admitted);
        let _ = self.denied.add(&other.denied);
    }
}
