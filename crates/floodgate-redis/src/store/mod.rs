//! [`RedisStore`]: the [`Store`] over one Redis node or a Redis Cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use floodgate::store::{
    Adjustment, Applied, Mode, Once, Op, OpResult, Record, Records, Settle, Store, StoreError,
};
use floodgate::{Limit, OnStoreError};
use floodgate_core::{Clock, Decision, Grant, SystemClock, Timestamp};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterConfig;
use redis::cluster_async::ClusterConnection;
use redis::{RedisError, ScriptInvocation};
use smallvec::SmallVec;
use tokio::sync::Semaphore;

use crate::error::classify;
use crate::hints::Hints;
use crate::key::{ALGORITHM_TAGS, BOX_TAG, algorithm_tag, redis_key, tag};
use crate::probe::{Probe, Readiness};
use crate::script::{
    self, NOTHING_TAKEN, ONE_BUCKET, ONE_WINDOW, PenaltyBox, Reply, Row, SCRIPT, ScriptMode, ScriptOp, Timing,
};
use crate::{CrossSlot, HashTag, RedisConfig, Target, tls};

mod cross_slot;

pub use cross_slot::GiveBacks;

/// Slack added to every expiry under a test clock: Redis expires keys on its own clock, which does
/// not follow the test's.
const TEST_CLOCK_SLACK_MS: u64 = 3_600_000;

/// The least margin a call's `not_after` leaves past its deadline (see `Shared::margin`).
const MIN_MARGIN: Duration = Duration::from_millis(50);

/// `offset_us` before any reply was trusted: calls go unguarded, quota periods use the process clock.
const UNSYNCED: i64 = i64::MIN;

/// Floodgate's store in Redis: one Lua call applies all the limits of a request, all-or-nothing, on
/// Redis's clock. See the [crate docs](crate) for the design.
///
/// Cloning shares the connection.
#[derive(Clone)]
pub struct RedisStore {
    shared: Arc<Shared>,
    time: Time,
    /// The process clock, only to guess Redis's time (see `estimate`): for quota periods and for
    /// the time past which a call is stale.
    local: Arc<dyn Clock>,
    /// Redis's clock minus `local`, µs, as of the last trusted reply ([`UNSYNCED`] before one).
    offset_us: Arc<AtomicI64>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("cluster", &matches!(self.shared.conn, Conn::Cluster(_)))
            .field("prefix", &String::from_utf8_lossy(&self.shared.prefix))
            .field("deadline", &self.shared.deadline)
            .field("test_clock", &matches!(self.time, Time::Explicit(_)))
            .finish()
    }
}

/// Where a decision's time comes from.
#[derive(Clone)]
enum Time {
    /// Redis's `TIME`, inside the script: the one authority all instances share.
    Redis,
    /// A test clock, sent with every call.
    Explicit(Arc<dyn Clock>),
}

#[derive(Clone)]
enum Conn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

struct Shared {
    conn: Conn,
    /// Readiness `PING`s, on a connection of their own.
    probe: Probe,
    prefix: Box<[u8]>,
    hash_tag: HashTag,
    deadline: Duration,
    /// How long past its deadline a call may still write: `max(deadline, MIN_MARGIN)`. The offset
    /// is only taken from replies whose round trip lasted at most this long, so the estimate of
    /// Redis's time lags it by at most this much; with it added to `not_after`, no script Redis runs
    /// within a call's deadline is stale (see the crate docs).
    margin: Duration,
    in_flight: Semaphore,
    /// How long [`RedisStore::warm`] may take.
    connect_timeout: Duration,
    /// Whether the decision connection has been made and the scripts loaded once
    /// ([`RedisStore::warm`]).
    warmed: AtomicBool,
    /// How a check across slots orders its calls, and the keys that denied lately, for it.
    cross_slot: CrossSlot,
    hints: Hints,
    /// What became of the cross-slot give-backs, and the numbers of their notes.
    give_backs: cross_slot::Counts,
    /// Held by each give-back being tried again (at most [`cross_slot::BACKLOG`]).
    give_back_backlog: Semaphore,
    /// Names this store's give-back notes apart from every other store's.
    seed: u64,
}

/// One op, ready for the script.
struct Prepared<'a> {
    op: &'a Op<'a>,
    key: Vec<u8>,
    /// The key of the op's penalty box, when it has one ([`Op::block_for`]): in the slot of `key`.
    box_key: Option<Vec<u8>>,
    slot: u16,
}

/// A slot's share of a request: indices into the ops.
type Group = SmallVec<[usize; 4]>;

/// The answer of one call for one group.
struct Answer {
    now: Timestamp,
    /// Five numbers per op; none when `made_before`.
    rows: Vec<i64>,
    /// A change made at most once was made before: this call wrote nothing.
    made_before: bool,
}

impl Answer {
    fn row(&self, k: usize) -> Row {
        script::row(&self.rows, k)
    }

    /// Whether every enforced op of `group` allowed.
    fn admitted(&self, ops: &[Op<'_>], group: &[usize]) -> bool {
        group.iter().enumerate().all(|(k, &i)| !ops[i].enforce || self.row(k)[0] == 1)
    }
}

fn config_error(message: String) -> StoreError {
    StoreError::Backend { message, transient: false, source: None }
}

// === impl RedisStore ===

impl RedisStore {
    /// Connects and loads the script, failing when Redis cannot be reached within
    /// `config.connect_timeout`. Must be called within a Tokio runtime.
    pub async fn connect(config: RedisConfig) -> Result<RedisStore, StoreError> {
        let store = RedisStore::connect_lazy(config)?;
        store.warm().await?;
        Ok(store)
    }

    /// Makes the decision connection and loads the scripts, within `config.connect_timeout`, so
    /// that the first decisions don't each pay for them within their deadline: a burst of requests
    /// on a cold store would otherwise all wait on one connect and a script load each, miss their
    /// deadline together, and open the breaker on a healthy store. [`RedisStore::ready`] warms a
    /// cold store before it says ready; once warm, this returns at once. Scripts a restarted Redis
    /// lost are reloaded by the call that finds them missing.
    pub async fn warm(&self) -> Result<(), StoreError> {
        if self.shared.warmed.load(Ordering::Acquire) {
            return Ok(());
        }
        let timeout = self.shared.connect_timeout;
        let until = tokio::time::Instant::now() + timeout;
        let load = || {
            let mut conn = self.shared.conn.clone();
            async move {
                for script in [&*SCRIPT, &*ONE_BUCKET, &*ONE_WINDOW] {
                    match &mut conn {
                        Conn::Node(c) => script.load_async(c).await?,
                        Conn::Cluster(c) => script.load_async(c).await?,
                    };
                }
                Ok::<(), RedisError>(())
            }
        };
        // Each command waits at most the connection's response timeout, the call deadline; a
        // busy Redis (or machine) may miss that while loading, so a load that timed out is sent
        // again (loading is idempotent) until `connect_timeout` has passed.
        loop {
            match tokio::time::timeout_at(until, load()).await {
                Ok(Ok(())) => {
                    self.shared.warmed.store(true, Ordering::Release);
                    return Ok(());
                }
                Ok(Err(e)) if e.is_timeout() && tokio::time::Instant::now() < until => {}
                Ok(Err(e)) => return Err(classify(e, timeout)),
                Err(_) => return Err(StoreError::Timeout(timeout)),
            }
        }
    }

    /// Whether [`RedisStore::warm`] has succeeded.
    pub fn is_warm(&self) -> bool {
        self.shared.warmed.load(Ordering::Acquire)
    }

    /// Builds the store without connecting: the connection is made by the first call and remade
    /// after failures, in the background. Must be called within a Tokio runtime. Fails only on an
    /// invalid configuration.
    pub fn connect_lazy(config: RedisConfig) -> Result<RedisStore, StoreError> {
        if config.prefix.contains(['{', '}']) {
            return Err(config_error(format!(
                "the key prefix {:?} must not contain '{{' or '}}'",
                config.prefix
            )));
        }
        if config.deadline.is_zero() || config.max_in_flight == 0 {
            return Err(config_error("the deadline and max_in_flight must be above zero".into()));
        }
        let bad = |e: RedisError| config_error(format!("invalid Redis configuration: {e}"));
        let certs = match &config.tls {
            Some(tls) => Some(tls.certificates(&config.target).map_err(|e| StoreError::Backend {
                message: format!("invalid Redis TLS configuration: {e}"),
                transient: false,
                source: Some(Box::new(e)),
            })?),
            None => None,
        };
        let conn = match &config.target {
            Target::Node(url) => {
                let client = tls::node_client(url, certs.as_ref()).map_err(bad)?;
                let manager = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(config.deadline))
                    .set_connection_timeout(Some(config.connect_timeout))
                    .set_pipeline_buffer_size(config.max_in_flight)
                    // One connection attempt per reconnect, no back-off: every call waits for
                    // the reconnect in progress, so retries would make each call of a dead node
                    // wait its whole deadline; refused at once, it fails at once, and the next
                    // call tries again (one attempt at a time, shared by the calls meanwhile).
                    .set_number_of_retries(0);
                Conn::Node(ConnectionManager::new_lazy_with_config(client, manager).map_err(bad)?)
            }
            Target::Cluster(seeds) => {
                let client = tls::cluster_builder(seeds, certs.as_ref())
                    .connection_timeout(config.connect_timeout)
                    .response_timeout(config.deadline)
                    .retries(3)
                    .min_retry_wait(1)
                    .max_retry_wait(10)
                    .build()
                    .map_err(bad)?;
                let cluster = ClusterConfig::new()
                    .set_connection_timeout(config.connect_timeout)
                    .set_response_timeout(config.deadline);
                Conn::Cluster(client.get_pending_async_connection_with_config(cluster))
            }
        };
        let probe = Probe::new(&config, certs.as_ref()).map_err(bad)?;
        Ok(RedisStore {
            shared: Arc::new(Shared {
                conn,
                probe,
                prefix: config.prefix.into_bytes().into_boxed_slice(),
                hash_tag: config.hash_tag,
                deadline: config.deadline,
                margin: config.deadline.max(MIN_MARGIN),
                in_flight: Semaphore::new(config.max_in_flight),
                connect_timeout: config.connect_timeout,
                warmed: AtomicBool::new(false),
                cross_slot: config.cross_slot,
                hints: Hints::new(),
                give_backs: cross_slot::Counts::default(),
                give_back_backlog: Semaphore::new(cross_slot::BACKLOG),
                seed: seed(),
            }),
            time: Time::Redis,
            local: Arc::new(SystemClock::new()),
            offset_us: Arc::new(AtomicI64::new(UNSYNCED)),
        })
    }

    /// This store (sharing its connection) on a test clock: every call sends the clock's time
    /// instead of reading Redis's, so tests are deterministic (the conformance suite and the
    /// differential test run this way). Keys then live an hour longer than their state needs,
    /// since Redis expires them on its own clock.
    ///
    /// **For tests only**: stores on different explicit clocks do not share a time authority.
    pub fn with_clock(&self, clock: impl Clock) -> RedisStore {
        RedisStore { time: Time::Explicit(Arc::new(clock)), ..self.clone() }
    }

    /// This store (sharing its connection) with another process clock. Decisions never read it —
    /// Redis's clock decides — but quota periods, and the time past which a call is stale, are
    /// computed for the process clock's time moved by the offset to Redis's seen in a reply; tests
    /// use this to give instances skewed clocks.
    pub fn with_local_clock(&self, clock: impl Clock) -> RedisStore {
        RedisStore { local: Arc::new(clock), offset_us: Arc::new(AtomicI64::new(UNSYNCED)), ..self.clone() }
    }

    /// The key prefix.
    pub(crate) fn prefix(&self) -> &[u8] {
        &self.shared.prefix
    }

    /// The readiness probe (its connection also carries the fleet's heartbeats).
    pub(crate) fn probe(&self) -> &Probe {
        &self.shared.probe
    }

    /// Whether Redis answers: a `PING` on a connection of the probe's own (every master of a
    /// cluster), within the deadline (at least [`PROBE_TIMEOUT_FLOOR`](crate::PROBE_TIMEOUT_FLOOR)),
    /// its answer reused for [`PROBE_CACHE`](crate::PROBE_CACHE); concurrent callers share one
    /// `PING`. For readiness checks (`/readyz`): probing never takes one of the store's slots.
    ///
    /// A store that has not yet made its decision connection and loaded its scripts
    /// ([`RedisStore::warm`]) does so first, and is not ready until it has.
    pub async fn ready(&self) -> Readiness {
        if let Err(e) = self.warm().await {
            return Readiness::Failed(format!("cannot connect and load the scripts: {e}"));
        }
        self.shared.probe.ready().await
    }

    /// What became of the give-backs of checks across cluster slots so far (see the crate docs,
    /// "Redis Cluster").
    pub fn give_backs(&self) -> GiveBacks {
        self.shared.give_backs.read()
    }

    /// Whether this store talks to a cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.shared.conn, Conn::Cluster(_))
    }

    /// The Redis keys that hold the state of an engine `key` under `limit`, as this store names
    /// them (for inspection and tests).
    pub fn redis_key(&self, key: &[u8], limit: &Limit) -> Vec<u8> {
        let (t, _) = tag(key, &self.shared.hash_tag);
        let mut out = Vec::new();
        redis_key(&mut out, &self.shared.prefix, &t, algorithm_tag(limit), key);
        out
    }

    /// The Redis key that holds the penalty box of an engine `key` ([`Op::block_for`]), as this
    /// store names it (for inspection and tests): while the key is in its box, this holds the time
    /// the box ends (µs since the Unix epoch), and expires then.
    pub fn penalty_box_key(&self, key: &[u8]) -> Vec<u8> {
        let (t, _) = tag(key, &self.shared.hash_tag);
        let mut out = Vec::new();
        redis_key(&mut out, &self.shared.prefix, &t, BOX_TAG, key);
        out
    }

    /// The cluster slot of an engine `key`'s state.
    pub fn slot(&self, key: &[u8]) -> u16 {
        tag(key, &self.shared.hash_tag).1
    }

    fn explicit_now(&self) -> Option<Timestamp> {
        match &self.time {
            Time::Redis => None,
            Time::Explicit(clock) => Some(clock.now()),
        }
    }

    /// How the next script call reads time, stale past `not_after`.
    fn timing(&self, not_after: Option<Timestamp>) -> Timing {
        match &self.time {
            Time::Redis => Timing { now: None, slack_ms: 0, not_after },
            Time::Explicit(clock) => {
                Timing { now: Some(clock.now()), slack_ms: TEST_CLOCK_SLACK_MS, not_after }
            }
        }
    }

    /// The best guess of Redis's time: the process clock moved by the offset seen in a reply. For
    /// quota periods, a wrong guess near a period boundary costs one more round trip (the script
    /// refuses bounds that do not contain its `now`), never a wrong decision; for the time past
    /// which a call is stale, see `not_after`.
    fn estimate(&self) -> Timestamp {
        if let Some(now) = self.explicit_now() {
            return now;
        }
        let local = self.local.now().as_micros();
        let offset = match self.offset_us.load(Ordering::Relaxed) {
            UNSYNCED => 0,
            offset => offset,
        };
        Timestamp::from_micros(local.saturating_add_signed(offset))
    }

    /// The time on Redis's clock past which a call that consumes (a check, a report) starting now
    /// is stale: the estimate of Redis's time, plus the deadline, plus the margin. `None` (never)
    /// for peeks, which write nothing; under a test clock, whose `now` is the caller's; and until a
    /// reply has given the offset to Redis's clock.
    fn not_after(&self, mode: Mode) -> Option<Timestamp> {
        if mode == Mode::Peek
            || matches!(self.time, Time::Explicit(_))
            || self.offset_us.load(Ordering::Relaxed) == UNSYNCED
        {
            return None;
        }
        Some(self.estimate().saturating_add(self.shared.deadline + self.shared.margin))
    }

    /// Learns the offset to Redis's clock from a reply read at `redis_now`, for a call sent at
    /// `sent` (process clock). Redis read its time between the two, so the offset it gives is low
    /// by at most the round trip: only replies whose round trip lasted at most the margin are
    /// trusted, and the estimate never lags Redis's clock by more.
    fn observe(&self, redis_now: Timestamp, sent: Timestamp) {
        if let Time::Redis = self.time {
            let local = self.local.now().as_micros();
            if local.saturating_sub(sent.as_micros()) > micros_of(self.shared.margin) {
                return;
            }
            let offset = i128::from(redis_now.as_micros()) - i128::from(local);
            let offset = i64::try_from(offset).unwrap_or(0).max(UNSYNCED + 1);
            self.offset_us.store(offset, Ordering::Relaxed);
        }
    }

    async fn invoke(&self, inv: &ScriptInvocation<'static>) -> Result<Vec<i64>, RedisError> {
        match self.shared.conn.clone() {
            Conn::Node(mut c) => inv.invoke_async(&mut c).await,
            Conn::Cluster(mut c) => inv.invoke_async(&mut c).await,
        }
    }

    /// One script call for the ops `group` of `prepared`, retried when Redis's time falls outside the
    /// quota periods computed for it; stale (a timeout) when Redis runs it past `not_after`. `once`
    /// is the note of the modes made at most once.
    async fn call(
        &self,
        prepared: &[Prepared<'_>],
        group: &[usize],
        mode: ScriptMode,
        grants: Option<&[Option<Grant>]>,
        not_after: Option<Timestamp>,
        once: Option<script::Once<'_>>,
    ) -> Result<Answer, StoreError> {
        let mut estimate = self.estimate();
        let op = |i: usize| {
            let p = &prepared[i];
            let grant = grants.and_then(|g| g[i]).map(|g| (g.at, g.lease));
            let cost = grants.and_then(|g| g[i]).map_or(p.op.cost, |g| g.cost);
            let penalty = p
                .box_key
                .as_deref()
                .zip(p.op.block_for)
                .map(|(key, block_for)| PenaltyBox { key, block_for });
            ScriptOp { key: &p.key, limit: p.op.limit, cost, enforce: p.op.enforce, grant, penalty }
        };
        for _ in 0..3 {
            // One op alone (the common request, or one slot's share of a cross-slot one): its
            // algorithm's single-limit script when it has one, with the driver's semantics.
            let timing = self.timing(not_after);
            let one = match group {
                [i] => script::invocation_one(mode, timing, &op(*i)),
                _ => None,
            };
            let sent = self.local.now();
            let reply = match one {
                Some(inv) => {
                    let reply = self.invoke(&inv?).await.map_err(|e| classify(e, self.shared.deadline))?;
                    script::parse_one(reply)?
                }
                None => {
                    let ops = group.iter().map(|&i| op(i));
                    let inv = script::invocation(mode, timing, estimate, ops, once)?;
                    let reply = self.invoke(&inv).await.map_err(|e| classify(e, self.shared.deadline))?;
                    script::parse(reply, group.len())?
                }
            };
            match reply {
                Reply::Done { now, rows } => {
                    self.observe(now, sent);
                    return Ok(Answer { now, rows, made_before: false });
                }
                Reply::Made { now } => {
                    self.observe(now, sent);
                    return Ok(Answer { now, rows: Vec::new(), made_before: true });
                }
                Reply::Retry { now } => {
                    self.observe(now, sent);
                    estimate = now;
                }
                // Its caller gave up: answer as the deadline does, if anyone still listens.
                Reply::Stale { now } => {
                    self.observe(now, sent);
                    return Err(StoreError::Timeout(self.shared.deadline));
                }
            }
        }
        Err(StoreError::Backend {
            message: "quota period bounds kept missing Redis's clock".into(),
            transient: true,
            source: None,
        })
    }

    fn prepare<'a>(&self, ops: &'a [Op<'a>]) -> SmallVec<[Prepared<'a>; 4]> {
        ops.iter()
            .map(|op| {
                let (t, slot) = tag(op.key, &self.shared.hash_tag);
                let mut key = Vec::new();
                redis_key(&mut key, &self.shared.prefix, &t, algorithm_tag(op.limit), op.key);
                let box_key = op.block_for.map(|_| {
                    let mut key = Vec::new();
                    redis_key(&mut key, &self.shared.prefix, &t, BOX_TAG, op.key);
                    key
                });
                Prepared { op, key, box_key, slot }
            })
            .collect()
    }

    /// The ops grouped by slot: one group on a single node.
    fn groups(&self, prepared: &[Prepared<'_>]) -> SmallVec<[Group; 2]> {
        let mut groups: SmallVec<[(u16, Group); 2]> = SmallVec::new();
        let cluster = self.is_cluster();
        for (i, p) in prepared.iter().enumerate() {
            let slot = if cluster { p.slot } else { 0 };
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, g)) => g.push(i),
                None => groups.push((slot, SmallVec::from_slice(&[i]))),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    async fn apply_within(
        &self,
        ops: &[Op<'_>],
        mode: Mode,
        not_after: Option<Timestamp>,
        out: &mut Applied,
    ) -> Result<(), StoreError> {
        let _permit =
            self.shared.in_flight.acquire().await.map_err(|_| config_error("store closed".into()))?;
        let prepared = self.prepare(ops);
        let groups = self.groups(&prepared);
        if let [group] = &groups[..] {
            let script_mode = match mode {
                Mode::Check => ScriptMode::Check,
                Mode::Peek => ScriptMode::Peek,
                Mode::Report => ScriptMode::Report,
            };
            let answer = self.call(&prepared, group, script_mode, None, not_after, None).await?;
            let admitted = mode != Mode::Peek && answer.admitted(ops, group);
            fill(out, ops, mode, admitted, &[(group, &answer)]);
            return Ok(());
        }
        self.across_slots(&prepared, ops, &groups, mode, not_after, out).await
    }

    async fn refund_within(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        let _permit =
            self.shared.in_flight.acquire().await.map_err(|_| config_error("store closed".into()))?;
        let op = Op {
            key,
            scope_len: 0,
            limit,
            cost: grant.cost,
            enforce: true,
            on_error: OnStoreError::FailOpen,
            prefetch: None,
            block_for: None,
        };
        let ops = [op];
        let prepared = self.prepare(&ops);
        // Not guarded: a refund or release gives back what a check really took (the engine only
        // refunds the grants of answered checks), which is right however late it lands.
        self.call(&prepared, &[0], ScriptMode::Undo, Some(&[Some(grant)]), None, None).await.map(|_| ())
    }

    /// [`Records::adjust_once`]: one call per slot (one on a single node), each carrying its own
    /// note in its slot — `<prefix>{<tag>}o<id>`, the tag of the group's first key — written by the
    /// same script as the change. Slots are called in turn, and the first failure is returned: a
    /// retry makes what is left, and only that.
    async fn adjust_once_within(
        &self,
        ops: &[Op<'_>],
        adjustment: Adjustment<'_>,
        once: Once<'_>,
    ) -> Result<bool, StoreError> {
        let _permit =
            self.shared.in_flight.acquire().await.map_err(|_| config_error("store closed".into()))?;
        let grants: Option<SmallVec<[Option<Grant>; 4]>> =
            adjustment.grants(ops.len())?.map(|grants| grants.iter().copied().map(Some).collect());
        let mode = if grants.is_some() { ScriptMode::UndoOnce } else { ScriptMode::ReportOnce };
        let keep_ms = u64::try_from(once.keep.as_millis()).unwrap_or(u64::MAX).max(1);
        let prepared = self.prepare(ops);
        let mut applied = false;
        let mut note = Vec::new();
        for group in self.groups(&prepared) {
            let (t, _) = tag(prepared[group[0]].op.key, &self.shared.hash_tag);
            redis_key(&mut note, &self.shared.prefix, &t, b'o', once.id);
            let note = script::Once { key: &note, keep_ms };
            let answer = self.call(&prepared, &group, mode, grants.as_deref(), None, Some(note)).await?;
            applied |= !answer.made_before;
        }
        Ok(applied)
    }

    /// Not guarded (a plain `DEL`): a reset Redis runs late forgets the key as the caller asked,
    /// only a moment later, and charges nothing. Its penalty box goes with its state.
    async fn reset_within(&self, key: &[u8]) -> Result<bool, StoreError> {
        let _permit =
            self.shared.in_flight.acquire().await.map_err(|_| config_error("store closed".into()))?;
        let (t, _) = tag(key, &self.shared.hash_tag);
        let mut cmd = redis::cmd("DEL");
        let mut buf = Vec::new();
        for letter in ALGORITHM_TAGS.into_iter().chain([BOX_TAG]) {
            redis_key(&mut buf, &self.shared.prefix, &t, letter, key);
            cmd.arg(&buf[..]);
        }
        let deleted: Result<u64, RedisError> = match self.shared.conn.clone() {
            Conn::Node(mut c) => cmd.query_async(&mut c).await,
            Conn::Cluster(mut c) => cmd.query_async(&mut c).await,
        };
        deleted.map(|n| n > 0).map_err(|e| classify(e, self.shared.deadline))
    }

    async fn within<T>(&self, f: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        match tokio::time::timeout(self.shared.deadline, f).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(self.shared.deadline)),
        }
    }
}

/// A number no other store is likely to draw: the standard library's per-process random hash keys,
/// with the process id.
fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

fn micros(x: i64) -> u64 {
    u64::try_from(x).unwrap_or(0)
}

fn micros_of(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn decision(limit: &Limit, row: Row) -> Decision {
    Decision {
        allowed: row[0] == 1,
        limit: limit.capacity(),
        remaining: micros(row[1]),
        reset_after: Duration::from_micros(micros(row[2])),
        retry_after: (row[0] != 1).then(|| Duration::from_micros(micros(row[3]))),
    }
}

/// Writes the results of `answers` (each for a group of ops) into `out`.
fn fill(out: &mut Applied, ops: &[Op<'_>], mode: Mode, admitted: bool, answers: &[(&Group, &Answer)]) {
    out.results.clear();
    out.at = answers.iter().map(|(_, a)| a.now).max().unwrap_or_default();
    let mut results: SmallVec<[Option<OpResult>; 4]> = SmallVec::from_elem(None, ops.len());
    for (group, answer) in answers {
        for (k, &i) in group.iter().enumerate() {
            let row = answer.row(k);
            let op = &ops[i];
            let decision = decision(op.limit, row);
            let granted = match mode {
                // A report takes from every op but one whose key is in its penalty box.
                Mode::Report => row[4] != NOTHING_TAKEN,
                Mode::Check => admitted && decision.allowed,
                Mode::Peek => false,
            };
            let grant = granted.then(|| Grant { at: answer.now, cost: op.cost, lease: micros(row[4]) });
            // A peek of a quota answers its previous period's count where a lease id would be.
            let previous =
                (mode == Mode::Peek && matches!(op.limit, Limit::Quota(_))).then(|| micros(row[4]));
            results[i] = Some(OpResult { decision, grant, previous });
        }
    }
    out.results.extend(results.into_iter().flatten());
}

// === reservation records ===

/// The reservation records' script: the contract is at the top of `lua/record.lua`.
static RECORD: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("../lua/record.lua")));

impl RedisStore {
    /// The key of reservation record `id`: `<prefix>{r<id>}R` — a tag of its own (limit keys' tags
    /// are 8 bytes), so a record never shares a key with a limit.
    fn record_key(&self, id: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.shared.prefix.len() + id.len() + 4);
        key.extend_from_slice(&self.shared.prefix);
        key.extend_from_slice(b"{r");
        key.extend_from_slice(id);
        key.extend_from_slice(b"}R");
        key
    }

    /// One call of the records' script on record `id`, within the deadline.
    async fn record_call(
        &self,
        id: &[u8],
        op: &str,
        args: &[&[u8]],
    ) -> Result<(Timestamp, Vec<redis::Value>), StoreError> {
        let mut inv = RECORD.prepare_invoke();
        inv.key(self.record_key(id)).arg(op);
        match self.explicit_now() {
            Some(t) => inv.arg(t.as_micros()),
            None => inv.arg(""),
        };
        for a in args {
            inv.arg(*a);
        }
        let call = async {
            let _permit =
                self.shared.in_flight.acquire().await.map_err(|_| config_error("store closed".into()))?;
            let reply: Result<Vec<redis::Value>, RedisError> = match self.shared.conn.clone() {
                Conn::Node(mut c) => inv.invoke_async(&mut c).await,
                Conn::Cluster(mut c) => inv.invoke_async(&mut c).await,
            };
            reply.map_err(|e| classify(e, self.shared.deadline))
        };
        let mut reply = self.within(call).await?;
        let now = match reply.first() {
            Some(redis::Value::Int(n)) => Timestamp::from_micros(micros(*n)),
            _ => return Err(bad_record_reply(&reply)),
        };
        reply.remove(0);
        Ok((now, reply))
    }
}

fn bad_record_reply(reply: &[redis::Value]) -> StoreError {
    StoreError::Backend {
        message: format!("unexpected reservation record reply: {reply:?}"),
        transient: false,
        source: None,
    }
}

fn int(v: Option<&redis::Value>) -> Option<i64> {
    match v {
        Some(redis::Value::Int(n)) => Some(*n),
        _ => None,
    }
}

fn bytes(v: Option<&redis::Value>) -> Option<Vec<u8>> {
    match v {
        Some(redis::Value::BulkString(b)) => Some(b.clone()),
        Some(redis::Value::SimpleString(s)) => Some(s.as_bytes().to_vec()),
        _ => None,
    }
}

impl Store for RedisStore {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        if ops.is_empty() {
            out.results.clear();
            out.at = self.explicit_now().unwrap_or_else(|| self.estimate());
            return Ok(());
        }
        // Taken before waiting for a slot, as the deadline is.
        let not_after = self.not_after(mode);
        self.within(self.apply_within(ops, mode, not_after, out)).await
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        self.within(self.refund_within(key, limit, grant)).await
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        self.within(self.reset_within(key)).await
    }
}

impl Records for RedisStore {
    async fn adjust_once(
        &self,
        ops: &[Op<'_>],
        adjustment: Adjustment<'_>,
        once: Once<'_>,
    ) -> Result<bool, StoreError> {
        if ops.is_empty() {
            return Ok(false);
        }
        self.within(self.adjust_once_within(ops, adjustment, once)).await
    }

    async fn put_record(
        &self,
        id: &[u8],
        body: &[u8],
        ttl: Duration,
        kept: Duration,
    ) -> Result<Timestamp, StoreError> {
        let slack = if self.explicit_now().is_some() { TEST_CLOCK_SLACK_MS } else { 0 };
        let ttl_us = micros_of(ttl).to_string();
        let kept_ms =
            u64::try_from(kept.max(ttl).as_millis()).unwrap_or(u64::MAX).saturating_add(slack).max(1);
        let kept_ms = kept_ms.to_string();
        let (_, reply) = self.record_call(id, "put", &[body, ttl_us.as_bytes(), kept_ms.as_bytes()]).await?;
        let expires_at = int(reply.first()).ok_or_else(|| bad_record_reply(&reply))?;
        Ok(Timestamp::from_micros(micros(expires_at)))
    }

    async fn get_record(&self, id: &[u8]) -> Result<Option<Record>, StoreError> {
        let (now, reply) = self.record_call(id, "get", &[]).await?;
        if reply.is_empty() {
            return Ok(None);
        }
        let expires_at = int(reply.first()).ok_or_else(|| bad_record_reply(&reply))?;
        let body = bytes(reply.get(1)).ok_or_else(|| bad_record_reply(&reply))?;
        let settled = bytes(reply.get(2)).filter(|s| !s.is_empty());
        let kept_ms = int(reply.get(3)).ok_or_else(|| bad_record_reply(&reply))?;
        let expires_at = Timestamp::from_micros(micros(expires_at));
        Ok(Some(Record {
            body,
            expires_at,
            expired: settled.is_none() && now >= expires_at,
            settled,
            // A key without an expiry (-1) is not one this store wrote; kept as long as the longest.
            kept_for: Duration::from_millis(u64::try_from(kept_ms).unwrap_or(u64::MAX)),
        }))
    }

    async fn settle_record(&self, id: &[u8], settlement: &[u8]) -> Result<Settle, StoreError> {
        let (_, reply) = self.record_call(id, "settle", &[settlement]).await?;
        match int(reply.first()) {
            Some(0) => Ok(Settle::Missing),
            Some(1) => Ok(Settle::Settled),
            Some(2) => Ok(Settle::Already(bytes(reply.get(1)).ok_or_else(|| bad_record_reply(&reply))?)),
            Some(3) => Ok(Settle::Expired),
            _ => Err(bad_record_reply(&reply)),
        }
    }
}
