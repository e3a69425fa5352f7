//! [`Quotas`]: this instance's RLQS streams, the buckets they report, and the shares it assigns.
//!
//! Buckets are grouped by the rule that governs them and the values of its `key`: one group, one
//! global limit. Every report updates its member's demand and settles its group at once (so that
//! a subscription is answered with an assignment, and a shift of demand is followed within the
//! interval it is reported in); [`Quotas::tick`] abandons idle buckets, renews assignments whose
//! TTL nears its end, and, with a fleet, takes in the demand of the other instances' streams
//! ([`Quotas::exchange`]).
//!
//! On a fleet, an instance assigns no more than it holds of each group's limit: its **claim**,
//! granted by the store out of what the other instances' claims leave ([`Quotas::exchange`]).
//! Between exchanges its shares move within the claim; a group whose shares want more than the
//! claim (a stream joined, demand moved here) is scaled down to it and asks for an exchange soon,
//! as does a group holding more than it wants while another instance waits for room. A group an
//! instance has not yet claimed assigns nothing until its first exchange, which is asked for at
//! once. So the assignments in force never sum past the limit over the fleet, save for the time an
//! assignment takes to reach its Envoy.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use floodgate_config::rlqs::{Grant, RlqsConfig};
use floodgate_core::{Clock, Timestamp};
use floodgate_redis::rlqs::RemoteMember;
use parking_lot::Mutex;

use super::bucket::{Action, BucketId, MAX_BUCKETS_PER_STREAM, Outbox, QuotaError, Report, StreamId};
use super::share::split;
use super::strategy::{Shared, Strategy};
use super::view::{GroupDemand, GroupView, MemberView};
use crate::metrics::RlqsSeries;

/// This instance's RLQS state. Cheap to share (`Arc`); one lock, taken per report and per tick,
/// never across an await.
#[derive(Debug)]
pub struct Quotas<C> {
    clock: C,
    instance: String,
    state: Mutex<State>,
    series: RlqsSeries,
    /// Notified when a report moves a stream's demand beyond the change threshold, or a group
    /// needs its claim changed: the fleet should hear of it before the next tick.
    moved: tokio::sync::Notify,
    /// Other instances share the limits: assignments stay within this instance's claims.
    fleet: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    config: Option<Arc<RlqsConfig>>,
    next_stream: u64,
    streams: HashMap<StreamId, Stream>,
    groups: HashMap<GroupKey, Group>,
    closed: bool,
    demand: Vec<f64>,
    shares: Vec<f64>,
}

#[derive(Debug)]
struct Stream {
    domain: Arc<str>,
    outbox: Outbox,
    /// Each bucket it reported, and its group (`None`: no rule governs it).
    buckets: HashMap<BucketId, Option<GroupKey>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    domain: Arc<str>,
    rule: Arc<str>,
    values: Box<[Box<str>]>,
}

impl GroupKey {
    /// The group's name across the fleet.
    fn fleet_name(&self) -> String {
        let mut name = format!("{}\u{1f}{}", self.domain, self.rule);
        for v in &self.values {
            name.push('\u{1f}');
            name.push_str(v);
        }
        name
    }
}

#[derive(Debug)]
struct Group {
    /// The group's name across the fleet ([`GroupKey::fleet_name`]).
    fleet_name: String,
    grant: Grant,
    shared: Option<Shared>,
    members: Vec<Member>,
    /// The demands of the other instances' streams, as last read from the store.
    remote: Vec<f64>,
    /// The rate last assigned to them.
    remote_assigned: f64,
    /// One of them waits for room: its instance desires more than it claimed.
    remote_starved: bool,
    /// On a fleet, the rate this instance holds of the limit (`None`: not claimed yet).
    claim: Option<f64>,
    /// Its members' shares want more than the claim.
    starved: bool,
}

#[derive(Debug)]
struct Member {
    stream: StreamId,
    bucket: BucketId,
    /// Requests per second, from the reports.
    demand: f64,
    /// Requests and time reported since the demand was last updated (reports shorter than half an
    /// interval are summed until they cover one).
    pending: u64,
    pending_elapsed: Duration,
    /// The last report with requests in it, or the subscription.
    active: Timestamp,
    sent: Option<Sent>,
    /// Its share by the split over the fleet, before any scaling down to the claim.
    desired: f64,
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    strategy: Strategy,
    rate: f64,
    at: Timestamp,
}

impl<C: Clock> Quotas<C> {
    /// No streams yet; `series` records what happens.
    pub fn new(clock: C, series: RlqsSeries) -> Self {
        let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
        Quotas {
            clock,
            instance: format!("{:016x}", random),
            state: Mutex::new(State::default()),
            series,
            moved: tokio::sync::Notify::new(),
            fleet: AtomicBool::new(false),
        }
    }

    /// Other instances share the limits through a store: from now on, every group assigns within
    /// this instance's claim of its limit ([`Quotas::exchange`]).
    pub fn join_fleet(&self) {
        self.fleet.store(true, Ordering::Release);
    }

    fn on_fleet(&self) -> bool {
        self.fleet.load(Ordering::Acquire)
    }

    /// This instance's name in the fleet's demand records.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Registers a stream of `domain` whose actions go to `outbox`.
    pub fn open(
        &self,
        domain: &str,
        config: Option<&Arc<RlqsConfig>>,
        outbox: Outbox,
    ) -> Result<StreamId, QuotaError> {
        let mut state = self.state.lock();
        if state.closed {
            return Err(QuotaError::ShuttingDown);
        }
        self.reconcile(&mut state, config);
        if !state.config.as_ref().is_some_and(|c| c.domains.contains_key(domain)) {
            return Err(QuotaError::UnknownDomain(domain.to_owned()));
        }
        state.next_stream += 1;
        let id = StreamId(state.next_stream);
        state.streams.insert(id, Stream { domain: domain.into(), outbox, buckets: HashMap::new() });
        self.series.streams.set(state.streams.len() as f64);
        Ok(id)
    }

    /// Takes in `reports` of `stream`: a bucket's first report subscribes it. Settles every group
    /// touched, sending what changed to every stream of it.
    pub fn report(
        &self,
        stream: StreamId,
        config: Option<&Arc<RlqsConfig>>,
        reports: &[Report],
    ) -> Result<(), QuotaError> {
        let now = self.clock.now();
        let mut state = self.state.lock();
        self.reconcile(&mut state, config);
        let state = &mut *state;
        let Some(config) = state.config.clone() else { return Err(QuotaError::Closed) };
        let half = config.reporting_interval / 2;
        let mut touched: Vec<GroupKey> = Vec::new();
        let mut moved = false;
        for report in reports {
            let Some(s) = state.streams.get_mut(&stream) else { return Err(QuotaError::Closed) };
            let group = match s.buckets.get(&report.bucket) {
                Some(group) => group.clone(),
                None => {
                    if s.buckets.len() >= MAX_BUCKETS_PER_STREAM {
                        return Err(QuotaError::TooManyBuckets(MAX_BUCKETS_PER_STREAM));
                    }
                    let key = resolve(&config, &s.domain, &report.bucket);
                    s.buckets.insert(report.bucket.clone(), key.clone());
                    if let Some(key) = &key {
                        let group =
                            state.groups.entry(key.clone()).or_insert_with(|| new_group(&config, key));
                        group.members.push(Member {
                            stream,
                            bucket: report.bucket.clone(),
                            demand: 0.0,
                            pending: 0,
                            pending_elapsed: Duration::ZERO,
                            active: now,
                            sent: None,
                            desired: 0.0,
                        });
                    }
                    key
                }
            };
            let Some(key) = group else { continue };
            let Some(group) = state.groups.get_mut(&key) else { continue };
            let Some(member) =
                group.members.iter_mut().find(|m| m.stream == stream && m.bucket == report.bucket)
            else {
                continue;
            };
            let count = report.allowed.saturating_add(report.denied);
            if count > 0 {
                member.active = now;
            }
            member.pending = member.pending.saturating_add(count);
            member.pending_elapsed += report.elapsed;
            if member.pending_elapsed >= half {
                let demand = member.pending as f64 / member.pending_elapsed.as_secs_f64();
                if (demand - member.demand).abs() > config.change_threshold * member.demand.max(1.0) {
                    moved = true;
                }
                member.demand = demand;
                member.pending = 0;
                member.pending_elapsed = Duration::ZERO;
            }
            if !touched.contains(&key) {
                touched.push(key);
            }
        }
        self.series.buckets.set(state.groups.values().map(|g| g.members.len()).sum::<usize>() as f64);
        for key in touched {
            self.settle(state, &config, &key, now);
        }
        if moved {
            self.moved.notify_one();
        }
        Ok(())
    }

    /// Completes once a report has moved a stream's demand beyond the change threshold since the
    /// last call (at once if one has).
    pub async fn moved(&self) {
        self.moved.notified().await;
    }

    /// Forgets `stream` (it ended): its buckets' shares go back to the other streams of their
    /// groups.
    pub fn close(&self, stream: StreamId) {
        let now = self.clock.now();
        let mut state = self.state.lock();
        let state = &mut *state;
        let Some(s) = state.streams.remove(&stream) else { return };
        self.series.streams.set(state.streams.len() as f64);
        let keys: Vec<GroupKey> = s.buckets.into_values().flatten().collect();
        for key in &keys {
            if let Some(group) = state.groups.get_mut(key) {
                group.members.retain(|m| m.stream != stream);
            }
        }
        self.drop_empty(state);
        if let Some(config) = state.config.clone() {
            for key in keys {
                self.settle(state, &config, &key, now);
            }
        }
    }

    /// Twice an interval ([`run`](super::run)): follows a changed configuration, abandons the buckets idle for
    /// `abandon_after`, settles every group (renewing the assignments whose TTL nears its end).
    pub fn tick(&self, config: Option<&Arc<RlqsConfig>>) {
        let now = self.clock.now();
        let mut state = self.state.lock();
        self.reconcile(&mut state, config);
        let state = &mut *state;
        let Some(config) = state.config.clone() else { return };
        let mut abandoned: Vec<(StreamId, BucketId)> = Vec::new();
        for group in state.groups.values_mut() {
            group.members.retain(|m| {
                let idle = now.saturating_since(m.active) >= config.abandon_after;
                if idle {
                    abandoned.push((m.stream, m.bucket.clone()));
                }
                !idle
            });
        }
        let mut by_stream: HashMap<StreamId, Vec<Action>> = HashMap::new();
        for (stream, bucket) in abandoned {
            if let Some(s) = state.streams.get_mut(&stream) {
                s.buckets.remove(&bucket);
            }
            by_stream.entry(stream).or_default().push(Action::Abandon { bucket });
            self.series.abandoned.increment(1);
        }
        for (stream, actions) in by_stream {
            if let Some(s) = state.streams.get(&stream) {
                s.outbox.send(actions);
            }
        }
        self.drop_empty(state);
        let keys: Vec<GroupKey> = state.groups.keys().cloned().collect();
        for key in keys {
            self.settle(state, &config, &key, now);
        }
        self.series.buckets.set(state.groups.values().map(|g| g.members.len()).sum::<usize>() as f64);
    }

    /// What this instance writes to the fleet: each group's limit and members, their demand and
    /// the share each desires. Groups with no limit to share are left out.
    pub fn demand(&self) -> Vec<GroupDemand> {
        let state = self.state.lock();
        state
            .groups
            .values()
            .filter_map(|g| Some((g, g.shared?)))
            .map(|(g, shared)| GroupDemand {
                group: g.fleet_name.clone(),
                limit: shared.rate,
                members: g
                    .members
                    .iter()
                    .map(|m| (format!("{}/{}/{}", self.instance, m.stream.0, m.bucket), m.demand, m.desired))
                    .collect(),
            })
            .collect()
    }

    /// Takes in the fleet's answer for `group` (as [`Quotas::demand`] names it): the rate this
    /// instance now holds of its limit (`claim`), and every live member of the other instances;
    /// then settles the group.
    pub fn exchange(&self, group: &str, claim: f64, others: &[RemoteMember]) {
        let now = self.clock.now();
        let mut state = self.state.lock();
        let state = &mut *state;
        let Some(config) = state.config.clone() else { return };
        let Some(key) = state.groups.iter().find(|(_, g)| g.fleet_name == group).map(|(k, _)| k.clone())
        else {
            return;
        };
        if let Some(g) = state.groups.get_mut(&key) {
            g.remote.clear();
            g.remote.extend(others.iter().map(|m| m.demand));
            g.remote_assigned = others.iter().map(|m| m.assigned).sum();
            g.remote_starved = others.iter().any(|m| m.desired > m.assigned * (1.0 + 1e-6) + 1e-6);
            g.claim = Some(claim);
        }
        self.settle(state, &config, &key, now);
    }

    /// Shutdown: every assignment sent expires at once (TTL 0), every stream is closed, and no
    /// stream opens from now on.
    pub fn shutdown(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        let mut expiring: HashMap<StreamId, Vec<Action>> = HashMap::new();
        for group in state.groups.values() {
            for m in &group.members {
                if let Some(sent) = m.sent {
                    let action = Action::Assign {
                        bucket: m.bucket.clone(),
                        strategy: sent.strategy,
                        ttl: Duration::ZERO,
                    };
                    expiring.entry(m.stream).or_default().push(action);
                }
            }
        }
        for (id, stream) in state.streams.drain() {
            if let Some(actions) = expiring.remove(&id) {
                stream.outbox.send(actions);
            }
        }
        state.groups.clear();
        self.series.streams.set(0.0);
        self.series.buckets.set(0.0);
    }

    /// The groups, for the dashboard.
    pub fn view(&self) -> Vec<GroupView> {
        let state = self.state.lock();
        let mut views: Vec<GroupView> = state
            .groups
            .iter()
            .map(|(key, g)| {
                let local = g
                    .members
                    .iter()
                    .filter_map(|m| m.sent.map(|s| s.rate))
                    .filter(|r| r.is_finite())
                    .fold(0.0, |a, r| a + r);
                GroupView {
                    domain: key.domain.to_string(),
                    rule: key.rule.to_string(),
                    key: key.values.iter().map(|v| v.to_string()).collect(),
                    limit: g.shared.map(|s| s.rate),
                    members: g
                        .members
                        .iter()
                        .map(|m| MemberView {
                            stream: m.stream.0,
                            bucket: m.bucket.to_string(),
                            demand: m.demand,
                            assigned: m.sent.map(|s| s.rate).filter(|r| r.is_finite()),
                        })
                        .collect(),
                    remote_streams: g.remote.len(),
                    remote_demand: g.remote.iter().fold(0.0, |a, d| a + d),
                    remote_assigned: g.remote_assigned,
                    fleet_assigned: local + g.remote_assigned,
                    claim: if self.on_fleet() { g.claim } else { g.shared.map(|s| s.rate) },
                }
            })
            .collect();
        views.sort_by(|a, b| (&a.domain, &a.rule, &a.key).cmp(&(&b.domain, &b.rule, &b.key)));
        views
    }

    // === the group's shares ===

    /// Recomputes `key`'s shares and sends each stream what changed beyond the threshold, what it
    /// has not had yet, and what nears the end of its TTL; a decrease within the threshold is sent
    /// anyway when keeping it would put this instance's shares above what the split gives them.
    /// On a fleet the shares are scaled down to the claim when they want more, and nothing is
    /// sent before the first claim.
    fn settle(&self, state: &mut State, config: &RlqsConfig, key: &GroupKey, now: Timestamp) {
        let fleet = self.on_fleet();
        let State { groups, streams, demand, shares, .. } = state;
        let Some(group) = groups.get_mut(key) else { return };
        let renew_before = config.assignment_ttl.saturating_sub(config.reporting_interval * 2);
        let due = |sent: &Sent| now.saturating_since(sent.at) >= renew_before;
        let mut out: Vec<(StreamId, Action)> = Vec::new();
        match (&group.grant, group.shared) {
            (Grant::Share { per_time_unit, .. }, Some(shared)) => {
                demand.clear();
                demand.extend(group.members.iter().map(|m| m.demand));
                demand.extend(group.remote.iter().copied());
                split(shared.rate, demand, config.floor, shares);
                let local = group.members.len();
                for (m, share) in group.members.iter_mut().zip(shares.iter()) {
                    m.desired = *share;
                }
                let wanted: f64 = shares[..local].iter().sum();
                let claim = if fleet { group.claim } else { Some(shared.rate) };
                let Some(claim) = claim else {
                    // Not claimed yet: the first exchange comes at once.
                    group.starved = true;
                    self.moved.notify_one();
                    return;
                };
                group.starved = wanted > claim * (1.0 + 1e-9) + 1e-9;
                if group.starved {
                    let fraction = if wanted > 0.0 { claim / wanted } else { 0.0 };
                    shares[..local].iter_mut().for_each(|s| *s *= fraction);
                }
                // Wanting more than the claim, or holding more than wanted while another instance
                // waits: the claim should change before the next tick.
                if fleet && (group.starved || (group.remote_starved && claim > wanted * (1.0 + 1e-6) + 1e-6))
                {
                    self.moved.notify_one();
                }
                let target: f64 = shares[..local].iter().sum();
                let mut in_force = 0.0;
                let mut changes: Vec<(usize, Strategy, bool)> = Vec::with_capacity(local);
                for (i, m) in group.members.iter().enumerate() {
                    let strategy = shared.strategy(shares[i], *per_time_unit);
                    let rate = strategy.rate().unwrap_or(shares[i]);
                    let send = match &m.sent {
                        None => true,
                        Some(sent) if sent.strategy == strategy => due(sent),
                        Some(sent) => {
                            (rate - sent.rate).abs() > config.change_threshold * sent.rate || due(sent)
                        }
                    };
                    in_force += if send { rate } else { m.sent.map_or(rate, |s| s.rate) };
                    changes.push((i, strategy, send));
                }
                let over = in_force > target * (1.0 + 1e-9);
                for (i, strategy, send) in changes {
                    let m = &mut group.members[i];
                    let changed = m.sent.is_none_or(|s| s.strategy != strategy);
                    if send || (over && changed) {
                        let rate = strategy.rate().unwrap_or(shares[i]);
                        m.sent = Some(Sent { strategy, rate, at: now });
                        let ttl = config.assignment_ttl;
                        out.push((m.stream, Action::Assign { bucket: m.bucket.clone(), strategy, ttl }));
                    }
                }
            }
            (grant, _) => {
                let strategy = if *grant == Grant::DenyAll { Strategy::DenyAll } else { Strategy::AllowAll };
                for m in &mut group.members {
                    if m.sent.is_none_or(|s| s.strategy != strategy || due(&s)) {
                        let rate = strategy.rate().unwrap_or(f64::INFINITY);
                        m.sent = Some(Sent { strategy, rate, at: now });
                        let ttl = config.assignment_ttl;
                        out.push((m.stream, Action::Assign { bucket: m.bucket.clone(), strategy, ttl }));
                    }
                }
            }
        }
        if out.is_empty() {
            return;
        }
        self.series.assignments.increment(out.len() as u64);
        // One message per stream.
        out.sort_by_key(|(s, _)| s.0);
        let mut start = 0;
        while start < out.len() {
            let stream = out[start].0;
            let end = start + out[start..].iter().take_while(|(s, _)| *s == stream).count();
            let actions: Vec<Action> = out[start..end].iter().map(|(_, a)| a.clone()).collect();
            if let Some(s) = streams.get(&stream) {
                s.outbox.send(actions);
            }
            start = end;
        }
    }

    /// Puts `config` in force when it is not the one in force: every bucket is resolved again;
    /// one whose rule is gone (or now another) has its assignment expired at once (TTL 0), and a
    /// group whose rule changed takes its new limit.
    fn reconcile(&self, state: &mut State, config: Option<&Arc<RlqsConfig>>) {
        let same = match (&state.config, config) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if same {
            return;
        }
        state.config = config.cloned();
        let mut expire: HashMap<StreamId, Vec<Action>> = HashMap::new();
        let old: Vec<(GroupKey, Group)> = state.groups.drain().collect();
        // The fleet's demand of each group, kept for the group of the same key under the new
        // configuration: until the next exchange, the instance is not alone.
        // Its claim is kept too while the group's grant is the same (a new limit is claimed anew).
        let fleet: HashMap<GroupKey, (Vec<f64>, f64, Option<f64>, Grant)> = old
            .iter()
            .map(|(k, g)| (k.clone(), (g.remote.clone(), g.remote_assigned, g.claim, g.grant.clone())))
            .collect();
        for (key, mut group) in old {
            for m in group.members.drain(..) {
                let Some(stream) = state.streams.get_mut(&m.stream) else { continue };
                let new_key = config.and_then(|c| Some((c, resolve(c, &stream.domain, &m.bucket)?)));
                stream.buckets.insert(m.bucket.clone(), new_key.as_ref().map(|(_, k)| k.clone()));
                match new_key {
                    Some((c, new_key)) => {
                        let target = state.groups.entry(new_key.clone()).or_insert_with(|| {
                            let mut group = new_group(c, &new_key);
                            if let Some((remote, assigned, claim, grant)) = fleet.get(&new_key) {
                                group.remote.clone_from(remote);
                                group.remote_assigned = *assigned;
                                if *grant == group.grant {
                                    group.claim = *claim;
                                }
                            }
                            group
                        });
                        let mut m = m;
                        if new_key != key {
                            // Another rule: its first assignment is a new one.
                            if let Some(sent) = m.sent.take() {
                                let action = Action::Assign {
                                    bucket: m.bucket.clone(),
                                    strategy: sent.strategy,
                                    ttl: Duration::ZERO,
                                };
                                expire.entry(m.stream).or_default().push(action);
                            }
                        }
                        target.members.push(m);
                    }
                    None => {
                        if let Some(sent) = m.sent {
                            let action = Action::Assign {
                                bucket: m.bucket,
                                strategy: sent.strategy,
                                ttl: Duration::ZERO,
                            };
                            expire.entry(m.stream).or_default().push(action);
                        }
                    }
                }
            }
        }
        for (stream, actions) in expire {
            if let Some(s) = state.streams.get(&stream) {
                s.outbox.send(actions);
            }
        }
    }

    fn drop_empty(&self, state: &mut State) {
        state.groups.retain(|_, g| !g.members.is_empty());
    }
}

/// The group of `bucket` in `domain`: the first rule of the domain matching its id, and the
/// values of that rule's key (a bucket lacking a key's value has none).
fn resolve(config: &RlqsConfig, domain: &str, bucket: &BucketId) -> Option<GroupKey> {
    let rules = config.domains.get(domain)?;
    let rule = rules.iter().find(|r| r.matches(|k| bucket.get(k)))?;
    let values = rule.key.iter().map(|k| bucket.get(k).map(Box::from)).collect::<Option<Vec<_>>>()?;
    Some(GroupKey {
        domain: domain.into(),
        rule: rule.name.as_str().into(),
        values: values.into_boxed_slice(),
    })
}

fn new_group(config: &RlqsConfig, key: &GroupKey) -> Group {
    let grant = config
        .domains
        .get(&*key.domain)
        .and_then(|rules| rules.iter().find(|r| *r.name == *key.rule))
        .map(|r| r.grant.clone())
        .unwrap_or(Grant::DenyAll);
    let shared = match &grant {
        Grant::Share { limit, .. } => Shared::of(limit),
        _ => None,
    };
    Group {
        fleet_name: key.fleet_name(),
        grant,
        shared,
        members: Vec::new(),
        remote: Vec::new(),
        remote_assigned: 0.0,
        remote_starved: false,
        claim: None,
        starved: false,
    }
}

/// A name for a value that is the same on every instance (a fleet key's suffix).
pub(crate) fn fleet_hash(text: &str) -> u64 {
    // FNV-1a 64: stable across processes and versions, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
