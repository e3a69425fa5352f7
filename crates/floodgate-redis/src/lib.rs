//! Floodgate's Redis store: many Floodgate instances (or application processes using the library)
//! share their limits in one Redis node or Redis Cluster, exactly as correct as the memory store.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::num::NonZeroU64;
//! use std::time::Duration;
//! use floodgate::{Descriptors, Engine, Policy, Rule};
//! use floodgate_core::FixedWindow;
//! use floodgate_redis::{RedisConfig, RedisStore};
//!
//! # let server = floodgate_testkit::redis::RedisServer::start();
//! # let url = server.url();
//! // let url = "redis://127.0.0.1:6379";
//! let store = RedisStore::connect(RedisConfig::node(url)).await?;
//! let per_user = Rule::new("per-user", FixedWindow::try_new(NonZeroU64::new(2).unwrap(), Duration::from_secs(60))?)
//!     .key(["user"]);
//! let engine = Engine::new(Policy::new([per_user])?, store);
//! let alice = Descriptors::new().with("user", "alice");
//! assert!(engine.check(&alice, 1).await?.allowed);
//! assert!(engine.check(&alice, 1).await?.allowed);
//! assert!(!engine.check(&alice, 1).await?.allowed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # Design
//!
//! - **One script, one round trip per decision.** All the limits of a request go to one Lua script
//!   (the `src/lua/*.lua` files, one per algorithm plus a prelude and a driver, each opening with its
//!   KEYS/ARGV contract), called with `EVALSHA`; after a restart, failover or `SCRIPT FLUSH` the
//!   `NOSCRIPT` answer reloads it transparently (on every node of a cluster). The script reads every
//!   limit's state and decides; only when every enforced limit allows do the allowing limits consume
//!   (a denied request consumes nothing); limits that allow but are not taken report their state as
//!   it stays — the memory store's semantics, decision for decision (a differential test compares
//!   the two on random traffic). A request of exactly one token bucket, GCRA or fixed window limit
//!   without a penalty box — the common case — runs that algorithm's single-limit script instead
//!   (`one_bucket.lua`, `one_window.lua`): the same state and answers without the driver's loop,
//!   with four arguments, `TIME`, `GET` and at most one `SET`, so the same key may go through both
//!   in turn.
//! - **Redis's clock.** The script reads `TIME`, so instances whose clocks disagree still agree on
//!   every decision. Quota periods (calendar days and months in a time zone) cannot be computed in
//!   Lua: the store sends the bounds of the period containing its best guess of Redis's time (the
//!   process clock plus the offset seen in the last reply); when Redis's time falls outside them the
//!   script writes nothing and answers with its time, and the store asks again with the right
//!   bounds — one extra round trip around a period boundary when the clocks differ, never a wrong
//!   count. [`RedisStore::with_clock`] replaces `TIME` by a test clock for deterministic tests.
//! - **Compact state, always expiring.** One key per limit: a token bucket or GCRA is one number
//!   (its theoretical arrival time); a fixed window 16 bytes (window start, count); a quota 32
//!   bytes (period start, count, period end, the previous period's count: a peek reads the last
//!   period's count, and 16-byte values of earlier releases still read, with none); a
//!   sliding window 24 bytes (start, previous count, current count); a sliding log a sorted set of
//!   admissions; a concurrency limit a sorted set of leases by expiry. Every write leaves the key with
//!   an expiry no earlier than the moment its state is back to fresh (buckets round it up to whole
//!   seconds so that a busy key refreshes its TTL about once a second: `SET … KEEPTTL` in between).
//!   Keys are `<prefix>{<tag>}<algorithm letter><engine key>` (see [`HashTag`]).
//! - **Penalty boxes** ([`Op::block_for`](floodgate::store::Op::block_for), a rule's
//!   [`block_for`](floodgate::Rule::block_for)): the memory store's semantics. A key's box is a key
//!   of its own, `<prefix>{<tag>}x<engine key>` — the same tag, hence the same cluster slot, as the
//!   key's state ([`RedisStore::penalty_box_key`]) — holding the time the box ends, on the script's
//!   clock, and expiring then. The script reads the boxes of the ops that have one before their
//!   algorithms: an op whose key is in its box is refused (`retry_after` is the time left), and
//!   counts nothing in a report. When a check is denied, each enforced op with a box that its own
//!   count denied goes into it: its state key is deleted and its box key written, in the same
//!   atomic call; a peek says so and writes nothing. So a box that has ended leaves a key never
//!   seen, with nothing to clean up, and a refund or give-back to a boxed key finds no count to
//!   give back to. A reset deletes the box with the state.
//! - **Exact arithmetic in doubles.** Lua numbers are doubles, exact to 2^53. Times are µs since the
//!   epoch (2^53 µs is the year 2255); costs are clamped to 2^52 (the memory store saturates at
//!   2^64 — only reports of absurd costs can tell the difference); a limit's counts (limits,
//!   bursts) must stay below 2^52, its windows, leases, ttls and bucket fill times below 2^52 µs
//!   (142 years), and a sliding window's `limit × window µs` below 2^53 (e.g. 10^6 per hour, or
//!   10^5 per day) — [`Limit::exact_in_doubles`](floodgate::Limit::exact_in_doubles), which a
//!   server's configuration checks at load — or the store answers with a permanent error.
//!   Divisions are corrected to be exact.
//! - **Deadline and errors.** Every call (waiting for one of the `max_in_flight` slots included)
//!   ends within [`RedisConfig::deadline`] (default 50 ms) or fails with
//!   [`StoreError::Timeout`](floodgate::StoreError::Timeout); errors say whether they are transient
//!   (connection, loading, failover, cluster resharding) so the engine applies each rule's
//!   `on_store_error`. The connection is one multiplexed, auto-pipelining connection (per cluster
//!   node) that reconnects by itself. On a node, a lost connection is re-established by one
//!   connection attempt shared by the calls meanwhile, without retries or back-off: a stopped
//!   node refuses it, and every call fails at once instead of waiting out its deadline; the next
//!   call tries again, so a restarted node is used as soon as it listens.
//! - **A call its caller gave up on changes nothing.** A call past its deadline is still written on
//!   the connection (and the cluster client may send it again): a paused, overloaded or
//!   failing-over Redis runs the backlog later, on its clock then. Unguarded, that charges the
//!   requests the engine denied by `fail_closed` — a denied request must consume nothing — and
//!   charges those `fail_open` passed seconds late, into the window current when Redis comes back,
//!   denying the traffic of that moment. So every call that consumes for a request — a check, a
//!   report — carries a *not after* time on Redis's clock, and the script, right after reading
//!   `TIME`, answers "stale" and writes nothing when Redis's time is past it; the store answers as
//!   at the deadline, [`StoreError::Timeout`](floodgate::StoreError::Timeout).
//!
//!   *Not after* is the store's estimate of Redis's time when the call starts (the process clock
//!   moved by the offset seen in a reply) plus the deadline plus a margin, `max(deadline, 50 ms)`.
//!   Redis reads its time between a call's send and its reply, so a reply's offset is low by at
//!   most the round trip; only replies whose round trip lasted at most the margin are trusted, so
//!   the estimate lags Redis's clock by at most the margin. Hence a script Redis runs within its
//!   call's deadline is never stale, and one it runs more than deadline + 2 × margin after the call
//!   started always is. In between lies what remains: the calls that timed out in about the last
//!   margin before Redis comes back may still count (with the default 50 ms deadline, those sent
//!   100 ms or so before the resume; without the guard, all those of the outage). The margin is
//!   not smaller because a busy client reads replies late (its estimate then lags), and because
//!   the nodes of a cluster must agree with the estimate: **their clocks must agree within the
//!   margin** (NTP does, by far); a node ahead by more turns calls it runs in time into timeouts.
//!
//!   Not guarded: peeks (they write nothing); give-backs — a refund, a release, the cross-slot
//!   give-back — which return what a check's answer says it took and are right however late they land
//!   (and are sent only for answered checks, so what a stale check never took is never given
//!   back); resets (a `DEL`: a late one forgets the key a moment later, charging nothing); the
//!   first calls of a store, before a reply has given the offset; and calls on a test clock
//!   ([`RedisStore::with_clock`]), whose `now` the caller sends. A report that times out is counted
//!   within the margin or not at all, never late (on a cluster, as any failed report, it may count
//!   in some slots and not others). The single-limit scripts pay one more argument and one
//!   comparison: about 0.25 µs of Redis CPU per decision.
//!
//! # TLS
//!
//! A `rediss://` URL (every seed of a cluster) connects over TLS (rustls, on the ring provider),
//! the readiness probe's connection too. [`RedisConfig::tls`] gives the certificates, each
//! optional: a CA bundle for a private CA (otherwise the platform's trusted roots), and a client
//! certificate with its key for servers that require one (`tls-auth-clients yes`). They are checked
//! when the store is built, each file named in the error ([`TlsError`]); TLS settings with a URL
//! that is not `rediss://` are refused. A handshake that fails — a server certificate that does not
//! verify, a client certificate missing or refused — is a permanent store error.
//!
//! # Redis Cluster
//!
//! A key's slot is picked by its hash tag ([`HashTag::Key`] by default, or one descriptor's value
//! with [`HashTag::Descriptor`] so that all the limits of, say, one tenant share a slot). `MOVED`
//! and `ASK` (resharding, failover) are followed by the `redis` crate's cluster client. A request
//! whose keys share a slot is one atomic call. A request whose keys span slots is **applied slot
//! by slot** (`store/cross_slot.rs`): every slot applies its own keys all-or-nothing; if one slot
//! denies, the slots that consumed give back what they took and the request is denied. It never
//! over-admits: no limit ever holds more than it would without the denied request.
//!
//! - **The order** ([`CrossSlot`]). By default the slots of keys that denied lately — a hint per
//!   key, kept for the time the denial said to retry after (50 ms to 1 min) in a fixed lock-free
//!   table — are asked first, while the other slots are asked how they stand should the request be
//!   denied (consuming nothing); those consume once the first admit. A request such a key denies
//!   charges nothing elsewhere, in one round trip; one it admits takes two. Requests with no such
//!   key, and every request with [`CrossSlot::AtOnce`], go to every slot at once.
//! - **Penalty boxes across slots.** Each slot's script reads and writes the boxes of its own
//!   ops (a box shares its key's slot). A slot asked how it stands in a denial boxes the ops its
//!   counts deny, since they deny the request; a slot that checks boxes them when it denies. So
//!   a request across slots boxes the limits a one-slot request would, in either order. A
//!   give-back never touches a box: it only gives back to ops its slot admitted.
//! - **The give-back** is made at most once — a note in its slot, as the reservations' settlement
//!   steps — so it is tried again, in a task of its own that outlives the request, while it fails
//!   for a transient reason, for up to 30 s; [`RedisStore::give_backs`] counts what became of each.
//! - **The worst case** is a transient **under**-admission: for one round trip, a limit may hold
//!   the cost of cross-slot requests in flight that another slot is denying (a key's first denial,
//!   or a denial by a slot not asked first), and another request may be refused for it. A
//!   give-back lost for good (the process dies, Redis unreachable for 30 s, 4,096 give-backs
//!   already retrying) leaves that cost charged until it replenishes by itself — the rest of the
//!   window for windows and logs, `cost × interval` for buckets, the lease for concurrency, the
//!   rest of the period for quotas. Only slots that answered that they admitted give back: a slot
//!   that timed out or was stale may have taken nothing (if Redis ran it in time after all, its
//!   cost stays charged: the same under-admission). `docs/redis.md` states the bound and the
//!   figures; the tests and `floodgate-bench cross-slot` measure it.

mod config;
mod error;
mod fleet;
mod hints;
mod key;
mod probe;
pub mod rlqs;
mod script;
mod store;
mod tls;

pub use config::{CrossSlot, HashTag, RedisConfig, Target};
pub use probe::{PROBE_CACHE, PROBE_TIMEOUT_FLOOR, Readiness};
pub use store::{GiveBacks, RedisStore};
pub use tls::{Pem, TlsConfig, TlsError, TlsFile};

/// The Lua script the store runs (the files of `src/lua`, concatenated), for tools that measure or
/// load it themselves (the benchmark compares `redis-benchmark EVALSHA` of it with the store).
pub fn script_source() -> &'static str {
    script::SOURCE
}

/// The single-limit scripts the store runs instead of the driver for a request of exactly one limit
/// of their algorithms, by name (`one_bucket`: token bucket and GCRA; `one_window`: fixed window),
/// for tools that measure or load them themselves. Each file opens with its KEYS/ARGV contract.
pub fn single_limit_script_sources() -> [(&'static str, &'static str); 2] {
    [("one_bucket", script::ONE_BUCKET_SOURCE), ("one_window", script::ONE_WINDOW_SOURCE)]
}
