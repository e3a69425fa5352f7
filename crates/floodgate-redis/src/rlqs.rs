//! RLQS across a fleet: each instance writes the demand of its streams' buckets and reads the
//! others', per bucket group, on Redis's clock (`lua/rlqs_demand.lua`), so that every instance
//! splits a group's global limit over the same streams; and it claims the rate it assigns out of
//! what the other instances' claims leave of the limit, in the same script, so that the claims
//! never sum past the limit.
//!
//! One hash per group, `<prefix>{rlqs:<16 hex digits>}` (a hash tag no limit key has), written and
//! read in one script call per group and half reporting interval by each instance; an instance's
//! entries expire unless it writes them again, so a dead instance's streams stop counting. The
//! calls go on the readiness probe's connection, never taking a decision's in-flight slot.

use std::sync::LazyLock;
use std::time::Duration;

use floodgate::StoreError;
use redis::Script;

use crate::RedisStore;

static DEMAND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/rlqs_demand.lua")));

/// One member of a group as this instance writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberDemand<'a> {
    /// A name unique in the fleet, starting with `<instance>/`.
    pub name: &'a str,
    /// Requests per second.
    pub demand: f64,
    /// Its share by this instance's view of the fleet, requests per second: what it claims.
    pub desired: f64,
}

/// Another instance's member, as the store holds it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RemoteMember {
    /// Requests per second.
    pub demand: f64,
    /// The rate its instance claimed for it, requests per second.
    pub assigned: f64,
    /// Its share by its instance's last view, requests per second (above `assigned` while its
    /// instance waits for room).
    pub desired: f64,
}

/// What an exchange answers: the fraction of this instance's desire it was granted, and the other
/// instances' live members.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetRead {
    /// From 0 to 1: each member of this instance claimed `desired × granted`.
    pub granted: f64,
    /// The other instances' live members.
    pub others: Vec<RemoteMember>,
}

impl RedisStore {
    /// The key of a bucket group's demand hash, from a hash of its name.
    pub fn rlqs_key(&self, group: u64) -> Vec<u8> {
        let mut key = self.prefix().to_vec();
        key.extend_from_slice(format!("{{rlqs:{group:016x}}}").as_bytes());
        key
    }

    /// Writes `members` (this instance's, named `<instance>/…`) in the group hashed `group`, live
    /// for `ttl`, each claiming the same fraction of its desire out of what the other instances'
    /// live claims leave of `limit`; forgets this instance's members not among them; returns the
    /// fraction granted and the other instances' live members.
    pub async fn rlqs_demand(
        &self,
        group: u64,
        instance: &str,
        limit: f64,
        members: &[MemberDemand<'_>],
        ttl: Duration,
    ) -> Result<FleetRead, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let key = self.rlqs_key(group);
        let mut invocation = DEMAND.prepare_invoke();
        invocation.key(key.as_slice()).arg(ttl_ms).arg(instance).arg(format!("{limit}"));
        for m in members {
            invocation.arg(m.name).arg(format!("{}", m.demand)).arg(format!("{}", m.desired));
        }
        let flat: Vec<String> = self.on_probe(&invocation).await?;
        let number = |s: &str| s.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0);
        let Some((granted, rest)) = flat.split_first() else {
            return Err(malformed("answered nothing".to_owned()));
        };
        let granted =
            number(granted).filter(|g| *g <= 1.0).ok_or_else(|| malformed(format!("granted {granted:?}")))?;
        let others = rest
            .chunks_exact(3)
            .map(|m| {
                let demand = number(&m[0]).unwrap_or(0.0);
                // A claim that does not read as a rate holds the whole limit: never less than it may.
                let assigned = number(&m[1]).unwrap_or(limit);
                RemoteMember { demand, assigned, desired: number(&m[2]).unwrap_or(assigned) }
            })
            .collect();
        Ok(FleetRead { granted, others })
    }
}

/// The exchange's answer is not what the script returns.
fn malformed(what: String) -> StoreError {
    StoreError::Backend { message: format!("the RLQS exchange {what}"), transient: false, source: None }
}
