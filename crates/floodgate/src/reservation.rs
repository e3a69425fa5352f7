//! Reservations: reserve an estimate now, settle it later — commit the actual cost, or release it.
//!
//! A reservation is a check whose grants are remembered **in the store** under an opaque id
//! ([`Policy::record_reservation`]), so that any instance sharing the store can settle it:
//!
//! - **commit** ([`Settlement::Commit`]) charges the actual cost: per dimension, what was reserved
//!   beyond it is given back to every limit that took it, what it exceeds the reservation by is
//!   reported (consumed, never denied); dimensions the commit does not name stay as reserved.
//!   Concurrency permits are released: the call is over.
//! - **release** ([`Settlement::Release`]) gives everything back, permits included (a cancelled
//!   call).
//!
//! A record is settled once: the store marks it settled atomically, and a retried settlement with
//! the same content gets the same answer ([`Settled::replayed`]) without charging again; another
//! settlement of a settled reservation is a [`SettleError::Conflict`]. A reservation not settled
//! within its ttl stays charged its estimate — a crashed caller is never free — and settling it
//! afterwards is [`SettleError::Expired`].
//!
//! The store keeps a record (see [`Records::put_record`](crate::store::Records::put_record)) until
//! as long after its expiry as the reservation lasted (at least a minute), so that retries find
//! their answer; then it is forgotten ([`SettleError::NotFound`]).
//!
//! Each answer says, per rule, what the reservation held and what stays charged on it
//! ([`Charges`]): a settlement in [`Settled::charges`], a settlement refused as expired in
//! [`SettleError::Expired`], and a record a store reports expired unsettled through
//! [`Charges::expired`] — what the reservation metrics count.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate_core::{Grant, Timestamp};
use smallvec::SmallVec;

use crate::store::{Mode, Once, Settle, Store, StoreError, kept_after_expiry};
use crate::{Costs, Descriptors, Hit, Policy, Verdict};

/// A reservation made: its id, and when it expires (on the store's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The opaque id to settle it with: 32 hexadecimal digits.
    pub id: String,
    /// When it expires unsettled, and stays charged its estimate.
    pub expires_at: Timestamp,
}

/// What a reservation is, as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Made by a reserve: commit or release it.
    Reserve,
    /// The concurrency permits a check took: release them.
    Permits,
}

/// How a reservation is settled.
#[derive(Debug, Clone, Copy)]
pub enum Settlement<'a> {
    /// The call is done and cost this (dimensions not named stay as reserved).
    Commit(&'a Costs),
    /// The call did not happen: give everything back.
    Release,
}

/// What settling did (the same answer for a retried settlement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// Committed (`true`) or released.
    pub committed: bool,
    /// What was reserved, per dimension.
    pub reserved: Costs,
    /// What stays charged, per dimension.
    pub charged: Costs,
    /// What was given back, per dimension (dimensions with nothing given back are left out).
    pub refunded: Costs,
    /// What the actual cost exceeded the reservation by, charged on top (left out when nothing).
    pub excess: Costs,
    /// Whether this settlement had already been made, and this is its answer again.
    pub replayed: bool,
    /// Per rule, what the reservation held and what stays charged now.
    pub charges: Charges,
}

/// What a reservation holds on each rule, and what stays charged there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charges {
    /// What the reservation is.
    pub kind: Kind,
    /// One entry per limit the reservation holds, in the order of the verdict that made it.
    pub rules: Vec<Charge>,
}

/// One rule's part of a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// The rule's name, in the policy the reservation was made on.
    pub rule: Box<str>,
    /// What the rule granted the reservation: units of the rule's cost dimension, or the permits
    /// of a concurrency rule.
    pub held: u64,
    /// What stays charged on the rule: after a commit, what was held less what was given back plus
    /// the excess charged on top; after a release, nothing; while pending or once expired, all that
    /// was held. Permits are freed by any settlement (0).
    pub charged: u64,
    /// Whether `held` counts concurrency permits.
    pub permit: bool,
}

impl Charges {
    /// What a reservation record (as a store keeps it, see
    /// [`Records::put_record`](crate::store::Records::put_record)) holds, all of it charged: what
    /// stays charged when the reservation expires unsettled. `None` for bytes no engine wrote.
    pub fn expired(record: &[u8]) -> Option<Charges> {
        decode(record).map(|held| held.unsettled())
    }
}

/// Why a reservation could not be settled.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// No such reservation: never made, or forgotten since.
    #[error("no such reservation")]
    NotFound,
    /// The reservation expired unsettled; it stays charged its estimate (what it held, per rule).
    #[error("the reservation expired unsettled and stays charged its estimate")]
    Expired(Charges),
    /// The reservation was already settled otherwise.
    #[error("the reservation was already {}", if *committed { "committed" } else { "released" })]
    Conflict {
        /// Whether it was committed (else released).
        committed: bool,
    },
    /// The id names the concurrency permits of a check, which can only be released.
    #[error("the reservation holds the concurrency permits of a check: release it")]
    PermitsOnly,
    /// The reservation was made on another policy: the one of `namespace` (an Envoy domain; `None`:
    /// the policy with no namespace). Settle it there; this policy changed nothing.
    #[error("the reservation was made under {}", namespace.as_deref().map_or_else(|| "no domain".to_owned(), |n| format!("domain {n:?}")))]
    OtherPolicy {
        /// The namespace of the policy the reservation was made on.
        namespace: Option<Box<str>>,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

// === impl Policy ===

impl Policy {
    /// Remembers in `store` what `verdict` (an allowed check of `hit`, on this policy and store)
    /// took, under a new id, until `ttl` from now on the store's clock. `kind` says what it may be
    /// settled with. When the store cannot keep a [`Kind::Reserve`], what the check took is given
    /// back and the store's error returned: a reservation nobody can settle is never left charged.
    /// The permits of a [`Kind::Permits`] stay held (until their lease ends), as a check's
    /// permits without an id are.
    pub async fn record_reservation<S: Store>(
        &self,
        store: &S,
        hit: Hit<'_>,
        verdict: &Verdict,
        ttl: Duration,
        kind: Kind,
    ) -> Result<Reservation, StoreError> {
        let body = encode(self.namespace(), hit, verdict, kind);
        let id = new_id();
        match store.put_record(id.as_bytes(), &body, ttl, ttl + kept_after_expiry(ttl)).await {
            Ok(expires_at) => Ok(Reservation { id, expires_at }),
            Err(error) => {
                if kind == Kind::Reserve {
                    let _ = self.give_back(store, &[hit], verdict, false).await;
                }
                Err(error)
            }
        }
    }

    /// Settles reservation `id` on `store` (see the [module docs](self)).
    pub async fn settle<S: Store>(
        &self,
        store: &S,
        id: &str,
        settlement: Settlement<'_>,
    ) -> Result<Settled, SettleError> {
        let wanted = encode_settlement(settlement);
        let record = store.get_record(id.as_bytes()).await?.ok_or(SettleError::NotFound)?;
        let held = decode(&record.body).ok_or(SettleError::NotFound)?;
        // Its rules and keys are another policy's: settled here, its grants would go back to the
        // keys of this policy's rules of the same names.
        if held.namespace.as_deref() != self.namespace() {
            return Err(SettleError::OtherPolicy { namespace: held.namespace });
        }
        // Already settled: the same settlement gets the same answer, and also finishes what the
        // first one may have left undone — its instance crashed, or the store failed, between
        // marking the record and giving back — each step being made at most once
        // ([`Records::adjust_once`]), so that a retried settlement leaves the limits as one does.
        let replayed = match &record.settled {
            Some(done) => {
                same_settlement(done, &wanted)?;
                true
            }
            None if record.expired => return Err(SettleError::Expired(held.unsettled())),
            None if held.kind == Kind::Permits && matches!(settlement, Settlement::Commit(_)) => {
                return Err(SettleError::PermitsOnly);
            }
            None => match store.settle_record(id.as_bytes(), &wanted).await? {
                Settle::Settled => false,
                Settle::Already(done) => {
                    same_settlement(&done, &wanted)?;
                    true
                }
                Settle::Expired => return Err(SettleError::Expired(held.unsettled())),
                Settle::Missing => return Err(SettleError::NotFound),
            },
        };
        let mut settled = settled(&held, &wanted, replayed);
        self.adjust(store, id, &held, &settled, record.kept_for).await?;
        settled.charges = self.charges(&held, &settled);
        Ok(settled)
    }

    /// Per rule, what `held` held and what stays charged once `settled`.
    fn charges(&self, held: &Held, settled: &Settled) -> Charges {
        let rules = held
            .limits
            .iter()
            .map(|l| {
                let held_units = l.grant.cost;
                let charged = if l.permit {
                    0
                } else {
                    match self.rules.iter().find(|c| *c.rule.name == *l.rule) {
                        // A rule gone since (a reload) got nothing back, and no excess.
                        None => held_units,
                        Some(compiled) => {
                            let dimension = &compiled.rule.cost;
                            held_units - refund(l, dimension, settled) + settled.excess.get(dimension)
                        }
                    }
                };
                Charge { rule: l.rule.clone(), held: held_units, charged, permit: l.permit }
            })
            .collect();
        Charges { kind: held.kind, rules }
    }

    /// Charges the settlement of reservation `id`: gives back what was reserved beyond the actual
    /// cost (and every permit), and reports the excess. Each of the two is one store call made at
    /// most once ([`Records::adjust_once`](crate::store::Records::adjust_once), noted for `keep`:
    /// as long as the record is kept), so that it can be made again by a retry. A sharded rule gets
    /// back what it gave on the shard it gave it from; its excess goes to the shard the id picks,
    /// the same one each time.
    async fn adjust<S: Store>(
        &self,
        store: &S,
        id: &str,
        held: &Held,
        settled: &Settled,
        keep: Duration,
    ) -> Result<(), StoreError> {
        let seed = seed_of(id);
        let mut back: SmallVec<[(&str, Grant, Option<u16>); 4]> = SmallVec::new();
        for l in &held.limits {
            // A rule gone since (a reload) has nothing to give back to.
            let Some(compiled) = self.rules.iter().find(|c| *c.rule.name == *l.rule) else { continue };
            let refund = refund(l, &compiled.rule.cost, settled);
            if refund > 0 {
                back.push((&l.rule, Grant { cost: refund, ..l.grant }, l.shard));
            }
        }
        if !back.is_empty() {
            let once = format!("{id}:back");
            let once = Once { id: once.as_bytes(), keep };
            self.give_back_once(store, &held.descriptors, &back, seed, once).await?;
        }
        if !settled.excess.is_zero() {
            let excess = Hit::with_costs(&held.descriptors, &settled.excess);
            let once = format!("{id}:more");
            self.report_once(store, excess, seed, Once { id: once.as_bytes(), keep }).await.map_err(
                |error| StoreError::Backend {
                    message: format!("the excess could not be charged: {error}"),
                    transient: error.is_transient(),
                    source: None,
                },
            )?;
        }
        Ok(())
    }
}

/// What a settlement gives back to the rule of `limit`, whose cost dimension is `dimension`: every
/// permit, and at most what the rule granted of what the settlement refunds.
fn refund(limit: &HeldLimit, dimension: &str, settled: &Settled) -> u64 {
    if limit.permit { limit.grant.cost } else { settled.refunded.get(dimension).min(limit.grant.cost) }
}

/// `Ok` when a reservation settled with `done` is settled again with the same settlement
/// (`wanted`), a conflict otherwise.
fn same_settlement(done: &[u8], wanted: &[u8]) -> Result<(), SettleError> {
    if done == wanted {
        Ok(())
    } else {
        Err(SettleError::Conflict { committed: done.first() == Some(&COMMIT) })
    }
}

/// The number a reservation's id seeds its shard choices with: its first 16 hexadecimal digits,
/// the same on every instance.
fn seed_of(id: &str) -> u64 {
    id.get(..16).and_then(|h| u64::from_str_radix(h, 16).ok()).unwrap_or(0)
}

/// The settlement `encoded` of `held`, as numbers.
fn settled(held: &Held, encoded: &[u8], replayed: bool) -> Settled {
    let committed = encoded.first() == Some(&COMMIT);
    if held.kind == Kind::Permits {
        // Only the permits go back: the check's costs stay charged.
        let reserved = held.estimate.clone();
        return Settled {
            committed,
            charged: reserved.clone(),
            reserved,
            refunded: Costs::new(),
            excess: Costs::new(),
            replayed,
            charges: Charges { kind: held.kind, rules: Vec::new() },
        };
    }
    let actual =
        if committed { decode_costs(&mut Reader(&encoded[1..])).unwrap_or_default() } else { Costs::new() };
    let mut charged = Costs::new();
    let mut refunded = Costs::new();
    let mut excess = Costs::new();
    for (dimension, reserved) in held.estimate.iter() {
        let now = match committed {
            true if actual.names(dimension) => actual.get(dimension),
            true => reserved,
            false => 0,
        };
        charged.set(dimension, now);
        if reserved > now {
            refunded.set(dimension, reserved - now);
        } else if now > reserved {
            excess.set(dimension, now - reserved);
        }
    }
    // Dimensions the commit names that were not reserved: all excess.
    for (dimension, now) in actual.iter() {
        if !held.estimate.names(dimension) {
            charged.set(dimension, now);
            if now > 0 {
                excess.set(dimension, now);
            }
        }
    }
    Settled {
        committed,
        reserved: held.estimate.clone(),
        charged,
        refunded,
        excess,
        replayed,
        // Filled in by `Policy::settle`, which knows each rule's cost dimension.
        charges: Charges { kind: held.kind, rules: Vec::new() },
    }
}

/// A fresh opaque id: 128 bits from the process's random hasher keys (seeded by the operating
/// system) and a counter, as 32 hexadecimal digits.
fn new_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let (a, b) = (RandomState::new().hash_one(n), RandomState::new().hash_one((n, 0x5eed_u64)));
    format!("{a:016x}{b:016x}")
}

// === the record's bytes ===

/// The record format written: version 2 adds each grant's shard, version 3 the policy's namespace
/// (an Envoy domain). Older records are still read (a rolling upgrade, a persisted store): what
/// records of version 1 hold goes back to a shard their id picks; records before version 3 were
/// made on the policy with no namespace.
const VERSION: u8 = 3;
const COMMIT: u8 = 1;
const RELEASE: u8 = 2;

/// One limit a reservation holds.
#[derive(Debug)]
struct HeldLimit {
    rule: Box<str>,
    grant: Grant,
    permit: bool,
    /// The shard of a sharded rule the grant was taken from (`None` in records of version 1).
    shard: Option<u16>,
}

/// A decoded record.
#[derive(Debug)]
struct Held {
    /// The namespace of the policy the reservation was made on.
    namespace: Option<Box<str>>,
    kind: Kind,
    descriptors: Descriptors,
    estimate: Costs,
    limits: SmallVec<[HeldLimit; 4]>,
}

impl Held {
    /// Per rule, what the record holds, all of it still charged.
    fn unsettled(&self) -> Charges {
        let rules = self
            .limits
            .iter()
            .map(|l| Charge {
                rule: l.rule.clone(),
                held: l.grant.cost,
                charged: l.grant.cost,
                permit: l.permit,
            })
            .collect();
        Charges { kind: self.kind, rules }
    }
}

fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(&n.to_be_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u64(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn encode_costs(out: &mut Vec<u8>, costs: &Costs) {
    put_u64(out, costs.len() as u64);
    for (d, c) in costs.iter() {
        put_bytes(out, d.as_bytes());
        put_u64(out, c);
    }
}

/// A record: what `verdict` took for `hit`, on the policy of `namespace`.
fn encode(namespace: Option<&str>, hit: Hit<'_>, verdict: &Verdict, kind: Kind) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.push(VERSION);
    out.push(match kind {
        Kind::Reserve => 0,
        Kind::Permits => 1,
    });
    put_u64(&mut out, hit.descriptors.len() as u64);
    for (name, value) in hit.descriptors.iter() {
        put_bytes(&mut out, name.as_bytes());
        put_bytes(&mut out, value.as_bytes());
    }
    let estimate = match hit.costs {
        Some(costs) => costs.clone(),
        None => Costs::new().with(crate::cost::REQUESTS, hit.cost),
    };
    encode_costs(&mut out, &estimate);
    let held: SmallVec<[&crate::LimitOutcome; 4]> =
        verdict.limits.iter().filter(|l| l.grant.is_some() && (kind == Kind::Reserve || l.permit)).collect();
    put_u64(&mut out, held.len() as u64);
    for l in held {
        let grant = l.grant.unwrap_or(Grant { at: Timestamp::EPOCH, cost: 0, lease: 0 });
        put_bytes(&mut out, l.rule.as_bytes());
        put_u64(&mut out, grant.at.as_micros());
        put_u64(&mut out, grant.cost);
        put_u64(&mut out, grant.lease);
        out.push(u8::from(l.permit));
        match l.shard {
            Some(i) => {
                out.push(1);
                out.extend_from_slice(&i.to_be_bytes());
            }
            None => out.push(0),
        }
    }
    match namespace {
        Some(n) => {
            out.push(1);
            put_bytes(&mut out, n.as_bytes());
        }
        None => out.push(0),
    }
    out
}

/// A settlement's bytes: what a retry is compared with.
fn encode_settlement(settlement: Settlement<'_>) -> Vec<u8> {
    match settlement {
        Settlement::Release => vec![RELEASE],
        Settlement::Commit(costs) => {
            // Sorted, so that the same costs in another order are the same settlement.
            let mut sorted: Vec<(&str, u64)> = costs.iter().collect();
            sorted.sort_unstable();
            let mut out = vec![COMMIT];
            encode_costs(&mut out, &sorted.into_iter().collect());
            out
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u64(&mut self) -> Option<u64> {
        let (head, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_be_bytes(*head))
    }

    fn u8(&mut self) -> Option<u8> {
        let (head, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*head)
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn text(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
}

fn decode_costs(r: &mut Reader<'_>) -> Option<Costs> {
    let n = r.u64()?;
    let mut costs = Costs::new();
    for _ in 0..n.min(64) {
        let d = r.text()?;
        costs.set(d, r.u64()?);
    }
    Some(costs)
}

/// A record's content; `None` for bytes no engine wrote.
fn decode(body: &[u8]) -> Option<Held> {
    let mut r = Reader(body);
    let version = r.u8()?;
    if !(1..=VERSION).contains(&version) {
        return None;
    }
    let kind = match r.u8()? {
        0 => Kind::Reserve,
        1 => Kind::Permits,
        _ => return None,
    };
    let mut descriptors = Descriptors::new();
    for _ in 0..r.u64()?.min(1024) {
        let name = r.text()?.to_owned();
        let value = r.text()?.to_owned();
        descriptors.insert(name, value);
    }
    let estimate = decode_costs(&mut r)?;
    let mut limits = SmallVec::new();
    for _ in 0..r.u64()?.min(1024) {
        let rule: Box<str> = r.text()?.into();
        let at = Timestamp::from_micros(r.u64()?);
        let cost = r.u64()?;
        let lease = r.u64()?;
        let permit = r.u8()? == 1;
        let shard = match version {
            1 => None,
            _ => match r.u8()? {
                0 => None,
                _ => Some(u16::from_be_bytes([r.u8()?, r.u8()?])),
            },
        };
        limits.push(HeldLimit { rule, grant: Grant { at, cost, lease }, permit, shard });
    }
    let namespace = match version {
        1 | 2 => None,
        _ => match r.u8()? {
            0 => None,
            _ => Some(r.text()?.into()),
        },
    };
    Some(Held { namespace, kind, descriptors, estimate, limits })
}

// === impl Engine ===

/// A reserve's answer: the check's verdict, and when allowed, the reservation holding what it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Reserved {
    /// The verdict, as a check answers it.
    pub verdict: Verdict,
    /// The reservation, when allowed.
    pub reservation: Option<Reservation>,
}

/// Why a reserve failed.
#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    /// The request can never pass.
    #[error(transparent)]
    Engine(#[from] crate::EngineError),
    /// The store could not keep the reservation (what the check took was given back).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl<S: Store> crate::Engine<S> {
    /// Reserves `hit`'s cost for up to `ttl`: a check and, when allowed, a record of what it took in
    /// the store (see the [module docs](self)).
    pub async fn reserve(&self, hit: Hit<'_>, ttl: Duration) -> Result<Reserved, ReserveError> {
        let policy = self.policy();
        let verdict = policy.evaluate(self.store(), Mode::Check, &[hit], crate::Impossible::Error).await?;
        if !verdict.allowed {
            return Ok(Reserved { verdict, reservation: None });
        }
        let reservation = policy.record_reservation(self.store(), hit, &verdict, ttl, Kind::Reserve).await?;
        Ok(Reserved { verdict, reservation: Some(reservation) })
    }

    /// Settles reservation `id` (see the [module docs](self)).
    pub async fn settle(&self, id: &str, settlement: Settlement<'_>) -> Result<Settled, SettleError> {
        self.policy().settle(self.store(), id, settlement).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(rule: &str, shard: Option<u16>, permit: bool) -> crate::LimitOutcome {
        crate::LimitOutcome {
            rule: rule.into(),
            index: 0,
            hit: 0,
            decision: floodgate_core::Decision {
                allowed: true,
                limit: 10,
                remaining: 9,
                reset_after: Duration::ZERO,
                retry_after: None,
            },
            outcome: crate::Outcome::Allowed,
            enforced: true,
            window: Duration::from_secs(60),
            dimension: "tokens".into(),
            quota: false,
            degrade_to: None,
            grant: Some(Grant { at: Timestamp::from_micros(7), cost: 600, lease: 3 }),
            permit,
            shard,
            partition: None,
        }
    }

    #[test]
    fn a_record_keeps_each_grant_and_its_shard() {
        let descriptors = Descriptors::new().with("tenant", "t1");
        let costs = Costs::new().with("tokens", 600);
        let verdict = Verdict {
            allowed: true,
            limits: [outcome("tpm", Some(3), false), outcome("in-flight", None, true)].into_iter().collect(),
            ..Verdict::default()
        };
        let body = encode(None, Hit::with_costs(&descriptors, &costs), &verdict, Kind::Reserve);
        let held = decode(&body).expect("decodes");
        assert_eq!(held.kind, Kind::Reserve);
        assert_eq!(held.estimate, costs);
        let got: Vec<_> = held.limits.iter().map(|l| (&*l.rule, l.grant, l.permit, l.shard)).collect();
        let grant = Grant { at: Timestamp::from_micros(7), cost: 600, lease: 3 };
        assert_eq!(got, [("tpm", grant, false, Some(3)), ("in-flight", grant, true, None)]);
        // Cut anywhere, it is no record.
        for end in 0..body.len() {
            assert!(decode(&body[..end]).is_none(), "cut at {end}");
        }
    }

    #[test]
    fn a_record_of_version_1_is_read_without_shards() {
        // Version 1: no shard after each limit's permit flag.
        let mut body = vec![1, 0];
        put_u64(&mut body, 0);
        encode_costs(&mut body, &Costs::new().with("requests", 1));
        put_u64(&mut body, 1);
        put_bytes(&mut body, b"rpm");
        for n in [5, 1, 0] {
            put_u64(&mut body, n);
        }
        body.push(0);
        let held = decode(&body).expect("decodes");
        assert_eq!(held.limits.len(), 1);
        assert_eq!((held.limits[0].grant.cost, held.limits[0].shard), (1, None));
        assert_eq!(held.namespace, None, "made on the policy with no namespace");
        body[0] = 4;
        assert!(decode(&body).is_none(), "a version this build does not know");
    }

    #[test]
    fn a_record_keeps_the_namespace_of_its_policy_and_one_of_version_2_has_none() {
        let descriptors = Descriptors::new().with("tenant", "t1");
        let verdict = Verdict {
            allowed: true,
            limits: [outcome("tpm", None, false)].into_iter().collect(),
            ..Verdict::default()
        };
        let hit = Hit::new(&descriptors, 1);
        let body = encode(Some("edge"), hit, &verdict, Kind::Reserve);
        assert_eq!(decode(&body).expect("decodes").namespace.as_deref(), Some("edge"));
        for end in 0..body.len() {
            assert!(decode(&body[..end]).is_none(), "cut at {end}");
        }
        // Version 2 ended after the limits.
        let mut v2 = encode(None, hit, &verdict, Kind::Reserve);
        assert_eq!(v2.pop(), Some(0), "no namespace: one byte");
        v2[0] = 2;
        let held = decode(&v2).expect("a record of version 2 decodes");
        assert_eq!((held.namespace, held.limits.len()), (None, 1));
    }
}
