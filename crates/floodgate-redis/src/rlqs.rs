//! RLQS across a fleet: each instance writes the demand of its streams' buckets and reads the
//! others', per bucket group, on Redis's clock (`lua/rlqs_demand.lua`), so that every instance
//! splits a group's global limit over the same streams.
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
    /// The rate assigned to it, requests per second.
    pub assigned: f64,
}

impl RedisStore {
    /// The key of a bucket group's demand hash, from a hash of its name.
    pub fn rlqs_key(&self, group: u64) -> Vec<u8> {
        let mut key = self.prefix().to_vec();
        key.extend_from_slice(format!("{{rlqs:{group:016x}}}").as_bytes());
        key
    }

    /// Writes `members` (this instance's, named `<instance>/…`) in the group hashed `group`, live
    /// for `ttl`, forgets this instance's members not among them, and returns the other instances'
    /// live members as `(demand, assigned)`.
    pub async fn rlqs_demand(
        &self,
        group: u64,
        instance: &str,
        members: &[MemberDemand<'_>],
        ttl: Duration,
    ) -> Result<Vec<(f64, f64)>, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let key = self.rlqs_key(group);
        let mut invocation = DEMAND.prepare_invoke();
        invocation.key(key.as_slice()).arg(ttl_ms).arg(instance);
        for m in members {
            invocation.arg(m.name).arg(format!("{}", m.demand)).arg(format!("{}", m.assigned));
        }
        let flat: Vec<String> = self.on_probe(&invocation).await?;
        let number = |s: &str| s.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0).unwrap_or(0.0);
        Ok(flat.chunks_exact(2).map(|pair| (number(&pair[0]), number(&pair[1]))).collect())
    }
}
