//! Envoy's rate limit quota service, below its front door (`floodgate-api`'s `rlqs`): the
//! streams, their buckets, and each bucket group's global limit split among the streams by their
//! demand (DESIGN.md §17, `docs/rlqs.md`). Nothing here knows a protocol buffer.
//!
//! - [`split`]: the fairness rule, pure arithmetic over rates.
//! - [`Strategy`] and [`Shared`]: a share as what an Envoy applies (a token bucket, requests per
//!   time unit, allow all or deny all).
//! - [`Quotas`]: this instance's streams and groups; a report settles its group at once.
//! - [`run`]: twice a reporting interval, abandons idle buckets, renews assignments and, on a Redis
//!   store, exchanges each group's demand with the other instances (`floodgate-redis`'s `rlqs`),
//!   so that shares sum to the limit over the fleet. On the memory store the fleet is this
//!   instance.

mod bucket;
mod quotas;
mod share;
mod strategy;
#[cfg(test)]
mod tests;
mod view;

pub use self::bucket::{
    Action, BucketId, Inbox, MAX_BUCKETS_PER_STREAM, Outbox, QuotaError, Report, StreamId, outbox,
};
pub use self::quotas::Quotas;
pub use self::share::split;
pub use self::strategy::{Shared, Strategy, TimeUnit};
pub use self::view::{GroupDemand, GroupView, MemberView};

use std::time::Duration;

use floodgate_core::Clock;
use floodgate_redis::RedisStore;
use floodgate_redis::rlqs::MemberDemand;
use tokio::sync::watch;

use crate::{App, stopped};

/// Runs until `stop`: ticks twice a reporting interval ([`Quotas::tick`]) and, on a Redis store
/// (where it makes the instance one of a fleet, [`Quotas::join_fleet`]), exchanges demand and
/// claims with the fleet ([`exchange`]) on each tick and as soon as a report moves a stream's
/// demand beyond the change threshold or a group needs its claim changed, an eighth of a
/// reporting interval apart at least. On stop, every stream's assignments expire at
/// once and the streams close ([`Quotas::shutdown`]).
pub async fn run(app: App, mut stop: watch::Receiver<bool>) {
    if app.control().store().redis().is_some() {
        app.rlqs().join_fleet();
    }
    let mut interval = current_interval(&app);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let running = app.control().current();
                let config = running.rlqs.as_ref();
                if let Some(redis) = app.control().store().redis() {
                    let ttl = config.map_or(Duration::from_secs(3), |c| c.reporting_interval * 3);
                    exchange(app.rlqs(), redis, ttl).await;
                }
                app.rlqs().tick(config);
                app.metrics().rlqs().record_rules(rule_sums(&app.rlqs().view()));
                let now = current_interval(&app);
                if now != interval {
                    interval = now;
                    tick = tokio::time::interval(interval);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                }
            }
            () = app.rlqs().moved(), if app.control().store().redis().is_some() => {
                let running = app.control().current();
                if let Some(redis) = app.control().store().redis() {
                    let ttl = running.rlqs.as_ref().map_or(Duration::from_secs(3), |c| c.reporting_interval * 3);
                    exchange(app.rlqs(), redis, ttl).await;
                }
                // A group waiting for room asks again at once: exchanges it asks for are a
                // quarter of a tick apart at least.
                tokio::select! {
                    () = tokio::time::sleep(interval / 4) => {}
                    () = stopped(&mut stop) => {
                        app.rlqs().shutdown();
                        return;
                    }
                }
            }
            () = stopped(&mut stop) => {
                app.rlqs().shutdown();
                return;
            }
        }
    }
}

/// Per rule (`<domain>/<rule>`): the demand of this instance's streams, the rate assigned over
/// the fleet and the limit, each summed over the rule's groups (blanket rules left out).
fn rule_sums(groups: &[GroupView]) -> std::collections::BTreeMap<String, [f64; 3]> {
    let mut sums: std::collections::BTreeMap<String, [f64; 3]> = std::collections::BTreeMap::new();
    for g in groups {
        let Some(limit) = g.limit else { continue };
        let entry = sums.entry(format!("{}/{}", g.domain, g.rule)).or_default();
        entry[0] += g.members.iter().map(|m| m.demand).sum::<f64>();
        entry[1] += g.fleet_assigned;
        entry[2] += limit;
    }
    sums
}

/// Half the reporting interval: a shift of demand reported to one instance reaches the others
/// within about an interval (the writer's tick, then the reader's), rather than two.
fn current_interval(app: &App) -> Duration {
    app.control().current().rlqs.as_ref().map_or(Duration::from_secs(1), |c| c.reporting_interval) / 2
}

/// Writes every group's demand of `quotas` to the fleet on `redis` (entries live for `ttl`) and
/// takes in the other instances'. A group whose exchange fails keeps the fleet's demand it last
/// read (the failure is logged once per tick).
pub async fn exchange<C: Clock>(quotas: &Quotas<C>, redis: &RedisStore, ttl: Duration) {
    let mut failed = None;
    for group in quotas.demand() {
        let members: Vec<MemberDemand<'_>> = group
            .members
            .iter()
            .map(|(name, demand, desired)| MemberDemand { name, demand: *demand, desired: *desired })
            .collect();
        let hash = quotas::fleet_hash(&group.group);
        match redis.rlqs_demand(hash, quotas.instance(), group.limit, &members, ttl).await {
            Ok(read) => {
                let claim = read.granted * members.iter().map(|m| m.desired).sum::<f64>();
                quotas.exchange(&group.group, claim, &read.others);
            }
            Err(e) => failed = Some(e),
        }
    }
    if let Some(e) = failed {
        tracing::debug!(error = %e, "rlqs: the fleet's demand could not be exchanged; the last read stands");
    }
}
